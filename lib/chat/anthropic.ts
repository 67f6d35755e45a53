/**
 * The Anthropic Messages dialect on the shared conversation model: `system` (string or blocks,
 * and `system`-role messages mid-conversation, as Claude Code sends them), `text`, `tool_use`,
 * `tool_result` and `thinking` blocks, `tools` and `tool_choice` in; the reply out as content
 * blocks (`thinking` with a signature, `text`, `tool_use`) or as the stream's
 * `content_block_*` events (`thinking_delta` then `signature_delta`, `text_delta`,
 * `input_json_delta`).
 *
 * Claude Code writes a per-request billing line (`x-anthropic-billing-header: ...`) at the top
 * of its system prompt; it is dropped here, so every request of a session shares its prefix and
 * the engine reuses the KV cache instead of recomputing 20k tokens each turn.
 *
 * @example
 * ```ts
 * import { anthropicConversation, anthropicStopReason } from "./anthropic.ts";
 * const { conv, ignored } = anthropicConversation({
 *   system: "Be brief.",
 *   messages: [{ role: "user", content: "Hi" }],
 * });
 * ```
 * @module
 */
import {
  chatInputError,
  type Conversation,
  IMAGE_PLACEHOLDER,
  type Part,
  type ToolChoice,
  type ToolSpec,
  toolSpec,
  type Turn,
} from "./conversation.ts";
import type { ChatEvent } from "./generation.ts";
import type { LoopEvent, Segment, StepCall, StepResult } from "./tool_loop.ts";

export type AnthropicBlock = { type: string; [k: string]: unknown };

export type AnthropicMessage = {
  role: string;
  content: string | AnthropicBlock[];
};

export type AnthropicTool = {
  name?: unknown;
  description?: unknown;
  input_schema?: unknown;
  type?: unknown;
  [k: string]: unknown;
};

export type AnthropicInput = {
  system?: string | AnthropicBlock[];
  messages: AnthropicMessage[];
  tools?: AnthropicTool[];
  tool_choice?: { type: string; name?: unknown; disable_parallel_tool_use?: unknown };
};

const BILLING_LINE = /^x-anthropic-billing-header:[^\n]*\n?/gm;

/** System text without Claude Code's per-request billing line. */
export function stripBillingLine(text: string): string {
  return text.replace(BILLING_LINE, "");
}

function systemParts(system: AnthropicInput["system"]): Part[] {
  if (system === undefined) return [];
  const blocks = typeof system === "string" ? [{ type: "text", text: system }] : system;
  return blocks.flatMap((b, i): Part[] => {
    if (b.type !== "text" || typeof b.text !== "string") {
      throw chatInputError(`system[${i}]`, `system blocks must be text blocks (got "${b.type}")`);
    }
    const text = stripBillingLine(b.text);
    return text.trim() ? [{ type: "text", text }] : [];
  });
}

/** A tool_result's content: a string, or text blocks (other blocks refused by name). */
function resultText(content: unknown, param: string, ignored: string[]): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) {
    throw chatInputError(param, "must be a string or an array of blocks");
  }
  return content.map((b: AnthropicBlock, i) => {
    if (b.type === "text" && typeof b.text === "string") return b.text;
    if (b.type === "image") {
      ignored.push(`${param}[${i}] (image: the model reads text only)`);
      return IMAGE_PLACEHOLDER;
    }
    return JSON.stringify(b);
  }).join("\n");
}

function blockParts(
  content: string | AnthropicBlock[],
  param: string,
  ignored: string[],
): { parts: Part[]; results: Part[] } {
  if (typeof content === "string") {
    return { parts: content ? [{ type: "text", text: content }] : [], results: [] };
  }
  const parts: Part[] = [];
  const results: Part[] = [];
  content.forEach((b, i) => {
    const at = `${param}[${i}]`;
    switch (b.type) {
      case "text":
        if (typeof b.text !== "string") throw chatInputError(`${at}.text`, "must be a string");
        parts.push({ type: "text", text: b.text });
        break;
      case "thinking":
        if (typeof b.thinking === "string" && b.thinking) {
          parts.push({ type: "reasoning", text: b.thinking });
        }
        break;
      case "redacted_thinking":
        break;
      case "tool_use":
      case "server_tool_use":
        if (typeof b.id !== "string" || typeof b.name !== "string") {
          throw chatInputError(at, "a tool_use block needs a string id and name");
        }
        parts.push({
          type: "tool_call",
          id: b.id,
          name: b.name,
          arguments: JSON.stringify(b.input ?? {}),
        });
        break;
      case "tool_result":
        if (typeof b.tool_use_id !== "string") {
          throw chatInputError(`${at}.tool_use_id`, "must be a string");
        }
        results.push({
          type: "tool_result",
          callId: b.tool_use_id,
          content: resultText(b.content, `${at}.content`, ignored),
          ...(b.is_error === true ? { isError: true } : {}),
        });
        break;
      case "document": {
        const src = b.source as { type?: string; data?: unknown } | undefined;
        if (src?.type === "text" && typeof src.data === "string") {
          parts.push({ type: "text", text: src.data });
          break;
        }
        throw chatInputError(at, "only plain-text documents are supported (source.type text)");
      }
      case "image":
        parts.push({ type: "image", source: at });
        break;
      default:
        // Blocks that carry no text for the model (web search results of a server tool, a
        // container upload, ...): left out and named, never a 400.
        ignored.push(`${at} (${b.type})`);
    }
  });
  return { parts, results };
}

/** Custom tools become specs; server tools (`web_search_…`, `bash_…`, ...) are left out. */
export function anthropicTools(tools: AnthropicTool[] | undefined, ignored: string[]): ToolSpec[] {
  const out: ToolSpec[] = [];
  (tools ?? []).forEach((t, i) => {
    if (t.type !== undefined && t.type !== null && t.type !== "custom") {
      ignored.push(`tools[${i}] (${String(t.type)})`);
      return;
    }
    out.push(toolSpec(
      `tools[${i}]`,
      {
        name: t.name,
        description: t.description,
        schema: t.input_schema,
      },
      "input_schema",
      true,
    ));
  });
  return out;
}

export function anthropicToolChoice(
  raw: AnthropicInput["tool_choice"],
  hasTools: boolean,
): { choice: ToolChoice; parallel: boolean } {
  const parallel = raw?.disable_parallel_tool_use !== true;
  switch (raw?.type) {
    case undefined:
      return { choice: { type: hasTools ? "auto" : "none" }, parallel };
    case "auto":
    case "none":
      return { choice: { type: raw.type }, parallel };
    case "any":
      return { choice: { type: "required" }, parallel };
    case "tool":
      if (typeof raw.name !== "string") {
        throw chatInputError("tool_choice.name", 'is required with type "tool"');
      }
      return { choice: { type: "tool", name: raw.name }, parallel };
    default:
      throw chatInputError(
        "tool_choice.type",
        `"${raw?.type}" is not one of auto, any, tool, none`,
      );
  }
}

/** The request as the neutral conversation; `ignored` names what was left out. */
export function anthropicConversation(
  b: AnthropicInput,
): { conv: Conversation; ignored: string[] } {
  const ignored: string[] = [];
  const tools = anthropicTools(b.tools, ignored);
  const turns: Turn[] = [];
  const sys = systemParts(b.system);
  if (sys.length) turns.push({ role: "system", parts: sys });
  b.messages.forEach((m, i) => {
    const param = `messages[${i}].content`;
    if (m.role === "system") {
      const parts = systemParts(m.content);
      if (parts.length) turns.push({ role: "system", parts });
      return;
    }
    if (m.role !== "user" && m.role !== "assistant") {
      throw chatInputError(`messages[${i}].role`, `"${m.role}" is not one of user, assistant`);
    }
    const { parts, results } = blockParts(m.content, param, ignored);
    // A user turn's tool results answer the calls before it; its text comes after them.
    if (results.length) turns.push({ role: "tool", parts: results });
    if (parts.length || !results.length) turns.push({ role: m.role, parts });
  });
  const { choice, parallel } = anthropicToolChoice(b.tool_choice, tools.length > 0);
  return { conv: { turns, tools, toolChoice: choice, parallelToolCalls: parallel }, ignored };
}

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

export function anthropicStopReason(end: Extract<ChatEvent, { type: "end" }>): StopReason {
  if (end.finishReason === "tool_calls") return "tool_use";
  if (end.stopString !== undefined) return "stop_sequence";
  return end.finishReason === "stop" ? "end_turn" : "max_tokens";
}

/** Anthropic ids for tool calls: `toolu_` and the call's own suffix. */
export function toolUseId(id: string): string {
  return id.startsWith("toolu_") ? id : `toolu_${id.replace(/^call_/, "")}`;
}

/**
 * An opaque signature for a thinking block. Anthropic signs thinking so clients hand it back
 * unchanged; here it only has to be stable and non-empty (clients check it is present).
 */
export function thinkingSignature(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return btoa(`hearth:${(h >>> 0).toString(16)}:${text.length}`);
}

function parseInput(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return {};
  }
}

/** An executed MCP step as Anthropic's two blocks: the call, then its result. */
function mcpBlocks(
  call: Pick<StepCall, "id" | "tool" | "server" | "arguments">,
  result?: StepResult,
): Record<string, unknown>[] {
  const use = {
    type: "mcp_tool_use",
    id: toolUseId(call.id).replace(/^toolu_/, "mcptoolu_"),
    name: call.tool,
    server_name: call.server,
    input: parseInput(call.arguments),
  };
  if (!result) return [use];
  return [use, {
    type: "mcp_tool_result",
    tool_use_id: use.id,
    is_error: result.isError,
    content: [{ type: "text", text: result.content }],
  }];
}

/** The content blocks of a whole reply, in order, MCP steps where they happened. */
export function anthropicSegments(segments: Segment[]): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = [];
  for (const s of segments) {
    if (s.type === "reasoning") {
      blocks.push({ type: "thinking", thinking: s.text, signature: thinkingSignature(s.text) });
    } else if (s.type === "text") blocks.push({ type: "text", text: s.text });
    else if (s.type === "call") {
      blocks.push({
        type: "tool_use",
        id: toolUseId(s.id),
        name: s.name,
        input: parseInput(s.arguments),
      });
    } else blocks.push(...mcpBlocks(s.call, s.result));
  }
  // A reply with nothing in it is still one (empty) text block, as the real API answers.
  if (!blocks.length) blocks.push({ type: "text", text: "" });
  return blocks;
}

export type StreamFrame = { event: string; data: Record<string, unknown> };

/**
 * Content-block frames from reply events: each run of reasoning, text or one tool call is one
 * block, opened when its first event arrives and closed when another kind starts (or at the end).
 */
export function newBlockStream(): {
  push(ev: LoopEvent): StreamFrame[];
  close(): StreamFrame[];
} {
  let index = -1;
  let open: string | undefined;
  let thinking = "";
  let any = false;
  const stop = (): StreamFrame[] => {
    if (!open) return [];
    const frames: StreamFrame[] = [];
    if (open === "thinking") {
      frames.push({
        event: "content_block_delta",
        data: {
          type: "content_block_delta",
          index,
          delta: { type: "signature_delta", signature: thinkingSignature(thinking) },
        },
      });
    }
    frames.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
    open = undefined;
    return frames;
  };
  const start = (block: Record<string, unknown>): StreamFrame[] => {
    const frames = stop();
    index++;
    any = true;
    open = block.type as string;
    if (open === "thinking") thinking = "";
    frames.push({
      event: "content_block_start",
      data: { type: "content_block_start", index, content_block: block },
    });
    return frames;
  };
  const delta = (d: Record<string, unknown>): StreamFrame => ({
    event: "content_block_delta",
    data: { type: "content_block_delta", index, delta: d },
  });
  return {
    push(ev) {
      switch (ev.type) {
        case "reasoning": {
          if (!ev.text) return [];
          const frames = open === "thinking"
            ? []
            : start({ type: "thinking", thinking: "", signature: "" });
          thinking += ev.text;
          frames.push(delta({ type: "thinking_delta", thinking: ev.text }));
          return frames;
        }
        case "text": {
          if (!ev.text) return [];
          const frames = open === "text" ? [] : start({ type: "text", text: "" });
          frames.push(delta({ type: "text_delta", text: ev.text }));
          return frames;
        }
        case "tool_call_start":
          return start({ type: "tool_use", id: toolUseId(ev.id), name: ev.name, input: {} });
        case "tool_call_args":
          return ev.text ? [delta({ type: "input_json_delta", partial_json: ev.text })] : [];
        case "tool_call_end":
          return stop();
        case "server_tool_call":
          // Shown whole once its result is known, as the API's server tool blocks arrive.
          return [];
        case "server_tool_result": {
          const frames: StreamFrame[] = [];
          for (const block of mcpBlocks(ev, ev)) {
            frames.push(...start(block), ...stop());
          }
          return frames;
        }
        default:
          return [];
      }
    },
    close() {
      const frames = stop();
      if (!any) frames.push(...start({ type: "text", text: "" }), ...stop());
      return frames;
    },
  };
}
