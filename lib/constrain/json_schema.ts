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
  define,
  type Expr,
  type Grammar,
  lit,
  NEVER,
  newGrammar,
  ref,
  render,
  reserve,
  ruleRef,
} from "./gbnf.ts";
import {} from "./numeric.ts";
import { jsonNotation, type Notation } from "./notation.ts";
import { isRefProblem, resolveRef } from "./schema_refs.ts";
import { type JsonType, mergeAll, type MergeHooks } from "./schema_merge.ts";
import {
  ANNOTATIONS,
  anyObject,
  anyValue,
  baseName,
  type CompileOptions,
  type Ctx,
  err,
  isObject,
  isUnsatisfiable,
  type Json,
  malformed,
  ptr,
  relax,
  type Schema,
  unsatisfiable,
  without,
} from "./schema_context.ts";
import { disjoint, dropUnsupported, isStringBranch, NOT_NULL, typesOf } from "./schema_keywords.ts";
import { compileString } from "./schema_strings.ts";
import { compileEnum, compileNumber } from "./schema_scalars.ts";
import { compileArray, compileObject } from "./schema_containers.ts";

export type { CompileOptions, Relaxation, RelaxSink } from "./schema_context.ts";
export { ANNOTATIONS } from "./schema_context.ts";
export { FORMATS } from "./schema_formats.ts";
export { jsonChar } from "./notation.ts";

// Work bounds for user-controlled blow-ups.
const MAX_DEPTH = 200;

function newCtx(root: unknown, g: Grammar, std: Map<string, Expr>, opts: CompileOptions): Ctx {
  const ctx: Ctx = {
    root: root as Json,
    g,
    named: new Map(),
    unguarded: [],
    std,
    failed: new Map(),
    depth: 0,
    notation: opts.notation ?? jsonNotation,
    relax: opts.relax,
    childOrNever: (schema, path) => childOrNever(ctx, schema, path),
  };
  return ctx;
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
  if ("enum" in s && !Array.isArray(s.enum)) {
    malformed(ctx, "enum", "enum must be an array", ptr(path, "enum"));
    return compile(ctx, without(s, (k) => k === "enum"), path);
  }
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

// ---------------------------------------------------------------- schema sets

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
