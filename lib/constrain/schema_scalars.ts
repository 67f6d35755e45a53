/**
 * Fixed values and numbers: `enum` and `const` (the listed values other keywords allow, a long
 * list as a trie, each written in the notation's own spelling) and integers or numbers within
 * their bounds (exact digit grammars; `multipleOf` on integers; draft-04's boolean exclusive
 * bounds; the integer formats).
 *
 * @example
 * ```ts
 * import { compileNumber } from "./schema_scalars.ts";
 * declare const ctx: import("./schema_context.ts").Ctx;
 * compileNumber(ctx, "integer", { minimum: 1, maximum: 12 }, "#"); // [1-9] | "1" [0-2]
 * ```
 * @module
 */
import { constraintError, isConstraintError } from "./error.ts";
import { alt, EMPTY, type Expr, lit, NEVER, seq } from "./gbnf.ts";
import {
  anyInteger,
  anyNumber,
  decimalRange,
  inclusiveBounds,
  integerRange,
  toDecimal,
} from "./numeric.ts";
import { multiplesOf } from "./multiples.ts";
import {
  ANNOTATIONS,
  baseName,
  type Ctx,
  isObject,
  type Json,
  malformed,
  ptr,
  relax,
  std,
  unsatisfiable,
  ws,
} from "./schema_context.ts";
import { FORMATS, NUMBER_FORMATS } from "./schema_formats.ts";
import { TYPE_OF_KEYWORD, typeMatches, typesOf } from "./schema_keywords.ts";
import { literalTrie } from "./text_without.ts";

/** Enums longer than this are written as a trie of their texts. */
const TRIE_FROM = 16;

/** The listed values (`enum`, an array by now, or `const`) the schema's other keywords allow. */
export function compileEnum(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  let values: Json[];
  if ("enum" in s) {
    values = s.enum as Json[];
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
export function constValue(ctx: Ctx, v: Json): Expr {
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

export function compileNumber(
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
