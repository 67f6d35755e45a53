/**
 * MiniMax-M3 tool calls: every tag carries the namespace token `]<]minimax[>[` (NS below):
 * `NS<tool_call>\n`, per call `NS<invoke name="NAME">`, one `NS<KEY>VALUE NS</KEY>` per argument
 * with no layout, `NS</invoke>\n`, then `NS</tool_call>`. Values are written as the template's
 * `to_xml` does: a string raw, an object as nested `NS<k>..NS</k>` elements, an array as
 * `NS<item>..NS</item>` elements, a number as itself, a boolean as JSON; null fields are left
 * out. Reasoning is `<mm:think>..</mm:think>`; a turn without it starts with a bare
 * `</mm:think>` (markup, never content).
 *
 * @example
 * ```ts
 * import { minimaxM3Format } from "./minimax_m3.ts";
 * const n = { type: "integer" };
 * const tools = [{ name: "f", parameters: { type: "object", properties: { n } } }];
 * const p = minimaxM3Format.newParser(tools);
 * const ns = "]<]minimax[>[";
 * p.push(`${ns}<tool_call>\n${ns}<invoke name="f">${ns}<n>3${ns}</n>${ns}</invoke>\n` +
 *   `${ns}</tool_call>`); // f {"n":3}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { alt, lit, opt, render, rep, seq } from "../../constrain/gbnf.ts";
import { newSchemaSet, type Relaxation } from "../../constrain/json_schema.ts";
import { type Notation, rawNotation } from "../../constrain/notation.ts";
import { toolListPrompt } from "./generic.ts";
import { argumentsSchema, forTool, prefixPattern } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import { schemaAt, stringOnly } from "./tagged_args.ts";
import type { ToolFormat } from "./types.ts";

const NS = "]<]minimax[>[";
const SECTION = `${NS}<tool_call>`;
const END_SECTION = `${NS}</tool_call>`;
const INVOKE = `${NS}<invoke name="`;
const END_INVOKE = `${NS}</invoke>`;
const THINK_END = "</mm:think>";
const openTag = (k: string) => `${NS}<${k}>`;
const closeTag = (k: string) => `${NS}</${k}>`;

type Json = Record<string, unknown>;
const isRecord = (x: unknown): x is Json =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * `to_xml`'s notation: an object as `NS<k>..NS</k>` elements (only listed keys: a closing tag must
 * repeat its key), an array as `NS<item>..NS</item>` elements, a string raw up to the next `NS`,
 * a number as itself, a boolean as JSON; null is never written (the template leaves it out).
 */
const XML: Notation = {
  ...rawNotation(NS),
  id: "mm3",
  layout: false,
  key: (name) => (/^[^<>/\s]+$/.test(name) && !name.includes(NS) ? name : undefined),
  keyQuote: "",
  constant(v) {
    if (v === null) return undefined;
    if (typeof v === "string") return v.includes(NS) ? undefined : v;
    if (Array.isArray(v)) {
      const items = v.map((x) => XML.constant(x));
      return items.some((x) => x === undefined)
        ? undefined
        : items.map((x) => openTag("item") + x + closeTag("item")).join("");
    }
    if (typeof v === "object") {
      const parts: string[] = [];
      for (const [k, x] of Object.entries(v)) {
        if (x === null) continue;
        const value = XML.constant(x);
        if (value === undefined || XML.key(k) === undefined) return undefined;
        parts.push(openTag(k) + value + closeTag(k));
      }
      return parts.join("");
    }
    return JSON.stringify(v);
  },
  object: {
    open: "",
    close: "",
    sep: "",
    member: (key, value) => seq(lit(`${NS}<`), key, lit(">"), value, lit(`${NS}</`), key, lit(">")),
    extraKeys: false,
  },
  array: {
    open: "",
    close: "",
    sep: "",
    item: (value) => seq(lit(openTag("item")), value, lit(closeTag("item"))),
  },
  // Without a schema, a value is text.
  anyValue: (g) => XML.text(g),
  unionsAsText: true,
};

type Step<T> = [T, number] | "more" | "bad";

/** The properties (or items) a schema's object (array) values may hold, across its branches. */
function shapeOf(root: unknown, schema: unknown, depth = 0): { props: Json; items: unknown } {
  const d = isRecord(schema) && typeof schema.$ref === "string"
    ? schemaAt(root, schema.$ref)
    : schema;
  const out = { props: {} as Json, items: undefined as unknown };
  if (!isRecord(d) || depth > 8) return out;
  if (isRecord(d.properties)) Object.assign(out.props, d.properties);
  if (d.items !== undefined && !Array.isArray(d.items)) out.items = d.items;
  for (const k of ["anyOf", "oneOf", "allOf"]) {
    if (!Array.isArray(d[k])) continue;
    for (const b of d[k] as unknown[]) {
      const sub = shapeOf(root, b, depth + 1);
      for (const [name, x] of Object.entries(sub.props)) out.props[name] ??= x;
      out.items ??= sub.items;
    }
  }
  return out;
}

/** Reads a value of `schema` at `pos` up to its closing tag `close`. */
function readValue(
  root: unknown,
  s: string,
  pos: number,
  schema: unknown,
  close: string,
): Step<unknown> {
  const rest = s.slice(pos);
  // A schema that admits a string reads the text as one, elements and all (as llama.cpp does).
  if (rest.startsWith(NS + "<") && !rest.startsWith(close) && !admitsString(root, schema)) {
    const array = rest.startsWith(openTag("item"));
    const shape = shapeOf(root, schema);
    const obj: Json = {};
    const arr: unknown[] = [];
    for (;;) {
      if (s.startsWith(close, pos)) return [array ? arr : obj, pos + close.length];
      if (!s.startsWith(NS + "<", pos)) {
        return (close.startsWith(s.slice(pos)) || (NS + "<").startsWith(s.slice(pos)))
          ? "more"
          : "bad";
      }
      const gt = s.indexOf(">", pos + NS.length + 1);
      if (gt < 0) return "more";
      const key = s.slice(pos + NS.length + 1, gt);
      if (key.startsWith("/") || (array && key !== "item")) return "bad";
      const r = readValue(root, s, gt + 1, array ? shape.items : shape.props[key], closeTag(key));
      if (typeof r === "string") return r;
      if (array) arr.push(r[0]);
      else obj[key] = r[0];
      pos = r[1];
    }
  }
  if ((NS + "<").startsWith(rest) && rest !== "") return "more";
  const end = s.indexOf(close, pos);
  if (end < 0) return "more";
  const text = s.slice(pos, end);
  if (stringOnly(root, schema)) return [text, end + close.length];
  // No elements and no text: an empty list or mapping, where the schema wants one.
  if (text === "" && !admitsString(root, schema)) {
    const kind = emptyKind(root, schema);
    if (kind) return [kind === "array" ? [] : {}, end + close.length];
  }
  // A number or boolean reads as JSON where the schema admits one; other text stays a string.
  const v = parseJson(text);
  const json = (typeof v === "number" || typeof v === "boolean") && admits(root, schema, v);
  return [json ? v : text, end + close.length];
}

/** `array` or `object` when a schema (through `$ref`s and unions) names that type. */
function emptyKind(root: unknown, schema: unknown, depth = 0): "array" | "object" | undefined {
  const d = isRecord(schema) && typeof schema.$ref === "string"
    ? schemaAt(root, schema.$ref)
    : schema;
  if (!isRecord(d) || depth > 8) return undefined;
  for (const k of ["anyOf", "oneOf"]) {
    if (!Array.isArray(d[k])) continue;
    for (const b of d[k] as unknown[]) {
      const kind = emptyKind(root, b, depth + 1);
      if (kind) return kind;
    }
  }
  const types = Array.isArray(d.type) ? d.type : [d.type];
  if (types.includes("array")) return "array";
  if (types.includes("object") || isRecord(d.properties)) return "object";
  return undefined;
}

/** Whether a schema (through `$ref`s and unions) names strings among its values. */
function admitsString(root: unknown, schema: unknown, depth = 0): boolean {
  const d = isRecord(schema) && typeof schema.$ref === "string"
    ? schemaAt(root, schema.$ref)
    : schema;
  if (!isRecord(d) || depth > 8) return false;
  for (const k of ["anyOf", "oneOf"]) {
    if (Array.isArray(d[k])) {
      return (d[k] as unknown[]).some((b) => admitsString(root, b, depth + 1));
    }
  }
  if (Array.isArray(d.enum)) return d.enum.some((v) => typeof v === "string");
  const types = Array.isArray(d.type) ? d.type : [d.type];
  return types.includes("string");
}

/** Whether a schema (through `$ref`s and unions) lists the JSON type of `v`, or no type at all. */
function admits(root: unknown, schema: unknown, v: number | boolean, depth = 0): boolean {
  const d = isRecord(schema) && typeof schema.$ref === "string"
    ? schemaAt(root, schema.$ref)
    : schema;
  if (!isRecord(d) || depth > 8) return true;
  for (const k of ["anyOf", "oneOf"]) {
    if (Array.isArray(d[k])) return (d[k] as unknown[]).some((b) => admits(root, b, v, depth + 1));
  }
  if (Array.isArray(d.enum)) return d.enum.includes(v);
  if ("const" in d) return d.const === v;
  if (d.type === undefined) return true;
  const types = Array.isArray(d.type) ? d.type : [d.type];
  if (typeof v === "boolean") return types.includes("boolean");
  return types.includes("number") || (types.includes("integer") && Number.isInteger(v));
}

/** A bare `</mm:think>` (markup), or a call section from its marker. */
function parseSection(s: string, tools: Map<string, ToolSpec>, final: boolean): SectionResult {
  if (s.startsWith(THINK_END)) return { kind: "ok", calls: [], length: THINK_END.length };
  const calls: ParsedCall[] = [];
  const incomplete = (): SectionResult =>
    final ? (calls.length ? { kind: "ok", calls, length: s.length } : { kind: "bad" }) : {
      kind: "more",
    };
  let pos = SECTION.length;
  for (;;) {
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
    if (s.startsWith(END_SECTION, pos)) {
      return { kind: "ok", calls, length: pos + END_SECTION.length };
    }
    if (!s.startsWith(INVOKE, pos)) {
      const rest = s.slice(pos);
      return END_SECTION.startsWith(rest) || INVOKE.startsWith(rest)
        ? incomplete()
        : { kind: "bad" };
    }
    const q = s.indexOf('">', pos + INVOKE.length);
    if (q < 0) return s.length - pos > 300 ? { kind: "bad" } : incomplete();
    const name = s.slice(pos + INVOKE.length, q);
    const tool = tools.get(name);
    if (!tool) return { kind: "bad" };
    const root = argumentsSchema(tool);
    const r = readValue(root, s, q + 2, root, END_INVOKE);
    if (r === "bad") return { kind: "bad" };
    if (r === "more") return incomplete();
    // No elements at all: the arguments are an empty object.
    const args = r[0] === "" ? {} : r[0];
    if (!isRecord(args)) return { kind: "bad" };
    calls.push({ name, arguments: JSON.stringify(args) });
    pos = r[1];
  }
}

export const minimaxM3Format: ToolFormat = {
  family: "minimax-m3",
  rendersTools: true,
  printMarkers: [NS],
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const set = newSchemaSet();
    const invokes = tools.map((t, i) =>
      forTool(t, i, () => {
        const args = set.compile(argumentsSchema(t), `${t.name}-args`, "#", {
          notation: XML,
          ...(relax ? { relax: (r: Relaxation) => relax(i, r) } : {}),
        });
        return seq(lit(`${INVOKE}${t.name}">`), args, lit(`${END_INVOKE}\n`));
      })
    );
    const body = parallel ? rep(alt(...invokes), 1, Infinity) : alt(...invokes);
    // A turn without reasoning starts with a bare `</mm:think>`, as the template writes it.
    return render(set.g, seq(opt(lit(THINK_END)), lit(`${SECTION}\n`), body, lit(END_SECTION)));
  },
  // Fires anywhere in the opening up to the tool name, whatever the tokens' boundaries.
  triggers: { patterns: [prefixPattern([SECTION, `\n${INVOKE}`])], tokens: [] },
  reasoning: { start: "<mm:think>", end: THINK_END },
  newParser(tools) {
    const byName = new Map(tools.map((t) => [t.name, t]));
    return newSectionParser({
      markers: [THINK_END, SECTION],
      closers: ">",
      parse: (s, final) => parseSection(s, byName, final),
    });
  },
};
