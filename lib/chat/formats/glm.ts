/**
 * GLM-4.5 / 4.6 / 4.7 tool calls: `<tool_call>NAME` then one `<arg_key>K</arg_key>` +
 * `<arg_value>V</arg_value>` pair per argument and `</tool_call>`; GLM-4.5/4.6 put a newline
 * after the name and after each tag pair, GLM-4.7 writes them back to back (both are read, and
 * the grammar allows the layout). String values are raw, others JSON (see `tagged_args.ts`).
 * Reasoning is `<think>...</think>`; GLM-4.7's generation prompt opens it.
 *
 * @example
 * ```ts
 * import { glmFormat } from "./glm.ts";
 * const tools = [{ name: "f", parameters: { type: "object", properties: {
 *   path: { type: "string" }, n: { type: "integer" } } } }];
 * const p = glmFormat.newParser(tools);
 * p.push("<tool_call>f\n<arg_key>path</arg_key>\n<arg_value>a b</arg_value>\n" +
 *   "<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"); // {"path":"a b","n":3}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { lit, render, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern } from "./grammar.ts";
import { newSectionParser, type SectionResult } from "./section_parser.ts";
import { argsObject, isRawArg, taggedCalls, type TagSyntax } from "./tagged_args.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";
const KEY = "<arg_key>";
const END_KEY = "</arg_key>";
const VALUE = "<arg_value>";
const END_VALUE = "</arg_value>";

const SYNTAX: TagSyntax = {
  family: "glm",
  open: (name) => seq(lit(`${KEY}${name}${END_KEY}`), LAYOUT, lit(VALUE)),
  close: END_VALUE,
  sep: LAYOUT,
};

const WS = " \t\r\n";

/**
 * Reads one `<tool_call>` block; `more` while it may still complete. `final`: the output ended
 * (cut by the token limit) inside a call whose name is written: the arguments written so far are
 * the call (a cut raw string too), as `cut_call.ts` does with JSON arguments.
 */
function parseBlock(s: string, tools: Map<string, ToolSpec>, final: boolean): SectionResult {
  const more: SectionResult = { kind: "more" };
  const bad: SectionResult = { kind: "bad" };
  let pos = OPEN.length;
  const skipWs = () => {
    while (pos < s.length && WS.includes(s[pos])) pos++;
  };
  // The name runs to the first tag (or the end of the block when there are no arguments).
  const tag = s.slice(pos).search(/<\/?(?:arg_key|tool_call)>/);
  if (tag < 0) return s.length - pos > 256 ? bad : more;
  const name = s.slice(pos, pos + tag).trim();
  const tool = tools.get(name);
  if (!tool) return bad;
  pos += tag;
  const pairs: [string, string][] = [];
  const call = (length: number): SectionResult => ({
    kind: "ok",
    calls: [{ name, arguments: argsObject(tool, pairs) }],
    length,
  });
  const cut = () => (final ? call(s.length) : more);
  for (;;) {
    skipWs();
    if (pos >= s.length) return cut();
    if (!s.startsWith(KEY, pos)) {
      if (KEY.startsWith(s.slice(pos))) return cut();
      break;
    }
    const keyEnd = s.indexOf(END_KEY, pos);
    if (keyEnd < 0) return cut();
    const key = s.slice(pos + KEY.length, keyEnd);
    pos = keyEnd + END_KEY.length;
    skipWs();
    if (s.length - pos < VALUE.length) return VALUE.startsWith(s.slice(pos)) ? cut() : bad;
    if (!s.startsWith(VALUE, pos)) return bad;
    const valueEnd = s.indexOf(END_VALUE, pos);
    if (valueEnd < 0) {
      if (final && isRawArg(tool, key)) pairs.push([key, s.slice(pos + VALUE.length)]);
      return cut();
    }
    pairs.push([key, s.slice(pos + VALUE.length, valueEnd)]);
    pos = valueEnd + END_VALUE.length;
  }
  if (s.length - pos < CLOSE.length) return CLOSE.startsWith(s.slice(pos)) ? cut() : bad;
  if (!s.startsWith(CLOSE, pos)) return bad;
  return call(pos + CLOSE.length);
}

export const glmFormat: ToolFormat = {
  family: "glm",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const { set, call } = taggedCalls(
      tools,
      SYNTAX,
      relax,
      (name, args) => seq(lit(name), LAYOUT, args),
    );
    const block = seq(lit(OPEN), call, lit(CLOSE));
    return render(set.g, oneOrMore(block, parallel, LAYOUT));
  },
  triggers: { patterns: [prefixPattern([OPEN])], tokens: [OPEN] },
  reasoning: { start: "<think>", end: "</think>" },
  newParser(tools) {
    const byName = new Map(tools.map((t) => [t.name, t]));
    return newSectionParser({
      markers: [OPEN],
      closers: ">",
      parse: (s, final) => parseBlock(s, byName, final),
    });
  },
};
