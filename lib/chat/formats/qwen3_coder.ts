/**
 * Qwen3-Coder tool calls, XML-like: `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n
 * </parameter>\n</function>\n</tool_call>`. A parameter whose schema admits only strings is
 * written raw (anything but the terminator `\n</parameter>`); every other value is JSON text
 * (`tagged_args.ts`, shared with the other tagged families).
 *
 * @example
 * ```ts
 * import { qwen3CoderFormat } from "./qwen3_coder.ts";
 * const tools = [{ name: "f", parameters: { type: "object", properties: {
 *   path: { type: "string" }, n: { type: "integer" } } } }];
 * const p = qwen3CoderFormat.newParser(tools);
 * p.push("<tool_call>\n<function=f>\n<parameter=path>\na b\n</parameter>\n" +
 *   "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"); // arguments {"path":"a b","n":3}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { lit, render, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern } from "./grammar.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import { argsObject, taggedCalls, type TagSyntax } from "./tagged_args.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";
const FUNCTION = "<function=";
const END_FUNCTION = "</function>";
const PARAMETER = "<parameter=";
/** Ends a parameter value; a raw value can hold anything but this. */
export const VALUE_END = "\n</parameter>";

const SYNTAX: TagSyntax = {
  family: "qwen3-coder",
  open: (name) => lit(`${PARAMETER}${name}>\n`),
  close: VALUE_END,
  before: "\n",
  sep: LAYOUT,
};

/** Reads one `<tool_call>` block; `more` while it may still complete. */
function parseBlock(s: string, tools: Map<string, ToolSpec>): SectionResult {
  let pos = OPEN.length;
  const more: SectionResult = { kind: "more" };
  const skipWs = () => {
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
  };
  // Expects literal `l` at pos: true (consumed), "more" (text ends inside it) or false.
  const expect = (l: string): boolean | "more" => {
    if (s.startsWith(l, pos)) return (pos += l.length), true;
    return l.startsWith(s.slice(pos)) ? "more" : false;
  };
  skipWs();
  let r = expect(FUNCTION);
  if (r !== true) return r === "more" ? more : { kind: "bad" };
  const nameEnd = s.indexOf(">", pos);
  if (nameEnd < 0) return more;
  const name = s.slice(pos, nameEnd);
  const tool = tools.get(name);
  if (!tool) return { kind: "bad" };
  pos = nameEnd + 1;
  const pairs: [string, string][] = [];
  for (;;) {
    skipWs();
    if (pos >= s.length) return more;
    r = expect(PARAMETER);
    if (r === "more") return more;
    if (r === false) break;
    const keyEnd = s.indexOf(">", pos);
    if (keyEnd < 0) return more;
    const key = s.slice(pos, keyEnd);
    pos = keyEnd + 1;
    if (pos >= s.length) return more;
    // The newline after `<parameter=P>` may be the terminator's own when the value is empty.
    const from = pos;
    if (s[pos] === "\n") pos++;
    const valueEnd = s.indexOf(VALUE_END, from);
    if (valueEnd < 0) return more;
    const raw = s.slice(pos, Math.max(pos, valueEnd));
    pos = valueEnd + VALUE_END.length;
    pairs.push([key, raw]);
  }
  r = expect(END_FUNCTION);
  if (r !== true) return r === "more" ? more : { kind: "bad" };
  skipWs();
  if (pos >= s.length) return more;
  r = expect(CLOSE);
  if (r !== true) return r === "more" ? more : { kind: "bad" };
  const call: ParsedCall = { name, arguments: argsObject(tool, pairs) };
  return { kind: "ok", calls: [call], length: pos };
}

export const qwen3CoderFormat: ToolFormat = {
  family: "qwen3-coder",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const { set, call } = taggedCalls(
      tools,
      SYNTAX,
      relax,
      (name, args) => seq(lit(`${name}>`), LAYOUT, args),
    );
    const block = seq(
      lit(OPEN),
      LAYOUT,
      lit(FUNCTION),
      call,
      lit(END_FUNCTION),
      LAYOUT,
      lit(CLOSE),
    );
    return render(set.g, oneOrMore(block, parallel, LAYOUT));
  },
  triggers: {
    patterns: [prefixPattern([OPEN, { ws: true }, FUNCTION])],
    tokens: [OPEN],
  },
  reasoning: { start: "<think>", end: "</think>" },
  newParser(tools) {
    const byName = new Map(tools.map((t) => [t.name, t]));
    return newSectionParser({
      markers: [OPEN],
      closers: ">",
      parse: (s) => parseBlock(s, byName),
    });
  },
};
