/**
 * The transport of one MCP connection (registry.ts): a child process over stdio, or streamable
 * HTTP. A stdio server gets a minimal environment — the SDK's safe defaults (`HOME`, `LOGNAME`,
 * `PATH`, `SHELL`, `TERM`, `USER`) plus `LANG` — with its configured `env` on top, never the whole
 * server environment; its stderr is read line by line, since it is usually the only explanation of
 * a failure.
 *
 * @example
 * ```ts ignore
 * import { makeTransport } from "./transport.ts";
 * const transport = makeTransport({ command: "calc-mcp" }, (line) => console.error(line));
 * await client.connect(transport);
 * ```
 * @module
 */
// The SDK's `./*` export maps `x.js` to types at `x.js.d.ts`, which do not exist, so without these
// @ts-types hints the checker silently types the whole SDK as `any`.
// @ts-types="@modelcontextprotocol/sdk/client/stdio"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport";
import type { McpServerConfig } from "./config.ts";

function envVar(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: the child simply goes without it
  }
}

/** A new transport for the server; a stdio server's stderr goes to `stderrLine`, a line a call. */
export function makeTransport(
  cfg: McpServerConfig,
  stderrLine: (line: string) => void,
): Transport {
  if ("command" in cfg) {
    const lang = envVar("LANG");
    const t = new StdioClientTransport({
      command: cfg.command,
      args: cfg.args ?? [],
      env: { ...(lang ? { LANG: lang } : {}), ...cfg.env },
      cwd: cfg.cwd,
      stderr: "pipe",
    });
    let partial = "";
    t.stderr?.on("data", (chunk: Uint8Array | string) => {
      const lines = (partial + String(chunk)).split(/\r?\n/);
      partial = lines.pop() ?? "";
      if (partial.length > 4096) partial = partial.slice(-4096);
      for (const line of lines) stderrLine(line);
    });
    t.stderr?.on("end", () => {
      if (partial) stderrLine(partial);
      partial = "";
    });
    t.stderr?.on("error", () => {});
    return t;
  }
  return new StreamableHTTPClientTransport(new URL(cfg.url), {
    requestInit: { headers: { ...cfg.headers } },
  });
}

/** The server process's id while the transport runs one (stdio only). */
export const transportPid = (t: Transport): number | null =>
  t instanceof StdioClientTransport ? t.pid : null;
