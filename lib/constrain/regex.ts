/**
 * ECMAScript regular expressions (no flags) to GBNF. The grammar matches exactly the strings the
 * regex matches in full, i.e. what `new RegExp("^(?:" + re + ")$")` accepts.
 *
 * Supported: literals; escapes `\n \t \r \f \v \0 \xHH \uHHHH \cX` and escaped punctuation;
 * `.`; classes `[...]`/`[^...]` with ranges and `\d \w \s \D \W \S` (also outside classes);
 * `* + ? {m} {m,} {m,n}`, greedy or lazy (same language); groups `( )`, `(?: )`, `(?<name> )`;
 * alternation; `^` at the start and `$` at the end of a top-level alternative. Everything else
 * throws a {@link ConstraintError} naming the construct: backreferences, lookaround, `\b`/`\B`,
 * `\p{..}`, inline modifiers, flags, anchors elsewhere.
 *
 * Characters are Unicode code points (what the grammar sees), as with the `u` flag; for text in
 * the Basic Multilingual Plane that is the same as flagless UTF-16 matching.
 *
 * @example
 * ```ts
 * import { regexToGbnf } from "./regex.ts";
 * regexToGbnf("[a-c]+(?:-\\d{2})?");
 * // 'root ::= [a-c]+ ("-" [0-9]{2})?\n'
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import {
  alt,
  ANY_CHAR,
  type CharSet,
  charSet,
  cls,
  complementSet,
  EMPTY,
  type Expr,
  NEVER,
  newGrammar,
  render,
  rep,
  seq,
  unionSets,
} from "./gbnf.ts";

/** Parsed regex: only character sets and the three regular operators survive parsing. */
export type RegexNode =
  | { t: "chars"; set: CharSet }
  | { t: "seq"; items: RegexNode[] }
  | { t: "alt"; alts: RegexNode[] }
  | { t: "rep"; node: RegexNode; min: number; max: number };

/** One top-level alternative and whether it carried `^` / `$` (which matters for search mode). */
export type RegexBranch = { node: RegexNode; anchoredStart: boolean; anchoredEnd: boolean };

export const DIGIT: CharSet = charSet(["0", "9"]);
export const WORD: CharSet = charSet(["a", "z"], ["A", "Z"], ["0", "9"], "_");
export const SPACE: CharSet = charSet(
  [0x09, 0x0d],
  0x20,
  0xa0,
  0x1680,
  [0x2000, 0x200a],
  0x2028,
  0x2029,
  0x202f,
  0x205f,
  0x3000,
  0xfeff,
);
/** `.` without the `s` flag: anything but a line terminator. */
export const DOT: CharSet = complementSet(charSet(0x0a, 0x0d, 0x2028, 0x2029));

// A regex is user input: bound the work it can ask for.
const MAX_COUNT = 100_000;
const MAX_DEPTH = 100;

type Parser = { src: string[]; pos: number; pattern: string; depth: number; names: Set<string> };

function fail(p: Parser, construct: string, what: string): never {
  throw constraintError(
    construct,
    `regex ${JSON.stringify(p.pattern)}: ${what} at offset ${p.pos}`,
  );
}

function unsupported(p: Parser, construct: string): never {
  fail(p, construct, `unsupported construct ${construct}`);
}

function peek(p: Parser, ahead = 0): string | undefined {
  return p.src[p.pos + ahead];
}

function lookingAt(p: Parser, s: string): boolean {
  const chars = Array.from(s);
  return chars.every((c, i) => p.src[p.pos + i] === c);
}

function chars(set: CharSet): RegexNode {
  return { t: "chars", set };
}

function single(c: number): RegexNode {
  return chars([[c, c]]);
}

/** Parses `pattern` into its top-level alternatives. Throws a ConstraintError on anything else. */
export function parseRegex(pattern: string): RegexBranch[] {
  const p: Parser = { src: Array.from(pattern), pos: 0, pattern, depth: 0, names: new Set() };
  const branches: RegexBranch[] = [];
  while (true) {
    let anchoredStart = false;
    if (peek(p) === "^") anchoredStart = true, p.pos++;
    const items: RegexNode[] = [];
    let anchoredEnd = false;
    while (p.pos < p.src.length && peek(p) !== "|") {
      if (peek(p) === "$") {
        p.pos++;
        if (p.pos < p.src.length && peek(p) !== "|") {
          p.pos--;
          fail(p, "$", "anchor $ is only supported at the end of the pattern");
        }
        anchoredEnd = true;
        break;
      }
      if (peek(p) === ")") fail(p, ")", "unmatched )");
      items.push(parseTerm(p));
    }
    branches.push({ node: { t: "seq", items }, anchoredStart, anchoredEnd });
    if (peek(p) !== "|") break;
    p.pos++;
  }
  return branches;
}

function parseAlternation(p: Parser): RegexNode {
  const alts: RegexNode[] = [];
  while (true) {
    const items: RegexNode[] = [];
    while (p.pos < p.src.length && peek(p) !== "|" && peek(p) !== ")") items.push(parseTerm(p));
    alts.push({ t: "seq", items });
    if (peek(p) !== "|") break;
    p.pos++;
  }
  return alts.length === 1 ? alts[0] : { t: "alt", alts };
}

function parseTerm(p: Parser): RegexNode {
  const atom = parseAtom(p);
  const q = parseQuantifier(p);
  if (!q) return atom;
  if (peek(p) === "?") p.pos++; // lazy: a different match, the same language
  if (peek(p) === "*" || peek(p) === "+" || peek(p) === "?" || quantifierAhead(p)) {
    fail(p, "quantifier", "nothing to repeat");
  }
  return { t: "rep", node: atom, min: q.min, max: q.max };
}

function quantifierAhead(p: Parser): boolean {
  const save = p.pos;
  const q = peek(p) === "{" ? parseQuantifier(p) : undefined;
  p.pos = save;
  return q !== undefined;
}

function parseQuantifier(p: Parser): { min: number; max: number } | undefined {
  const c = peek(p);
  if (c === "*") return p.pos++, { min: 0, max: Infinity };
  if (c === "+") return p.pos++, { min: 1, max: Infinity };
  if (c === "?") return p.pos++, { min: 0, max: 1 };
  if (c !== "{") return undefined;
  // Annex B: a `{` that does not start a well-formed quantifier is a literal.
  const m = /^\{(\d+)(?:(,)(\d*))?\}/.exec(p.src.slice(p.pos, p.pos + 1000).join(""));
  if (!m) return undefined;
  const min = Number(m[1]);
  const max = m[2] ? (m[3] ? Number(m[3]) : Infinity) : min;
  if (max < min) fail(p, "quantifier", `numbers out of order in quantifier ${m[0]}`);
  if (min > MAX_COUNT || (max !== Infinity && max > MAX_COUNT)) {
    fail(p, "quantifier", `repetition count above ${MAX_COUNT} in ${m[0]}`);
  }
  p.pos += m[0].length;
  return { min, max };
}

function parseAtom(p: Parser): RegexNode {
  const c = peek(p)!;
  switch (c) {
    case "(":
      return parseGroup(p);
    case "[":
      return parseClass(p);
    case ".":
      p.pos++;
      return chars(DOT);
    case "\\":
      return parseAtomEscape(p);
    case "*":
    case "+":
    case "?":
      fail(p, "quantifier", "nothing to repeat");
      break;
    case "{":
      if (quantifierAhead(p)) fail(p, "quantifier", "nothing to repeat");
      break;
    case "^":
      fail(p, "^", "anchor ^ is only supported at the start of the pattern");
      break;
    case "$":
      fail(p, "$", "anchor $ is only supported at the end of the pattern");
  }
  p.pos++;
  return single(c.codePointAt(0)!);
}

function parseGroup(p: Parser): RegexNode {
  if (lookingAt(p, "(?=")) unsupported(p, "lookahead (?=");
  if (lookingAt(p, "(?!")) unsupported(p, "negative lookahead (?!");
  if (lookingAt(p, "(?<=")) unsupported(p, "lookbehind (?<=");
  if (lookingAt(p, "(?<!")) unsupported(p, "negative lookbehind (?<!");
  if (lookingAt(p, "(?:")) p.pos += 3;
  else if (lookingAt(p, "(?<")) {
    const m = /^\(\?<([$_\p{ID_Start}][$\p{ID_Continue}\u200c\u200d]*)>/u.exec(
      p.src.slice(p.pos, p.pos + 200).join(""),
    );
    if (!m) fail(p, "(?<", "invalid group name");
    if (p.names.has(m[1])) fail(p, "(?<", `duplicate group name ${m[1]}`);
    p.names.add(m[1]);
    p.pos += Array.from(m[0]).length;
  } else if (lookingAt(p, "(?")) unsupported(p, "inline modifiers (?flags:");
  else p.pos++;
  if (++p.depth > MAX_DEPTH) fail(p, "(", `groups nested deeper than ${MAX_DEPTH}`);
  const node = parseAlternation(p);
  p.depth--;
  if (peek(p) !== ")") fail(p, "(", "unterminated group");
  p.pos++;
  return node;
}

// Escapes common to atoms and classes; `undefined` means "not one of those".
function parseCommonEscape(p: Parser, inClass: boolean): RegexNode | undefined {
  const c = peek(p);
  if (c === undefined) fail(p, "\\", "\\ at end of pattern");
  const simple: Record<string, number> = { n: 10, t: 9, r: 13, f: 12, v: 11 };
  if (c in simple) return p.pos++, single(simple[c]);
  const classes: Record<string, CharSet> = {
    d: DIGIT,
    D: complementSet(DIGIT),
    w: WORD,
    W: complementSet(WORD),
    s: SPACE,
    S: complementSet(SPACE),
  };
  if (c in classes) return p.pos++, chars(classes[c]);
  if (c === "0") {
    if (/[0-9]/.test(peek(p, 1) ?? "")) unsupported(p, "legacy octal escape \\0N");
    return p.pos++, single(0);
  }
  if (/[1-9]/.test(c)) {
    unsupported(p, inClass ? `octal escape \\${c} in a class` : `backreference \\${c}`);
  }
  if (c === "x") {
    const h = p.src.slice(p.pos + 1, p.pos + 3).join("");
    if (!/^[0-9a-fA-F]{2}$/.test(h)) fail(p, "\\x", "\\x needs two hex digits");
    p.pos += 3;
    return single(parseInt(h, 16));
  }
  if (c === "u") {
    if (peek(p, 1) === "{") unsupported(p, "\\u{...} (needs the u flag)");
    const unit = hex4(p, p.pos + 1);
    if (unit === undefined) fail(p, "\\u", "\\u needs four hex digits");
    p.pos += 5;
    // A surrogate pair spelled as two escapes is one character.
    if (unit >= 0xd800 && unit <= 0xdbff && peek(p) === "\\" && peek(p, 1) === "u") {
      const low = hex4(p, p.pos + 2);
      if (low !== undefined && low >= 0xdc00 && low <= 0xdfff) {
        p.pos += 6;
        return single(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00));
      }
    }
    return single(unit);
  }
  if (c === "c") {
    const l = peek(p, 1) ?? "";
    if (!/^[A-Za-z]$/.test(l)) fail(p, "\\c", "\\c needs a letter");
    p.pos += 2;
    return single(l.codePointAt(0)! % 32);
  }
  if (c === "p" || c === "P") unsupported(p, `unicode property escape \\${c}{...}`);
  if (c === "k") unsupported(p, "backreference \\k<name>");
  return undefined;
}

function hex4(p: Parser, at: number): number | undefined {
  const h = p.src.slice(at, at + 4).join("");
  return /^[0-9a-fA-F]{4}$/.test(h) ? parseInt(h, 16) : undefined;
}

function identityEscape(p: Parser): RegexNode {
  const c = peek(p)!;
  if (/[A-Za-z0-9]/.test(c)) fail(p, `\\${c}`, `unknown escape \\${c}`);
  p.pos++;
  return single(c.codePointAt(0)!);
}

function parseAtomEscape(p: Parser): RegexNode {
  p.pos++;
  if (peek(p) === "b") unsupported(p, "word boundary \\b");
  if (peek(p) === "B") unsupported(p, "non-word boundary \\B");
  return parseCommonEscape(p, false) ?? identityEscape(p);
}

function parseClass(p: Parser): RegexNode {
  const start = p.pos;
  p.pos++;
  let negated = false;
  if (peek(p) === "^") negated = true, p.pos++;
  const parts: CharSet[] = [];
  while (peek(p) !== "]") {
    if (p.pos >= p.src.length) {
      p.pos = start;
      fail(p, "[", "unterminated character class");
    }
    const lo = parseClassAtom(p);
    if (peek(p) === "-" && peek(p, 1) !== "]" && peek(p, 1) !== undefined) {
      p.pos++;
      const hi = parseClassAtom(p);
      if (isSingle(lo) && isSingle(hi)) {
        if (lo[0][0] > hi[0][0]) fail(p, "[", "range out of order in character class");
        parts.push([[lo[0][0], hi[0][0]]]);
      } else {
        // Annex B: a range with a class escape at either end is just the three members.
        parts.push(lo, hi, charSet("-"));
      }
    } else parts.push(lo);
  }
  p.pos++;
  const set = unionSets(...parts);
  return chars(negated ? complementSet(set) : set);
}

function isSingle(s: CharSet): boolean {
  return s.length === 1 && s[0][0] === s[0][1];
}

function parseClassAtom(p: Parser): CharSet {
  const c = peek(p)!;
  if (c !== "\\") {
    p.pos++;
    return charSet(c);
  }
  p.pos++;
  if (peek(p) === "b") return p.pos++, charSet(8);
  if (peek(p) === "-") return p.pos++, charSet("-");
  const node = parseCommonEscape(p, true) ?? identityEscape(p);
  return (node as { set: CharSet }).set;
}

// ---------------------------------------------------------------- to grammar

export function regexNullable(n: RegexNode): boolean {
  switch (n.t) {
    case "chars":
      return false;
    case "seq":
      return n.items.every(regexNullable);
    case "alt":
      return n.alts.some(regexNullable);
    case "rep":
      return n.min === 0 || regexNullable(n.node);
  }
}

// The same language minus the empty string (undefined: nothing left). Needed because llama.cpp
// rejects `x*` when x can be empty (left recursion), and bounded ones are needlessly ambiguous.
function nonEmpty(n: RegexNode): RegexNode | undefined {
  if (!regexNullable(n)) return n;
  switch (n.t) {
    case "chars":
      return n;
    case "seq": {
      // All items are nullable: the first non-empty item decides where the match starts.
      const alts: RegexNode[] = [];
      n.items.forEach((item, i) => {
        const ne = nonEmpty(item);
        if (ne) alts.push({ t: "seq", items: [ne, ...n.items.slice(i + 1)] });
      });
      return alts.length ? { t: "alt", alts } : undefined;
    }
    case "alt": {
      const alts = n.alts.map(nonEmpty).filter((x): x is RegexNode => !!x);
      return alts.length ? { t: "alt", alts } : undefined;
    }
    case "rep": {
      if (n.max === 0) return undefined;
      const inner = nonEmpty(n.node);
      return inner ? { t: "rep", node: inner, min: 1, max: n.max } : undefined;
    }
  }
}

/**
 * Converts a regex tree to a grammar expression, mapping every character set through `char`
 * (plain classes for bare text; JSON string encodings for schema patterns).
 */
export function regexToExpr(n: RegexNode, char: (set: CharSet) => Expr = cls): Expr {
  switch (n.t) {
    case "chars":
      return char(n.set);
    case "seq":
      return seq(...n.items.map((x) => regexToExpr(x, char)));
    case "alt":
      return alt(...n.alts.map((x) => regexToExpr(x, char)));
    case "rep": {
      if (!regexNullable(n.node)) return rep(regexToExpr(n.node, char), n.min, n.max);
      // x{m,n} with x able to match empty equals (x minus empty){0,n}.
      const ne = nonEmpty(n.node);
      return ne ? rep(regexToExpr(ne, char), 0, n.max) : EMPTY;
    }
  }
}

/** Fewest and most code points a match can have (`max` may be Infinity). */
export function regexLength(n: RegexNode): { min: number; max: number } {
  switch (n.t) {
    case "chars":
      return n.set.length ? { min: 1, max: 1 } : { min: Infinity, max: -Infinity };
    case "seq":
      return n.items.map(regexLength).reduce(
        (a, b) => ({ min: a.min + b.min, max: a.max + b.max }),
        { min: 0, max: 0 },
      );
    case "alt":
      return n.alts.map(regexLength).reduce(
        (a, b) => ({ min: Math.min(a.min, b.min), max: Math.max(a.max, b.max) }),
        { min: Infinity, max: -Infinity },
      );
    case "rep": {
      const l = regexLength(n.node);
      if (n.max === 0 || l.max === -Infinity) return { min: n.min === 0 ? 0 : l.min, max: 0 };
      return { min: n.min * l.min, max: l.max === 0 ? 0 : n.max * l.max };
    }
  }
}

/**
 * The branches as one full-match tree. In search mode (JSON Schema `pattern`) an unanchored side
 * may be surrounded by anything: `^a|b` becomes `a[^]*|[^]*b[^]*`.
 */
export function branchesToNode(branches: RegexBranch[], search: boolean): RegexNode {
  const any: RegexNode = { t: "rep", node: chars(ANY_CHAR), min: 0, max: Infinity };
  return {
    t: "alt",
    alts: branches.map((b) => ({
      t: "seq",
      items: [
        ...(search && !b.anchoredStart ? [any] : []),
        b.node,
        ...(search && !b.anchoredEnd ? [any] : []),
      ],
    })),
  };
}

/** A grammar whose root matches exactly the strings `pattern` matches in full. */
export function regexToGbnf(pattern: string, flags = ""): string {
  if (flags !== "") {
    throw constraintError("flags", `regex flags are not supported (got ${JSON.stringify(flags)})`);
  }
  const expr = regexToExpr(branchesToNode(parseRegex(pattern), false));
  if (expr === NEVER || expr.k === "never") {
    throw constraintError("regex", `regex ${JSON.stringify(pattern)} matches no string`);
  }
  return render(newGrammar(), expr);
}
