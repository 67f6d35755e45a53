/**
 * One chat turn through the engine, for every dialect: the conversation is rendered and
 * tokenized, the tool-call grammar chosen (armed lazily at the family's call marker for
 * `auto`, from the first token when a call is required), and the engine's text is split into
 * reasoning, answer text and tool calls by the family's parser while it streams.
 *
 * @example
 * ```ts
 * import { chatReply, planChat } from "./generation.ts";
 * import type { Conversation } from "./conversation.ts";
 * import type { CompiledTemplate } from "./template.ts";
 * import type { Scheduler } from "../engine/scheduler.ts";
 * import { defaultSampling } from "../engine/sampling/sampling.ts";
 * declare const engine: Scheduler, template: CompiledTemplate, conv: Conversation;
 * const sampling = defaultSampling();
 * const plan = planChat(engine.model, template, conv, { sampling, stop: [], ignoreEos: false },
 *   { addGenerationPrompt: true });
 * for await (const ev of chatReply(engine.submit(plan.req), plan)) {
 *   if (ev.type === "text") console.log(ev.text);
 *   if (ev.type === "tool_call_end") console.log(ev.arguments);
 * }
 * ```
 * @module
 */
import { salvageCutCalls } from "./cut_call.ts";
import { isConstraintError } from "../constrain/mod.ts";
import type { Relaxation } from "../constrain/json_schema.ts";
import { MAX_RESAMPLES, newCallVetter, resampleRequest } from "./call_vetting.ts";
import { callGrammarFor, type ToolChecks, toolChecks } from "./tool_checks.ts";
import { checkGrammar } from "../engine/grammar/constrained.ts";
import type { EngineModel } from "../engine/model.ts";
import type { Sampling } from "../engine/sampling/sampling.ts";
import { type GenEvent, type GenRequest, isRefusal } from "../engine/scheduler.ts";
import { specialSpellings, tokenizeText } from "../engine/tokens.ts";
import {
  chatInputError,
  type Conversation,
  newCallId,
  type ReplyEvent,
  type ToolSpec,
} from "./conversation.ts";
import { detectToolFormat, type ToolFormat } from "./formats/mod.ts";
import { triggerTokenIds } from "../engine/grammar/lazy_grammar.ts";
import { endsInsideReasoning, grammarAfterReasoning, newReasoningSplitter } from "./reasoning.ts";
import { renderConversation, type RenderOptions } from "./render.ts";
import type { CompiledTemplate } from "./template.ts";

export type ChatGenOptions = {
  /** Output cap; clamped to what the context leaves (undefined: all of it). */
  maxTokens?: number;
  sampling: Sampling;
  stop: string[];
  ignoreEos: boolean;
  /** A response-format grammar (JSON Schema, json_object, ...) for the answer text. */
  grammar?: string;
  /** The wire field that asked for `grammar`, for error messages. */
  grammarParam?: string;
  logprobs?: number;
  /**
   * Reasoning tokens allowed before the family's end-of-reasoning marker is forced (Anthropic
   * `thinking.budget_tokens`, `reasoning_effort` / `reasoning.effort`); undefined: no cap.
   */
  reasoningBudget?: number;
  /** How tool `i`'s schema is named on the wire, for relaxed keywords (`tools[i]`.`parameters`). */
  toolParam?: (i: number) => string;
  schemaKey?: string;
};

/**
 * The reasoning tokens an effort level allows (`reasoning_effort`, `reasoning.effort`): `none` and
 * `minimal` close reasoning at once; `xhigh` and unknown levels leave it uncapped.
 */
export const EFFORT_BUDGETS: Readonly<Record<string, number>> = {
  none: 0,
  minimal: 0,
  low: 1024,
  medium: 4096,
  high: 16384,
};

export function effortBudget(effort: string | null | undefined): number | undefined {
  return effort == null ? undefined : EFFORT_BUDGETS[effort];
}

export type ChatPlan = {
  prompt: number[];
  /** The rendered prompt text the tokens came from. */
  text: string;
  req: GenRequest;
  format: ToolFormat;
  /** The generation prompt left a reasoning block open (the reply starts inside it). */
  reasoningOpen: boolean;
  tools: ToolSpec[];
  model: EngineModel;
  /** Markup the prompt ended in that the family's parser must read before the reply. */
  primer?: string;
  /** Text of an Anthropic-style prefill the reply continues. */
  prefill?: string;
  /**
   * What the call grammar relaxed of the tools' schemas, and the check of finished calls (absent
   * in a plan put together by hand: calls are then passed on unchecked).
   */
  checks?: ToolChecks;
  /** A call is required from the grammar's first token (a broken one is drawn again). */
  forced: boolean;
  /** The call grammar alone (without a reasoning block before it), when a call is required. */
  callGrammar?: string;
  /** Tools (by wire name) the template could not render, described in the system message. */
  unrendered?: string[];
};

const formats = new WeakMap<CompiledTemplate, ToolFormat>();

/** The tool-call family of a template, detected once per template. */
export function toolFormatOf(template: CompiledTemplate): ToolFormat {
  let f = formats.get(template);
  if (!f) {
    f = detectToolFormat(template.source);
    formats.set(template, f);
  }
  return f;
}

/**
 * Checks tool definitions: a bad name, a duplicate or a schema that is not an object is refused
 * (`param(i)` names the wire field). A valid schema is never refused for what the grammar cannot
 * hold: the call grammar relaxes it (see `tool_checks.ts`).
 */
export function checkTools(
  tools: ToolSpec[],
  param: (i: number) => string,
  schemaKey = "parameters",
): { tools: ToolSpec[]; notes: string[] } {
  const seen = new Set<string>();
  tools.forEach((t, i) => {
    if (!/^[A-Za-z0-9_.:-]{1,128}$/.test(t.name)) {
      throw chatInputError(
        `${param(i)}.name`,
        `tool name "${t.name}" must be 1-128 characters of letters, digits, _ . : -`,
      );
    }
    if (seen.has(t.name)) throw chatInputError(`${param(i)}.name`, `duplicate tool "${t.name}"`);
    seen.add(t.name);
    const s = t.parameters;
    if (typeof s !== "object" || s === null || Array.isArray(s)) {
      throw chatInputError(`${param(i)}.${schemaKey}`, "must be a JSON Schema object");
    }
  });
  return { tools, notes: [] };
}

/** Renders, tokenizes and picks the grammar; throws a ChatInputError for the client's mistakes. */
export function planChat(
  m: EngineModel,
  template: CompiledTemplate,
  conv: Conversation,
  opts: ChatGenOptions,
  render: RenderOptions & { prefill?: boolean },
): ChatPlan {
  const format = toolFormatOf(template);
  const choice = conv.toolChoice;
  if (choice.type === "tool" && !conv.tools.some((t) => t.name === choice.name)) {
    throw chatInputError("tool_choice", `names "${choice.name}", which is not among the tools`);
  }
  const active = conv.tools.length > 0 && choice.type !== "none";
  if ((choice.type === "required" || choice.type === "tool") && conv.tools.length === 0) {
    throw chatInputError("tool_choice", `"${choice.type}" needs at least one tool`);
  }
  const rendered = renderConversation(template, format, specialSpellings(m), conv, render);
  const prompt = tokenizeText(m, rendered.text, false);
  const budgetMarks = format.reasoningBudget ??
    (format.reasoning && { ...format.reasoning, force: format.reasoning.end });
  // A family whose parser reads reasoning from its own channel markup (Harmony) is told when the
  // prompt already opened that channel (a prefilled `<|channel|>analysis<|message|>`).
  const primer =
    format.reasoningBudget && endsInsideReasoning(rendered.text, format.reasoningBudget)
      ? format.reasoningBudget.start
      : undefined;
  const reasoningOpen = format.reasoning
    ? endsInsideReasoning(rendered.text, format.reasoning)
    : false;

  let grammar = opts.grammar;
  let grammarTriggers: GenRequest["grammarTriggers"];
  let callGrammar: string | undefined;
  const relaxed = new Map<number, Relaxation[]>();
  if (active) {
    if (opts.grammar !== undefined) {
      throw chatInputError(
        opts.grammarParam ?? "response_format",
        "a structured output format cannot be combined with tools; send tool_choice none " +
          "or leave the format out",
      );
    }
    const tools = choice.type === "tool"
      ? conv.tools.filter((t) => t.name === choice.name)
      : conv.tools;
    const parallel = conv.parallelToolCalls && choice.type !== "tool";
    try {
      const built = callGrammarFor(format, tools, { parallel });
      grammar = callGrammar = built.gbnf;
      for (const [i, rs] of built.relaxed) relaxed.set(conv.tools.indexOf(tools[i]), rs);
    } catch (e) {
      if (isConstraintError(e)) throw chatInputError("tools", e.message);
      throw e;
    }
    // A required call from the first token would land inside the open think block: let the
    // model close it first.
    if (choice.type !== "auto" && reasoningOpen) {
      grammar = grammarAfterReasoning(grammar, format.reasoning!);
    }
    if (choice.type === "auto") {
      grammarTriggers = {
        patterns: format.triggers.patterns,
        tokens: triggerTokenIds(m.llama, m.vocab, format.triggers.tokens),
      };
    }
  }
  if (grammar !== undefined) {
    const why = checkGrammar(m, grammar, grammarTriggers);
    if (why) {
      throw chatInputError(
        active ? "tools" : opts.grammarParam ?? "response_format",
        why,
      );
    }
  }
  const room = Math.max(1, m.nCtxSeq - prompt.length);
  const maxTokens = Math.min(opts.maxTokens ?? room, room);
  // The family's markup must reach its parsers even where the model's vocabulary makes a marker a
  // control token (printed as nothing by default), as llama.cpp's preserved tokens do.
  const printTokens = triggerTokenIds(m.llama, m.vocab, [
    ...format.triggers.tokens,
    ...(format.printMarkers ?? []),
    ...(format.reasoning ? [format.reasoning.start, format.reasoning.end] : []),
    ...(active && grammar !== undefined ? markerLiterals(grammar) : []),
  ]);
  const forced = active && choice.type !== "auto";
  return {
    prompt,
    text: rendered.text,
    format,
    reasoningOpen,
    checks: toolChecks(
      conv.tools,
      relaxed,
      opts.toolParam ?? ((i) => `tools[${i}]`),
      opts.schemaKey ?? "parameters",
    ),
    forced,
    ...(forced && callGrammar ? { callGrammar } : {}),
    ...(rendered.unrendered
      ? {
        unrendered: rendered.unrendered.map((name) =>
          (opts.toolParam ?? ((i) => `tools[${i}]`))(conv.tools.findIndex((t) => t.name === name))
        ),
      }
      : {}),
    ...(primer ? { primer } : {}),
    tools: conv.tools,
    model: m,
    prefill: rendered.prefill,
    req: {
      prompt: Int32Array.from(prompt),
      grammar,
      ...(grammarTriggers ? { grammarTriggers } : {}),
      maxTokens,
      sampling: opts.sampling,
      stop: opts.stop,
      ignoreEos: opts.ignoreEos,
      ...(opts.logprobs !== undefined ? { logprobs: opts.logprobs } : {}),
      ...(printTokens.length ? { printTokens } : {}),
      ...(opts.reasoningBudget !== undefined && budgetMarks
        ? {
          reasoningBudget: {
            tokens: opts.reasoningBudget,
            open: format.reasoningBudget ? primer !== undefined : reasoningOpen,
            start: budgetMarks.start,
            end: budgetMarks.end,
            force: tokenizeText(m, budgetMarks.force, false),
          },
        }
        : {}),
    },
  };
}

export type ChatFinish = "stop" | "length" | "tool_calls";

export type TokenLogprobs = Extract<GenEvent, { type: "logprobs" }>["entries"];

export type ChatEvent =
  | ReplyEvent
  | { type: "logprobs"; entries: TokenLogprobs }
  | {
    type: "end";
    finishReason: ChatFinish;
    /** The stop string that ended generation, when one did. */
    stopString?: string;
    promptTokens: number;
    cachedTokens: number;
    completionTokens: number;
    reasoningTokens: number;
  }
  | { type: "error"; message: string };

/** How a reply may draw a broken required call again (see `call_vetting.ts`). */
export type ReplyOptions = {
  /** Submits a request to the engine (absent: no resampling). */
  submit?: (req: GenRequest) => AsyncIterable<GenEvent>;
  /** The request `events` came from (default `plan.req`). */
  base?: GenRequest;
};

/**
 * The engine's events as a chat reply: reasoning, text and tool calls in order, then `end` (or
 * `error`). Ending the iteration early, or `signal` aborting, closes the engine's iterator,
 * which frees the sequence. Finished calls are held to their tools' schemas (`call_vetting.ts`).
 */
export async function* chatReply(
  events: AsyncIterable<GenEvent>,
  plan: ChatPlan,
  signal?: AbortSignal,
  opts: ReplyOptions = {},
): AsyncGenerator<ChatEvent> {
  let it = events[Symbol.asyncIterator]();
  const onAbort = () => void it.return?.();
  signal?.addEventListener("abort", onAbort, { once: true });
  let attempt = 0;
  let written = ""; // the engine's text in this attempt
  let keptTokens = 0; // tokens of earlier attempts the reply goes on from
  let base = opts.base ?? plan.req;
  let reasoningEnd = plan.reasoningOpen ? plan.format.reasoning?.end : undefined;
  const vetter = newCallVetter(
    plan.checks,
    () => plan.forced && opts.submit !== undefined && attempt < MAX_RESAMPLES && !signal?.aborted,
  );
  // Calls written inside reasoning are never required: a broken one is reported, not resampled.
  const thoughtVetter = newCallVetter(plan.checks, () => false);
  const reasoning = plan.format.reasoning
    ? newReasoningSplitter({ ...plan.format.reasoning, open: plan.reasoningOpen })
    : undefined;
  const parser = plan.format.newParser(plan.tools);
  if (plan.primer) parser.push(plan.primer);
  // A call the model writes inside its reasoning is still a call: reasoning goes through a parser
  // of its own, whose text stays reasoning. Both parsers number calls from 0, hence `numbered`.
  let thoughts = reasoning ? plan.format.newParser(plan.tools) : undefined;
  let thinking = false; // `thoughts` has been given text since it was last flushed
  let nextIndex = 0;
  const numbered = (local = new Map<number, number>()) =>
    function* (evs: Iterable<ReplyEvent>, asReasoning: boolean): Generator<ReplyEvent> {
      for (const ev of evs) {
        if (ev.type === "text") {
          if (!asReasoning) yield ev;
          else {
            reasoningText += ev.text;
            yield { type: "reasoning", text: ev.text };
          }
        } else if (
          ev.type === "tool_call_start" || ev.type === "tool_call_args" ||
          ev.type === "tool_call_end"
        ) {
          if (ev.type === "tool_call_start") local.set(ev.index, nextIndex++);
          yield { ...ev, index: local.get(ev.index) ?? ev.index };
        } else yield ev;
      }
    };
  const fromText = numbered();
  let fromThoughts = numbered();
  let calls = 0;
  let reasoningText = "";
  function* route(pieces: ({ type: "reasoning" | "text"; text: string })[]) {
    for (const p of pieces) {
      if (p.type === "reasoning") {
        thinking = true;
        yield* fromThoughts(thoughtVetter.vet(thoughts!.push(p.text)), true);
        continue;
      }
      if (thinking) {
        // The reasoning has ended: what its parser holds (a possible marker) is reasoning, and
        // comes before the answer.
        yield* fromThoughts(thoughtVetter.vet(thoughts!.end()), true);
        thoughts = plan.format.newParser(plan.tools);
        fromThoughts = numbered();
        thinking = false;
      }
      yield* fromText(vetter.vet(parser.push(p.text)), false);
    }
  }
  function* count(evs: Iterable<ReplyEvent>) {
    for (const ev of evs) {
      if (ev.type === "tool_call_end") calls++;
      yield ev;
    }
  }
  /** Draws the required call again when the vetter asked for it; false when it did not. */
  const resampled = async (): Promise<boolean> => {
    const why = vetter.takeResample();
    if (!why) return false;
    await it.return?.();
    attempt++;
    console.error(
      `hearth: a required call broke its schema (${why}); drawing it again (${attempt})`,
    );
    const { req, prefixTokens } = resampleRequest(plan.model, base, {
      written,
      reasoningEnd,
      callGrammar: plan.callGrammar,
      attempt,
    });
    if (prefixTokens) {
      // Later draws go on from the same point: the reasoning is in their prompt now.
      keptTokens = prefixTokens;
      base = { ...req, sampling: base.sampling };
      reasoningEnd = undefined;
    }
    written = "";
    it = opts.submit!(req)[Symbol.asyncIterator]();
    return true;
  };
  try {
    while (!signal?.aborted) {
      const r = await it.next();
      if (r.done || signal?.aborted) break;
      const ev = r.value;
      if (ev.type === "text") {
        written += ev.text;
        const pieces = reasoning
          ? reasoning.push(ev.text)
          : [{ type: "text" as const, text: ev.text }];
        yield* count(route(pieces));
        await resampled();
      } else if (ev.type === "logprobs") {
        yield { type: "logprobs", entries: ev.entries };
      } else if (ev.type === "done") {
        if (reasoning) yield* count(route(reasoning.end()));
        if (await resampled()) continue;
        if (thoughts) yield* count(fromThoughts(thoughtVetter.vet(thoughts.end()), true));
        const tail = parser.end();
        yield* count(
          // A call the limit cut short is the cut call it was (finish_reason says so), not drawn
          // again: a new draw would meet the same limit.
          fromText(
            ev.finishReason === "length" ? cutCallEvents(tail, plan) : vetter.vet(tail),
            false,
          ),
        );
        if (await resampled()) continue;
        yield {
          type: "end",
          // A reply cut by the limit says so even when it holds calls: the last may be partial.
          finishReason: ev.finishReason === "length"
            ? "length"
            : calls > 0
            ? "tool_calls"
            : ev.finishReason,
          ...(ev.stopString !== undefined ? { stopString: ev.stopString } : {}),
          // A resampled reply counts as the one the client got: the prompt it was asked for.
          promptTokens: ev.promptTokens - keptTokens,
          cachedTokens: Math.min(ev.cachedTokens, ev.promptTokens - keptTokens),
          completionTokens: ev.completionTokens + keptTokens,
          reasoningTokens: reasoningText
            ? tokenizeText(plan.model, reasoningText, false).length
            : 0,
        };
        return;
      } else if (ev.type === "error") {
        yield { type: "error", message: ev.message };
        return;
      }
    }
    if (!signal?.aborted) yield { type: "error", message: "generation ended without a result" };
  } finally {
    signal?.removeEventListener("abort", onAbort);
    await it.return?.();
  }
}

/** Literals of a call grammar that look like markup (`<...>`, `[...]`): the family's markers. */
export function markerLiterals(gbnf: string): string[] {
  const out = new Set<string>();
  for (const m of gbnf.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    const text = m[1].replace(
      /\\(.)/g,
      (_, c: string) => c === "n" ? "\n" : c === "t" ? "\t" : c === "r" ? "\r" : c,
    );
    if (text.length <= 48 && /^(<[^<>]+>|\[[^\[\]]+\])$/.test(text)) out.add(text);
  }
  return [...out];
}

/**
 * The parser's last events of a reply cut by the token limit: call markup it still held (a call
 * being written, calls it had not finished) becomes calls, the cut one with its arguments closed,
 * rather than markup in the answer text.
 */
function cutCallEvents(evs: ReplyEvent[], plan: ChatPlan): ReplyEvent[] {
  const text = evs.flatMap((e) => (e.type === "text" ? [e.text] : [])).join("");
  const salvaged = text ? salvageCutCalls(text, plan.format, plan.tools) : undefined;
  if (!salvaged) return evs;
  const out: ReplyEvent[] = salvaged.text ? [{ type: "text", text: salvaged.text }] : [];
  out.push(...evs.filter((e) => e.type !== "text"));
  // Indexes of the parser's own numbering are remapped by the caller; these are past them all.
  salvaged.calls.forEach((c, k) => {
    const index = CUT_CALL_INDEX + k;
    out.push(
      { type: "tool_call_start", index, id: newCallId(), name: c.name },
      { type: "tool_call_args", index, text: c.arguments },
      { type: "tool_call_end", index, arguments: c.arguments },
    );
  });
  return out;
}

const CUT_CALL_INDEX = 1 << 20;

/** A whole reply gathered from its events (for non-streaming responses). */
export type CollectedReply = {
  reasoning: string;
  text: string;
  calls: { id: string; name: string; arguments: string }[];
  logprobs: TokenLogprobs;
  end?: Extract<ChatEvent, { type: "end" }>;
  error?: string;
};

export async function collectReply(events: AsyncIterable<ChatEvent>): Promise<CollectedReply> {
  const out: CollectedReply = { reasoning: "", text: "", calls: [], logprobs: [] };
  const open = new Map<number, { id: string; name: string; arguments: string }>();
  for await (const ev of events) {
    switch (ev.type) {
      case "reasoning":
        out.reasoning += ev.text;
        break;
      case "text":
        out.text += ev.text;
        break;
      case "tool_call_start":
        open.set(ev.index, { id: ev.id, name: ev.name, arguments: "" });
        break;
      case "tool_call_end": {
        const c = open.get(ev.index);
        if (c) out.calls.push({ ...c, arguments: ev.arguments });
        break;
      }
      case "logprobs":
        out.logprobs.push(...ev.entries);
        break;
      case "end":
        out.end = ev;
        break;
      case "error":
        out.error = ev.message;
        break;
    }
  }
  return out;
}

/**
 * One more round of a reply on a grown conversation (the server-side tool loop): planned and
 * submitted like the first, with any refusal (the context is full, the queue is) as an `error`
 * event rather than a throw, since the response has already begun.
 */
export async function* chatRound(
  submit: (req: GenRequest) => AsyncIterable<GenEvent>,
  m: EngineModel,
  template: CompiledTemplate,
  conv: Conversation,
  opts: ChatGenOptions,
  render: RenderOptions & { prefill?: boolean },
  signal?: AbortSignal,
): AsyncGenerator<ChatEvent> {
  let plan: ChatPlan;
  let events: AsyncIterable<GenEvent>;
  try {
    plan = planChat(m, template, conv, opts, render);
    events = submit({ ...plan.req, signal });
  } catch (e) {
    // The conversation outgrew the context: the reply ends there, as at the token limit.
    if (isRefusal(e) && e.kind === "too_long") {
      yield {
        type: "end",
        finishReason: "length",
        promptTokens: 0,
        cachedTokens: 0,
        completionTokens: 0,
        reasoningTokens: 0,
      };
      return;
    }
    yield { type: "error", message: (e as Error).message };
    return;
  }
  yield* chatReply(events, plan, signal, { submit: (req) => submit({ ...req, signal }) });
}
