/**
 * Finished tool calls held to their tools' whole schemas before they reach a client. A call the
 * grammar required (`tool_choice` required, any or a named tool) that breaks what the grammar
 * relaxed is drawn again: the reply goes on from where the call began (after any reasoning
 * already streamed), with another seed, up to {@link MAX_RESAMPLES} times. A call that still
 * breaks its schema, or one written freely (`auto`, where the grammar only arms at the call's
 * marker, or inside reasoning), is not passed on as a call: it comes back as text saying what
 * the model wrote and why it is not a call, as llama-server returns a call it cannot parse.
 *
 * @example
 * ```ts
 * import { newCallVetter } from "./call_vetting.ts";
 * declare const checks: import("./tool_checks.ts").ToolChecks;
 * const v = newCallVetter(checks, () => false);
 * v.vet([
 *   { type: "tool_call_start", index: 0, id: "call_1", name: "tag" },
 *   { type: "tool_call_args", index: 0, text: '{"tags":["a","a"]}' },
 *   { type: "tool_call_end", index: 0, arguments: '{"tags":["a","a"]}' },
 * ]); // [{ type: "text", text: "(not a valid call of tag: ...)" }] when the check fails
 * ```
 * @module
 */
import type { GenRequest } from "../engine/scheduler.ts";
import { tokenizeText } from "../engine/tokens.ts";
import type { ReplyEvent } from "./conversation.ts";
import type { ToolChecks } from "./tool_checks.ts";
import type { EngineModel } from "../engine/model.ts";

/** Fresh draws of a required call before a broken one is reported. */
export const MAX_RESAMPLES = 3;

export type CallVetter = {
  /** The parser's events with broken calls taken out (to resample) or turned into text. */
  vet(evs: ReplyEvent[]): ReplyEvent[];
  /** Why the last vetting asked for a resample (undefined: it did not); clears it. */
  takeResample(): string | undefined;
};

/** The text a broken call becomes: what was written, and why it is not a call. */
export function brokenCallText(name: string, args: string, why: string): string {
  let value: unknown = args;
  try {
    value = JSON.parse(args);
  } catch {
    // Not JSON: shown as the text it is.
  }
  return `(not a valid call of ${name}: ${why}) ${JSON.stringify({ name, arguments: value })}`;
}

export function newCallVetter(
  checks: ToolChecks | undefined,
  canResample: () => boolean,
): CallVetter {
  let resample: string | undefined;
  return {
    vet(evs) {
      const out: ReplyEvent[] = [];
      const held = new Map<number, ReplyEvent[]>();
      for (const ev of evs) {
        if (ev.type === "tool_call_start" || ev.type === "tool_call_args") {
          held.set(ev.index, [...(held.get(ev.index) ?? []), ev]);
          continue;
        }
        if (ev.type !== "tool_call_end") {
          out.push(ev);
          continue;
        }
        const parts = held.get(ev.index) ?? [];
        held.delete(ev.index);
        const start = parts.find((e) => e.type === "tool_call_start");
        const why = start?.type === "tool_call_start"
          ? checks?.validate(start.name, ev.arguments)
          : undefined;
        if (!why || start?.type !== "tool_call_start") {
          out.push(...parts, ev);
          continue;
        }
        if (canResample()) {
          resample ??= `${start.name}: ${why}`;
          continue;
        }
        console.error(
          `hearth: a call of ${start.name} breaks its schema (${why}): returned as text`,
        );
        out.push({ type: "text", text: brokenCallText(start.name, ev.arguments, why) });
      }
      // A call whose end is still to come passes as it is.
      for (const parts of held.values()) out.push(...parts);
      return out;
    },
    takeResample() {
      const why = resample;
      resample = undefined;
      return why;
    },
  };
}

/**
 * The request that draws a required call again: the prompt grown by what the model wrote before
 * the call (its reasoning, already streamed), the call grammar from the first token, and another
 * seed (greedy decoding samples, or it would write the same call).
 */
export function resampleRequest(
  m: EngineModel,
  base: GenRequest,
  opts: { written: string; reasoningEnd?: string; callGrammar?: string; attempt: number },
): { req: GenRequest; prefixTokens: number } {
  let prefix = "";
  if (opts.reasoningEnd) {
    const at = opts.written.indexOf(opts.reasoningEnd);
    if (at >= 0) prefix = opts.written.slice(0, at + opts.reasoningEnd.length);
  }
  const extra = prefix ? tokenizeText(m, prefix, false) : [];
  const prompt = new Int32Array(base.prompt.length + extra.length);
  prompt.set(base.prompt);
  prompt.set(extra, base.prompt.length);
  const s = base.sampling;
  const req: GenRequest = {
    ...base,
    prompt,
    maxTokens: Math.max(1, base.maxTokens - extra.length),
    sampling: {
      ...s,
      temperature: s.temperature > 0 ? s.temperature : 1,
      seed: (s.seed + opts.attempt * 0x9e3779b1) >>> 0,
    },
  };
  if (prefix) {
    req.grammar = opts.callGrammar ?? base.grammar;
    delete req.reasoningBudget;
  }
  return { req, prefixTokens: extra.length };
}
