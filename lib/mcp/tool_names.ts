/**
 * The names the MCP registry (registry.ts) offers a server's tools under: `${server}_${tool}` in
 * [A-Za-z0-9_-], at most 64 characters (the tool-name limit of the big APIs), with a stable hash
 * suffix for a long name and a counter for a name another server already holds.
 *
 * @example
 * ```ts
 * import { exposedToolName, exposeTools } from "./tool_names.ts";
 * exposedToolName("calc", "add two"); // "calc_add_two"
 * exposeTools("calc", [{ name: "add" }], new Set(["calc_add"]))[0].name; // "calc_add_2"
 * ```
 * @module
 */
import type { McpTool } from "./types.ts";

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

/**
 * The tools a server listed, as offered: unnamed ones dropped, each named apart from `taken` (the
 * names other servers hold; added to as names are given), its schema made an object schema.
 */
export function exposeTools(
  server: string,
  listed: Record<string, unknown>[],
  taken: Set<string>,
): McpTool[] {
  const out: McpTool[] = [];
  for (const t of listed) {
    if (typeof t.name !== "string" || !t.name) continue;
    const name = uniqueName(exposedToolName(server, t.name), taken);
    taken.add(name);
    const schema = typeof t.inputSchema === "object" && t.inputSchema !== null
      ? t.inputSchema as Record<string, unknown>
      : {};
    out.push({
      server,
      name,
      toolName: t.name,
      ...(typeof t.description === "string" ? { description: t.description } : {}),
      inputSchema: { ...schema, type: "object" },
    });
  }
  return out;
}
