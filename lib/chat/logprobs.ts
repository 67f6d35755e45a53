/**
 * Token logprobs from the engine in OpenAI's two wire shapes: Chat Completions
 * (`{content: [{token, logprob, bytes, top_logprobs}]}`) and legacy Completions
 * (`{tokens, token_logprobs, top_logprobs, text_offset}`, as lm-evaluation-harness reads them,
 * prompt tokens first when `echo` asked for them, the first with a null logprob).
 *
 * @example
 * ```ts
 * import { chatLogprobs, completionLogprobs } from "./logprobs.ts";
 * chatLogprobs([{ token: 9906, text: "Hello", bytes: [72, 101, 108, 108, 111], logprob: -0.1,
 *   top: [] }]);
 * ```
 * @module
 */
import type { TokenLogprob } from "../engine/sampling/logprobs.ts";

export type { TokenLogprob };

/** A prompt token OpenAI reports without a logprob (the first one: nothing precedes it). */
export type BareToken = { token: number; text: string; bytes: number[]; logprob: null; top: null };

export function chatLogprobs(entries: TokenLogprob[]): {
  content: unknown[];
  refusal: null;
} {
  return {
    content: entries.map((e) => ({
      token: e.text,
      logprob: e.logprob,
      bytes: e.bytes,
      top_logprobs: e.top.map((t) => ({ token: t.text, logprob: t.logprob, bytes: t.bytes })),
    })),
    refusal: null,
  };
}

export function completionLogprobs(entries: (TokenLogprob | BareToken)[]): {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
} {
  let offset = 0;
  const text_offset: number[] = [];
  for (const e of entries) {
    text_offset.push(offset);
    offset += e.text.length;
  }
  return {
    tokens: entries.map((e) => e.text),
    token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) =>
      e.top === null ? null : Object.fromEntries(e.top.map((t) => [t.text, t.logprob]))
    ),
    text_offset,
  };
}
