// `greedyPick` (the CPU path's greedy sample, taken straight from the logits row) against
// llama.cpp's own greedy chain on the same rows: plain, with the EOG ban of `ignore_eos`, with
// user biases that move the argmax down, lift a low token up, tie it (the lower id wins), repeat
// for one token, or name ids outside the vocabulary.
import assert from "node:assert/strict";
import { decodeOneSequence } from "./support/decode.ts";
import { freeContext, logitsIth, newContext, samplerFree, samplerSample } from "../ffi/mod.ts";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import {
  buildSamplerChain,
  defaultSampling,
  greedyBias,
  greedyPick,
} from "../lib/engine/sampling/sampling.ts";
import { tinyModelPath } from "./support/models.ts";

Deno.test("greedyPick picks what llama.cpp's greedy chain picks, biases included", async () => {
  const m = await loadEngineModel({ path: await tinyModelPath(), maxBatch: 1, maxSeqLen: 256 });
  const ctx = newContext(m.llama, m.model, {
    n_ctx: 256,
    n_batch: 256,
    n_ubatch: 256,
    n_seq_max: 1,
    n_threads: 1,
    n_threads_batch: 1,
    no_perf: true,
  });
  try {
    const ids = [128000, 9906, 1917, 11, 856, 2288, 374, 40];
    assert.equal(await decodeOneSequence(m.llama, ctx, ids), 0);
    let checked = 0;
    for (let r = 0; r < ids.length; r++) {
      const row = logitsIth(m.llama, ctx, r, m.nVocab);
      const order = [...row.keys()].sort((a, b) => row[b] - row[a] || a - b);
      const [top, second] = order;
      const low = order[order.length - 1];
      const cases: [string, [number, number][], number[]][] = [
        ["plain", [], []],
        ["eog banned", [], m.eogTokens],
        ["top banned", [], [top]],
        ["top pushed down", [[top, -(row[top] - row[second]) - 1]], []],
        ["low lifted", [[low, 1000]], m.eogTokens],
        ["repeats add up", [[low, 600], [low, 600], [second, -1]], []],
        ["outside the vocabulary", [[-1, 1000], [m.nVocab, 1000]], []],
      ];
      // Ties: an id lifted to exactly the top logit wins only if it is the lower one, as
      // llama.cpp keeps the first maximum.
      for (
        const [name, other] of [
          ["tie below", order.find((t) => t < top)],
          ["tie above", order.find((t) => t > top)],
        ] as const
      ) {
        if (other === undefined) continue;
        const lift = Math.fround(row[top] - row[other]);
        if (Math.fround(row[other] + lift) === row[top]) cases.push([name, [[other, lift]], []]);
      }
      for (const [name, logitBias, banned] of cases) {
        const s = { ...defaultSampling(), temperature: 0, logitBias };
        const chain = buildSamplerChain(m.llama, m.nVocab, s, banned);
        try {
          const want = samplerSample(m.llama, chain, ctx, r);
          const got = greedyPick(row, greedyBias(s, banned, m.nVocab)!);
          assert.equal(got, want, `row ${r}, ${name}`);
          checked++;
        } finally {
          samplerFree(m.llama, chain);
        }
      }
    }
    assert.ok(checked >= 8 * ids.length, `${checked} cases`);
    // Only plain greedy chains take this path.
    assert.equal(greedyBias({ ...defaultSampling(), temperature: 0.5 }, [], m.nVocab), undefined);
    assert.equal(
      greedyBias({ ...defaultSampling(), temperature: 0, repetitionPenalty: 1.1 }, [], m.nVocab),
      undefined,
    );
  } finally {
    freeContext(m.llama, ctx);
    unloadEngineModel(m);
  }
});
