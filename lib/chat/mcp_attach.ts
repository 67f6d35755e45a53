/**
 * A request's MCP attachments (each dialect names configured servers its own way) resolved
 * against the running registry into the {@link ServerTools} the tool loop executes. A request
 * names a configured server, never a command or an arbitrary URL: an unknown name, or a URL that
 * differs from nothing configured, is the client's mistake (`McpAttachError`, the route's 400). A
 * configured server that is down attaches no tools; the note says so (`x-hearth-ignored-fields`).
 *
 * @example
 * ```ts
 * import { attachMcp } from "./mcp_attach.ts";
 * declare const registry: import("../mcp/registry.ts").McpRegistry;
 * const { tools, notes } = attachMcp(registry, [{ server: "calc", param: "tools[0]" }]);
 * tools.specs.map((t) => t.name); // ["calc_add", "calc_echo"]
 * ```
 * @module
 */
import type { ToolSpec } from "./conversation.ts";
import type { McpRegistry } from "../mcp/registry.ts";
import type { ServerTools } from "./tool_loop.ts";

export type McpAttachment = {
  server: string;
  /** Only these of the server's own tool names, when given. */
  allowedTools?: string[];
  /** The wire field that named it, for errors and notes. */
  param: string;
};

export type McpAttachError = Error & { param: string; mcpAttach: true };

function attachError(param: string, message: string): McpAttachError {
  return Object.assign(new Error(`${param}: ${message}`), { param, mcpAttach: true as const });
}

export function isMcpAttachError(e: unknown): e is McpAttachError {
  return e instanceof Error && (e as Partial<McpAttachError>).mcpAttach === true;
}

function stringList(v: unknown): string[] | undefined {
  if (Array.isArray(v)) return v.filter((x): x is string => typeof x === "string");
  // The Responses API also takes `{tool_names: [...]}`.
  if (v && typeof v === "object" && Array.isArray((v as { tool_names?: unknown }).tool_names)) {
    return stringList((v as { tool_names: unknown }).tool_names);
  }
  return undefined;
}

/** `tools` entries of type `mcp` (Chat Completions, Responses) as attachments. */
export function mcpToolEntries(
  tools: readonly { type: string; [k: string]: unknown }[] | null | undefined,
): McpAttachment[] {
  const out: McpAttachment[] = [];
  (tools ?? []).forEach((t, i) => {
    if (t.type !== "mcp") return;
    const allowed = stringList(t.allowed_tools);
    out.push({
      server: typeof t.server_label === "string" ? t.server_label : "",
      ...(allowed ? { allowedTools: allowed } : {}),
      param: `tools[${i}].server_label`,
    });
  });
  return out;
}

/** Anthropic `mcp_servers` entries as attachments (`tool_configuration` honoured). */
export function anthropicMcpServers(
  servers: readonly Record<string, unknown>[] | undefined,
): McpAttachment[] {
  return (servers ?? []).flatMap((s, i) => {
    const config = s.tool_configuration as
      | { enabled?: unknown; allowed_tools?: unknown }
      | undefined;
    if (config?.enabled === false) return [];
    const allowed = stringList(config?.allowed_tools);
    return [{
      server: typeof s.name === "string" ? s.name : "",
      ...(allowed ? { allowedTools: allowed } : {}),
      param: `mcp_servers[${i}].name`,
    }];
  });
}

/** Round limit of the server-side loop: calls, results, and a last round that must answer. */
export const MAX_TOOL_ROUNDS = 8;

export function attachMcp(
  registry: McpRegistry | undefined,
  wanted: McpAttachment[],
): { tools: ServerTools; notes: string[] } {
  const specs: ToolSpec[] = [];
  const owners = new Map<string, { server: string; tool: string }>();
  const notes: string[] = [];
  for (const w of wanted) {
    const tools = registry?.tools(w.server);
    if (!registry || tools === undefined) {
      const known = registry?.names() ?? [];
      throw attachError(
        w.param,
        `no MCP server named "${w.server}" is configured` +
          (known.length ? ` (configured: ${known.join(", ")})` : " (start with --mcp-config FILE)"),
      );
    }
    if (tools.length === 0) {
      const state = registry.states().find((s) => s.name === w.server);
      notes.push(`${w.param} (MCP server "${w.server}" is ${state?.status ?? "unavailable"})`);
      continue;
    }
    for (const t of tools) {
      if (w.allowedTools && !w.allowedTools.includes(t.toolName)) continue;
      if (owners.has(t.name)) continue;
      owners.set(t.name, { server: t.server, tool: t.toolName });
      specs.push({
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        parameters: t.inputSchema,
      });
    }
  }
  return {
    notes,
    tools: {
      specs,
      owner: (name) => owners.get(name),
      call: (name, args, signal) => registry!.call(name, args, { signal }),
    },
  };
}

/** The client's tools and the attached ones together; a name both use is the client's mistake. */
export function withServerTools(clientTools: ToolSpec[], server: ServerTools, param: string) {
  for (const t of clientTools) {
    if (server.owner(t.name)) {
      throw attachError(param, `tool "${t.name}" is also the name of an attached MCP tool`);
    }
  }
  return [...clientTools, ...server.specs];
}
