/**
 * MiniMax-M2 tool calls: one `<minimax:tool_call>` section holding, per call,
 * `<invoke name="NAME">` with one `<parameter name="K">V</parameter>` per argument and
 * `</invoke>`, then `</minimax:tool_call>`, each on its own line. String values are raw, others
 * JSON (see `tagged_args.ts`). Reasoning is `<think>...</think>`, opened by the generation
 * prompt.
 *
 * @example
 * ```ts
 * import { minimaxM2Format } from "./minimax_m2.ts";
 * const tools = [{ name: "f", parameters: { type: "object", properties: {
 *   path: { type: "string" }, n: { type: "integer" } } } }];
 * const p = minimaxM2Format.newParser(tools);
 * p.push('<minimax:tool_call>\n<invoke name="f">\n<parameter name="path">a b</parameter>\n' +
 *   '<parameter name="n">3</parameter>\n</invoke>\n</minimax:tool_call>'); // {"path":"a b","n":3}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { lit, render, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern } from "./grammar.ts";
import { newSectionParser, sectionCursor, type SectionResult } from "./section_parser.ts";
import { argsObject, isRawArg, taggedCalls, type TagSyntax } from "./tagged_args.ts";
import type { ToolFormat } from "./types.ts";

const SECTION = "<minimax:tool_call>";
const END_SECTION = "</minimax:tool_call>";
const INVOKE = '<invoke name="';
const END_INVOKE = "</invoke>";
const PARAM = '<parameter name="';
const END_PARAM = "</parameter>";

const SYNTAX: TagSyntax = {
  family: "minimax-m2",
  open: (name) => lit(`${PARAM}${name}">`),
  close: END_PARAM,
  sep: LAYOUT,
};

/**
 * Reads a call section; `more` while it may still complete. `final`: the output ended (cut by the
 * token limit) inside the section: the calls written so far are the calls, the cut one with the
 * arguments it has (a cut raw string too), as `cut_call.ts` does with JSON arguments.
 */
function parseSection(s: string, tools: Map<string, ToolSpec>, final: boolean): SectionResult {
  const bad: SectionResult = { kind: "bad" };
  const c = sectionCursor(s, SECTION.length, final);
  for (;;) {
    c.skipWs();
    let r = c.expect(END_SECTION);
    if (r === true) break;
    const partialEnd = r === "more";
    r = c.expect(INVOKE);
    if (r !== true) return r === "more" || partialEnd ? c.cut() : bad;
    const nameEnd = s.indexOf('">', c.pos);
    if (nameEnd < 0) return s.length - c.pos > 256 ? bad : c.cut();
    const name = s.slice(c.pos, nameEnd);
    const tool = tools.get(name);
    if (!tool) return bad;
    c.pos = nameEnd + 2;
    const pairs: [string, string][] = [];
    const cutHere = () => c.cut({ name, arguments: argsObject(tool, pairs) });
    for (;;) {
      c.skipWs();
      if (c.pos >= s.length) return cutHere();
      r = c.expect(PARAM);
      if (r === "more") return cutHere();
      if (r === false) break;
      const keyEnd = s.indexOf('">', c.pos);
      if (keyEnd < 0) return cutHere();
      const key = s.slice(c.pos, keyEnd);
      const valueEnd = s.indexOf(END_PARAM, keyEnd + 2);
      if (valueEnd < 0) {
        if (final && isRawArg(tool, key)) pairs.push([key, s.slice(keyEnd + 2)]);
        return cutHere();
      }
      pairs.push([key, s.slice(keyEnd + 2, valueEnd)]);
      c.pos = valueEnd + END_PARAM.length;
    }
    r = c.expect(END_INVOKE);
    if (r !== true) return r === "more" ? cutHere() : bad;
    c.calls.push({ name, arguments: argsObject(tool, pairs) });
  }
  return c.calls.length ? { kind: "ok", calls: c.calls, length: c.pos } : bad;
}

export const minimaxM2Format: ToolFormat = {
  family: "minimax-m2",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const { set, call } = taggedCalls(
      tools,
      SYNTAX,
      relax,
      (name, args) => seq(lit(`${INVOKE}${name}">`), LAYOUT, args, lit(END_INVOKE)),
    );
    const body = oneOrMore(seq(call, LAYOUT), parallel, seq());
    return render(set.g, seq(lit(SECTION), LAYOUT, body, lit(END_SECTION)));
  },
  triggers: { patterns: [prefixPattern([SECTION, { ws: true }, INVOKE])], tokens: [SECTION] },
  reasoning: { start: "<think>", end: "</think>" },
  newParser(tools) {
    const byName = new Map(tools.map((t) => [t.name, t]));
    return newSectionParser({
      markers: [SECTION],
      closers: ">",
      parse: (s, final) => parseSection(s, byName, final),
    });
  },
};
