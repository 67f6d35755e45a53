/**
 * Prompt-lookup drafting for speculative decoding: the tokens that followed the most recent
 * earlier occurrence of the sequence's last n tokens (n from `maxN` down to `minN`) are proposed
 * as the next ones. Free to compute and right surprisingly often where output repeats its input:
 * code edits, quoting, structured data, summaries.
 *
 * @example
 * ```ts
 * import { lookupDraft } from "./lookup.ts";
 * lookupDraft([5, 6, 7, 8, 9, 5, 6, 7], 3); // [8, 9, 5]
 * ```
 * @module
 */

/** How far back a match is searched, in tokens (keeps a long context's step cost bounded). */
export const LOOKUP_WINDOW = 8192;

/** Up to `k` draft tokens for `history` (prompt and output so far, last token included). */
export function lookupDraft(history: ArrayLike<number>, k: number, minN = 2, maxN = 4): number[] {
  const len = history.length;
  if (k <= 0 || len < minN + 1) return [];
  const from = Math.max(0, len - LOOKUP_WINDOW);
  for (let n = Math.min(maxN, len - 1); n >= minN; n--) {
    // The latest earlier start i with history[i..i+n) equal to the last n tokens.
    for (let i = len - n - 1; i >= from; i--) {
      let j = 0;
      while (j < n && history[i + j] === history[len - n + j]) j++;
      if (j < n) continue;
      const out: number[] = [];
      for (let t = i + n; t < len && out.length < k; t++) out.push(history[t]);
      if (out.length) return out;
    }
  }
  return [];
}
