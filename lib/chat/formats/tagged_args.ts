/**
 * Calls whose arguments are written one per tag pair, as GLM (`<arg_key>K</arg_key><arg_value>V
 * </arg_value>`) and MiniMax-M2 (`<parameter name="K">V</parameter>`) do: a value whose schema
 * is a plain string is written raw (anything but the closing tag), every other value as JSON, the
 * way their templates render history (`v | tojson if v is not string else v`). The grammar writes
 * the properties in schema order, required ones always and optional ones maybe; the parser reads
 * them in any order.
 *
 * @example
 * ```ts
 * import { argsObject } from "./tagged_args.ts";
 * const tool = { name: "f", parameters: { type: "object", properties: {
 *   path: { type: "string" }, n: { type: "integer" } } } };
 * argsObject(tool, [["path", "a b"], ["n", "3"]]); // '{"path":"a b","n":3}'
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { constraintError } from "../../constrain/error.ts";
import { alt, type Expr, lit, opt, seq } from "../../constrain/gbnf.ts";
import type { SchemaSet } from "../../constrain/json_schema.ts";
import { argumentsSchema } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import { isRawString } from "./qwen3_coder.ts";

type Json = Record<string, unknown>;

function isRecord(x: unknown): x is Json {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/** The tool's top-level properties; a schema that does not list them cannot be written as tags. */
export function tagProperties(t: ToolSpec, family: string): [string, unknown][] {
  const p = argumentsSchema(t);
  if (["$ref", "anyOf", "oneOf", "allOf"].some((k) => k in p)) {
    throw constraintError(
      "parameters",
      `${family} calls need an object schema listing its properties at the top level`,
      "#",
    );
  }
  return isRecord(p.properties) ? Object.entries(p.properties) : [];
}

export type TagSyntax = {
  family: string;
  /** The text before a value: the key's tags (`open(name)`). */
  open(name: string): Expr;
  /** The closing tag after a value; a raw value can hold anything but it. */
  close: string;
  /** Between two arguments (layout). */
  sep: Expr;
};

/** Every argument of `t` as tag pairs, in schema order (optional ones may be left out). */
export function argsExpr(set: SchemaSet, t: ToolSpec, syn: TagSyntax, rawText: () => Expr): Expr {
  const schema = argumentsSchema(t);
  const required = new Set(Array.isArray(schema.required) ? schema.required as string[] : []);
  const params = tagProperties(t, syn.family).map(([name, sub]) => {
    let value: Expr;
    if (isRawString(sub)) {
      const e = isRecord(sub) && Array.isArray(sub.enum) ? sub.enum as string[] : undefined;
      value = e ? alt(...e.filter((v) => !v.includes(syn.close)).map(lit)) : rawText();
    } else {
      const pointer = "#/properties/" + name.replace(/~/g, "~0").replace(/\//g, "~1");
      value = set.compile(schema, `${t.name}-${name}`, encodeURI(pointer));
    }
    const p = seq(syn.open(name), value, lit(syn.close), syn.sep);
    return required.has(name) ? p : opt(p);
  });
  return seq(...params);
}

/** Compact JSON arguments from `[key, written value]` pairs, each read by its schema. */
export function argsObject(t: ToolSpec | undefined, pairs: [string, string][]): string {
  let props: Map<string, unknown>;
  try {
    props = new Map(t ? tagProperties(t, "") : []);
  } catch {
    props = new Map();
  }
  const args: Json = {};
  for (const [key, raw] of pairs) {
    const parsed = isRawString(props.get(key)) ? undefined : parseJson(raw);
    args[key] = parsed === undefined ? raw : parsed;
  }
  return JSON.stringify(args);
}

/** Whether argument `key` of `t` is written raw (a plain string), so a cut value still counts. */
export function isRawArg(t: ToolSpec, key: string): boolean {
  try {
    return isRawString(new Map(tagProperties(t, "")).get(key));
  } catch {
    return false;
  }
}
