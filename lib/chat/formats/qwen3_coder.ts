/**
 * Qwen3-Coder tool calls, XML-like: `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n
 * </parameter>\n</function>\n</tool_call>`. A plain string parameter is written raw (anything
 * but the terminator `\n</parameter>`); every other value is JSON text. Which one a parameter is
 * follows from its schema, the same way in the grammar and in the parser.
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
import { constraintError } from "../../constrain/error.ts";
import {
  alt,
  charSet,
  cls,
  complementSet,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  lit,
  opt,
  ref,
  render,
  reserve,
  seq,
} from "../../constrain/gbnf.ts";
import { newSchemaSet } from "../../constrain/json_schema.ts";
import { toolListPrompt } from "./generic.ts";
import { argumentsSchema, forTool, LAYOUT, oneOrMore, prefixPattern } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";
const FUNCTION = "<function=";
const END_FUNCTION = "</function>";
const PARAMETER = "<parameter=";
/** Ends a parameter value; a raw value can hold anything but this. */
export const VALUE_END = "\n</parameter>";

const ANNOTATION_KEYS = new Set([
  "type",
  "enum",
  "title",
  "description",
  "default",
  "examples",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
]);

type Json = Record<string, unknown>;

function isRecord(x: unknown): x is Json {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/** A plain (or enum-of-strings) string parameter, written raw rather than as JSON. */
export function isRawString(schema: unknown): boolean {
  if (!isRecord(schema) || schema.type !== "string") return false;
  if (!Object.keys(schema).every((k) => ANNOTATION_KEYS.has(k))) return false;
  return schema.enum === undefined ||
    (Array.isArray(schema.enum) && schema.enum.every((v) => typeof v === "string"));
}

function properties(t: ToolSpec): [string, unknown][] {
  const p = argumentsSchema(t);
  if (["$ref", "anyOf", "oneOf", "allOf"].some((k) => k in p)) {
    throw constraintError(
      "parameters",
      "qwen3-coder calls need an object schema listing its properties at the top level",
      "#",
    );
  }
  return isRecord(p.properties) ? Object.entries(p.properties) : [];
}

function safeProperties(t: ToolSpec): [string, unknown][] {
  try {
    return properties(t);
  } catch {
    return [];
  }
}

/**
 * Any text without `stop` inside (a right-linear rule per matched prefix of `stop`, KMP style),
 * so the model cannot write the terminator inside a value. `after`: text just before it that
 * counts too (the newline after `<parameter=P>`, so a value cannot start with `</parameter>`).
 */
export function textWithout(g: Grammar, stop: string, base: string, after = ""): Expr {
  const chars = [...stop];
  const next = (state: number, c: string): number => {
    const seen = chars.slice(0, state).join("") + c;
    for (let k = Math.min(seen.length, chars.length); k > 0; k--) {
      if (seen.endsWith(chars.slice(0, k).join(""))) return k;
    }
    return 0;
  };
  const names = chars.map((_, i) => reserve(g, `${base}-${i}`));
  const alphabet = [...new Set(chars)];
  chars.forEach((_, i) => {
    const byTarget = new Map<number, string[]>();
    for (const c of alphabet) {
      const j = next(i, c);
      byTarget.set(j, [...(byTarget.get(j) ?? []), c]);
    }
    const branches: Expr[] = [EMPTY];
    const other = cls(complementSet(charSet(alphabet.join(""))));
    branches.push(seq(other, ref(names[0])));
    for (const [j, cs] of byTarget) {
      if (j === chars.length) continue; // the whole terminator: not allowed inside
      branches.push(seq(cls(charSet(cs.join(""))), ref(names[j])));
    }
    define(g, names[i], alt(...branches));
  });
  let start = 0;
  for (const c of after) start = next(start, c);
  return ref(names[start]);
}

function toolExpr(
  set: ReturnType<typeof newSchemaSet>,
  t: ToolSpec,
  rawText: () => Expr,
): Expr {
  const schema = argumentsSchema(t);
  const required = new Set(Array.isArray(schema.required) ? schema.required as string[] : []);
  const params = properties(t).map(([name, sub]) => {
    let value: Expr;
    if (isRawString(sub)) {
      const e = isRecord(sub) && Array.isArray(sub.enum) ? sub.enum as string[] : undefined;
      value = e ? alt(...e.filter((v) => !v.includes(VALUE_END)).map(lit)) : rawText();
    } else {
      const pointer = "#/properties/" + name.replace(/~/g, "~0").replace(/\//g, "~1");
      value = set.compile(schema, `${t.name}-${name}`, encodeURI(pointer));
    }
    const p = seq(lit(`${PARAMETER}${name}>\n`), value, lit(VALUE_END), LAYOUT);
    return required.has(name) ? p : opt(p);
  });
  return seq(lit(`${t.name}>`), LAYOUT, ...params);
}

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
  const props = new Map(safeProperties(tool));
  const args: Json = {};
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
    const schema = props.get(key);
    const parsed = isRawString(schema) ? undefined : parseJson(raw);
    args[key] = parsed === undefined ? raw : parsed;
  }
  r = expect(END_FUNCTION);
  if (r !== true) return r === "more" ? more : { kind: "bad" };
  skipWs();
  if (pos >= s.length) return more;
  r = expect(CLOSE);
  if (r !== true) return r === "more" ? more : { kind: "bad" };
  const call: ParsedCall = { name, arguments: JSON.stringify(args) };
  return { kind: "ok", calls: [call], length: pos };
}

export const qwen3CoderFormat: ToolFormat = {
  family: "qwen3-coder",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const set = newSchemaSet();
    let raw: Expr | undefined;
    const rawText = () => (raw ??= textWithout(set.g, VALUE_END, "raw-text", "\n"));
    const fns = tools.map((t, i) => forTool(t, i, () => toolExpr(set, t, rawText)));
    const block = seq(
      lit(OPEN),
      LAYOUT,
      lit(FUNCTION),
      alt(...fns),
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
