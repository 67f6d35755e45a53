/**
 * Claude Code in headless stream-json mode: `-p --output-format stream-json --verbose
 * --include-partial-messages --input-format stream-json`, the prompt (and each steering message)
 * written on stdin as one stream-json user message line.
 *
 * Line types: `system` (subtype `init` carries the session id; `api_retry` means the CLI is
 * retrying an API call), `stream_event` (raw Anthropic stream events: text and thinking deltas,
 * tool_use block starts and their input JSON), `assistant` (a finished message or, as Claude Code
 * prints them, one finished content block at a time), `user` (tool results), `result` (the end of
 * the turn: the final text, or the error).
 *
 * Text is never shown twice: for each message (by its id) the text of each text block that has
 * already been emitted, from deltas or from an earlier `assistant` line, is remembered, and a
 * later source only emits what extends it. So the same output comes out with or without
 * `--include-partial-messages`, and in whatever order deltas and full messages arrive.
 *
 * Subagents (`Task`/`Agent` tool): their messages carry `parent_tool_use_id`. Their tools are
 * reported as steps of their own; their text never enters the main output but becomes the
 * `detail` of a `running` update of the parent Task step, so the UI can show what the subagent
 * says. Their partial stream events and thinking are traced only.
 *
 * @example
 * ```ts
 * import { claudeAdapter } from "./claude.ts";
 * const { args, stdin } = claudeAdapter.launch("fix the bug", { resume: "9b2f..." });
 * const parse = claudeAdapter.createParser();
 * parse('{"type":"result","subtype":"success","is_error":false,"result":"done"}');
 * // -> [{ kind: "final", text: "done" }]
 * ```
 * @module
 */

import type { AgentEmit, ErrorKind, ProviderAdapter, ToolType } from "../types.ts";
import {
  arr,
  classifyError,
  compactJson,
  createOutput,
  createStepTracker,
  DETAIL_MAX,
  detailOf,
  isObject,
  jsonLineParser,
  type JsonObject,
  obj,
  str,
  type TextBlock,
  toolLabel,
  toolTypeFor,
  trace,
  truncate,
} from "./common.ts";

const PROTOCOL_ARGS = [
  "-p",
  "--output-format",
  "stream-json",
  "--verbose",
  "--include-partial-messages",
  "--input-format",
  "stream-json",
];

/** One stream-json user message line (with its newline) carrying `text`. */
export function claudeUserMessage(text: string): string {
  const msg = { type: "user", message: { role: "user", content: [{ type: "text", text }] } };
  return JSON.stringify(msg) + "\n";
}

// Claude Code's own error categories on an `assistant` message (`error` field).
const ASSISTANT_ERRORS: Record<string, ErrorKind> = {
  rate_limit: "rate_limit",
  server_error: "connection",
  authentication_failed: "auth",
};

// `bound`: fed by stream deltas of some block index; `confirmed`: matched by a full message.
type Text = TextBlock & { emitted: string; stream: string; bound: boolean; confirmed: boolean };
type Thinking = { ref: string; text: string; lastDetail: string; confirmed: boolean };
type Tool = { ref: string; name: string; label: string; toolType: ToolType; input?: unknown };
type StreamBlock =
  | { kind: "text"; block: Text }
  | { kind: "thinking"; step: Thinking }
  | { kind: "tool"; id: string; json: string };
type Message = { texts: Text[]; thinkings: Thinking[]; byIndex: Map<number, StreamBlock> };

function createClaudeParser(): (line: string) => AgentEmit[] {
  const output = createOutput();
  const steps = createStepTracker();
  const messages = new Map<string, Message>();
  const tools = new Map<string, Tool>();
  let streamMessage = ""; // id of the message the current stream events belong to
  let lastMessageId = "";
  let sessionId = "";
  let apiError: ErrorKind | undefined; // from an assistant message's `error` field

  const message = (id: string): Message => {
    let m = messages.get(id);
    if (!m) {
      m = { texts: [], thinkings: [], byIndex: new Map() };
      messages.set(id, m);
    }
    return m;
  };

  const session = (id: string | undefined): AgentEmit[] => {
    if (!id || id === sessionId) return [];
    sessionId = id;
    return [{ kind: "session", id }];
  };

  // Emits what `known` adds to what this block already showed.
  const extend = (block: Text, known: string): AgentEmit[] => {
    if (known.length <= block.emitted.length || !known.startsWith(block.emitted)) return [];
    const add = known.slice(block.emitted.length);
    block.emitted = known;
    return output.push(block, add);
  };

  // The block a new stream text block feeds: the first one a full message already showed and no
  // stream claimed yet (the message came first), else a new one.
  const streamText = (m: Message): Text => {
    const early = m.texts.find((t) => !t.bound);
    if (early) {
      early.bound = true;
      return early;
    }
    const text: Text = { started: false, emitted: "", stream: "", bound: true, confirmed: false };
    m.texts.push(text);
    return text;
  };

  const newThinking = (msgId: string, m: Message): Thinking => {
    const step = {
      ref: `claude:thinking:${msgId}:${m.thinkings.length}`,
      text: "",
      lastDetail: "",
      confirmed: false,
    };
    m.thinkings.push(step);
    return step;
  };

  const thinkingStep = (step: Thinking, status: "running" | "done"): AgentEmit[] => {
    const detail = step.text === "" ? undefined : truncate(step.text, DETAIL_MAX);
    step.lastDetail = detail ?? "";
    return steps.update({
      kind: "tool",
      toolType: "thinking",
      label: "Thinking",
      ...(detail === undefined ? {} : { detail }),
      stepRef: step.ref,
      status,
    });
  };

  const toolStart = (block: JsonObject, streamed: boolean): AgentEmit[] => {
    const id = str(block, "id") ?? "";
    const name = str(block, "name") ?? "tool";
    const input = block.input;
    // A streamed tool_use block starts with `input: {}`; its real input comes as JSON deltas.
    const hasInput = !streamed && input !== undefined;
    const known = tools.get(id);
    if (known && known.input !== undefined) return [];
    const tool: Tool = {
      ref: `claude:tooluse:${id}`,
      name,
      label: toolLabel(name, hasInput ? input : undefined),
      toolType: toolTypeFor(name),
      input: hasInput ? input : undefined,
    };
    tools.set(id, tool);
    const detail = hasInput ? detailOf(input) : undefined;
    return steps.update({
      kind: "tool",
      toolType: tool.toolType,
      label: tool.label,
      ...(detail === undefined ? {} : { detail }),
      stepRef: tool.ref,
      status: "running",
    });
  };

  const toolInput = (id: string, json: string): AgentEmit[] => {
    const tool = tools.get(id);
    if (!tool || tool.input !== undefined) return [];
    let input: unknown;
    try {
      input = json.trim() === "" ? {} : JSON.parse(json);
    } catch {
      return []; // the full `assistant` message brings the input again
    }
    return toolStart({ id, name: tool.name, input }, false);
  };

  const toolEnd = (id: string, isError: boolean, content: unknown): AgentEmit[] => {
    const tool = tools.get(id) ??
      { ref: `claude:tooluse:${id}`, name: "tool", label: "tool", toolType: "tool" as ToolType };
    const detail = resultText(content);
    return steps.update({
      kind: "tool",
      toolType: tool.toolType,
      label: tool.label,
      ...(detail === "" ? {} : { detail: truncate(detail, DETAIL_MAX) }),
      stepRef: tool.ref,
      status: isError ? "error" : "done",
    });
  };

  const onStreamEvent = (ev: JsonObject, line: string): AgentEmit[] => {
    const type = str(ev, "type");
    if (type === "message_start") {
      streamMessage = str(obj(ev, "message"), "id") ?? "";
      message(streamMessage);
      return [];
    }
    const m = message(streamMessage);
    const index = typeof ev.index === "number" ? ev.index : -1;
    if (type === "content_block_start") {
      const block = obj(ev, "content_block");
      const btype = str(block, "type");
      if (btype === "text") {
        const text = streamText(m);
        m.byIndex.set(index, { kind: "text", block: text });
        text.stream = str(block, "text") ?? "";
        return extend(text, text.stream);
      }
      if (btype === "thinking" || btype === "redacted_thinking") {
        const step = newThinking(streamMessage, m);
        m.byIndex.set(index, { kind: "thinking", step });
        step.text = str(block, "thinking") ?? "";
        return thinkingStep(step, "running");
      }
      if (
        block && (btype === "tool_use" || btype === "server_tool_use" || btype === "mcp_tool_use")
      ) {
        m.byIndex.set(index, { kind: "tool", id: str(block, "id") ?? "", json: "" });
        return toolStart(block, true);
      }
      return [trace(line, `content block ${btype ?? "?"} not shown`)];
    }
    if (type === "content_block_delta") {
      const delta = obj(ev, "delta");
      const dtype = str(delta, "type");
      let slot = m.byIndex.get(index);
      if (dtype === "text_delta") {
        if (!slot || slot.kind !== "text") {
          // A delta without its block start: open the block here.
          slot = { kind: "text", block: streamText(m) };
          m.byIndex.set(index, slot);
        }
        slot.block.stream += str(delta, "text") ?? "";
        return extend(slot.block, slot.block.stream);
      }
      if (dtype === "thinking_delta" && slot?.kind === "thinking") {
        slot.step.text += str(delta, "thinking") ?? "";
        // Past the detail cap the detail no longer changes: no point re-sending it.
        if (truncate(slot.step.text, DETAIL_MAX) === slot.step.lastDetail) return [];
        return thinkingStep(slot.step, "running");
      }
      if (dtype === "input_json_delta" && slot?.kind === "tool") {
        slot.json += str(delta, "partial_json") ?? "";
        return [];
      }
      return [];
    }
    if (type === "content_block_stop") {
      const slot = m.byIndex.get(index);
      if (slot?.kind === "thinking") return thinkingStep(slot.step, "done");
      if (slot?.kind === "tool") return toolInput(slot.id, slot.json);
      return [];
    }
    return [];
  };

  const onAssistant = (event: JsonObject, line: string): AgentEmit[] => {
    const msg = obj(event, "message");
    const content = arr(msg, "content");
    const parent = str(event, "parent_tool_use_id");
    if (parent) return onSubagentAssistant(parent, content);
    const errorField = str(event, "error");
    if (errorField || event.isApiErrorMessage === true) {
      // A synthetic message carrying an API error ("API Error: 429 ..."): the error, not output.
      apiError = ASSISTANT_ERRORS[errorField ?? ""];
      return [trace(line, `assistant error message (${errorField ?? "api error"})`)];
    }
    const id = str(msg, "id") ?? streamMessage;
    lastMessageId = id;
    const m = message(id);
    const out: AgentEmit[] = [];
    for (const block of content) {
      if (!isObject(block)) continue;
      const btype = str(block, "type");
      if (btype === "text") out.push(...assistantText(m, str(block, "text") ?? ""));
      else if (btype === "thinking" || btype === "redacted_thinking") {
        let step = m.thinkings.find((t) => !t.confirmed);
        if (!step) step = newThinking(id, m);
        step.confirmed = true;
        if (step.text === "") step.text = str(block, "thinking") ?? "";
        out.push(...thinkingStep(step, "done"));
      } else if (btype === "tool_use" || btype === "server_tool_use" || btype === "mcp_tool_use") {
        out.push(...toolStart(block, false));
      } else if (btype?.endsWith("_tool_result")) {
        // Server-side tools (web search) finish inside the assistant message itself.
        const inner = obj(block, "content");
        const failed = str(inner, "type")?.endsWith("_error") ?? false;
        out.push(...toolEnd(str(block, "tool_use_id") ?? "", failed, block.content));
      }
    }
    return out;
  };

  // Matches one full text block against the blocks this message already streamed.
  const assistantText = (m: Message, text: string): AgentEmit[] => {
    if (text === "") return [];
    if (m.texts.some((t) => t.emitted === text)) {
      const same = m.texts.find((t) => t.emitted === text && !t.confirmed);
      if (same) same.confirmed = true;
      return [];
    }
    const open = m.texts.find((t) => !t.confirmed && text.startsWith(t.emitted));
    if (open) {
      open.confirmed = true;
      return extend(open, text);
    }
    if (m.texts.some((t) => t.emitted.startsWith(text))) return []; // an older snapshot
    const block: Text = { started: false, emitted: "", stream: "", bound: false, confirmed: true };
    m.texts.push(block);
    return extend(block, text);
  };

  const onSubagentAssistant = (parentId: string, content: unknown[]): AgentEmit[] => {
    const out: AgentEmit[] = [];
    const parent = tools.get(parentId);
    for (const block of content) {
      if (!isObject(block)) continue;
      const btype = str(block, "type");
      if (btype === "tool_use" || btype === "server_tool_use" || btype === "mcp_tool_use") {
        out.push(...toolStart(block, false));
      } else if (btype === "text" && parent) {
        const text = str(block, "text") ?? "";
        if (text.trim() === "") continue;
        out.push(...steps.update({
          kind: "tool",
          toolType: parent.toolType,
          label: parent.label,
          detail: truncate(text, DETAIL_MAX),
          stepRef: parent.ref,
          status: "running",
        }));
      }
    }
    return out;
  };

  const onUser = (event: JsonObject): AgentEmit[] => {
    const out: AgentEmit[] = [];
    for (const block of arr(obj(event, "message"), "content")) {
      if (!isObject(block) || str(block, "type") !== "tool_result") continue;
      out.push(...toolEnd(str(block, "tool_use_id") ?? "", block.is_error === true, block.content));
    }
    return out;
  };

  const lastText = (): string =>
    (messages.get(lastMessageId)?.texts ?? []).map((t) => t.emitted).join("");

  const onResult = (event: JsonObject): AgentEmit[] => {
    const out = session(str(event, "session_id"));
    const subtype = str(event, "subtype") ?? "";
    const result = str(event, "result");
    // Error results say so twice (`is_error`, an `error_*` subtype); either is enough.
    if (event.is_error !== true && !subtype.startsWith("error")) {
      out.push({ kind: "final", text: result ?? lastText() });
      return out;
    }
    const errors = arr(event, "errors").filter((e): e is string => typeof e === "string");
    const error = result || errors.join("; ") || subtype || "Claude Code reported an error";
    const kind = classifyError(error);
    out.push({
      kind: "final",
      text: lastText(),
      error: truncate(error, DETAIL_MAX),
      errorKind: kind === "agent" && apiError ? apiError : kind,
    });
    return out;
  };

  return jsonLineParser((event, line) => {
    switch (event.type) {
      case "system": {
        const subtype = str(event, "subtype");
        if (subtype === "init") return session(str(event, "session_id"));
        if (subtype === "api_retry") {
          return [{ kind: "status", status: "running" }, trace(line, "api retry")];
        }
        return [trace(line, `system ${subtype ?? "?"}`)];
      }
      case "stream_event": {
        if (str(event, "parent_tool_use_id")) return [trace(line, "subagent stream event")];
        const ev = obj(event, "event");
        return ev ? onStreamEvent(ev, line) : [trace(line, "stream_event without event")];
      }
      case "assistant":
        return onAssistant(event, line);
      case "user":
        return onUser(event);
      case "result":
        return onResult(event);
      default:
        return [trace(line, `unknown type ${compactJson(event.type ?? null)}`)];
    }
  });
}

/** The text of a tool_result's content: a string, or text blocks (images as a placeholder). */
function resultText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((b) => {
      if (!isObject(b)) return "";
      if (typeof b.text === "string") return b.text;
      return b.type === "image" ? "[image]" : compactJson(b);
    }).join("\n");
  }
  if (content === undefined || content === null) return "";
  return compactJson(content);
}

export const claudeAdapter: ProviderAdapter = {
  provider: "claude",
  launch(prompt, opts = {}) {
    const args = [...PROTOCOL_ARGS];
    if (opts.resume) args.push("--resume", opts.resume);
    return { args, stdin: claudeUserMessage(prompt) };
  },
  streamInput: claudeUserMessage,
  createParser: createClaudeParser,
  classifyError,
};
