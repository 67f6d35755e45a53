/**
 * Runs once before the suite (`deno task test`): fetches the llama.cpp source bundle, writes the
 * tiny test model, builds the RPC backend, the CPU source build (the `build-cuda` flags minus
 * CUDA) and `bench/gpu.sh --cpu`'s build (the same with llama-server and llama-batched-bench), and
 * fetches the two CUDA packages whose `libggml-cuda.so` the GPU-choice tests read, so
 * parallel test files find them ready instead of racing to make them. Everything is cached.
 *
 * @example
 * ```sh
 * deno run -A tests/support/setup.ts
 * ```
 * @module
 */
import { llamaSourceDir } from "./llama_source.ts";
import { tinyModelPath } from "./models.ts";
import { gpuDataDir } from "./gpu_data.ts";
import { buildRpc } from "../../tools/build_rpc.ts";
import { buildCpuFromSource, progressPrinter } from "../../lib/source/cuda_build.ts";
import { cudaExtLibrary, cudaLibraryDir } from "../../lib/gpu/cuda_package.ts";
import { buildCpuBench } from "../../bench/gpu_build.ts";

if (import.meta.main) {
  const src = await llamaSourceDir();
  const model = await tinyModelPath();
  // ggml's RPC backend for the several-machines tests (about 15 s once, then cached).
  const rpc = await buildRpc();
  // llama.cpp built here with the GPU build's flags minus CUDA (about 4 minutes once).
  const cpu = await buildCpuFromSource(progressPrinter("test setup: llama.cpp source build"));
  // bench/gpu.sh --cpu's build: the same plus llama-server and llama-batched-bench (once).
  const bench = await buildCpuBench();
  // The real CUDA packages (143 + 177 MB once): the build-choice tests read their fat binaries.
  const log = (line: string) => console.error(`test setup: ${line}`);
  const cuda13 = await cudaLibraryDir({ cacheRoot: gpuDataDir(), log });
  const cuda12 = await cudaExtLibrary({ cacheRoot: gpuDataDir(), log });
  console.error(
    `test setup: llama.cpp source at ${src}; tiny model at ${model}; RPC at ${rpc.lib}; ` +
      `CPU source build at ${cpu.lib}; gpu.sh --cpu build at ${bench.libDir}; CUDA packages at ` +
      `${cuda13} and ${cuda12}`,
  );
}
