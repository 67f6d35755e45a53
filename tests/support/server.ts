/**
 * Real `hearth serve` processes for tests: the spawning and supervising (`superviseServer`,
 * `freePort`) live in `tools/server_process.ts`, shared with the benches; this adds the tiny-model
 * server and small request helpers.
 *
 * Every process started here runs on the CPU path, on any host: `CUDA_VISIBLE_DEVICES=-1` hides
 * the GPUs from it (CUDA's own rule, which `serve` and `gpu-check` follow), so it neither fetches
 * a CUDA package nor loads one, and what a test asserts about the CPU build, its memory budget or
 * its timing holds on a GPU host too. A test about the GPU opts in with `gpu: true`.
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
import {
  mainTs,
  type RunningServer,
  startServer as startAnyServer,
} from "../../tools/server_process.ts";

export {
  freePort,
  mainTs,
  type RunningServer,
  type SpawnSpec,
  superviseServer,
} from "../../tools/server_process.ts";

/** What hides every GPU from a process (CUDA's rule: the list ends at an index it cannot use). */
export const CPU_ONLY_ENV: Readonly<Record<string, string>> = { CUDA_VISIBLE_DEVICES: "-1" };

/** `env` for a child: the GPUs hidden unless `gpu`, what the caller gave on top. */
export function childEnv(
  opts: { env?: Record<string, string>; gpu?: boolean } = {},
): Record<string, string> {
  return opts.gpu ? { ...opts.env } : { ...CPU_ONLY_ENV, ...opts.env };
}

/**
 * Runs `main.ts serve` (or `cmd`, e.g. the compiled binary) with `args` on a free port, on the
 * CPU unless `gpu` is set (then with the GPUs this test process sees).
 */
export function startServer(
  args: string[],
  opts: {
    cmd?: string[];
    env?: Record<string, string>;
    timeoutMs?: number;
    cwd?: string;
    gpu?: boolean;
  } = {},
): Promise<RunningServer> {
  return startAnyServer(args, { ...opts, env: childEnv(opts) });
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

/** Runs a command to completion (GPUs hidden unless `gpu`); returns its exit code and output. */
export async function runCommand(
  cmd: string[],
  opts: { env?: Record<string, string>; cwd?: string; gpu?: boolean } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd[0], {
    args: cmd.slice(1),
    env: childEnv(opts),
    cwd: opts.cwd,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Runs `main.ts ARGS...` to completion, with llama.cpp's log off unless `env` says otherwise. */
export function runMain(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return runCommand([Deno.execPath(), "run", "-A", mainTs, ...args], {
    env: { HEARTH_LLAMA_LOG: "off", ...env },
  });
}
