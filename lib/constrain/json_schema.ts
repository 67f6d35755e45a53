/**
 * JSON Schema (2020-12, plus `definitions` and array-form `items` from older drafts) to a GBNF
 * grammar for JSON text. Every text the grammar accepts is valid under the schema; the grammar
 * picks one spelling where JSON allows several (compact or lightly indented whitespace, properties
 * in schema order with extra keys last, plain decimals, a single escape per character in patterned
 * strings), so it is exact on what JSON.stringify would write, not on every equivalent text.
 *
 * Supported: `type` (incl. arrays of types), `enum`, `const`, `properties`, `required`,
 * `additionalProperties`, `items`, `prefixItems`, `minItems`, `maxItems`, `minimum`, `maximum`,
 * `exclusiveMinimum`, `exclusiveMaximum` (integers and plain decimals, exact), `minLength`,
 * `maxLength`, `pattern`, `format` (date, time, date-time, uuid, email, ipv4; lengths combine with
 * patterns and formats), `anyOf`, `oneOf` (as alternation: exact when branches cannot overlap),
 * `allOf` (merged), `$ref` to anything inside the document (recursion works), boolean schemas.
 * Keywords that would change validity but are not implemented throw a {@link ConstraintError}
 * naming the keyword and its JSON pointer; annotations and unknown keywords are ignored.
 *
 * @example
 * ```ts
 * import { jsonSchemaToGbnf } from "./json_schema.ts";
 * const gbnf = jsonSchemaToGbnf({
 *   type: "object",
 *   properties: { name: { type: "string" }, age: { type: "integer", minimum: 0, maximum: 150 } },
 *   required: ["name"],
 *   additionalProperties: false,
 * });
 * ```
 * @module
 */
import { constraintError, isConstraintError } from "./error.ts";
import {
  alt,
  ANY_CHAR,
  type CharSet,
  charSet,
  cls,
  complementSet,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  intersectSets,
  isEmpty as isEmptyExpr,
  lit,
  MAX_CODE_POINT,
  NEVER,
  newGrammar,
  opt,
  ref,
  render,
  rep,
  reserve,
  ruleRef,
  seq,
  setHas,
  subtractSets,
} from "./gbnf.ts";
import {
  anyInteger,
  anyNumber,
  decimalRange,
  inclusiveBounds,
  integerRange,
  toDecimal,
} from "./numeric.ts";
import {
  branchesToNode,
  parseRegex,
  regexLength,
  type RegexNode,
  regexToExpr,
  regexWithLength,
} from "./regex.ts";
import { LARK_KEYWORD, larkExpr } from "./lark.ts";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = boolean | { [k: string]: Json };
type JsonType = "null" | "boolean" | "object" | "array" | "number" | "integer" | "string";

const ALL_TYPES: JsonType[] = ["object", "array", "string", "number", "boolean", "null"];

// Keywords that only describe; they never change which instances are valid.
const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$anchor",
  "$dynamicAnchor",
  "$vocabulary",
  "$comment",
  "$defs",
  "definitions",
  "title",
  "description",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "contentEncoding",
  "contentMediaType",
  "contentSchema",
]);

// Keywords that matter only to instances of one type, so they can be ignored for other types.
const TYPE_OF_KEYWORD: Record<string, JsonType> = {
  properties: "object",
  required: "object",
  additionalProperties: "object",
  patternProperties: "object",
  propertyNames: "object",
  minProperties: "object",
  maxProperties: "object",
  dependentRequired: "object",
  dependentSchemas: "object",
  dependencies: "object",
  unevaluatedProperties: "object",
  items: "array",
  prefixItems: "array",
  additionalItems: "array",
  minItems: "array",
  maxItems: "array",
  contains: "array",
  minContains: "array",
  maxContains: "array",
  uniqueItems: "array",
  unevaluatedItems: "array",
  minLength: "string",
  maxLength: "string",
  pattern: "string",
  format: "string",
  minimum: "number",
  maximum: "number",
  exclusiveMinimum: "number",
  exclusiveMaximum: "number",
  multipleOf: "number",
};

/** Regexes (full match) for the formats with a grammar; each accepts only valid values. */
const LEAP_YEAR = "(?:\\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
const DATE = "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-" +
  "(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))|" + LEAP_YEAR + "-02-29)";
const HH = "(?:[01]\\d|2[0-3])";
const TIME = `${HH}:[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-]${HH}:[0-5]\\d)`;
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
const OCTET = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const HEX = "[0-9a-fA-F]";
export const FORMATS: Record<string, string> = {
  date: DATE,
  time: TIME,
  "date-time": `${DATE}T${TIME}`,
  uuid: `${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}`,
  email: `${ATOM}(?:\\.${ATOM})*@(?:${LABEL}\\.)+${LABEL}`,
  ipv4: `(?:${OCTET}\\.){3}${OCTET}`,
};

// Work bounds for user-controlled blow-ups.
const MAX_BRANCHES = 256;
const MAX_DEPTH = 200;
// Inline nesting (parentheses in one rule) allowed before a named rule takes over; llama.cpp's
// parser recurses once per parenthesis.
const NEST = 8;
const MAX_WS_INDENT = 20;

type Ctx = {
  root: Json;
  g: Grammar;
  /** Rule per `$ref` target or merged schema, by key. */
  named: Map<string, string>;
  /** Keys of named rules entered since the last `{` or `[`: a repeat is a cycle that reads nothing. */
  unguarded: string[];
  std: Map<string, Expr>;
  /** Keys whose schema was proven unsatisfiable, with the error to repeat. */
  failed: Map<string, unknown>;
  depth: number;
};

/** A grammar whose root matches JSON texts valid under `schema`. */
export function jsonSchemaToGbnf(schema: unknown): string {
  const ctx: Ctx = {
    root: schema as Json,
    g: newGrammar(),
    named: new Map(),
    unguarded: [],
    std: new Map(),
    failed: new Map(),
    depth: 0,
  };
  const expr = compile(ctx, schema, "#");
  return render(ctx.g, expr);
}

/** A grammar for any JSON object (for `response_format: json_object`). */
export function jsonObjectGbnf(): string {
  const ctx: Ctx = {
    root: {},
    g: newGrammar(),
    named: new Map(),
    unguarded: [],
    std: new Map(),
    failed: new Map(),
    depth: 0,
  };
  anyValue(ctx);
  return render(ctx.g, ctx.std.get("object")!);
}

// ---------------------------------------------------------------- helpers

function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function ptr(path: string, key: string | number): string {
  return `${path}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

function err(keyword: string, message: string, path: string): never {
  throw constraintError(keyword, message, path);
}

function unsupported(keyword: string, path: string, why = ""): never {
  err(
    keyword,
    `unsupported JSON Schema keyword "${keyword}"${why ? `: ${why}` : ""}`,
    ptr(path, keyword),
  );
}

/** Canonical JSON text of a value (what `const`/`enum` emit). */
function canonical(v: Json): string {
  return JSON.stringify(v);
}

function baseName(path: string): string {
  const rename: Record<string, string> = {
    items: "item",
    prefixItems: "item",
    additionalItems: "item",
    additionalProperties: "extra",
  };
  const skip = new Set(["#", "", "properties", "$defs", "definitions", "anyOf", "oneOf", "allOf"]);
  const parts = path.split("/").filter((p) => !skip.has(p) && !/^\d+$/.test(p))
    .map((p) => rename[p] ?? p);
  return parts.slice(-2).join("-") || "value";
}

/** A standard rule (`ws`, `string`, `value`, ...) created on first use. */
function std(ctx: Ctx, name: string, build: () => Expr): Expr {
  const have = ctx.std.get(name);
  if (have) return have;
  const r = ref(reserve(ctx.g, name));
  ctx.std.set(name, r);
  define(ctx.g, r.name, build());
  return r;
}

function ws(ctx: Ctx): Expr {
  // One space, or a newline and bounded indentation: enough for compact and pretty-printed JSON,
  // and no whitespace loop a model could get stuck in.
  return std(
    ctx,
    "ws",
    () => alt(EMPTY, lit(" "), seq(lit("\n"), rep(cls(charSet(" \t")), 0, MAX_WS_INDENT))),
  );
}

const HEX_SET = charSet(["0", "9"], ["a", "f"], ["A", "F"]);

function stringChar(ctx: Ctx): Expr {
  return std(ctx, "char", () =>
    alt(
      cls(complementSet(charSet('"\\', [0, 0x1f]))),
      seq(
        lit("\\"),
        alt(
          cls(charSet('"\\/bfnrt')),
          // \uXXXX except surrogates, so a decoded length is always the escape count.
          seq(
            lit("u"),
            alt(
              seq(cls(subtractSets(HEX_SET, charSet("dD"))), rep(cls(HEX_SET), 3, 3)),
              seq(cls(charSet("dD")), cls(charSet(["0", "7"])), rep(cls(HEX_SET), 2, 2)),
            ),
          ),
        ),
      ),
    ));
}

function anyString(ctx: Ctx): Expr {
  return std(ctx, "string", () => seq(lit('"'), rep(stringChar(ctx), 0, Infinity), lit('"')));
}

function anyValue(ctx: Ctx): Expr {
  const have = ctx.std.get("value");
  if (have) return have;
  const value = ref(reserve(ctx.g, "value"));
  ctx.std.set("value", value);
  const w = ws(ctx);
  const str = anyString(ctx);
  const member = seq(str, w, lit(":"), w, value, w);
  const object = std(
    ctx,
    "object",
    () => seq(lit("{"), w, opt(seq(member, rep(seq(lit(","), w, member), 0, Infinity))), lit("}")),
  );
  const item = seq(value, w);
  const array = std(
    ctx,
    "array",
    () => seq(lit("["), w, opt(seq(item, rep(seq(lit(","), w, item), 0, Infinity))), lit("]")),
  );
  const number = std(ctx, "number", anyNumber);
  define(
    ctx.g,
    value.name,
    alt(object, array, str, number, lit("true"), lit("false"), lit("null")),
  );
  return value;
}

/** How each character of a string value is written inside JSON quotes (one spelling each). */
export function jsonChar(set: CharSet): Expr {
  const parts: Expr[] = [
    cls(subtractSets(intersectSets(set, [[0x20, MAX_CODE_POINT]]), charSet('"\\'))),
  ];
  if (setHas(set, 0x22)) parts.push(lit('\\"'));
  if (setHas(set, 0x5c)) parts.push(lit("\\\\"));
  const short: Record<number, string> = { 8: "b", 9: "t", 10: "n", 12: "f", 13: "r" };
  const lows: number[][] = [[], []];
  for (let c = 0; c < 0x20; c++) {
    if (!setHas(set, c)) continue;
    if (short[c]) parts.push(lit("\\" + short[c]));
    else lows[c >> 4].push(c & 15);
  }
  lows.forEach((l, hi) => {
    if (l.length) parts.push(seq(lit(`\\u00${hi}`), cls(charSet(...l.map((d) => d.toString(16))))));
  });
  return alt(...parts);
}

// ---------------------------------------------------------------- $ref

function resolvePointer(ctx: Ctx, refText: string, path: string): { key: string; schema: Schema } {
  if (!refText.startsWith("#")) {
    err(
      "$ref",
      `only references inside the schema ("#/...") are supported, got ${JSON.stringify(refText)}`,
      path,
    );
  }
  let frag: string;
  try {
    frag = decodeURIComponent(refText.slice(1));
  } catch {
    err("$ref", `malformed $ref ${JSON.stringify(refText)}`, path);
  }
  if (frag !== "" && !frag.startsWith("/")) {
    err("$ref", `anchor references are not supported, got ${JSON.stringify(refText)}`, path);
  }
  let node: Json = ctx.root;
  for (const raw of frag === "" ? [] : frag.slice(1).split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(node) && /^\d+$/.test(key) && Number(key) < node.length) {
      node = node[Number(key)];
    } else if (isObject(node) && Object.hasOwn(node, key)) node = node[key];
    else err("$ref", `$ref ${JSON.stringify(refText)} points to nothing`, path);
  }
  if (typeof node !== "boolean" && !isObject(node)) {
    err("$ref", `$ref ${JSON.stringify(refText)} does not point to a schema`, path);
  }
  return { key: "#" + frag, schema: node };
}

/** A rule compiled once per key; recursion through containers is fine, a bare cycle is not. */
function named(ctx: Ctx, key: string, base: string, path: string, build: () => Expr): Expr {
  const failed = ctx.failed.get(key);
  if (failed) throw failed;
  const have = ctx.named.get(key);
  if (have) {
    if (ctx.unguarded.includes(key)) {
      err("$ref", "reference cycle that reads no input (left recursion)", path);
    }
    return ref(have);
  }
  const name = reserve(ctx.g, base);
  const mark = ctx.named.size;
  ctx.named.set(key, name);
  ctx.unguarded.push(key);
  let body: Expr;
  try {
    body = build();
  } catch (e) {
    // Forget the half-built rule and every rule finished inside it (they may mention it): an
    // enclosing anyOf can survive without them, and unreferenced rules are not rendered.
    for (const k of [...ctx.named.keys()].slice(mark)) ctx.named.delete(k);
    // Impossibility does not depend on where a schema is used: remember it, so a schema
    // referenced from many places is not rebuilt (and refuted) again each time.
    if (isUnsatisfiable(e)) ctx.failed.set(key, e);
    throw e;
  } finally {
    ctx.unguarded.pop();
  }
  if (body.k === "never") err("schema", "no JSON value satisfies this schema", path);
  define(ctx.g, name, body);
  return ref(name);
}

/** Like {@link child}, but a schema no value satisfies gives NEVER instead of an error. */
function childOrNever(ctx: Ctx, schema: unknown, path: string): Expr {
  if (schema === false) return NEVER;
  try {
    return child(ctx, schema, path);
  } catch (e) {
    if (isUnsatisfiable(e)) return NEVER;
    throw e;
  }
}

/** Compiles a child value: inside `{` or `[`, so reference cycles through it consume input. */
function child(ctx: Ctx, schema: unknown, path: string): Expr {
  const saved = ctx.unguarded;
  ctx.unguarded = [];
  try {
    const e = compile(ctx, schema, path);
    return e.k === "ref" || e.k === "never" ? e : ruleRef(ctx.g, baseName(path), e);
  } finally {
    ctx.unguarded = saved;
  }
}

// ---------------------------------------------------------------- compile

function validityKeys(s: { [k: string]: Json }): string[] {
  return Object.keys(s).filter((k) => !ANNOTATIONS.has(k));
}

function compile(ctx: Ctx, schema: unknown, path: string): Expr {
  if (++ctx.depth > MAX_DEPTH) err("schema", `schema nested deeper than ${MAX_DEPTH}`, path);
  try {
    return compileSchema(ctx, schema, path);
  } finally {
    ctx.depth--;
  }
}

function compileSchema(ctx: Ctx, schema: unknown, path: string): Expr {
  if (schema === true) return anyValue(ctx);
  if (schema === false) err("false", "schema `false` matches no value", path);
  if (!isObject(schema)) {
    err("schema", `a schema must be an object or a boolean, got ${JSON.stringify(schema)}`, path);
  }
  const s = schema;

  if ("$ref" in s) {
    if (typeof s.$ref !== "string") err("$ref", "$ref must be a string", ptr(path, "$ref"));
    const rest = Object.fromEntries(
      Object.entries(s).filter(([k]) => k !== "$ref" && !ANNOTATIONS.has(k)),
    );
    const target = resolvePointer(ctx, s.$ref, ptr(path, "$ref"));
    if (Object.keys(rest).length === 0) {
      return named(
        ctx,
        "ref:" + target.key,
        baseName(target.key),
        path,
        () => compile(ctx, target.schema, target.key),
      );
    }
    return compile(ctx, { allOf: [{ $ref: s.$ref }, rest] }, path);
  }

  if ("allOf" in s) {
    if (!Array.isArray(s.allOf) || s.allOf.length === 0) {
      err("allOf", "allOf must be a non-empty array", ptr(path, "allOf"));
    }
    const rest = Object.fromEntries(
      Object.entries(s).filter(([k]) => k !== "allOf" && !ANNOTATIONS.has(k)),
    );
    const parts = [rest, ...s.allOf] as Schema[];
    return named(ctx, "all:" + JSON.stringify(parts), baseName(path), path, () => {
      const merged = parts.reduce((a, b) => merge(ctx, a, b, ptr(path, "allOf")), true as Schema);
      if (merged === false) {
        throw unsatisfiable("allOf", "allOf branches contradict each other", ptr(path, "allOf"));
      }
      return compile(ctx, merged, path);
    });
  }

  for (const kw of ["anyOf", "oneOf"] as const) {
    if (!(kw in s)) continue;
    const branches = s[kw];
    if (!Array.isArray(branches) || branches.length === 0) {
      err(kw, `${kw} must be a non-empty array`, ptr(path, kw));
    }
    const rest = Object.fromEntries(
      Object.entries(s).filter(([k]) => k !== kw && !ANNOTATIONS.has(k)),
    );
    const hasRest = Object.keys(rest).length > 0;
    const alts: Expr[] = [];
    let firstError: unknown;
    branches.forEach((b, i) => {
      try {
        alts.push(
          hasRest
            ? compile(ctx, { allOf: [rest, b] }, ptr(ptr(path, kw), i))
            : compile(ctx, b, ptr(ptr(path, kw), i)),
        );
      } catch (e) {
        // An impossible branch just drops out of the alternation; unsupported keywords do not.
        if (!isConstraintError(e) || !isUnsatisfiable(e)) throw e;
        firstError ??= e;
      }
    });
    const e = alt(...alts);
    if (e.k === "never") {
      throw firstError ?? constraintError(kw, `no ${kw} branch can match`, ptr(path, kw));
    }
    return e;
  }

  checkUnsupported(s, path);
  if ("enum" in s || "const" in s) return compileEnum(ctx, s, path);

  const types = typesOf(s, path);
  const alts: Expr[] = [];
  let firstError: unknown;
  for (const t of types) {
    try {
      alts.push(compileType(ctx, t, s, path));
    } catch (e) {
      if (!isConstraintError(e) || !isUnsatisfiable(e) || types.length === 1) throw e;
      firstError ??= e;
    }
  }
  const e = alt(...alts);
  if (e.k === "never") throw firstError ?? unsatisfiable("type", "no type is possible", path);
  return e;
}

const UNSAT = Symbol("unsatisfiable");

function unsatisfiable(keyword: string, message: string, path: string): Error {
  const e = constraintError(keyword, `${message}: no value can satisfy it`, path);
  (e as unknown as Record<symbol, boolean>)[UNSAT] = true;
  return e;
}

function isUnsatisfiable(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as Record<symbol, boolean>)[UNSAT] === true;
}

function typesOf(s: { [k: string]: Json }, path: string): JsonType[] {
  let types: JsonType[];
  if ("type" in s) {
    const raw = Array.isArray(s.type) ? s.type : [s.type];
    for (const t of raw) {
      if (
        typeof t !== "string" ||
        !["null", "boolean", "object", "array", "number", "integer", "string"].includes(t)
      ) {
        err("type", `unknown type ${JSON.stringify(t)}`, ptr(path, "type"));
      }
    }
    types = [...new Set(raw as JsonType[])];
    if (types.length === 0) throw unsatisfiable("type", "empty type list", ptr(path, "type"));
  } else {
    // An untyped schema accepts every type, but a model given `{"properties": ...}` should write
    // an object: narrow to the types the keywords talk about (still a subset of valid values).
    const implied = new Set(Object.keys(s).map((k) => TYPE_OF_KEYWORD[k]).filter(Boolean));
    types = implied.size ? ALL_TYPES.filter((t) => implied.has(t)) : ALL_TYPES;
  }
  if (types.includes("number")) types = types.filter((t) => t !== "integer");
  return types;
}

function relevant(s: { [k: string]: Json }, kw: string, path: string): boolean {
  const t = TYPE_OF_KEYWORD[kw];
  if (!t) return true;
  const types = typesOf(s, path);
  return types.includes(t) || (t === "number" && types.includes("integer"));
}

function checkUnsupported(s: { [k: string]: Json }, path: string): void {
  const always = ["not", "$dynamicRef", "$recursiveRef"];
  const typed = [
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "contains",
    "unevaluatedItems",
  ];
  for (const kw of always) if (kw in s) unsupported(kw, path);
  if ("if" in s && ("then" in s || "else" in s)) unsupported("if", path, "if/then/else");
  for (const kw of typed) if (kw in s && relevant(s, kw, path)) unsupported(kw, path);
  if (s.uniqueItems === true && relevant(s, "uniqueItems", path)) unsupported("uniqueItems", path);
  if ("multipleOf" in s && relevant(s, "multipleOf", path)) {
    // multipleOf 1 on integers says nothing new.
    const types = typesOf(s, path);
    if (!(s.multipleOf === 1 && !types.includes("number"))) unsupported("multipleOf", path);
  }
  if ("minProperties" in s && relevant(s, "minProperties", path)) {
    const required = Array.isArray(s.required) ? new Set(s.required).size : 0;
    if (!(typeof s.minProperties === "number" && s.minProperties <= required)) {
      unsupported(
        "minProperties",
        path,
        "only a minimum already implied by `required` is supported",
      );
    }
  }
  if ("maxProperties" in s && relevant(s, "maxProperties", path)) {
    const props = isObject(s.properties) ? Object.keys(s.properties) : [];
    const required = Array.isArray(s.required)
      ? s.required.filter((r) => typeof r === "string")
      : [];
    const possible = new Set([...props, ...required as string[]]).size;
    if (
      !(typeof s.maxProperties === "number" && s.additionalProperties === false &&
        possible <= s.maxProperties)
    ) {
      unsupported(
        "maxProperties",
        path,
        "only a maximum already implied by additionalProperties: false is supported",
      );
    }
  }
}

function typeMatches(v: Json, t: JsonType): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "boolean":
      return typeof v === "boolean";
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "integer":
      return typeof v === "number" && Number.isInteger(v);
    case "string":
      return typeof v === "string";
    case "array":
      return Array.isArray(v);
    case "object":
      return isObject(v);
  }
}

function compileEnum(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  let values: Json[];
  if ("enum" in s) {
    if (!Array.isArray(s.enum)) err("enum", "enum must be an array", ptr(path, "enum"));
    values = s.enum;
    if ("const" in s) values = values.filter((v) => canonical(v) === canonical(s.const));
  } else values = [s.const];
  if ("type" in s) {
    const types = typesOf(s, path);
    values = values.filter((v) => types.some((t) => typeMatches(v, t)));
  }
  // Other keywords filter the listed values; the simple ones are checked here directly.
  for (const k of validityKeys(s)) {
    if (["enum", "const", "type"].includes(k)) continue;
    const t = TYPE_OF_KEYWORD[k];
    const applies = (v: Json) => typeMatches(v, t) || (t === "number" && typeMatches(v, "integer"));
    if (t && !values.some(applies)) continue; // says nothing about any listed value
    const check = ENUM_CHECKS[k];
    if (!check) unsupported(k, path, "enum/const combined with this keyword");
    const bound = s[k];
    values = values.filter((v) => !applies(v) || check(v, bound));
  }
  const e = alt(...values.map((v) => constValue(ctx, v)));
  if (e.k === "never") {
    throw unsatisfiable(
      "enum" in s ? "enum" : "const",
      "no allowed value",
      ptr(path, "enum" in s ? "enum" : "const"),
    );
  }
  return e;
}

const codePoints = (v: Json) => Array.from(v as string).length;
// Keyword checks for `enum`/`const` values, each called only on values of the keyword's type.
const ENUM_CHECKS: Record<string, (v: Json, bound: Json) => boolean> = {
  minLength: (v, b) => codePoints(v) >= (b as number),
  maxLength: (v, b) => codePoints(v) <= (b as number),
  pattern: (v, b) => {
    try {
      return new RegExp(String(b), "u").test(v as string);
    } catch {
      throw constraintError("pattern", `invalid pattern ${JSON.stringify(b)}`);
    }
  },
  minimum: (v, b) => (v as number) >= (b as number),
  maximum: (v, b) => (v as number) <= (b as number),
  exclusiveMinimum: (v, b) => (v as number) > (b as number),
  exclusiveMaximum: (v, b) => (v as number) < (b as number),
  minItems: (v, b) => (v as Json[]).length >= (b as number),
  maxItems: (v, b) => (v as Json[]).length <= (b as number),
  required: (v, b) => Array.isArray(b) && b.every((k) => Object.hasOwn(v as object, String(k))),
};

// A fixed value, with the same whitespace freedom as everything else.
function constValue(ctx: Ctx, v: Json): Expr {
  if (Array.isArray(v) && v.length) {
    const w = ws(ctx);
    const items = v.map((x, i) => seq(i ? seq(lit(","), w) : EMPTY, constValue(ctx, x), w));
    return seq(lit("["), w, ...items, lit("]"));
  }
  if (isObject(v) && Object.keys(v).length) {
    const w = ws(ctx);
    const members = Object.entries(v).map(([k, x], i) =>
      seq(i ? seq(lit(","), w) : EMPTY, lit(canonical(k)), w, lit(":"), w, constValue(ctx, x), w)
    );
    return seq(lit("{"), w, ...members, lit("}"));
  }
  return lit(canonical(v));
}

function compileType(ctx: Ctx, t: JsonType, s: { [k: string]: Json }, path: string): Expr {
  switch (t) {
    case "null":
      return lit("null");
    case "boolean":
      return alt(lit("true"), lit("false"));
    case "integer":
    case "number":
      return compileNumber(ctx, t, s, path);
    case "string":
      return compileString(ctx, s, path);
    case "array":
      return compileArray(ctx, s, path);
    case "object":
      return compileObject(ctx, s, path);
  }
}

function numberKeyword(s: { [k: string]: Json }, kw: string, path: string): number | undefined {
  if (!(kw in s)) return undefined;
  const v = s[kw];
  if (typeof v !== "number" || !Number.isFinite(v)) {
    err(kw, `${kw} must be a finite number (draft-4 boolean form is not supported)`, ptr(path, kw));
  }
  return v;
}

function compileNumber(
  ctx: Ctx,
  t: "integer" | "number",
  s: { [k: string]: Json },
  path: string,
): Expr {
  const k = {
    minimum: numberKeyword(s, "minimum", path),
    maximum: numberKeyword(s, "maximum", path),
    exclusiveMinimum: numberKeyword(s, "exclusiveMinimum", path),
    exclusiveMaximum: numberKeyword(s, "exclusiveMaximum", path),
  };
  const { lo, hi } = inclusiveBounds(k);
  if (lo === undefined && hi === undefined) {
    return t === "integer" ? std(ctx, "integer", anyInteger) : std(ctx, "number", anyNumber);
  }
  const e = t === "integer"
    ? integerRange(
      lo === undefined ? null : BigInt(Math.ceil(lo)),
      hi === undefined ? null : BigInt(Math.floor(hi)),
    )
    : decimalRange(
      lo === undefined ? null : toDecimal(lo),
      hi === undefined ? null : toDecimal(hi),
    );
  if (e.k === "never") {
    const kw = k.minimum !== undefined ? "minimum" : "exclusiveMinimum";
    throw unsatisfiable(kw, `no ${t} lies within the bounds`, ptr(path, kw));
  }
  return e;
}

function lengthKeyword(s: { [k: string]: Json }, kw: string, path: string): number | undefined {
  if (!(kw in s)) return undefined;
  const v = s[kw];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    err(kw, `${kw} must be a non-negative integer`, ptr(path, kw));
  }
  return v;
}

function compileString(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  if (LARK_KEYWORD in s) return larkString(ctx, s, path);
  const minLength = lengthKeyword(s, "minLength", path) ?? 0;
  const maxLength = lengthKeyword(s, "maxLength", path) ?? Infinity;
  if (minLength > maxLength) {
    throw unsatisfiable("minLength", "minLength > maxLength", ptr(path, "minLength"));
  }
  let node: RegexNode | undefined;
  if ("format" in s) {
    const f = s.format;
    if (typeof f !== "string" || !(f in FORMATS)) {
      unsupported(
        "format",
        path,
        `format ${JSON.stringify(f)} (supported: ${Object.keys(FORMATS).join(", ")})`,
      );
    }
    if ("pattern" in s) unsupported("pattern", path, "pattern together with format");
    node = branchesToNode(parseRegex(FORMATS[f]), false);
  } else if ("pattern" in s) {
    if (typeof s.pattern !== "string") {
      err("pattern", "pattern must be a string", ptr(path, "pattern"));
    }
    try {
      node = branchesToNode(parseRegex(s.pattern), true);
    } catch (e) {
      if (!isConstraintError(e)) throw e;
      err("pattern", `${e.message} (${e.keyword})`, ptr(path, "pattern"));
    }
  }
  if (!node) {
    return seq(lit('"'), rep(stringChar(ctx), minLength, maxLength), lit('"'));
  }
  const kw = "format" in s ? "format" : "pattern";
  const len = regexLength(node);
  let body: Expr;
  if (minLength <= len.min && maxLength >= len.max) body = regexToExpr(node, jsonChar);
  else {
    const tight = lengthIntoRepetition(node, minLength, maxLength);
    try {
      body = tight
        ? regexToExpr(tight, jsonChar)
        : regexWithLength(ctx.g, node, minLength, maxLength, jsonChar, baseName(ptr(path, kw)));
    } catch (e) {
      if (!isConstraintError(e)) throw e;
      err(e.keyword, e.message, ptr(path, e.keyword));
    }
  }
  if (body.k === "never") {
    throw unsatisfiable(kw, `no string matches the ${kw} within the length bounds`, ptr(path, kw));
  }
  return seq(lit('"'), body, lit('"'));
}

/**
 * A string whose content is derived by a Lark grammar (Hearth's own keyword, set for a `custom`
 * tool's input by `lib/chat/responses.ts`): the grammar over the JSON-escaped characters.
 */
function larkString(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  const at = ptr(path, LARK_KEYWORD);
  if (typeof s[LARK_KEYWORD] !== "string") err(LARK_KEYWORD, "must be a Lark grammar", at);
  for (const kw of ["minLength", "maxLength", "pattern", "format"]) {
    if (kw in s) unsupported(kw, path, `${kw} together with ${LARK_KEYWORD}`);
  }
  try {
    const body = larkExpr(ctx.g, s[LARK_KEYWORD] as string, jsonChar, baseName(at));
    return seq(lit('"'), body, lit('"'));
  } catch (e) {
    if (!isConstraintError(e)) throw e;
    err(e.keyword, e.message, at);
  }
}

/**
 * The common shape `fixed parts + one [set]{a,b} + fixed parts` (`^\d+$`, `^[A-Z]{2}-\w*$`)
 * takes a length bound by adjusting that one repetition; anything else returns undefined.
 */
function lengthIntoRepetition(node: RegexNode, min: number, max: number): RegexNode | undefined {
  const flat = (n: RegexNode): RegexNode[] | undefined => {
    if (n.t === "seq") {
      const out: RegexNode[] = [];
      for (const x of n.items) {
        const f = flat(x);
        if (!f) return undefined;
        out.push(...f);
      }
      return out;
    }
    if (n.t === "alt") return n.alts.length === 1 ? flat(n.alts[0]) : [n];
    return [n];
  };
  const items = flat(node);
  if (!items) return undefined;
  let fixed = 0;
  let at = -1;
  for (const [i, x] of items.entries()) {
    const l = regexLength(x);
    if (l.min === l.max) fixed += l.min;
    else if (at === -1 && x.t === "rep" && x.node.t === "chars") at = i;
    else return undefined;
  }
  if (at === -1) return undefined;
  const r = items[at] as Extract<RegexNode, { t: "rep" }>;
  const lo = Math.max(r.min, min - fixed);
  const hi = Math.min(r.max, max - fixed);
  if (lo > hi) return { t: "chars", set: [] };
  return { t: "seq", items: items.map((x, i) => (i === at ? { ...r, min: lo, max: hi } : x)) };
}

function compileArray(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  let prefix: Schema[] = [];
  let prefixPath = ptr(path, "prefixItems");
  let rest: Schema = true;
  let restPath = ptr(path, "items");
  if ("prefixItems" in s) {
    if (!Array.isArray(s.prefixItems)) {
      err("prefixItems", "prefixItems must be an array", prefixPath);
    }
    prefix = s.prefixItems as Schema[];
    if ("items" in s) rest = s.items as Schema;
  } else if (Array.isArray(s.items)) {
    // Draft 2019-09 and older: array-form items is a tuple, additionalItems the rest.
    prefix = s.items as Schema[];
    prefixPath = restPath;
    if ("additionalItems" in s) {
      rest = s.additionalItems as Schema, restPath = ptr(path, "additionalItems");
    }
  } else if ("items" in s) rest = s.items as Schema;
  const minItems = lengthKeyword(s, "minItems", path) ?? 0;
  let maxItems = lengthKeyword(s, "maxItems", path) ?? Infinity;
  // An item that cannot exist caps the length (JSON Schema allows shorter arrays).
  const prefixValues: Expr[] = [];
  for (let i = 0; i < prefix.length && i < maxItems; i++) {
    const v = childOrNever(ctx, prefix[i], ptr(prefixPath, i));
    if (v.k === "never") maxItems = i;
    else prefixValues.push(v);
  }
  const restValue = maxItems > prefix.length ? childOrNever(ctx, rest, restPath) : NEVER;
  if (restValue.k === "never") maxItems = Math.min(maxItems, prefix.length);
  if (minItems > maxItems) {
    throw unsatisfiable(
      "minItems",
      "minItems exceeds the items the array may hold",
      ptr(path, "minItems"),
    );
  }

  const w = ws(ctx);
  const item = (i: number, v: Expr) => i === 0 ? seq(v, w) : seq(lit(","), w, v, w);
  const tail = (i: number): Expr => {
    if (i < prefixValues.length && i < maxItems) {
      const after = tail(i + 1);
      // A named rule now and then keeps long tuples from nesting parentheses without end.
      const rest = i % NEST === NEST - 1
        ? ruleRef(ctx.g, `${baseName(path)}-from-${i + 1}`, after)
        : after;
      return alt(i >= minItems ? EMPTY : NEVER, seq(item(i, prefixValues[i]), rest));
    }
    const lo = Math.max(0, minItems - i);
    const hi = maxItems - i;
    if (hi === 0) return EMPTY;
    if (i > 0) return rep(item(1, restValue), lo, hi);
    const more = rep(item(1, restValue), Math.max(0, lo - 1), hi - 1);
    return lo === 0 ? opt(seq(item(0, restValue), more)) : seq(item(0, restValue), more);
  };
  return seq(lit("["), w, tail(0), lit("]"));
}

function compileObject(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  const propsPath = ptr(path, "properties");
  if ("properties" in s && !isObject(s.properties)) {
    err("properties", "properties must be an object", propsPath);
  }
  const props = (s.properties ?? {}) as { [k: string]: Json };
  if (
    "required" in s &&
    !(Array.isArray(s.required) && s.required.every((r) => typeof r === "string"))
  ) {
    err("required", "required must be an array of strings", ptr(path, "required"));
  }
  const required = new Set((s.required ?? []) as string[]);
  // Without `additionalProperties`, an object that declares `properties` admits only those, as
  // llama.cpp's and xgrammar's converters do: otherwise a forced call of a tool made from a zod
  // shape (which leaves the keyword out) may invent keys for ever and never close.
  const additional: Schema = "additionalProperties" in s
    ? s.additionalProperties as Schema
    : !("properties" in s);
  const addPath = ptr(path, "additionalProperties");

  // An additionalProperties schema nothing satisfies is the same as false.
  const extraValue = additional === false ? NEVER : childOrNever(ctx, additional, addPath);

  // Properties in schema order, then required names that only additionalProperties covers.
  // A property whose schema nothing satisfies may only be absent.
  const list: { name: string; value: Expr; required: boolean }[] = [];
  for (const [name, schema] of Object.entries(props)) {
    const value = childOrNever(ctx, schema, ptr(propsPath, name));
    if (value.k === "never") {
      if (required.has(name)) {
        throw unsatisfiable(
          "required",
          `required property "${name}" has a schema no value satisfies`,
          ptr(path, "required"),
        );
      }
      continue;
    }
    list.push({ name, value, required: required.has(name) });
  }
  for (const name of required) {
    if (Object.hasOwn(props, name)) continue;
    if (extraValue.k === "never") {
      throw unsatisfiable(
        "required",
        `required property "${name}" is not allowed by additionalProperties`,
        ptr(path, "required"),
      );
    }
    list.push({ name, value: extraValue, required: true });
  }

  const w = ws(ctx);
  const kv = (p: (typeof list)[number]) => seq(lit(canonical(p.name)), w, lit(":"), w, p.value, w);
  const next = (kvExpr: Expr) => seq(lit(","), w, kvExpr);

  // Extra keys are any string except the listed names, so a value cannot dodge its schema by
  // reusing a name.
  let extraFirst: Expr = EMPTY;
  let extraRest: Expr = EMPTY;
  if (extraValue.k !== "never") {
    const known = Object.keys(props).concat([...required]);
    const key = known.length ? seq(lit('"'), keyExcept(ctx, known), lit('"')) : anyString(ctx);
    const extra = seq(key, w, lit(":"), w, extraValue, w);
    extraRest = ruleRef(ctx.g, `${baseName(path)}-extra`, rep(next(extra), 0, Infinity));
    extraFirst = opt(seq(extra, extraRest));
  }

  // rest: properties i.. after something was written (each needs a comma); firstE: the same
  // before anything was written. first_i is only reachable when every property before i is
  // optional, and then rest_{i+1} has two users: it becomes a rule so the size stays linear.
  let rest = extraRest;
  let firstE = extraFirst;
  let nested = 0;
  const leadingOptional = list.findIndex((p) => p.required) === -1
    ? list.length
    : list.findIndex((p) => p.required);
  for (let i = list.length - 1; i >= 0; i--) {
    const p = list[i];
    const k = kv(p);
    const shared = i >= 1 && i <= leadingOptional && rest.k !== "ref" && !isEmptyExpr(rest);
    const r = shared ? ruleRef(ctx.g, `${baseName(path)}-from-${i + 1}`, rest) : rest;
    if (!p.required && ++nested % NEST === 0) {
      firstE = ruleRef(ctx.g, `${baseName(path)}-first-${i + 1}`, firstE);
    }
    firstE = p.required ? seq(k, r) : alt(seq(k, r), firstE);
    rest = p.required ? seq(next(k), r) : seq(opt(next(k)), r);
  }
  return seq(lit("{"), w, firstE, lit("}"));
}

// Keys that are none of `names`: a trie of the names walked in parallel with the key. Each
// character has one spelling (jsonChar), so "not this name" is decidable on the text.
function keyExcept(ctx: Ctx, names: string[]): Expr {
  type Node = { end: boolean; kids: Map<number, Node> };
  const rootNode: Node = { end: false, kids: new Map() };
  for (const name of names) {
    let n = rootNode;
    for (const ch of name) {
      const c = ch.codePointAt(0)!;
      let k = n.kids.get(c);
      if (!k) n.kids.set(c, k = { end: false, kids: new Map() });
      n = k;
    }
    n.end = true;
  }
  const anyChar = std(ctx, "key-char", () => jsonChar(ANY_CHAR));
  const anyRest = rep(anyChar, 0, Infinity);
  const walk = (n: Node, depth: number): Expr => {
    const e = alt(
      n.end ? NEVER : EMPTY,
      ...[...n.kids].map(([c, k]) => seq(jsonChar(charSet(c)), walk(k, depth + 1))),
      seq(jsonChar(subtractSets(ANY_CHAR, charSet(...n.kids.keys()))), anyRest),
    );
    return depth % NEST === NEST - 1 ? ruleRef(ctx.g, "key", e) : e;
  };
  return walk(rootNode, 0);
}

// ---------------------------------------------------------------- allOf merging

function withoutAnnotations(s: { [k: string]: Json }): { [k: string]: Json } {
  return Object.fromEntries(Object.entries(s).filter(([k]) => !ANNOTATIONS.has(k)));
}

function and(a: Schema, b: Schema): Schema {
  if (a === true) return b;
  if (b === true) return a;
  if (a === false || b === false) return false;
  if (Object.keys(withoutAnnotations(a)).length === 0) return b;
  if (Object.keys(withoutAnnotations(b)).length === 0) return a;
  return { allOf: [a, b] };
}

/** One schema equivalent to `a` and `b` both holding, or a ConstraintError. */
function merge(ctx: Ctx, a: Schema, b: Schema, path: string, depth = 0): Schema {
  if (a === true) return b === true ? true : expand(ctx, b, path, depth);
  if (b === true) return expand(ctx, a, path, depth);
  if (a === false || b === false) return false;
  if (depth > 32) err("allOf", "allOf/$ref nesting too deep to merge", path);
  const x = expand(ctx, a, path, depth);
  const y = expand(ctx, b, path, depth);
  if (x === false || y === false) return false;
  if (x === true) return y;
  if (y === true) return x;
  const out: { [k: string]: Json } = {};
  const keys = [...new Set([...Object.keys(x), ...Object.keys(y)])];
  const both = (k: string) => k in x && k in y;
  const pick = (k: string) => (k in x ? x[k] : y[k]);
  for (const k of keys) {
    if (ANNOTATIONS.has(k)) continue;
    if (!both(k)) {
      if (
        ["properties", "additionalProperties", "items", "prefixItems", "additionalItems"].includes(
          k,
        )
      ) continue;
      out[k] = pick(k);
      continue;
    }
    const u = x[k];
    const v = y[k];
    switch (k) {
      case "type": {
        const tu = typesOf(x, path);
        const tv = typesOf(y, path);
        const meet = new Set<JsonType>();
        for (const t of tu) {
          if (tv.includes(t)) meet.add(t);
          else if (t === "integer" && tv.includes("number")) meet.add("integer");
          else if (t === "number" && tv.includes("integer")) meet.add("integer");
        }
        if (meet.size === 0) return false;
        out.type = [...meet];
        break;
      }
      case "enum": {
        if (!Array.isArray(u) || !Array.isArray(v)) err("enum", "enum must be an array", path);
        const keep = new Set(v.map(canonical));
        out.enum = u.filter((e) => keep.has(canonical(e)));
        break;
      }
      case "const":
        if (canonical(u) !== canonical(v)) return false;
        out.const = u;
        break;
      case "required":
        if (!Array.isArray(u) || !Array.isArray(v)) err(k, "required must be an array", path);
        out.required = [...new Set([...u, ...v])];
        break;
      case "minimum":
      case "exclusiveMinimum":
      case "minLength":
      case "minItems":
      case "minProperties":
        out[k] = Math.max(u as number, v as number);
        break;
      case "maximum":
      case "exclusiveMaximum":
      case "maxLength":
      case "maxItems":
      case "maxProperties":
        out[k] = Math.min(u as number, v as number);
        break;
      case "anyOf":
      case "oneOf": {
        if (!Array.isArray(u) || !Array.isArray(v)) err(k, `${k} must be an array`, path);
        const us = u as Schema[];
        const vs = v as Schema[];
        if (us.length * vs.length > MAX_BRANCHES) {
          err(k, `allOf of two ${k} lists has too many combinations`, path);
        }
        // oneOf is compiled as alternation, so crossing it is the same treatment.
        out[k] = us.flatMap((p) => vs.map((q) => and(p, q))) as Json[];
        break;
      }
      default:
        if (canonical(u) !== canonical(v)) {
          if (k === "pattern" || k === "format") {
            unsupported(k, path, `allOf with two different ${k}s`);
          }
          // Unsupported keywords are reported when the merged schema is compiled.
          out[k] = u;
        } else out[k] = u;
    }
  }
  mergeObjects(x, y, out);
  mergeArrays(x, y, out);
  return out;
}

// Resolves a top-level $ref and flattens a nested allOf so merge sees plain keywords.
function expand(ctx: Ctx, s: Schema, path: string, depth: number): Schema {
  if (typeof s === "boolean") return s;
  if (!isObject(s)) err("schema", "a schema must be an object or a boolean", path);
  let out: Schema = s;
  if ("$ref" in s) {
    const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref"));
    const target = resolvePointer(ctx, String(s.$ref), path);
    out = merge(ctx, target.schema, rest, path, depth + 1);
  }
  if (typeof out !== "boolean" && "allOf" in out) {
    const rest = Object.fromEntries(Object.entries(out).filter(([k]) => k !== "allOf"));
    if (!Array.isArray(out.allOf)) err("allOf", "allOf must be an array", path);
    out = (out.allOf as Schema[]).reduce(
      (acc, b) => merge(ctx, acc, b, path, depth + 1),
      rest as Schema,
    );
  }
  return out;
}

function mergeObjects(
  x: { [k: string]: Json },
  y: { [k: string]: Json },
  out: { [k: string]: Json },
): void {
  const touches = (s: { [k: string]: Json }) => "properties" in s || "additionalProperties" in s;
  if (!touches(x) && !touches(y)) return;
  const px = (x.properties ?? {}) as { [k: string]: Json };
  const py = (y.properties ?? {}) as { [k: string]: Json };
  const ax = ("additionalProperties" in x ? x.additionalProperties : true) as Schema;
  const ay = ("additionalProperties" in y ? y.additionalProperties : true) as Schema;
  const props: { [k: string]: Json } = {};
  for (const name of new Set([...Object.keys(px), ...Object.keys(py)])) {
    const sx = (Object.hasOwn(px, name) ? px[name] : ax) as Schema;
    const sy = (Object.hasOwn(py, name) ? py[name] : ay) as Schema;
    props[name] = and(sx, sy) as Json;
  }
  if (Object.keys(props).length) out.properties = props;
  const add = and(ax, ay);
  if (add !== true) out.additionalProperties = add as Json;
}

function mergeArrays(
  x: { [k: string]: Json },
  y: { [k: string]: Json },
  out: { [k: string]: Json },
): void {
  const shape = (s: { [k: string]: Json }) => {
    if ("prefixItems" in s) {
      return { prefix: s.prefixItems as Schema[], rest: ("items" in s ? s.items : true) as Schema };
    }
    if (Array.isArray(s.items)) {
      return {
        prefix: s.items as Schema[],
        rest: ("additionalItems" in s ? s.additionalItems : true) as Schema,
      };
    }
    return { prefix: [] as Schema[], rest: ("items" in s ? s.items : true) as Schema };
  };
  const touches = (s: { [k: string]: Json }) =>
    "prefixItems" in s || "items" in s || "additionalItems" in s;
  if (!touches(x) && !touches(y)) return;
  const sx = shape(x);
  const sy = shape(y);
  const n = Math.max(sx.prefix.length, sy.prefix.length);
  const prefix: Schema[] = [];
  for (let i = 0; i < n; i++) prefix.push(and(sx.prefix[i] ?? sx.rest, sy.prefix[i] ?? sy.rest));
  if (n) out.prefixItems = prefix as Json[];
  const rest = and(sx.rest, sy.rest);
  if (rest !== true) out.items = rest as Json;
}

// ---------------------------------------------------------------- schema sets

/** Several schemas compiled into one grammar (a tool-call grammar has one per tool). */
export type SchemaSet = {
  /** The shared rule set; render it with `render(g, root)` from `gbnf.ts`. */
  g: Grammar;
  /**
   * An expression (a rule reference named after `baseName`) matching JSON texts valid under the
   * schema found at `pointer` (default `#`, the whole document) inside `schema`; `$ref`s resolve
   * against `schema`. Throws a ConstraintError for what {@link jsonSchemaToGbnf} refuses.
   */
  compile(schema: unknown, baseName: string, pointer?: string): Expr;
  /** A rule reference matching any JSON value (for schemaless parameters). */
  anyValue(): Expr;
};

/**
 * A {@link SchemaSet}: the standard rules (`ws`, `string`, `value`, ...) are shared, while each
 * compiled schema gets its own `$ref` map, so `#/$defs/x` of two tools never collide.
 *
 * @example
 * ```ts
 * import { newSchemaSet } from "./json_schema.ts";
 * import { alt, render } from "./gbnf.ts";
 * const set = newSchemaSet();
 * const a = set.compile({ type: "object", properties: { q: { type: "string" } } }, "search");
 * const b = set.compile({ type: "object", properties: { n: { type: "integer" } } }, "count");
 * render(set.g, alt(a, b));
 * ```
 */
export function newSchemaSet(): SchemaSet {
  const g = newGrammar();
  const stdRules = new Map<string, Expr>();
  const ctxFor = (root: unknown): Ctx => ({
    root: root as Json,
    g,
    named: new Map(),
    unguarded: [],
    std: stdRules,
    failed: new Map(),
    depth: 0,
  });
  return {
    g,
    compile(schema, base, pointer = "#") {
      const ctx = ctxFor(schema);
      const target = pointer === "#"
        ? { key: "#", schema: schema as Schema }
        : resolvePointer(ctx, pointer, pointer);
      const e = compile(ctx, target.schema, target.key);
      return e.k === "ref" ? e : ruleRef(g, base, e);
    },
    anyValue: () => anyValue(ctxFor({})),
  };
}
