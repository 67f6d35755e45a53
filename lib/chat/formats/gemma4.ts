/**
 * Gemma 4 tool calls: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, one block per call,
 * with arguments in Gemma's own notation rather than JSON: keys bare, strings between `<|"|>`
 * quotes, numbers, `true`/`false`/`null`, `[...]` and `{...}` as in JSON. Reasoning is the
 * thought channel `<|channel>thought\n...<channel|>`.
 *
 * The grammar is compiled from each tool's JSON Schema into that notation: objects (their listed
 * properties, required ones always, in sorted order as the template writes them), strings (enum,
 * const, maxLength, a pattern that is one repeated character class), integers and numbers (small bounded ranges enumerated), booleans, null,
 * arrays (items, minItems/maxItems) and anyOf/oneOf of those. Other keywords (pattern, formats,
 * wide numeric bounds) are not enforced.
 *
 * @example
 * ```ts
 * import { gemma4Format } from "./gemma4.ts";
 * const p = gemma4Format.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('<|tool_call>call:f{city:<|"|>Paris<|"|>,n:3}<tool_call|>'); // args {"city":"Paris","n":3}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import {
  alt,
  type CharSet,
  charSet,
  cls,
  complementSet,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  lit,
  newGrammar,
  opt,
  ref,
  render,
  rep,
  reserve,
  seq,
  subtractSets,
} from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { argumentsSchema, forTool, oneOrMore, prefixPattern } from "./grammar.ts";
import { textWithout } from "./qwen3_coder.ts";
import { newSectionParser, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<|tool_call>";
const CALL = "call:";
const CLOSE = "<tool_call|>";
const QUOTE = '<|"|>';

type Json = Record<string, unknown>;

function isRecord(x: unknown): x is Json {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

const DIGIT = cls(charSet(["0", "9"]));
const INTEGER = seq(
  opt(lit("-")),
  alt(lit("0"), seq(cls(charSet(["1", "9"])), rep(DIGIT, 0, 15))),
);
const NUMBER = seq(
  INTEGER,
  opt(seq(lit("."), rep(DIGIT, 1, 15))),
  opt(seq(cls(charSet("eE")), opt(cls(charSet("+-"))), rep(DIGIT, 1, 3))),
);

/**
 * A pattern that is one character class repeated (`^[A-Za-z ]{1,12}$`, `^[0-9]+$`), the kind
 * tool schemas use for names and codes; anything else is not enforced. `<` is left out of the
 * class so the closing quote cannot be written inside.
 */
function classPattern(pattern: string): { set: CharSet; min: number; max: number } | undefined {
  const m = /^\^\[([^\]\\^][^\]\\]*)\](?:\{(\d+)(?:,(\d+))?\}|(\+)|(\*))\$$/.exec(pattern);
  if (!m) return undefined;
  const pieces: (string | [string, string])[] = [];
  const body = [...m[1]];
  for (let i = 0; i < body.length; i++) {
    if (body[i + 1] === "-" && i + 2 < body.length) {
      pieces.push([body[i], body[i + 2]]);
      i += 2;
    } else pieces.push(body[i]);
  }
  const set = subtractSets(charSet(...pieces), charSet("<"));
  if (set.length === 0) return undefined;
  if (m[4]) return { set, min: 1, max: 512 };
  if (m[5]) return { set, min: 0, max: 512 };
  const min = Number(m[2]);
  const max = m[3] === undefined ? min : Number(m[3]);
  return max >= min ? { set, min, max: Math.min(max, 512) } : undefined;
}

/** A scalar written in Gemma notation (strings quoted with `<|"|>`). */
function scalar(v: unknown): string {
  return typeof v === "string" ? QUOTE + v + QUOTE : JSON.stringify(v);
}

/** Compiles JSON Schemas into Gemma's value notation, sharing one grammar. */
function newValueCompiler(g: Grammar) {
  let text: Expr | undefined;
  const anyText = () => (text ??= textWithout(g, QUOTE, "gemma-text"));
  let anyValue: Expr | undefined;

  function integer(s: Json): Expr {
    const lo = typeof s.minimum === "number" ? Math.ceil(s.minimum) : undefined;
    const hi = typeof s.maximum === "number" ? Math.floor(s.maximum) : undefined;
    if (lo !== undefined && hi !== undefined && hi >= lo && hi - lo <= 64) {
      return alt(...Array.from({ length: hi - lo + 1 }, (_, i) => lit(String(lo + i))));
    }
    return INTEGER;
  }

  function string(s: Json): Expr {
    const p = typeof s.pattern === "string" ? classPattern(s.pattern) : undefined;
    if (p) {
      const max = Math.min(p.max, typeof s.maxLength === "number" ? s.maxLength : 512, 512);
      const min = Math.max(p.min, typeof s.minLength === "number" ? s.minLength : 0);
      return seq(lit(QUOTE), rep(cls(p.set), min, Math.max(min, max)), lit(QUOTE));
    }
    if (typeof s.maxLength === "number") {
      // Bounded text; `<` is left out so the closing quote cannot be written inside.
      const min = typeof s.minLength === "number" ? s.minLength : 0;
      const body = rep(cls(complementSet(charSet("<"))), min, Math.min(s.maxLength, 512));
      return seq(lit(QUOTE), body, lit(QUOTE));
    }
    return seq(lit(QUOTE), anyText(), lit(QUOTE));
  }

  function array(s: Json): Expr {
    const item = value(s.items ?? {});
    const min = typeof s.minItems === "number" ? s.minItems : 0;
    const max = typeof s.maxItems === "number" ? s.maxItems : Infinity;
    if (max === 0) return lit("[]");
    const more = rep(seq(lit(","), item), Math.max(0, min - 1), max - 1);
    const items = seq(item, more);
    return seq(lit("["), min === 0 ? opt(items) : items, lit("]"));
  }

  function object(s: Json): Expr {
    const props = isRecord(s.properties) ? Object.entries(s.properties) : [];
    if (props.length === 0) {
      return s.additionalProperties === false ? lit("{}") : generic();
    }
    const required = new Set(Array.isArray(s.required) ? s.required as string[] : []);
    props.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    // rest(i, first): properties i.. with a comma before each but the first written one.
    const names = new Map<string, string>();
    const rest = (i: number, first: boolean): Expr => {
      if (i === props.length) return EMPTY;
      const key = `${i}-${first}`;
      let name = names.get(key);
      if (!name) {
        name = reserve(g, `gemma-props-${i}${first ? "-first" : ""}`);
        names.set(key, name);
        const [k, sub] = props[i];
        const item = seq(first ? EMPTY : lit(","), lit(`${k}:`), value(sub), rest(i + 1, false));
        define(g, name, required.has(k) ? item : alt(item, rest(i + 1, first)));
      }
      return ref(name);
    };
    return seq(lit("{"), rest(0, true), lit("}"));
  }

  /** Any value (for schemas with no type): words, numbers, quoted text, lists, maps. */
  function generic(): Expr {
    if (anyValue) return anyValue;
    const name = reserve(g, "gemma-value");
    anyValue = ref(name);
    const key = rep(cls(charSet(["a", "z"], ["A", "Z"], ["0", "9"], "_")), 1, 64);
    const entry = seq(key, lit(":"), anyValue);
    define(
      g,
      name,
      alt(
        seq(lit(QUOTE), anyText(), lit(QUOTE)),
        NUMBER,
        lit("true"),
        lit("false"),
        lit("null"),
        seq(lit("["), opt(seq(anyValue, rep(seq(lit(","), anyValue), 0, Infinity))), lit("]")),
        seq(lit("{"), opt(seq(entry, rep(seq(lit(","), entry), 0, Infinity))), lit("}")),
      ),
    );
    return anyValue;
  }

  function value(schema: unknown): Expr {
    if (!isRecord(schema)) return generic();
    if ("const" in schema) return lit(scalar(schema.const));
    if (Array.isArray(schema.enum)) return alt(...schema.enum.map((v) => lit(scalar(v))));
    const union = (schema.anyOf ?? schema.oneOf) as unknown;
    if (Array.isArray(union)) return alt(...union.map(value));
    const type = schema.type;
    if (Array.isArray(type)) return alt(...type.map((t) => value({ ...schema, type: t })));
    switch (type) {
      case "object":
        return object(schema);
      case "array":
        return array(schema);
      case "string":
        return string(schema);
      case "integer":
        return integer(schema);
      case "number":
        return NUMBER;
      case "boolean":
        return alt(lit("true"), lit("false"));
      case "null":
        return lit("null");
    }
    return isRecord(schema.properties) ? object(schema) : generic();
  }

  return { value };
}

// ---------------------------------------------------------------- parsing

type Cursor = { s: string; pos: number };
/** The text ended before the value did. */
const MORE = Symbol("more");

function ws(c: Cursor): void {
  while (c.pos < c.s.length && " \t\r\n".includes(c.s[c.pos])) c.pos++;
}

/** One Gemma value at the cursor as JSON data; MORE when the text ends first, undefined if bad. */
function readValue(c: Cursor): unknown {
  ws(c);
  const s = c.s;
  if (c.pos >= s.length) return MORE;
  if (s.startsWith(QUOTE, c.pos)) {
    const end = s.indexOf(QUOTE, c.pos + QUOTE.length);
    if (end < 0) return MORE;
    const v = s.slice(c.pos + QUOTE.length, end);
    c.pos = end + QUOTE.length;
    return v;
  }
  if (QUOTE.startsWith(s.slice(c.pos))) return MORE;
  const ch = s[c.pos];
  if (ch === "{" || ch === "[") {
    const isMap = ch === "{";
    const out: unknown[] | Json = isMap ? {} : [];
    c.pos++;
    for (let first = true;; first = false) {
      ws(c);
      if (c.pos >= s.length) return MORE;
      if (s[c.pos] === (isMap ? "}" : "]")) {
        c.pos++;
        return out;
      }
      if (!first) {
        if (s[c.pos] !== ",") return undefined;
        c.pos++;
        ws(c);
      }
      if (isMap) {
        const colon = s.indexOf(":", c.pos);
        if (colon < 0) return MORE;
        let key = s.slice(c.pos, colon).trim();
        if (key.startsWith(QUOTE) && key.endsWith(QUOTE) && key.length >= 2 * QUOTE.length) {
          key = key.slice(QUOTE.length, -QUOTE.length);
        }
        if (!/^[^{}[\],]+$/.test(key)) return undefined;
        c.pos = colon + 1;
        const v = readValue(c);
        if (v === MORE || v === undefined) return v;
        (out as Json)[key] = v;
      } else {
        const v = readValue(c);
        if (v === MORE || v === undefined) return v;
        (out as unknown[]).push(v);
      }
    }
  }
  const m = /^[^,}\]<]*/.exec(s.slice(c.pos))![0];
  if (c.pos + m.length >= s.length) return MORE;
  c.pos += m.length;
  const word = m.trim();
  if (word === "true") return true;
  if (word === "false") return false;
  if (word === "null") return null;
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(word)) return Number(word);
  return word || undefined;
}

function parseBlock(s: string, names: Set<string>): SectionResult {
  const c: Cursor = { s, pos: OPEN.length };
  ws(c);
  const rest = s.slice(c.pos);
  if (!rest.startsWith(CALL)) return CALL.startsWith(rest) ? { kind: "more" } : { kind: "bad" };
  c.pos += CALL.length;
  const brace = s.indexOf("{", c.pos);
  if (brace < 0) {
    return /^[A-Za-z0-9_.:-]*$/.test(s.slice(c.pos)) ? { kind: "more" } : { kind: "bad" };
  }
  const name = s.slice(c.pos, brace).trim();
  if (!names.has(name)) return { kind: "bad" };
  c.pos = brace;
  const args = readValue(c);
  if (args === MORE) return { kind: "more" };
  if (!isRecord(args)) return { kind: "bad" };
  ws(c);
  const tail = s.slice(c.pos);
  if (!tail.startsWith(CLOSE)) return CLOSE.startsWith(tail) ? { kind: "more" } : { kind: "bad" };
  return {
    kind: "ok",
    calls: [{ name, arguments: JSON.stringify(args) }],
    length: c.pos + CLOSE.length,
  };
}

export const gemma4Format: ToolFormat = {
  family: "gemma4",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools: ToolSpec[], { parallel }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const g = newGrammar();
    const compiler = newValueCompiler(g);
    const fns = tools.map((t, i) =>
      forTool(t, i, () => seq(lit(t.name), compiler.value(argumentsSchema(t))))
    );
    const block = seq(lit(OPEN + CALL), alt(...fns), lit(CLOSE));
    return render(g, oneOrMore(block, parallel, EMPTY));
  },
  triggers: { patterns: [prefixPattern([OPEN, CALL])], tokens: [OPEN] },
  reasoning: { start: "<|channel>thought", end: "<channel|>" },
  newParser(tools) {
    const names = new Set(tools.map((t) => t.name));
    return newSectionParser({
      markers: [OPEN],
      closers: ">",
      parse: (s) => parseBlock(s, names),
    });
  },
};
