/**
 * DeepSeek V3.2 and V4 tool calls, in DSML markup: one block `<｜DSML｜function_calls>` (V3.2) or
 * `<｜DSML｜tool_calls>` (V4) holding, per call, `<｜DSML｜invoke name="NAME">` with one
 * `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>` per argument and
 * `</｜DSML｜invoke>`, each on its own line, then the block's closing tag. `string="true"` values
 * are raw text, `string="false"` ones JSON, as the templates render history. Reasoning is
 * `<think>...</think>`; the templates render `tools` themselves.
 *
 * @example
 * ```ts
 * import { deepseekV32Format } from "./deepseek_dsml.ts";
 * const p = deepseekV32Format.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n' +
 *   '<｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n' +
 *   "</｜DSML｜function_calls>"); // tool_call_start f, args {"n":3}, end
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { lit, render, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern } from "./grammar.ts";
import { jsonEnd, parseJson } from "./json_calls.ts";
import { newSectionParser, sectionCursor, type SectionResult } from "./section_parser.ts";
import { isRawArg, taggedCalls, type TagSyntax } from "./tagged_args.ts";
import type { ToolFamily, ToolFormat } from "./types.ts";

const DSML = "｜DSML｜";
const INVOKE = `<${DSML}invoke name="`;
const END_INVOKE = `</${DSML}invoke>`;
const PARAM = `<${DSML}parameter name="`;
const END_PARAM = `</${DSML}parameter>`;
/** Both generations' block names: a model of one that writes the other's is still read. */
const BLOCKS = ["function_calls", "tool_calls"];

type Pair = { key: string; value: string; raw: boolean | undefined };

/** Compact JSON arguments: `string="true"` raw, `"false"` JSON (raw if it does not parse). */
function argsJson(t: ToolSpec, pairs: Pair[]): string {
  const args: Record<string, unknown> = {};
  for (const p of pairs) {
    const raw = p.raw ?? isRawArg(t, p.key);
    const parsed = raw ? undefined : parseJson(p.value);
    args[p.key] = parsed === undefined ? p.value : parsed;
  }
  return JSON.stringify(args);
}

/**
 * Where the value at `pos` ends (its closing tag), -1 if no tag follows yet, or "more" while a
 * JSON array, object or string is still open: a JSON value may hold the closing tag's text in a
 * string, so it ends where the JSON does when the tag follows it there.
 */
function valueEndAt(s: string, pos: number, raw: boolean): number | "more" {
  if (!raw && '{["'.includes(s[pos] ?? "")) {
    const end = s[pos] === '"' ? stringEnd(s, pos) : jsonEnd(s, pos);
    if (end < 0) return "more";
    if (s.startsWith(END_PARAM, end)) return end;
  }
  return s.indexOf(END_PARAM, pos);
}

/** Index just past the JSON string that starts at `pos`, or -1 when the text ends first. */
function stringEnd(s: string, pos: number): number {
  for (let i = pos + 1; i < s.length; i++) {
    if (s[i] === "\\") i++;
    else if (s[i] === '"') return i + 1;
  }
  return -1;
}

/**
 * Reads a call block; `more` while it may still complete. `final`: the output ended (cut by the
 * token limit) inside the block: the calls written so far are the calls, the cut one with the
 * arguments it has, as the other tag-argument families do.
 */
function parseBlock(s: string, tools: Map<string, ToolSpec>, final: boolean): SectionResult {
  const bad: SectionResult = { kind: "bad" };
  const block = BLOCKS.find((b) => s.startsWith(`<${DSML}${b}>`));
  if (!block) return bad;
  const endBlock = `</${DSML}${block}>`;
  const c = sectionCursor(s, block.length + DSML.length + 2, final);
  for (;;) {
    c.skipWs();
    let r = c.expect(endBlock);
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
    const pairs: Pair[] = [];
    const cutHere = () => c.cut({ name, arguments: argsJson(tool, pairs) });
    for (;;) {
      c.skipWs();
      if (c.pos >= s.length) return cutHere();
      r = c.expect(PARAM);
      if (r === "more") return cutHere();
      if (r === false) break;
      const tagEnd = s.indexOf(">", c.pos);
      if (tagEnd < 0) return s.length - c.pos > 512 ? bad : cutHere();
      const attrs = /^([^"]*)"(?:\s+string="(true|false)")?\s*$/.exec(s.slice(c.pos, tagEnd));
      if (!attrs) return bad;
      const key = attrs[1];
      const raw = attrs[2] === undefined ? undefined : attrs[2] === "true";
      const valueEnd = valueEndAt(s, tagEnd + 1, raw ?? false);
      if (valueEnd === "more" && !final) return cutHere();
      if (valueEnd === "more" || valueEnd < 0) {
        if (final && (raw ?? false)) pairs.push({ key, value: s.slice(tagEnd + 1), raw });
        return cutHere();
      }
      pairs.push({ key, value: s.slice(tagEnd + 1, valueEnd), raw });
      c.pos = valueEnd + END_PARAM.length;
    }
    r = c.expect(END_INVOKE);
    if (r !== true) return r === "more" ? cutHere() : bad;
    c.calls.push({ name, arguments: argsJson(tool, pairs) });
  }
  return c.calls.length ? { kind: "ok", calls: c.calls, length: c.pos } : bad;
}

/** The format of one generation, whose block is `<｜DSML｜${block}>`. */
function dsmlFormat(family: ToolFamily, block: string): ToolFormat {
  const open = `<${DSML}${block}>`;
  const close = `</${DSML}${block}>`;
  return {
    family,
    rendersTools: true,
    toolSystemPrompt: toolListPrompt,
    callGrammar(tools, { parallel, relax }) {
      // The attribute says how the value is written: raw for a string, else JSON.
      const syntax: TagSyntax = {
        family,
        open: (name, raw) => lit(`${PARAM}${name}" string="${raw}">`),
        close: END_PARAM,
        sep: LAYOUT,
      };
      const { set, call } = taggedCalls(
        tools,
        syntax,
        relax,
        (name, args) => seq(lit(`${INVOKE}${name}">`), LAYOUT, args, lit(END_INVOKE)),
      );
      const body = oneOrMore(seq(call, LAYOUT), parallel, seq());
      return render(set.g, seq(lit(open), LAYOUT, body, lit(close)));
    },
    // The block tag is a token only in some vocabularies (make-model's); elsewhere the pattern.
    triggers: { patterns: [prefixPattern([open, { ws: true }, INVOKE])], tokens: [open] },
    reasoning: { start: "<think>", end: "</think>" },
    newParser(tools) {
      const byName = new Map(tools.map((t) => [t.name, t]));
      return newSectionParser({
        markers: BLOCKS.map((b) => `<${DSML}${b}>`),
        closers: ">",
        parse: (s, final) => parseBlock(s, byName, final),
      });
    },
  };
}

export const deepseekV32Format: ToolFormat = dsmlFormat("deepseek-v3.2", "function_calls");
export const deepseekV4Format: ToolFormat = dsmlFormat("deepseek-v4", "tool_calls");
