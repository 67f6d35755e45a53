/**
 * `hearth manager --workers URL,...`: a separate process, on its own port (8002), that watches
 * several Hearth workers (one {@link watchWorker} each) and serves their status and latest messages
 * at `GET /api/manager/instances` (live: `GET /api/manager/events`), with the web UI's manager page
 * at `/`. Flags are validated with Zod; a bad one prints one line (`hearth: ...`) and exits with
 * status 2. SIGINT and SIGTERM close the worker streams, stop polling and shut the server down.
 *
 * `main.ts` hands it the `manager` subcommand's argv and the HTTP routes (routes/manager.ts), so
 * lib/ never imports routes/.
 *
 * @example
 * ```sh
 * deno run -A main.ts manager --workers http://127.0.0.1:8000,http://127.0.0.1:8010 --port 8002
 * curl http://127.0.0.1:8002/api/manager/instances
 * ```
 * @module
 */
import { z } from "zod";
import { type FlagSpec as ArgvFlag, parseFlags } from "../cli/argv.ts";
import { watchWorker, type WorkerWatcher } from "./instances.ts";

export type ManagerConfig = {
  workers: string[];
  port: number;
  host: string;
  pollMs: number;
  workerKey?: string;
  apiKey?: string;
  help: boolean;
};

const int = (min: number, max: number) =>
  z.string().regex(/^\d+$/, "must be a whole number").transform(Number).pipe(
    z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`),
  );
const text = z.string().min(1, "must not be empty");

/** One worker base URL: http(s), no credentials, query or fragment; trailing slashes dropped. */
const workerUrl = z.string().transform((raw, ctx) => {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    ctx.addIssue({ code: "custom", message: `${JSON.stringify(raw)} is not a URL` });
    return z.NEVER;
  }
  const problem = u.protocol !== "http:" && u.protocol !== "https:"
    ? "is not an http(s) URL"
    : u.username || u.password
    ? "must not carry credentials (use --worker-key)"
    : u.search || u.hash
    ? "must not have a query or fragment"
    : undefined;
  if (problem) {
    ctx.addIssue({ code: "custom", message: `${raw} ${problem}` });
    return z.NEVER;
  }
  return `${u.origin}${u.pathname.replace(/\/+$/, "")}`;
});

const workerList = z.string().transform((s) => s.split(",").map((w) => w.trim()))
  .pipe(z.array(z.string().min(1, "has an empty entry").pipe(workerUrl)))
  .refine((list) => new Set(list).size === list.length, "names a worker twice");

type FlagSpec = ArgvFlag<keyof ManagerConfig>;

const FLAGS: FlagSpec[] = [
  { key: "workers", names: ["--workers"], schema: workerList, meta: "URL,URL,..." },
  { key: "port", names: ["--port"], schema: int(1, 65535), meta: "PORT" },
  { key: "host", names: ["--host"], schema: text, meta: "ADDR" },
  { key: "pollMs", names: ["--poll-ms"], schema: int(100, 3_600_000), meta: "MS" },
  { key: "workerKey", names: ["--worker-key"], schema: text, meta: "KEY" },
  { key: "apiKey", names: ["--api-key"], schema: text, meta: "KEY" },
  { key: "help", names: ["-h", "--help"] },
];

export function managerHelpText(): string {
  return [
    "Usage: hearth manager --workers URL,URL,... [flags]",
    "",
    "Watches Hearth workers (their /api/events stream, /api/sessions and /api/messages/latest)",
    "and serves GET /api/manager/instances with each worker's status and latest message.",
    "",
    "  --workers URL,URL,...   worker base URLs, http(s) (required)",
    "  --port PORT             manager HTTP port (8002)",
    "  --host ADDR             bind address (127.0.0.1)",
    "  --poll-ms MS            poll interval for sessions and latest message (5000)",
    "  --worker-key KEY        sent to the workers as Authorization: Bearer KEY",
    "  --api-key KEY           required on the manager's routes (not /health)",
    "  -h, --help              show this help",
  ].join("\n");
}

export type ManagerArgsResult = { ok: true; config: ManagerConfig } | {
  ok: false;
  message: string;
};

/** Parses `manager` argv (`--flag value` or `--flag=value`); never exits. */
export function parseManagerArgs(argv: string[]): ManagerArgsResult {
  const r = parseFlags(
    argv,
    FLAGS,
    { port: 8002, host: "127.0.0.1", pollMs: 5000, help: false },
    "manager --help",
  );
  if (!r.ok) return r;
  const config = r.values;
  if (!config.help && !config.workers) {
    return { ok: false, message: "--workers is required (comma-separated worker URLs)" };
  }
  return { ok: true, config: config as ManagerConfig };
}

/**
 * Builds the manager's HTTP handler over the watchers. Given by the caller (`main.ts` passes
 * `managerRoutes` from routes/manager.ts) so this module never reaches up into routes/. `close`,
 * when present, ends long-lived responses (event streams) so the server can shut down.
 */
export type ManagerRoutes = (
  watchers: readonly WorkerWatcher[],
  opts: { apiKey?: string },
) => { fetch: (req: Request) => Response | Promise<Response>; close?: () => void };

export type ManagerOptions = Omit<ManagerConfig, "help"> & {
  routes: ManagerRoutes;
  /** Reconnect backoff bounds for the worker streams (default 1000 -> 30000 ms). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Status-change lines (default: stderr). */
  log?: (line: string) => void;
};

export type RunningManager = {
  url: string;
  watchers: readonly WorkerWatcher[];
  /** Stops the watchers and the HTTP server; safe to call twice. */
  stop(): Promise<void>;
  /** Settles when the server has shut down. */
  finished: Promise<void>;
};

/** Starts the HTTP server, then the watchers (in this process; no signal handling). */
export function startManager(opts: ManagerOptions): RunningManager {
  const log = opts.log ?? ((line: string) => console.error(`hearth: ${line}`));
  // Filled once the port is bound, so a refused port leaves no watcher running.
  const watchers: WorkerWatcher[] = [];
  const app = opts.routes(watchers, { apiKey: opts.apiKey });
  const server = Deno.serve({ hostname: opts.host, port: opts.port, onListen() {} }, app.fetch);
  for (const url of opts.workers) {
    watchers.push(watchWorker({
      url,
      workerKey: opts.workerKey,
      pollMs: opts.pollMs,
      minBackoffMs: opts.minBackoffMs,
      maxBackoffMs: opts.maxBackoffMs,
      log,
    }));
  }
  const { hostname, port } = server.addr;
  const url = `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}`;
  log(`manager listening on ${url}, watching ${watchers.length} worker(s)`);
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      await Promise.all(watchers.map((w) => w.stop()));
      // No new connections from here; then the open event streams end, which lets it finish.
      const down = server.shutdown();
      app.close?.();
      await down;
    })();
  return { url, watchers, stop, finished: server.finished };
}

function die(message: string): never {
  console.error(`hearth: ${message}`);
  Deno.exit(2);
}

/** The `manager` subcommand: parses `argv`, serves until SIGINT/SIGTERM, then returns. */
export async function runManager(argv: string[], routes: ManagerRoutes): Promise<void> {
  const parsed = parseManagerArgs(argv);
  if (!parsed.ok) die(parsed.message);
  const { help, ...config } = parsed.config;
  if (help) {
    console.log(managerHelpText());
    return;
  }
  let manager: RunningManager;
  try {
    manager = startManager({ ...config, routes });
  } catch (e) {
    die(`cannot listen on ${config.host}:${config.port}: ${(e as Error).message}`);
  }
  const onSignal = () => void manager.stop();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    await manager.finished;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}
