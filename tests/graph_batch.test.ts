// `--graph-batch`: small decode steps are padded to fixed sizes with rows of padding sequences.
// The padding must not change any request's output, must leave no KV cells behind, and the
// sizes are checked before anything loads.
import assert from "node:assert/strict";
import { graphBatchLayout } from "../lib/engine/graph_batch.ts";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling, type Sampling } from "../lib/engine/sampling/sampling.ts";
import type { GenRequest } from "../lib/engine/scheduler.ts";
import { memorySeqPosMax } from "../ffi/mod.ts";
import { tinyModelPath } from "./support/models.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { streamText as text } from "./support/tiny_engine.ts";
import { greedyCompletion, metric, startTinyServer } from "./support/server.ts";

const prompts = [[128000, 9906, 1917], [128000, 791, 6864, 315], [128000, 13347]];

function req(prompt: number[], sampling: Partial<Sampling>, extra: Partial<GenRequest> = {}) {
  return {
    prompt: Int32Array.from(prompt),
    maxTokens: 24,
    sampling: { ...defaultSampling(), seed: 11, ...sampling },
    stop: [],
    ignoreEos: true,
    ...extra,
  };
}

Deno.test("graphBatchLayout sorts the sizes and refuses what cannot fit", () => {
  assert.deepEqual(graphBatchLayout([8, 1, 4, 4], 32), { sizes: [1, 4, 8], padSeqs: 7 });
  assert.deepEqual(graphBatchLayout([1], 4), { sizes: [1], padSeqs: 0 });
  assert.throws(() => graphBatchLayout([], 4), /must be >= 1/);
  assert.throws(() => graphBatchLayout([0, 2], 4), /must be >= 1/);
  assert.throws(() => graphBatchLayout([513], 4), /larger than a ubatch \(512 rows\)/);
  assert.throws(() => graphBatchLayout([64], 200), /63 padding sequences .* 256/);
});

Deno.test("padded steps give the same outputs and leave no padding cells", async () => {
  const path = await tinyModelPath();
  const plain = await loadEngineModel({ path, maxBatch: 4, maxSeqLen: 256, threads: 2 });
  const padded = await loadEngineModel({
    path,
    maxBatch: 4,
    maxSeqLen: 256,
    threads: 2,
    graphBatch: [8, 4],
  });
  try {
    assert.deepEqual(padded.graphBatch, { sizes: [4, 8], padSeqs: 7 });
    assert.equal(padded.maxBatch, 4);
    assert.equal(padded.nCtxSeq, plain.nCtxSeq);

    const run = async (m: typeof plain) => {
      const s = inProcessScheduler(m);
      const out = await Promise.all([
        // Greedy, seeded sampling, and a request that needs logits (logprobs) in the same steps.
        text(s.submit(req(prompts[0], { temperature: 0 }))),
        text(s.submit(req(prompts[1], { temperature: 0.9 }))),
        text(s.submit(req(prompts[2], { temperature: 0 }, { logprobs: 2, maxTokens: 9 }))),
      ]);
      // One alone: steps of a single row, padded to 4.
      out.push(await text(s.submit(req(prompts[1], { temperature: 0 }, { maxTokens: 12 }))));
      await s.idle();
      return { out, stats: s.stats() };
    };
    const a = await run(plain);
    const b = await run(padded);
    assert.deepEqual(b.out, a.out);
    assert.ok(a.out.every((t) => t.length > 0));
    assert.equal(a.stats.graphPaddedStepsTotal, 0);
    assert.ok(b.stats.graphPaddedStepsTotal >= 12, `${b.stats.graphPaddedStepsTotal} padded`);
    // The lone request's 11 one-row decode steps alone add 3 padding rows each.
    assert.ok(b.stats.graphPaddingRowsTotal >= 33);
    for (let seq = 4; seq < 4 + 7; seq++) {
      assert.equal(memorySeqPosMax(padded.llama, padded.mem, seq), -1, `padding seq ${seq}`);
    }
    assert.equal(b.stats.running, 0);
  } finally {
    unloadEngineModel(padded);
    unloadEngineModel(plain);
  }
});

Deno.test("hearth serve --graph-batch: /props names the sizes, /metrics counts the padding", async () => {
  await using srv = await startTinyServer(["--graph-batch", "2,4"]);
  const props = await (await fetch(`${srv.url}/props`)).json();
  assert.deepEqual(props.graph_batch, [2, 4]);
  assert.equal(props.max_batch, 2);
  assert.equal((await greedyCompletion(srv.url, 5)).completionTokens, 5);
  const rows = await metric(srv.url, "hearth_graph_padding_rows_total");
  assert.ok(rows >= 4, `padding rows ${rows}`);
});
