/**
 * Random-weight models never stop: their end-of-turn token is one of 128k and comes up about
 * once in 100k steps, so every reply runs into the output limit. Agents (Claude Code, Codex)
 * treat a reply cut by the limit as a failure, so end-to-end tests need a model that ends its
 * turns. This gives one, still with random weights, by a small piece of wiring:
 *
 * - every token embedding gets the same constant in dimension 0, and the layers' output
 *   projections (`attn_output`, `ffn_down`) never write dimension 0, so the residual stream
 *   carries that constant to the final norm, where it is always positive;
 * - the embeddings are tied, so a token's logit is its embedding dotted with the final hidden
 *   state: the shared constant shifts every logit equally (no effect on sampling), while the
 *   end-of-turn tokens get a larger value in dimension 0, which lifts their logit by an amount
 *   that `replyLength` sets.
 *
 * At temperature 1 a reply ends after about `replyLength` tokens (geometrically distributed);
 * greedy decoding picks the lifted token at once. Meant for the F32 `tiny` preset: in Q8_0 the
 * large constant would take the precision of its block.
 *
 * @example
 * ```ts
 * import { makeModel } from "./presets.ts";
 * await makeModel({ preset: "tiny", out: "/tmp/ends.gguf", replyLength: 40 });
 * ```
 * @module
 */
import type { PlannedTensor } from "./presets.ts";
import { type GgufKv, GgufType } from "./types.ts";

/**
 * The constant every embedding carries in dimension 0. It is large next to the rest of the
 * residual stream, so after the final RMS norm dimension 0 is almost exactly `sqrt(nEmbd)` and
 * the other dimensions are small: logits then sit close together (the model writes near-uniform
 * noise) and the end-of-turn lift alone sets how often a turn ends, whatever the context.
 */
const CARRIER = 1000;

/** Ids of the tokens that end a turn: EOS and EOT of the tokenizer metadata. */
export function endOfTurnIds(metadata: Map<string, GgufKv>): number[] {
  const ids = new Set<number>();
  for (const key of ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]) {
    const kv = metadata.get(key);
    if (kv && kv.type === GgufType.UINT32) ids.add(kv.value as number);
  }
  if (!ids.size) throw new Error("the model has no end-of-turn token to lift");
  return [...ids];
}

/**
 * Dimension 0 of the end-of-turn embeddings. With near-uniform logits over `nVocab` tokens, a
 * turn ends at each step with probability `k·e^Δ / (nVocab + k·e^Δ)` for `k` end-of-turn tokens
 * lifted by `Δ`; a mean length of `replyLength` tokens asks `e^Δ = nVocab / (k·(replyLength-1))`,
 * and `Δ` is the extra value times `sqrt(nEmbd)` (dimension 0 after the final norm).
 */
export function liftFor(replyLength: number, nEmbd: number, nVocab: number, k: number): number {
  if (!(replyLength >= 2 && replyLength <= 100_000)) {
    throw new Error(`reply length ${replyLength}: must be between 2 and 100000 tokens`);
  }
  const delta = Math.log(nVocab / (k * (replyLength - 1)));
  return CARRIER + delta / Math.sqrt(nEmbd);
}

/** Adds the edits to a planned tiny/small model. */
export function planReplyLength(
  plan: PlannedTensor[],
  nEmbd: number,
  endOfTurn: number[],
  replyLength: number,
): void {
  const eot = new Set(endOfTurn);
  const nVocab = plan.find((t) => t.name === "token_embd.weight")!.dims[1];
  const lift = liftFor(replyLength, nEmbd, nVocab, eot.size);
  for (const t of plan) {
    if (t.name === "token_embd.weight") {
      t.edit = (values, offset) => {
        // Rows of nEmbd values, one per token; chunks hold whole rows.
        for (
          let i = offset % nEmbd === 0 ? 0 : nEmbd - (offset % nEmbd);
          i < values.length;
          i += nEmbd
        ) {
          const token = (offset + i) / nEmbd;
          values[i] = eot.has(token) ? lift : CARRIER;
        }
      };
    } else if (/\.(attn_output|ffn_down)\.weight$/.test(t.name)) {
      // ggml rows are outputs: row 0 (the first ne0 values) writes dimension 0.
      const ne0 = t.dims[0];
      t.edit = (values, offset) => {
        for (let i = offset; i < Math.min(ne0, offset + values.length); i++) values[i - offset] = 0;
      };
    }
  }
}
