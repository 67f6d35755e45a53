/**
 * Where the tests keep the real CUDA packages (fetched once by the test setup): a data dir laid
 * out as `serve` lays its own, so `hearth gpu-check --data-dir` reads them as it would on a host.
 *
 * @example
 * ```ts
 * import { gpuDataDir } from "./gpu_data.ts";
 * gpuDataDir(); // ~/.cache/hearth-src/gpu-data
 * ```
 * @module
 */
import { sourceCacheDir } from "./llama_source.ts";

export function gpuDataDir(): string {
  return `${sourceCacheDir()}/gpu-data`;
}
