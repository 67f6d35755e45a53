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
 * The parts: a connection's life (connection.ts) over its transport (transport.ts), the names the
 * tools are offered under (tool_names.ts), a call (call.ts); this module starts and closes them.
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
import { callTool, failed } from "./call.ts";
import type { McpConfig } from "./config.ts";
import { attempt, closeClient, newConn, type RegistryCtx, setTools } from "./connection.ts";
import { message, oneLine } from "./errors.ts";
import type { McpCallResult, McpServerState, McpTool } from "./types.ts";

export { loadMcpConfig, parseMcpConfig, SERVER_NAME } from "./config.ts";
export type { McpConfig, McpServerConfig } from "./config.ts";
export { exposedToolName } from "./tool_names.ts";
export type { McpCallResult, McpServerState, McpTool } from "./types.ts";

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

/** Withdraws every tool, closes every client and waits until nothing of the registry runs. */
async function closeAll(ctx: RegistryCtx): Promise<void> {
  const { conns } = ctx;
  ctx.closed = true;
  for (const conn of conns) {
    if (conn.timer !== undefined) clearTimeout(conn.timer);
    conn.timer = undefined;
    conn.gen++;
    setTools(ctx, conn, []);
    conn.state.status = "closed";
    conn.state.pid = undefined;
    conn.state.nextRetryAt = undefined;
    closeClient(ctx, conn.client);
    closeClient(ctx, conn.pending);
    conn.client = conn.pending = undefined;
  }
  // Attempts in progress end promptly once their client is closed; wait for them and for every
  // client's close (which stops the stdio processes) so nothing outlives the registry.
  await Promise.allSettled(conns.map((c) => c.current));
  while (ctx.background.size > 0) await Promise.allSettled([...ctx.background]);
  for (const conn of conns) conn.stderrTail = [];
}

/**
 * Starts a client for every configured server, in the background; returns at once. Never throws for
 * a server's failure: see {@link McpRegistry.states}.
 */
export function startMcpRegistry(
  mcpConfig: McpConfig,
  opts: McpRegistryOptions = {},
): McpRegistry {
  const minBackoffMs = opts.minBackoffMs ?? 1000;
  const ctx: RegistryCtx = {
    callTimeoutMs: opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
    maxResultBytes: opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
    startTimeoutMs: opts.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS,
    minBackoffMs,
    maxBackoffMs: Math.max(minBackoffMs, opts.maxBackoffMs ?? 30_000),
    rawLog: opts.log ?? ((line: string) => console.error(line)),
    conns: [],
    offered: new Map(),
    known: new Map(),
    background: new Set(),
    closed: false,
  };
  const { conns } = ctx;
  let closing: Promise<void> | undefined;

  for (const [name, config] of Object.entries(mcpConfig.mcpServers)) {
    const conn = newConn(ctx, name, config);
    conns.push(conn);
    conn.first = conn.current = attempt(ctx, conn, true);
  }
  const byName = new Map(conns.map((c) => [c.name, c]));

  return {
    ready: () => Promise.all(conns.map((c) => c.first)).then(() => {}),
    states: () => conns.map((c) => ({ ...c.state })),
    tools: (server) => byName.get(server)?.tools.map((t) => ({ ...t })),
    allTools: () => conns.flatMap((c) => c.tools.map((t) => ({ ...t }))),
    names: () => conns.map((c) => c.name),
    // Belt and braces: callTool() handles its failures, but nothing may escape as a rejection.
    call: (name, args, callOpts) =>
      callTool(ctx, name, args, callOpts).catch((e) => {
        let text = oneLine(message(e));
        for (const c of conns) text = c.redactor.redact(text);
        return failed(`MCP tool "${name}" failed: ${text}`);
      }),
    close: () => (closing ??= closeAll(ctx)),
  };
}
