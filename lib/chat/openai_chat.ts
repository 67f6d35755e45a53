/**
 * The OpenAI Chat Completions dialect on the shared conversation model: request messages,
 * `tools` and `tool_choice` in; the reply out as a `message` (content, `reasoning_content`,
 * `tool_calls`) or as the `delta`s of streamed chunks, with stable tool-call `index` and `id`.
 *
 * @example
 * ```ts
 * import { chatCompletionsConversation, chatMessage } from "./openai_chat.ts";
 * const { conv, ignored } = chatCompletionsConversation({
 *   messages: [{ role: "user", content: "Hi" }],
 *   tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
 * });
 * ```
 * @module
 */
import {
  chatInputError,
  type Conversation,
  type Part,
  partsText,
  type ToolChoice,
  type ToolSpec,
  toolSpec,
  type Turn,
} from "./conversation.ts";
import type { ChatEvent, CollectedReply } from "./generation.ts";
import type { LoopEvent, StepResult } from "./tool_loop.ts";

export type OpenAIPart = { type: string; text?: unknown; [k: string]: unknown };
export type OpenAIMessage = {
  role: string;
  content?: string | OpenAIPart[] | null;
  name?: string | null;
  tool_calls?: {
    id?: string;
    type?: string;
    function?: { name?: string; arguments?: unknown };
  }[] | null;
  tool_call_id?: string;
  reasoning_content?: string | null;
  [k: string]: unknown;
};

export type OpenAITool = {
  type: string;
  function?: { name?: unknown; description?: unknown; parameters?: unknown; strict?: unknown };
  [k: string]: unknown;
};

export type OpenAIChatInput = {
  messages: OpenAIMessage[];
  tools?: OpenAITool[] | null;
  tool_choice?: unknown;
  parallel_tool_calls?: boolean | null;
};

function partsOf(content: OpenAIMessage["content"], param: string): Part[] {
  if (content == null) return [];
  if (typeof content === "string") return content === "" ? [] : [{ type: "text", text: content }];
  return content.flatMap((p, j): Part[] => {
    if (
      (p.type === "text" || p.type === "input_text" || p.type === "output_text") &&
      typeof p.text === "string"
    ) return [{ type: "text", text: p.text }];
    if (p.type === "refusal") return [];
    if (p.type === "image_url" || p.type === "input_image") {
      return [{ type: "image", source: `${param}[${j}]` }];
    }
    throw chatInputError(
      `${param}[${j}]`,
      `content part type "${p.type}" is not supported (text parts only)`,
    );
  });
}

function textOf(content: OpenAIMessage["content"], param: string): string {
  return partsText(partsOf(content, param), "");
}

/** Function tools become specs; other tool types are left out and named in `ignored`. */
export function openaiTools(
  tools: OpenAITool[] | null | undefined,
  ignored: string[],
): ToolSpec[] {
  const out: ToolSpec[] = [];
  (tools ?? []).forEach((t, i) => {
    if (t.type !== "function") {
      ignored.push(`tools[${i}] (${t.type})`);
      return;
    }
    const f = t.function ?? {};
    out.push(toolSpec(`tools[${i}].function`, {
      name: f.name,
      description: f.description,
      schema: f.parameters,
    }, "parameters"));
  });
  return out;
}

/** `none | auto | required | {type: "function", function: {name}}` (and `{type, name}`). */
export function openaiToolChoice(raw: unknown, hasTools: boolean): ToolChoice {
  if (raw == null) return { type: hasTools ? "auto" : "none" };
  if (raw === "none" || raw === "auto" || raw === "required") return { type: raw };
  if (typeof raw === "object") {
    const o = raw as { type?: unknown; function?: { name?: unknown }; name?: unknown };
    const name = o.function?.name ?? o.name;
    if (o.type === "function" && typeof name === "string") return { type: "tool", name };
  }
  throw chatInputError(
    "tool_choice",
    'must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
  );
}

/** Request messages and tools as the neutral conversation; `ignored` names what was left out. */
export function chatCompletionsConversation(
  b: OpenAIChatInput,
): { conv: Conversation; ignored: string[] } {
  const ignored: string[] = [];
  const tools = openaiTools(b.tools, ignored);
  const turns: Turn[] = b.messages.map((m, i): Turn => {
    const param = `messages[${i}].content`;
    switch (m.role) {
      case "system":
      case "developer":
        return { role: m.role, parts: partsOf(m.content, param) };
      case "user":
        return { role: "user", parts: partsOf(m.content, param) };
      case "assistant": {
        const parts: Part[] = [];
        if (typeof m.reasoning_content === "string" && m.reasoning_content) {
          parts.push({ type: "reasoning", text: m.reasoning_content });
        }
        parts.push(...partsOf(m.content, param));
        (m.tool_calls ?? []).forEach((c, j) => {
          const name = c.function?.name;
          if (typeof name !== "string") {
            throw chatInputError(`messages[${i}].tool_calls[${j}].function.name`, "is required");
          }
          const args = c.function?.arguments;
          parts.push({
            type: "tool_call",
            id: c.id ?? `call_${i}_${j}`,
            name,
            arguments: typeof args === "string" ? args : JSON.stringify(args ?? {}),
          });
        });
        return { role: "assistant", parts };
      }
      case "tool":
        return {
          role: "tool",
          parts: [{
            type: "tool_result",
            callId: m.tool_call_id ?? "",
            ...(m.name ? { name: m.name } : {}),
            content: textOf(m.content, param),
          }],
        };
      case "function":
        return {
          role: "tool",
          parts: [{
            type: "tool_result",
            callId: m.name ?? "",
            ...(m.name ? { name: m.name } : {}),
            content: textOf(m.content, param),
          }],
        };
      default:
        throw chatInputError(
          `messages[${i}].role`,
          `unknown role "${m.role}" (system, developer, user, assistant, tool)`,
        );
    }
  });
  return {
    conv: {
      turns,
      tools,
      toolChoice: openaiToolChoice(b.tool_choice, tools.length > 0),
      parallelToolCalls: b.parallel_tool_calls ?? true,
    },
    ignored,
  };
}

/** The `message` of a non-streamed choice. */
export function chatMessage(r: CollectedReply): Record<string, unknown> {
  const msg: Record<string, unknown> = {
    role: "assistant",
    content: r.calls.length && !r.text ? null : r.text,
  };
  if (r.reasoning) msg.reasoning_content = r.reasoning;
  if (r.calls.length) {
    msg.tool_calls = r.calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return msg;
}

/**
 * The `delta` a reply event becomes in a streamed chunk (undefined: nothing to send). Tool-call
 * deltas carry `index` (the call's position in this choice) and, on the first, `id` and name.
 */
export function chatDelta(ev: ChatEvent): Record<string, unknown> | undefined {
  switch (ev.type) {
    case "text":
      return ev.text ? { content: ev.text } : undefined;
    case "reasoning":
      return ev.text ? { reasoning_content: ev.text } : undefined;
    case "tool_call_start":
      return {
        tool_calls: [{
          index: ev.index,
          id: ev.id,
          type: "function",
          function: { name: ev.name, arguments: "" },
        }],
      };
    case "tool_call_args":
      return ev.text
        ? { tool_calls: [{ index: ev.index, function: { arguments: ev.text } }] }
        : undefined;
    default:
      return undefined;
  }
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
