// The slot a new sequence takes (`lib/engine/cache/slot_cache.ts`'s `takeSlot`), with a stand-in model:
// the free slot sharing the longest prefix with the prompt, ties to the lowest id, so a step's
// sequence ids stay low and dense.
import assert from "node:assert/strict";
import type { EngineModel } from "../lib/engine/model.ts";
import { newSlotState } from "../lib/engine/sched_state.ts";
import { emptyStats } from "../lib/engine/scheduler.ts";
import { createSlotCache } from "../lib/engine/cache/slot_cache.ts";

Deno.test("a prompt takes the free slot with the longest shared prefix, ties to the lowest id", () => {
  const m = { maxBatch: 4, nCtxSeq: 64, stateTrim: true, kvTrim: true } as EngineModel;
  const slots = newSlotState(m, undefined);
  const { running: _r, waiting: _w, kvUsage: _k, loopMs: _l, ...stats } = emptyStats();
  const slotCache = createSlotCache({ m, slots, stats, opts: {} });
  assert.equal(slotCache.cache, undefined, "no tier asked for: no prompt cache");
  slots.tokens[1] = [1, 2, 3];
  slots.tokens[2] = [1, 2, 3, 4, 5];
  slots.tokens[3] = [1, 2, 3, 4, 5];
  assert.deepEqual(slotCache.takeSlot(Int32Array.from([1, 2, 3, 4, 9])), { slot: 2, common: 4 });
  assert.deepEqual(slots.free.toSorted(), [0, 1, 3]);
  assert.deepEqual(slotCache.takeSlot(Int32Array.from([7])), { slot: 0, common: 0 });
  assert.deepEqual(slotCache.takeSlot(Int32Array.from([1, 2])), { slot: 1, common: 2 });
  assert.deepEqual(slotCache.takeSlot(Int32Array.from([1, 2])), { slot: 3, common: 2 });
  assert.deepEqual(slots.free, []);
});
