/**
 * `bench/gpu.sh --cpu`: the GPU benchmark's whole pipeline (one source build with llama-server
 * and llama-batched-bench, models, paired rounds with --graph-batch on and off, the library
 * limit, one JSON and a table) runs end to end on a CPU, so it is known to work before it meets
 * a GPU host. About 35 s once the test setup has built it.
 */
import assert from "node:assert/strict";
import { parseBatchedBench } from "../bench/gpu_report.ts";

const root = new URL("..", import.meta.url).pathname;

Deno.test("bench/gpu.sh --cpu completes with one folder of results", async () => {
  const out = await Deno.makeTempDir({ prefix: "hearth-gpu-bench-" });
  try {
    const run = await new Deno.Command("bash", {
      args: [`${root}bench/gpu.sh`, "--cpu", "--out", out, "--jobs", "2"],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const log = await Deno.readTextFile(`${out}/gpu.log`).catch(() => "");
    assert.equal(run.code, 0, `${new TextDecoder().decode(run.stderr)}\n${log.slice(-3000)}`);
    const results = JSON.parse(await Deno.readTextFile(`${out}/results.json`));
    assert.equal(results.mode, "cpu");
    const keys = results.rows.map((r: { graphBatch: string; concurrency: number }) =>
      `${r.graphBatch}:${r.concurrency}`
    );
    assert.deepEqual(keys.sort(), ["off:1", "off:8", "on:1", "on:8"]);
    for (const r of results.rows) {
      assert.ok(r.hearthTps > 0 && r.peerTps > 0 && r.vsPeer > 0, JSON.stringify(r));
      assert.ok(r.limitTps > 0 && r.loopTps > 0, `library limits: ${JSON.stringify(r)}`);
    }
    const table = await Deno.readTextFile(`${out}/table.md`);
    assert.match(table, /\| tiny \| on \| 8 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|/);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("gpu report: llama-batched-bench's table", () => {
  const text = `
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   127 |    128 |    1 |    255 |    0.012 | 10583.33 |    0.220 |   583.01 |    0.232 |  1099.13 |
|   127 |    128 |    8 |   2040 |    0.051 | 19921.57 |    0.530 |  1933.00 |    0.581 |  3511.19 |`;
  assert.deepEqual([...parseBatchedBench(text)], [[1, 583.01], [8, 1933]]);
});
