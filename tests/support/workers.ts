/**
 * Real Hearth workers for the manager tests: `main.ts serve` on the tiny model with an
 * `--agents-config` whose agents are the fixture CLI (tests/fixtures/agents/bin/fake_agent.ts),
 * each on a fixed loopback port and data dir so it can be killed and started again as the same
 * worker (sessions persist in its data dir), on the CPU as every test server.
 *
 * @example
 * ```ts
 * import { startWorker, writeFakeAgents } from "./workers.ts";
 * const config = await writeFakeAgents(dir);
 * const w = await startWorker({ agentsConfig: config, dataDir: `${dir}/w1`, apiKey: "k" });
 * await w.kill(); // SIGKILL: a crash, not a shutdown
 * await w.restart(); // same port, same data dir
 * await w.stop();
 * ```
 * @module
 */
import { tinyModelPath } from "./models.ts";
import { childEnv, freePort, mainTs, type RunningServer, superviseServer } from "./server.ts";

const fakeAgent = new URL("../fixtures/agents/bin/fake_agent.ts", import.meta.url).pathname;

/**
 * Writes an agents config into `dir` with two jsonl agents: `fake` answers every prompt with
 * `echo: PROMPT`; `hang` never answers and writes its pid to `hang.pid` in `dir`.
 */
export async function writeFakeAgents(dir: string): Promise<{ path: string; hangPidFile: string }> {
  const transcript = `${dir}/echo.jsonl`;
  await Deno.writeTextFile(
    transcript,
    '{"type":"output","text":"echo: {{prompt}}"}\n{"type":"result"}\n',
  );
  const hangPidFile = `${dir}/hang.pid`;
  const agent = (args: string[]) => ({
    provider: "jsonl",
    command: Deno.execPath(),
    args: ["run", "-A", fakeAgent, ...args],
  });
  const path = `${dir}/agents.json`;
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      roots: [dir],
      agents: {
        fake: agent(["--transcript", transcript, "--delay-ms", "1"]),
        hang: agent(["--mode", "hang", "--pid-file", hangPidFile]),
      },
    }),
  );
  return { path, hangPidFile };
}

export type WorkerProcess = {
  url: string;
  port: number;
  /** Ends the process with SIGKILL (no shutdown path runs). */
  kill(): Promise<void>;
  /** Starts it again on the same port with the same data dir. */
  restart(): Promise<void>;
  /** SIGTERM (then SIGKILL), if it runs. */
  stop(): Promise<void>;
  stderr(): string;
  [Symbol.asyncDispose](): Promise<void>;
};

export async function startWorker(opts: {
  agentsConfig: string;
  dataDir: string;
  apiKey?: string;
  env?: Record<string, string>;
}): Promise<WorkerProcess> {
  const model = await tinyModelPath();
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const spawn = () =>
    superviseServer({
      name: `worker :${port}`,
      cmd: [
        Deno.execPath(),
        "run",
        "-A",
        mainTs,
        "serve",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        String(port),
        "--threads",
        "1",
        "--max-batch",
        "1",
        "--max-seq-len",
        "256",
        "--agents-config",
        opts.agentsConfig,
        "--data-dir",
        opts.dataDir,
        ...(opts.apiKey ? ["--api-key", opts.apiKey] : []),
      ],
      url,
      env: childEnv({ env: { HEARTH_LLAMA_LOG: "", ...opts.env } }),
      keepStderr: 20_000,
    });
  let current: RunningServer | undefined = await spawn();
  let log = "";
  const stop = async () => {
    const srv = current;
    current = undefined;
    if (!srv) return;
    await srv.stop();
    log += srv.stderr();
  };
  return {
    url,
    port,
    async kill() {
      const srv = current;
      if (!srv) return;
      srv.child.kill("SIGKILL");
      await srv.child.status;
      await stop();
    },
    async restart() {
      await stop();
      current = await spawn();
    },
    stop,
    stderr: () => log + (current?.stderr() ?? ""),
    [Symbol.asyncDispose]: stop,
  };
}
