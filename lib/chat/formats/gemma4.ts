/**
 * Gemma 4 tool calls: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, one block per call,
 * with arguments in Gemma's own notation rather than JSON: keys bare, strings between `<|"|>`
 * quotes, numbers, `true`/`false`/`null`, `[...]` and `{...}` as in JSON. Reasoning is the
 * thought channel `<|channel>thought\n...<channel|>`.
 *
 * The grammar is the shared JSON Schema compiler writing Gemma's notation (`gemmaNotation`): keys
 * in the template's `dictsort` order, strings that cannot hold the quote, every bound, pattern and
 * format the JSON grammar enforces.
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
import { alt, EMPTY, lit, render, seq } from "../../constrain/gbnf.ts";
import { newSchemaSet, type Relaxation } from "../../constrain/json_schema.ts";
import { GEMMA_QUOTE, gemmaNotation } from "../../constrain/notation.ts";
import { toolListPrompt } from "./generic.ts";
import { argumentsSchema, forTool, oneOrMore, prefixPattern } from "./grammar.ts";
import { newSectionParser, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<|tool_call>";
const CALL = "call:";
const CLOSE = "<tool_call|>";
const QUOTE = GEMMA_QUOTE;

type Json = Record<string, unknown>;

function isRecord(x: unknown): x is Json {
  return typeof x === "object" && x !== null && !Array.isArray(x);
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
  callGrammar(tools: ToolSpec[], { parallel, relax }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const set = newSchemaSet();
    const fns = tools.map((t, i) =>
      forTool(t, i, () =>
        seq(
          lit(t.name),
          set.compile(argumentsSchema(t), `${t.name}-args`, "#", {
            notation: gemmaNotation,
            ...(relax ? { relax: (r: Relaxation) => relax(i, r) } : {}),
          }),
        ))
    );
    const block = seq(lit(OPEN + CALL), alt(...fns), lit(CLOSE));
    return render(set.g, oneOrMore(block, parallel, EMPTY));
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
