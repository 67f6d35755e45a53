/**
 * The llama.cpp source that matches the prebuilt library: `node-llama-cpp@3.22.1` ships it as a
 * git bundle (`llama/gitRelease.bundle`). Hearth builds from it what the prebuilt package lacks
 * (`deno task build:rpc`, `deno task build:cuda`), and the tests and benchmarks read it (header for
 * the layout test, tokenizer vectors, a peer `llama-server`). It is fetched with `npm pack` (so
 * npm's cache serves repeats) and cloned once into a cache directory.
 *
 * @example
 * ```ts
 * import { llamaSourceDir } from "./llama_source.ts";
 * const src = await llamaSourceDir(); // .../llama.cpp with include/llama.h
 * ```
 * @module
 */

export const NODE_LLAMA_CPP = "node-llama-cpp@3.22.1";
/**
 * The bundle's commit (`git rev-parse HEAD` of the clone, first 12 digits): names what is built
 * from this source, so a build of another release is never taken for this one's.
 */
export const SOURCE_HASH = "de3ff815ea7d";

/** Where `deno task build:rpc` builds ggml's RPC backend (`bin/libggml-rpc.so`). */
export function rpcBuildDir(): string {
  return `${sourceCacheDir()}/rpc-build`;
}

/** Cache root: `HEARTH_SRC_CACHE`, else `~/.cache/hearth-src`. */
export function sourceCacheDir(): string {
  return Deno.env.get("HEARTH_SRC_CACHE") ??
    `${Deno.env.get("HOME") ?? "/tmp"}/.cache/hearth-src`;
}

async function run(cmd: string, args: string[], cwd?: string): Promise<void> {
  const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr).slice(-500)}`,
    );
  }
}

/** Returns the cloned llama.cpp source directory, fetching it on first use. */
export async function llamaSourceDir(): Promise<string> {
  const root = sourceCacheDir();
  const dir = `${root}/llama.cpp-3.22.1`;
  try {
    await Deno.stat(`${dir}/include/llama.h`);
    return dir;
  } catch {
    // not there yet
  }
  await Deno.mkdir(root, { recursive: true });
  const work = await Deno.makeTempDir({ dir: root, prefix: "fetch-" });
  try {
    await run("npm", ["pack", NODE_LLAMA_CPP, "--silent", "--pack-destination", work]);
    const tgz = [...Deno.readDirSync(work)].find((e) => e.name.endsWith(".tgz"));
    if (!tgz) throw new Error(`npm pack ${NODE_LLAMA_CPP} wrote no tarball`);
    await run("tar", ["xzf", tgz.name, "package/llama/gitRelease.bundle"], work);
    await run("git", ["clone", "--quiet", "package/llama/gitRelease.bundle", "src"], work);
    try {
      await Deno.rename(`${work}/src`, dir);
    } catch (e) {
      // Another process may have won the race; its copy is as good as ours.
      try {
        await Deno.stat(`${dir}/include/llama.h`);
      } catch {
        throw e;
      }
    }
  } finally {
    await Deno.remove(work, { recursive: true });
  }
  return dir;
}

if (import.meta.main) console.log(await llamaSourceDir());
