/**
 * `bench/gpu.sh`'s build step: one llama.cpp tree built from the source bundle with the flags of
 * `hearth build-cuda` (or, with `--cpu`, the same minus CUDA) plus `llama-server` and
 * `llama-batched-bench`, so Hearth (through `HEARTH_LLAMA_LIB_DIR=<bin>`), llama-server and the
 * library limit all run the very same libraries. Cached by mode, arch and source hash; prints one
 * JSON line: `{libDir, server, batchedBench, arch, seconds, cached}`. The CPU variant builds in
 * the tree of the tests' CPU source build (`cpuSourceBuildDir()`, the same flags) and installs
 * its libraries too, so the test setup compiles llama.cpp for the CPU once, not twice.
 *
 * @example
 * ```sh
 * deno run -A bench/gpu_build.ts --cpu
 * deno run -A bench/gpu_build.ts --arch 90 --jobs 16 --data-dir ~/.cache/hearth
 * ```
 * @module
 */
import { cmakeBuild, exists } from "../lib/source/cmake.ts";
import {
  CPU_BUILD_LIBS,
  CPU_TARGETS,
  cpuSourceBuildDir,
  CUDA_TARGETS,
  findToolkit,
  installLibraries,
  parseProgress,
  progressPrinter,
  sourceBuildFlags,
} from "../lib/source/cuda_build.ts";
import { llamaSourceDir, SOURCE_HASH } from "../lib/source/llama_source.ts";
import { probeDriver } from "../lib/gpu/probe.ts";

const TOOLS = ["llama-server", "llama-batched-bench"];
const TOOL_FLAGS = [
  "-DLLAMA_BUILD_COMMON=ON",
  "-DLLAMA_BUILD_TOOLS=ON",
  "-DLLAMA_BUILD_SERVER=ON",
  "-DLLAMA_BUILD_EXAMPLES=OFF",
  "-DLLAMA_BUILD_UI=OFF",
  "-DLLAMA_USE_PREBUILT_UI=OFF",
];

export type GpuBenchBuild = {
  libDir: string;
  server: string;
  batchedBench: string;
  arch: string;
  seconds: number;
  cached: boolean;
};

/** The CPU variant (what `bench/gpu.sh --cpu` and the test setup use), cached. */
export async function buildCpuBench(jobs?: number): Promise<GpuBenchBuild> {
  return await buildBench({ arch: "cpu", jobs: jobs ?? navigator.hardwareConcurrency });
}

async function buildBench(o: {
  arch: string;
  jobs: number;
  cuda?: { arch: string; nvcc: string };
  dataDir?: string;
}): Promise<GpuBenchBuild> {
  const { arch, cuda, jobs } = o;
  const cpu = !cuda;
  const dataDir = o.dataDir ?? `${Deno.env.get("HOME") ?? "/tmp"}/.cache/hearth`;
  // The CPU tree is the tests' source build's (`buildCpuFromSource`): one compile serves both.
  const dir = cpu
    ? `${cpuSourceBuildDir()}/build`
    : `${dataDir}/gpu-bench-${arch.replaceAll(",", "-")}-${SOURCE_HASH}`;
  const bin = `${dir}/bin`;
  const result = {
    libDir: bin,
    server: `${bin}/llama-server`,
    batchedBench: `${bin}/llama-batched-bench`,
    arch,
    seconds: 0,
    cached: true,
  };
  if (await exists(`${bin}/llama-batched-bench`) && await exists(`${bin}/libllama.so`)) {
    return result;
  }
  const t0 = performance.now();
  const show = progressPrinter(`gpu_build (${cpu ? "CPU" : `sm_${arch}`})`);
  await cmakeBuild({
    what: "llama.cpp for bench/gpu.sh",
    src: await llamaSourceDir(),
    dir,
    flags: [...sourceBuildFlags(cuda), ...TOOL_FLAGS],
    targets: [...(cuda ? CUDA_TARGETS : CPU_TARGETS), ...TOOLS],
    jobs,
    onLine: (line) => {
      const p = parseProgress(line);
      if (p) show({ ...p, seconds: (performance.now() - t0) / 1000, log: `${dir}/build.log` });
    },
  });
  // What `buildCpuFromSource` would install from this same tree, so it finds its work done.
  if (cpu) await installLibraries(bin, `${cpuSourceBuildDir()}/lib`, CPU_BUILD_LIBS);
  return { ...result, seconds: (performance.now() - t0) / 1000, cached: false };
}

async function main(args: string[]): Promise<number> {
  const cpu = args.includes("--cpu");
  const val = (flag: string) => {
    const i = args.indexOf(flag);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const jobs = Number(val("--jobs") ?? navigator.hardwareConcurrency);
  const dataDir = val("--data-dir");
  if (cpu) {
    console.log(JSON.stringify(await buildCpuBench(jobs)));
    return 0;
  }
  let arch = val("--arch") ?? "native";
  if (arch === "native") {
    const d = await probeDriver();
    const found = [...new Set(d.devices.map((g) => g.compute.replace(".", "")))].join(",");
    if (!found) {
      console.error(`gpu_build: no GPU to build for (${d.error ?? "none found"}); use --cpu`);
      return 2;
    }
    arch = found;
  }
  const tk = await findToolkit();
  if (tk.missing.length) {
    console.error(`gpu_build: cannot build with CUDA: missing ${tk.missing.join("; and ")}`);
    return 2;
  }
  const cuda = { arch, nvcc: tk.nvcc! };
  console.log(JSON.stringify(await buildBench({ arch, jobs, cuda, dataDir })));
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
