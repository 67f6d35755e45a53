/**
 * Hearth's MCP clients: one connection per server of `--mcp-config`, over stdio or streamable HTTP
 * (`npm:@modelcontextprotocol/sdk`), with each server's tools exposed as `SERVER_TOOL` for the chat
 * tool loop to offer and call.
 *
 * Servers are outside Hearth's control, so the registry is built to survive them: every server is
 * started in the background with a start timeout (so {@link McpRegistry.ready} never hangs), a server
 * that fails to start or dies has its tools withdrawn at once and is reconnected with exponential
 * backoff, calls have a timeout and a result-size cap, and no failure of a server escapes as an
 * exception or an unhandled rejection (fatal in Deno). Secrets (`env` values, `headers` values, URL
 * credentials and query values) are redacted from every log line, state and error text.
 *
 * A stdio server gets a minimal environment — the SDK's safe defaults (`HOME`, `LOGNAME`, `PATH`,
 * `SHELL`, `TERM`, `USER`) plus `LANG` — with its configured `env` on top; never the whole server
 * environment, which may hold `HF_TOKEN` and the like.
 *
 * @example
 * ```ts
 * import { parseMcpConfig, startMcpRegistry } from "./registry.ts";
 * const file = "mcp.json";
 * const mcp = startMcpRegistry(parseMcpConfig(await Deno.readTextFile(file), file), {
 *   log: (line) => console.error(line), // e.g. `mcp: server "calc" ready: 3 tools`
 * });
 * await mcp.ready(); // every server connected or failed once
 * console.log(mcp.states(), mcp.tools("calc")?.map((t) => t.name)); // ["calc_add", ...]
 * const r = await mcp.call("calc_add", { a: 2, b: 3 }); // { text: "5", isError: false, ... }
 * await mcp.close();
 * ```
 * @module
 */
// The SDK's `./*` export maps `x.js` to types at `x.js.d.ts`, which do not exist, so without these
// @ts-types hints the checker silently types the whole SDK as `any`.
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
// @ts-types="@modelcontextprotocol/sdk/client/stdio"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport";
// @ts-types="@modelcontextprotocol/sdk/types"
import {
  ErrorCode,
  McpError,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type { McpConfig, McpServerConfig } from "./config.ts";
import { type Redactor, redactorFor } from "./redact.ts";
import { capUtf8, formatToolResult } from "./result.ts";

export { loadMcpConfig, parseMcpConfig, SERVER_NAME } from "./config.ts";
export type { McpConfig, McpServerConfig } from "./config.ts";

/** One tool of one server, as offered to the model. */
export type McpTool = {
  /** The configured server name. */
  server: string;
  /** The exposed name, `${server}_${tool}` sanitised to [A-Za-z0-9_-], at most 64 chars, unique. */
  name: string;
  /** The server's own name for the tool (what `tools/call` is sent). */
  toolName: string;
  description?: string;
  /** JSON Schema of the arguments (an object schema; `{type: "object"}` when the server gave none). */
  inputSchema: Record<string, unknown>;
};

/** A server's state, as `GET /health` shows it. Never holds a secret. */
export type McpServerState = {
  name: string;
  transport: "stdio" | "http";
  /**
   * `connecting`: first attempt under way; `ready`: tools offered; `failed`: down, waiting to retry
   * (see `nextRetryAt`); `reconnecting`: a retry is under way; `closed`: the registry was closed.
   */
  status: "connecting" | "ready" | "failed" | "reconnecting" | "closed";
  /** Number of tools currently offered (0 unless ready). */
  tools: number;
  /** The last failure, redacted; kept while reconnecting so the cause stays visible. */
  error?: string;
  /** When the current (or last) connection became ready. */
  connectedAt?: string;
  /** Reconnection attempts made so far (0 while the first connection holds). */
  restarts: number;
  /** When the next reconnection attempt is due (status `failed` only). */
  nextRetryAt?: string;
  /** The URL without credentials or query values (http only). */
  url?: string;
  /** The server process while connected (stdio only). */
  pid?: number;
};

export type McpCallResult = { text: string; isError: boolean; truncated: boolean };

export type McpRegistry = {
  /** Resolves when every server has either connected or failed once (never hangs: per-server start timeout). */
  ready(): Promise<void>;
  states(): McpServerState[];
  /** Undefined when no server has that name; [] when it is configured but not ready (tools withdrawn). */
  tools(server: string): McpTool[] | undefined;
  /** Every tool of every ready server (what the web UI chat attaches). */
  allTools(): McpTool[];
  /** The configured server names, in config order. */
  names(): string[];
  /** Calls an exposed tool name. Never throws for tool/server failures: returns isError with a clear text (timeout, server down, unknown tool, cap). Honours signal. */
  call(
    name: string,
    args: Record<string, unknown>,
    opts?: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<McpCallResult>;
  /** Closes every client and stops every stdio process; idempotent. */
  close(): Promise<void>;
};

export type McpRegistryOptions = {
  /** Per-call timeout (default 60000 ms). */
  callTimeoutMs?: number;
  /** Result text cap in UTF-8 bytes (default 64 KiB); longer results are cut with a note. */
  maxResultBytes?: number;
  /** Time a server has to start, initialise and list its tools (default 15000 ms). */
  startTimeoutMs?: number;
  /** Receives one line per event (`mcp: server "calc" ready: 3 tools`); default console.error. */
  log?: (line: string) => void;
  /** First reconnection delay (default 1000 ms); doubles per failure up to maxBackoffMs. */
  minBackoffMs?: number;
  /** Longest reconnection delay (default 30000 ms). */
  maxBackoffMs?: number;
};

export const DEFAULT_CALL_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RESULT_BYTES = 64 * 1024;
export const DEFAULT_START_TIMEOUT_MS = 15_000;
const CLIENT_INFO = { name: "hearth", version: "1.0.0" };
/** A dead HTTP server shows up only as failing requests; a ping this long tells it from a glitch. */
const PING_TIMEOUT_MS = 5_000;
/** Stderr lines and transport errors logged per connection, so a chatty server cannot flood the log. */
const NOISE_LOG_LINES = 50;
/** Stderr lines kept to explain a start failure or an exit. */
const STDERR_TAIL_LINES = 5;
const MAX_TOOL_PAGES = 1000;

type Conn = {
  name: string;
  config: McpServerConfig;
  redactor: Redactor;
  state: McpServerState;
  tools: McpTool[];
  /** Bumped whenever a connection is abandoned, so late callbacks of an old client do nothing. */
  gen: number;
  client?: Client;
  /** The client of an attempt in progress, so close() can abort it. */
  pending?: Client;
  timer?: ReturnType<typeof setTimeout>;
  backoff: number;
  upSince?: number;
  checking: boolean;
  stderrTail: string[];
  noiseLogged: number;
  /** The first attempt (what ready() waits for). */
  first: Promise<void>;
  /** The latest attempt (what close() waits for). */
  current: Promise<void>;
};

/** FNV-1a, for short stable suffixes that keep long tool names unique. */
function hash8(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, "0");
}

/** `${server}_${tool}` in [A-Za-z0-9_-], at most 64 chars (the tool-name limit of the big APIs). */
export function exposedToolName(server: string, tool: string): string {
  const name = `${server}_${tool}`.replace(/[^A-Za-z0-9_-]/g, "_");
  return name.length <= 64 ? name : `${name.slice(0, 55)}_${hash8(tool)}`;
}

function uniqueName(base: string, taken: Set<string>): string {
  if (!taken.has(base)) return base;
  for (let i = 2;; i++) {
    const suffix = `_${i}`;
    const name = base.slice(0, 64 - suffix.length) + suffix;
    if (!taken.has(name)) return name;
  }
}

/** An error as one readable phrase (not yet redacted). */
function message(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    if (code === "ENOENT" && /spawn/.test(e.message)) return "command not found";
    if (code === "EACCES" && /spawn/.test(e.message)) {
      return "command not executable (permission denied)";
    }
    if (e instanceof StreamableHTTPError && typeof e.code === "number" && e.code > 0) {
      return `HTTP ${e.code}: ${e.message.replace(/^Streamable HTTP error: /, "")}`;
    }
    // fetch says only "fetch failed"; the reason (connection refused, DNS, TLS) is in its cause.
    const cause = e.cause instanceof Error ? e.cause.message : undefined;
    const text = e.message.replace(/^MCP error -?\d+: /, "");
    return cause && !text.includes(cause) ? `${text} (${cause})` : text;
  }
  return String(e);
}

const oneLine = (s: string, max = 500) => {
  const line = s.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max)}…` : line;
};

/** Rejects when `signal` aborts; the SDK's own signal handling cannot cover a transport that hangs. */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function envVar(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: the child simply goes without it
  }
}

/**
 * Starts a client for every configured server, in the background; returns at once. Never throws for
 * a server's failure: see {@link McpRegistry.states}.
 */
export function startMcpRegistry(
  mcpConfig: McpConfig,
  opts: McpRegistryOptions = {},
): McpRegistry {
  const callTimeoutMs = opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
  const maxResultBytes = opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  const startTimeoutMs = opts.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
  const minBackoffMs = opts.minBackoffMs ?? 1000;
  const maxBackoffMs = Math.max(minBackoffMs, opts.maxBackoffMs ?? 30_000);
  const rawLog = opts.log ?? ((line: string) => console.error(line));
  const log = (conn: Conn, text: string) => {
    try {
      rawLog(`mcp: server "${conn.name}" ${conn.redactor.redact(text)}`);
    } catch { /* a broken logger must not break the registry */ }
  };

  const conns: Conn[] = [];
  /** Exposed name → tool, for the tools currently offered. */
  const offered = new Map<string, { conn: Conn; tool: McpTool }>();
  /** Exposed names ever offered → server, to explain a call of a withdrawn tool. */
  const known = new Map<string, Conn>();
  /** Background work (closing old clients, pings, tool refreshes) that close() must wait for. */
  const background = new Set<Promise<unknown>>();
  let closed = false;
  let closing: Promise<void> | undefined;

  const track = (p: Promise<unknown>) => {
    const q = p.catch(() => {}).finally(() => background.delete(q));
    background.add(q);
  };
  const closeClient = (client: Client | undefined) => {
    if (client) track(client.close());
  };

  function setTools(conn: Conn, tools: McpTool[]) {
    for (const t of conn.tools) offered.delete(t.name);
    conn.tools = tools;
    for (const t of tools) {
      offered.set(t.name, { conn, tool: t });
      known.set(t.name, conn);
    }
    conn.state.tools = tools.length;
  }

  function exposeTools(conn: Conn, listed: Record<string, unknown>[]): McpTool[] {
    // Names held by other servers are taken; this server's own old names are free to reuse.
    const taken = new Set([...offered.keys()].filter((n) => offered.get(n)!.conn !== conn));
    const out: McpTool[] = [];
    for (const t of listed) {
      if (typeof t.name !== "string" || !t.name) continue;
      const name = uniqueName(exposedToolName(conn.name, t.name), taken);
      taken.add(name);
      const schema = typeof t.inputSchema === "object" && t.inputSchema !== null
        ? t.inputSchema as Record<string, unknown>
        : {};
      out.push({
        server: conn.name,
        name,
        toolName: t.name,
        ...(typeof t.description === "string" ? { description: t.description } : {}),
        inputSchema: { ...schema, type: "object" },
      });
    }
    return out;
  }

  async function listAllTools(
    client: Client,
    signal?: AbortSignal,
    timeout = startTimeoutMs,
  ): Promise<Record<string, unknown>[]> {
    const all: Record<string, unknown>[] = [];
    let cursor: string | undefined;
    const seen = new Set<string>();
    for (let page = 0; page < MAX_TOOL_PAGES; page++) {
      const r = await client.listTools(cursor === undefined ? {} : { cursor }, { signal, timeout });
      all.push(...(r.tools as Record<string, unknown>[]));
      cursor = r.nextCursor;
      // A server repeating a cursor would loop forever; what was listed so far is still usable.
      if (cursor === undefined || seen.has(cursor)) break;
      seen.add(cursor);
    }
    return all;
  }

  function makeTransport(conn: Conn): Transport {
    const cfg = conn.config;
    if ("command" in cfg) {
      const lang = envVar("LANG");
      const t = new StdioClientTransport({
        command: cfg.command,
        args: cfg.args ?? [],
        env: { ...(lang ? { LANG: lang } : {}), ...cfg.env },
        cwd: cfg.cwd,
        stderr: "pipe",
      });
      // Keep (and show a little of) stderr: it is usually the only explanation of a failure.
      let partial = "";
      t.stderr?.on("data", (chunk: Uint8Array | string) => {
        const lines = (partial + String(chunk)).split(/\r?\n/);
        partial = lines.pop() ?? "";
        if (partial.length > 4096) partial = partial.slice(-4096);
        for (const line of lines) stderrLine(conn, line);
      });
      t.stderr?.on("end", () => {
        if (partial) stderrLine(conn, partial);
        partial = "";
      });
      t.stderr?.on("error", () => {});
      return t;
    }
    return new StreamableHTTPClientTransport(new URL(cfg.url), {
      requestInit: { headers: { ...cfg.headers } },
    });
  }

  function stderrLine(conn: Conn, raw: string) {
    const line = oneLine(raw, 300);
    if (!line) return;
    conn.stderrTail.push(line);
    if (conn.stderrTail.length > STDERR_TAIL_LINES) conn.stderrTail.shift();
    noise(conn, `stderr: ${line}`);
  }

  /** Logs stderr lines and transport errors, up to a budget per connection. */
  function noise(conn: Conn, line: string) {
    if (conn.noiseLogged >= NOISE_LOG_LINES) return;
    conn.noiseLogged++;
    log(conn, line);
    if (conn.noiseLogged === NOISE_LOG_LINES) {
      log(conn, "(further stderr lines and transport errors of this connection not logged)");
    }
  }

  /** The transport closed on its own: for stdio that is the process exiting. */
  const closedText = (conn: Conn) =>
    "command" in conn.config ? "server process exited" : "connection closed";

  function startError(conn: Conn, e: unknown): string {
    if (e instanceof McpError && e.code === ErrorCode.ConnectionClosed) {
      return `${closedText(conn)} during start-up`;
    }
    const text = message(e);
    return text === "command not found" && "command" in conn.config
      ? `command not found: ${conn.config.command}`
      : text;
  }

  function withStderr(conn: Conn, text: string): string {
    const last = conn.stderrTail.at(-1);
    return last ? `${text} (stderr: ${last})` : text;
  }

  function scheduleRetry(conn: Conn) {
    if (closed) return;
    const delay = conn.backoff;
    conn.backoff = Math.min(conn.backoff * 2, maxBackoffMs);
    conn.state.status = "failed";
    conn.state.nextRetryAt = new Date(Date.now() + delay).toISOString();
    conn.timer = setTimeout(() => {
      conn.timer = undefined;
      if (closed) return;
      conn.state.restarts++;
      conn.current = attempt(conn, false);
    }, delay);
    return delay;
  }

  const seconds = (ms: number | undefined) => `${((ms ?? 0) / 1000).toFixed(1)} s`;

  /** One connection attempt; never rejects. */
  async function attempt(conn: Conn, first: boolean): Promise<void> {
    const gen = ++conn.gen;
    conn.state.status = first ? "connecting" : "reconnecting";
    conn.state.pid = undefined;
    conn.state.nextRetryAt = undefined;
    conn.stderrTail = [];
    conn.noiseLogged = 0;
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error("start timeout")), startTimeoutMs);
    let client: Client | undefined;
    try {
      client = new Client(CLIENT_INFO, { capabilities: {} });
      const c = client;
      conn.pending = c;
      c.onclose = () => {
        if (conn.gen === gen) down(conn, gen, withStderr(conn, closedText(conn)));
      };
      c.onerror = (e) => {
        if (conn.gen !== gen || conn.state.status !== "ready") return; // start errors are reported once
        noise(conn, `transport error: ${oneLine(message(e), 300)}`);
        // Transport errors of a live HTTP connection may mean the server is gone: check it.
        suspect(conn, gen);
      };
      c.setNotificationHandler(ToolListChangedNotificationSchema, () => {
        if (conn.gen === gen && conn.state.status === "ready") refreshTools(conn, gen, c);
      });
      const transport = makeTransport(conn);
      const pid = () => (transport instanceof StdioClientTransport ? transport.pid : null);
      await raceAbort(
        c.connect(transport, { signal: ac.signal, timeout: startTimeoutMs }),
        ac.signal,
      );
      const listed = await raceAbort(listAllTools(c, ac.signal), ac.signal);
      if (closed || conn.gen !== gen) {
        closeClient(c);
        return;
      }
      conn.client = c;
      conn.pending = undefined;
      conn.upSince = Date.now();
      setTools(conn, exposeTools(conn, listed));
      conn.state.status = "ready";
      conn.state.error = undefined;
      conn.state.connectedAt = new Date().toISOString();
      conn.state.pid = pid() ?? undefined;
      const n = conn.tools.length;
      log(conn, `ready: ${n} tool${n === 1 ? "" : "s"}${first ? "" : " (reconnected)"}`);
    } catch (e) {
      if (conn.pending === client) conn.pending = undefined;
      closeClient(client);
      if (closed || conn.gen !== gen) return;
      conn.gen++; // the abandoned client's late callbacks must not touch the next attempt
      const why = ac.signal.aborted
        ? `did not start within ${startTimeoutMs} ms`
        : withStderr(conn, startError(conn, e));
      conn.state.error = conn.redactor.redact(oneLine(why));
      setTools(conn, []);
      const delay = scheduleRetry(conn);
      log(conn, `failed: ${conn.state.error}; retrying in ${seconds(delay)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The connection of `gen` is gone: withdraw its tools now, reconnect later. */
  function down(conn: Conn, gen: number, why: string) {
    if (closed || conn.gen !== gen || conn.state.status !== "ready") return;
    conn.gen++;
    const client = conn.client;
    conn.client = undefined;
    setTools(conn, []);
    conn.state.pid = undefined;
    conn.state.error = conn.redactor.redact(oneLine(why));
    // A server that stayed up a good while earns a fresh backoff; one that keeps dying does not.
    if (conn.upSince !== undefined && Date.now() - conn.upSince >= maxBackoffMs) {
      conn.backoff = minBackoffMs;
    }
    closeClient(client);
    const delay = scheduleRetry(conn);
    log(conn, `down: ${conn.state.error}; tools withdrawn; retrying in ${seconds(delay)}`);
  }

  /** An HTTP server's request failed: a ping tells a dead server from one bad request. */
  function suspect(conn: Conn, gen: number) {
    if (!("url" in conn.config) || conn.checking || !conn.client) return;
    const client = conn.client;
    conn.checking = true;
    track(
      client.ping({ timeout: Math.min(PING_TIMEOUT_MS, callTimeoutMs) }).then(
        () => {},
        (err) => down(conn, gen, `not answering: ${message(err)}`),
      ).finally(() => conn.checking = false),
    );
  }

  function refreshTools(conn: Conn, gen: number, client: Client) {
    track(
      listAllTools(client, undefined, callTimeoutMs).then((listed) => {
        if (closed || conn.gen !== gen || conn.state.status !== "ready") return;
        setTools(conn, exposeTools(conn, listed));
        log(conn, `tools changed: ${conn.tools.length} tools`);
      }, (e) => log(conn, `tools/list after list_changed failed: ${oneLine(message(e))}`)),
    );
  }

  for (const [name, config] of Object.entries(mcpConfig.mcpServers)) {
    const redactor = redactorFor(config);
    const conn: Conn = {
      name,
      config,
      redactor,
      state: {
        name,
        transport: "command" in config ? "stdio" : "http",
        status: "connecting",
        tools: 0,
        restarts: 0,
        ...(redactor.url ? { url: redactor.url } : {}),
      },
      tools: [],
      gen: 0,
      backoff: minBackoffMs,
      checking: false,
      stderrTail: [],
      noiseLogged: 0,
      first: Promise.resolve(),
      current: Promise.resolve(),
    };
    conns.push(conn);
    conn.first = conn.current = attempt(conn, true);
  }
  const byName = new Map(conns.map((c) => [c.name, c]));

  const fail = (text: string): McpCallResult => ({ text, isError: true, truncated: false });

  function unavailable(name: string, conn: Conn): McpCallResult {
    const s = conn.state;
    if (s.status === "ready") {
      return fail(`unknown MCP tool "${name}" (server "${conn.name}" no longer offers it)`);
    }
    const why = s.error ? `: ${s.error}` : "";
    return fail(`MCP tool "${name}" is unavailable: server "${conn.name}" is ${s.status}${why}`);
  }

  async function call(
    name: string,
    args: Record<string, unknown>,
    callOpts: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<McpCallResult> {
    const entry = offered.get(name);
    if (!entry) {
      const conn = known.get(name);
      return conn ? unavailable(name, conn) : fail(`unknown MCP tool "${name}"`);
    }
    const { conn, tool } = entry;
    const client = conn.client;
    const gen = conn.gen;
    if (closed || !client || conn.state.status !== "ready") return unavailable(name, conn);
    const signal = callOpts.signal;
    if (signal?.aborted) return fail(`MCP tool "${name}" call was aborted`);
    const timeoutMs = callOpts.timeoutMs ?? callTimeoutMs;

    // One controller per call for the caller's abort and our timeout: the request is cancelled on
    // the server (notifications/cancelled) either way, we know which of the two it was, and the
    // listener the SDK adds (and never removes) dies with the call, not on a long-lived signal.
    const ac = new AbortController();
    let timedOut = false;
    const onAbort = () => ac.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => {
      timedOut = true;
      ac.abort(new Error("timeout"));
    }, timeoutMs);
    try {
      const result = await raceAbort(
        // The SDK's own timeout is a backstop only; ours fires first and names the tool.
        client.callTool({ name: tool.toolName, arguments: args }, undefined, {
          signal: ac.signal,
          timeout: timeoutMs + 1000,
        }),
        ac.signal,
      );
      const capped = capUtf8(formatToolResult(result as Record<string, unknown>), maxResultBytes);
      return { text: capped.text, isError: result.isError === true, truncated: capped.truncated };
    } catch (e) {
      if (timedOut) return fail(`MCP tool "${name}" timed out after ${timeoutMs} ms`);
      if (signal?.aborted) return fail(`MCP tool "${name}" call was aborted`);
      if (closed) return fail(`MCP tool "${name}" failed: the MCP registry was closed`);
      if (
        conn.gen !== gen || (e instanceof McpError && e.code === ErrorCode.ConnectionClosed)
      ) {
        return fail(
          `MCP tool "${name}" failed: server "${conn.name}" went down during the call${
            conn.state.error ? ` (${conn.state.error})` : ""
          }`,
        );
      }
      // A server that answers with a JSON-RPC error is alive; anything else may be a dead server.
      if (!(e instanceof McpError)) suspect(conn, gen);
      return fail(`MCP tool "${name}" failed: ${conn.redactor.redact(oneLine(message(e)))}`);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  async function closeAll(): Promise<void> {
    closed = true;
    for (const conn of conns) {
      if (conn.timer !== undefined) clearTimeout(conn.timer);
      conn.timer = undefined;
      conn.gen++;
      setTools(conn, []);
      conn.state.status = "closed";
      conn.state.pid = undefined;
      conn.state.nextRetryAt = undefined;
      closeClient(conn.client);
      closeClient(conn.pending);
      conn.client = conn.pending = undefined;
    }
    // Attempts in progress end promptly once their client is closed; wait for them and for every
    // client's close (which stops the stdio processes) so nothing outlives the registry.
    await Promise.allSettled(conns.map((c) => c.current));
    while (background.size > 0) await Promise.allSettled([...background]);
    for (const conn of conns) conn.stderrTail = [];
  }

  return {
    ready: () => Promise.all(conns.map((c) => c.first)).then(() => {}),
    states: () => conns.map((c) => ({ ...c.state })),
    tools: (server) => byName.get(server)?.tools.map((t) => ({ ...t })),
    allTools: () => conns.flatMap((c) => c.tools.map((t) => ({ ...t }))),
    names: () => conns.map((c) => c.name),
    // Belt and braces: call() handles its failures, but nothing may escape as a rejection.
    call: (name, args, callOpts) =>
      call(name, args, callOpts).catch((e) => {
        let text = oneLine(message(e));
        for (const c of conns) text = c.redactor.redact(text);
        return fail(`MCP tool "${name}" failed: ${text}`);
      }),
    close: () => (closing ??= closeAll()),
  };
}
