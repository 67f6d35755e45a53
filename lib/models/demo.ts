/**
 * The built-in demo model: the `tiny` preset written once into the data dir, so `serve` with no
 * `--model` works on a fresh machine. Its weights are random: what it generates is noise.
 *
 * @example
 * ```ts
 * import { ensureDemoModel } from "./demo.ts";
 * const path = await ensureDemoModel("/home/me/.cache/hearth");
 * ```
 * @module
 */
import { makeModel } from "../gguf/mod.ts";

/** Bump when the tiny preset's bytes change, so an old cached file is not reused. */
export const DEMO_VERSION = 2;

/** Path of the demo model under `dataDir`, writing it first if needed (atomically). */
export async function ensureDemoModel(dataDir: string): Promise<string> {
  const dir = `${dataDir}/models`;
  const path = `${dir}/hearth-demo-tiny-v${DEMO_VERSION}.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // first use
  }
  await Deno.mkdir(dir, { recursive: true });
  // Write beside the target and rename, so a concurrent start never sees a half-written file.
  const tmp = `${path}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    await makeModel({ preset: "tiny", out: tmp });
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  return path;
}
