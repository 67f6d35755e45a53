/**
 * The GPU benchmark's report step (`bench/gpu_report.ts`). The end-to-end run of `bench/gpu.sh
 * --cpu` is not in the suite yet: its build (llama-server and llama-batched-bench beside the
 * libraries) had not finished once on this project's 2-core machine when it was written.
 */
import assert from "node:assert/strict";
import { parseBatchedBench } from "../bench/gpu_report.ts";

Deno.test("gpu report: llama-batched-bench's table", () => {
  const text = `
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   127 |    128 |    1 |    255 |    0.012 | 10583.33 |    0.220 |   583.01 |    0.232 |  1099.13 |
|   127 |    128 |    8 |   2040 |    0.051 | 19921.57 |    0.530 |  1933.00 |    0.581 |  3511.19 |`;
  assert.deepEqual([...parseBatchedBench(text)], [[1, 583.01], [8, 1933]]);
});
