/**
 * Fills the scheduler's one decode batch for a step: each generating sequence's pending token
 * and the drafts to verify after it (prompt lookup or the model's MTP heads), then prompt chunks
 * of admitted sequences in what is left of the step's token budget. With `--graph-batch` the
 * step is padded up to a configured graph size and the padding's cells are dropped after the
 * decode. Every row written is also appended to its slot's `SlotState.tokens`.
 *
 * @example
 * ```ts ignore
 * import { createBatchPacker } from "./batch_pack.ts";
 * const packer = createBatchPacker({ m, running, slots, stats, opts: {} });
 * const n = packer.pack();
 * const rows = packer.padToGraphSize(n);
 * decodeSync(m.llama, m.ctx, packer.batch);
 * if (rows > n) packer.dropPadding(rows - n);
 * ```
 * @module
 */
import { type Batch, memorySeqRm, newBatch, setBatchSize } from "../../ffi/mod.ts";
import { lookupDraft } from "./speculative/lookup.ts";
import type { EngineModel } from "./model.ts";
import { draftAll, type DraftAsk } from "./speculative/mtp_heads.ts";
import {
  headsFailed,
  NO_DRAFTS,
  type Seq,
  type SlotState,
  type StepCounters,
} from "./sched_state.ts";
import type { SchedulerOptions } from "./scheduler_types.ts";

/**
 * Prompt rows with logits per step, for `promptLogprobs`: llama.cpp keeps an output buffer of
 * rows x vocabulary floats sized for the largest step it has seen (128 x 128k x 4 = 64 MiB).
 */
const PROMPT_LOGIT_ROWS = 128;

export type BatchPackerDeps = {
  m: EngineModel;
  /** The scheduler's running sequences, in ascending slot order (the list is not changed here). */
  running: readonly Seq[];
  slots: SlotState;
  stats: StepCounters;
  /**
   * The step's token budget (`stepBudget`: at most, and by default, `m.nBatch`), the drafts per
   * sequence and step (`draftTokens`, 0: none) and where they come from when the model's heads
   * do not draft (`draft`, default: prompt lookup).
   */
  opts: Pick<SchedulerOptions, "stepBudget" | "draftTokens" | "draft">;
};

export type BatchPacker = {
  /** The batch every step is packed into and decoded from (reused, never reallocated). */
  batch: Batch;
  /** Fills the batch for the next step; returns its rows (0: nothing to decode). */
  pack(): number;
  /** `--graph-batch`: pads a step of `n` rows to a graph size; returns the rows to decode. */
  padToGraphSize(n: number): number;
  /** Frees the cells the `count` padding rows of the last step took. */
  dropPadding(count: number): void;
};

export function createBatchPacker(d: BatchPackerDeps): BatchPacker {
  const { m, running, slots, stats, opts } = d;
  const budget = Math.min(opts.stepBudget ?? m.nBatch, m.nBatch);
  const draftTokens = opts.draftTokens ?? 0;
  const draft = opts.draft ?? lookupDraft;
  // Room for padding a small step up to the largest graph size, whatever the step budget.
  const batch: Batch = newBatch(Math.max(budget, m.graphBatch?.sizes.at(-1) ?? 0));
  const slotTokens = slots.tokens;

  /**
   * Fills the batch; returns its size. Generating sequences get their token (and any drafts to
   * verify) first; prompt chunks share what is left of the budget. Rows are written in ascending
   * slot order (`running` is kept sorted) so llama.cpp can take the step in as few ubatches as
   * possible.
   */
  function pack(): number {
    let prefillBudget = budget;
    const asks: DraftAsk[] = [];
    const askers: Seq[] = [];
    for (const seq of running) {
      if (seq.pending < 0) continue;
      prefillBudget--;
      seq.drafts = NO_DRAFTS;
      if (draftTokens > 0 && prefillBudget > 0) {
        // Never draft past what the request may still generate or the context can hold.
        const room = Math.min(
          draftTokens,
          seq.req.maxTokens - seq.generated - 1,
          m.nCtxSeq - seq.pos - 2,
          prefillBudget,
        );
        if (room <= 0) continue;
        if (slots.heads) {
          asks.push({ slot: seq.slot, token: seq.pending, pos: seq.pos, k: room });
          askers.push(seq);
          prefillBudget -= room;
          continue;
        }
        const history = slotTokens[seq.slot];
        history.push(seq.pending);
        seq.drafts = draft(history, room).slice(0, room);
        history.pop();
        prefillBudget -= seq.drafts.length;
      }
    }
    if (slots.heads && asks.length) {
      try {
        const drafts = draftAll(slots.heads, m, asks);
        askers.forEach((seq, i) => (seq.drafts = drafts[i]));
      } catch (e) {
        headsFailed(slots, e);
      }
    }
    // Prompts take all the budget the generating rows leave, as llama-server and vLLM do.
    // Smaller chunks beside running streams (256 or 512 tokens) were measured in paired rounds
    // against llama-server (2 cores, `small` preset): each stall was shorter but every running
    // stream met several, so ITL p99 at 32 streams was 0.86-1.07 s against llama-server's
    // 0.29-1.6 s, and 0.24 s with whole-budget steps; TTFT and tok/s were no better.
    let n = 0;
    for (const seq of running) {
      seq.logitIndex = -1;
      if (seq.pending >= 0) {
        put(n, seq.pending, seq.pos, seq.slot, true);
        seq.logitIndex = n++;
        seq.pos++;
        seq.pending = -1;
        for (const d of seq.drafts) {
          put(n++, d, seq.pos++, seq.slot, true);
          stats.draftTokensTotal++;
        }
        continue;
      }
      const left = seq.req.prompt.length - seq.fed;
      if (left <= 0 || prefillBudget <= 0) continue;
      const scored = seq.promptLogprobs !== undefined;
      const take = Math.min(
        left,
        prefillBudget,
        scored ? PROMPT_LOGIT_ROWS : Infinity,
        seq.checkpointAt > seq.fed ? seq.checkpointAt - seq.fed : Infinity,
      );
      prefillBudget -= take;
      if (scored) seq.promptRows = { row: n, from: seq.fed, count: take };
      for (let k = 0; k < take; k++) {
        const last = seq.fed + k === seq.req.prompt.length - 1;
        put(n, seq.req.prompt[seq.fed + k], seq.pos, seq.slot, last || scored);
        if (last) seq.logitIndex = n;
        n++;
        seq.pos++;
      }
      seq.fed += take;
      stats.promptTokensTotal += take;
    }
    setBatchSize(batch, n);
    return n;
  }

  /**
   * `--graph-batch`: fills the batch up to the smallest configured size that holds its `n` rows,
   * so a GPU backend sees few graph shapes and replays its captured graphs. Each padding row is
   * token 0 at position 0 of a padding sequence of its own, with an output like the real rows of
   * a decode step: the step then has as many rows, sequences and outputs as the size. Nothing
   * reads their results. Returns the rows to decode.
   */
  function padToGraphSize(n: number): number {
    const g = m.graphBatch;
    if (!g) return n;
    const size = g.sizes.find((s) => s >= n);
    if (size === undefined || size === n) return n;
    for (let i = n; i < size; i++) {
      batch.token[i] = 0;
      batch.pos[i] = 0;
      batch.seqId[i] = m.maxBatch + i - n;
      batch.logits[i] = 1;
    }
    setBatchSize(batch, size);
    stats.graphPaddedStepsTotal++;
    stats.graphPaddingRowsTotal += size - n;
    return size;
  }

  /** Frees the cells the padding rows of the last step took. */
  function dropPadding(count: number): void {
    for (let k = 0; k < count; k++) memorySeqRm(m.llama, m.mem, m.maxBatch + k, -1, -1);
  }

  function put(i: number, token: number, pos: number, seq: number, logits: boolean): void {
    slotTokens[seq].push(token);
    batch.token[i] = token;
    batch.pos[i] = pos;
    batch.seqId[i] = seq;
    batch.logits[i] = logits ? 1 : 0;
  }

  return { batch, pack, padToGraphSize, dropPadding };
}
