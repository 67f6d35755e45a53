/**
 * Runs once before the suite (`deno task test`) and makes everything the test files share, so
 * parallel files find it ready instead of racing to make it: the llama.cpp source bundle, the
 * tiny test model, ggml's RPC backend, one CPU build of llama.cpp from source (the `build-cuda`
 * flags minus CUDA, plus `llama-server` and `llama-batched-bench` for `bench/gpu.sh --cpu`: one
 * tree, compiled once), the two CUDA packages whose `libggml-cuda.so` the GPU-choice tests read,
 * and the agent CLIs from npm. Everything is cached; a second run takes seconds.
 *
 * It prints a line as each step starts and one as it ends, with its time and the time so far, and
 * the source build's progress in between. On an idle 2-core machine with cold caches the first
 * run takes about 8 minutes: the CPU build (209 compile steps) about 6 of them, the RPC backend,
 * the 320 MB of CUDA packages and the npm install most of the rest.
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
import { agentCliBin } from "./agent_clis.ts";
import { buildRpc } from "../../tools/build_rpc.ts";
import { buildCpuFromSource } from "../../lib/source/cuda_build.ts";
import { cudaExtLibrary, cudaLibraryDir } from "../../lib/gpu/cuda_package.ts";
import { buildCpuBench } from "../../bench/gpu_build.ts";

/** One step of the setup: what it makes, how, and whether the suite can go on without it. */
export type SetupStep = {
  what: string;
  run: () => Promise<string>;
  /** The tests that need it say why when it is missing; the other tests still run. */
  optional?: boolean;
};

/**
 * Runs `steps` in order, printing `test setup: [i/n] what ...` as each starts and
 * `test setup: [i/n] what: RESULT (12 s, 3 min 4 s so far)` as it ends. Throws at the first
 * failed step that is not optional; returns how many optional steps failed.
 */
export async function runSetup(
  steps: SetupStep[],
  print: (line: string) => void = (line) => console.error(line),
): Promise<{ failed: number }> {
  const t0 = performance.now();
  let failed = 0;
  for (const [i, step] of steps.entries()) {
    const tag = `test setup: [${i + 1}/${steps.length}] ${step.what}`;
    print(`${tag} ...`);
    const s0 = performance.now();
    const took = () =>
      `${elapsed(performance.now() - s0)}, ${elapsed(performance.now() - t0)} so far`;
    try {
      const result = await step.run();
      print(`${tag}: ${result} (${took()})`);
    } catch (e) {
      const why = (e as Error).message;
      if (!step.optional) {
        print(`${tag}: FAILED (${took()}): ${why}`);
        throw e;
      }
      failed++;
      print(`${tag}: failed, the tests that need it will say why (${took()}): ${why}`);
    }
  }
  print(`test setup: done in ${elapsed(performance.now() - t0)}`);
  return { failed };
}

/** `850 ms`, `12 s`, `3 min 4 s`. */
export function elapsed(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** What the suite needs, in the order it is made. */
export function suiteSteps(): SetupStep[] {
  const log = (line: string) => console.error(`test setup:   ${line}`);
  const built = (b: { cached: boolean }, path: string) =>
    `${b.cached ? "cached" : "built"}: ${path}`;
  return [
    { what: "llama.cpp source bundle", run: llamaSourceDir },
    { what: "tiny test model", run: tinyModelPath },
    {
      // ggml's RPC backend for the several-machines tests (about 15 s once).
      what: "ggml RPC backend (deno task build:rpc)",
      run: async () => {
        const b = await buildRpc();
        return built(b, b.lib);
      },
      optional: true,
    },
    {
      // The CPU source build and bench/gpu.sh --cpu's tools, one tree (about 7 minutes once).
      what: "llama.cpp CPU build from source, with llama-server and llama-batched-bench",
      run: async () => {
        const bench = await buildCpuBench();
        const cpu = await buildCpuFromSource();
        return `${bench.cached ? "cached" : "built"}: ${cpu.lib} and ${bench.libDir}`;
      },
    },
    {
      // The real CUDA packages (143 + 177 MB once): the build-choice tests read their fat binaries.
      what: "CUDA packages (read by the GPU-choice tests, on any host)",
      run: async () => {
        const cuda13 = await cudaLibraryDir({ cacheRoot: gpuDataDir(), log });
        const cuda12 = await cudaExtLibrary({ cacheRoot: gpuDataDir(), log });
        return `${cuda13} and ${cuda12}`;
      },
    },
    // Claude Code and Codex, pinned, from npm (once): the agent and launch tests run them.
    { what: "agent CLIs (npm install)", run: agentCliBin, optional: true },
  ];
}

if (import.meta.main) {
  await runSetup(suiteSteps()).catch(() => Deno.exit(1));
}
