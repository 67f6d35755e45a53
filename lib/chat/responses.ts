/**
 * The OpenAI Responses dialect (what Codex CLI speaks) on the shared conversation model: input
 * items (`message`, `function_call`, `function_call_output`, `custom_tool_call`,
 * `custom_tool_call_output`, `reasoning`) and `instructions` in; the reply out as output items
 * (`reasoning`, `message` with `output_text`, `function_call`, `custom_tool_call`) or as the
 * stream's typed events, each numbered with `sequence_number`.
 *
 * Codex's whole tool surface reaches the model through plain function tools, so every family's
 * call format carries it unchanged: a `namespace` of functions is offered flattened (`NS__TOOL`)
 * and a call comes back as `{name: TOOL, namespace: NS}`, as Codex dispatches it; a `custom`
 * (freeform) tool such as `apply_patch` is offered as a function with one string parameter,
 * `input`, whose content is constrained by the tool's Lark `format` (`lib/constrain/lark.ts`,
 * through the schema keyword `x-hearth-lark`), and its call comes back as a `custom_tool_call`
 * carrying that string. {@link ToolOrigins} remembers which offered name is which.
 *
 * @example
 * ```ts
 * import { responsesConversation } from "./responses.ts";
 * const { conv } = responsesConversation({
 *   instructions: "Be brief.",
 *   input: [{ role: "user", content: [{ type: "input_text", text: "Hi" }] }],
 * });
 * ```
 * @module
 */
import {
  chatInputError,
  type Conversation,
  type Part,
  type ToolChoice,
  type ToolSpec,
  toolSpec,
  type Turn,
} from "./conversation.ts";
import type { LoopEvent, Segment, StepResult } from "./tool_loop.ts";
import { LARK_KEYWORD } from "../constrain/lark.ts";

export type ResponseItem = { type?: string; [k: string]: unknown };

export type ResponsesInput = {
  instructions?: string | null;
  input?: string | ResponseItem[];
  tools?: ResponseItem[] | null;
  tool_choice?: unknown;
  parallel_tool_calls?: boolean | null;
};

/** Input as a list of items (a string input is one user message). */
export function inputItems(input: ResponsesInput["input"]): ResponseItem[] {
  if (input === undefined) return [];
  if (typeof input === "string") return [{ type: "message", role: "user", content: input }];
  return input;
}

function contentParts(content: unknown, param: string): Part[] {
  if (typeof content === "string") return content ? [{ type: "text", text: content }] : [];
  if (!Array.isArray(content)) throw chatInputError(param, "must be a string or an array of parts");
  return content.flatMap((p: ResponseItem, j): Part[] => {
    if (
      (p.type === "input_text" || p.type === "output_text" || p.type === "text") &&
      typeof p.text === "string"
    ) return [{ type: "text", text: p.text }];
    if (p.type === "refusal") return [];
    if (p.type === "input_image") return [{ type: "image", source: `${param}[${j}]` }];
    if (p.type === "input_file" || p.type === "input_audio") {
      throw chatInputError(
        `${param}[${j}]`,
        `${p.type} is not supported: the served model reads text only`,
      );
    }
    throw chatInputError(`${param}[${j}]`, `content part type "${p.type}" is not supported`);
  });
}

function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  if (Array.isArray(output)) {
    return output.map((p: ResponseItem) => typeof p.text === "string" ? p.text : JSON.stringify(p))
      .join("\n");
  }
  return JSON.stringify(output ?? "");
}

/** What an offered tool is on the wire: a `custom` tool, or a function inside a `namespace`. */
export type ToolOrigin =
  | { kind: "custom" }
  | { kind: "namespace"; namespace: string; name: string };

/** Offered tool name → origin; plain function tools are not in it. */
export type ToolOrigins = Map<string, ToolOrigin>;

/** Joins a namespace and a tool into the one name the model sees. */
export const NAMESPACE_SEPARATOR = "__";

/** The one parameter a custom tool is offered with. */
const CUSTOM_INPUT = "input";

/**
 * Function, namespace and custom tools become specs (`origins` learns the last two, `params` the
 * wire field of each spec); hosted tools (web search, shell, MCP, ...) are left out and named.
 */
export function responsesTools(
  tools: ResponseItem[] | null | undefined,
  ignored: string[],
  origins: ToolOrigins = new Map(),
  params: string[] = [],
): ToolSpec[] {
  const out: ToolSpec[] = [];
  const add = (spec: ToolSpec, param: string, origin?: ToolOrigin) => {
    if (origins.has(spec.name) || out.some((t) => t.name === spec.name)) {
      throw chatInputError(`${param}.name`, `duplicate tool "${spec.name}"`);
    }
    if (origin) origins.set(spec.name, origin);
    out.push(spec);
    params.push(param);
  };
  (tools ?? []).forEach((t, i) => {
    const at = `tools[${i}]`;
    if (t.type === "function") {
      add(
        toolSpec(
          at,
          { name: t.name, description: t.description, schema: t.parameters },
          "parameters",
        ),
        at,
      );
    } else if (t.type === "custom") {
      add(customToolSpec(t, at), at, { kind: "custom" });
    } else if (t.type === "namespace") {
      if (typeof t.name !== "string" || !t.name) throw chatInputError(`${at}.name`, "is required");
      if (!Array.isArray(t.tools)) throw chatInputError(`${at}.tools`, "must be an array");
      (t.tools as ResponseItem[]).forEach((f, j) => {
        const fat = `${at}.tools[${j}]`;
        if (f.type !== "function") {
          ignored.push(`${fat} (${String(f.type)})`);
          return;
        }
        const spec = toolSpec(fat, {
          name: f.name,
          description: f.description,
          schema: f.parameters,
        }, "parameters");
        add(
          { ...spec, name: `${t.name}${NAMESPACE_SEPARATOR}${spec.name}` },
          fat,
          { kind: "namespace", namespace: t.name as string, name: spec.name },
        );
      });
    } else ignored.push(`${at} (${String(t.type)})`);
  });
  return out;
}

/**
 * A custom (freeform) tool as a function of one string, `input`: free text without a `format`
 * (or with `{type: "text"}`), else the text its Lark grammar or regex derives.
 */
function customToolSpec(t: ResponseItem, at: string): ToolSpec {
  if (typeof t.name !== "string") throw chatInputError(`${at}.name`, "is required");
  const input: Record<string, unknown> = { type: "string" };
  const f = t.format as { type?: unknown; syntax?: unknown; definition?: unknown } | undefined;
  if (f != null && f.type !== "text") {
    if (f.type !== "grammar" || typeof f.definition !== "string") {
      throw chatInputError(
        `${at}.format`,
        'must be {"type": "text"} or {"type": "grammar", "syntax": "lark" | "regex", "definition": ...}',
      );
    }
    if (f.syntax === "lark") input[LARK_KEYWORD] = f.definition;
    else if (f.syntax === "regex") input.pattern = `^(?:${f.definition})$`;
    else throw chatInputError(`${at}.format.syntax`, 'must be "lark" or "regex"');
  }
  return {
    name: t.name,
    ...(typeof t.description === "string" ? { description: t.description } : {}),
    parameters: {
      type: "object",
      properties: { [CUSTOM_INPUT]: input },
      required: [CUSTOM_INPUT],
      additionalProperties: false,
    },
  };
}

export function responsesToolChoice(raw: unknown, hasTools: boolean): ToolChoice {
  if (raw == null) return { type: hasTools ? "auto" : "none" };
  if (raw === "none" || raw === "auto" || raw === "required") return { type: raw };
  if (typeof raw === "object") {
    const o = raw as { type?: unknown; name?: unknown; mode?: unknown };
    if ((o.type === "function" || o.type === "custom") && typeof o.name === "string") {
      const ns = (o as { namespace?: unknown }).namespace;
      return {
        type: "tool",
        name: typeof ns === "string" ? `${ns}${NAMESPACE_SEPARATOR}${o.name}` : o.name,
      };
    }
    if (o.type === "allowed_tools") return { type: o.mode === "required" ? "required" : "auto" };
  }
  throw chatInputError(
    "tool_choice",
    'must be "none", "auto", "required", {"type": "function", "name": ...} or ' +
      '{"type": "custom", "name": ...}',
  );
}

/** Items as turns; consecutive items of one assistant turn (reasoning, calls) stay together. */
export function itemsToTurns(items: ResponseItem[], ignored: string[]): Turn[] {
  const turns: Turn[] = [];
  const push = (role: Turn["role"], parts: Part[]) => {
    const last = turns.at(-1);
    if (last && last.role === role && (role === "assistant" || role === "tool")) {
      last.parts.push(...parts);
    } else turns.push({ role, parts });
  };
  items.forEach((it, i) => {
    const type = it.type ?? "message";
    switch (type) {
      case "message": {
        const role = it.role;
        if (role !== "user" && role !== "system" && role !== "developer" && role !== "assistant") {
          throw chatInputError(
            `input[${i}].role`,
            `"${role}" is not one of user, system, developer, assistant`,
          );
        }
        push(role, contentParts(it.content, `input[${i}].content`));
        break;
      }
      case "function_call":
        if (typeof it.name !== "string" || typeof it.call_id !== "string") {
          throw chatInputError(`input[${i}]`, "a function_call needs a string name and call_id");
        }
        push("assistant", [{
          type: "tool_call",
          id: it.call_id,
          // A call into a namespace, replayed under the flattened name the model was offered.
          name: typeof it.namespace === "string"
            ? `${it.namespace}${NAMESPACE_SEPARATOR}${it.name}`
            : it.name,
          arguments: typeof it.arguments === "string"
            ? it.arguments
            : JSON.stringify(it.arguments ?? {}),
        }]);
        break;
      case "custom_tool_call":
        if (typeof it.name !== "string" || typeof it.call_id !== "string") {
          throw chatInputError(`input[${i}]`, "a custom_tool_call needs a string name and call_id");
        }
        push("assistant", [{
          type: "tool_call",
          id: it.call_id,
          name: it.name,
          arguments: JSON.stringify({
            [CUSTOM_INPUT]: typeof it.input === "string" ? it.input : "",
          }),
        }]);
        break;
      case "function_call_output":
      case "custom_tool_call_output":
        if (typeof it.call_id !== "string") {
          throw chatInputError(`input[${i}].call_id`, "must be a string");
        }
        push("tool", [{ type: "tool_result", callId: it.call_id, content: outputText(it.output) }]);
        break;
      case "mcp_call": {
        // A step Hearth ran: replayed as the call the model made and what it returned.
        if (typeof it.server_label !== "string" || typeof it.name !== "string") {
          throw chatInputError(`input[${i}]`, "an mcp_call needs a string server_label and name");
        }
        const callId = typeof it.id === "string" ? it.id : `mcp_${i}`;
        push("assistant", [{
          type: "tool_call",
          id: callId,
          name: `${it.server_label}_${it.name}`,
          arguments: typeof it.arguments === "string" ? it.arguments : "{}",
        }]);
        push("tool", [{
          type: "tool_result",
          callId,
          content: typeof it.output === "string" ? it.output : String(it.error ?? ""),
          ...(it.error ? { isError: true } : {}),
        }]);
        break;
      }
      case "reasoning": {
        const texts = [
          ...((it.content as ResponseItem[] | undefined) ?? []),
          ...((it.summary as ResponseItem[] | undefined) ?? []),
        ].map((p) => (typeof p.text === "string" ? p.text : "")).filter(Boolean);
        if (texts.length) push("assistant", [{ type: "reasoning", text: texts[0] }]);
        break;
      }
      default:
        // Hosted tools' calls and outputs (shell, web search, ...) and item references carry
        // nothing this server can replay: left out and named.
        ignored.push(`input[${i}] (${type})`);
    }
  });
  return turns;
}

/** The request (with any earlier items of the thread) as the neutral conversation. */
export function responsesConversation(
  b: ResponsesInput,
  earlier: ResponseItem[] = [],
): { conv: Conversation; ignored: string[]; origins: ToolOrigins; toolParams: string[] } {
  const ignored: string[] = [];
  const origins: ToolOrigins = new Map();
  const toolParams: string[] = [];
  const tools = responsesTools(b.tools, ignored, origins, toolParams);
  const turns: Turn[] = [];
  if (b.instructions) {
    turns.push({ role: "system", parts: [{ type: "text", text: b.instructions }] });
  }
  turns.push(...itemsToTurns([...earlier, ...inputItems(b.input)], ignored));
  return {
    conv: {
      turns,
      tools,
      toolChoice: responsesToolChoice(b.tool_choice, tools.length > 0),
      parallelToolCalls: b.parallel_tool_calls ?? true,
    },
    ignored,
    origins,
    toolParams,
  };
}

const itemId = (prefix: string) => `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;

/** Output items of a whole reply, in order, MCP steps (`mcp_call`) where they happened. */
export function responseSegments(
  segments: Segment[],
  summary: boolean,
  origins: ToolOrigins = new Map(),
): ResponseItem[] {
  const out: ResponseItem[] = [];
  for (const s of segments) {
    if (s.type === "reasoning") out.push(reasoningItem(itemId("rs"), s.text, summary));
    else if (s.type === "text") out.push(messageItem(itemId("msg"), s.text, "completed"));
    else if (s.type === "call") {
      const origin = origins.get(s.name);
      out.push(
        origin?.kind === "custom"
          ? customCallItem(itemId("ctc"), s.id, s.name, customInput(s.arguments), "completed")
          : callItem(itemId("fc"), s.id, s.name, s.arguments, "completed", origin),
      );
    } else if (s.result) out.push(mcpCallItem(itemId("mcp"), s.result));
  }
  if (
    !out.some((i) =>
      i.type === "message" || i.type === "function_call" || i.type === "custom_tool_call"
    )
  ) {
    out.push(messageItem(itemId("msg"), "", "completed"));
  }
  return out;
}

function mcpCallItem(id: string, r: StepResult): ResponseItem {
  return {
    type: "mcp_call",
    id,
    server_label: r.server,
    name: r.tool,
    arguments: r.arguments,
    output: r.isError ? null : r.content,
    error: r.isError ? r.content : null,
    status: r.isError ? "failed" : "completed",
  };
}

function reasoningItem(id: string, text: string, summary: boolean): ResponseItem {
  return {
    type: "reasoning",
    id,
    summary: summary && text ? [{ type: "summary_text", text }] : [],
    content: text ? [{ type: "reasoning_text", text }] : [],
  };
}

function messageItem(id: string, text: string, status: string): ResponseItem {
  return {
    type: "message",
    id,
    status,
    role: "assistant",
    content: status === "in_progress"
      ? []
      : [{ type: "output_text", text, annotations: [], logprobs: [] }],
  };
}

function callItem(
  id: string,
  callId: string,
  name: string,
  args: string,
  status: string,
  origin?: ToolOrigin,
): ResponseItem {
  if (origin?.kind === "namespace") {
    return {
      type: "function_call",
      id,
      call_id: callId,
      name: origin.name,
      namespace: origin.namespace,
      arguments: args,
      status,
    };
  }
  return { type: "function_call", id, call_id: callId, name, arguments: args, status };
}

function customCallItem(
  id: string,
  callId: string,
  name: string,
  input: string,
  status: string,
): ResponseItem {
  return { type: "custom_tool_call", id, call_id: callId, name, input, status };
}

/** A custom tool's input from the arguments the model wrote (`{"input": "..."}`). */
function customInput(args: string): string {
  try {
    const v = JSON.parse(args)?.[CUSTOM_INPUT];
    if (typeof v === "string") return v;
  } catch {
    // not JSON: the text as it came
  }
  return args;
}

/**
 * The decoded prefix of the `input` string inside a prefix of `{"input": "...`, so a custom
 * call's input streams as it is written (an escape still incomplete waits for its next delta).
 */
export function customInputPrefix(args: string): string {
  const m = /^\s*\{\s*"input"\s*:\s*"/.exec(args);
  if (!m) return "";
  let out = "";
  let i = m[0].length;
  while (i < args.length) {
    const c = args[i];
    if (c === '"') break;
    if (c !== "\\") {
      out += c;
      i++;
      continue;
    }
    const len = args[i + 1] === "u" ? 6 : 2;
    if (i + len > args.length) break;
    try {
      out += JSON.parse(`"${args.slice(i, i + len)}"`);
    } catch {
      break;
    }
    i += len;
  }
  // A lone high surrogate waits for its pair.
  return /[\uD800-\uDBFF]$/.test(out) ? out.slice(0, -1) : out;
}

export type ResponseEvent = { type: string; [k: string]: unknown };

/**
 * Typed stream events from reply events: an output item per run of reasoning or text and per
 * tool call, each added, filled with deltas and done in the order the real API sends them.
 * `items` collects the finished output items for the final response object.
 */
export function newResponseEvents(summary: boolean, origins: ToolOrigins = new Map()): {
  push(ev: LoopEvent): ResponseEvent[];
  close(): ResponseEvent[];
  items: ResponseItem[];
} {
  const items: ResponseItem[] = [];
  let cur:
    | { kind: "reasoning" | "message"; id: string; index: number; text: string }
    | {
      kind: "call";
      id: string;
      index: number;
      callId: string;
      name: string;
      text: string;
      origin?: ToolOrigin;
      /** A custom call's input sent in deltas so far. */
      streamed: string;
    }
    | undefined;
  const finish = (): ResponseEvent[] => {
    if (!cur) return [];
    const c = cur;
    cur = undefined;
    const base = { item_id: c.id, output_index: c.index };
    const evs: ResponseEvent[] = [];
    let item: ResponseItem;
    if (c.kind === "reasoning") {
      if (summary) {
        evs.push(
          { type: "response.reasoning_summary_text.done", ...base, summary_index: 0, text: c.text },
          {
            type: "response.reasoning_summary_part.done",
            ...base,
            summary_index: 0,
            part: { type: "summary_text", text: c.text },
          },
        );
      }
      evs.push({ type: "response.reasoning_text.done", ...base, content_index: 0, text: c.text });
      item = reasoningItem(c.id, c.text, summary);
    } else if (c.kind === "message") {
      const part = { type: "output_text", text: c.text, annotations: [], logprobs: [] };
      evs.push(
        {
          type: "response.output_text.done",
          ...base,
          content_index: 0,
          text: c.text,
          logprobs: [],
        },
        { type: "response.content_part.done", ...base, content_index: 0, part },
      );
      item = messageItem(c.id, c.text, "completed");
    } else if (c.kind === "call" && c.origin?.kind === "custom") {
      const input = customInput(c.text);
      // What streamed is kept; a final input that disagrees (it never should) is still exact.
      if (input.startsWith(c.streamed) && input.length > c.streamed.length) {
        evs.push({
          type: "response.custom_tool_call_input.delta",
          ...base,
          delta: input.slice(c.streamed.length),
        });
      }
      evs.push({ type: "response.custom_tool_call_input.done", ...base, input });
      item = customCallItem(c.id, c.callId, c.name, input, "completed");
    } else if (c.kind === "call") {
      evs.push({
        type: "response.function_call_arguments.done",
        ...base,
        name: c.origin?.kind === "namespace" ? c.origin.name : c.name,
        arguments: c.text,
      });
      item = callItem(c.id, c.callId, c.name, c.text, "completed", c.origin);
    } else return evs;
    items.push(item);
    evs.push({ type: "response.output_item.done", output_index: c.index, item });
    return evs;
  };
  const open = (kind: "reasoning" | "message"): ResponseEvent[] => {
    const evs = finish();
    const id = itemId(kind === "reasoning" ? "rs" : "msg");
    cur = { kind, id, index: items.length, text: "" };
    const base = { item_id: id, output_index: cur.index };
    if (kind === "reasoning") {
      evs.push({
        type: "response.output_item.added",
        output_index: cur.index,
        item: { type: "reasoning", id, summary: [], content: [] },
      });
      if (summary) {
        evs.push({
          type: "response.reasoning_summary_part.added",
          ...base,
          summary_index: 0,
          part: { type: "summary_text", text: "" },
        });
      }
    } else {
      evs.push(
        {
          type: "response.output_item.added",
          output_index: cur.index,
          item: messageItem(id, "", "in_progress"),
        },
        {
          type: "response.content_part.added",
          ...base,
          content_index: 0,
          part: { type: "output_text", text: "", annotations: [], logprobs: [] },
        },
      );
    }
    return evs;
  };
  return {
    items,
    push(ev) {
      switch (ev.type) {
        case "reasoning": {
          if (!ev.text) return [];
          const evs = cur?.kind === "reasoning" ? [] : open("reasoning");
          cur!.text += ev.text;
          const base = { item_id: cur!.id, output_index: cur!.index };
          if (summary) {
            evs.push({
              type: "response.reasoning_summary_text.delta",
              ...base,
              summary_index: 0,
              delta: ev.text,
            });
          }
          evs.push({
            type: "response.reasoning_text.delta",
            ...base,
            content_index: 0,
            delta: ev.text,
          });
          return evs;
        }
        case "text": {
          if (!ev.text) return [];
          const evs = cur?.kind === "message" ? [] : open("message");
          cur!.text += ev.text;
          evs.push({
            type: "response.output_text.delta",
            item_id: cur!.id,
            output_index: cur!.index,
            content_index: 0,
            delta: ev.text,
            logprobs: [],
          });
          return evs;
        }
        case "tool_call_start": {
          const evs = finish();
          const origin = origins.get(ev.name);
          const custom = origin?.kind === "custom";
          const id = itemId(custom ? "ctc" : "fc");
          cur = {
            kind: "call",
            id,
            index: items.length,
            callId: ev.id,
            name: ev.name,
            text: "",
            origin,
            streamed: "",
          };
          evs.push({
            type: "response.output_item.added",
            output_index: cur.index,
            item: custom
              ? customCallItem(id, ev.id, ev.name, "", "in_progress")
              : callItem(id, ev.id, ev.name, "", "in_progress", origin),
          });
          return evs;
        }
        case "tool_call_args":
          if (cur?.kind !== "call" || !ev.text) return [];
          cur.text += ev.text;
          if (cur.origin?.kind === "custom") {
            const now = customInputPrefix(cur.text);
            if (!now.startsWith(cur.streamed) || now.length === cur.streamed.length) return [];
            const delta = now.slice(cur.streamed.length);
            cur.streamed = now;
            return [{
              type: "response.custom_tool_call_input.delta",
              item_id: cur.id,
              output_index: cur.index,
              delta,
            }];
          }
          return [{
            type: "response.function_call_arguments.delta",
            item_id: cur.id,
            output_index: cur.index,
            delta: ev.text,
          }];
        case "tool_call_end":
          if (cur?.kind === "call") cur.text = ev.arguments;
          return finish();
        case "server_tool_result": {
          // An executed MCP call, added and done at once, as the service reports a finished one.
          const evs = finish();
          const item = mcpCallItem(itemId("mcp"), ev);
          const index = items.length;
          items.push(item);
          const base = { item_id: item.id, output_index: index };
          evs.push(
            {
              type: "response.output_item.added",
              output_index: index,
              item: { ...item, output: null, error: null, status: "in_progress" },
            },
            { type: "response.mcp_call.in_progress", ...base },
            { type: "response.mcp_call_arguments.done", ...base, arguments: ev.arguments },
            {
              type: ev.isError ? "response.mcp_call.failed" : "response.mcp_call.completed",
              ...base,
            },
            { type: "response.output_item.done", output_index: index, item },
          );
          return evs;
        }
        default:
          return [];
      }
    },
    close() {
      const evs = finish();
      // A reply with nothing in it is still one (empty) message, as the real API answers.
      if (!items.length) evs.push(...open("message"), ...finish());
      return evs;
    },
  };
}

/** A fresh response id. */
export function newResponseId(): string {
  return itemId("resp");
}
