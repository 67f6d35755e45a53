/**
 * How a value is written: the JSON Schema compiler builds the same structure for every tool-call
 * family, and a notation says how its pieces are spelled. JSON (most families); Gemma 4's
 * argument notation (bare keys in case-insensitive sorted order, strings between `<|"|>`, no
 * layout); and raw text, the plain-string arguments of the tagged families (Qwen3-Coder's
 * `<parameter=..>`, GLM's `<arg_value>`, MiniMax, DSML), which end at a closing tag instead of a
 * quote and so may hold anything but that tag.
 *
 * @example
 * ```ts
 * import { gemmaNotation, jsonNotation, rawNotation } from "./notation.ts";
 * jsonNotation.constant({ b: 1, a: "x" }); // '{"b":1,"a":"x"}'
 * gemmaNotation.constant({ b: 1, a: "x" }); // '{a:<|"|>x<|"|>,b:1}'
 * rawNotation("</arg_value>").constant("a b"); // 'a b'
 * ```
 * @module
 */
import {
  alt,
  type CharSet,
  charSet,
  cls,
  complementSet,
  type Expr,
  type Grammar,
  intersectSets,
  lit,
  MAX_CODE_POINT,
  seq,
  setHas,
  subtractSets,
} from "./gbnf.ts";
import { stopStarts, textWithout } from "./text_without.ts";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export type Notation = {
  /** Names the notation's standard rules (`string`, `gemma-string`, ...). */
  id: string;
  /** Opens and closes a string value (raw text has none). */
  quote: string;
  /** One character of `set` inside a constrained string (one spelling each). */
  char(set: CharSet): Expr;
  /**
   * The content of an unconstrained string, exactly (every spelling JSON allows; raw: no stop).
   * `fresh`: after characters that cannot begin the stop, so no partial stop is pending.
   */
  text(g: Grammar, fresh?: boolean): Expr;
  /**
   * Whether a length bound alone (no pattern) is kept in the grammar: raw and Gemma text can then
   * only exclude the stop's first character everywhere, so beyond this length the bound is
   * checked on the finished value instead and the text stays exact.
   */
  lengthInGrammar(max: number): boolean;
  /** Layout whitespace between the tokens of objects and arrays. */
  layout: boolean;
  /** A listed property's name as written before its colon; undefined: it cannot be written. */
  key(name: string): string | undefined;
  /** Quote and one character of an extra (unlisted) property's name. */
  keyQuote: string;
  keyChar(set: CharSet): Expr;
  /** A fixed value as written; undefined when the notation cannot write it. */
  constant(v: Json): string | undefined;
  /** Properties in case-insensitive key order (a template's `dictsort`), not schema order. */
  sortKeys: boolean;
  /** Object syntax: around and between members, and one member (its written key, its value). */
  object: {
    open: string;
    close: string;
    sep: string;
    member(key: Expr, value: Expr, ws: Expr): Expr;
    /** Whether keys beyond the listed ones can be written at all. */
    extraKeys: boolean;
  };
  /** Array syntax: around and between items, and one item. */
  array: { open: string; close: string; sep: string; item(value: Expr, ws: Expr): Expr };
  /** Any value, when the notation cannot write JSON's (undefined: built like JSON's). */
  anyValue?(g: Grammar): Expr;
  /**
   * Its parser reads any value whose schema allows a string as that string (MiniMax-M3, as
   * llama.cpp reads it): a union that allows strings is then written as one.
   */
  unionsAsText?: boolean;
};

const JSON_OBJECT: Notation["object"] = {
  open: "{",
  close: "}",
  sep: ",",
  member: (key, value, ws) => seq(key, ws, lit(":"), ws, value, ws),
  extraKeys: true,
};
const JSON_ARRAY: Notation["array"] = {
  open: "[",
  close: "]",
  sep: ",",
  item: (value, ws) => seq(value, ws),
};

function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/** How each character of a string value is written inside JSON quotes (one spelling each). */
export function jsonChar(set: CharSet): Expr {
  const parts: Expr[] = [
    cls(subtractSets(intersectSets(set, [[0x20, MAX_CODE_POINT]]), charSet('"\\'))),
  ];
  if (setHas(set, 0x22)) parts.push(lit('\\"'));
  if (setHas(set, 0x5c)) parts.push(lit("\\\\"));
  const short: Record<number, string> = { 8: "b", 9: "t", 10: "n", 12: "f", 13: "r" };
  const lows: number[][] = [[], []];
  for (let c = 0; c < 0x20; c++) {
    if (!setHas(set, c)) continue;
    if (short[c]) parts.push(lit("\\" + short[c]));
    else lows[c >> 4].push(c & 15);
  }
  lows.forEach((l, hi) => {
    if (l.length) parts.push(seq(lit(`\\u00${hi}`), cls(charSet(...l.map((d) => d.toString(16))))));
  });
  return alt(...parts);
}

const HEX_SET = charSet(["0", "9"], ["a", "f"], ["A", "F"]);

/** Any JSON string character, with every escape JSON allows (not surrogate escapes). */
export function jsonTextChar(): Expr {
  return alt(
    cls(complementSet(charSet('"\\', [0, 0x1f]))),
    seq(
      lit("\\"),
      alt(
        cls(charSet('"\\/bfnrt')),
        // \uXXXX except surrogates, so a decoded length is always the escape count.
        seq(
          lit("u"),
          alt(
            seq(
              cls(subtractSets(HEX_SET, charSet("dD"))),
              cls(HEX_SET),
              cls(HEX_SET),
              cls(HEX_SET),
            ),
            seq(cls(charSet("dD")), cls(charSet(["0", "7"])), cls(HEX_SET), cls(HEX_SET)),
          ),
        ),
      ),
    ),
  );
}

export const jsonNotation: Notation = {
  id: "json",
  quote: '"',
  char: jsonChar,
  // The compiler builds JSON's text from its shared `char` rule (see json_schema.ts).
  text: () => {
    throw new Error("jsonNotation.text is built by the compiler");
  },
  lengthInGrammar: () => true,
  layout: true,
  key: (name) => JSON.stringify(name),
  keyQuote: '"',
  keyChar: jsonChar,
  constant: (v) => JSON.stringify(v),
  sortKeys: false,
  object: JSON_OBJECT,
  array: JSON_ARRAY,
};

/** Gemma 4's string quote, one token in its vocabulary. */
export const GEMMA_QUOTE = '<|"|>';

/** Characters a bare Gemma key cannot hold (its parser ends a key at `:`, and at structure). */
const GEMMA_KEY_STOP = charSet(':{}[],<"', " \t\r\n");

function sortedEntries(v: { [k: string]: Json }): [string, Json][] {
  return Object.entries(v).sort(([a], [b]) => {
    const x = a.toLowerCase();
    const y = b.toLowerCase();
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

function gemmaConstant(v: Json): string | undefined {
  // The template writes None as Python prints it (or as nothing): no null is ever written.
  if (v === null) return undefined;
  if (typeof v === "string") {
    return v.includes(GEMMA_QUOTE) ? undefined : GEMMA_QUOTE + v + GEMMA_QUOTE;
  }
  if (Array.isArray(v)) {
    const items = v.map(gemmaConstant);
    return items.some((x) => x === undefined) ? undefined : `[${items.join(",")}]`;
  }
  if (isObject(v)) {
    const parts: string[] = [];
    for (const [k, x] of sortedEntries(v)) {
      const key = gemmaNotation.key(k);
      const value = gemmaConstant(x);
      if (key === undefined || value === undefined) return undefined;
      parts.push(`${key}:${value}`);
    }
    return `{${parts.join(",")}}`;
  }
  return JSON.stringify(v);
}

/** Largest length bound kept in the grammar for raw and Gemma text (see `lengthInGrammar`). */
export const RAW_LENGTH_IN_GRAMMAR = 256;

/** Gemma 4: `{key:value,...}` with keys bare and sorted, strings between `<|"|>`. */
export const gemmaNotation: Notation = {
  id: "gemma",
  quote: GEMMA_QUOTE,
  char: (set) => cls(subtractSets(set, charSet("<"))),
  text: (g) => textWithout(g, GEMMA_QUOTE, "gemma-text"),
  lengthInGrammar: (max) => max <= RAW_LENGTH_IN_GRAMMAR,
  layout: false,
  key: (name) =>
    name !== "" && [...name].every((c) => !setHas(GEMMA_KEY_STOP, c.codePointAt(0)!))
      ? name
      : undefined,
  keyQuote: "",
  keyChar: (set) => cls(subtractSets(set, GEMMA_KEY_STOP)),
  constant: gemmaConstant,
  sortKeys: true,
  // Keys beyond the listed ones could not be written in the template's sorted order.
  object: { ...JSON_OBJECT, extraKeys: false },
  array: JSON_ARRAY,
};

/**
 * Raw text ending at `stop` (a tagged family's closing tag). `after`: what the template writes
 * just before a value, which may already begin the stop (Qwen3-Coder's newline).
 */
export function rawNotation(stop: string, after = ""): Notation {
  const banned = charSet(stopStarts(stop, after));
  return {
    ...jsonNotation,
    id: `raw-${[...stop].map((c) => c.codePointAt(0)!.toString(36)).join("")}`,
    quote: "",
    char: (set) => cls(subtractSets(set, banned)),
    text: (g, fresh) => textWithout(g, stop, "raw-text", fresh ? "" : after),
    lengthInGrammar: (max) => max <= RAW_LENGTH_IN_GRAMMAR,
    constant: (v) => {
      if (typeof v !== "string") return JSON.stringify(v);
      // The stop may not appear inside, nor complete what `after` began.
      return v.includes(stop) || (after + v).includes(stop) ? undefined : v;
    },
  };
}
