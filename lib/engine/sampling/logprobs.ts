/**
 * Log-probabilities from one row of raw logits: the log-softmax of a chosen token and the `n`
 * most likely alternatives. Pure and allocation-light (two passes over the vocabulary plus a
 * partial selection into an `n`-sized sorted buffer, never a full sort), because it runs once per
 * generated token, and once per prompt token for prompt logprobs, when a request asks for them.
 *
 * @example
 * ```ts
 * import { logSoftmaxTop } from "./logprobs.ts";
 * const r = logSoftmaxTop(new Float32Array([1, 3, 2]), 2, 2);
 * r.logprob; // log(e^2 / (e^1 + e^3 + e^2)) ≈ -1.4076
 * r.top; // [{ token: 1, logprob: -0.4076 }, { token: 2, logprob: -1.4076 }]
 * ```
 * @module
 */

/** Engine-facing shapes (the scheduler fills them; `lib/chat` turns them into wire formats). */
/** One alternative at a position: its piece (special tokens spelled) and raw-logit logprob. */
export type TopTokenLogprob = {
  token: number;
  /** The piece as text; a partial UTF-8 sequence shows as U+FFFD (see `bytes`). */
  text: string;
  /** The piece's raw bytes. */
  bytes: number[];
  /** Log-softmax of the model's raw logits (before penalties, temperature, grammar). */
  logprob: number;
};

/** A token at a position, with the `n` most likely tokens there (most likely first). */
export type TokenLogprob = TopTokenLogprob & { top: TopTokenLogprob[] };

export type TopLogprob = { token: number; logprob: number };

export type LogSoftmaxTop = {
  /** Log-probability of `token`. */
  logprob: number;
  /** The `n` most likely tokens, most likely first; ties keep the lower token id first. */
  top: TopLogprob[];
};

// exp(-60) * 2^20 tokens is ~1e-20 of the largest term: below float64 resolution of the sum.
const NEGLIGIBLE = -60;

/** Log-softmax of `logits` at `token`, with the `n` (>= 0) most likely tokens. */
export function logSoftmaxTop(logits: Float32Array, token: number, n: number): LogSoftmaxTop {
  const nv = logits.length;
  const k = Math.max(0, Math.min(n, nv));
  // Pass 1: the maximum (for a stable exp) and the top-k by insertion into a sorted buffer. The
  // buffer only changes when a logit beats its current last entry, which is rare after the
  // first few thousand tokens, so this stays close to a plain scan.
  const ids = new Int32Array(k);
  const vals = new Float64Array(k);
  let filled = 0;
  let max = -Infinity;
  for (let i = 0; i < nv; i++) {
    const v = logits[i];
    if (v > max) max = v;
    if (k === 0 || (filled === k && !(v > vals[k - 1]))) continue;
    if (v !== v) continue; // NaN never ranks
    let j = filled < k ? filled++ : k - 1;
    while (j > 0 && vals[j - 1] < v) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
      j--;
    }
    vals[j] = v;
    ids[j] = i;
  }
  // Pass 2: log-sum-exp in float64.
  let sum = 0;
  for (let i = 0; i < nv; i++) {
    const d = logits[i] - max;
    if (d > NEGLIGIBLE) sum += Math.exp(d);
  }
  const lse = max + Math.log(sum);
  const top: TopLogprob[] = new Array(filled);
  for (let j = 0; j < filled; j++) top[j] = { token: ids[j], logprob: vals[j] - lse };
  return { logprob: logits[token] - lse, top };
}
