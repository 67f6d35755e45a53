/**
 * What the MCP registry (registry.ts, which re-exports all of it) hands out: a tool as offered to
 * the model, a server's state as `GET /health` shows it, and the outcome of a tool call.
 *
 * @example
 * ```ts
 * import type { McpTool } from "./types.ts";
 * const tool: McpTool = {
 *   server: "calc",
 *   name: "calc_add",
 *   toolName: "add",
 *   inputSchema: { type: "object" },
 * };
 * ```
 * @module
 */

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
