/**
 * One chat turn, the same for every dialect (Chat Completions, Responses, Anthropic Messages, and
 * the `/tokenize {messages}` count): the dialect maps its request to a {@link Conversation}; the
 * turn attaches the MCP servers the request names, checks the tools, renders and plans the prompt,
 * submits one engine job per choice, and runs the server-side tool loop when Hearth executes
 * tools itself. Failures come back as a {@link TurnError}, a neutral form each route shapes in its
 * own API's error format; nothing here knows about HTTP.
 *
 * @example
 * ```ts
 * import { planTurn, startTurn } from "./turn.ts";
 * import { defaultSampling } from "../engine/sampling/sampling.ts";
 * declare const deps: import("./turn.ts").TurnDeps;
 * declare const conv: import("./conversation.ts").Conversation;
 * const planned = await planTurn(deps, {
 *   conv,
 *   toolChoiceGiven: false,
 *   toolParam: (i) => `tools[${i}].function`,
 *   promptParam: "messages",
 *   gen: { sampling: defaultSampling(), stop: [], ignoreEos: false },
 *   render: { addGenerationPrompt: true },
 * });
 * if (planned.ok) {
 *   const started = startTurn(planned.value, {});
 *   if (started.ok) for await (const ev of started.value.replies[0]) console.log(ev.type);
 * }
 * ```
 * @module
 */
import type { EngineModel } from "../engine/model.ts";
import type { Sampling } from "../engine/sampling/sampling.ts";
import { type GenEvent, type GenRequest, isRefusal } from "../engine/scheduler.ts";
import type { McpRegistry } from "../mcp/registry.ts";
import { type Conversation, isChatInputError } from "./conversation.ts";
import {
  type ChatEvent,
  type ChatGenOptions,
  type ChatPlan,
  chatReply,
  chatRound,
  checkTools,
  planChat,
} from "./generation.ts";
import {
  attachMcp,
  isMcpAttachError,
  MAX_TOOL_ROUNDS,
  type McpAttachment,
  withServerTools,
} from "./mcp_attach.ts";
import type { RenderOptions } from "./render.ts";
import type { CompiledTemplate } from "./template.ts";
import { chatWithServerTools, type LoopEvent, type ServerTools } from "./tool_loop.ts";

/** What a turn needs from the running server; absent parts are the server's state, not errors. */
export type TurnDeps = {
  /** The scheduler (undefined while the model loads). */
  engine?: { model: EngineModel; submit(req: GenRequest): AsyncIterable<GenEvent> };
  /** The chat template (undefined when the model has none). */
  template?: CompiledTemplate;
  /** MCP servers of `--mcp-config`, whose tools a request may attach. */
  mcp?: McpRegistry;
};

/**
 * Why a turn did not start, in no API's shape: `invalid_request` is the client's mistake (a 400,
 * naming `param` when known), `overloaded` a full queue (retry shortly), `loading` a model not
 * loaded yet, `no_template` a model without a chat template.
 */
export type TurnError = {
  kind: "invalid_request" | "context_length_exceeded" | "overloaded" | "loading" | "no_template";
  message: string;
  param?: string;
  /** For `context_length_exceeded`: the prompt's tokens and the context per sequence. */
  promptTokens?: number;
  contextTokens?: number;
};

export type TurnResult<T> = { ok: true; value: T } | { ok: false; error: TurnError };

export type TurnRequest = {
  /** The dialect's mapping of the request: messages, client tools, tool choice. */
  conv: Conversation;
  /** Fields the mapping left out, for `x-hearth-ignored-fields`. */
  ignored?: string[];
  /** MCP servers the request attaches (Chat/Responses `tools: [{type: "mcp"}]`, `mcp_servers`). */
  mcp?: McpAttachment[];
  /** Whether the client sent a tool choice (without one, attached tools are offered as `auto`). */
  toolChoiceGiven: boolean;
  /** The wire field of tool `i`, for errors. */
  toolParam: (i: number) => string;
  /** Where a tool's schema sits on the wire (`parameters`, Anthropic's `input_schema`). */
  schemaKey?: string;
  /** The wire field a prompt-level refusal names (`messages`, `input`). */
  promptParam?: string;
  gen: ChatGenOptions;
  render: RenderOptions & { prefill?: boolean };
  /** Choices to generate from the one prompt (Chat Completions `n`). */
  choices?: number;
};

/** A planned turn: the first round's prompt and grammar, ready to start. */
export type ChatTurn = {
  plan: ChatPlan;
  /** Ignored-field notes: the dialect's, relaxed schema keywords, unavailable MCP servers. */
  notes: string[];
  /** Tools Hearth runs itself in this turn (absent: no MCP server attached). */
  serverTools?: ServerTools;
  conv: Conversation;
  request: TurnRequest;
  engine: NonNullable<TurnDeps["engine"]>;
  template: CompiledTemplate;
};

/** A started turn: one event stream per choice, and the way to stop them all. */
export type StartedTurn = { replies: AsyncGenerator<LoopEvent>[]; cancel: () => void };

/** Client mistakes and engine refusals as a {@link TurnError}; anything else is rethrown. */
export function turnError(e: unknown, promptParam?: string): TurnError {
  if (isChatInputError(e) || isMcpAttachError(e)) {
    return { kind: "invalid_request", message: e.message, param: e.param };
  }
  if (isRefusal(e)) {
    if (e.kind === "too_long" && e.promptTokens !== undefined) {
      return {
        kind: "context_length_exceeded",
        message: e.message,
        param: promptParam,
        promptTokens: e.promptTokens,
        contextTokens: e.contextTokens,
      };
    }
    return e.kind === "busy"
      ? { kind: "overloaded", message: e.message }
      : { kind: "invalid_request", message: e.message, param: promptParam };
  }
  throw e;
}

/** Whether a turn can run at all (a model loaded, with a chat template); the reason if not. */
export function turnReady(deps: TurnDeps): TurnError | undefined {
  if (!deps.engine) return { kind: "loading", message: "the model is still loading" };
  if (!deps.template) {
    return { kind: "no_template", message: "the served model has no chat template" };
  }
  return undefined;
}

/**
 * Attaches the request's MCP servers, checks its tools and plans the first round. Everything a
 * client can get wrong is found here, before any response has begun.
 */
export async function planTurn(deps: TurnDeps, req: TurnRequest): Promise<TurnResult<ChatTurn>> {
  const notReady = turnReady(deps);
  if (notReady) return { ok: false, error: notReady };
  await mcpSettled(deps.mcp, req.mcp ?? []);
  const engine = deps.engine!;
  const template = deps.template!;
  const attach = req.mcp ?? [];
  if (attach.length && (req.choices ?? 1) > 1) {
    return fail("invalid_request", "`n` above 1 cannot be combined with MCP tools", "n");
  }
  const notes: string[] = [];
  const conv = req.conv;
  try {
    let serverTools: ServerTools | undefined;
    if (attach.length) {
      const attached = attachMcp(deps.mcp, attach);
      notes.push(...attached.notes);
      serverTools = attached.tools;
      const hadTools = conv.tools.length > 0;
      conv.tools = withServerTools(conv.tools, serverTools, "tools");
      // Attached tools are there to be used: with nothing else offered and no choice made, `auto`.
      if (!hadTools && !req.toolChoiceGiven && serverTools.specs.length) {
        conv.toolChoice = { type: "auto" };
      }
    }
    const checked = checkTools(conv.tools, req.toolParam, req.schemaKey);
    conv.tools = checked.tools;
    notes.push(...(req.ignored ?? []), ...checked.notes, ...imageNotes(conv));
    const down = unavailableServers(deps.mcp, attach, serverTools);
    if (down && conv.toolChoice.type !== "none" && conv.toolChoice.type !== "auto") {
      // A forced call with nothing to call would otherwise read "needs at least one tool".
      if (conv.tools.length === 0) {
        return fail("invalid_request", `${down.param}: ${down.why}`, down.param);
      }
    }
    const plan = planChat(engine.model, template, conv, {
      ...req.gen,
      toolParam: req.toolParam,
      schemaKey: req.schemaKey ?? "parameters",
    }, req.render);
    for (const t of plan.unrendered ?? []) {
      notes.push(`${t} (the chat template cannot render it: described in the system message)`);
    }
    return { ok: true, value: { plan, notes, serverTools, conv, request: req, engine, template } };
  } catch (e) {
    return { ok: false, error: turnError(e, req.promptParam) };
  }
}

/**
 * Submits the turn's choices. A refusal (a full queue) fails the whole turn and frees what was
 * already submitted. Aborting `signal`, or `cancel()`, frees every sequence within a decode step.
 */
export function startTurn(
  turn: ChatTurn,
  opts: { signal?: AbortSignal; sampling?: (choice: number) => Sampling },
): TurnResult<StartedTurn> {
  const aborter = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, aborter.signal]) : aborter.signal;
  const cancel = () => aborter.abort();
  const replies: AsyncGenerator<LoopEvent>[] = [];
  try {
    for (let k = 0; k < (turn.request.choices ?? 1); k++) {
      const sampling = opts.sampling?.(k) ?? turn.plan.req.sampling;
      const base = { ...turn.plan.req, sampling };
      const submit = (req: GenRequest) => turn.engine.submit({ ...req, signal });
      const first = chatReply(submit(base), turn.plan, signal, { submit, base });
      replies.push(turn.serverTools ? toolLoop(turn, turn.serverTools, first, signal) : first);
    }
  } catch (e) {
    cancel();
    return { ok: false, error: turnError(e, turn.request.promptParam) };
  }
  return { ok: true, value: { replies, cancel } };
}

/** The loop over rounds: the first already submitted, later ones planned on the grown thread. */
function toolLoop(
  turn: ChatTurn,
  tools: ServerTools,
  first: AsyncGenerator<ChatEvent>,
  signal: AbortSignal,
): AsyncGenerator<LoopEvent> {
  const { engine, template, request } = turn;
  return chatWithServerTools(
    (conv, round) =>
      round === 0 ? first : chatRound(
        (req) => engine.submit(req),
        engine.model,
        template,
        conv,
        request.gen,
        // A prefilled assistant turn belongs to the first round only.
        { ...request.render, prefill: false },
        signal,
      ),
    turn.conv,
    tools,
    { maxRounds: MAX_TOOL_ROUNDS, signal },
  );
}

/**
 * How long a request waits for an attached MCP server that is still connecting (at start-up, or
 * after it dropped): long enough for a stdio server to start, short of a client's patience.
 */
export const MCP_WAIT_MS = 10_000;

/** Waits (bounded) until no attached server is connecting. */
async function mcpSettled(registry: McpRegistry | undefined, attach: McpAttachment[]) {
  if (!registry || attach.length === 0) return;
  const pending = () =>
    registry.states().some((s) =>
      attach.some((a) => a.server === s.name) &&
      (s.status === "connecting" || s.status === "reconnecting")
    );
  if (!pending()) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<void>((r) => timer = setTimeout(r, MCP_WAIT_MS));
  // `ready()` settles once every server connected or failed once; poll for a reconnection.
  const poll = (async () => {
    while (pending()) await new Promise((r) => setTimeout(r, 100));
  })();
  await Promise.race([Promise.all([registry.ready(), poll]), deadline]);
  clearTimeout(timer);
}

/** The first attached server that brought no tools, and its state, for a clear refusal. */
function unavailableServers(
  registry: McpRegistry | undefined,
  attach: McpAttachment[],
  tools: ServerTools | undefined,
): { param: string; why: string } | undefined {
  for (const a of attach) {
    if (tools?.specs.some((t) => tools.owner(t.name)?.server === a.server)) continue;
    const state = registry?.states().find((s) => s.name === a.server);
    if (!state) continue;
    return {
      param: a.param,
      why: `MCP server "${a.server}" is ${state.status}${
        state.error ? `: ${state.error}` : ""
      }, so it has no tools to call`,
    };
  }
  return undefined;
}

/** Images become a placeholder in the prompt (see `ImagePart`); each is named as ignored. */
function imageNotes(conv: Conversation): string[] {
  return conv.turns.flatMap((t) =>
    t.parts.flatMap((p) =>
      p.type === "image" ? [`${p.source} (image: the model reads text only)`] : []
    )
  );
}

function fail(kind: TurnError["kind"], message: string, param?: string): TurnResult<never> {
  return { ok: false, error: { kind, message, ...(param ? { param } : {}) } };
}
