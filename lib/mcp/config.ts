/**
 * `--mcp-config FILE`: the only place MCP servers come from (a request names a configured server,
 * never a command or a URL). The file is JSON in the shape other MCP clients use:
 *
 * ```json
 * {
 *   "mcpServers": {
 *     "calc": { "command": "calc-mcp", "args": ["--fast"], "env": { "CALC_TOKEN": "..." }, "cwd": "." },
 *     "search": { "url": "https://mcp.example.com/mcp", "headers": { "Authorization": "Bearer ..." } }
 *   }
 * }
 * ```
 *
 * A server has either `command` (stdio) or `url` (streamable HTTP), never both. An optional `type`
 * (`"stdio"`, `"http"`, `"streamable-http"`) is accepted so that files written for other clients load;
 * `"sse"` is refused (the old SSE transport is not supported). A relative `cwd` is resolved against
 * the config file's directory, so the file means the same thing whatever directory Hearth starts in.
 * Any problem throws an Error whose message is one line naming the file and the field.
 *
 * @example
 * ```ts
 * import { loadMcpConfig, parseMcpConfig } from "./config.ts";
 * const config = await loadMcpConfig("mcp.json"); // reads, then parseMcpConfig
 * console.log(Object.keys(config.mcpServers));
 * parseMcpConfig('{"mcpServers": {"a b": {"command": "x"}}}', "mcp.json"); // throws:
 * // mcp config mcp.json: mcpServers.a b: server names are 1-64 of A-Z a-z 0-9 _ - (they prefix tool names)
 * ```
 * @module
 */
import { dirname, resolve } from "node:path";
import { z } from "zod";

/** One configured server: a process spoken to over stdio, or a streamable HTTP endpoint. */
export type McpServerConfig =
  | {
    command: string;
    args?: string[];
    env?: Record<string, string>;
    cwd?: string;
    type?: "stdio";
  }
  | { url: string; headers?: Record<string, string>; type?: "http" | "streamable-http" };

/** A parsed `--mcp-config`. */
export type McpConfig = { mcpServers: Record<string, McpServerConfig> };

/** Server names become tool-name prefixes (`NAME_TOOL`), so they keep to tool-name characters. */
export const SERVER_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const stringMap = z.record(z.string(), z.string());

const stdioSchema = z.strictObject({
  type: z.literal("stdio").optional(),
  command: z.string().min(1, "must not be empty"),
  args: z.array(z.string()).optional(),
  env: stringMap.optional(),
  cwd: z.string().min(1, "must not be empty").optional(),
});

const httpSchema = z.strictObject({
  type: z.enum(["http", "streamable-http"]).optional(),
  url: z.string().refine((u) => {
    try {
      const p = new URL(u).protocol;
      return p === "http:" || p === "https:";
    } catch {
      return false;
    }
  }, "must be an http:// or https:// URL"),
  headers: stringMap.optional(),
});

function zodLine(error: z.ZodError, prefix: string): string {
  const issue = error.issues[0];
  const path = [prefix, ...issue.path.map(String)].join(".");
  if (issue.code === "unrecognized_keys") {
    const keys = issue.keys.map((k) => `"${k}"`).join(", ");
    return `${path}: unknown field${issue.keys.length > 1 ? "s" : ""} ${keys}`;
  }
  return `${path}: ${issue.message}`;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Parses and validates the text of an `--mcp-config` file; `file` names it in messages and anchors a
 * relative `cwd`. Throws an Error with one clear line on any problem.
 */
export function parseMcpConfig(text: string, file: string): McpConfig {
  const fail = (why: string): never => {
    throw new Error(`mcp config ${file}: ${why}`);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return fail(`not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(raw)) return fail('expected a JSON object {"mcpServers": {...}}');
  for (const key of Object.keys(raw)) {
    if (key !== "mcpServers") fail(`unknown field "${key}" (expected only "mcpServers")`);
  }
  const servers = raw.mcpServers;
  if (!isObject(servers)) return fail('"mcpServers" must be an object of NAME: server');

  const dir = dirname(resolve(file));
  const out: Record<string, McpServerConfig> = {};
  for (const [name, entry] of Object.entries(servers)) {
    const at = `mcpServers.${name}`;
    if (!SERVER_NAME.test(name)) {
      fail(`${at}: server names are 1-64 of A-Z a-z 0-9 _ - (they prefix tool names)`);
    }
    if (!isObject(entry)) return fail(`${at}: must be an object with "command" or "url"`);
    const hasCommand = "command" in entry, hasUrl = "url" in entry;
    if (hasCommand && hasUrl) fail(`${at}: has both "command" and "url"; give one`);
    if (!hasCommand && !hasUrl) {
      fail(`${at}: needs "command" (stdio server) or "url" (streamable HTTP server)`);
    }
    if (entry.type === "sse") {
      fail(`${at}.type: the SSE transport is not supported; use streamable HTTP ("http")`);
    }
    if (hasCommand) {
      const r = stdioSchema.safeParse(entry);
      if (!r.success) return fail(zodLine(r.error, at));
      const cfg = r.data;
      out[name] = cfg.cwd === undefined ? cfg : { ...cfg, cwd: resolve(dir, cfg.cwd) };
    } else {
      const r = httpSchema.safeParse(entry);
      if (!r.success) return fail(zodLine(r.error, at));
      out[name] = r.data;
    }
  }
  return { mcpServers: out };
}

/** Reads and parses an `--mcp-config` file; an unreadable file is reported like any other problem. */
export async function loadMcpConfig(file: string): Promise<McpConfig> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (e) {
    throw new Error(`mcp config ${file}: cannot read (${(e as Error).message})`);
  }
  return parseMcpConfig(text, file);
}
