/**
 * Building blocks for llama.cpp GBNF grammars: escaping (`literal`, `charClass`), code-point sets,
 * a small expression tree with simplifying constructors, and a rule set that names rules uniquely,
 * shares identical bodies and renders `root ::= ...` first.
 *
 * The expression layer exists because llama.cpp's parser has sharp edges that are easy to hit when
 * pasting text together: `[]` silently matches the empty string, `x{m,n}` with `n` above 2000
 * silently becomes unbounded, `{n,m}` with `n > m` never terminates, a repeated group counts every
 * rule generated inside it against a 2000-rule budget, and an unbounded repetition of something
 * that can be empty is left recursion (the grammar is rejected). `emit` avoids all of them.
 *
 * @example
 * ```ts
 * import { alt, charSet, cls, lit, newGrammar, render, rep, seq } from "./gbnf.ts";
 * const g = newGrammar();
 * const digits = rep(cls(charSet(["0", "9"])), 1, 3);
 * render(g, seq(lit("#"), alt(digits, lit("none"))));
 * // 'root ::= "#" ([0-9]{1,3} | "none")\n'
 * ```
 * @module
 */

// ---------------------------------------------------------------- code-point sets

/** An inclusive range of Unicode code points. */
export type CodeRange = readonly [number, number];
/** Sorted, disjoint, non-adjacent ranges. Build with {@link charSet}; never mutate. */
export type CharSet = readonly CodeRange[];

export const MAX_CODE_POINT = 0x10ffff;
export const ANY_CHAR: CharSet = [[0, MAX_CODE_POINT]];

function cp(c: number | string): number {
  return typeof c === "number" ? c : c.codePointAt(0)!;
}

/**
 * A normalized set from code points, single characters, strings of characters (`"abc"` = a, b, c
 * when longer than one character) and `[lo, hi]` ranges (numbers or one-character strings).
 */
export function charSet(
  ...items: (number | string | readonly [number | string, number | string])[]
): CharSet {
  const ranges: [number, number][] = [];
  for (const it of items) {
    if (typeof it === "number") ranges.push([it, it]);
    else if (typeof it === "string") { for (const ch of it) ranges.push([cp(ch), cp(ch)]); }
    else ranges.push([cp(it[0]), cp(it[1])]);
  }
  return normalize(ranges);
}

function normalize(ranges: [number, number][]): CharSet {
  const sorted = ranges.filter(([a, b]) => a <= b).sort((x, y) => x[0] - y[0]);
  const out: [number, number][] = [];
  for (const [a, b] of sorted) {
    const last = out[out.length - 1];
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

export function unionSets(...sets: CharSet[]): CharSet {
  return normalize(sets.flatMap((s) => s.map(([a, b]) => [a, b] as [number, number])));
}

export function complementSet(s: CharSet): CharSet {
  const out: [number, number][] = [];
  let next = 0;
  for (const [a, b] of s) {
    if (a > next) out.push([next, a - 1]);
    next = b + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

export function intersectSets(a: CharSet, b: CharSet): CharSet {
  return complementSet(unionSets(complementSet(a), complementSet(b)));
}

export function subtractSets(a: CharSet, b: CharSet): CharSet {
  return intersectSets(a, complementSet(b));
}

export function setHas(s: CharSet, c: number): boolean {
  return s.some(([a, b]) => a <= c && c <= b);
}

/** Number of code points in the set. */
export function setSize(s: CharSet): number {
  return s.reduce((n, [a, b]) => n + b - a + 1, 0);
}

// ---------------------------------------------------------------- escaping

function hex(n: number, width: number): string {
  return n.toString(16).toUpperCase().padStart(width, "0");
}

// Characters that are legal raw in a grammar but invisible or confusing when reading one.
function needsEscape(c: number): boolean {
  return c < 0x20 || (c >= 0x7f && c <= 0xa0) || c === 0xad || c === 0x1680 || c === 0x3000 ||
    (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
    (c >= 0x205f && c <= 0x206f) || (c >= 0xd800 && c <= 0xdfff) || c === 0xfeff ||
    (c >= 0xfff0 && c <= 0xffff) || (c > 0xffff && (c & 0xfffe) === 0xfffe);
}

function escapeCodePoint(c: number, inClass: boolean): string {
  switch (c) {
    case 0x0a:
      return "\\n";
    case 0x0d:
      return "\\r";
    case 0x09:
      return "\\t";
    case 0x22:
      return '\\"';
    case 0x5c:
      return "\\\\";
  }
  if (inClass) {
    // llama.cpp has no `\^` escape, and `^` is only special first in a class: hex is always safe.
    if (c === 0x5e) return "\\x5E";
    if (c === 0x5d || c === 0x5b || c === 0x2d) return "\\" + String.fromCodePoint(c);
  }
  if (needsEscape(c)) {
    if (c <= 0x7f) return "\\x" + hex(c, 2);
    return c <= 0xffff ? "\\u" + hex(c, 4) : "\\U" + hex(c, 8);
  }
  return String.fromCodePoint(c);
}

/**
 * A GBNF string literal matching exactly `s`. Lone UTF-16 surrogates become `\uD8xx` escapes (a
 * code point no UTF-8 text contains, so they never match, which is what they deserve).
 */
export function literal(s: string): string {
  let out = '"';
  for (const ch of s) out += escapeCodePoint(ch.codePointAt(0)!, false);
  return out + '"';
}

function classBody(set: CharSet): string {
  let out = "";
  for (const [a, b] of set) {
    out += escapeCodePoint(a, true);
    if (b === a + 1) out += escapeCodePoint(b, true);
    else if (b > a) out += "-" + escapeCodePoint(b, true);
  }
  return out;
}

/**
 * A GBNF character class for a non-empty set: `[...]`, `[^...]` when the complement is shorter to
 * write, or `.` for every code point. An empty set throws: llama.cpp would read `[]` as "match
 * nothing at all" (the empty string), the opposite of what an empty set means.
 */
export function charClass(set: CharSet, negated = false): string {
  const s = negated ? complementSet(set) : set;
  if (s.length === 0) throw new Error("charClass: empty character set");
  if (s.length === 1 && s[0][0] === 0 && s[0][1] === MAX_CODE_POINT) return ".";
  const pos = classBody(s);
  const comp = complementSet(s);
  const neg = classBody(comp);
  return comp.length > 0 && neg.length < pos.length ? `[^${neg}]` : `[${pos}]`;
}

// ---------------------------------------------------------------- expressions

/** A grammar expression; build it with the constructors below, which keep it simplified. */
export type Expr =
  | { readonly k: "lit"; readonly s: string }
  | { readonly k: "cls"; readonly set: CharSet }
  | RefExpr
  | { readonly k: "seq"; readonly xs: readonly Expr[] }
  | { readonly k: "alt"; readonly xs: readonly Expr[] }
  | { readonly k: "rep"; readonly x: Expr; readonly min: number; readonly max: number }
  | { readonly k: "never" };

/** Matches only the empty string. */
export const EMPTY: Expr = { k: "seq", xs: [] };
/** Matches nothing; the constructors absorb it, and `emit` refuses it. */
export const NEVER: Expr = { k: "never" };

export function isEmpty(e: Expr): boolean {
  return e.k === "seq" && e.xs.length === 0;
}

export function lit(s: string): Expr {
  return s === "" ? EMPTY : { k: "lit", s };
}

/** One character from `set`; a single character becomes a literal so sequences can merge. */
export function cls(set: CharSet): Expr {
  if (set.length === 0) return NEVER;
  if (set.length === 1 && set[0][0] === set[0][1]) return lit(String.fromCodePoint(set[0][0]));
  return { k: "cls", set };
}

/** A reference to a named rule. */
export type RefExpr = { readonly k: "ref"; readonly name: string };

export function ref(name: string): RefExpr {
  return { k: "ref", name };
}

export function seq(...parts: Expr[]): Expr {
  const xs: Expr[] = [];
  for (const p of parts) {
    if (p.k === "never") return NEVER;
    for (const x of p.k === "seq" ? p.xs : [p]) {
      const last = xs[xs.length - 1];
      if (x.k === "lit" && last?.k === "lit") xs[xs.length - 1] = lit(last.s + x.s);
      else xs.push(x);
    }
  }
  return xs.length === 1 ? xs[0] : { k: "seq", xs };
}

function singleChar(e: Expr): CharSet | undefined {
  if (e.k === "cls") return e.set;
  if (e.k === "lit") {
    const c = e.s.codePointAt(0)!;
    if (String.fromCodePoint(c) === e.s) return [[c, c]];
  }
  return undefined;
}

/** Alternation; drops `NEVER`, duplicates, and folds single-character branches into one class. */
export function alt(...parts: Expr[]): Expr {
  const xs: Expr[] = [];
  const seen = new Set<string>();
  let chars: CharSet | undefined;
  let charsAt = -1;
  for (const p of parts) {
    for (const x of p.k === "alt" ? p.xs : [p]) {
      if (x.k === "never") continue;
      const set = singleChar(x);
      if (set) {
        if (!chars) charsAt = xs.length, xs.push(x);
        chars = chars ? unionSets(chars, set) : set;
        continue;
      }
      const key = JSON.stringify(x);
      if (seen.has(key)) continue;
      seen.add(key);
      xs.push(x);
    }
  }
  if (chars) xs[charsAt] = cls(chars);
  if (xs.length === 0) return NEVER;
  // `"" | x` reads better (and parses to fewer rules) as `x?`.
  const rest = xs.filter((x) => !isEmpty(x));
  if (rest.length < xs.length && rest.length > 0) {
    return opt(rest.length === 1 ? rest[0] : { k: "alt", xs: rest });
  }
  return xs.length === 1 ? xs[0] : { k: "alt", xs };
}

/** `x{min,max}`; `max` may be `Infinity`. */
export function rep(x: Expr, min: number, max: number): Expr {
  if (!(Number.isInteger(min) && min >= 0 && (max === Infinity || Number.isInteger(max)))) {
    throw new Error(`rep: bad bounds {${min},${max}}`);
  }
  if (max < min) throw new Error(`rep: max ${max} < min ${min}`);
  if (max === 0 || isEmpty(x)) return EMPTY;
  if (x.k === "never") return min === 0 ? EMPTY : NEVER;
  if (min === 1 && max === 1) return x;
  // (x{0,b})? and (x{1,b})? are x{0,b}.
  if (min === 0 && max === 1 && x.k === "rep" && x.min <= 1) return rep(x.x, 0, x.max);
  return { k: "rep", x, min, max };
}

export function opt(x: Expr): Expr {
  return rep(x, 0, 1);
}

/** Whether `e` matches the empty string (rule references are looked up in `g`). */
export function nullable(e: Expr, g?: Grammar): boolean {
  switch (e.k) {
    case "lit":
      return e.s === "";
    case "cls":
    case "never":
      return false;
    case "ref":
      return g?.nullable.get(e.name) ?? false;
    case "seq":
      return e.xs.every((x) => nullable(x, g));
    case "alt":
      return e.xs.some((x) => nullable(x, g));
    case "rep":
      return e.min === 0 || nullable(e.x, g);
  }
}

// ---------------------------------------------------------------- rule sets

/** Rules being collected for one grammar. */
export type Grammar = {
  /** Rule names in definition order (without `root`). */
  order: string[];
  bodies: Map<string, string>;
  /** Rule names each body mentions, for dropping unreachable rules at render time. */
  refs: Map<string, Set<string>>;
  byBody: Map<string, string>;
  nullable: Map<string, boolean>;
  names: Set<string>;
};

export function newGrammar(): Grammar {
  return {
    order: [],
    bodies: new Map(),
    refs: new Map(),
    byBody: new Map(),
    nullable: new Map(),
    names: new Set(["root"]),
  };
}

/** A rule name derived from `base` (only `[A-Za-z0-9-]` survive) that is not taken yet. */
export function reserve(g: Grammar, base: string): string {
  let name = base.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 48)
    .replace(/-+$/, "") || "r";
  if (g.names.has(name)) {
    let i = 2;
    while (g.names.has(`${name}-${i}`)) i++;
    name = `${name}-${i}`;
  }
  g.names.add(name);
  return name;
}

/** Defines a reserved rule (used for recursive rules, whose body refers to their own name). */
export function define(g: Grammar, name: string, body: Expr): void {
  if (g.bodies.has(name)) throw new Error(`rule ${name} defined twice`);
  // Record nullability first: a recursive body asks about itself while being emitted.
  if (!g.nullable.has(name)) g.nullable.set(name, false);
  const refs = new Set<string>();
  const text = emitP(g, body, name, refs).text;
  g.nullable.set(name, nullable(body, g));
  g.order.push(name);
  g.bodies.set(name, text);
  g.refs.set(name, refs);
  if (!g.byBody.has(text)) g.byBody.set(text, name);
}

/** Adds a rule for `body` (or finds an identical one) and returns its name. */
export function rule(g: Grammar, base: string, body: Expr): string {
  if (body.k === "ref") return body.name;
  const refs = new Set<string>();
  const text = emitP(g, body, base, refs).text;
  const existing = g.byBody.get(text);
  if (existing) return existing;
  const name = reserve(g, base);
  g.nullable.set(name, nullable(body, g));
  g.order.push(name);
  g.bodies.set(name, text);
  g.refs.set(name, refs);
  g.byBody.set(text, name);
  return name;
}

/** `ref(rule(...))`. */
export function ruleRef(g: Grammar, base: string, body: Expr): RefExpr {
  return ref(rule(g, base, body));
}

/**
 * The grammar text: `root ::= <root>` followed by every rule reachable from it. Rules left over
 * from abandoned work (a branch that turned out impossible) are dropped, since llama.cpp refuses
 * a grammar that mentions an undefined rule anywhere.
 */
export function render(g: Grammar, root: Expr): string {
  const rootRefs = new Set<string>();
  const lines = [`root ::= ${emitP(g, root, "root", rootRefs).text}`];
  const reachable = new Set<string>();
  const todo = [...rootRefs];
  while (todo.length) {
    const name = todo.pop()!;
    if (reachable.has(name)) continue;
    const refs = g.refs.get(name);
    if (!refs) throw new Error(`render: rule ${name} is referenced but never defined`);
    reachable.add(name);
    todo.push(...refs);
  }
  for (const name of g.order) {
    if (reachable.has(name)) lines.push(`${name} ::= ${g.bodies.get(name)}`);
  }
  return lines.join("\n") + "\n";
}

// ---------------------------------------------------------------- emission

// llama.cpp refuses more than 2000 generated rules per repetition and treats an upper bound above
// 2000 as "unbounded"; chunks of 1000 keep every repetition comfortably inside both limits.
const CHUNK = 1000;

function quantifier(min: number, max: number): string {
  if (min === 0 && max === 1) return "?";
  if (min === 0 && max === Infinity) return "*";
  if (min === 1 && max === Infinity) return "+";
  if (min === max) return `{${min}}`;
  return max === Infinity ? `{${min},}` : `{${min},${max}}`;
}

type Emitted = { text: string; prec: 0 | 1 | 2 };

/** GBNF text for `e`; auxiliary rules it needs are added to `g`, named after `base`. */
export function emit(g: Grammar, e: Expr, base = "r", refs = new Set<string>()): string {
  return emitP(g, e, base, refs).text;
}

function wrap(x: Emitted, minPrec: number): string {
  return x.prec >= minPrec ? x.text : `(${x.text})`;
}

function emitP(g: Grammar, e: Expr, base: string, refs: Set<string>): Emitted {
  switch (e.k) {
    case "never":
      throw new Error("emit: expression matches nothing");
    case "lit":
      return { text: literal(e.s), prec: 2 };
    case "cls":
      return { text: charClass(e.set), prec: 2 };
    case "ref":
      refs.add(e.name);
      return { text: e.name, prec: 2 };
    case "seq":
      if (e.xs.length === 0) return { text: '""', prec: 2 };
      return { text: e.xs.map((x) => wrap(emitP(g, x, base, refs), 1)).join(" "), prec: 1 };
    case "alt":
      return { text: e.xs.map((x) => wrap(emitP(g, x, base, refs), 1)).join(" | "), prec: 0 };
    case "rep":
      return emitRep(g, e.x, e.min, e.max, base, refs);
  }
}

function emitRep(
  g: Grammar,
  x: Expr,
  min: number,
  max: number,
  base: string,
  refs: Set<string>,
): Emitted {
  if (max === Infinity && nullable(x, g)) {
    throw new Error("emit: unbounded repetition of an expression that can be empty");
  }
  if (min > CHUNK || (max !== Infinity && max > CHUNK)) {
    return emitP(g, largeRep(g, x, min, max, base), base, refs);
  }
  // llama.cpp charges a repeated group for every symbol created while parsing it (times the
  // repetition count, against a budget of 2000); a named rule is charged once. Small groups stay
  // inline for readability.
  const inline = x.k === "lit" || x.k === "cls" || x.k === "ref" ||
    (symbolCost(x) + 1) * (max === Infinity ? Math.max(min, 1) : max) <= 200;
  const text = inline ? wrap(emitP(g, x, base, refs), 2) : ruleRef(g, base, x).name;
  if (!inline) refs.add(text);
  return { text: text + quantifier(min, max), prec: 2 };
}

// An upper estimate of the symbols llama.cpp creates while parsing `e` (a first mention of a rule
// name creates one too).
function symbolCost(e: Expr): number {
  switch (e.k) {
    case "lit":
    case "cls":
    case "never":
      return 0;
    case "ref":
      return 1;
    case "seq":
    case "alt":
      return 1 + e.xs.reduce((n, x) => n + symbolCost(x), 0);
    case "rep":
      return 2 + symbolCost(e.x) + (e.max === Infinity ? 1 : e.max - e.min);
  }
}

function largeRep(g: Grammar, x: Expr, min: number, max: number, base: string): Expr {
  const chunk = ruleRef(g, `${base}-x${CHUNK}`, rep(x, CHUNK, CHUNK));
  const exact = min > CHUNK
    ? seq(
      rep(chunk, Math.floor(min / CHUNK), Math.floor(min / CHUNK)),
      rep(x, min % CHUNK, min % CHUNK),
    )
    : rep(x, min, min);
  if (max === Infinity) return seq(exact, rep(x, 0, Infinity));
  // Up to n more: either fewer than a chunk, or a whole chunk and up to n - CHUNK more. The two
  // branches part ways after CHUNK items, so the parser never tracks more than a few stacks.
  const upTo = (n: number): Expr =>
    n <= CHUNK
      ? rep(x, 0, n)
      : alt(rep(x, 0, CHUNK - 1), seq(chunk, ruleRef(g, `${base}-upto`, upTo(n - CHUNK))));
  return seq(exact, upTo(max - min));
}
