/**
 * Lark grammars (the `format: {type: "grammar", syntax: "lark"}` of an OpenAI `custom` tool, e.g.
 * Codex's `apply_patch`) to GBNF, read as a context-free grammar over characters: rules and
 * terminals alike become GBNF rules, from `start`.
 *
 * Supported: rule and terminal definitions (`name:`, `?name:`, `!name:`, `NAME:`), alternatives
 * (also on `|` continuation lines), grouping `( )`, optional `[ ]`, `?` `*` `+`, `~ n` and
 * `~ n..m`, string literals with Python escapes, ranges `"a".."z"`, regex terminals `/.../`
 * (the ECMAScript subset `regex.ts` reads; `.` there also excludes `\r`, so the grammar accepts a
 * subset of what Python's `.` would), aliases `-> name` (tree shaping only, ignored), `//`
 * comments and `%import common.NAME` / `%import common (A, B)` for the common terminals listed in
 * `COMMON`. Everything else throws a {@link ConstraintError} naming the construct: `%ignore`
 * (implicit whitespace between tokens), other directives, priorities, templates, flags
 * (`"x"i`, `/x/i`), left recursion, and a `*`/`+` over something that can be empty.
 *
 * Lark's lexer (longest match, priorities) is not modelled: a text the grammar accepts always
 * parses as a CFG; for grammars like `apply_patch`, whose terminals end at a fixed newline, that is
 * the same language.
 *
 * @example
 * ```ts
 * import { larkToGbnf } from "./lark.ts";
 * larkToGbnf('start: "x" NAME+ LF\nNAME: /[a-z]/\n%import common.LF');
 * // a GBNF grammar whose root matches "xab\n"
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import {
  alt,
  type CharSet,
  charSet,
  cls,
  define,
  type Expr,
  type Grammar,
  newGrammar,
  ref,
  render,
  rep,
  reserve,
  seq,
} from "./gbnf.ts";
import { branchesToNode, parseRegex, type RegexNode, regexNullable, regexToExpr } from "./regex.ts";
import { isConstraintError } from "./error.ts";

/**
 * The JSON Schema keyword (Hearth's own) that constrains a string's content by a Lark grammar:
 * `{type: "string", "x-hearth-lark": "start: ..."}`; `json_schema.ts` compiles it with
 * {@link larkExpr} over the JSON-escaped characters.
 */
export const LARK_KEYWORD = "x-hearth-lark";

/** A parsed Lark expression. */
type Node =
  | { t: "seq"; xs: Node[] }
  | { t: "alt"; xs: Node[] }
  | { t: "rep"; x: Node; min: number; max: number }
  | { t: "str"; s: string }
  | { t: "range"; lo: number; hi: number }
  | { t: "re"; node: RegexNode; src: string }
  | { t: "ref"; name: string };

/** Lark's `common.lark` terminals that this front end knows, as Lark source. */
const COMMON: Record<string, string> = {
  LF: '"\\n"',
  CR: '"\\r"',
  NEWLINE: "(CR? LF)+",
  WS_INLINE: '(" " | /\\t/)+',
  WS: "/[ \\t\\f\\r\\n]/+",
  DIGIT: '"0".."9"',
  HEXDIGIT: '"a".."f" | "A".."F" | DIGIT',
  INT: "DIGIT+",
  SIGNED_INT: '["+"|"-"] INT',
  LCASE_LETTER: '"a".."z"',
  UCASE_LETTER: '"A".."Z"',
  LETTER: "UCASE_LETTER | LCASE_LETTER",
  WORD: "LETTER+",
  CNAME: '("_" | LETTER) ("_" | LETTER | DIGIT)*',
};

// ---------------------------------------------------------------- lexing

type Tok =
  | { k: "name"; v: string; at: number }
  | { k: "str"; v: string; flags: string; at: number }
  | { k: "re"; v: string; flags: string; at: number }
  | { k: "num"; v: number; at: number }
  | { k: "punct"; v: string; at: number }
  | { k: "nl"; at: number }
  | { k: "directive"; v: string; at: number };

function fail(construct: string, message: string, at?: number): never {
  throw constraintError(construct, `lark: ${message}`, at === undefined ? undefined : `${at}`);
}

function lex(src: string): Tok[] {
  const out: Tok[] = [];
  let i = 0;
  let depth = 0;
  while (i < src.length) {
    const c = src[i];
    if (c === " " || c === "\t" || c === "\r") {
      i++;
    } else if (c === "\n") {
      out.push({ k: "nl", at: i });
      i++;
    } else if (src.startsWith("//", i)) {
      while (i < src.length && src[i] !== "\n") i++;
    } else if (c === "%") {
      const end = src.indexOf("\n", i);
      const line = src.slice(i, end < 0 ? src.length : end).replace(/\s*\/\/.*$/, "");
      out.push({ k: "directive", v: line.trim(), at: i });
      i = end < 0 ? src.length : end;
    } else if (c === '"') {
      const at = i;
      let s = "";
      i++;
      while (i < src.length && src[i] !== '"') {
        if (src[i] === "\n") fail("string", "unterminated string literal", at);
        if (src[i] === "\\") {
          const [ch, len] = stringEscape(src, i);
          s += ch;
          i += len;
        } else s += src[i++];
      }
      if (i >= src.length) fail("string", "unterminated string literal", at);
      i++;
      let flags = "";
      while (/[a-z]/.test(src[i] ?? "")) flags += src[i++];
      out.push({ k: "str", v: s, flags, at });
    } else if (c === "/" && src[i + 1] !== "/") {
      const at = i;
      let body = "";
      i++;
      let inClass = false;
      while (i < src.length && (src[i] !== "/" || inClass)) {
        if (src[i] === "\n") fail("regexp", "unterminated regular expression", at);
        if (src[i] === "\\" && src[i + 1] === "/") {
          body += "/";
          i += 2;
          continue;
        }
        if (src[i] === "\\") {
          body += src[i] + (src[i + 1] ?? "");
          i += 2;
          continue;
        }
        if (src[i] === "[") inClass = true;
        else if (src[i] === "]") inClass = false;
        body += src[i++];
      }
      if (i >= src.length) fail("regexp", "unterminated regular expression", at);
      i++;
      let flags = "";
      while (/[a-z]/.test(src[i] ?? "")) flags += src[i++];
      out.push({ k: "re", v: body, flags, at });
    } else if (
      /[A-Za-z_]/.test(c) ||
      (/[?!]/.test(c) && lineStart(out) && /[A-Za-z_]/.test(src[i + 1] ?? ""))
    ) {
      // `?rule:` / `!rule:` (inline, keep tokens) only where a definition starts.
      const m = /^[?!]?[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i))!;
      out.push({ k: "name", v: m[0], at: i });
      i += m[0].length;
    } else if (/[0-9]/.test(c)) {
      const m = /^[0-9]+/.exec(src.slice(i))!;
      out.push({ k: "num", v: Number(m[0]), at: i });
      i += m[0].length;
    } else if (src.startsWith("->", i) || src.startsWith("..", i)) {
      out.push({ k: "punct", v: src.slice(i, i + 2), at: i });
      i += 2;
    } else if ("():|[]?*+~{},.".includes(c)) {
      if (c === "(" || c === "[") depth++;
      if (c === ")" || c === "]") depth--;
      out.push({ k: "punct", v: c, at: i });
      i++;
    } else {
      fail(c, `unexpected character ${JSON.stringify(c)}`, i);
    }
  }
  if (depth !== 0) fail("(", "unbalanced brackets");
  return out;
}

function lineStart(out: Tok[]): boolean {
  const last = out[out.length - 1];
  return !last || last.k === "nl" || last.k === "directive";
}

const SIMPLE_ESCAPES: Record<string, string> = {
  n: "\n",
  t: "\t",
  r: "\r",
  f: "\f",
  v: "\v",
  a: "\x07",
  b: "\b",
  "0": "\0",
  "\\": "\\",
  '"': '"',
  "'": "'",
};

/** One escape inside a string literal (Python's rules): the character and the source length. */
function stringEscape(src: string, i: number): [string, number] {
  const e = src[i + 1];
  if (e in SIMPLE_ESCAPES) return [SIMPLE_ESCAPES[e], 2];
  const hex = e === "x" ? 2 : e === "u" ? 4 : e === "U" ? 8 : 0;
  if (hex) {
    const digits = src.slice(i + 2, i + 2 + hex);
    if (!new RegExp(`^[0-9a-fA-F]{${hex}}$`).test(digits)) {
      fail("string", `bad escape \\${e}${digits}`, i);
    }
    return [String.fromCodePoint(parseInt(digits, 16)), 2 + hex];
  }
  // Python keeps an unknown escape as it is.
  return ["\\" + e, 2];
}

// ---------------------------------------------------------------- parsing

type Defs = Map<string, { node: Node; at: number }>;

function parse(src: string): Defs {
  const toks = lex(src);
  const defs: Defs = new Map();
  let p = 0;
  const peek = () => toks[p];
  const isPunct = (v: string) => {
    const t = toks[p];
    return t?.k === "punct" && t.v === v;
  };
  // Newlines end a statement, except before a `|` continuation and inside brackets.
  let depth = 0;
  const skipLayout = () => {
    while (toks[p]?.k === "nl") {
      let q = p;
      while (toks[q]?.k === "nl") q++;
      const next = toks[q];
      if (depth > 0 || (next?.k === "punct" && next.v === "|")) p = q;
      else break;
    }
  };
  const expect = (v: string) => {
    skipLayout();
    if (!isPunct(v)) fail(v, `expected "${v}"`, peek()?.at);
    p++;
  };

  const expansions = (): Node => {
    const xs = [aliasExpansion()];
    skipLayout();
    while (isPunct("|")) {
      p++;
      xs.push(aliasExpansion());
      skipLayout();
    }
    return xs.length === 1 ? xs[0] : { t: "alt", xs };
  };
  const aliasExpansion = (): Node => {
    const e = expansion();
    skipLayout();
    if (isPunct("->")) {
      p++;
      if (peek()?.k !== "name") fail("->", "an alias needs a name", peek()?.at);
      p++;
    }
    return e;
  };
  const expansion = (): Node => {
    const xs: Node[] = [];
    while (true) {
      skipLayout();
      const t = peek();
      if (!t || t.k === "nl" || t.k === "directive") break;
      if (t.k === "punct" && ["|", ")", "]", "->"].includes(t.v)) break;
      // `name:` starts the next definition (only reachable without a newline: malformed).
      xs.push(expr());
    }
    return xs.length === 1 ? xs[0] : { t: "seq", xs };
  };
  const expr = (): Node => {
    let a = atom();
    while (true) {
      const t = peek();
      if (t?.k !== "punct") break;
      if (t.v === "?") a = { t: "rep", x: a, min: 0, max: 1 };
      else if (t.v === "*") a = { t: "rep", x: a, min: 0, max: Infinity };
      else if (t.v === "+") a = { t: "rep", x: a, min: 1, max: Infinity };
      else if (t.v === "~") {
        p++;
        const lo = peek();
        if (lo?.k !== "num") fail("~", "`~` needs a count", lo?.at);
        let hi = lo.v;
        if (toks[p + 1]?.k === "punct" && (toks[p + 1] as { v: string }).v === "..") {
          const h = toks[p + 2];
          if (h?.k !== "num") fail("~", "`~ n..m` needs an upper count", h?.at);
          hi = h.v;
          p += 2;
        }
        if (hi < lo.v) fail("~", `empty repetition ~ ${lo.v}..${hi}`, lo.at);
        a = { t: "rep", x: a, min: lo.v, max: hi };
      } else break;
      p++;
    }
    return a;
  };
  const atom = (): Node => {
    const t = peek();
    if (!t) fail("expression", "unexpected end of grammar");
    if (t.k === "punct" && (t.v === "(" || t.v === "[")) {
      p++;
      depth++;
      const inner = expansions();
      depth--;
      expect(t.v === "(" ? ")" : "]");
      return t.v === "(" ? inner : { t: "rep", x: inner, min: 0, max: 1 };
    }
    if (t.k === "str") {
      if (t.flags) fail(`"..."${t.flags}`, `string flags (${t.flags}) are not supported`, t.at);
      p++;
      if (isPunct("..")) {
        p++;
        const hi = peek();
        if (hi?.k !== "str" || [...hi.v].length !== 1 || [...t.v].length !== 1) {
          fail("..", "a range needs two one-character strings", t.at);
        }
        p++;
        return { t: "range", lo: t.v.codePointAt(0)!, hi: hi.v.codePointAt(0)! };
      }
      return { t: "str", s: t.v };
    }
    if (t.k === "re") {
      if (t.flags) fail(`/.../${t.flags}`, `regexp flags (${t.flags}) are not supported`, t.at);
      p++;
      try {
        return { t: "re", node: branchesToNode(parseRegex(t.v), false), src: t.v };
      } catch (e) {
        if (isConstraintError(e)) fail(e.keyword, `in /${t.v}/: ${e.message}`, t.at);
        throw e;
      }
    }
    if (t.k === "name") {
      if (/^[?!]/.test(t.v)) fail(t.v, `unexpected ${t.v}`, t.at);
      p++;
      if (isPunct("{")) fail("template", `templates (${t.v}{...}) are not supported`, t.at);
      return { t: "ref", name: t.v };
    }
    const what = t.k === "punct" ? t.v : t.k;
    fail(what, `unexpected ${JSON.stringify(what)}`, t.at);
  };

  while (p < toks.length) {
    const t = toks[p];
    if (t.k === "nl") {
      p++;
      continue;
    }
    if (t.k === "directive") {
      directive(t.v, t.at, defs);
      p++;
      continue;
    }
    if (t.k !== "name") fail("definition", "expected a rule or terminal name", t.at);
    const name = t.v.replace(/^[?!]/, "");
    p++;
    if (isPunct(".")) fail("priority", `priorities (${name}.N) are not supported`, t.at);
    if (isPunct("{")) fail("template", `templates (${name}{...}) are not supported`, t.at);
    if (!isPunct(":")) fail(":", `expected ":" after ${name}`, t.at);
    p++;
    if (defs.has(name)) fail(name, `${name} is defined twice`, t.at);
    const node = expansions();
    defs.set(name, { node, at: t.at });
    const end = peek();
    if (end && end.k !== "nl" && end.k !== "directive") {
      fail("definition", `unexpected text after the definition of ${name}`, end.at);
    }
  }
  return defs;
}

function directive(line: string, at: number, defs: Defs): void {
  const m =
    /^%import\s+common\s*(?:\.\s*([A-Z_][A-Z0-9_]*)(?:\s*->\s*([A-Za-z_]\w*))?|\(([^)]*)\))\s*$/
      .exec(line);
  if (!m) {
    const word = /^%\w+/.exec(line)?.[0] ?? line;
    fail(
      word,
      word === "%import"
        ? `only %import common.NAME is supported (got ${JSON.stringify(line)})`
        : `${word} is not supported`,
      at,
    );
  }
  const names = m[1] ? [[m[1], m[2] ?? m[1]]] : m[3].split(",").map((s) => [s.trim(), s.trim()]);
  for (const [name, as] of names) importCommon(name, as, at, defs);
}

function importCommon(name: string, as: string, at: number, defs: Defs): void {
  if (defs.has(as)) return;
  const body = COMMON[name];
  if (!body) {
    fail(`common.${name}`, `common.${name} is not known (known: ${Object.keys(COMMON)})`, at);
  }
  const inner = parse(`${as}: ${body}`);
  defs.set(as, inner.get(as)!);
  // Its own references (DIGIT, LF, ...) come from common.lark too.
  for (const r of refs(inner.get(as)!.node)) if (!defs.has(r)) importCommon(r, r, at, defs);
}

function refs(n: Node, out = new Set<string>()): Set<string> {
  if (n.t === "ref") out.add(n.name);
  else if (n.t === "seq" || n.t === "alt") n.xs.forEach((x) => refs(x, out));
  else if (n.t === "rep") refs(n.x, out);
  return out;
}

// ---------------------------------------------------------------- checks

function nullableNode(n: Node, nul: Map<string, boolean>): boolean {
  switch (n.t) {
    case "seq":
      return n.xs.every((x) => nullableNode(x, nul));
    case "alt":
      return n.xs.some((x) => nullableNode(x, nul));
    case "rep":
      return n.min === 0 || nullableNode(n.x, nul);
    case "str":
      return n.s === "";
    case "range":
      return false;
    case "re":
      return regexNullable(n.node);
    case "ref":
      return nul.get(n.name) ?? false;
  }
}

/** Rules that can stand first in `n` (after nullable items). */
function leftRefs(n: Node, nul: Map<string, boolean>, out: Set<string>): void {
  switch (n.t) {
    case "seq":
      for (const x of n.xs) {
        leftRefs(x, nul, out);
        if (!nullableNode(x, nul)) break;
      }
      break;
    case "alt":
      n.xs.forEach((x) => leftRefs(x, nul, out));
      break;
    case "rep":
      leftRefs(n.x, nul, out);
      break;
    case "ref":
      out.add(n.name);
  }
}

function check(defs: Defs): void {
  if (!defs.has("start")) fail("start", "the grammar has no `start` rule");
  for (const [name, d] of defs) {
    for (const r of refs(d.node)) {
      if (!defs.has(r)) fail(r, `${name} refers to ${r}, which is not defined`, d.at);
    }
  }
  const nul = new Map<string, boolean>();
  for (let changed = true; changed;) {
    changed = false;
    for (const [name, d] of defs) {
      if (!nul.get(name) && nullableNode(d.node, nul)) nul.set(name, changed = true);
    }
  }
  const emptyLoop = (n: Node, name: string): void => {
    if (n.t === "rep") {
      if (n.max === Infinity && nullableNode(n.x, nul)) {
        fail("*", `${name}: a repetition of something that can be empty`, defs.get(name)!.at);
      }
      emptyLoop(n.x, name);
    } else if (n.t === "seq" || n.t === "alt") n.xs.forEach((x) => emptyLoop(x, name));
  };
  for (const [name, d] of defs) emptyLoop(d.node, name);
  // Left recursion (GBNF's parser refuses it): a rule reachable from itself in first position.
  const left = new Map<string, Set<string>>();
  for (const [name, d] of defs) {
    const s = new Set<string>();
    leftRefs(d.node, nul, s);
    left.set(name, s);
  }
  for (const name of defs.keys()) {
    const seen = new Set<string>();
    const todo = [...left.get(name)!];
    while (todo.length) {
      const r = todo.pop()!;
      if (r === name) {
        fail("left recursion", `${name} is left-recursive`, defs.get(name)!.at);
      }
      if (seen.has(r)) continue;
      seen.add(r);
      todo.push(...left.get(r)!);
    }
  }
}

// ---------------------------------------------------------------- to grammar

/**
 * The Lark grammar `source` as an expression (a reference to its `start` rule) whose rules are
 * added to `g`, every character written through `char` (plain classes for bare text; e.g. the
 * JSON string encoding when the text sits inside a JSON string). Throws a ConstraintError for
 * what this front end does not read.
 */
export function larkExpr(
  g: Grammar,
  source: string,
  char: (set: CharSet) => Expr = cls,
  base = "lark",
): Expr {
  const defs = parse(source);
  check(defs);
  const names = new Map<string, string>();
  // Only what `start` reaches becomes a rule (an unused %import stays out).
  const reach = new Set<string>(["start"]);
  for (const todo = ["start"]; todo.length;) {
    for (const r of refs(defs.get(todo.pop()!)!.node)) {
      if (!reach.has(r)) reach.add(r), todo.push(r);
    }
  }
  for (const name of reach) names.set(name, reserve(g, `${base}-${name}`));
  const toExpr = (n: Node): Expr => {
    switch (n.t) {
      case "seq":
        return seq(...n.xs.map(toExpr));
      case "alt":
        return alt(...n.xs.map(toExpr));
      case "rep":
        return rep(toExpr(n.x), n.min, n.max);
      case "str":
        return seq(...[...n.s].map((c) => char(charSet(c))));
      case "range":
        return char(charSet([n.lo, n.hi]));
      case "re":
        return regexToExpr(n.node, char);
      case "ref":
        return ref(names.get(n.name)!);
    }
  };
  for (const name of reach) {
    const body = toExpr(defs.get(name)!.node);
    if (body.k === "never") fail(name, `${name} matches nothing`, defs.get(name)!.at);
    define(g, names.get(name)!, body);
  }
  return ref(names.get("start")!);
}

/** A GBNF grammar whose root matches exactly the texts the Lark grammar derives from `start`. */
export function larkToGbnf(source: string): string {
  const g = newGrammar();
  return render(g, larkExpr(g, source));
}
