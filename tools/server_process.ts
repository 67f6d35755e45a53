/**
 * A server in a child process, for tests and benches: `startServer` runs `main.ts serve` (or the
 * single executable) on a loopback port chosen here, `superviseServer` any command that answers
 * `GET /health`; both wait until it does and stop it (SIGTERM, then SIGKILL) when done.
 *
 * `main.ts serve` runs with `--unstable-no-legacy-abort`, as `deno task serve` and `dist/hearth`
 * run it: `request.signal` aborts when a client goes away, not after every successful response.
 *
 * @example
 * ```ts
 * import { startServer } from "./server_process.ts";
 * await using srv = await startServer(["--model", path]);
 * await fetch(`${srv.url}/health`);
 * ```
 * @module
 */

export type RunningServer = {
  url: string;
  port: number;
  child: Deno.ChildProcess;
  stderr: () => string;
  stop: () => Promise<void>;
  [Symbol.asyncDispose]: () => Promise<void>;
};

/** A port that was free a moment ago on 127.0.0.1. */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/** The project's `main.ts`. */
export const mainTs = new URL("../main.ts", import.meta.url).pathname;

/** The Deno flags `main.ts serve` runs with (as in `deno task serve`). */
export const SERVE_DENO_FLAGS = ["-A", "--unstable-no-legacy-abort"];

/** How to start and recognise a server process. */
export type SpawnSpec = {
  cmd: string[];
  url: string;
  name?: string;
  env?: Record<string, string>;
  cwd?: string;
  timeoutMs?: number;
  /** Keep only the last this many characters of stderr (chatty servers). */
  keepStderr?: number;
};

/**
 * Spawns a server, waits until `GET {url}/health` answers 200, and returns a handle whose `stop`
 * sends SIGTERM, then SIGKILL after 5 s. A process that exits first fails with its stderr.
 */
export async function superviseServer(spec: SpawnSpec): Promise<RunningServer> {
  const name = spec.name ?? "server";
  const keep = spec.keepStderr ?? Infinity;
  const child = new Deno.Command(spec.cmd[0], {
    args: spec.cmd.slice(1),
    env: spec.env,
    cwd: spec.cwd,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let err = "";
  const pump = (async () => {
    const dec = new TextDecoder();
    for await (const chunk of child.stderr) {
      err += dec.decode(chunk, { stream: true });
      if (err.length > keep) err = err.slice(-keep);
    }
  })();
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });
  const stop = async () => {
    if (!exited) {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      const t = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
      }, 5000);
      await status;
      clearTimeout(t);
    }
    await pump;
  };
  const timeoutMs = spec.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  while (true) {
    if (exited) {
      await pump;
      throw new Error(`${name} exited before it was ready:\n${err}`);
    }
    try {
      const r = await fetch(`${spec.url}/health`);
      await r.body?.cancel();
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${name} not ready after ${timeoutMs} ms:\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const port = Number(new URL(spec.url).port);
  return {
    url: spec.url,
    port,
    child,
    stderr: () => err,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** Runs `main.ts serve` (or `cmd` when given, e.g. the compiled binary) with `args`. */
export function startServer(
  args: string[],
  opts: { cmd?: string[]; env?: Record<string, string>; timeoutMs?: number; cwd?: string } = {},
): Promise<RunningServer> {
  const port = freePort();
  const cmd = opts.cmd ?? [Deno.execPath(), "run", ...SERVE_DENO_FLAGS, mainTs];
  return superviseServer({
    cmd: [...cmd, "serve", "--host", "127.0.0.1", "--port", String(port), ...args],
    url: `http://127.0.0.1:${port}`,
    // A server is one isolate, so it keeps llama.cpp's log (for error detail) even when the
    // calling process itself runs with HEARTH_LLAMA_LOG=off.
    env: { HEARTH_LLAMA_LOG: "", ...opts.env },
    cwd: opts.cwd,
    timeoutMs: opts.timeoutMs,
  });
}
