/**
 * The benches' models, written once per machine into `<source cache>/bench/`
 * (`~/.cache/hearth-src/bench/` unless `HEARTH_SRC_CACHE` says otherwise): the `small` preset
 * (Q8_0) every server figure is measured on, the `tiny` preset (F32) of the `--peer` rows where
 * serving overhead shows, and the context-free tiny MTP model of the speculative decoding rows.
 *
 * @example
 * ```ts
 * import { benchModel, mtpModelPath, tinyBenchModel } from "./support/models.ts";
 * const small = await benchModel();
 * const tiny = await tinyBenchModel();
 * const mtp = await mtpModelPath();
 * ```
 * @module
 */
import { makeModel, type MakeModelOptions } from "../../lib/gguf/mod.ts";
import { sourceCacheDir } from "../../lib/source/llama_source.ts";

/** Where the benches keep the models they write once. */
export function benchDataDir(): string {
  return `${sourceCacheDir()}/bench`;
}

/** `file` in the bench data dir, written by `makeModel(options)` unless it is there already. */
async function writeOnce(
  file: string,
  options: Omit<MakeModelOptions, "out">,
  what: string,
): Promise<string> {
  const dir = benchDataDir();
  const path = `${dir}/${file}`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // first use
  }
  await Deno.mkdir(dir, { recursive: true });
  console.error(`bench: writing ${what} (once)...`);
  await makeModel({ ...options, out: `${path}.tmp` });
  await Deno.rename(`${path}.tmp`, path);
  return path;
}

/** The `small` preset (SmolLM2-135M shapes, Llama-3 vocabulary, Q8_0). */
export function benchModel(): Promise<string> {
  return writeOnce("hearth-small-q8_0.gguf", { preset: "small" }, "the small preset");
}

/**
 * The `tiny` preset as written (F32): two 64-wide layers in front of the 128k-vocabulary output,
 * so a decode step costs about what a GPU's does and the serving overhead per token shows.
 */
export function tinyBenchModel(): Promise<string> {
  return writeOnce("hearth-tiny-f32.gguf", { preset: "tiny" }, "the tiny preset");
}

/** The presets the inference bench measures, by name. */
export const BENCH_PRESETS: Record<string, () => Promise<string>> = {
  small: benchModel,
  tiny: tinyBenchModel,
};

/**
 * The tiny preset with one NextN head (`mtpLayers: 1`, a `glm4moe` model whose trunk ignores
 * context, so its greedy text falls into a cycle). Named after a hash of the `lib/gguf` sources
 * that define it, so an edit there never reuses a stale model.
 */
export async function mtpModelPath(): Promise<string> {
  const gguf = new URL("../../lib/gguf/", import.meta.url);
  const parts = await Promise.all(
    ["mtp.ts", "presets.ts"].map((f) => Deno.readFile(new URL(f, gguf))),
  );
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", concat(parts)));
  const hash = [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return writeOnce(
    `hearth-tiny-mtp-${hash}.gguf`,
    { preset: "tiny", mtpLayers: 1 },
    "the tiny MTP model",
  );
}

function concat(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all;
}
