/**
 * `--graph-batch`: the decode batch sizes the scheduler pads small steps to, so that a GPU
 * backend sees a few fixed graph shapes and replays the CUDA graphs it captured for them instead
 * of capturing again whenever the number of running sequences changes (vLLM's capture sizes do
 * the same). This module only checks the sizes and says how the context must be shaped; the
 * padding itself is the scheduler's (`padToGraphSize`).
 *
 * @example
 * ```ts
 * import { graphBatchLayout } from "./graph_batch.ts";
 * graphBatchLayout([8, 1, 4, 4], 32); // { sizes: [1, 4, 8], padSeqs: 7 }
 * ```
 * @module
 */

/** The ubatch size Hearth's contexts use: a padded step must fit in one. */
export const N_UBATCH = 512;

/** llama.cpp's `LLAMA_MAX_SEQ`: sequence ids a context may have. */
export const LLAMA_MAX_SEQ = 256;

/**
 * How `--graph-batch` shapes the context: sizes ascending without repeats; padding rows each go in
 * a sequence of their own after the real ones (so a padded step has as many sequences as rows,
 * one graph shape per size), which a unified KV cache makes cheap (one cell per padding row,
 * removed after the step) and lets llama.cpp take in one ubatch whatever the sequence ids.
 * Throws with the reason when the sizes cannot fit.
 *
 * @example
 * ```ts
 * graphBatchLayout([8, 1, 4, 4], 32); // { sizes: [1, 4, 8], padSeqs: 7 }
 * ```
 */
export function graphBatchLayout(
  sizes: number[],
  maxBatch: number,
  nUbatch = N_UBATCH,
): GraphBatch {
  const sorted = [...new Set(sizes)].sort((a, b) => a - b);
  if (!sorted.length || sorted[0] < 1) throw new Error("--graph-batch sizes must be >= 1");
  const largest = sorted[sorted.length - 1];
  if (largest > nUbatch) {
    throw new Error(`--graph-batch size ${largest} is larger than a ubatch (${nUbatch} rows)`);
  }
  const padSeqs = largest - 1;
  if (maxBatch + padSeqs > LLAMA_MAX_SEQ) {
    throw new Error(
      `--graph-batch up to ${largest} needs ${padSeqs} padding sequences besides --max-batch ` +
        `${maxBatch}, more than llama.cpp's ${LLAMA_MAX_SEQ}`,
    );
  }
  return { sizes: sorted, padSeqs };
}

/** Sizes ascending; padding rows use sequence ids `maxBatch .. maxBatch + padSeqs - 1`. */
export type GraphBatch = { sizes: number[]; padSeqs: number };
