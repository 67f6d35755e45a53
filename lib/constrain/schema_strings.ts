/**
 * Strings: length bounds, a pattern, a format (or a format and a pattern, intersected), in the
 * notation's characters; a Lark-derived string (a custom tool's input). A length too large to
 * count beside a pattern is tightened to what fits, or checked on the finished value.
 *
 * @example
 * ```ts
 * import { compileString } from "./schema_strings.ts";
 * declare const ctx: import("./schema_context.ts").Ctx;
 * compileString(ctx, { pattern: "^[a-z]+$", maxLength: 8 }, "#"); // "\"" [a-z]{1,8} "\""
 * ```
 * @module
 */
import { isConstraintError } from "./error.ts";
import { ANY_CHAR, type Expr, lit, newGrammar, rep, seq } from "./gbnf.ts";
import { LARK_KEYWORD, larkExpr } from "./lark.ts";
import { jsonTextChar } from "./notation.ts";
import { branchesToNode, parseRegex, regexLength, type RegexNode, regexToExpr } from "./regex.ts";
import {
  anyText,
  baseName,
  type Ctx,
  err,
  type Json,
  lengthKeyword,
  malformed,
  ptr,
  relax,
  std,
  unsatisfiable,
} from "./schema_context.ts";
import { FORMATS, FREE_FORMATS, NUMBER_FORMATS } from "./schema_formats.ts";
import { regexProduct } from "./regex_product.ts";

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

export function compileString(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
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
  if (n.id === "json") {
    // A bound far beyond what a call writes (Claude Code's 524288-character script) would cost
    // llama.cpp a rule per character to parse, on every new grammar: checked on the finished
    // value instead when relaxing.
    if (!ctx.relax || max <= LONG_TEXT) return rep(std(ctx, "char", jsonTextChar), min, max);
    relax(ctx, "maxLength", path, "a length bound far beyond a call's");
    return rep(std(ctx, "char", jsonTextChar), min, Infinity);
  }
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

/** Products of patterns and lengths found too large, by notation, budget, bounds and regexes. */
const TOO_LARGE = new Set<string>();

/** Longest JSON string length bound kept in a tool-call grammar (see `lengthOnly`). */
const LONG_TEXT = 4096;
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
  // A product found too large is not tried again (a tool set repeats its url and id formats).
  const tooLarge = (hi: number) =>
    `${ctx.notation.id}|${budget}|${min}|${hi}|${JSON.stringify(nodes)}`;
  const attempt = (hi: number): Expr | undefined => {
    const key = tooLarge(hi);
    if (TOO_LARGE.has(key)) return undefined;
    try {
      return build(min, hi);
    } catch (e) {
      if (!isConstraintError(e)) throw e;
      TOO_LARGE.add(key);
      if (TOO_LARGE.size > 512) TOO_LARGE.delete(TOO_LARGE.values().next().value!);
      return undefined;
    }
  };
  const exact = attempt(max);
  if (exact) return exact;
  if (!ctx.relax) {
    try {
      build(min, max);
    } catch (e) {
      if (!isConstraintError(e)) throw e;
      err(e.keyword, e.message, ptr(path, e.keyword));
    }
  }
  for (const cap of [1024, 256]) {
    if (cap >= max || cap < min) continue;
    const tight = attempt(cap);
    if (tight) return tight;
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
