/**
 * Drafting with the model's own multi-token-prediction heads (`--mtp N` on a model with NextN
 * blocks), on llama.cpp's MTP context (see `MTP.md` for the call sequence). The scheduler calls
 * three things around its steps:
 *
 * - `mirrorStep` after every target decode: the same tokens at the same positions go into the MTP
 *   context, each paired with the target's hidden state of the token before it (the head at
 *   position p reads token p and h(p-1));
 * - `settle` after a sequence's drafts were verified: cells of rejected drafts leave the MTP
 *   context too, and the hidden state of the last kept token is remembered for the next draft;
 * - `draftAll` before packing a step: k depths, each one batched decode over every drafting
 *   sequence, the head fed its own hidden state from the depth before.
 *
 * Drafts only decide how many of the target's own samples one step yields, so a wrong hidden
 * row (a cached prefix whose h(p-1) is not known: zeros are used) costs acceptance, never output.
 *
 * @example
 * ```ts
 * import { draftAll, mirrorStep, newHeads, settle } from "./mtp_heads.ts";
 * const heads = newHeads(m); // m loaded with `mtpHeads: true`
 * mirrorStep(heads, m, batch, n); // after llama_decode of the target
 * settle(heads, slot, keptPos, targetRow); // after verification
 * const drafts = draftAll(heads, m, [{ slot, token, pos, k: 4 }]);
 * ```
 * @module
 */
import { type Batch, decodeSync, memorySeqRm, setBatchSize } from "../../../ffi/mod.ts";
import { embeddingsNextnRows, type MtpContext } from "../../../ffi/mtp.ts";
import type { EngineModel } from "../model.ts";

export type Heads = {
  mtp: MtpContext;
  nEmbd: number;
  /** Per slot: the target's hidden state of the last token in its KV cells (zeros: unknown). */
  hLast: Float32Array[];
};

export function newHeads(m: EngineModel): Heads {
  if (!m.mtp) throw new Error("the model was not loaded with its MTP heads");
  const nEmbd = m.mtp.nEmbd;
  return {
    mtp: m.mtp,
    nEmbd,
    hLast: Array.from({ length: m.maxBatch }, () => new Float32Array(nEmbd)),
  };
}

/** The MTP context loses a slot's cells from `pos` on (as the target did). */
export function dropFrom(h: Heads, m: EngineModel, slot: number, pos: number): void {
  memorySeqRm(m.llama, h.mtp.mem, slot, pos, -1);
  if (pos <= 0) h.hLast[slot].fill(0);
}

/**
 * Mirrors the target's last decode (`n` rows of `b`, one sequence's rows contiguous) into the
 * MTP context. Afterwards each slot's `hLast` is the hidden state of its last row in the step.
 */
export function mirrorStep(h: Heads, m: EngineModel, b: Batch, n: number): void {
  const { nEmbd, mtp } = h;
  const rows = embeddingsNextnRows(m.llama, m.ctx, n, nEmbd);
  const mb = mtp.batch;
  for (let i = 0; i < n; i++) {
    const seq = b.seqId[i];
    mb.token[i] = b.token[i];
    mb.pos[i] = b.pos[i];
    mb.seqId[i] = seq;
    mb.logits[i] = 0;
    const firstOfSeq = i === 0 || b.seqId[i - 1] !== seq;
    if (!firstOfSeq) mb.embd.set(rows.subarray((i - 1) * nEmbd, i * nEmbd), i * nEmbd);
    else if (b.pos[i] === 0) mb.embd.fill(0, i * nEmbd, (i + 1) * nEmbd);
    else mb.embd.set(h.hLast[seq], i * nEmbd);
    const lastOfSeq = i === n - 1 || b.seqId[i + 1] !== seq;
    if (lastOfSeq) h.hLast[seq].set(rows.subarray(i * nEmbd, (i + 1) * nEmbd));
  }
  setBatchSize(mb, n);
  const rc = decodeSync(m.llama, mtp.ctx, mb);
  if (rc !== 0) throw new Error(`the MTP context could not mirror the step (${rc})`);
}

/**
 * After verification: the slot keeps cells up to `keep - 1`, whose token was target row `row`
 * of the last step (valid until the next target decode).
 */
export function settle(h: Heads, m: EngineModel, slot: number, keep: number, row: number): void {
  const rows = embeddingsNextnRows(m.llama, m.ctx, row + 1, h.nEmbd);
  h.hLast[slot].set(rows.subarray(row * h.nEmbd, (row + 1) * h.nEmbd));
  memorySeqRm(m.llama, h.mtp.mem, slot, keep, -1);
}

export type DraftAsk = { slot: number; token: number; pos: number; k: number };

/**
 * Greedy drafts for every ask: depth i feeds draft i-1 (the pending token at depth 0) at
 * `pos + i` with the head's own hidden state of depth i-1 (`hLast` at depth 0). The draft cells
 * are removed again; the mirror of the verifying step puts the real ones in.
 */
export function draftAll(h: Heads, m: EngineModel, asks: DraftAsk[]): number[][] {
  const { mtp, nEmbd } = h;
  const mb = mtp.batch;
  const out = asks.map(() => [] as number[]);
  const hHead = asks.map((a) => h.hLast[a.slot].slice());
  const next = asks.map((a) => a.token);
  const depth = Math.max(0, ...asks.map((a) => a.k));
  try {
    for (let i = 0; i < depth; i++) {
      const live: number[] = [];
      for (let j = 0; j < asks.length; j++) {
        if (asks[j].k <= i) continue;
        const r = live.length;
        mb.token[r] = next[j];
        mb.pos[r] = asks[j].pos + i;
        mb.seqId[r] = asks[j].slot;
        mb.logits[r] = 1;
        mb.embd.set(hHead[j], r * nEmbd);
        live.push(j);
      }
      if (!live.length) break;
      setBatchSize(mb, live.length);
      const rc = decodeSync(m.llama, mtp.ctx, mb);
      if (rc !== 0) throw new Error(`MTP draft decode failed (${rc})`);
      const hRows = embeddingsNextnRows(m.llama, mtp.ctx, live.length, nEmbd);
      for (let r = 0; r < live.length; r++) {
        const j = live[r];
        const p = m.llama.sym.llama_get_logits_ith(mtp.ctx, r);
        if (!p) throw new Error("MTP draft produced no logits");
        const logits = new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, m.nVocab * 4));
        let best = 0;
        for (let t = 1; t < logits.length; t++) if (logits[t] > logits[best]) best = t;
        out[j].push(best);
        next[j] = best;
        hHead[j].set(hRows.subarray(r * nEmbd, (r + 1) * nEmbd));
      }
    }
  } finally {
    for (const a of asks) memorySeqRm(m.llama, mtp.mem, a.slot, a.pos, -1);
  }
  return out;
}
