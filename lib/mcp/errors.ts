/**
 * How the MCP registry (registry.ts) tells of a failure: an error as one readable phrase (a spawn
 * error named for what it means, an HTTP status, the cause fetch hides), cut to one line, and a
 * race against an abort signal for SDK promises that a hung transport would never settle. The
 * texts are not redacted here: callers pass them through the server's redactor.
 *
 * @example
 * ```ts
 * import { message, oneLine } from "./errors.ts";
 * oneLine(message(new Error("MCP error -32000: boom\n  at x")), 20); // "boom at x"
 * ```
 * @module
 */
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

/** An error as one readable phrase (not yet redacted). */
export function message(e: unknown): string {
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

export const oneLine = (s: string, max = 500) => {
  const line = s.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max)}…` : line;
};

/** Rejects when `signal` aborts; the SDK's own signal handling cannot cover a transport that hangs. */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
