/**
 * A reply cut by the token limit in the middle of a tool call: the calls completed before the cut
 * are still calls, and the one being written comes back as a call too, with the arguments written
 * so far closed into a valid JSON object (`finish_reason: "length"` says it is partial). Never the
 * family's call markup as answer text, which an agent would show or, worse, act on.
 *
 * @example
 * ```ts
 * import { closePartialJson, salvageCutCalls } from "./cut_call.ts";
 * closePartialJson('{"city": "Par'); // '{"city":"Par"}'
 * declare const format: import("./formats/mod.ts").ToolFormat;
 * const tools = [{ name: "weather", parameters: { type: "object" } }];
 * salvageCutCalls('Sure. <tool_call>{"name": "weather", "arguments": {"city": "Par', format, tools);
 * // { text: "Sure. ", calls: [{ name: "weather", arguments: '{"city":"Par"}' }] }
 * ```
 * @module
 */
import type { ReplyEvent, ToolSpec } from "./conversation.ts";
import type { ToolFormat } from "./formats/mod.ts";

/** A call recovered from a cut reply. */
export type CutCall = { name: string; arguments: string };

/**
 * The longest prefix of `text` that can be closed into a JSON object, closed (strings, arrays and
 * objects ended; a dangling key, colon or comma dropped). `{}` when nothing usable is there.
 */
export function closePartialJson(text: string): string {
  const start = text.indexOf("{");
  if (start < 0) return "{}";
  const body = text.slice(start);
  for (let end = body.length; end > 0; end--) {
    const closed = closeAt(body.slice(0, end));
    if (closed === undefined) continue;
    try {
      const v = JSON.parse(closed);
      if (typeof v === "object" && v !== null && !Array.isArray(v)) return JSON.stringify(v);
    } catch { /* try a shorter prefix */ }
  }
  return "{}";
}

/** Closes what `s` left open, or undefined when it ends somewhere that cannot be closed. */
function closeAt(s: string): string | undefined {
  const stack: string[] = [];
  let inString = false;
  let escaped = false;
  for (const ch of s) {
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    else if (ch === "{") stack.push("}");
    else if (ch === "[") stack.push("]");
    else if (ch === "}" || ch === "]") {
      if (stack.pop() !== ch) return undefined;
    }
  }
  if (escaped) return undefined;
  let out = inString ? `${s}"` : s;
  // A value cut after its key, or a comma with nothing after it, cannot stand.
  if (/[,:]\s*$/.test(out)) return undefined;
  out = out.replace(/\s+$/, "");
  return out + stack.reverse().join("");
}

/** Where the family's call markup starts in `text` (its marker tokens or trigger patterns). */
function markerAt(text: string, format: ToolFormat): number {
  let at = -1;
  const take = (i: number) => {
    if (i >= 0 && (at < 0 || i < at)) at = i;
  };
  for (const t of format.triggers.tokens) take(text.indexOf(t));
  for (const p of format.triggers.patterns) {
    try {
      const m = new RegExp(p, "s").exec(text);
      if (m) take(m.index + (m[1] !== undefined ? m[0].indexOf(m[1]) : 0));
    } catch { /* a pattern JavaScript cannot read: the tokens decide */ }
  }
  return at;
}

/**
 * The text before the family's first call marker, and the calls in what follows: each call the
 * family's own parser completes, then the cut one (the first tool name written after its marker,
 * with its arguments closed). Undefined when `text` holds no call markup.
 */
export function salvageCutCalls(
  text: string,
  format: ToolFormat,
  tools: ToolSpec[],
): { text: string; calls: CutCall[] } | undefined {
  const at = markerAt(text, format);
  if (at < 0 || tools.length === 0) return undefined;
  const rest = text.slice(at);
  // Calls the family's parser finishes on their own (those written before the cut).
  const parser = format.newParser(tools);
  const events: ReplyEvent[] = [...parser.push(rest)];
  const calls: CutCall[] = [];
  const open = new Map<number, string>();
  for (const ev of events) {
    if (ev.type === "tool_call_start") open.set(ev.index, ev.name);
    else if (ev.type === "tool_call_end") {
      calls.push({ name: open.get(ev.index) ?? "", arguments: ev.arguments });
    }
  }
  // What the parser still holds is the cut call: after the last completed one.
  let tail = rest;
  for (const c of calls) {
    const i = tail.indexOf(c.name);
    if (i >= 0) tail = tail.slice(i + c.name.length);
  }
  if (calls.length) {
    const next = markerAt(tail, format);
    tail = next >= 0 ? tail.slice(next) : "";
  }
  let best: { name: string; index: number } | undefined;
  for (const t of tools) {
    const i = tail.indexOf(t.name);
    if (i < 0) continue;
    if (!best || i < best.index || (i === best.index && t.name.length > best.name.length)) {
      best = { name: t.name, index: i };
    }
  }
  if (best) {
    calls.push({
      name: best.name,
      arguments: closePartialJson(tail.slice(best.index + best.name.length)),
    });
  }
  // Markup cut before it named a tool is no answer either: it is dropped.
  return { text: text.slice(0, at), calls };
}
