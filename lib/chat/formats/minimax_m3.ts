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
import {
  alt,
  charSet,
  cls,
  complementSet,
  type Expr,
  lit,
  opt,
  render,
  rep,
  seq,
} from "../../constrain/gbnf.ts";
import { newSchemaSet, type SchemaSet } from "../../constrain/json_schema.ts";
import { toolListPrompt } from "./generic.ts";
import { argumentsSchema, forTool, prefixPattern } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import { textWithout } from "./qwen3_coder.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import { tagProperties } from "./tagged_args.ts";
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
 * How the template writes a value of `schema`; "any": no schema to tell; "union": one of its
 * alternatives (none a string).
 */
type Kind = "string" | "object" | "array" | "json" | "any" | "union";

function kindOf(schema: unknown): Kind {
  if (!isRecord(schema)) return "any";
  if (Array.isArray(schema.enum)) {
    return schema.enum.every((v) => typeof v === "string") ? "string" : "json";
  }
  const t = schema.type;
  if (t === "string" || (Array.isArray(t) && t.includes("string"))) return "string";
  const union = unionOf(schema);
  if (union) return union.branches.some((b) => kindOf(b) === "string") ? "string" : "union";
  if (t === "object") return "object";
  if (t === "array" && isRecord(schema.items)) return "array";
  if (t === undefined && !["anyOf", "oneOf", "allOf", "$ref", "const"].some((k) => k in schema)) {
    return "any";
  }
  return "json";
}

function unionOf(schema: Json): { key: string; branches: unknown[] } | undefined {
  for (const key of ["anyOf", "oneOf"]) {
    const branches = schema[key];
    if (Array.isArray(branches)) return { key, branches };
  }
  return undefined;
}

/** A plain string schema whose pattern or format the raw text cannot be held to. */
const checked = (s: Json) =>
  s.type === "string" && (s.pattern !== undefined || s.format !== undefined);

const ptr = (p: string, ...keys: string[]) =>
  p + keys.map((k) => "/" + encodeURI(k.replace(/~/g, "~0").replace(/\//g, "~1"))).join("");

type Build = { set: SchemaSet; root: Json; name: string; raw: () => Expr };

/** A value of the schema at `pointer` as `to_xml` writes it (between its tags). */
function valueExpr(b: Build, schema: unknown, pointer: string): Expr {
  const s = isRecord(schema) ? schema : {};
  switch (kindOf(schema)) {
    case "string": {
      if (Array.isArray(s.enum)) return alt(...(s.enum as string[]).map(lit));
      // A pattern or format only JSON's grammar enforces: a JSON string (read back as one).
      if (checked(s)) return b.set.compile(b.root, b.name, pointer);
      const min = typeof s.minLength === "number" ? s.minLength : 0;
      const max = typeof s.maxLength === "number" ? s.maxLength : Infinity;
      // A bounded string leaves out `]` (it cannot start the namespace token).
      return min === 0 && max === Infinity
        ? b.raw()
        : rep(cls(complementSet(charSet("]"))), min, max);
    }
    case "object":
      return membersExpr(b, s, pointer);
    case "array": {
      const min = typeof s.minItems === "number" ? s.minItems : 0;
      const max = typeof s.maxItems === "number" ? s.maxItems : Infinity;
      const item = valueExpr(b, s.items, ptr(pointer, "items"));
      return rep(seq(lit(openTag("item")), item, lit(closeTag("item"))), min, max);
    }
    case "union": {
      const u = unionOf(s)!;
      return alt(...u.branches.map((x, i) => valueExpr(b, x, ptr(pointer, u.key, String(i)))));
    }
    default:
      return b.set.compile(b.root, b.name, pointer);
  }
}

/** An object's fields, in schema order (optional ones may be left out). */
function membersExpr(b: Build, s: Json, pointer: string): Expr {
  const props = isRecord(s.properties) ? Object.entries(s.properties) : [];
  const required = new Set(Array.isArray(s.required) ? s.required : []);
  return seq(
    ...props.map(([k, sub]) => {
      const v = valueExpr(b, sub, ptr(pointer, "properties", k));
      const e = seq(lit(openTag(k)), v, lit(closeTag(k)));
      return required.has(k) ? e : opt(e);
    }),
  );
}

type Step<T> = [T, number] | "more" | "bad";

/** Reads a value of `schema` at `pos` up to its closing tag `close`. */
function readValue(s: string, pos: number, schema: unknown, close: string): Step<unknown> {
  let kind = kindOf(schema);
  if (kind === "any" || kind === "union") {
    kind = "any";
    const rest = s.slice(pos);
    if (rest.startsWith(NS + "<") && !rest.startsWith(close)) {
      kind = rest.startsWith(openTag("item")) ? "array" : "object";
    } else if ((NS + "<").startsWith(rest)) return "more";
  }
  // A JSON text where elements were due (a schema without properties) is read as JSON.
  const first = s.slice(pos).trimStart();
  if ((kind === "object" || kind === "array") && /^[[{]/.test(first)) kind = "json";
  if (kind === "object" || kind === "array") {
    const props = isRecord(schema) && isRecord(schema.properties) ? schema.properties : {};
    const items = isRecord(schema) ? schema.items : undefined;
    const obj: Json = {};
    const arr: unknown[] = [];
    for (;;) {
      while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
      if (s.startsWith(close, pos)) return [kind === "object" ? obj : arr, pos + close.length];
      if (!s.startsWith(NS + "<", pos)) {
        return (close.startsWith(s.slice(pos)) || (NS + "<").startsWith(s.slice(pos)))
          ? "more"
          : "bad";
      }
      const gt = s.indexOf(">", pos + NS.length + 1);
      if (gt < 0) return "more";
      const key = s.slice(pos + NS.length + 1, gt);
      if (key.startsWith("/") || (kind === "array" && key !== "item")) return "bad";
      const r = readValue(s, gt + 1, kind === "array" ? items : props[key], closeTag(key));
      if (typeof r === "string") return r;
      if (kind === "array") arr.push(r[0]);
      else obj[key] = r[0];
      pos = r[1];
    }
  }
  const end = s.indexOf(close, pos);
  if (end < 0) return "more";
  const text = s.slice(pos, end);
  if (kind === "string") {
    const v = isRecord(schema) && checked(schema) ? parseJson(text) : undefined;
    return [typeof v === "string" ? v : text, end + close.length];
  }
  const v = parseJson(text);
  // Without a schema only a number or boolean reads as JSON (the template writes them bare).
  const json = kind === "json" ? v !== undefined : typeof v === "number" || typeof v === "boolean";
  return [json ? v : text, end + close.length];
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
    const r = readValue(s, q + 2, { type: "object", ...argumentsSchema(tool) }, END_INVOKE);
    if (r === "bad") return { kind: "bad" };
    if (r === "more") return incomplete();
    calls.push({ name, arguments: JSON.stringify(r[0]) });
    pos = r[1];
  }
}

export const minimaxM3Format: ToolFormat = {
  family: "minimax-m3",
  rendersTools: true,
  printMarkers: [NS],
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const set = newSchemaSet();
    let raw: Expr | undefined;
    const rawText = () => (raw ??= textWithout(set.g, NS, "raw-value"));
    const invokes = tools.map((t, i) =>
      forTool(t, i, () => {
        tagProperties(t, "minimax-m3"); // an object schema listing its properties
        const root = argumentsSchema(t);
        const b: Build = { set, root, name: t.name, raw: rawText };
        return seq(lit(`${INVOKE}${t.name}">`), membersExpr(b, root, "#"), lit(`${END_INVOKE}\n`));
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
