/**
 * Trigger patterns of lazy grammars, checked and mirrored in JS. llama.cpp compiles each pattern
 * with `std::regex` (ECMAScript flavour, over bytes) inside
 * `llama_sampler_init_grammar_lazy_patterns`, and a pattern it cannot compile throws a C++
 * exception through the C ABI, which aborts the whole process. So patterns are refused here
 * unless they stay inside a subset both engines read the same way; the compiled JS twin then
 * lets the engine see a trigger coming before llama.cpp replays text into the grammar (replaying
 * text the grammar rejects throws too).
 *
 * Text is matched as latin1 strings of the raw UTF-8 bytes (one char per byte), and patterns are
 * rewritten the same way, so a JS match sees exactly the bytes `std::regex<char>` sees.
 *
 * @example
 * ```ts
 * import { compileTriggerPatterns, newTriggerWatch, peekTrigger } from "./triggers.ts";
 * compileTriggerPatterns(["[\\s\\S]*?(<tool_call>)[\\s\\S]*"]); // [RegExp]
 * compileTriggerPatterns(["(?<name>x)"]); // throws: named groups are not supported
 * const w = newTriggerWatch({ patterns: ["<call>"], tokens: [] });
 * peekTrigger(w, 7, new TextEncoder().encode("<call>{")); // replay [{ token: 7, from: 0, ... }]
 * ```
 * @module
 */

export type GrammarTriggers = { patterns: string[]; tokens: number[] };

const SIMPLE_ESCAPES = new Set("dDwWbBnrtfv".split(""));
const PUNCT = new Set("\\^$.|?*+()[]{}/-".split(""));
const HEX2 = /^[0-9a-fA-F]{2}$/;
// \s and \S as explicit byte ranges: JS's \s also matches U+00A0 (a UTF-8 continuation byte
// here), std::regex's "C" locale does not.
const SPACE = "\\x09-\\x0d\\x20";
const NON_SPACE = "\\x00-\\x08\\x0e-\\x1f\\x21-\\xff";

function utf8Latin1(s: string): string {
  let out = "";
  for (const b of new TextEncoder().encode(s)) out += String.fromCharCode(b);
  return out;
}

function latin1Escape(ch: string): string {
  // A byte as a JS regex atom: printable ASCII stays itself, the rest is \xHH.
  const c = ch.charCodeAt(0);
  return c >= 0x20 && c < 0x7f ? ch : "\\x" + c.toString(16).padStart(2, "0");
}

/**
 * Rewrites one trigger pattern into a JS RegExp source over latin1 bytes, or throws naming the
 * construct that std::regex and JS would read differently (or that one of them rejects).
 */
function translate(p: string): string {
  if (p.includes("\0")) throw new Error("a NUL character cannot be passed to llama.cpp");
  const src = utf8Latin1(p);
  let out = "";
  let i = 0;
  // What the last item was, for deciding whether a quantifier may follow it.
  let last: "none" | "atom" | "lookaround" | "quant" | "lazy" = "none";
  const groups: ("plain" | "lookaround")[] = [];
  const bad = (what: string) => {
    throw new Error(`${what} (at offset ${i}) is not supported in trigger patterns`);
  };
  while (i < src.length) {
    const c = src[i];
    if (c === "\\") {
      const n = src[i + 1];
      if (n === undefined) bad("a trailing backslash");
      if (n === "s") out += `[${SPACE}]`;
      else if (n === "S") out += `[${NON_SPACE}]`;
      else if (SIMPLE_ESCAPES.has(n) || PUNCT.has(n)) out += "\\" + n;
      else if (n === "x" && HEX2.test(src.slice(i + 2, i + 4))) {
        out += src.slice(i, i + 4);
        i += 2;
      } else bad(`the escape \\${n}`);
      i += 2;
      last = n === "b" || n === "B" ? "lookaround" : "atom";
      continue;
    }
    if (c === "[") {
      out += "[";
      i++;
      if (src[i] === "^") {
        out += "^";
        i++;
      }
      if (src[i] === "]") bad("a class that starts with ] (or is empty)");
      let prev = ""; // the previous item of this class: "-", "escape" (\d \w ...) or other
      while (i < src.length && src[i] !== "]") {
        const d = src[i];
        if (d === "[" && ":=.".includes(src[i + 1] ?? "")) bad("a POSIX class ([:name:])");
        if (d === "-" && prev === "escape" && src[i + 1] !== "]") {
          bad("a range from a class escape");
        }
        if (d === "\\") {
          const n = src[i + 1];
          const classEscape = "dDwWsS".includes(n ?? "");
          if (classEscape && prev === "-") bad("a range to a class escape");
          prev = classEscape ? "escape" : "other";
          if (n === "s") out += SPACE;
          else if (n === "S") out += NON_SPACE;
          else if ("dDwWnrtfv".includes(n ?? "") || PUNCT.has(n ?? "")) out += "\\" + n;
          else if (n === "x" && HEX2.test(src.slice(i + 2, i + 4))) {
            out += src.slice(i, i + 4);
            i += 2;
          } else bad(`the escape \\${n ?? ""} inside a class`);
          i += 2;
          continue;
        }
        prev = d === "-" && out.at(-1) !== "[" && out.at(-1) !== "^" ? "-" : "other";
        out += d === "[" ? "\\[" : latin1Escape(d);
        i++;
      }
      if (src[i] !== "]") bad("an unclosed class");
      out += "]";
      i++;
      last = "atom";
      continue;
    }
    if (c === "(") {
      if (src[i + 1] === "?") {
        const kind = src.slice(i, i + 3);
        if (kind === "(?:") groups.push("plain");
        else if (kind === "(?=" || kind === "(?!") groups.push("lookaround");
        else bad(`the group ${kind}`);
        out += kind;
        i += 3;
      } else {
        groups.push("plain");
        out += "(";
        i++;
      }
      last = "none";
      continue;
    }
    if (c === ")") {
      const g = groups.pop();
      if (g === undefined) bad("an unbalanced )");
      out += ")";
      i++;
      last = g === "lookaround" ? "lookaround" : "atom";
      continue;
    }
    if (c === "*" || c === "+" || c === "?" || c === "{") {
      let q = c;
      if (c === "{") {
        const m = /^\{(\d+)(,(\d*))?\}/.exec(src.slice(i));
        if (!m) bad("a { that is not a {n}, {n,} or {n,m} quantifier");
        if (m![3] && Number(m![3]) < Number(m![1])) bad("a {n,m} quantifier with m < n");
        q = m![0];
      }
      if (last === "quant" && c === "?") {
        out += "?"; // lazy quantifier; a quantifier after it is refused below
        i++;
        last = "lazy";
        continue;
      }
      if (last !== "atom") bad(`a quantifier ${q} with nothing (quantifiable) before it`);
      out += q;
      i += q.length;
      last = "quant";
      continue;
    }
    if (c === "}" || c === "]") bad(`an unescaped ${c}`);
    if (c === "^" || c === "$") {
      out += c;
      i++;
      last = "lookaround";
      continue;
    }
    if (c === "|") {
      out += "|";
      i++;
      last = "none";
      continue;
    }
    out += c === "." ? "." : c === "/" ? "\\/" : latin1Escape(c);
    i++;
    last = "atom";
  }
  if (groups.length) bad("an unclosed (");
  return out;
}

/** Compiles trigger patterns into their JS twins; throws naming the first one refused. */
export function compileTriggerPatterns(patterns: string[]): RegExp[] {
  return patterns.map((p, k) => {
    try {
      return new RegExp(translate(p), "d");
    } catch (e) {
      throw new Error(
        `grammar trigger pattern ${k} (${JSON.stringify(p)}): ${(e as Error).message}`,
      );
    }
  });
}

/** Where llama.cpp would start feeding the grammar: its first non-empty group, else the match. */
function matchStart(re: RegExp, text: string): number {
  const m = re.exec(text);
  if (!m) return -1;
  for (let g = 1; g < m.length; g++) {
    const span = m.indices![g];
    if (span && span[1] > span[0]) return span[0];
  }
  return m.index;
}

/** Mirror of a lazy grammar's trigger state (llama-grammar.cpp `llama_grammar_accept_impl`). */
export type TriggerWatch = {
  awaiting: boolean;
  regexps: RegExp[];
  tokens: number[];
  /** Pieces accepted while awaiting, as latin1 bytes, and each token's span in it. */
  buffer: string;
  spans: { token: number; start: number; end: number }[];
};

export function newTriggerWatch(t: GrammarTriggers): TriggerWatch {
  return {
    awaiting: true,
    regexps: compileTriggerPatterns(t.patterns),
    tokens: t.tokens,
    buffer: "",
    spans: [],
  };
}

/** One token llama.cpp would replay into the grammar: `bytes` may be the tail of its piece. */
export type Replayed = { token: number; bytes: Uint8Array; whole: boolean };

export type Peek = { buffer: string; replay?: Replayed[] };

function bytesOf(latin1: string): Uint8Array {
  const b = new Uint8Array(latin1.length);
  for (let i = 0; i < latin1.length; i++) b[i] = latin1.charCodeAt(i);
  return b;
}

/**
 * What accepting `token` (whose piece is `piece`, special tokens spelled) would do to an
 * awaiting watch: `replay` lists what the grammar would be fed when it triggers.
 */
export function peekTrigger(w: TriggerWatch, token: number, piece: Uint8Array): Peek {
  if (w.tokens.includes(token)) {
    return { buffer: "", replay: [{ token, bytes: piece, whole: true }] };
  }
  let added = "";
  for (const b of piece) added += String.fromCharCode(b);
  const buffer = w.buffer + added;
  for (const re of w.regexps) {
    const start = matchStart(re, buffer);
    if (start < 0) continue;
    const spans = [...w.spans, { token, start: w.buffer.length, end: buffer.length }];
    const replay: Replayed[] = [];
    for (const s of spans) {
      if (s.end <= start) continue;
      const from = Math.max(s.start, start);
      replay.push({
        token: s.token,
        bytes: bytesOf(buffer.slice(from, s.end)),
        whole: from === s.start,
      });
    }
    return { buffer: "", replay };
  }
  return { buffer };
}

/** Records that `token` was accepted, with the result `peekTrigger` gave for it. */
export function commitTrigger(w: TriggerWatch, token: number, p: Peek): void {
  if (p.replay) {
    w.awaiting = false;
    w.buffer = "";
    w.spans = [];
    return;
  }
  w.spans.push({ token, start: w.buffer.length, end: p.buffer.length });
  w.buffer = p.buffer;
}
