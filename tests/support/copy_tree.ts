/**
 * A test's own copy of a shared cache directory: hard links when `dest` is on the same
 * filesystem (instant, no space), else a real copy. `cp -al` alone fails across filesystems
 * (a TMPDIR on tmpfs, the cache on disk), which is how a fresh machine often lays them out.
 *
 * @example
 * ```ts ignore
 * import { linkOrCopyTree } from "./copy_tree.ts";
 * await linkOrCopyTree(gpuDataDir(), `${work}/gpu-data`); // "link" or "copy"
 * ```
 * @module
 */

/** Copies `src` to `dest` (which must not exist) as hard links, else as files; says which. */
export async function linkOrCopyTree(src: string, dest: string): Promise<"link" | "copy"> {
  const link = await cp(["-al", src, dest]);
  if (link.ok) return "link";
  // A partial tree of links may be left behind (EXDEV comes per file): start again from nothing.
  await Deno.remove(dest, { recursive: true }).catch(() => {});
  const copy = await cp(["-a", src, dest]);
  if (!copy.ok) {
    throw new Error(`cannot copy ${src} to ${dest}: cp -al: ${link.err}; cp -a: ${copy.err}`);
  }
  return "copy";
}

async function cp(args: string[]): Promise<{ ok: boolean; err: string }> {
  const out = await new Deno.Command("cp", { args, stdout: "null", stderr: "piped" }).output();
  return { ok: out.success, err: new TextDecoder().decode(out.stderr).trim() };
}
