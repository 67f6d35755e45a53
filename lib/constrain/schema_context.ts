/**
 * What every part of the JSON Schema compiler shares: the compile context (the document, the
 * rule set, the notation, the relaxation sink), JSON pointers, errors and relaxations, and the
 * notation's standard rules (layout, any string, any value).
 *
 * @example
 * ```ts
 * import { ptr } from "./schema_context.ts";
 * ptr("#/properties", "a/b"); // "#/properties/a~1b"
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import {
  alt,
  ANY_CHAR,
  charSet,
  cls,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  lit,
  opt,
  ref,
  rep,
  reserve,
  seq,
} from "./gbnf.ts";
import { anyNumber } from "./numeric.ts";
import { jsonTextChar, type Notation } from "./notation.ts";

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export type Schema = boolean | { [k: string]: Json };

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

// Inline nesting (parentheses in one rule) allowed before a named rule takes over; llama.cpp's
// parser recurses once per parenthesis.
export const NEST = 8;

export const MAX_WS_INDENT = 20;

export type Ctx = {
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
  /** Compiles a child value (inside `{` or `[`); NEVER when no value satisfies its schema. */
  childOrNever(schema: unknown, path: string): Expr;
};

export function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

export function ptr(path: string, key: string | number): string {
  return `${path}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

export function err(keyword: string, message: string, path: string): never {
  throw constraintError(keyword, message, path);
}

/**
 * A keyword the grammar will not enforce at `path`: strict mode throws (naming it), relaxed mode
 * records it and the caller carries on without it.
 */
export function relax(ctx: Ctx, keyword: string, path: string, why: string, checked = true): void {
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
export function malformed(ctx: Ctx, keyword: string, message: string, at: string): void {
  if (!ctx.relax) err(keyword, message, at);
  ctx.relax({ pointer: at, keyword, why: message, checked: false });
}

export function baseName(path: string): string {
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
export function std(ctx: Ctx, name: string, build: () => Expr): Expr {
  const key = `${ctx.notation.id}:${name}`;
  const have = ctx.std.get(key);
  if (have) return have;
  const r = ref(reserve(ctx.g, ctx.notation.id === "json" ? name : `${ctx.notation.id}-${name}`));
  ctx.std.set(key, r);
  define(ctx.g, r.name, build());
  return r;
}

export function ws(ctx: Ctx): Expr {
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
export function anyText(ctx: Ctx): Expr {
  if (ctx.notation.id === "json") {
    return rep(std(ctx, "char", jsonTextChar), 0, Infinity);
  }
  return std(ctx, "text", () => ctx.notation.text(ctx.g));
}

export function anyString(ctx: Ctx): Expr {
  const q = lit(ctx.notation.quote);
  return std(ctx, "string", () => seq(q, anyText(ctx), q));
}

export function anyValue(ctx: Ctx): Expr {
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
export function anyObject(ctx: Ctx): Expr {
  anyValue(ctx);
  return ctx.std.get(`${ctx.notation.id}:object`)!;
}

export function without(
  s: { [k: string]: Json },
  drop: (k: string) => boolean,
): { [k: string]: Json } {
  return Object.fromEntries(Object.entries(s).filter(([k]) => !drop(k)));
}

const UNSAT = Symbol("unsatisfiable");

export function unsatisfiable(keyword: string, message: string, path: string): Error {
  const e = constraintError(keyword, `${message}: no value can satisfy it`, path);
  (e as unknown as Record<symbol, boolean>)[UNSAT] = true;
  return e;
}

export function isUnsatisfiable(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as Record<symbol, boolean>)[UNSAT] === true;
}

export function lengthKeyword(ctx: Ctx, s: { [k: string]: Json }, kw: string, path: string) {
  if (!(kw in s)) return undefined;
  const v = s[kw];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    malformed(ctx, kw, `${kw} must be a non-negative integer`, ptr(path, kw));
    return undefined;
  }
  return v;
}

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
