/**
 * A prefill as slow as a test needs, on any host: the environment that preloads
 * `tests/fixtures/native/slow_compute.c` into a server, so every graph compute waits `ms` first.
 * A prompt of N ubatches (512 tokens each) then takes at least N x `ms`, whether the host is a
 * loaded 2-core machine or a GPU server; nothing in the product knows. Needs a C compiler (`cc`),
 * as the FFI layout test does; the shim is built once per machine, named after its source.
 *
 * @example
 * ```ts ignore
 * import { slowComputeEnv } from "./slow_compute.ts";
 * import { startServer } from "./server.ts";
 * await using srv = await startServer(["--model", path], { env: await slowComputeEnv(1000) });
 * ```
 * @module
 */
import { sourceCacheDir } from "./llama_source.ts";

const source = new URL("../fixtures/native/slow_compute.c", import.meta.url);

/** `LD_PRELOAD` and the delay for a server whose every graph compute waits `ms` first. */
export async function slowComputeEnv(ms: number): Promise<Record<string, string>> {
  return { LD_PRELOAD: await slowComputeLibrary(), SLOW_COMPUTE_MS: String(ms) };
}

/** The shim's shared library, compiled on first use (atomically: parallel files may race). */
export async function slowComputeLibrary(): Promise<string> {
  const text = await Deno.readFile(source);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", text));
  const hash = [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
  const dir = `${sourceCacheDir()}/test-native`;
  const lib = `${dir}/slow_compute-${hash}.so`;
  try {
    await Deno.stat(lib);
    return lib;
  } catch {
    // first use
  }
  await Deno.mkdir(dir, { recursive: true });
  const tmp = `${lib}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  const cc = await new Deno.Command("cc", {
    args: ["-shared", "-fPIC", "-O2", "-o", tmp, source.pathname, "-ldl"],
    stderr: "piped",
  }).output();
  if (!cc.success) {
    await Deno.remove(tmp).catch(() => {});
    throw new Error(`cc slow_compute.c failed: ${new TextDecoder().decode(cc.stderr)}`);
  }
  await Deno.rename(tmp, lib);
  return lib;
}
