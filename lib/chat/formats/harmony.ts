/**
 * gpt-oss (OpenAI Harmony): the reply is a run of messages, each a header and a body,
 * `<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>final<|message|>
 * answer`. The `analysis` channel is reasoning, `final` (and `commentary` without a recipient,
 * a preamble) is answer text, and a message with a recipient is a call:
 * `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{JSON}<|call|>`, or with
 * the recipient in the role, ` to=functions.NAME<|channel|>commentary json<|message|>{JSON}` (the
 * way the template writes calls back). The generation prompt ends with `<|start|>assistant`, so
 * the reply begins at a header.
 *
 * In a real gpt-oss vocab `<|channel|>`, `<|message|>`, `<|start|>` and `<|constrain|>` are
 * printed (llama.cpp marks them user-defined), `<|end|>` is a control token that prints as
 * nothing, and `<|call|>` / `<|return|>` end generation. So the parser reads a message's end at
 * `<|end|>` or, when that was not printed, at the next `<|start|>` or `<|channel|>`, and the
 * call grammar ends with the arguments: the end-of-generation token (`<|call|>`) follows it.
 * Reasoning is this parser's own `reasoning` events (no think markers to split first), and
 * it goes back to the template as the message's `thinking` field, which gpt-oss reads.
 * A call ends the turn, so there is one call per reply (`parallel` is not offered).
 *
 * @example
 * ```ts
 * import { harmonyFormat } from "./harmony.ts";
 * const tools = [{ name: "f", parameters: { type: "object" } }];
 * const p = harmonyFormat.newParser(tools);
 * p.push("<|channel|>analysis<|message|>Need f.<|start|>assistant<|channel|>commentary " +
 *   'to=functions.f <|constrain|>json<|message|>{"x": 1}');
 * p.end(); // reasoning "Need f.", then the call f {"x":1}
 * ```
 * @module
 */
import { newCallId, type ReplyEvent } from "../conversation.ts";
import { closePartialJson } from "../cut_call.ts";
import { alt, lit, render, seq } from "../../constrain/gbnf.ts";
import { partialMarkerLength } from "../reasoning.ts";
import type { ChatMessage } from "../template.ts";
import { toolListPrompt } from "./generic.ts";
import { prefixPattern, toolSchemas } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import type { OutputParser, ToolFormat } from "./types.ts";

const CHANNEL = "<|channel|>";
const MESSAGE = "<|message|>";
const START = "<|start|>";
/** Ends of a message body; `<|channel|>` too, when the `<|end|>` before it was not printed. */
const ENDS = ["<|end|>", "<|call|>", "<|return|>", START, CHANNEL];
const MARKERS = /<\|(?:channel|message|start|end|call|return|constrain)\|>/g;
const FUNCTIONS = "functions.";
/** A header longer than this without `<|message|>` is not one. */
const MAX_HEADER = 512;

type Body =
  | { kind: "reasoning" | "text" | "drop" }
  | { kind: "call"; name: string; args: string };

function newHarmonyParser(names: Set<string>): OutputParser {
  let buf = "";
  // Where the text stands: at the very start (a header, or plain text from a model that skips
  // the headers), in a header, or in a body.
  let state: "start" | "header" | "body" = "start";
  let body: Body = { kind: "text" };
  let nCalls = 0;

  function emit(out: ReplyEvent[], type: "reasoning" | "text", text: string): void {
    if (!text) return;
    const last = out[out.length - 1];
    if (last?.type === type) last.text += text;
    else out.push({ type, text });
  }

  function openBody(header: string): void {
    // The last channel counts: gpt-oss sometimes writes a stray `<|channel|>commentary
    // to=assistant` before the real header.
    const channels = [...header.matchAll(/<\|channel\|>\s*([A-Za-z_]+)/g)];
    const channel = channels.at(-1)?.[1] ?? "final";
    const recipient = [...header.matchAll(/\bto=([^\s<]+)/g)].map((m) => m[1])
      .filter((r) => r !== "assistant").at(-1);
    const name = recipient?.startsWith(FUNCTIONS) ? recipient.slice(FUNCTIONS.length) : undefined;
    if (name !== undefined && names.has(name)) body = { kind: "call", name, args: "" };
    // A message to anything else (a built-in tool: `to=python`, `to=container.exec`) is not for
    // the client: dropped, as llama.cpp does.
    else if (recipient !== undefined) body = { kind: "drop" };
    else body = { kind: channel === "analysis" ? "reasoning" : "text" };
  }

  /**
   * Ends the current message. A call whose arguments do not parse: at the end of the output it
   * was cut (by the token limit), and comes back as a call with what was written closed, as
   * `cut_call.ts` does for the other families (the header is no text to salvage from here);
   * before another message it is what the model wrote, as text.
   */
  function closeBody(out: ReplyEvent[], final: boolean): void {
    if (body.kind !== "call") return;
    const raw = body.args.trim();
    const parsed = parseJson(raw);
    const isObject = typeof parsed === "object" && parsed !== null && !Array.isArray(parsed);
    if (isObject || final) {
      const index = nCalls++;
      const text = isObject ? JSON.stringify(parsed) : closePartialJson(raw);
      out.push({ type: "tool_call_start", index, id: newCallId(), name: body.name });
      out.push({ type: "tool_call_args", index, text });
      out.push({ type: "tool_call_end", index, arguments: text });
    } else emit(out, "text", raw);
    body = { kind: "text" };
  }

  function step(out: ReplyEvent[], final: boolean): void {
    for (;;) {
      if (state === "start") {
        const lead = buf.replace(/^[ \t\r\n]+/, "");
        if (lead.startsWith(CHANNEL) || lead.startsWith(START) || buf.startsWith(" to=")) {
          state = "header";
        } else if (
          !final && (CHANNEL.startsWith(lead) || START.startsWith(lead) || " to=".startsWith(buf))
        ) return;
        else {
          state = "body";
          body = { kind: "text" };
        }
        continue;
      }
      if (state === "header") {
        const at = buf.indexOf(MESSAGE);
        if (at < 0) {
          if (!final && buf.length <= MAX_HEADER) return;
          // Not a header after all: whatever words it has are text.
          emit(out, "text", buf.replace(MARKERS, ""));
          buf = "";
          if (final) return;
          state = "body";
          body = { kind: "text" };
          continue;
        }
        openBody(buf.slice(0, at));
        buf = buf.slice(at + MESSAGE.length);
        state = "body";
        continue;
      }
      // body
      let at = -1;
      let len = 0;
      for (const m of ENDS) {
        const i = buf.indexOf(m);
        if (i >= 0 && (at < 0 || i < at)) at = i, len = m.length;
      }
      const take = (text: string) => {
        if (body.kind === "call") body.args += text;
        else if (body.kind !== "drop") emit(out, body.kind, text);
      };
      if (at >= 0) {
        take(buf.slice(0, at));
        closeBody(out, false);
        // `<|start|>` and `<|channel|>` begin the next header; the others just end the body.
        const marker = buf.slice(at, at + len);
        buf = buf.slice(marker === CHANNEL ? at : at + len);
        state = "header";
        continue;
      }
      if (final) {
        take(buf);
        buf = "";
        closeBody(out, true);
        return;
      }
      const hold = Math.max(0, ...ENDS.map((m) => partialMarkerLength(buf, m)));
      take(buf.slice(0, buf.length - hold));
      buf = buf.slice(buf.length - hold);
      return;
    }
  }

  return {
    push(text) {
      const out: ReplyEvent[] = [];
      if (!text) return out;
      buf += text;
      step(out, false);
      return out;
    },
    end() {
      const out: ReplyEvent[] = [];
      step(out, true);
      return out;
    },
  };
}

/**
 * Messages as gpt-oss's template reads them: reasoning in `thinking`, and an assistant turn
 * with a call carries its reasoning alone (the template refuses content and thinking together
 * there, as llama.cpp's gpt-oss handler drops the content). The template writes one call per
 * message and names each result after the latest call, so a turn of several calls becomes one
 * message per call, each followed by its own result.
 */
function harmonyMessages(messages: ChatMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role !== "assistant") {
      out.push(m);
      continue;
    }
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls as { id?: string }[] : [];
    const msg: ChatMessage = { ...m };
    if (typeof m.reasoning_content === "string") {
      msg.thinking = m.reasoning_content;
      if (calls.length) delete (msg as { content?: unknown }).content;
    }
    if (calls.length <= 1) {
      out.push(msg);
      continue;
    }
    const results: ChatMessage[] = [];
    while (messages[i + 1]?.role === "tool") results.push(messages[++i]);
    calls.forEach((c, k) => {
      out.push(
        k === 0 ? { ...msg, tool_calls: [c] } : { role: "assistant", content: "", tool_calls: [c] },
      );
      const r = results.findIndex((x) => x.tool_call_id === c.id);
      if (r >= 0) out.push(...results.splice(r, 1));
    });
    out.push(...results);
  }
  return out;
}

const IN_CHANNEL = `${CHANNEL}commentary to=${FUNCTIONS}`;
const IN_ROLE = ` to=${FUNCTIONS}`;

export const harmonyFormat: ToolFormat = {
  family: "harmony",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { relax }) {
    const s = toolSchemas(tools, relax);
    const calls = tools.flatMap((t, i) => [
      seq(lit(`${IN_CHANNEL}${t.name} <|constrain|>json${MESSAGE}`), s.args[i]),
      seq(lit(`${IN_ROLE}${t.name}${CHANNEL}commentary json${MESSAGE}`), s.args[i]),
    ]);
    return render(s.set.g, alt(...calls));
  },
  triggers: {
    patterns: [
      prefixPattern([`${CHANNEL}commentary to=`, FUNCTIONS]),
      // The recipient in the role: only right after `<|start|>assistant` (or at the start).
      "(?:^|<\\|start\\|>assistant)" + prefixPattern([" to", "=", FUNCTIONS]),
    ],
    tokens: [],
  },
  templateMessages: harmonyMessages,
  // The analysis channel ends with <|end|>; the answer goes on in the final channel.
  reasoningBudget: {
    start: `${CHANNEL}analysis${MESSAGE}`,
    end: "<|end|>",
    force: `<|end|><|start|>assistant${CHANNEL}final${MESSAGE}`,
  },
  newParser(tools) {
    return newHarmonyParser(new Set(tools.map((t) => t.name)));
  },
};
