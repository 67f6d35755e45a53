// Batch packing on its own (`lib/engine/batch_pack.ts`), with a stand-in model and no decode:
// generating sequences' rows first, prompt chunks in what is left of the step budget, logits only
// where a sample or a prompt score needs them, checkpoint pauses, the 128-row cap of scored
// prompts, drafts after the pending token, and `--graph-batch` padding.
import assert from "node:assert/strict";
import { createBatchPacker } from "../lib/engine/batch_pack.ts";
import type { EngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { newSeq, newSlotState, type Seq } from "../lib/engine/sched_state.ts";
import { emptyStats, type GenRequest } from "../lib/engine/scheduler.ts";

const model = (o: Partial<EngineModel> = {}) =>
  ({ nBatch: 8, nCtxSeq: 64, maxBatch: 4, ...o }) as EngineModel;

function setup(m: EngineModel, opts: Parameters<typeof createBatchPacker>[0]["opts"] = {}) {
  const running: Seq[] = [];
  const slots = newSlotState(m, undefined);
  const { running: _r, waiting: _w, kvUsage: _k, loopMs: _l, ...stats } = emptyStats();
  const packer = createBatchPacker({ m, running, slots, stats, opts });
  return { running, slots, stats, packer };
}

function seqOf(prompt: number[], slot: number, extra: Partial<GenRequest> = {}): Seq {
  const req: GenRequest = {
    prompt: Int32Array.from(prompt),
    maxTokens: 16,
    sampling: defaultSampling(),
    stop: [],
    ignoreEos: false,
    ...extra,
  };
  const seq = newSeq(req, { push() {}, close() {}, cancelled: false });
  seq.slot = slot;
  return seq;
}

/** The packed rows as [token, pos, seq, logits]. */
const rows = (b: ReturnType<typeof setup>["packer"]["batch"], n: number) =>
  Array.from({ length: n }, (_, i) => [b.token[i], b.pos[i], b.seqId[i], b.logits[i]]);

Deno.test("a generating sequence's row first in slot order, a prompt takes what is left", () => {
  const { running, slots, stats, packer } = setup(model(), { stepBudget: 4 });
  const gen = seqOf([1, 2], 0);
  gen.fed = 2;
  gen.pos = 2;
  gen.pending = 7;
  slots.tokens[0] = [1, 2];
  const pre = seqOf([10, 11, 12, 13, 14], 1);
  running.push(gen, pre);
  const n = packer.pack();
  assert.equal(n, 4);
  assert.deepEqual(rows(packer.batch, n), [
    [7, 2, 0, 1],
    [10, 0, 1, 0],
    [11, 1, 1, 0],
    [12, 2, 1, 0],
  ]);
  assert.equal(gen.logitIndex, 0);
  assert.equal(gen.pending, -1);
  assert.equal(gen.pos, 3);
  assert.equal(pre.fed, 3);
  assert.equal(pre.logitIndex, -1, "no logits before the prompt's last token");
  assert.deepEqual(slots.tokens, [[1, 2, 7], [10, 11, 12], [], []]);
  assert.equal(stats.promptTokensTotal, 3);
  // The next step ends the prompt: its last row has logits and is the one to sample.
  gen.pending = 8;
  const n2 = packer.pack();
  assert.deepEqual(rows(packer.batch, n2), [[8, 3, 0, 1], [13, 3, 1, 0], [14, 4, 1, 1]]);
  assert.equal(pre.logitIndex, 2);
  assert.equal(stats.promptTokensTotal, 5);
  // Nothing pending and nothing left to feed: an empty step.
  assert.equal(packer.pack(), 0);
});

Deno.test("the step budget is at most the model's batch; scored prompts stop at 128 rows", () => {
  const { running, packer } = setup(model({ nBatch: 200, nCtxSeq: 512 }), { stepBudget: 1000 });
  const scored = seqOf(Array.from({ length: 150 }, (_, i) => i + 1), 0, { promptLogprobs: 2 });
  running.push(scored);
  assert.equal(packer.pack(), 128);
  assert.deepEqual(scored.promptRows, { row: 0, from: 0, count: 128 });
  assert.ok(packer.batch.logits.subarray(0, 128).every((l) => l === 1), "every row scored");
  assert.equal(packer.pack(), 22);
  assert.deepEqual(scored.promptRows, { row: 0, from: 128, count: 22 });
  const big = setup(model({ nBatch: 200, nCtxSeq: 512 }), { stepBudget: 1000 });
  big.running.push(seqOf(Array.from({ length: 300 }, (_, i) => i + 1), 0));
  assert.equal(big.packer.pack(), 200, "the budget is capped at nBatch");
});

Deno.test("a prefill pauses at its checkpoint", () => {
  const { running, packer } = setup(model());
  const seq = seqOf([1, 2, 3, 4, 5, 6], 2);
  seq.checkpointAt = 3;
  running.push(seq);
  assert.equal(packer.pack(), 3);
  assert.equal(seq.fed, 3);
  seq.checkpointAt = 0; // as takeCheckpoints does once the state is kept
  assert.equal(packer.pack(), 3);
  assert.equal(seq.logitIndex, 2);
});

Deno.test("drafts follow the pending token, bounded by the room left", () => {
  const asked: number[][] = [];
  const draft = (history: readonly number[], k: number) => {
    asked.push([...history, k]);
    return [20, 21, 22, 23];
  };
  const { running, slots, stats, packer } = setup(model(), { draftTokens: 3, draft });
  const seq = seqOf([1, 2, 3], 1, { maxTokens: 3 });
  seq.fed = 3;
  seq.pos = 3;
  seq.pending = 9;
  seq.generated = 0;
  slots.tokens[1] = [1, 2, 3];
  running.push(seq);
  const n = packer.pack();
  // maxTokens 3, none generated: room for 3 - 0 - 1 = 2 drafts after the pending token.
  assert.deepEqual(asked, [[1, 2, 3, 9, 2]], "history ends with the pending token, k = room");
  assert.deepEqual(seq.drafts, [20, 21]);
  assert.deepEqual(rows(packer.batch, n), [[9, 3, 1, 1], [20, 4, 1, 1], [21, 5, 1, 1]]);
  assert.deepEqual(slots.tokens[1], [1, 2, 3, 9, 20, 21]);
  assert.equal(stats.draftTokensTotal, 2);
  assert.equal(seq.pos, 6);
});

Deno.test("--graph-batch pads a step to the next size with one padding sequence per row", () => {
  const m = model({ graphBatch: { sizes: [1, 4, 8], padSeqs: 7 } });
  const { running, stats, packer } = setup(m);
  running.push(seqOf([5, 6], 0));
  const n = packer.pack();
  assert.equal(n, 2);
  assert.equal(packer.padToGraphSize(n), 4);
  assert.deepEqual(rows(packer.batch, 4).slice(2), [[0, 0, 4, 1], [0, 0, 5, 1]]);
  assert.equal(stats.graphPaddedStepsTotal, 1);
  assert.equal(stats.graphPaddingRowsTotal, 2);
  assert.equal(packer.padToGraphSize(4), 4, "a step of a graph size is left alone");
  assert.equal(packer.padToGraphSize(9), 9, "a step beyond the largest size is left alone");
  assert.equal(stats.graphPaddedStepsTotal, 1);
  const plain = setup(model());
  assert.equal(plain.packer.padToGraphSize(3), 3, "no graph sizes: no padding");
});
