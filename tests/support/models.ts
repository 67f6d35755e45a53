/**
 * Test models shared by the suites: the tiny preset, written once per machine into a cache dir
 * (the same code path as the demo model), so parallel test files do not each write 33 MB.
 *
 * @example
 * ```ts
 * import { tinyModelPath } from "./models.ts";
 * const gguf = await tinyModelPath();
 * ```
 * @module
 */
import { ensureDemoModel } from "../../lib/models/demo.ts";
import { sourceCacheDir } from "./llama_source.ts";

export function testDataDir(): string {
  return `${sourceCacheDir()}/test-data`;
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
  // Named after the bytes of what defines the format (templates, marker tokens).
  return cachedTinyModel(`${format}${ends}`, ["chat_formats.ts", "reply_length.ts", "presets.ts"], {
    chatFormat: format,
    ...opts,
  });
}

/**
 * A variant of the tiny preset written once per machine (atomically, so parallel test files can
 * race for it), named after a hash of the `lib/gguf` sources that define it: an edit there never
 * reuses a stale model.
 */
export async function cachedTinyModel(
  name: string,
  sources: string[],
  options: Record<string, unknown>,
): Promise<string> {
  const { makeModel } = await import("../../lib/gguf/mod.ts");
  const dir = `${testDataDir()}/models`;
  const path = `${dir}/hearth-tiny-${name}-${await sourcesHash(sources)}.gguf`;
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

async function sourcesHash(sources: string[]): Promise<string> {
  const gguf = new URL("../../lib/gguf/", import.meta.url);
  const parts = await Promise.all(sources.map((f) => Deno.readFile(new URL(f, gguf))));
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
