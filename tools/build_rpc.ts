/**
 * `deno task build:rpc`: builds ggml's RPC backend (`libggml-rpc.so`) from the llama.cpp source
 * bundle of the prebuilt release, as a module that loads beside the prebuilt libraries. The
 * prebuilt package has no RPC backend, and llama.cpp's RPC is the engine Hearth uses to split one
 * model over several machines (`hearth rpc-server`, `--master-addr`). About 15 seconds on two
 * cores; the result is cached under `~/.cache/hearth-src/rpc-build` (`HEARTH_SRC_CACHE`).
 *
 * @example
 * ```sh
 * deno task build:rpc      # prints the library's path
 * ```
 * @module
 */
import { llamaSourceDir, rpcBuildDir, sourceCacheDir } from "../lib/source/llama_source.ts";
import { RPC_LIB } from "../ffi/rpc_library.ts";
import { cmakeBuild, exists, PREBUILT_COMPATIBLE_FLAGS } from "../lib/source/cmake.ts";

export type RpcBuild = { lib: string; cached: boolean; seconds: number };

/** Builds the backend unless the cache has it. */
export async function buildRpc(): Promise<RpcBuild> {
  const dir = rpcBuildDir();
  const lib = `${dir}/bin/${RPC_LIB}`;
  if (await exists(lib)) return { lib, cached: true, seconds: 0 };
  const t0 = performance.now();
  // Build in a scratch directory and move it into place: a build cut half-way (or two at once,
  // as parallel test setups may start) never leaves a directory that looks finished.
  await Deno.mkdir(sourceCacheDir(), { recursive: true });
  const scratch = await Deno.makeTempDir({ dir: sourceCacheDir(), prefix: "rpc-build-" });
  try {
    const log = await cmakeBuild({
      what: "ggml-rpc",
      src: await llamaSourceDir(),
      dir: scratch,
      // No CPU backend: the prebuilt one serves; GGML_NATIVE off so the module runs on any x86-64.
      flags: [...PREBUILT_COMPATIBLE_FLAGS, "-DGGML_RPC=ON", "-DGGML_CPU=OFF", "-DGGML_NATIVE=OFF"],
      targets: ["ggml-rpc"],
    });
    if (!await exists(`${scratch}/bin/${RPC_LIB}`)) {
      throw new Error(`the ggml-rpc build finished but wrote no ${RPC_LIB} (log: ${log})`);
    }
    try {
      await Deno.rename(scratch, dir);
    } catch (e) {
      if (!await exists(lib)) throw e; // another build won the race; its copy is as good
      await Deno.remove(scratch, { recursive: true });
    }
  } catch (e) {
    await Deno.remove(scratch, { recursive: true }).catch(() => {});
    throw e;
  }
  return { lib, cached: false, seconds: (performance.now() - t0) / 1000 };
}

if (import.meta.main) {
  try {
    const b = await buildRpc();
    console.error(
      b.cached
        ? `build:rpc: ${b.lib} is already built`
        : `build:rpc: built ${b.lib} in ${b.seconds.toFixed(0)} s`,
    );
    console.log(b.lib);
  } catch (e) {
    console.error(`build:rpc: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
