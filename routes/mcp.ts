/**
 * What the three chat routes share for MCP: reading a request's attachments (Chat Completions and
 * Responses `tools: [{type: "mcp", server_label, allowed_tools?}]`, Anthropic `mcp_servers`),
 * adding the attached tools to the conversation, running the server-side tool loop with later
 * rounds planned like the first, and the `hearth_tool_steps` shape of Chat Completions.
 *
 * @example
 * ```ts
 * import { attachToConversation, mcpToolEntries, serverToolLoop } from "./mcp.ts";
 * const wanted = mcpToolEntries(body.tools);
 * const mcp = attachToConversation(state, conv, wanted, body.tool_choice == null);
 * const events = serverToolLoop(state, firstRound, mcp, genOpts, renderOpts, signal);
 * ```
 * @module
 */
import type { Conversation } from "../lib/chat/conversation.ts";
import { type ChatEvent, type ChatGenOptions, chatRound } from "../lib/chat/generation.ts";
import type { RenderOptions } from "../lib/chat/render.ts";
import type { ServerState } from "./state.ts";
import {
  attachMcp,
  MAX_TOOL_ROUNDS,
  type McpAttachment,
  withServerTools,
} from "../lib/chat/mcp_attach.ts";
import {
  chatWithServerTools,
  type LoopEvent,
  type ServerTools,
  type StepResult,
} from "../lib/chat/tool_loop.ts";

export type McpRequest = { tools: ServerTools; notes: string[]; conv?: Conversation };

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

/**
 * Adds the attached servers' tools to `conv`; with no client tools and no `tool_choice`, the
 * model may call them (`auto`). Throws `McpAttachError` for an unknown server.
 */
export function attachToConversation(
  state: ServerState,
  conv: Conversation,
  wanted: McpAttachment[],
  noToolChoice: boolean,
): McpRequest {
  const { tools, notes } = attachMcp(state.mcp, wanted);
  const hadTools = conv.tools.length > 0;
  conv.tools = withServerTools(conv.tools, tools, "tools");
  if (!hadTools && noToolChoice && tools.specs.length) conv.toolChoice = { type: "auto" };
  return { tools, notes, conv };
}

/** The loop over rounds: the first already submitted, the later ones planned from `mcp.conv`. */
export function serverToolLoop(
  state: ServerState,
  first: AsyncIterable<ChatEvent>,
  mcp: McpRequest,
  opts: ChatGenOptions,
  render: RenderOptions & { prefill?: boolean },
  signal?: AbortSignal,
): AsyncGenerator<LoopEvent> {
  const engine = state.engine!;
  return chatWithServerTools(
    (conv, round) =>
      round === 0 ? first : chatRound(
        (req) => engine.submit(req),
        engine.model,
        state.template!,
        conv,
        // A prefilled assistant turn belongs to the first round only.
        opts,
        { ...render, prefill: false },
        signal,
      ),
    mcp.conv!,
    mcp.tools,
    { maxRounds: MAX_TOOL_ROUNDS, signal },
  );
}

/** One executed step as Chat Completions shows it (`message.hearth_tool_steps[]`). */
export type ToolStep = {
  id: string;
  type: "mcp";
  server_label: string;
  name: string;
  arguments: string;
  output: string;
  is_error: boolean;
};

export function toolStep(r: StepResult): ToolStep {
  return {
    id: r.id,
    type: "mcp",
    server_label: r.server,
    name: r.tool,
    arguments: r.arguments,
    output: r.content,
    is_error: r.isError,
  };
}

/** Passes the reply events through, keeping each executed step in `steps` (non-streaming). */
export async function* recordSteps(
  events: AsyncIterable<LoopEvent>,
  steps: ToolStep[],
): AsyncGenerator<ChatEvent> {
  for await (const ev of events) {
    if (ev.type === "server_tool_result") steps.push(toolStep(ev));
    else if (ev.type !== "server_tool_call") yield ev;
  }
}
