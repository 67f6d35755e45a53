/**
 * Where ggml's RPC backend (`libggml-rpc.so`) is: the one file lookup the runtime needs from the
 * builds (`deno task build:rpc` writes it; the prebuilt package has none).
 *
 * @example
 * ```ts
 * import { findRpcLibrary } from "./rpc_library.ts";
 * const lib = await findRpcLibrary(["/opt/llama/lib", "/home/me/.cache/hearth-src/rpc-build/bin"]);
 * ```
 * @module
 */

export const RPC_LIB = "libggml-rpc.so";

/** The first of `dirs` holding the RPC backend, as a path; undefined when none does. */
export async function findRpcLibrary(dirs: string[]): Promise<string | undefined> {
  for (const d of dirs) {
    const p = `${d}/${RPC_LIB}`;
    try {
      if ((await Deno.stat(p)).isFile) return p;
    } catch { /* not there */ }
  }
  return undefined;
}
