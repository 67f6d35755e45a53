/**
 * `deno task build:cuda`: builds llama.cpp with CUDA from the source bundle of this release, for
 * GPU hosts where the prebuilt `@node-llama-cpp/linux-x64-cuda` does not fit (another CUDA
 * version, a GPU its kernels do not cover). It needs nvcc and the CUDA toolkit, and prints the
 * `HEARTH_LLAMA_LIB_DIR=...` line to start Hearth with.
 *
 * @example
 * ```sh
 * deno task build:cuda                      # for the GPUs in this machine
 * deno task build:cuda --arch "80;90" --out /opt/llama-cuda --jobs 16
 * deno task build:cuda --dry-run            # prints the commands, runs nothing
 * HEARTH_LLAMA_LIB_DIR=/opt/llama-cuda/lib deno task serve --model ...
 * ```
 * @module
 */
import { cmakeBuild, exists, hasTool, PREBUILT_COMPATIBLE_FLAGS } from "./cmake.ts";
import { llamaSourceDir, sourceCacheDir } from "./llama_source.ts";

export type CudaBuildOptions = {
  /** `CMAKE_CUDA_ARCHITECTURES`: `native` (the GPUs present), `all-major`, `80;90`, ... */
  arch: string;
  out: string;
  jobs?: number;
  dryRun: boolean;
};

export const CUDA_TARGETS = ["llama", "ggml", "ggml-cpu", "ggml-cuda"];
/** What Hearth loads from the result: `ffi/library.ts` opens the first two by these names. */
export const CUDA_BUILD_LIBS = [
  "libllama.so",
  "libggml.so",
  "libggml-base.so",
  "libggml-cpu.so",
  "libggml-cuda.so",
];

const USAGE = "usage: deno task build:cuda [--arch ARCHS] [--out DIR] [--jobs N] [--dry-run]";

/** Parses argv; throws a one-line message for a bad flag. */
export function parseCudaBuildArgs(args: string[]): CudaBuildOptions {
  const opts: CudaBuildOptions = {
    arch: "native",
    out: `${sourceCacheDir()}/cuda-build`,
    dryRun: false,
  };
  for (let i = 0; i < args.length; i++) {
    const [flag, inline] = args[i].split(/=(.*)/s);
    const value = () => {
      const v = inline ?? args[++i];
      if (v === undefined || v === "") throw new Error(`${flag} needs a value (${USAGE})`);
      return v;
    };
    if (flag === "--arch") opts.arch = value().replaceAll(",", ";");
    else if (flag === "--out") opts.out = value().replace(/\/$/, "");
    else if (flag === "--jobs") {
      const v = value();
      if (!/^[1-9]\d*$/.test(v)) throw new Error(`--jobs must be a positive integer, got ${v}`);
      opts.jobs = Number(v);
    } else if (flag === "--dry-run" && inline === undefined) opts.dryRun = true;
    else throw new Error(`unknown flag ${args[i]} (${USAGE})`);
  }
  return opts;
}

/**
 * The CUDA compiler: `CUDACXX` when set (CMake's own variable, so it alone decides), else nvcc on
 * PATH, else the toolkit's usual homes, which installers do not add to PATH.
 */
export async function findNvcc(
  env: Record<string, string | undefined> = Deno.env.toObject(),
): Promise<string | undefined> {
  if (env.CUDACXX) return await exists(env.CUDACXX) ? env.CUDACXX : undefined;
  if (await hasTool("nvcc")) return "nvcc";
  const homes = [env.CUDA_HOME, env.CUDA_PATH, "/usr/local/cuda"].filter((h): h is string => !!h);
  for (const home of homes) {
    if (await exists(`${home}/bin/nvcc`)) return `${home}/bin/nvcc`;
  }
  return undefined;
}

/** The CMake flags of a CUDA build. */
export function cudaBuildFlags(arch: string, nvcc: string): string[] {
  return [
    ...PREBUILT_COMPATIBLE_FLAGS,
    "-DGGML_CUDA=ON",
    // GGML_NATIVE=ON is refused with GGML_BACKEND_DL ("GGML_NATIVE is not compatible with
    // GGML_BACKEND_DL"): the CPU backend is built for the AVX2/FMA/F16C baseline instead, with
    // the feature check that keeps it off CPUs without them. The GPU does the model's work.
    "-DGGML_NATIVE=OFF",
    `-DCMAKE_CUDA_ARCHITECTURES=${arch}`,
    // This build is loaded on its own rather than beside the prebuilt, so libllama.so must find
    // libggml.so next to it: put back the $ORIGIN run path that CMAKE_SKIP_RPATH removes (the
    // later -D wins).
    "-DCMAKE_SKIP_RPATH=OFF",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    ...(nvcc === "nvcc" ? [] : [`-DCMAKE_CUDA_COMPILER=${nvcc}`]),
  ];
}

/** Copies the built libraries into `libDir`, each by rename so a running server keeps its copy. */
export async function installLibraries(binDir: string, libDir: string): Promise<void> {
  await Deno.mkdir(libDir, { recursive: true });
  for (const lib of CUDA_BUILD_LIBS) {
    if (!await exists(`${binDir}/${lib}`)) {
      throw new Error(`the build produced no ${binDir}/${lib}`);
    }
    const tmp = `${libDir}/.${lib}.tmp-${Deno.pid}`;
    await Deno.copyFile(`${binDir}/${lib}`, tmp);
    await Deno.rename(tmp, `${libDir}/${lib}`);
  }
}

/** Runs (or, with `dryRun`, prints) the build; returns the `HEARTH_LLAMA_LIB_DIR` value. */
export async function buildCuda(opts: CudaBuildOptions, nvcc: string | undefined): Promise<string> {
  const buildDir = `${opts.out}/build`;
  const libDir = `${opts.out}/lib`;
  const flags = cudaBuildFlags(opts.arch, nvcc ?? "nvcc");
  const jobs = opts.jobs ?? navigator.hardwareConcurrency;
  if (opts.dryRun) {
    // The source is only fetched for a real build; this is where llamaSourceDir() puts it.
    const src = `${sourceCacheDir()}/llama.cpp-3.22.1`;
    const ninja = await hasTool("ninja") ? ["-G", "Ninja"] : [];
    console.log(`# dry run: nothing is fetched or built`);
    console.log(`# nvcc: ${nvcc ?? "not found (a real build stops here, exit status 2)"}`);
    console.log(shell(["cmake", "-S", src, "-B", buildDir, ...ninja, ...flags]));
    console.log(shell(["cmake", "--build", buildDir, `-j${jobs}`, "--target", ...CUDA_TARGETS]));
    console.log(`# then copy ${CUDA_BUILD_LIBS.join(" ")} from ${buildDir}/bin to ${libDir}`);
    return libDir;
  }
  const src = await llamaSourceDir();
  console.error(
    `building llama.cpp with CUDA (architectures ${opts.arch}) in ${buildDir}; this takes a ` +
      `long time (compiler output goes to ${buildDir}/build.log)`,
  );
  await cmakeBuild({
    what: "llama.cpp CUDA",
    src,
    dir: buildDir,
    flags,
    targets: CUDA_TARGETS,
    jobs,
  });
  await installLibraries(`${buildDir}/bin`, libDir);
  return libDir;
}

/** Quotes for a POSIX shell where needed, so printed commands can be pasted. */
function shell(argv: string[]): string {
  return argv.map((a) => /^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`)
    .join(" ");
}

async function main(args: string[]): Promise<number> {
  let opts: CudaBuildOptions;
  try {
    opts = parseCudaBuildArgs(args);
  } catch (e) {
    console.error((e as Error).message);
    return 2;
  }
  const nvcc = await findNvcc();
  if (!nvcc && !opts.dryRun) {
    const cudacxx = Deno.env.get("CUDACXX");
    console.error(
      cudacxx
        ? `cannot build llama.cpp with CUDA: CUDACXX=${cudacxx} does not exist`
        : "cannot build llama.cpp with CUDA: nvcc not found (install the CUDA 13 toolkit and " +
          "put its bin/ on PATH, or set CUDACXX to nvcc's path)",
    );
    return 2;
  }
  try {
    console.log(`HEARTH_LLAMA_LIB_DIR=${await buildCuda(opts, nvcc)}`);
    return 0;
  } catch (e) {
    console.error((e as Error).message);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
