/**
 * Kimi-K2 tool calls: one section `<|tool_calls_section_begin|>` holding, per call,
 * `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`,
 * then `<|tool_calls_section_end|>`. The call id is `functions.NAME:IDX` (IDX counts calls
 * across the conversation), and it is kept as the call's id, since the template writes results
 * back as `## Return of <id>`. Kimi-K2-Thinking reasons in `<think>...</think>` first.
 *
 * @example
 * ```ts
 * import { kimiK2Format } from "./kimi_k2.ts";
 * const tools = [{ name: "f", parameters: { type: "object" } }];
 * const p = kimiK2Format.newParser(tools);
 * p.push("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0" +
 *   '<|tool_call_argument_begin|>{"x": 1}<|tool_call_end|><|tool_calls_section_end|>');
 * // tool_call_start (id "functions.f:0"), args {"x":1}, end
 * ```
 * @module
 */
import { alt, charSet, cls, type Expr, lit, render, rep, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { jsonEnd, parseJson } from "./json_calls.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const SECTION = "<|tool_calls_section_begin|>";
const END_SECTION = "<|tool_calls_section_end|>";
/** The singular spelling Kimi-K2 sometimes writes (llama.cpp and vLLM read both). */
const SECTION_1 = "<|tool_call_section_begin|>";
const END_SECTION_1 = "<|tool_call_section_end|>";
const CALL = "<|tool_call_begin|>";
const ARGS = "<|tool_call_argument_begin|>";
const END_CALL = "<|tool_call_end|>";
const PREFIX = "functions.";

/** `functions.NAME:IDX`, as the template numbers calls. */
const INDEX: Expr = rep(cls(charSet("0123456789")), 1, 4);

/**
 * Reads a call section from its marker. Lenient where Kimi-K2 is known to be sloppy (inside its
 * reasoning it writes calls without the section markers, or without `<|tool_call_end|>`): calls
 * are read up to what follows them once the text is final.
 */
function parseSection(s: string, names: Set<string>, final: boolean): SectionResult {
  const more: SectionResult = { kind: "more", recheck: true };
  const bad: SectionResult = { kind: "bad" };
  const open = [SECTION, SECTION_1].find((m) => s.startsWith(m));
  const wrapped = open !== undefined;
  const close = open === SECTION_1 ? END_SECTION_1 : END_SECTION;
  let pos = open?.length ?? 0;
  const calls: ParsedCall[] = [];
  const skipWs = () => {
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
  };
  const done = (length: number): SectionResult =>
    calls.length ? { kind: "ok", calls, length } : bad;
  for (;;) {
    const before = pos;
    skipWs();
    const rest = s.slice(pos);
    if (wrapped && rest.startsWith(close)) return done(pos + close.length);
    if (!rest.startsWith(CALL)) {
      const partial = close.startsWith(rest) || CALL.startsWith(rest);
      if (!final && partial) return more;
      if (!final && !wrapped && rest === "") return more;
      return done(before);
    }
    const argsAt = s.indexOf(ARGS, pos);
    if (argsAt < 0) return final || s.length - pos > 300 ? done(before) : more;
    const id = s.slice(pos + CALL.length, argsAt).trim();
    const m = /^(?:functions\.)?([A-Za-z0-9_.:-]+?)(?::\d+)?$/.exec(id);
    if (!m || !names.has(m[1])) return done(before);
    pos = argsAt + ARGS.length;
    skipWs();
    const end = jsonEnd(s, pos);
    if (end < 0) return final ? done(before) : more;
    const args = parseJson(s.slice(pos, end));
    if (typeof args !== "object" || args === null || Array.isArray(args)) return done(before);
    pos = end;
    skipWs();
    if (s.startsWith(END_CALL, pos)) pos += END_CALL.length;
    else if (!final && END_CALL.startsWith(s.slice(pos))) return more;
    calls.push({ name: m[1], arguments: JSON.stringify(args), id });
  }
}

export const kimiK2Format: ToolFormat = {
  family: "kimi-k2",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const s = toolSchemas(tools, relax);
    const call = alt(
      ...tools.map((t, i) =>
        seq(lit(`${CALL}${PREFIX}${t.name}:`), INDEX, lit(ARGS), s.args[i], lit(END_CALL))
      ),
    );
    return render(s.set.g, seq(lit(SECTION), oneOrMore(call, parallel, LAYOUT), lit(END_SECTION)));
  },
  triggers: {
    patterns: [prefixPattern([SECTION])],
    tokens: [SECTION],
  },
  reasoning: { start: "<think>", end: "</think>" },
  newParser(tools) {
    const names = new Set(tools.map((t) => t.name));
    return newSectionParser({
      markers: [SECTION, SECTION_1, CALL],
      closers: ">}",
      parse: (s, final) => parseSection(s, names, final),
    });
  },
};
