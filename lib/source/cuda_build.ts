/**
 * Building llama.cpp from the source bundle of this release: with CUDA for GPU hosts where no
 * prebuilt build can run (the prebuilt CUDA 13 package has no sm_90 code and PTX too new for a
 * CUDA 13.0 driver; see docs/ARCHITECTURE.md, "GPU hosts"), and without it for the CPU source build
 * the tests serve through `HEARTH_LLAMA_LIB_DIR` (`buildCpuFromSource`), so the source-build path
 * is proven on every machine. A CUDA result goes to `<data-dir>/llama-cuda-src-<arch>-<source
 * hash>/lib`, where `serve` finds it as the "source" candidate; the compiler log stays in
 * `.../build/build.log`. `hearth build-cuda` (`lib/cli/build_cuda.ts`) is its command line, and
 * `serve` calls `buildFromSource` itself when no other GPU build passes.
 *
 * @example
 * ```ts
 * import { buildFromSource, cudaSourceBuildDir } from "./cuda_build.ts";
 * const dir = cudaSourceBuildDir("/var/lib/hearth", "90");
 * const b = await buildFromSource({ dir, cuda: { arch: "90", nvcc: "/usr/local/cuda/bin/nvcc" } });
 * console.log(b.lib); // .../llama-cuda-src-90-de3ff815ea7d/lib
 * ```
 * @module
 */
import { cmakeBuild, exists, PREBUILT_COMPATIBLE_FLAGS } from "./cmake.ts";
import { llamaSourceDir, SOURCE_HASH, sourceCacheDir } from "./llama_source.ts";

export type CudaBuildOptions = {
  /** `native` (the GPUs present), or compute capabilities: `90`, `80,90`. */
  arch: string;
  dataDir: string;
  jobs?: number;
  dryRun: boolean;
};

export const CPU_TARGETS = ["llama", "ggml", "ggml-cpu"];
export const CUDA_TARGETS = [...CPU_TARGETS, "ggml-cuda"];
/** What Hearth loads from a source build: `ffi/library.ts` opens the first two by these names. */
export const CPU_BUILD_LIBS = ["libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so"];
export const CUDA_BUILD_LIBS = [...CPU_BUILD_LIBS, "libggml-cuda.so"];
/** Written last into `lib/`: a directory without it is a build that never finished. */
const COMPLETE = ".complete";

/** `<dataDir>/llama-cuda-src-<arch>-<source hash>` (arch `80,90` is written `80-90`). */
export function cudaSourceBuildDir(dataDir: string, arch: string): string {
  return `${dataDir}/llama-cuda-src-${arch.replaceAll(",", "-")}-${SOURCE_HASH}`;
}

/** The CPU-only source build the tests use: `<source cache>/cpu-src-build-<source hash>`. */
export function cpuSourceBuildDir(): string {
  return `${sourceCacheDir()}/cpu-src-build-${SOURCE_HASH}`;
}

/** The `lib/` directories of finished CUDA source builds of this source in `dataDir`. */
export async function findCudaSourceBuilds(dataDir: string): Promise<string[]> {
  const prefix = "llama-cuda-src-";
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dataDir)) {
      if (!e.isDirectory || !e.name.startsWith(prefix) || !e.name.endsWith(`-${SOURCE_HASH}`)) {
        continue;
      }
      const lib = `${dataDir}/${e.name}/lib`;
      if (await exists(`${lib}/${COMPLETE}`)) out.push(lib);
    }
  } catch {
    // no data dir yet
  }
  return out.sort();
}

export type Toolkit = {
  nvcc?: string;
  /** The toolkit root nvcc belongs to (where cuBLAS is looked for first). */
  home?: string;
  cublas: boolean;
  /** What is missing, in words (empty when a build can start). */
  missing: string[];
};

/**
 * nvcc (`CUDACXX`, PATH, the toolkit's usual homes) and cuBLAS (`cublas_v2.h` and
 * `libcublas.so` in the toolkit root, `/usr` or the ld.so cache), as CMake's FindCUDAToolkit
 * will look for them.
 */
export async function findToolkit(
  env: Record<string, string | undefined> = Deno.env.toObject(),
): Promise<Toolkit> {
  const nvcc = await findNvcc(env);
  const homes = new Set<string>();
  if (nvcc) {
    const real = await Deno.realPath(nvcc.includes("/") ? nvcc : await which(nvcc) ?? nvcc)
      .catch(() => nvcc);
    homes.add(real.replace(/\/bin\/[^/]+$/, ""));
    // A wrapper script (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) names its toolkit.
    const text = await Deno.readTextFile(real).catch(() => "");
    const target = text.length < 4096 ? text.match(/(\/\S+)\/bin\/nvcc\b/)?.[1] : undefined;
    if (target) homes.add(target);
  }
  // CUDA_HOME / CUDA_PATH name the toolkit; without them, its usual homes are searched.
  const named = [env.CUDA_HOME, env.CUDA_PATH].filter((h): h is string => !!h);
  for (const h of named.length ? named : ["/usr/local/cuda", "/usr"]) homes.add(h);
  let cublas = false;
  for (const home of homes) {
    const header = await exists(`${home}/include/cublas_v2.h`) ||
      await exists(`${home}/targets/x86_64-linux/include/cublas_v2.h`);
    const lib = await exists(`${home}/lib64/libcublas.so`) ||
      await exists(`${home}/targets/x86_64-linux/lib/libcublas.so`) ||
      await exists(`${home}/lib/x86_64-linux-gnu/libcublas.so`);
    if (header && lib) {
      cublas = true;
      break;
    }
  }
  const missing: string[] = [];
  if (!nvcc) {
    missing.push(
      env.CUDACXX
        ? `nvcc: CUDACXX=${env.CUDACXX} does not exist`
        : "nvcc (the CUDA toolkit's compiler: install the CUDA 13 toolkit and put its bin/ on " +
          "PATH, or set CUDACXX to nvcc's path)",
    );
  }
  if (!cublas) {
    missing.push(
      `cuBLAS (cublas_v2.h and libcublas.so; looked in ${[...homes].join(", ")}: install ` +
        "libcublas-dev-13-0, or the toolkit's cuBLAS, and set CUDA_HOME to its root)",
    );
  }
  return { nvcc, home: [...homes][0], cublas, missing };
}

/**
 * The CUDA compiler: `CUDACXX` when set (CMake's own variable, so it alone decides), else nvcc on
 * PATH, else the toolkit's usual homes, which installers do not add to PATH.
 */
export async function findNvcc(
  env: Record<string, string | undefined> = Deno.env.toObject(),
): Promise<string | undefined> {
  if (env.CUDACXX) return await exists(env.CUDACXX) ? env.CUDACXX : undefined;
  const onPath = await which("nvcc", env.PATH);
  if (onPath) return onPath;
  const homes = [env.CUDA_HOME, env.CUDA_PATH, "/usr/local/cuda"].filter((h): h is string => !!h);
  for (const home of homes) {
    if (await exists(`${home}/bin/nvcc`)) return `${home}/bin/nvcc`;
  }
  return undefined;
}

async function which(tool: string, path = Deno.env.get("PATH") ?? ""): Promise<string | undefined> {
  for (const dir of path.split(":").filter(Boolean)) {
    if (await exists(`${dir}/${tool}`)) return `${dir}/${tool}`;
  }
  return undefined;
}

/**
 * The CMake flags of a source build: backends as loadable modules (as the prebuilt has them),
 * the CPU backend for the AVX2/FMA/F16C baseline (GGML_NATIVE is refused with GGML_BACKEND_DL),
 * and an `$ORIGIN` run path so `libllama.so` finds `libggml.so` beside it when loaded on its own.
 * With `cuda`, the CUDA backend for those architectures.
 */
export function sourceBuildFlags(cuda?: { arch: string; nvcc: string }): string[] {
  return [
    ...PREBUILT_COMPATIBLE_FLAGS,
    "-DGGML_NATIVE=OFF",
    // The later -D wins: put back the run path that CMAKE_SKIP_RPATH removes.
    "-DCMAKE_SKIP_RPATH=OFF",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    ...(cuda
      ? [
        "-DGGML_CUDA=ON",
        `-DCMAKE_CUDA_ARCHITECTURES=${cuda.arch.replaceAll(",", ";")}`,
        ...(cuda.nvcc === "nvcc" ? [] : [`-DCMAKE_CUDA_COMPILER=${cuda.nvcc}`]),
      ]
      : []),
  ];
}

/** Copies the built libraries into `libDir`, each by rename so a running server keeps its copy. */
export async function installLibraries(
  binDir: string,
  libDir: string,
  libs: string[],
): Promise<void> {
  await Deno.mkdir(libDir, { recursive: true });
  for (const lib of libs) {
    if (!await exists(`${binDir}/${lib}`)) {
      throw new Error(`the build produced no ${binDir}/${lib}`);
    }
    const tmp = `${libDir}/.${lib}.tmp-${Deno.pid}`;
    await Deno.copyFile(`${binDir}/${lib}`, tmp);
    await Deno.rename(tmp, `${libDir}/${lib}`);
  }
  await Deno.writeTextFile(`${libDir}/${COMPLETE}`, `${SOURCE_HASH}\n`);
}

export type Progress = { step: number; total: number; seconds: number; log: string };

/** ninja's `[12/353] Building ...` or make's `[ 42%] Building ...`. */
export function parseProgress(line: string): { step: number; total: number } | undefined {
  const n = line.match(/^\[(\d+)\/(\d+)\]/);
  if (n) return { step: Number(n[1]), total: Number(n[2]) };
  const p = line.match(/^\[\s*(\d+)%\]/);
  if (p) return { step: Number(p[1]), total: 100 };
  return undefined;
}

export type SourceBuild = { lib: string; cached: boolean; seconds: number; log: string };

/** Builds into `<dir>/build` and installs into `<dir>/lib`, unless `lib/` is complete already. */
export async function buildFromSource(o: {
  dir: string;
  cuda?: { arch: string; nvcc: string };
  jobs?: number;
  onProgress?: (p: Progress) => void;
}): Promise<SourceBuild> {
  const lib = `${o.dir}/lib`;
  const log = `${o.dir}/build/build.log`;
  if (await exists(`${lib}/${COMPLETE}`)) return { lib, cached: true, seconds: 0, log };
  const t0 = performance.now();
  await cmakeBuild({
    what: o.cuda ? "llama.cpp CUDA" : "llama.cpp",
    src: await llamaSourceDir(),
    dir: `${o.dir}/build`,
    flags: sourceBuildFlags(o.cuda),
    targets: o.cuda ? CUDA_TARGETS : CPU_TARGETS,
    jobs: o.jobs,
    onLine: (line) => {
      const p = parseProgress(line);
      if (p) o.onProgress?.({ ...p, seconds: (performance.now() - t0) / 1000, log });
    },
  });
  await installLibraries(`${o.dir}/build/bin`, lib, o.cuda ? CUDA_BUILD_LIBS : CPU_BUILD_LIBS);
  return { lib, cached: false, seconds: (performance.now() - t0) / 1000, log };
}

/** The CPU source build of the tests (and `bench/gpu.sh --cpu`), cached. */
export async function buildCpuFromSource(
  onProgress?: (p: Progress) => void,
): Promise<SourceBuild> {
  return await buildFromSource({ dir: cpuSourceBuildDir(), onProgress });
}

/**
 * Progress on a terminal: one line rewritten in place (step N/M, elapsed, the log); elsewhere a
 * line at every tenth of the way, so a CI log shows it is alive without thousands of lines.
 */
export function progressPrinter(what: string): (p: Progress) => void {
  const tty = Deno.stderr.isTerminal();
  let lastDecile = -1;
  const enc = new TextEncoder();
  return (p) => {
    const text = `${what}: step ${p.step}/${p.total}, ${p.seconds.toFixed(0)} s (log: ${p.log})`;
    if (tty) Deno.stderr.writeSync(enc.encode(`\r\x1b[K${text}${p.step === p.total ? "\n" : ""}`));
    else {
      const decile = Math.floor((p.step / p.total) * 10);
      if (decile > lastDecile) {
        lastDecile = decile;
        Deno.stderr.writeSync(enc.encode(`${text}\n`));
      }
    }
  };
}
