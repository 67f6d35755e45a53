/**
 * Llama 3.x tool calls: the whole reply is `{"name": "f", "parameters": {...}}` (several joined
 * by `;`), or the same after `<|python_tag|>`. A bare JSON call counts only at the very start of
 * the reply, as the model is trained to answer with the call alone; the lazy grammar is armed
 * the same way (an anchored pattern, or the `<|python_tag|>` token).
 *
 * @example
 * ```ts
 * import { llama3Format } from "./llama3.ts";
 * const p = llama3Format.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('{"name": "f", "parameters": {"x": 1}}');
 * p.end(); // tool_call_start, tool_call_args '{"x":1}', tool_call_end
 * ```
 * @module
 */
import { lit, opt, render, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { jsonCall, LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { jsonEnd, parseJson, toCall } from "./json_calls.ts";
import type { ParsedCall, SectionResult } from "./section_parser.ts";
import { newSectionParser } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const TAG = "<|python_tag|>";
const OPENING = ["{", { ws: true as const }, '"name"', { ws: true as const }, ":", {
  ws: true as const,
}, '"'];

/** Calls from `pos` on: `{...}` objects separated by `;`, up to the first thing that is not. */
function parseCalls(s: string, pos: number, final: boolean, names: Set<string>): SectionResult {
  const calls: ParsedCall[] = [];
  for (;;) {
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
    if (pos >= s.length) return { kind: "more" };
    if (s[pos] !== "{") return { kind: "bad" };
    const end = jsonEnd(s, pos);
    if (end < 0) return { kind: "more" };
    const call = toCall(parseJson(s.slice(pos, end)), names, ["parameters", "arguments"]);
    if (!call) return { kind: "bad" };
    calls.push(call);
    pos = end;
    let next = pos;
    while (next < s.length && " \t\r\n".includes(s[next])) next++;
    // Blanks may still be followed by `;` and another call.
    if (next >= s.length && !final) return { kind: "more", recheck: true };
    if (s[next] !== ";") return { kind: "ok", calls, length: pos };
    pos = next + 1;
  }
}

export const llama3Format: ToolFormat = {
  family: "llama3",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const s = toolSchemas(tools, relax);
    const call = jsonCall(s, "parameters");
    return render(
      s.set.g,
      seq(opt(seq(lit(TAG), LAYOUT)), oneOrMore(call, parallel, seq(LAYOUT, lit(";"), LAYOUT))),
    );
  },
  triggers: {
    patterns: [prefixPattern(OPENING, true), prefixPattern([TAG, { ws: true }, ...OPENING])],
    tokens: [TAG],
  },
  newParser(tools) {
    const names = new Set(tools.map((t) => t.name));
    return newSectionParser({
      markers: [TAG],
      startMarker: "{",
      closers: "}",
      parse: (s, final) => parseCalls(s, s.startsWith(TAG) ? TAG.length : 0, final, names),
    });
  },
};
