/**
 * Which llama.cpp build Hearth loads (DESIGN section 10): `HEARTH_LLAMA_LIB_DIR` when set; the
 * prebuilt CUDA build when a GPU is visible and the CUDA 13 runtime loads; the CPU build
 * otherwise. The decision is a plain function of the host facts (`detect.ts`); the only effect,
 * fetching the CUDA package, comes in as a dependency and is reached only on the CUDA branch, so
 * a CPU-only host never downloads it. A failed fetch falls back to the CPU build with the error
 * in the reason: a server that runs slowly beats one that does not start.
 *
 * @example
 * ```ts
 * import { chooseLlamaLibrary, libraryLogLine } from "./select.ts";
 * const choice = await chooseLlamaLibrary({ cacheRoot: dataDir, log: console.error });
 * console.error(libraryLogLine(choice));
 * // llama.cpp: CUDA build @node-llama-cpp/linux-x64-cuda@3.22.1 in /root/.cache/hearth/llama-cuda-3.22.1
 * //   on 1 GPU (0: NVIDIA H200): NVIDIA GPU visible and the CUDA 13 runtime loads
 * openLlama(choice.dir); // undefined for the CPU build: the default prebuilt directory
 * ```
 * @module
 */
import { detectHost, type Gpu, type HostFacts } from "./detect.ts";
import { libraryFiles } from "../../ffi/library.ts";
import { CUDA_SPEC, cudaLibraryDir } from "./cuda_package.ts";

export type LibraryKind = "cpu" | "cuda" | "custom";

export type LibraryChoice = {
  kind: LibraryKind;
  /** The directory to load from; absent for the CPU build (the project's prebuilt one). */
  dir?: string;
  /** The GPUs the build will use, as CUDA numbers them (`0: NVIDIA H200`); empty for the CPU. */
  devices: string[];
  reason: string;
};

export type SelectDeps = {
  /** Locates or fetches the prebuilt CUDA build; called only when it is the choice. */
  cudaDir: () => Promise<string>;
};

/** The CPU build that `ffi/library.ts` loads by default. */
export const CPU_SPEC = "@node-llama-cpp/linux-x64@3.22.1";
/** CUDA 13 supports kernel drivers from this major version on. */
const CUDA13_MIN_DRIVER = 580;

/** Decides from `facts`; never throws for a host problem, it chooses the CPU build instead. */
export async function selectLlamaLibrary(
  facts: HostFacts,
  deps: SelectDeps,
): Promise<LibraryChoice> {
  const devices = facts.visible.map(describeGpu);
  if (facts.libDir) {
    const gpus = devices.length > 0 ? `; ${count(devices.length)} visible` : "";
    return { kind: "custom", dir: facts.libDir, devices, reason: `HEARTH_LLAMA_LIB_DIR${gpus}` };
  }
  if (facts.visible.length === 0) return cpu(noGpuReason(facts));
  if (!facts.runtime.probed) {
    return cpu(`${count(devices.length)} visible but the CUDA runtime was not checked`);
  }
  if (facts.runtime.missing.length > 0) {
    return cpu(missingRuntimeReason(facts, facts.runtime.missing));
  }
  let dir: string;
  try {
    dir = await deps.cudaDir();
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return cpu(`${count(devices.length)} visible but the CUDA build is unavailable: ${why}`);
  }
  return {
    kind: "cuda",
    dir,
    devices,
    reason: `NVIDIA GPU visible and the CUDA 13 runtime loads${driverNote(facts.driverVersion)}`,
  };
}

/** The start-up log line naming the build and why it was chosen. */
export function libraryLogLine(choice: LibraryChoice): string {
  const on = choice.devices.length > 0
    ? ` on ${count(choice.devices.length)} (${choice.devices.join(", ")})`
    : "";
  switch (choice.kind) {
    case "custom":
      return `llama.cpp: custom build in ${choice.dir}${on}: ${choice.reason}`;
    case "cuda":
      return `llama.cpp: CUDA build ${CUDA_SPEC} in ${choice.dir}${on}: ${choice.reason}`;
    case "cpu":
      return `llama.cpp: CPU build ${CPU_SPEC}: ${choice.reason}`;
  }
}

/** Detects the host and selects, fetching the CUDA build when it is the choice. */
export async function chooseLlamaLibrary(
  opts: { cacheRoot?: string; log?: (line: string) => void } = {},
): Promise<LibraryChoice> {
  return await selectLlamaLibrary(await detectHost(), {
    cudaDir: () => cudaLibraryDir({ cacheRoot: opts.cacheRoot, log: opts.log }),
  });
}

/**
 * The two libraries to `dlopen` in a build directory: the CPU prebuilt's names, the CUDA
 * prebuilt's (`libllama.cuda.v0.5.0.so`), or a source build's unversioned ones.
 */
export function llamaLibraryFiles(
  dir: string,
): Promise<{ llama: string; ggml: string } | undefined> {
  return Promise.resolve(libraryFiles(dir));
}

function cpu(reason: string): LibraryChoice {
  return { kind: "cpu", devices: [], reason };
}

function describeGpu(gpu: Gpu, cudaIndex: number): string {
  return `${cudaIndex}: ${gpu.name}`;
}

function count(n: number): string {
  return n === 1 ? "1 GPU" : `${n} GPUs`;
}

function noGpuReason(facts: HostFacts): string {
  if (facts.gpus.length === 0) return "no NVIDIA GPU found";
  return `CUDA_VISIBLE_DEVICES=${JSON.stringify(facts.cudaVisibleDevices)} hides ` +
    (facts.gpus.length === 1 ? "the GPU" : `all ${facts.gpus.length} GPUs`);
}

function missingRuntimeReason(facts: HostFacts, missing: string[]): string {
  const head = `${count(facts.visible.length)} visible but ${missing.join(", ")} cannot be loaded`;
  if (missing.includes("libcuda.so.1")) {
    return `${head}: the NVIDIA driver's user-space library is missing (in a container, start ` +
      "it with the NVIDIA runtime, e.g. `docker run --gpus all`)";
  }
  return `${head}: install the CUDA 13 runtime and cuBLAS (e.g. apt packages cuda-cudart-13-0 ` +
    "and libcublas-13-0, or add their directory to LD_LIBRARY_PATH), or build llama.cpp with " +
    "the CUDA toolkit you have (`deno task build:cuda`) and set HEARTH_LLAMA_LIB_DIR";
}

function driverNote(version: string | undefined): string {
  const major = Number(version?.split(".")[0]);
  if (!version || !(major < CUDA13_MIN_DRIVER)) return "";
  // Not a refusal: datacenter hosts can run newer CUDA on older drivers (cuda-compat).
  return `; note: driver ${version} is older than CUDA 13 needs (${CUDA13_MIN_DRIVER}+), so ` +
    "update it if llama.cpp reports no CUDA device";
}
