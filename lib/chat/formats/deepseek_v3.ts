/**
 * DeepSeek V3.1 tool calls: one section `<｜tool▁calls▁begin｜>` holding each call as
 * `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>` (parallel calls chained with
 * nothing between), closed by `<｜tool▁calls▁end｜>`; reasoning is `<think>...</think>`. The
 * template does not render `tools`, so they go into the system message in the words of the
 * model card.
 *
 * @example
 * ```ts
 * import { deepseekV3Format } from "./deepseek_v3.ts";
 * const p = deepseekV3Format.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"x": 1}' +
 *   "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"); // tool_call_start f, args {"x":1}, end
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { alt, lit, render, seq } from "../../constrain/gbnf.ts";
import { LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { jsonEnd, parseJson } from "./json_calls.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

export const CALLS_BEGIN = "<｜tool▁calls▁begin｜>";
export const CALLS_END = "<｜tool▁calls▁end｜>";
export const CALL_BEGIN = "<｜tool▁call▁begin｜>";
export const CALL_END = "<｜tool▁call▁end｜>";
export const SEP = "<｜tool▁sep｜>";

/** The tool block DeepSeek V3.1's model card puts in the system prompt. */
export function deepseekToolPrompt(tools: ToolSpec[]): string {
  const list = tools.map((t) =>
    `### ${t.name}\nDescription: ${t.description ?? ""}\n\nParameters: ${
      JSON.stringify(t.parameters ?? {})
    }`
  ).join("\n\n");
  return `## Tools\nYou have access to the following tools:\n\n${list}\n\n` +
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n" +
    `${CALLS_BEGIN}${CALL_BEGIN}tool_call_name${SEP}tool_call_arguments${CALL_END}` +
    `{{additional_tool_calls}}${CALLS_END}\n\n` +
    "Where:\n- `tool_call_name` must be an exact match to one of the available tools\n" +
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters " +
    "Schema\n- For multiple tool calls, chain them directly without separators or spaces";
}

/** Reads one whole section; `more` while it may still complete. */
function parseSection(s: string, names: Set<string>): SectionResult {
  const calls: ParsedCall[] = [];
  let pos = CALLS_BEGIN.length;
  const skipWs = () => {
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
  };
  // `l` at pos: true (consumed), "more" (the text ends inside it) or false.
  const expect = (l: string): boolean | "more" => {
    if (s.startsWith(l, pos)) return (pos += l.length), true;
    return l.startsWith(s.slice(pos)) ? "more" : false;
  };
  for (;;) {
    skipWs();
    if (pos >= s.length) return { kind: "more" };
    const end = expect(CALLS_END);
    if (end === true) break;
    const r = expect(CALL_BEGIN);
    if (r !== true) return r === "more" || end === "more" ? { kind: "more" } : { kind: "bad" };
    const sep = s.indexOf(SEP, pos);
    if (sep < 0) return { kind: "more" };
    const name = s.slice(pos, sep).trim();
    if (!names.has(name)) return { kind: "bad" };
    pos = sep + SEP.length;
    skipWs();
    if (pos >= s.length) return { kind: "more" };
    if (s[pos] !== "{") return { kind: "bad" };
    const argsEnd = jsonEnd(s, pos);
    if (argsEnd < 0) return { kind: "more" };
    const args = parseJson(s.slice(pos, argsEnd));
    if (typeof args !== "object" || args === null || Array.isArray(args)) return { kind: "bad" };
    pos = argsEnd;
    skipWs();
    const close = expect(CALL_END);
    if (close !== true) return close === "more" ? { kind: "more" } : { kind: "bad" };
    calls.push({ name, arguments: JSON.stringify(args) });
  }
  return calls.length ? { kind: "ok", calls, length: pos } : { kind: "bad" };
}

export const deepseekV3Format: ToolFormat = {
  family: "deepseek-v3",
  rendersTools: false,
  toolSystemPrompt: deepseekToolPrompt,
  callGrammar(tools, { parallel, relax }) {
    const s = toolSchemas(tools, relax);
    const call = seq(
      lit(CALL_BEGIN),
      alt(...tools.map((t, i) => seq(lit(t.name + SEP), s.args[i]))),
      lit(CALL_END),
    );
    return render(
      s.set.g,
      seq(lit(CALLS_BEGIN), oneOrMore(call, parallel, seq()), LAYOUT, lit(CALLS_END)),
    );
  },
  triggers: { patterns: [prefixPattern([CALLS_BEGIN])], tokens: [CALLS_BEGIN] },
  reasoning: { start: "<think>", end: "</think>" },
  newParser(tools) {
    const names = new Set(tools.map((t) => t.name));
    return newSectionParser({
      markers: [CALLS_BEGIN],
      closers: ">",
      parse: (s) => parseSection(s, names),
    });
  },
};
