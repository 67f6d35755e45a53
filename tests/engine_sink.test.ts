// `submitTo`, the way the engine worker takes events: every token sampled in a step is already in
// the sink when the next iteration begins (`onStep`, where the worker posts), so no token leaves a
// step late. Iterating the channel of `submit` inside the worker broke this: promise turns could
// land after the post. Own model load: a second scheduler must not share the tiny engine's cells.
import assert from "node:assert/strict";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { createScheduler, type GenEvent, isRefusal } from "../lib/engine/scheduler.ts";
import { tinyModelPath } from "./support/models.ts";

Deno.test("submitTo: a step's tokens are in the sink before the next step starts", async () => {
  const m = await loadEngineModel({
    path: await tinyModelPath(),
    maxBatch: 4,
    maxSeqLen: 256,
    threads: 1,
  });
  try {
    const got = new Map<number, GenEvent[]>();
    const closed: number[] = [];
    const checks: { sampled: number; delivered: number }[] = [];
    const delivered = () => [...got.values()].flat().filter((ev) => ev.type === "logprobs").length;
    const engine = createScheduler(m, {
      onStep: () => {
        checks.push({ sampled: engine.stats().generatedTokensTotal, delivered: delivered() });
      },
    });
    const prompts = [[128000, 9906, 1917], [128000, 11, 856, 2288, 374], [128000, 40]];
    prompts.forEach((p, id) => {
      got.set(id, []);
      engine.submitTo({
        prompt: Int32Array.from(p),
        maxTokens: 6 + 3 * id,
        sampling: { ...defaultSampling(), temperature: 0 },
        stop: [],
        ignoreEos: true,
        // One logprobs event per sampled token, whatever the text holds back.
        logprobs: 0,
      }, {
        push: (ev) => {
          assert.ok(!closed.includes(id), `event for request ${id} after close`);
          got.get(id)!.push(ev);
        },
        close: () => closed.push(id),
      });
    });
    await engine.idle();
    assert.deepEqual(closed.sort(), [0, 1, 2]);
    for (const [id, evs] of got) {
      const done = evs.at(-1);
      assert.equal(done?.type, "done", `request ${id} ends with done`);
      assert.equal(evs.filter((ev) => ev.type === "logprobs").length, 6 + 3 * id);
    }
    // Steps after the first sample tokens; at every iteration all of them were delivered.
    assert.ok(checks.length >= 10, `${checks.length} iterations`);
    assert.ok(checks.some((c) => c.sampled > 0));
    for (const c of checks) assert.equal(c.delivered, c.sampled);

    // Refusals still throw from the call, as with `submit`.
    assert.throws(
      () =>
        engine.submitTo({
          prompt: new Int32Array(300).fill(11),
          maxTokens: 1,
          sampling: defaultSampling(),
          stop: [],
          ignoreEos: false,
        }, { push: () => {}, close: () => {} }),
      (e) => isRefusal(e),
    );
  } finally {
    await unloadEngineModel(m);
  }
});
