/**
 * The server-side tool loop: tools Hearth executes itself (MCP tools) are offered to the model
 * beside the client's own; when the model calls one, Hearth runs it, appends the call and its
 * result to the conversation and generates again, until the model answers, calls a client tool
 * (returned to the client as usual) or the round limit is reached (the last round is generated
 * with `tool_choice: none`, so it answers). `tool_choice` forcing applies to the first round only.
 *
 * Every dialect sees the same events: the reply events of each round (server calls left out, the
 * client's calls renumbered from 0), plus `server_tool_call` / `server_tool_result` for each step
 * as it happens, and one `end` whose usage sums the rounds.
 *
 * @example
 * ```ts
 * import { chatWithServerTools } from "./tool_loop.ts";
 * import type { Conversation } from "./conversation.ts";
 * import type { ChatEvent } from "./generation.ts";
 * declare const conv: Conversation, mcpTools: import("./tool_loop.ts").ServerTools;
 * declare function runRound(conv: Conversation): AsyncIterable<ChatEvent>;
 * const events = chatWithServerTools((conv) => runRound(conv), conv, mcpTools, { maxRounds: 8 });
 * for await (const ev of events) {
 *   if (ev.type === "server_tool_result") console.log(ev.name, ev.content);
 * }
 * ```
 * @module
 */
import type { Conversation, Part, ToolSpec } from "./conversation.ts";
import type { ChatEvent } from "./generation.ts";

/** What Hearth can execute: exposed tool names, their specs, and the call itself. */
export type ServerTools = {
  specs: ToolSpec[];
  /** Which configured server and which of its tools an exposed name stands for. */
  owner(name: string): { server: string; tool: string } | undefined;
  call(
    name: string,
    args: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<{ text: string; isError: boolean }>;
};

export type StepCall = {
  type: "server_tool_call";
  id: string;
  name: string;
  server: string;
  tool: string;
  arguments: string;
};
export type StepResult = {
  type: "server_tool_result";
  id: string;
  name: string;
  server: string;
  tool: string;
  /** The call's arguments again, so a step can be shown whole from its result. */
  arguments: string;
  content: string;
  isError: boolean;
};
export type LoopEvent = ChatEvent | StepCall | StepResult;

type End = Extract<ChatEvent, { type: "end" }>;

export type LoopOptions = { maxRounds: number; signal?: AbortSignal };

/** Arguments text as an object for the call; a model that wrote something else gets an error. */
function argsObject(text: string): Record<string, unknown> | string {
  try {
    const v = JSON.parse(text || "{}");
    if (typeof v === "object" && v !== null && !Array.isArray(v)) return v;
    return "the arguments are not a JSON object";
  } catch {
    return "the arguments are not valid JSON";
  }
}

export async function* chatWithServerTools(
  round: (conv: Conversation, index: number) => AsyncIterable<ChatEvent>,
  conv: Conversation,
  server: ServerTools,
  opts: LoopOptions,
): AsyncGenerator<LoopEvent> {
  const total = { promptTokens: 0, cachedTokens: 0, completionTokens: 0, reasoningTokens: 0 };
  let current: Conversation = { ...conv, turns: [...conv.turns] };
  for (let r = 0; r < opts.maxRounds; r++) {
    if (r === opts.maxRounds - 1 && r > 0) current = { ...current, toolChoice: { type: "none" } };
    const held = new Map<number, { id: string; name: string; text: string }>();
    const serverCalls: { id: string; name: string; arguments: string }[] = [];
    const clientIndex = new Map<number, number>();
    let reasoning = "";
    let text = "";
    let end: End | undefined;
    for await (const ev of round(current, r)) {
      if (opts.signal?.aborted) return;
      switch (ev.type) {
        case "reasoning":
          reasoning += ev.text;
          yield ev;
          break;
        case "text":
          text += ev.text;
          yield ev;
          break;
        case "tool_call_start":
          if (server.owner(ev.name)) held.set(ev.index, { id: ev.id, name: ev.name, text: "" });
          else {
            clientIndex.set(ev.index, clientIndex.size);
            yield { ...ev, index: clientIndex.get(ev.index)! };
          }
          break;
        case "tool_call_args":
          if (held.has(ev.index)) held.get(ev.index)!.text += ev.text;
          else yield { ...ev, index: clientIndex.get(ev.index) ?? ev.index };
          break;
        case "tool_call_end": {
          const h = held.get(ev.index);
          if (h) serverCalls.push({ id: h.id, name: h.name, arguments: ev.arguments });
          else yield { ...ev, index: clientIndex.get(ev.index) ?? ev.index };
          break;
        }
        case "end":
          end = ev;
          break;
        default:
          yield ev;
          if (ev.type === "error") return;
      }
    }
    if (!end) return;
    total.promptTokens += end.promptTokens;
    total.cachedTokens += end.cachedTokens;
    total.completionTokens += end.completionTokens;
    total.reasoningTokens += end.reasoningTokens;
    const results: Part[] = [];
    for (const call of serverCalls) {
      const owner = server.owner(call.name)!;
      yield { type: "server_tool_call", ...call, ...owner };
      const args = argsObject(call.arguments);
      const result = typeof args === "string"
        ? { text: args, isError: true }
        : await server.call(call.name, args, opts.signal);
      if (opts.signal?.aborted) return;
      yield {
        type: "server_tool_result",
        id: call.id,
        name: call.name,
        ...owner,
        arguments: call.arguments,
        content: result.text,
        isError: result.isError,
      };
      results.push({
        type: "tool_result",
        callId: call.id,
        name: call.name,
        content: result.text,
        ...(result.isError ? { isError: true } : {}),
      });
    }
    const clientCalls = clientIndex.size > 0;
    if (serverCalls.length === 0 || clientCalls || r === opts.maxRounds - 1) {
      yield {
        ...end,
        ...total,
        finishReason: clientCalls
          ? "tool_calls"
          : end.finishReason === "tool_calls"
          ? "stop"
          : end.finishReason,
      };
      return;
    }
    // The next round sees what this one said and did, and may call again or answer.
    const assistant: Part[] = [];
    if (reasoning) assistant.push({ type: "reasoning", text: reasoning });
    if (text) assistant.push({ type: "text", text });
    for (const c of serverCalls) {
      assistant.push({ type: "tool_call", id: c.id, name: c.name, arguments: c.arguments });
    }
    current = {
      ...current,
      turns: [
        ...current.turns,
        { role: "assistant", parts: assistant },
        { role: "tool", parts: results },
      ],
      toolChoice: current.toolChoice.type === "none" ? current.toolChoice : { type: "auto" },
    };
  }
}

/** A reply in order, with its server steps where they happened (for non-streaming shapes). */
export type Segment =
  | { type: "reasoning"; text: string }
  | { type: "text"; text: string }
  | { type: "call"; id: string; name: string; arguments: string }
  | { type: "step"; call: StepCall; result?: StepResult };

export type CollectedLoop = {
  segments: Segment[];
  end?: End;
  error?: string;
};

export async function collectLoop(events: AsyncIterable<LoopEvent>): Promise<CollectedLoop> {
  const out: CollectedLoop = { segments: [] };
  const open = new Map<number, { id: string; name: string }>();
  const steps = new Map<string, Extract<Segment, { type: "step" }>>();
  const last = () => out.segments.at(-1);
  for await (const ev of events) {
    switch (ev.type) {
      case "reasoning":
      case "text": {
        const seg = last();
        if (seg?.type === ev.type) seg.text += ev.text;
        else if (ev.text) out.segments.push({ type: ev.type, text: ev.text });
        break;
      }
      case "tool_call_start":
        open.set(ev.index, { id: ev.id, name: ev.name });
        break;
      case "tool_call_end": {
        const c = open.get(ev.index);
        if (c) out.segments.push({ type: "call", ...c, arguments: ev.arguments });
        break;
      }
      case "server_tool_call": {
        const seg = { type: "step" as const, call: ev };
        steps.set(ev.id, seg);
        out.segments.push(seg);
        break;
      }
      case "server_tool_result": {
        const seg = steps.get(ev.id);
        if (seg) seg.result = ev;
        break;
      }
      case "end":
        out.end = ev;
        break;
      case "error":
        out.error = ev.message;
        break;
    }
  }
  return out;
}
