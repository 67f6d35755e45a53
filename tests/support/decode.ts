/**
 * One sequence's tokens through `llama_decode` in one batch, for tests that read logits or
 * embeddings straight from a context they set up themselves.
 *
 * @example
 * ```ts
 * import { decodeOneSequence } from "./decode.ts";
 * assert.equal(await decodeOneSequence(llama, ctx, [128000, 9906]), 0);
 * ```
 * @module
 */
import { type ContextPtr, decode, type Llama, newBatch, setBatchSize } from "../../ffi/mod.ts";

/**
 * Decodes `tokens` as sequence 0 from position `pos0`, with output for every row (or only the
 * last with `allOutputs: false`); returns `llama_decode`'s status.
 */
export function decodeOneSequence(
  llama: Llama,
  ctx: ContextPtr,
  tokens: ArrayLike<number>,
  { pos0 = 0, allOutputs = true }: { pos0?: number; allOutputs?: boolean } = {},
): Promise<number> {
  const b = newBatch(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    b.token[i] = tokens[i];
    b.pos[i] = pos0 + i;
    b.seqId[i] = 0;
    b.logits[i] = allOutputs || i === tokens.length - 1 ? 1 : 0;
  }
  setBatchSize(b, tokens.length);
  return decode(llama, ctx, b);
}
