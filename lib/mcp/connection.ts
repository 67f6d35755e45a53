/**
 * The life of one MCP server's connection (registry.ts): an attempt (connect, initialise and list
 * the tools within the start timeout), the tools offered while it is ready, its end (the transport
 * closed, or an HTTP server that stopped answering a ping) withdrawing them at once, and the
 * reconnection with exponential backoff. Every late callback of an abandoned client is ignored by
 * its generation number; nothing here rejects or throws for a server's failure.
 *
 * @example
 * ```ts ignore
 * import { attempt, newConn } from "./connection.ts";
 * const conn = newConn(ctx, "calc", { command: "calc-mcp" });
 * ctx.conns.push(conn);
 * conn.first = conn.current = attempt(ctx, conn, true); // never rejects
 * ```
 * @module
 */
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
// @ts-types="@modelcontextprotocol/sdk/types"
import {
  ErrorCode,
  McpError,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type { McpServerConfig } from "./config.ts";
import { message, oneLine, raceAbort } from "./errors.ts";
import { type Redactor, redactorFor } from "./redact.ts";
import { exposeTools } from "./tool_names.ts";
import { makeTransport, transportPid } from "./transport.ts";
import type { McpServerState, McpTool } from "./types.ts";

const CLIENT_INFO = { name: "hearth", version: "1.0.0" };
/** A dead HTTP server shows up only as failing requests; a ping this long tells it from a glitch. */
const PING_TIMEOUT_MS = 5_000;
/** Stderr lines and transport errors logged per connection, so a chatty server cannot flood the log. */
const NOISE_LOG_LINES = 50;
/** Stderr lines kept to explain a start failure or an exit. */
const STDERR_TAIL_LINES = 5;
const MAX_TOOL_PAGES = 1000;

export type Conn = {
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

/** The registry's settings and state, shared by every connection. */
export type RegistryCtx = {
  callTimeoutMs: number;
  maxResultBytes: number;
  startTimeoutMs: number;
  minBackoffMs: number;
  maxBackoffMs: number;
  rawLog: (line: string) => void;
  /** In config order. */
  conns: Conn[];
  /** Exposed name → tool, for the tools currently offered. */
  offered: Map<string, { conn: Conn; tool: McpTool }>;
  /** Exposed names ever offered → server, to explain a call of a withdrawn tool. */
  known: Map<string, Conn>;
  /** Background work (closing old clients, pings, tool refreshes) that close() must wait for. */
  background: Set<Promise<unknown>>;
  /** Set by close(): nothing starts or retries any more. */
  closed: boolean;
};

/** A connection not started yet. */
export function newConn(ctx: RegistryCtx, name: string, config: McpServerConfig): Conn {
  const redactor = redactorFor(config);
  return {
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
    backoff: ctx.minBackoffMs,
    checking: false,
    stderrTail: [],
    noiseLogged: 0,
    first: Promise.resolve(),
    current: Promise.resolve(),
  };
}

function log(ctx: RegistryCtx, conn: Conn, text: string) {
  try {
    ctx.rawLog(`mcp: server "${conn.name}" ${conn.redactor.redact(text)}`);
  } catch { /* a broken logger must not break the registry */ }
}

/** Logs stderr lines and transport errors, up to a budget per connection. */
function noise(ctx: RegistryCtx, conn: Conn, line: string) {
  if (conn.noiseLogged >= NOISE_LOG_LINES) return;
  conn.noiseLogged++;
  log(ctx, conn, line);
  if (conn.noiseLogged === NOISE_LOG_LINES) {
    log(ctx, conn, "(further stderr lines and transport errors of this connection not logged)");
  }
}

function stderrLine(ctx: RegistryCtx, conn: Conn, raw: string) {
  const line = oneLine(raw, 300);
  if (!line) return;
  conn.stderrTail.push(line);
  if (conn.stderrTail.length > STDERR_TAIL_LINES) conn.stderrTail.shift();
  noise(ctx, conn, `stderr: ${line}`);
}

/** Keeps `p` for close() to wait for; its failure is nobody's business. */
export function track(ctx: RegistryCtx, p: Promise<unknown>) {
  const q = p.catch(() => {}).finally(() => ctx.background.delete(q));
  ctx.background.add(q);
}

export const closeClient = (ctx: RegistryCtx, client: Client | undefined) => {
  if (client) track(ctx, client.close());
};

/** Offers `tools` as the server's, withdrawing what it offered before. */
export function setTools(ctx: RegistryCtx, conn: Conn, tools: McpTool[]) {
  for (const t of conn.tools) ctx.offered.delete(t.name);
  conn.tools = tools;
  for (const t of tools) {
    ctx.offered.set(t.name, { conn, tool: t });
    ctx.known.set(t.name, conn);
  }
  conn.state.tools = tools.length;
}

/** The tools as offered; names held by other servers are taken, this server's own are free. */
function offer(ctx: RegistryCtx, conn: Conn, listed: Record<string, unknown>[]): McpTool[] {
  const taken = new Set([...ctx.offered.keys()].filter((n) => ctx.offered.get(n)!.conn !== conn));
  return exposeTools(conn.name, listed, taken);
}

async function listAllTools(
  client: Client,
  signal: AbortSignal | undefined,
  timeout: number,
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

function scheduleRetry(ctx: RegistryCtx, conn: Conn) {
  if (ctx.closed) return;
  const delay = conn.backoff;
  conn.backoff = Math.min(conn.backoff * 2, ctx.maxBackoffMs);
  conn.state.status = "failed";
  conn.state.nextRetryAt = new Date(Date.now() + delay).toISOString();
  conn.timer = setTimeout(() => {
    conn.timer = undefined;
    if (ctx.closed) return;
    conn.state.restarts++;
    conn.current = attempt(ctx, conn, false);
  }, delay);
  return delay;
}

const seconds = (ms: number | undefined) => `${((ms ?? 0) / 1000).toFixed(1)} s`;

/** One connection attempt; never rejects. */
export async function attempt(ctx: RegistryCtx, conn: Conn, first: boolean): Promise<void> {
  const { startTimeoutMs } = ctx;
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
      if (conn.gen === gen) down(ctx, conn, gen, withStderr(conn, closedText(conn)));
    };
    c.onerror = (e) => {
      if (conn.gen !== gen || conn.state.status !== "ready") return; // start errors are reported once
      noise(ctx, conn, `transport error: ${oneLine(message(e), 300)}`);
      // Transport errors of a live HTTP connection may mean the server is gone: check it.
      suspect(ctx, conn, gen);
    };
    c.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      if (conn.gen === gen && conn.state.status === "ready") refreshTools(ctx, conn, gen, c);
    });
    const transport = makeTransport(conn.config, (line) => stderrLine(ctx, conn, line));
    await raceAbort(
      c.connect(transport, { signal: ac.signal, timeout: startTimeoutMs }),
      ac.signal,
    );
    const listed = await raceAbort(listAllTools(c, ac.signal, startTimeoutMs), ac.signal);
    if (ctx.closed || conn.gen !== gen) {
      closeClient(ctx, c);
      return;
    }
    conn.client = c;
    conn.pending = undefined;
    conn.upSince = Date.now();
    setTools(ctx, conn, offer(ctx, conn, listed));
    conn.state.status = "ready";
    conn.state.error = undefined;
    conn.state.connectedAt = new Date().toISOString();
    conn.state.pid = transportPid(transport) ?? undefined;
    const n = conn.tools.length;
    log(ctx, conn, `ready: ${n} tool${n === 1 ? "" : "s"}${first ? "" : " (reconnected)"}`);
  } catch (e) {
    if (conn.pending === client) conn.pending = undefined;
    closeClient(ctx, client);
    if (ctx.closed || conn.gen !== gen) return;
    conn.gen++; // the abandoned client's late callbacks must not touch the next attempt
    const why = ac.signal.aborted
      ? `did not start within ${startTimeoutMs} ms`
      : withStderr(conn, startError(conn, e));
    conn.state.error = conn.redactor.redact(oneLine(why));
    setTools(ctx, conn, []);
    const delay = scheduleRetry(ctx, conn);
    log(ctx, conn, `failed: ${conn.state.error}; retrying in ${seconds(delay)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** The connection of `gen` is gone: withdraw its tools now, reconnect later. */
function down(ctx: RegistryCtx, conn: Conn, gen: number, why: string) {
  if (ctx.closed || conn.gen !== gen || conn.state.status !== "ready") return;
  conn.gen++;
  const client = conn.client;
  conn.client = undefined;
  setTools(ctx, conn, []);
  conn.state.pid = undefined;
  conn.state.error = conn.redactor.redact(oneLine(why));
  // A server that stayed up a good while earns a fresh backoff; one that keeps dying does not.
  if (conn.upSince !== undefined && Date.now() - conn.upSince >= ctx.maxBackoffMs) {
    conn.backoff = ctx.minBackoffMs;
  }
  closeClient(ctx, client);
  const delay = scheduleRetry(ctx, conn);
  log(ctx, conn, `down: ${conn.state.error}; tools withdrawn; retrying in ${seconds(delay)}`);
}

/** An HTTP server's request failed: a ping tells a dead server from one bad request. */
export function suspect(ctx: RegistryCtx, conn: Conn, gen: number) {
  if (!("url" in conn.config) || conn.checking || !conn.client) return;
  const client = conn.client;
  conn.checking = true;
  track(
    ctx,
    client.ping({ timeout: Math.min(PING_TIMEOUT_MS, ctx.callTimeoutMs) }).then(
      () => {},
      (err) => down(ctx, conn, gen, `not answering: ${message(err)}`),
    ).finally(() => conn.checking = false),
  );
}

function refreshTools(ctx: RegistryCtx, conn: Conn, gen: number, client: Client) {
  track(
    ctx,
    listAllTools(client, undefined, ctx.callTimeoutMs).then((listed) => {
      if (ctx.closed || conn.gen !== gen || conn.state.status !== "ready") return;
      setTools(ctx, conn, offer(ctx, conn, listed));
      log(ctx, conn, `tools changed: ${conn.tools.length} tools`);
    }, (e) => log(ctx, conn, `tools/list after list_changed failed: ${oneLine(message(e))}`)),
  );
}
