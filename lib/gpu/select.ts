/**
 * Which llama.cpp build `serve` loads (docs/ARCHITECTURE.md, "GPU hosts"). With no GPU visible: the CPU build,
 * without fetching anything. With GPUs: the candidates in order (prebuilt CUDA 13, prebuilt CUDA
 * 12 fallback, a cached source build, the CPU build) are judged from facts (`candidates.ts`);
 * when none of the GPU ones can run and a CUDA toolkit is present, a source build is made first
 * (unless `--no-build`); then each usable GPU build must pass the smoke decode (`smoke.ts`) in a
 * child process before it is chosen. `HEARTH_LLAMA_LIB_DIR` is tried first and smoke-tested the
 * same way. Every rejected build is kept with its reason for the log and `/props`
 * `library.rejected`. Nothing here can abort the server: everything that could runs in a child.
 *
 * @example
 * ```ts
 * import { chooseLlamaLibrary, libraryLogLine } from "./select.ts";
 * import { openLlama } from "../../ffi/mod.ts";
 * declare const dataDir: string;
 * const choice = await chooseLlamaLibrary({ cacheRoot: dataDir, log: console.error });
 * console.error(libraryLogLine(choice));
 * // llama.cpp: source build in /data/llama-cuda-src-90-de3ff815ea7d/lib on 1 GPU (0: NVIDIA
 * //   H100 80GB HBM3): runs on GPU 0 (NVIDIA H100 80GB HBM3, compute 9.0) through sm_90 SASS; ...
 * choice.rejected; // [{ build: "prebuilt-cuda13", reason: "GPU 0 (...): no SASS for sm_90 ..." }]
 * openLlama(choice.dir); // for the CPU build, the project's prebuilt directory
 * ```
 * @module
 */
import { detectHost, dlopenProbe, type Gpu, type HostFacts, ldconfigProbe } from "./detect.ts";
import { libraryFiles, prebuiltDir } from "../../ffi/library.ts";
import { cuda12LibraryDir, CUDA_SPEC, cudaLibraryDir } from "./cuda_package.ts";
import { type BuildName, type Candidate, checkBuilds, type GpuCheck } from "./candidates.ts";
import { type DriverFacts, probeDriver } from "./probe.ts";
import { type SmokeResult, smokeTest } from "./smoke.ts";
import { findCudaSourceBuilds } from "../source/cuda_build.ts";

export type LibraryKind = "cpu" | "cuda" | "custom";

export type Rejected = { build: BuildName | "custom"; reason: string };

export type LibraryChoice = {
  kind: LibraryKind;
  /** Which candidate (`custom` = `HEARTH_LLAMA_LIB_DIR`). */
  build: BuildName | "custom";
  /** The directory to load from (for the CPU build, the project's prebuilt one). */
  dir: string;
  /** The GPUs the build will use, as CUDA numbers them (`0: NVIDIA H200`); empty for the CPU. */
  devices: string[];
  reason: string;
  /** Builds tried before this one, and why each was not taken. */
  rejected: Rejected[];
};

export type SelectDeps = {
  driver: () => Promise<DriverFacts>;
  check: (input: Parameters<typeof checkBuilds>[0]) => Promise<GpuCheck>;
  smoke: (dir: string) => Promise<SmokeResult>;
  /**
   * Builds from source when no GPU build can run; returns false when no toolkit is there (or
   * `--no-build`), so the CPU build is taken.
   */
  build: (arch: string) => Promise<boolean>;
};

/** The CPU build that `ffi/library.ts` loads by default. */
export const CPU_SPEC = "@node-llama-cpp/linux-x64@3.22.1";

/** Decides from `facts`; never throws for a host problem, it chooses the CPU build instead. */
export async function selectLlamaLibrary(
  facts: HostFacts,
  deps: SelectDeps,
  log: (line: string) => void = () => {},
): Promise<LibraryChoice> {
  const devices = facts.visible.map(describeGpu);
  const rejected: Rejected[] = [];
  const reject = (build: Rejected["build"], reason: string) => {
    rejected.push({ build, reason });
    log(`llama.cpp: not using ${build}: ${reason}`);
  };
  if (facts.libDir) {
    if (!libraryFiles(facts.libDir)) {
      reject("custom", `HEARTH_LLAMA_LIB_DIR=${facts.libDir} holds no llama.cpp library`);
    } else {
      const smoke = await deps.smoke(facts.libDir);
      if (smoke.ok) {
        const gpus = devices.length > 0 ? `; ${count(devices.length)} visible` : "";
        return {
          kind: "custom",
          build: "custom",
          dir: facts.libDir,
          devices,
          reason: `HEARTH_LLAMA_LIB_DIR${gpus}; smoke decode: ${smoke.reason}`,
          rejected,
        };
      }
      reject("custom", `HEARTH_LLAMA_LIB_DIR=${facts.libDir}: ${smoke.reason}`);
    }
  }
  if (facts.visible.length === 0) return cpu(noGpuReason(facts), rejected);

  const driver = await deps.driver();
  if (driver.error) log(`llama.cpp: GPU probe: ${driver.error}`);
  const gpus = facts.visible.map((g, i) => ({
    index: i,
    name: driver.devices[i]?.name ?? g.name,
    compute: driver.devices[i]?.compute,
  }));
  const input = { gpus, driverCuda: driver.cuda, whatIf: false, lazy: true };
  // Builds already rejected (by facts or smoke); each check judges the rest in order and stops
  // at the first usable one, so a package is fetched only when the builds before it cannot run.
  const skip = new Set<BuildName>();
  const firstThatRuns = async (): Promise<LibraryChoice | undefined> => {
    for (let pass = 0; pass < 4; pass++) {
      const check = await deps.check({ ...input, skip: [...skip] });
      let next: Candidate | undefined;
      for (const c of check.candidates) {
        if (c.build === "cpu") break;
        if (c.deferred || skip.has(c.build)) continue;
        skip.add(c.build);
        if (c.usable && c.dir) {
          next = c;
          break;
        }
        reject(c.build, c.reason);
      }
      if (!next) return undefined;
      const smoke = await deps.smoke(next.dir!);
      if (smoke.ok) {
        return {
          kind: "cuda",
          build: next.build,
          dir: next.dir!,
          devices,
          reason: `${next.reason}; smoke decode: ${smoke.reason}`,
          rejected,
        };
      }
      reject(next.build, `${next.reason}; but ${smoke.reason}`);
    }
    return undefined;
  };
  const first = await firstThatRuns();
  if (first) return first;
  // Nothing prebuilt or cached runs here (by the facts or by the smoke decode): build one.
  const archs = [...new Set(gpus.map((g) => g.compute).filter((c) => c))]
    .map((c) => c!.replace(".", ""));
  if (archs.length > 0 && await deps.build(archs.join(","))) {
    skip.delete("source");
    const built = await firstThatRuns();
    if (built) return built;
  }
  return cpu(
    `${count(devices.length)} visible but no GPU build can run here (see the lines above)`,
    rejected,
  );
}

/** The start-up log line naming the build and why it was chosen. */
export function libraryLogLine(choice: LibraryChoice): string {
  const on = choice.devices.length > 0
    ? ` on ${count(choice.devices.length)} (${choice.devices.join(", ")})`
    : "";
  switch (choice.build) {
    case "custom":
      return `llama.cpp: custom build in ${choice.dir}${on}: ${choice.reason}`;
    case "prebuilt-cuda13":
      return `llama.cpp: CUDA build ${CUDA_SPEC} in ${choice.dir}${on}: ${choice.reason}`;
    case "prebuilt-cuda12":
      return `llama.cpp: CUDA 12 fallback build in ${choice.dir}${on}: ${choice.reason}`;
    case "source":
      return `llama.cpp: source build in ${choice.dir}${on}: ${choice.reason}`;
    case "cpu":
      return `llama.cpp: CPU build ${CPU_SPEC}: ${choice.reason}`;
  }
}

/** The production dependencies: the real packages, source builds, driver probe and smoke. */
export function hostDeps(o: {
  cacheRoot: string;
  log?: (line: string) => void;
  build?: (arch: string) => Promise<boolean>;
}): SelectDeps {
  return {
    driver: probeDriver,
    check: (input) =>
      checkBuilds(input, {
        cuda13Dir: () => cudaLibraryDir({ cacheRoot: o.cacheRoot, log: o.log }),
        cuda12Dir: () => cuda12LibraryDir({ cacheRoot: o.cacheRoot, log: o.log }),
        sourceDirs: () => findCudaSourceBuilds(o.cacheRoot),
        probe: libraryProbe,
      }),
    smoke: (dir) => smokeTest(dir, { dataDir: o.cacheRoot }),
    build: o.build ?? (() => Promise.resolve(false)),
  };
}

/** Asks the dynamic loader (FFI), else `LD_LIBRARY_PATH` and the ld.so cache. */
export async function libraryProbe(lib: string): Promise<boolean> {
  try {
    return dlopenProbe(lib);
  } catch {
    return await ldconfigProbe(lib);
  }
}

/** Detects the host and selects (fetching, building and smoke-testing as needed). */
export async function chooseLlamaLibrary(o: {
  cacheRoot: string;
  log?: (line: string) => void;
  build?: (arch: string) => Promise<boolean>;
}): Promise<LibraryChoice> {
  return await selectLlamaLibrary(await detectHost(), hostDeps(o), o.log);
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

function cpu(reason: string, rejected: Rejected[]): LibraryChoice {
  return { kind: "cpu", build: "cpu", dir: prebuiltDir(), devices: [], reason, rejected };
}

function describeGpu(gpu: Gpu, cudaIndex: number): string {
  return `${cudaIndex}: ${gpu.name}`;
}

function count(n: number): string {
  return n === 1 ? "1 GPU" : `${n} GPUs`;
}

/** Why there is no GPU to use, in the words `serve` logs. */
export function noGpuReason(facts: HostFacts): string {
  if (facts.gpus.length === 0) return "no NVIDIA GPU found";
  return `CUDA_VISIBLE_DEVICES=${JSON.stringify(facts.cudaVisibleDevices)} hides ` +
    (facts.gpus.length === 1 ? "the GPU" : `all ${facts.gpus.length} GPUs`);
}
