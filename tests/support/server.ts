/**
 * Starts a real `hearth serve` process on a loopback port chosen here, waits for `/health`, and
 * stops it (SIGTERM, then SIGKILL) when the test is done.
 *
 * @example
 * ```ts
 * import { startServer } from "./server.ts";
 * await using srv = await startServer(["--model", path]);
 * await fetch(`${srv.url}/health`);
 * ```
 * @module
 */
import { tinyModelPath } from "./models.ts";

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

const root = new URL("../..", import.meta.url).pathname;

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
  const cmd = opts.cmd ?? [Deno.execPath(), "run", "-A", `${root}main.ts`];
  return superviseServer({
    cmd: [...cmd, "serve", "--host", "127.0.0.1", "--port", String(port), ...args],
    url: `http://127.0.0.1:${port}`,
    // A server is one isolate, so it keeps llama.cpp's log (for error detail) even when the test
    // process itself runs with HEARTH_LLAMA_LOG=off.
    env: { HEARTH_LLAMA_LOG: "", ...opts.env },
    cwd: opts.cwd,
    timeoutMs: opts.timeoutMs,
  });
}

/** `hearth serve` on the tiny model: 2 sequences of 256 tokens, 2 threads, then `extra`. */
export async function startTinyServer(extra: string[] = []): Promise<RunningServer> {
  return startServer([
    "--model",
    await tinyModelPath(),
    "--max-batch",
    "2",
    "--max-seq-len",
    "256",
    "--threads",
    "2",
    ...extra,
  ]);
}

/** A non-streaming greedy `/v1/completions` of `maxTokens` with EOS ignored; throws unless 200. */
export async function greedyCompletion(
  url: string,
  maxTokens: number,
): Promise<{ text: string; completionTokens: number }> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      prompt: "Hello",
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
    }),
  });
  if (r.status !== 200) throw new Error(`POST /v1/completions: ${r.status} ${await r.text()}`);
  const body = await r.json();
  return { text: body.choices[0].text, completionTokens: body.usage.completion_tokens };
}

/** An unlabelled counter or gauge from `GET /metrics` (NaN when absent). */
export async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\S+)`, "m"))?.[1]);
}

/** Runs a command to completion and returns its exit code and output. */
export async function runCommand(
  cmd: string[],
  opts: { env?: Record<string, string>; cwd?: string } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd[0], {
    args: cmd.slice(1),
    env: opts.env,
    cwd: opts.cwd,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

export const mainTs = `${root}main.ts`;

/** Runs `main.ts ARGS...` to completion, with llama.cpp's log off unless `env` says otherwise. */
export function runMain(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return runCommand([Deno.execPath(), "run", "-A", mainTs, ...args], {
    env: { HEARTH_LLAMA_LOG: "off", ...env },
  });
}
