/**
 * The tiny MTP test model (`makeModel({ preset: "tiny", mtpLayers: 1 })`, a glm4moe model with
 * one NextN head), written once per machine into the test cache dir like the tiny model.
 *
 * @example
 * ```ts
 * import { mtpModelPath } from "./mtp_model.ts";
 * const gguf = await mtpModelPath();
 * ```
 * @module
 */
import { testDataDir } from "./models.ts";

/** Path of the cached tiny MTP model, writing it first if needed (atomically). */
export async function mtpModelPath(): Promise<string> {
  const { makeModel } = await import("../../lib/gguf/mod.ts");
  const dir = `${testDataDir()}/models`;
  // Named after the bytes of the code that writes it, so an edit never reuses a stale model.
  const path = `${dir}/hearth-tiny-mtp-${await sourcesHash()}.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // first use
  }
  await Deno.mkdir(dir, { recursive: true });
  const tmp = `${path}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    await makeModel({ preset: "tiny", out: tmp, mtpLayers: 1 });
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  return path;
}

async function sourcesHash(): Promise<string> {
  const gguf = new URL("../../lib/gguf/", import.meta.url);
  const files = ["mtp.ts", "presets.ts"].map((f) => new URL(f, gguf));
  const parts = await Promise.all(files.map((f) => Deno.readFile(f)));
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
