/**
 * Test models shared by the suites: the tiny preset, written once per machine into a cache dir
 * (the same code path as the demo model), so parallel test files do not each write 33 MB.
 *
 * The cache is keyed by every file that writes a model: the directory is named after a hash of
 * `lib/gguf/` (the writer, presets, templates, the vocabulary asset) and `lib/models/demo.ts`, so
 * an edit to any of them, or a new file there, never reuses a model written by older code.
 *
 * @example
 * ```ts
 * import { tinyModelPath } from "./models.ts";
 * const gguf = await tinyModelPath();
 * ```
 * @module
 */
import { createHash } from "node:crypto";
import { ensureDemoModel } from "../../lib/models/demo.ts";
import { sourceCacheDir } from "./llama_source.ts";

/** What writes the test models: every file under these, by path and content. */
export const MODEL_SOURCES = [
  new URL("../../lib/gguf/", import.meta.url),
  new URL("../../lib/models/demo.ts", import.meta.url),
];

let key: string | undefined;

/** The test data dir, named after {@link modelSourcesKey} of this checkout. */
export function testDataDir(): string {
  key ??= modelSourcesKey(MODEL_SOURCES.map((u) => u.pathname));
  return `${sourceCacheDir()}/test-data/${key}`;
}

/**
 * A short hash of every file under `roots` (directories walked in name order), paths relative to
 * their root included, so a renamed, added or removed file changes it as an edit does.
 */
export function modelSourcesKey(roots: string[]): string {
  const h = createHash("sha256");
  const add = (path: string, name: string) => {
    const info = Deno.statSync(path);
    if (info.isDirectory) {
      const names = [...Deno.readDirSync(path)].map((e) => e.name).sort();
      for (const n of names) add(`${path}/${n}`, `${name}/${n}`);
      return;
    }
    const bytes = Deno.readFileSync(path);
    h.update(`${name}\0${bytes.length}\0`);
    h.update(bytes);
  };
  for (const [i, root] of roots.entries()) add(root.replace(/\/$/, ""), String(i));
  return h.digest("hex").slice(0, 12);
}

export function tinyModelPath(): Promise<string> {
  return ensureDemoModel(testDataDir());
}

/** The tiny preset with a tool-calling family's template and markers, written once per machine. */
export function chatFormatModelPath(
  format: "llama3" | "hermes" | "mistral" | "qwen3-coder",
  opts: { replyLength?: number } = {},
): Promise<string> {
  const ends = opts.replyLength ? `-ends${opts.replyLength}` : "";
  return cachedTinyModel(`${format}${ends}`, [], { chatFormat: format, ...opts });
}

/**
 * A variant of the tiny preset written once per machine (atomically, so parallel test files can
 * race for it) into {@link testDataDir}, whose name covers every file that writes models.
 * `_sources` named the files that define the variant when only they were hashed; the key now
 * covers them all, so callers may pass `[]`.
 */
export async function cachedTinyModel(
  name: string,
  _sources: string[],
  options: Record<string, unknown>,
): Promise<string> {
  const { makeModel } = await import("../../lib/gguf/mod.ts");
  const dir = `${testDataDir()}/models`;
  const path = `${dir}/hearth-tiny-${name}.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // first use
  }
  await Deno.mkdir(dir, { recursive: true });
  const tmp = `${path}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    await makeModel({ preset: "tiny", out: tmp, ...options });
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  return path;
}
