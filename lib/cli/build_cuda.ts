/**
 * `hearth build-cuda [--arch native|90|80,90] [--jobs N] [--data-dir DIR] [--dry-run]`: the
 * command-line face of the CUDA source build (`lib/source/cuda_build.ts`), which writes
 * `<data-dir>/llama-cuda-src-<arch>-<source hash>/lib` where `serve` looks for it.
 *
 * @example
 * ```ts
 * import { runBuildCuda } from "./build_cuda.ts";
 * const status = await runBuildCuda(["--arch", "90", "--dry-run"], {
 *   defaultDataDir: "/tmp/hearth",
 *   nativeArch: () => Promise.resolve(undefined),
 * });
 * ```
 * @module
 */
import { z } from "zod";
import { type FlagSpec, parseFlags } from "./argv.ts";
import { hasTool } from "../source/cmake.ts";
import { sourceCacheDir } from "../source/llama_source.ts";
import {
  buildFromSource,
  CUDA_BUILD_LIBS,
  CUDA_TARGETS,
  type CudaBuildOptions,
  cudaSourceBuildDir,
  findToolkit,
  progressPrinter,
  sourceBuildFlags,
} from "../source/cuda_build.ts";

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
