/**
 * JSON Schema (2020-12, plus `definitions`, array-form `items` and draft-04 boolean exclusive
 * bounds from older drafts) to a GBNF grammar for values written in a {@link Notation}: JSON text,
 * Gemma 4's argument notation, or a tagged family's raw string. Every text the grammar accepts is
 * valid under the schema; the grammar picks one spelling where the notation allows several
 * (compact or lightly indented whitespace, properties in schema order with extra keys last, plain
 * decimals, a single escape per character in patterned strings).
 *
 * Enforced: `type` (incl. arrays of types), `enum` (long ones as a trie), `const`, `properties`,
 * `required`, `additionalProperties`, `items`, `prefixItems`, `minItems`, `maxItems`, numeric
 * bounds (exact), `multipleOf` on integers, `minLength`, `maxLength`, `pattern`, `format` (the
 * regexes of `schema_formats.ts`), `anyOf`, `oneOf` (as alternation), `allOf` (merged), `$ref`
 * inside the document (pointers, anchors; recursion works), boolean schemas.
 *
 * What the grammar cannot hold is either an error (strict mode: `jsonSchemaToGbnf`, structured
 * outputs, where the output must always satisfy the schema) or, when the caller passes a
 * {@link RelaxSink} (tool calls, which must never be refused for a hard schema), a
 * {@link Relaxation} naming the keyword by its JSON pointer, while everything else is still
 * enforced: `checked` ones (`uniqueItems`, `not`, `if`, a pattern the grammar cannot read, a length
 * too large to count beside a pattern, ...) are validated on the finished value, the others (an
 * unknown `format`, a `$ref` outside the document) cannot be enforced at all.
 *
 * @example
 * ```ts
 * import { jsonSchemaToGbnf, newSchemaSet } from "./json_schema.ts";
 * const gbnf = jsonSchemaToGbnf({
 *   type: "object",
 *   properties: { name: { type: "string" }, age: { type: "integer", minimum: 0, maximum: 150 } },
 *   required: ["name"],
 *   additionalProperties: false,
 * });
 * const relaxed: import("./json_schema.ts").Relaxation[] = [];
 * const set = newSchemaSet();
 * set.compile({ type: "array", uniqueItems: true }, "tags", "#", { relax: (r) => relaxed.push(r) });
 * // relaxed: [{ pointer: "#/uniqueItems", keyword: "uniqueItems", checked: true, ... }]
 * ```
 * @module
 */
import { constraintError, isConstraintError } from "./error.ts";
import {
  alt,
  ANY_CHAR,
  charSet,
  cls,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  isEmpty as isEmptyExpr,
  lit,
  NEVER,
  newGrammar,
  opt,
  ref,
  render,
  rep,
  reserve,
  ruleRef,
  seq,
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
  regexProduct,
  regexToExpr,
} from "./regex.ts";
import { LARK_KEYWORD, larkExpr } from "./lark.ts";
import { jsonNotation, jsonTextChar, type Notation } from "./notation.ts";
import { FORMATS, FREE_FORMATS, NUMBER_FORMATS } from "./schema_formats.ts";
import { isRefProblem, resolveRef } from "./schema_refs.ts";
import { type JsonType, mergeAll, type MergeHooks } from "./schema_merge.ts";
import { literalTrie } from "./text_without.ts";
import { multiplesOf } from "./multiples.ts";

export { FORMATS } from "./schema_formats.ts";
export { jsonChar } from "./notation.ts";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = boolean | { [k: string]: Json };

/** A keyword the grammar does not enforce, by its JSON pointer inside the schema. */
export type Relaxation = {
  pointer: string;
  keyword: string;
  why: string;
  /** Validated on the finished value instead (false: not enforced at all). */
  checked: boolean;
};

/** Receives relaxations; without one, the compiler throws where it would relax. */
export type RelaxSink = (r: Relaxation) => void;

const ALL_TYPES: JsonType[] = ["object", "array", "string", "number", "boolean", "null"];
const NOT_NULL: JsonType[] = ["object", "array", "string", "number", "boolean"];

// Keywords that only describe; they never change which instances are valid.
export const ANNOTATIONS: ReadonlySet<string> = new Set([
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
  minimum: "number",
  maximum: "number",
  exclusiveMinimum: "number",
  exclusiveMaximum: "number",
  multipleOf: "number",
};

// Work bounds for user-controlled blow-ups.
const MAX_DEPTH = 200;
// Inline nesting (parentheses in one rule) allowed before a named rule takes over; llama.cpp's
// parser recurses once per parenthesis.
const NEST = 8;
const MAX_WS_INDENT = 20;
/** Enums longer than this are written as a trie of their texts. */
const TRIE_FROM = 16;

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
  notation: Notation;
  relax?: RelaxSink;
};

function newCtx(root: unknown, g: Grammar, std: Map<string, Expr>, opts: CompileOptions): Ctx {
  return {
    root: root as Json,
    g,
    named: new Map(),
    unguarded: [],
    std,
    failed: new Map(),
    depth: 0,
    notation: opts.notation ?? jsonNotation,
    relax: opts.relax,
  };
}

/** A grammar whose root matches JSON texts valid under `schema` (strict: refuses what it cannot enforce). */
export function jsonSchemaToGbnf(schema: unknown): string {
  const ctx = newCtx(schema, newGrammar(), new Map(), {});
  return render(ctx.g, compile(ctx, schema, "#"));
}

/** A grammar for any JSON object (for `response_format: json_object`). */
export function jsonObjectGbnf(): string {
  const ctx = newCtx({}, newGrammar(), new Map(), {});
  anyValue(ctx);
  return render(ctx.g, ctx.std.get("json:object")!);
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

/**
 * A keyword the grammar will not enforce at `path`: strict mode throws (naming it), relaxed mode
 * records it and the caller carries on without it.
 */
function relax(ctx: Ctx, keyword: string, path: string, why: string, checked = true): void {
  if (!ctx.relax) {
    err(
      keyword,
      `unsupported JSON Schema keyword "${keyword}"${why ? `: ${why}` : ""}`,
      ptr(path, keyword),
    );
  }
  ctx.relax({ pointer: ptr(path, keyword), keyword, why, checked });
}

/** A malformed keyword: an error in strict mode, ignored (and named, unenforced) when relaxing. */
function malformed(ctx: Ctx, keyword: string, message: string, at: string): void {
  if (!ctx.relax) err(keyword, message, at);
  ctx.relax({ pointer: at, keyword, why: message, checked: false });
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

/** A standard rule (`ws`, `string`, `value`, ...) of the notation, created on first use. */
function std(ctx: Ctx, name: string, build: () => Expr): Expr {
  const key = `${ctx.notation.id}:${name}`;
  const have = ctx.std.get(key);
  if (have) return have;
  const r = ref(reserve(ctx.g, ctx.notation.id === "json" ? name : `${ctx.notation.id}-${name}`));
  ctx.std.set(key, r);
  define(ctx.g, r.name, build());
  return r;
}

function ws(ctx: Ctx): Expr {
  if (!ctx.notation.layout) return EMPTY;
  // One space, or a newline and bounded indentation: enough for compact and pretty-printed JSON,
  // and no whitespace loop a model could get stuck in.
  return std(
    ctx,
    "ws",
    () => alt(EMPTY, lit(" "), seq(lit("\n"), rep(cls(charSet(" \t")), 0, MAX_WS_INDENT))),
  );
}

/** The content of any string, every spelling the notation allows. */
function anyText(ctx: Ctx): Expr {
  if (ctx.notation.id === "json") {
    return rep(std(ctx, "char", jsonTextChar), 0, Infinity);
  }
  return std(ctx, "text", () => ctx.notation.text(ctx.g));
}

function anyString(ctx: Ctx): Expr {
  const q = lit(ctx.notation.quote);
  return std(ctx, "string", () => seq(q, anyText(ctx), q));
}

function anyValue(ctx: Ctx): Expr {
  const key = `${ctx.notation.id}:value`;
  const have = ctx.std.get(key);
  if (have) return have;
  const n = ctx.notation;
  const value = ref(reserve(ctx.g, n.id === "json" ? "value" : `${n.id}-value`));
  ctx.std.set(key, value);
  if (n.anyValue) {
    define(ctx.g, value.name, n.anyValue(ctx.g));
    return value;
  }
  const w = ws(ctx);
  const str = anyString(ctx);
  const name = n.id === "json"
    ? str
    : seq(lit(n.keyQuote), rep(n.keyChar(ANY_CHAR), 1, 64), lit(n.keyQuote));
  const member = n.object.member(name, value, w);
  const { open, close, sep } = n.object;
  const object = std(
    ctx,
    "object",
    () =>
      seq(lit(open), w, opt(seq(member, rep(seq(lit(sep), w, member), 0, Infinity))), lit(close)),
  );
  const item = n.array.item(value, w);
  const a = n.array;
  const array = std(
    ctx,
    "array",
    () =>
      seq(lit(a.open), w, opt(seq(item, rep(seq(lit(a.sep), w, item), 0, Infinity))), lit(a.close)),
  );
  const number = std(ctx, "number", anyNumber);
  define(
    ctx.g,
    value.name,
    alt(object, array, str, number, lit("true"), lit("false"), lit("null")),
  );
  return value;
}

/** Any object (the fallback for a tool's arguments whose schema had to be given up). */
function anyObject(ctx: Ctx): Expr {
  anyValue(ctx);
  return ctx.std.get(`${ctx.notation.id}:object`)!;
}

// ---------------------------------------------------------------- $ref

function resolve(ctx: Ctx, refText: string, path: string): { key: string; schema: Schema } {
  const r = resolveRef(ctx.root, refText);
  if (isRefProblem(r)) err("$ref", r.problem, path);
  return r;
}

/** A rule compiled once per key; recursion through containers is fine, a bare cycle is not. */
function named(ctx: Ctx, key: string, base: string, path: string, build: () => Expr): Expr {
  const failed = ctx.failed.get(key);
  if (failed) throw failed;
  const have = ctx.named.get(key);
  if (have) {
    if (ctx.unguarded.includes(key)) {
      if (!ctx.relax) err("$ref", "reference cycle that reads no input (left recursion)", path);
      relax(ctx, "$ref", path.replace(/\/\$ref$/, ""), "a reference cycle that reads no input");
      return anyValue(ctx);
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
  if (body.k === "never") {
    throw unsatisfiable("schema", "no JSON value satisfies this schema", path);
  }
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

function compile(ctx: Ctx, schema: unknown, path: string): Expr {
  if (ctx.depth + 1 > MAX_DEPTH) {
    if (!ctx.relax) err("schema", `schema nested deeper than ${MAX_DEPTH}`, path);
    ctx.relax({
      pointer: path,
      keyword: "schema",
      why: `nested deeper than ${MAX_DEPTH}`,
      checked: true,
    });
    return anyValue(ctx);
  }
  ctx.depth++;
  try {
    return compileSchema(ctx, schema, path);
  } finally {
    ctx.depth--;
  }
}

function without(s: { [k: string]: Json }, drop: (k: string) => boolean): { [k: string]: Json } {
  return Object.fromEntries(Object.entries(s).filter(([k]) => !drop(k)));
}

function compileSchema(ctx: Ctx, schema: unknown, path: string): Expr {
  if (schema === true) return anyValue(ctx);
  if (schema === false) throw unsatisfiable("false", "schema `false` matches no value", path);
  if (!isObject(schema)) {
    if (!ctx.relax) {
      err("schema", `a schema must be an object or a boolean, got ${JSON.stringify(schema)}`, path);
    }
    ctx.relax({ pointer: path, keyword: "schema", why: "not a schema", checked: false });
    return anyValue(ctx);
  }
  let s = schema;

  if ("$ref" in s) {
    const rest = without(s, (k) => k === "$ref" || ANNOTATIONS.has(k));
    const refPath = ptr(path, "$ref");
    const target = typeof s.$ref === "string" ? resolveRef(ctx.root, s.$ref) : undefined;
    if (!target || isRefProblem(target)) {
      const why = target ? target.problem : "$ref must be a string";
      if (!ctx.relax) err("$ref", why, refPath);
      ctx.relax({ pointer: refPath, keyword: "$ref", why, checked: false });
      return Object.keys(rest).length ? compile(ctx, rest, path) : anyValue(ctx);
    }
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
      malformed(ctx, "allOf", "allOf must be a non-empty array", ptr(path, "allOf"));
      return compile(ctx, without(s, (k) => k === "allOf"), path);
    }
    const parts = [without(s, (k) => k === "allOf" || ANNOTATIONS.has(k)), ...s.allOf] as Schema[];
    return named(ctx, "all:" + JSON.stringify(parts), baseName(path), path, () => {
      const merged = mergeAll(mergeHooks(ctx), parts, ptr(path, "allOf"));
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
      malformed(ctx, kw, `${kw} must be a non-empty array`, ptr(path, kw));
      return compile(ctx, without(s, (k) => k === kw), path);
    }
    const rest = without(s, (k) => k === kw || ANNOTATIONS.has(k));
    const hasRest = Object.keys(rest).length > 0;
    const alts: Expr[] = [];
    let firstError: unknown;
    // A notation whose parser reads any value a string is allowed for as text writes only the
    // string branches of such a union.
    const textual = ctx.notation.unionsAsText && branches.some((b) => isStringBranch(ctx, b));
    branches.forEach((b, i) => {
      if (textual && !isStringBranch(ctx, b)) return;
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
    // Alternation is oneOf only where no value can match two branches.
    if (kw === "oneOf" && ctx.relax && alts.length > 1 && !disjoint(ctx, branches as Schema[])) {
      relax(ctx, "oneOf", path, "branches that may overlap are checked on the finished value");
    }
    return e;
  }

  s = dropUnsupported(ctx, s, path);
  if ("enum" in s || "const" in s) return compileEnum(ctx, s, path);

  let types = typesOf(ctx, s, path);
  if (ctx.notation.unionsAsText && types.includes("string") && "type" in s) types = ["string"];
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

function mergeHooks(ctx: Ctx): MergeHooks {
  return {
    resolve: (r, path) => resolve(ctx, r, path).schema,
    typesOf: (s, path) => typesOf(ctx, s, path),
    fail: err,
    unsupported: (kw, path, why) => relax(ctx, kw, path, why),
    annotations: ANNOTATIONS,
  };
}

/** A branch (through `$ref`s) whose `type` names strings, or whose values are all strings. */
function isStringBranch(ctx: Ctx, b: unknown): boolean {
  for (let i = 0; i < 8 && isObject(b) && typeof b.$ref === "string"; i++) {
    const r = resolveRef(ctx.root, b.$ref);
    if (isRefProblem(r)) return false;
    b = r.schema;
  }
  if (!isObject(b)) return false;
  const t = b.type;
  if (t === "string" || (Array.isArray(t) && t.includes("string"))) return true;
  return Array.isArray(b.enum) && b.enum.some((v) => typeof v === "string");
}

/** Whether no value can match two of `branches`: their types differ, or a `const` tells them apart. */
function disjoint(ctx: Ctx, branches: Schema[]): boolean {
  const deref = (b: Schema): Schema => {
    for (let i = 0; i < 8 && isObject(b) && typeof b.$ref === "string"; i++) {
      const r = resolveRef(ctx.root, b.$ref);
      if (isRefProblem(r)) return b;
      b = r.schema;
    }
    return b;
  };
  const shapes = branches.map(deref);
  if (!shapes.every(isObject)) return false;
  const objs = shapes as { [k: string]: Json }[];
  // Distinct single types (integer counts as number).
  const kind = (s: { [k: string]: Json }) =>
    typeof s.type === "string" ? (s.type === "integer" ? "number" : s.type) : undefined;
  const kinds = objs.map(kind);
  if (kinds.every((k) => k) && new Set(kinds).size === kinds.length) return true;
  // Distinct constants of the whole value, or of one required discriminator property.
  const consts = objs.map((s) => ("const" in s ? JSON.stringify(s.const) : undefined));
  if (consts.every((c) => c !== undefined) && new Set(consts).size === consts.length) return true;
  const first = objs[0].properties;
  if (!isObject(first)) return false;
  for (const [name] of Object.entries(first)) {
    const tags = objs.map((s) => {
      const p = isObject(s.properties) ? deref(s.properties[name] as Schema) : undefined;
      const req = Array.isArray(s.required) && s.required.includes(name);
      return req && isObject(p) && "const" in p ? JSON.stringify(p.const) : undefined;
    });
    if (tags.every((t) => t !== undefined) && new Set(tags).size === tags.length) return true;
  }
  return false;
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

function typesOf(ctx: Ctx, s: { [k: string]: Json }, path: string): JsonType[] {
  let types: JsonType[];
  if ("type" in s) {
    const raw = Array.isArray(s.type) ? s.type : [s.type];
    const known = raw.filter((t): t is JsonType =>
      typeof t === "string" &&
      ["null", "boolean", "object", "array", "number", "integer", "string"].includes(t)
    );
    if (known.length < raw.length) {
      const bad = raw.find((t) => !known.includes(t as JsonType));
      malformed(ctx, "type", `unknown type ${JSON.stringify(bad)}`, ptr(path, "type"));
      if (known.length === 0) return ALL_TYPES;
    }
    types = [...new Set(known)];
    if (types.length === 0) throw unsatisfiable("type", "empty type list", ptr(path, "type"));
  } else {
    // An untyped schema accepts every type, but a model given `{"properties": ...}` should write
    // an object: narrow to the types the keywords talk about (still a subset of valid values).
    const implied = new Set(Object.keys(s).map((k) => TYPE_OF_KEYWORD[k]).filter(Boolean));
    if (typeof s.format === "string" && !(s.format in NUMBER_FORMATS)) implied.add("string");
    types = implied.size ? ALL_TYPES.filter((t) => implied.has(t)) : ALL_TYPES;
  }
  if (types.includes("number")) types = types.filter((t) => t !== "integer");
  return types;
}

function relevant(ctx: Ctx, s: { [k: string]: Json }, kw: string, path: string): boolean {
  const t = TYPE_OF_KEYWORD[kw];
  if (!t) return true;
  const types = typesOf(ctx, s, path);
  return types.includes(t) || (t === "number" && types.includes("integer"));
}

/**
 * The schema without the keywords the grammar cannot hold, each relaxed (or, in strict mode, an
 * error). Keywords that cannot matter here (no extra keys can be written, a maximum already
 * implied) are dropped silently.
 */
function dropUnsupported(ctx: Ctx, s: { [k: string]: Json }, path: string): { [k: string]: Json } {
  const drop = new Set<string>();
  const off = (kw: string, why = "", checked = true) => {
    relax(ctx, kw, path, why, checked);
    drop.add(kw);
  };
  // Whether the object can hold keys beyond `properties` (see compileObject's default).
  const extraKeys = () => {
    const add = "additionalProperties" in s ? s.additionalProperties : !("properties" in s);
    return add !== false;
  };
  for (const kw of ["$dynamicRef", "$recursiveRef"]) if (kw in s) off(kw);
  if ("not" in s) {
    // `not: {}` (zod's never) matches nothing.
    if (
      s.not === true || (isObject(s.not) && Object.keys(s.not).every((k) => ANNOTATIONS.has(k)))
    ) {
      throw unsatisfiable("not", "`not` of a schema every value satisfies", ptr(path, "not"));
    }
    off("not");
  }
  if ("if" in s && ("then" in s || "else" in s)) off("if", "if/then/else");
  const typed = [
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "minContains",
  ];
  for (const kw of typed) if (kw in s && relevant(ctx, s, kw, path)) off(kw);
  // Without extra keys, patternProperties cannot apply; `propertyNames: {type: "string"}` (what
  // zod writes for every record) says nothing.
  if ("patternProperties" in s && relevant(ctx, s, "patternProperties", path)) {
    if (extraKeys()) off("patternProperties");
    else drop.add("patternProperties");
  }
  if ("propertyNames" in s && relevant(ctx, s, "propertyNames", path)) {
    const p = s.propertyNames;
    const trivial = p === true ||
      (isObject(p) &&
        Object.keys(p).every((k) => ANNOTATIONS.has(k) || (k === "type" && p.type === "string")));
    if (trivial) drop.add("propertyNames");
    else off("propertyNames");
  }
  if ("unevaluatedProperties" in s && relevant(ctx, s, "unevaluatedProperties", path)) {
    if (s.unevaluatedProperties === false && !extraKeys()) drop.add("unevaluatedProperties");
    else off("unevaluatedProperties");
  }
  if ("unevaluatedItems" in s && relevant(ctx, s, "unevaluatedItems", path)) {
    if (s.unevaluatedItems === false && ("items" in s || "additionalItems" in s)) {
      drop.add("unevaluatedItems");
    } else off("unevaluatedItems");
  }
  if (s.uniqueItems === true && relevant(ctx, s, "uniqueItems", path)) off("uniqueItems");
  if ("minProperties" in s && relevant(ctx, s, "minProperties", path)) {
    const required = Array.isArray(s.required) ? new Set(s.required).size : 0;
    if (!(typeof s.minProperties === "number" && s.minProperties <= required)) {
      off("minProperties", "only a minimum already implied by `required` is supported");
    }
  }
  if ("maxProperties" in s && relevant(ctx, s, "maxProperties", path)) {
    const props = isObject(s.properties) ? Object.keys(s.properties) : [];
    const required = Array.isArray(s.required)
      ? s.required.filter((r) => typeof r === "string")
      : [];
    const possible = new Set([...props, ...required as string[]]).size;
    if (
      !(typeof s.maxProperties === "number" && s.additionalProperties === false &&
        possible <= s.maxProperties)
    ) {
      off(
        "maxProperties",
        "only a maximum already implied by additionalProperties: false is supported",
      );
    }
  }
  return drop.size ? without(s, (k) => drop.has(k)) : s;
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
    if (!Array.isArray(s.enum)) {
      malformed(ctx, "enum", "enum must be an array", ptr(path, "enum"));
      return compile(ctx, without(s, (k) => k === "enum"), path);
    }
    values = s.enum;
    if ("const" in s) values = values.filter((v) => canonical(v) === canonical(s.const));
  } else values = [s.const];
  if ("type" in s) {
    const types = typesOf(ctx, s, path);
    values = values.filter((v) => types.some((t) => typeMatches(v, t)));
  }
  // Other keywords filter the listed values; the simple ones are checked here directly.
  for (const k of Object.keys(s)) {
    if (["enum", "const", "type"].includes(k) || ANNOTATIONS.has(k)) continue;
    const t = TYPE_OF_KEYWORD[k] ?? (k === "format" ? "string" : undefined);
    const applies = (v: Json) => typeMatches(v, t) || (t === "number" && typeMatches(v, "integer"));
    if (t && !values.some(applies)) continue; // says nothing about any listed value
    const check = k === "format" && !(String(s.format) in FORMATS) ? undefined : ENUM_CHECKS[k];
    if (!check) {
      relax(ctx, k, path, "enum/const combined with this keyword");
      continue;
    }
    const bound = s[k];
    try {
      values = values.filter((v) => !applies(v) || check(v, bound));
    } catch (e) {
      if (!ctx.relax || !isConstraintError(e)) throw e;
      relax(ctx, k, path, e.message, false);
    }
  }
  const n = ctx.notation;
  let e: Expr;
  if (values.length > TRIE_FROM && values.every((v) => !isObject(v) && !Array.isArray(v))) {
    const texts = values.map((v) => n.constant(v)).filter((t): t is string => t !== undefined);
    e = texts.length ? literalTrie(texts, ctx.g, baseName(path)) : NEVER;
  } else e = alt(...values.map((v) => constValue(ctx, v)));
  if (e.k === "never") {
    throw unsatisfiable(
      "enum" in s ? "enum" : "const",
      "no allowed value",
      ptr(path, "enum" in s ? "enum" : "const"),
    );
  }
  return e;
}

/** Canonical JSON text of a value. */
function canonical(v: Json): string {
  return JSON.stringify(v);
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
  format: (v, b) => {
    const re = typeof b === "string" ? FORMATS[b] : undefined;
    return re === undefined || new RegExp(`^(?:${re})$`).test(v as string);
  },
  minimum: (v, b) => (v as number) >= (b as number),
  maximum: (v, b) => (v as number) <= (b as number),
  exclusiveMinimum: (v, b) => (v as number) > (b as number),
  exclusiveMaximum: (v, b) => (v as number) < (b as number),
  multipleOf: (v, b) => Number.isInteger((v as number) / (b as number)),
  minItems: (v, b) => (v as Json[]).length >= (b as number),
  maxItems: (v, b) => (v as Json[]).length <= (b as number),
  required: (v, b) => Array.isArray(b) && b.every((k) => Object.hasOwn(v as object, String(k))),
};

// A fixed value, with the same whitespace freedom as everything else.
function constValue(ctx: Ctx, v: Json): Expr {
  const n = ctx.notation;
  if (!n.layout || (!Array.isArray(v) && !isObject(v))) {
    const text = n.constant(v);
    return text === undefined ? NEVER : lit(text);
  }
  const w = ws(ctx);
  if (Array.isArray(v) && v.length) {
    const items = v.map((x, i) => seq(i ? seq(lit(","), w) : EMPTY, constValue(ctx, x), w));
    return seq(lit("["), w, ...items, lit("]"));
  }
  if (isObject(v) && Object.keys(v).length) {
    const members = Object.entries(v).map(([k, x], i) =>
      seq(i ? seq(lit(","), w) : EMPTY, lit(canonical(k)), w, lit(":"), w, constValue(ctx, x), w)
    );
    return seq(lit("{"), w, ...members, lit("}"));
  }
  return lit(canonical(v));
}

function compileType(ctx: Ctx, t: JsonType, s: { [k: string]: Json }, path: string): Expr {
  switch (t) {
    case "null": {
      // A notation may leave nulls out (it writes no value for them at all).
      const text = ctx.notation.constant(null);
      return text === undefined ? NEVER : lit(text);
    }
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

function numberKeyword(ctx: Ctx, s: { [k: string]: Json }, kw: string, path: string) {
  if (!(kw in s)) return undefined;
  const v = s[kw];
  // Draft 4: `exclusiveMinimum: true` makes `minimum` exclusive (handled by the caller).
  if (typeof v === "boolean" && kw.startsWith("exclusive")) return v;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    malformed(ctx, kw, `${kw} must be a finite number`, ptr(path, kw));
    return undefined;
  }
  return v;
}

function compileNumber(
  ctx: Ctx,
  type: "integer" | "number",
  s: { [k: string]: Json },
  path: string,
): Expr {
  let t = type;
  const num = (kw: string) => numberKeyword(ctx, s, kw, path);
  let minimum = num("minimum") as number | undefined;
  let maximum = num("maximum") as number | undefined;
  let exclusiveMinimum = num("exclusiveMinimum");
  let exclusiveMaximum = num("exclusiveMaximum");
  if (typeof exclusiveMinimum === "boolean") {
    if (exclusiveMinimum && minimum !== undefined) {
      [exclusiveMinimum, minimum] = [minimum, undefined];
    } else exclusiveMinimum = undefined;
  }
  if (typeof exclusiveMaximum === "boolean") {
    if (exclusiveMaximum && maximum !== undefined) {
      [exclusiveMaximum, maximum] = [maximum, undefined];
    } else exclusiveMaximum = undefined;
  }
  const f = typeof s.format === "string" ? NUMBER_FORMATS[s.format] : undefined;
  // ajv-formats' int32 and int64 accept integers only, whatever the type says.
  if (t === "number" && (s.format === "int32" || s.format === "int64")) t = "integer";
  if (f) {
    minimum = Math.max(minimum ?? -Infinity, f.minimum);
    maximum = Math.min(maximum ?? Infinity, f.maximum);
  }
  const { lo, hi } = inclusiveBounds({ minimum, maximum, exclusiveMinimum, exclusiveMaximum });
  const lowInt = lo === undefined ? null : BigInt(Math.ceil(lo));
  const highInt = hi === undefined ? null : BigInt(Math.floor(hi));
  let e: Expr | undefined;
  if ("multipleOf" in s) {
    const m = s.multipleOf;
    if (typeof m !== "number" || !(m > 0) || !Number.isFinite(m)) {
      malformed(ctx, "multipleOf", "multipleOf must be a positive number", ptr(path, "multipleOf"));
    } else if (Number.isInteger(m) && (t === "integer" || m === 1)) {
      e = m === 1 && t === "number"
        ? integerRange(lowInt, highInt)
        : multiplesOf(m, lowInt, highInt, ctx.g);
      if (e === undefined) relax(ctx, "multipleOf", path, "a multiple within wide bounds");
    } else relax(ctx, "multipleOf", path, "a fractional multiple");
  }
  if (e === undefined) {
    if (lo === undefined && hi === undefined) {
      return t === "integer" ? std(ctx, "integer", anyInteger) : std(ctx, "number", anyNumber);
    }
    e = t === "integer" ? integerRange(lowInt, highInt) : decimalRange(
      lo === undefined ? null : toDecimal(lo),
      hi === undefined ? null : toDecimal(hi),
    );
  }
  if (e.k === "never") {
    const kw = minimum !== undefined ? "minimum" : "exclusiveMinimum";
    throw unsatisfiable(kw, `no ${t} lies within the bounds`, ptr(path, kw));
  }
  return e;
}

function lengthKeyword(ctx: Ctx, s: { [k: string]: Json }, kw: string, path: string) {
  if (!(kw in s)) return undefined;
  const v = s[kw];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    malformed(ctx, kw, `${kw} must be a non-negative integer`, ptr(path, kw));
    return undefined;
  }
  return v;
}

/** The regexes a string must match in full (its format, its pattern, or both), or none. */
function stringRegexes(
  ctx: Ctx,
  s: { [k: string]: Json },
  path: string,
): { nodes: RegexNode[]; kw: "format" | "pattern" } | undefined {
  let format: RegexNode | undefined;
  if ("format" in s) {
    const f = s.format;
    if (typeof f === "string" && f in FORMATS) {
      format = branchesToNode(parseRegex(FORMATS[f]), false);
    } else if (!(typeof f === "string" && (FREE_FORMATS.has(f) || f in NUMBER_FORMATS))) {
      relax(
        ctx,
        "format",
        path,
        `format ${JSON.stringify(f)} (known: ${Object.keys(FORMATS).join(", ")})`,
        false,
      );
    }
  }
  const formatOnly = format && { nodes: [format], kw: "format" as const };
  if (!("pattern" in s)) return formatOnly;
  if (typeof s.pattern !== "string") {
    malformed(ctx, "pattern", "pattern must be a string", ptr(path, "pattern"));
    return formatOnly;
  }
  try {
    const pattern = branchesToNode(parseRegex(s.pattern), true);
    return { nodes: format ? [format, pattern] : [pattern], kw: "pattern" };
  } catch (e) {
    if (!isConstraintError(e)) throw e;
    if (!ctx.relax) err("pattern", `${e.message} (${e.keyword})`, ptr(path, "pattern"));
    let checkable = true;
    try {
      new RegExp(s.pattern, "u");
    } catch {
      checkable = false;
    }
    ctx.relax({
      pointer: ptr(path, "pattern"),
      keyword: "pattern",
      why: e.message,
      checked: checkable,
    });
    return formatOnly;
  }
}

function compileString(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  if (LARK_KEYWORD in s) return larkString(ctx, s, path);
  const n = ctx.notation;
  const q = lit(n.quote);
  const minLength = lengthKeyword(ctx, s, "minLength", path) ?? 0;
  const maxLength = lengthKeyword(ctx, s, "maxLength", path) ?? Infinity;
  if (minLength > maxLength) {
    throw unsatisfiable("minLength", "minLength > maxLength", ptr(path, "minLength"));
  }
  const re = stringRegexes(ctx, s, path);
  if (!re) return seq(q, lengthOnly(ctx, minLength, maxLength, path), q);
  let { nodes, kw } = re;
  if (nodes.length > 1) {
    // A format and a pattern: their intersection, or (too large) the format and a check.
    try {
      regexProduct(newGrammar(), nodes, 0, Infinity, n.char, "probe", RELAXED_STATES);
    } catch (e) {
      if (!isConstraintError(e)) throw e;
      relax(ctx, "pattern", path, "pattern together with format");
      nodes = nodes.slice(0, 1);
      kw = "format";
    }
  }
  let body: Expr;
  const len = nodes.length === 1 ? regexLength(nodes[0]) : { min: 0, max: Infinity };
  if (nodes.length === 1 && minLength <= len.min && maxLength >= len.max) {
    body = regexToExpr(nodes[0], n.char);
  } else {
    const tight = nodes.length === 1
      ? lengthIntoRepetition(nodes[0], minLength, maxLength)
      : undefined;
    body = tight
      ? regexToExpr(tight, n.char)
      : patternWithLength(ctx, nodes, minLength, maxLength, kw, path);
  }
  if (body.k === "never") {
    if (ctx.relax && n.quote !== '"') {
      // Raw text cannot hold the stop's first character: the pattern is checked instead.
      relax(ctx, kw, path, `a ${kw} that needs a character this notation reserves`);
      return seq(q, lengthOnly(ctx, minLength, maxLength, path), q);
    }
    throw unsatisfiable(kw, `no string matches the ${kw} within the length bounds`, ptr(path, kw));
  }
  return seq(q, body, q);
}

/** A string's content with only length bounds (raw text: exact, the bound checked if large). */
function lengthOnly(ctx: Ctx, min: number, max: number, path: string): Expr {
  const n = ctx.notation;
  if (min === 0 && max === Infinity) return anyText(ctx);
  if (n.id === "json") return rep(std(ctx, "char", jsonTextChar), min, max);
  if (n.lengthInGrammar(max)) return rep(n.char(ANY_CHAR), min, max);
  // Raw text kept exact (anything but its stop) and a large maximum checked on the finished
  // value; a short minimum is that many characters that cannot begin the stop, then anything.
  if (Number.isFinite(max)) relax(ctx, "maxLength", path, "a length bound of raw text");
  if (min === 0) return anyText(ctx);
  if (min <= RAW_MIN_PREFIX) {
    return seq(rep(n.char(ANY_CHAR), min, min), std(ctx, "text-fresh", () => n.text(ctx.g, true)));
  }
  relax(ctx, "minLength", path, "a length bound of raw text");
  return anyText(ctx);
}

/** Longest required prefix written before exact raw text (see `lengthOnly`). */
const RAW_MIN_PREFIX = 64;
/** States a pattern, format and length product may take when relaxing (tools). */
const RELAXED_STATES = 4000;

/**
 * Patterns times a length counter. A bound too large to count is tightened to what fits (every
 * text is still valid) if that still leaves 256 characters; else the bound is checked on the
 * finished string and the grammar holds the patterns alone.
 */
function patternWithLength(
  ctx: Ctx,
  nodes: RegexNode[],
  min: number,
  max: number,
  kw: string,
  path: string,
): Expr {
  const budget = ctx.relax ? RELAXED_STATES : undefined;
  const build = (lo: number, hi: number) =>
    regexProduct(ctx.g, nodes, lo, hi, ctx.notation.char, baseName(ptr(path, kw)), budget);
  try {
    return build(min, max);
  } catch (e) {
    if (!isConstraintError(e)) throw e;
    if (!ctx.relax) err(e.keyword, e.message, ptr(path, e.keyword));
  }
  for (const cap of [1024, 256]) {
    if (cap >= max || cap < min) continue;
    try {
      return build(min, cap);
    } catch (e) {
      if (!isConstraintError(e)) throw e;
    }
  }
  relax(
    ctx,
    Number.isFinite(max) ? "maxLength" : "minLength",
    path,
    "a length bound too large to count beside a pattern",
  );
  return nodes.length === 1 ? regexToExpr(nodes[0], ctx.notation.char) : build(0, Infinity);
}

/**
 * A string whose content is derived by a Lark grammar (Hearth's own keyword, set for a `custom`
 * tool's input by `lib/chat/responses.ts`): the grammar over the notation's characters.
 */
function larkString(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  const at = ptr(path, LARK_KEYWORD);
  if (typeof s[LARK_KEYWORD] !== "string") err(LARK_KEYWORD, "must be a Lark grammar", at);
  for (const kw of ["minLength", "maxLength", "pattern", "format"]) {
    if (kw in s) {
      err(
        kw,
        `unsupported JSON Schema keyword "${kw}": ${kw} together with ${LARK_KEYWORD}`,
        ptr(path, kw),
      );
    }
  }
  try {
    const body = larkExpr(ctx.g, s[LARK_KEYWORD] as string, ctx.notation.char, baseName(at));
    return seq(lit(ctx.notation.quote), body, lit(ctx.notation.quote));
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
    if (Array.isArray(s.prefixItems)) prefix = s.prefixItems as Schema[];
    else malformed(ctx, "prefixItems", "prefixItems must be an array", prefixPath);
    if ("items" in s) rest = s.items as Schema;
  } else if (Array.isArray(s.items)) {
    // Draft 2019-09 and older: array-form items is a tuple, additionalItems the rest.
    prefix = s.items as Schema[];
    prefixPath = restPath;
    if ("additionalItems" in s) {
      rest = s.additionalItems as Schema, restPath = ptr(path, "additionalItems");
    }
  } else if ("items" in s) rest = s.items as Schema;
  // `unevaluatedItems: false` with nothing else about the rest: only the tuple.
  if (s.unevaluatedItems === false && !("items" in s) && "prefixItems" in s) rest = false;
  const minItems = lengthKeyword(ctx, s, "minItems", path) ?? 0;
  let maxItems = lengthKeyword(ctx, s, "maxItems", path) ?? Infinity;
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
  const a = ctx.notation.array;
  const item = (i: number, v: Expr) => i === 0 ? a.item(v, w) : seq(lit(a.sep), w, a.item(v, w));
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
  return seq(lit(a.open), w, tail(0), lit(a.close));
}

function compileObject(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  const n = ctx.notation;
  const propsPath = ptr(path, "properties");
  let props: { [k: string]: Json } = {};
  if ("properties" in s) {
    if (isObject(s.properties)) props = s.properties;
    else malformed(ctx, "properties", "properties must be an object", propsPath);
  }
  let requiredList: string[] = [];
  if ("required" in s) {
    if (Array.isArray(s.required) && s.required.every((r) => typeof r === "string")) {
      requiredList = s.required as string[];
    } else {malformed(
        ctx,
        "required",
        "required must be an array of strings",
        ptr(path, "required"),
      );}
  }
  const required = new Set(requiredList);
  // Without `additionalProperties`, an object that declares `properties` admits only those, as
  // llama.cpp's and xgrammar's converters do: otherwise a forced call of a tool made from a zod
  // shape (which leaves the keyword out) may invent keys for ever and never close.
  const additional: Schema = "additionalProperties" in s
    ? s.additionalProperties as Schema
    : !("properties" in s);
  const addPath = ptr(path, "additionalProperties");

  // An additionalProperties schema nothing satisfies is the same as false; a notation that cannot
  // write other keys writes only the listed ones (still valid).
  const extraValue = additional === false || !n.object.extraKeys
    ? NEVER
    : childOrNever(ctx, additional, addPath);

  // Properties in schema order (or the notation's sorted order), then required names that only
  // additionalProperties covers. A property whose schema nothing satisfies may only be absent.
  const list: { name: string; key: string; value: Expr; required: boolean }[] = [];
  const add = (name: string, given: Expr, at: string) => {
    let value = given;
    const key = n.key(name);
    if (key === undefined) {
      if (required.has(name)) {
        relax(ctx, "required", path, `"${name}" cannot be written as a key here`);
      }
      return;
    }
    if (value.k === "never") {
      if (!required.has(name)) return;
      if (!ctx.relax) {
        throw unsatisfiable(
          "required",
          `required property "${name}" has a schema no value satisfies`,
          at,
        );
      }
      relax(ctx, "required", path, `required property "${name}" has a schema no value satisfies`);
      value = anyValue(ctx);
    }
    list.push({ name, key, value, required: required.has(name) });
  };
  for (const [name, schema] of Object.entries(props)) {
    add(name, childOrNever(ctx, schema, ptr(propsPath, name)), ptr(path, "required"));
  }
  for (const name of required) {
    if (Object.hasOwn(props, name)) continue;
    if (extraValue.k === "never" && !ctx.relax) {
      throw unsatisfiable(
        "required",
        `required property "${name}" is not allowed by additionalProperties`,
        ptr(path, "required"),
      );
    }
    add(name, extraValue, ptr(path, "required"));
  }
  if (n.sortKeys) {
    list.sort((a, b) => {
      const x = a.name.toLowerCase();
      const y = b.name.toLowerCase();
      return x < y ? -1 : x > y ? 1 : 0;
    });
  }

  const w = ws(ctx);
  const kv = (p: (typeof list)[number]) => n.object.member(lit(p.key), p.value, w);
  const next = (kvExpr: Expr) => seq(lit(n.object.sep), w, kvExpr);

  // Extra keys are any name except the listed ones, so a value cannot dodge its schema by
  // reusing a name.
  let extraFirst: Expr = EMPTY;
  let extraRest: Expr = EMPTY;
  if (extraValue.k !== "never") {
    const known = Object.keys(props).concat([...required]);
    const q = lit(n.keyQuote);
    const extra = n.object.member(seq(q, keyExcept(ctx, known), q), extraValue, w);
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
  return seq(lit(n.object.open), w, firstE, lit(n.object.close));
}

// Keys that are none of `names`: a trie of the names walked in parallel with the key. Each
// character has one spelling (the notation's keyChar), so "not this name" is decidable on the text.
function keyExcept(ctx: Ctx, names: string[]): Expr {
  type Node = { end: boolean; kids: Map<number, Node> };
  const char = ctx.notation.keyChar;
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
  const anyChar = std(ctx, "key-char", () => char(ANY_CHAR));
  const anyRest = rep(anyChar, 0, ctx.notation.quote === '"' ? Infinity : 63);
  const walk = (n: Node, depth: number): Expr => {
    const e = alt(
      n.end ? NEVER : depth === 0 && ctx.notation.keyQuote === "" ? NEVER : EMPTY,
      ...[...n.kids].map(([c, k]) => seq(char(charSet(c)), walk(k, depth + 1))),
      seq(char(subtractSets(ANY_CHAR, charSet(...n.kids.keys()))), anyRest),
    );
    return depth % NEST === NEST - 1 ? ruleRef(ctx.g, "key", e) : e;
  };
  return walk(rootNode, 0);
}

// ---------------------------------------------------------------- schema sets

export type CompileOptions = {
  /** How values are written (default JSON). */
  notation?: Notation;
  /**
   * The value itself is never null (a tagged family's top-level argument, which its template
   * would print as Python's `None`): a nullable schema writes its other types.
   */
  notNull?: boolean;
  /** Relax what the grammar cannot hold instead of throwing (see {@link Relaxation}). */
  relax?: RelaxSink;
};

/** Several schemas compiled into one grammar (a tool-call grammar has one per tool). */
export type SchemaSet = {
  /** The shared rule set; render it with `render(g, root)` from `gbnf.ts`. */
  g: Grammar;
  /**
   * An expression (a rule reference named after `baseName`) matching values valid under the
   * schema found at `pointer` (default `#`, the whole document) inside `schema`; `$ref`s resolve
   * against `schema`. Without `opts.relax`, throws a ConstraintError for what
   * {@link jsonSchemaToGbnf} refuses; with it, only a schema nothing satisfies at `#` is given up
   * (any object, relaxed and named).
   */
  compile(schema: unknown, baseName: string, pointer?: string, opts?: CompileOptions): Expr;
  /** A rule reference matching any value (for schemaless parameters). */
  anyValue(notation?: Notation): Expr;
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
  return {
    g,
    compile(schema, base, pointer = "#", opts = {}) {
      const ctx = newCtx(schema, g, stdRules, opts);
      let target: { key: string; schema: Schema };
      if (pointer === "#") target = { key: "#", schema: schema as Schema };
      else {
        const r = resolveRef(schema as Json, pointer);
        if (isRefProblem(r)) err("$ref", r.problem, pointer);
        target = r;
      }
      try {
        const e = opts.notNull
          ? compile(ctx, { allOf: [target.schema as Json, { type: NOT_NULL }] }, target.key)
          : compile(ctx, target.schema, target.key);
        return e.k === "ref" ? e : ruleRef(g, base, e);
      } catch (e) {
        if (!opts.relax || !isConstraintError(e) || !isUnsatisfiable(e)) throw e;
        opts.relax({
          pointer: e.path ?? target.key,
          keyword: e.keyword,
          why: e.message,
          checked: true,
        });
        return target.key === "#" ? anyObject(ctx) : anyValue(ctx);
      }
    },
    anyValue: (notation) => anyValue(newCtx({}, g, stdRules, { notation })),
  };
}
