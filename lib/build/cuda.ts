/**
 * `hearth build-cuda` (also `deno task build:cuda`): builds llama.cpp with CUDA from the source
 * bundle of this release, for GPU hosts where no prebuilt build can run (DESIGN's GPU contract:
 * the prebuilt CUDA 13 package has no sm_90 code and PTX too new for a CUDA 13.0 driver). The
 * result goes to `<data-dir>/llama-cuda-src-<arch>-<source hash>/lib`, where `serve` finds it as
 * the "source" candidate; the compiler log stays in `.../build/build.log`. Without nvcc or cuBLAS
 * it says which is missing and exits 2.
 *
 * The same flags minus CUDA make the CPU source build the tests serve through
 * `HEARTH_LLAMA_LIB_DIR` (`buildCpuFromSource`), so the source-build path is proven on every
 * machine, not only on a GPU host.
 *
 * @example
 * ```sh
 * hearth build-cuda                        # for the GPUs in this machine
 * hearth build-cuda --arch 90 --jobs 16    # sm_90 (H100/H200), 16 compiler jobs
 * hearth build-cuda --dry-run              # prints the commands, builds nothing
 * ```
 * @module
 */
import { cmakeBuild, exists, hasTool, PREBUILT_COMPATIBLE_FLAGS } from "./cmake.ts";
import { llamaSourceDir, SOURCE_HASH, sourceCacheDir } from "./llama_source.ts";
import { z } from "zod";
import { type FlagSpec, parseFlags } from "../cli/argv.ts";

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

const USAGE = "hearth build-cuda [--arch native|90|80,90] [--jobs N] [--data-dir DIR] [--dry-run]";

const FLAGS: FlagSpec<keyof CudaBuildOptions>[] = [
  {
    key: "arch",
    names: ["--arch"],
    meta: "native|90|80,90",
    schema: z.string().transform((v) => v.replaceAll(";", ",")).refine(
      (v) => v === "native" || /^\d{2,3}[af]?(,\d{2,3}[af]?)*$/.test(v),
      "must be native or compute capabilities like 90 or 80,90",
    ),
  },
  { key: "jobs", names: ["--jobs"], meta: "N", schema: z.coerce.number().int().min(1) },
  {
    key: "dataDir",
    names: ["--data-dir"],
    meta: "DIR",
    schema: z.string().min(1).transform((d) => d.replace(/\/$/, "")),
  },
  { key: "dryRun", names: ["--dry-run"] },
];

/** Parses argv; throws a one-line message for a bad flag. */
export function parseCudaBuildArgs(args: string[], defaultDataDir: string): CudaBuildOptions {
  const defaults = { arch: "native", dataDir: defaultDataDir, dryRun: false };
  const r = parseFlags(args, FLAGS, defaults, USAGE);
  if (!r.ok) throw new Error(r.message);
  return r.values as CudaBuildOptions;
}

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

/** Prints the commands a build would run (nothing is fetched or built). */
function printDryRun(dir: string, arch: string, nvcc: string | undefined, jobs: number): void {
  const src = `${sourceCacheDir()}/llama.cpp-3.22.1`;
  const flags = sourceBuildFlags({ arch, nvcc: nvcc ?? "nvcc" });
  console.log(`# dry run: nothing is fetched or built`);
  console.log(`# nvcc: ${nvcc ?? "not found (a real build stops here, exit status 2)"}`);
  console.log(shell(["cmake", "-S", src, "-B", `${dir}/build`, "-G", "Ninja", ...flags]));
  console.log(
    shell(["cmake", "--build", `${dir}/build`, `-j${jobs}`, "--target", ...CUDA_TARGETS]),
  );
  console.log(`# then copy ${CUDA_BUILD_LIBS.join(" ")} from ${dir}/build/bin to ${dir}/lib`);
}

/** Quotes for a POSIX shell where needed, so printed commands can be pasted. */
function shell(argv: string[]): string {
  return argv.map((a) => /^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`)
    .join(" ");
}

/**
 * The CLI. `nativeArch` answers `--arch native` (the visible GPUs' compute capabilities, e.g.
 * `90`); it is passed in so this module does not reach the GPU probe. Returns the exit status.
 */
export async function runBuildCuda(
  args: string[],
  o: { defaultDataDir: string; nativeArch: () => Promise<string | undefined> },
): Promise<number> {
  let opts: CudaBuildOptions;
  try {
    opts = parseCudaBuildArgs(args, o.defaultDataDir);
  } catch (e) {
    console.error(`hearth: ${(e as Error).message}`);
    return 2;
  }
  let arch = opts.arch;
  if (arch === "native") {
    const found = await o.nativeArch();
    if (!found) {
      console.error(
        "hearth: build-cuda --arch native: no NVIDIA GPU to read the architecture from; name " +
          "it, e.g. --arch 90 (H100/H200), 80 (A100), 89 (L4/L40), 86 (A10/RTX 30xx)",
      );
      return 2;
    }
    arch = found;
  }
  const dir = cudaSourceBuildDir(opts.dataDir, arch);
  const jobs = opts.jobs ?? navigator.hardwareConcurrency;
  const toolkit = await findToolkit();
  if (opts.dryRun) {
    printDryRun(dir, arch, toolkit.nvcc, jobs);
    return 0;
  }
  if (toolkit.missing.length > 0) {
    console.error(
      `hearth: cannot build llama.cpp with CUDA: missing ${toolkit.missing.join("; and ")}`,
    );
    return 2;
  }
  for (const tool of ["cmake", "c++", "git", "npm"]) {
    if (!await hasTool(tool)) {
      console.error(`hearth: cannot build llama.cpp with CUDA: \`${tool}\` is not on PATH`);
      return 2;
    }
  }
  console.error(
    `hearth: building llama.cpp for sm_${arch.replaceAll(",", ", sm_")} with ${jobs} jobs into ` +
      `${dir} (about 3 minutes with 16 jobs, much longer with few cores; log: ` +
      `${dir}/build/build.log)`,
  );
  try {
    const b = await buildFromSource({
      dir,
      cuda: { arch, nvcc: toolkit.nvcc! },
      jobs,
      onProgress: progressPrinter("build-cuda"),
    });
    console.error(
      b.cached
        ? `hearth: ${b.lib} is already built; serve uses it on this GPU`
        : `hearth: built ${b.lib} in ${b.seconds.toFixed(0)} s; serve uses it on this GPU`,
    );
    console.log(b.lib);
    return 0;
  } catch (e) {
    console.error(`hearth: ${(e as Error).message}`);
    return 1;
  }
}
