/**
 * llama.cpp's own `llama-server` as a benchmark peer: built once from the llama.cpp source that
 * matches Hearth's prebuilt library (`llamaSourceDir()`), cached under
 * `~/.cache/hearth-src/llama-server-build`, and started on a loopback port with the same model
 * and sequence count as the Hearth server under test. It is yardstick material only: nothing of it
 * is part of Hearth or committed.
 *
 * @example
 * ```ts
 * import { buildLlamaServer, startLlamaServer } from "./peer.ts";
 * const build = await buildLlamaServer(); // ~5 minutes on 2 cores the first time, then cached
 * await using peer = await startLlamaServer(build.bin, "model.gguf", {
 *   ctx: 8192,
 *   parallel: 32,
 *   threads: 2,
 * });
 * await fetch(`${peer.url}/v1/completions`, { method: "POST", body: "..." });
 * ```
 * @module
 */
import { llamaSourceDir, sourceCacheDir } from "../lib/source/llama_source.ts";
import { freePort, superviseServer } from "../tools/server_process.ts";
import { cmakeBuild, exists } from "../lib/source/cmake.ts";

export type PeerBuild = {
  bin: string;
  /** First line of `llama-server --version`, e.g. `version: 1 (de3ff81)`. */
  version: string;
  /** Seconds the build took in this call; 0 when the cached binary was used. */
  buildSeconds: number;
  cached: boolean;
};

/** The flags the issue asks for; `GGML_NATIVE` because the peer should be at its best here. */
const CMAKE_FLAGS = [
  "-DCMAKE_BUILD_TYPE=Release",
  "-DLLAMA_BUILD_TESTS=OFF",
  "-DLLAMA_OPENSSL=OFF",
  "-DLLAMA_BUILD_UI=OFF",
  "-DLLAMA_USE_PREBUILT_UI=OFF",
  "-DGGML_NATIVE=ON",
];

export function peerBuildDir(): string {
  return `${sourceCacheDir()}/llama-server-build`;
}

export async function peerVersion(bin: string): Promise<string> {
  const out = await new Deno.Command(bin, { args: ["--version"], stdout: "piped", stderr: "piped" })
    .output();
  // It prints to stderr in this version; read both so a change of stream does not matter.
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return text.split("\n").find((l) => l.startsWith("version")) ?? text.trim().split("\n")[0];
}

/**
 * Returns the `llama-server` binary, building it first when the cache has none. Throws with the
 * reason (and the log's tail) when a tool is missing or the build fails.
 */
export async function buildLlamaServer(): Promise<PeerBuild> {
  const dir = peerBuildDir();
  const bin = `${dir}/bin/llama-server`;
  if (await exists(bin)) {
    return { bin, version: await peerVersion(bin), buildSeconds: 0, cached: true };
  }
  const src = await llamaSourceDir();
  console.error(`bench: building llama-server in ${dir} (once, about 5 minutes on 2 cores)...`);
  const t0 = performance.now();
  const log = await cmakeBuild({
    what: "llama-server",
    src,
    dir,
    flags: CMAKE_FLAGS,
    targets: ["llama-server"],
    jobs: 2,
  });
  const buildSeconds = (performance.now() - t0) / 1000;
  if (!await exists(bin)) throw new Error(`the build finished but ${bin} is missing (log: ${log})`);
  return { bin, version: await peerVersion(bin), buildSeconds, cached: false };
}

/** llama-server's command line; everything not named here stays at its defaults. */
export function peerArgs(
  model: string,
  ctx: number,
  parallel: number,
  threads: number,
  port: number,
): string[] {
  return [
    ...["-m", model, "-c", String(ctx), "-np", String(parallel), "-t", String(threads)],
    ...["--no-webui", "--host", "127.0.0.1", "--port", String(port)],
  ];
}

export type RunningPeer = {
  url: string;
  child: Deno.ChildProcess;
  stderr: () => string;
  stop: () => Promise<void>;
  [Symbol.asyncDispose]: () => Promise<void>;
};

export type PeerOptions = {
  /** Total context (`-c`), split evenly over `parallel` slots as llama-server does. */
  ctx: number;
  parallel: number;
  threads: number;
  timeoutMs?: number;
};

/** Starts `llama-server` on a free loopback port and waits until `/health` answers 200. */
export function startLlamaServer(bin: string, model: string, o: PeerOptions): Promise<RunningPeer> {
  const port = freePort();
  return superviseServer({
    name: "llama-server",
    cmd: [bin, ...peerArgs(model, o.ctx, o.parallel, o.threads, port)],
    url: `http://127.0.0.1:${port}`,
    timeoutMs: o.timeoutMs ?? 120_000,
    // llama-server logs every request: keep only the tail.
    keepStderr: 20_000,
  });
}

if (import.meta.main) {
  const b = await buildLlamaServer();
  console.log(JSON.stringify(b, null, 2));
}
