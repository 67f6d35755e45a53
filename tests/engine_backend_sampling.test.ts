// Backend sampling (the chain computed inside llama.cpp's decode graph) against the CPU chain:
// greedy output is identical, seeded output is reproducible, requests that need logits (logprobs,
// grammars) share steps with backend-sampled ones, and a slot's kept chain never leaks into the
// next request's sampling. Through `hearth serve`: on a CPU-only host it is off unless
// `--backend-sampling on` asks for it (it costs more than the CPU chain there).
import assert from "node:assert/strict";
import type { DeviceInfo } from "../ffi/mod.ts";
import { onAccelerator } from "../lib/engine/devices.ts";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling, type Sampling } from "../lib/engine/sampling/sampling.ts";
import type { GenRequest } from "../lib/engine/scheduler.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { tinyModelPath } from "./support/models.ts";
import { greedyCompletion, metric, startTinyServer } from "./support/server.ts";
import { streamText as text } from "./support/tiny_engine.ts";

const prompts = [[128000, 9906, 1917], [128000, 791, 6864, 315], [128000, 13347]];

function req(prompt: number[], sampling: Partial<Sampling>, extra: Partial<GenRequest> = {}) {
  return {
    prompt: Int32Array.from(prompt),
    maxTokens: 16,
    sampling: { ...defaultSampling(), seed: 7, ...sampling },
    stop: [],
    ignoreEos: true,
    ...extra,
  };
}

Deno.test("backend sampling: same greedy tokens as the CPU chain, kept chains do not leak", async () => {
  const m = await loadEngineModel({ path: await tinyModelPath(), maxBatch: 4, maxSeqLen: 256 });
  try {
    // The CPU scheduler runs first: it never attaches a chain to the context.
    const cpu = inProcessScheduler(m, { backendSampling: false });
    const greedy = await Promise.all(
      prompts.map((p) => text(cpu.submit(req(p, { temperature: 0 })))),
    );
    const firstPiece = await text(
      cpu.submit(req(prompts[0], { temperature: 0 }, { maxTokens: 1 })),
    );
    await cpu.idle();
    assert.equal(cpu.stats().backendSampledTotal, 0);

    const gpu = inProcessScheduler(m, { backendSampling: true });
    const batched = await Promise.all(
      prompts.map((p) => text(gpu.submit(req(p, { temperature: 0 })))),
    );
    assert.deepEqual(batched, greedy);
    assert.ok(gpu.stats().backendSampledTotal >= 3 * 16);

    // A request that needs logits (logprobs) in the same steps as backend-sampled ones.
    const mixed = await Promise.all([
      text(gpu.submit(req(prompts[0], { temperature: 0 }, { logprobs: 2 }))),
      text(gpu.submit(req(prompts[1], { temperature: 0 }))),
    ]);
    assert.deepEqual(mixed, [greedy[0], greedy[1]]);

    // The slots now keep greedy chains; a request with another chain (a bias against the
    // greedy first token) must not be sampled by the kept one.
    const ids = await gpu.submit(
      req(prompts[0], { temperature: 0 }, { maxTokens: 1, logprobs: 0 }),
    );
    let first = -1;
    for await (const ev of ids) if (ev.type === "done") first = ev.tokens![0];
    assert.ok(first >= 0);
    const biased = await text(
      gpu.submit(req(prompts[0], { temperature: 0, logitBias: [[first, -100]] }, { maxTokens: 1 })),
    );
    assert.notEqual(biased, firstPiece);
    // And plain greedy afterwards is back to the reference.
    assert.equal(await text(gpu.submit(req(prompts[0], { temperature: 0 }))), greedy[0]);
    await gpu.idle();
  } finally {
    unloadEngineModel(m);
  }
});

Deno.test("backend sampling: a seeded sampled run is reproducible and batch-independent", async () => {
  const m = await loadEngineModel({ path: await tinyModelPath(), maxBatch: 4, maxSeqLen: 256 });
  try {
    const eng = inProcessScheduler(m, { backendSampling: true });
    const s = { temperature: 0.9, topK: 40 };
    const solo: string[] = [];
    for (const p of prompts) solo.push(await text(eng.submit(req(p, s))));
    const again = await Promise.all(prompts.map((p) => text(eng.submit(req(p, s)))));
    assert.deepEqual(again, solo);
    const before = eng.stats().backendSampledTotal;
    const other = await text(eng.submit(req(prompts[0], { ...s, seed: 8 })));
    assert.ok(eng.stats().backendSampledTotal > before);
    assert.equal(typeof other, "string");
    await eng.idle();
  } finally {
    unloadEngineModel(m);
  }
});

Deno.test("hearth serve --backend-sampling: auto is off on a CPU host, on samples in the graph", async () => {
  const sampled = async (flag: string[]) => {
    await using srv = await startTinyServer(flag);
    const props = await (await fetch(`${srv.url}/props`)).json();
    const { text } = await greedyCompletion(srv.url, 6);
    const n = await metric(srv.url, "hearth_backend_sampled_tokens_total");
    return { on: props.backend_sampling, n, text };
  };
  const auto = await sampled([]);
  assert.deepEqual([auto.on, auto.n], [false, 0]);
  const on = await sampled(["--backend-sampling", "on"]);
  assert.equal(on.on, true);
  assert.ok(on.n >= 5, `backend-sampled tokens ${on.n}`);
  // Greedy is the same token either way.
  assert.equal(on.text, auto.text);
});

Deno.test("onAccelerator: GPUs and RPC servers count, the CPU and CPU-side accelerators do not", () => {
  const dev = (type: DeviceInfo["type"], backend: string): DeviceInfo => ({
    index: 0,
    name: backend,
    description: "",
    type,
    backend,
    memoryFree: 0,
    memoryTotal: 0,
  });
  assert.equal(onAccelerator([dev("cpu", "CPU")]), false);
  assert.equal(onAccelerator([dev("cpu", "CPU"), dev("accel", "BLAS")]), false);
  assert.equal(onAccelerator([dev("cpu", "CPU"), dev("gpu", "CUDA")]), true);
  assert.equal(onAccelerator([dev("cpu", "CPU"), dev("cpu", "RPC")]), true);
});
