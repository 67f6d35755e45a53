/**
 * A tool call through the MCP registry (registry.ts): the exposed name to its server's tool, one
 * abort controller for the caller's signal and the call's timeout, the result formatted and capped,
 * and every failure (unknown or withdrawn tool, server down or going down, timeout, abort, an error
 * of the server) returned as an `isError` result with a clear, redacted text, never thrown.
 *
 * @example
 * ```ts ignore
 * import { callTool } from "./call.ts";
 * const r = await callTool(ctx, "calc_add", { a: 2, b: 3 }); // { text: "5", isError: false, ... }
 * ```
 * @module
 */
// @ts-types="@modelcontextprotocol/sdk/types"
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { type Conn, type RegistryCtx, suspect } from "./connection.ts";
import { message, oneLine, raceAbort } from "./errors.ts";
import { capUtf8, formatToolResult } from "./result.ts";
import type { McpCallResult } from "./types.ts";

export const failed = (text: string): McpCallResult => ({ text, isError: true, truncated: false });

function unavailable(name: string, conn: Conn): McpCallResult {
  const s = conn.state;
  if (s.status === "ready") {
    return failed(`unknown MCP tool "${name}" (server "${conn.name}" no longer offers it)`);
  }
  const why = s.error ? `: ${s.error}` : "";
  return failed(`MCP tool "${name}" is unavailable: server "${conn.name}" is ${s.status}${why}`);
}

/** Calls an exposed tool name; see McpRegistry.call. */
export async function callTool(
  ctx: RegistryCtx,
  name: string,
  args: Record<string, unknown>,
  callOpts: { signal?: AbortSignal; timeoutMs?: number } = {},
): Promise<McpCallResult> {
  const entry = ctx.offered.get(name);
  if (!entry) {
    const conn = ctx.known.get(name);
    return conn ? unavailable(name, conn) : failed(`unknown MCP tool "${name}"`);
  }
  const { conn, tool } = entry;
  const client = conn.client;
  const gen = conn.gen;
  if (ctx.closed || !client || conn.state.status !== "ready") return unavailable(name, conn);
  const signal = callOpts.signal;
  if (signal?.aborted) return failed(`MCP tool "${name}" call was aborted`);
  const timeoutMs = callOpts.timeoutMs ?? ctx.callTimeoutMs;

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
    const capped = capUtf8(
      formatToolResult(result as Record<string, unknown>),
      ctx.maxResultBytes,
    );
    return { text: capped.text, isError: result.isError === true, truncated: capped.truncated };
  } catch (e) {
    if (timedOut) return failed(`MCP tool "${name}" timed out after ${timeoutMs} ms`);
    if (signal?.aborted) return failed(`MCP tool "${name}" call was aborted`);
    if (ctx.closed) return failed(`MCP tool "${name}" failed: the MCP registry was closed`);
    if (
      conn.gen !== gen || (e instanceof McpError && e.code === ErrorCode.ConnectionClosed)
    ) {
      return failed(
        `MCP tool "${name}" failed: server "${conn.name}" went down during the call${
          conn.state.error ? ` (${conn.state.error})` : ""
        }`,
      );
    }
    // A server that answers with a JSON-RPC error is alive; anything else may be a dead server.
    if (!(e instanceof McpError)) suspect(ctx, conn, gen);
    return failed(`MCP tool "${name}" failed: ${conn.redactor.redact(oneLine(message(e)))}`);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}
