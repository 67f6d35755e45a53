/**
 * `serve`'s decision on a GPU host where no prebuilt llama.cpp can run: build one from the bundled
 * source when a CUDA toolkit is there (minutes, said up front), unless `--no-build`.
 *
 * @example
 * ```ts ignore
 * const built = await buildOnStart("90", config, (l) => console.error(`hearth: ${l}`));
 * ```
 * @module
 */
import type { ServeConfig } from "./flags.ts";
import {
  buildFromSource,
  cudaSourceBuildDir,
  findToolkit,
  progressPrinter,
} from "../source/cuda_build.ts";

/**
 * `serve` on a GPU host where no prebuilt can run: build from source when a toolkit is there
 * (minutes, said up front), unless `--no-build`. False when nothing was built. `env` is where
 * the toolkit is looked for (`CUDACXX`, `CUDA_HOME`, `PATH`): the process's, or a test's.
 */
export async function buildOnStart(
  arch: string,
  config: ServeConfig,
  log: (line: string) => void,
  env: Record<string, string | undefined> = Deno.env.toObject(),
): Promise<boolean> {
  if (config.noBuild) {
    log(`no GPU build of llama.cpp can run here and --no-build is set: serving on the CPU`);
    return false;
  }
  const toolkit = await findToolkit(env);
  if (toolkit.missing.length > 0) {
    log(
      `no GPU build of llama.cpp can run here and none can be built: missing ` +
        `${toolkit.missing.join("; and ")}`,
    );
    return false;
  }
  const jobs = navigator.hardwareConcurrency;
  log(
    `no prebuilt llama.cpp can run on this GPU: building one from source for sm_${arch} with ` +
      `${jobs} jobs (about 3 minutes on 16 cores, longer on fewer; once per data dir; ` +
      `--no-build skips it)`,
  );
  try {
    const b = await buildFromSource({
      dir: cudaSourceBuildDir(config.dataDir, arch),
      cuda: { arch, nvcc: toolkit.nvcc! },
      jobs,
      onProgress: progressPrinter("hearth: build-cuda"),
    });
    log(`built ${b.lib} in ${b.seconds.toFixed(0)} s`);
    return true;
  } catch (e) {
    log(`the source build failed: ${(e as Error).message}`);
    return false;
  }
}
