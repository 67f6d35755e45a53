/**
 * Kimi-K3 tool calls, in its XTML tags built from `<|open|>TAG attrs<|sep|>` and
 * `<|close|>TAG<|sep|>`: an assistant turn is `think` (reasoning, opened by the generation
 * prompt), then `response` (the content, always written, empty beside a call), then maybe
 * `tools` holding `<|open|>call tool="NAME" index="N"<|sep|>` with one
 * `<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>` per argument (a string raw,
 * anything else JSON, `T` its JSON type) and `<|close|>call<|sep|>`. Attribute values escape `&`
 * and `"`. The `response` and end-of-message tags are markup, never content.
 *
 * @example
 * ```ts
 * import { kimiK3Format } from "./kimi_k3.ts";
 * const p = kimiK3Format.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push("<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
 *   '<|open|>call tool="f" index="1"<|sep|><|open|>argument key="n" type="number"<|sep|>1' +
 *   "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"); // f {"n":1}
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { alt, charSet, cls, type Expr, lit, opt, render, rep, seq } from "../../constrain/gbnf.ts";
import { newSchemaSet } from "../../constrain/json_schema.ts";
import { toolListPrompt } from "./generic.ts";
import { forTool, prefixPattern } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";
import { newSectionParser, type ParsedCall, type SectionResult } from "./section_parser.ts";
import { isRawArg, rawFor, relaxFor, schemaAt, tagLayout } from "./tagged_args.ts";
import type { ToolFormat } from "./types.ts";

const SEP = "<|sep|>";
const open = (tag: string) => `<|open|>${tag}${SEP}`;
const close = (tag: string) => `<|close|>${tag}${SEP}`;
const RESPONSE = open("response");
const END_RESPONSE = close("response");
const TOOLS = open("tools");
const END_TOOLS = close("tools");
const CALL = "<|open|>call ";
const END_CALL = close("call");
const ARG = "<|open|>argument ";
const END_ARG = close("argument");
const JSON_ARG = "<|open|>json ";
const END_JSON = close("json");
/** Turn markup the model writes around its content: dropped from the text. */
const MARKUP = [RESPONSE, END_RESPONSE, close("message"), "<|end_of_msg|>"];

const escapeAttr = (s: string) => s.replace(/&/g, "&amp;").replace(/"/g, "&quot;");
const unescapeAttr = (s: string) => s.replace(/&quot;/g, '"').replace(/&amp;/g, "&");

function attrs(tag: string): Map<string, string> {
  return new Map([...tag.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], unescapeAttr(m[2])]));
}

const TYPES: Record<string, string> = {
  integer: "number",
  number: "number",
  boolean: "boolean",
  object: "object",
  array: "array",
  null: "null",
};

/**
 * The `type` attribute of a value written as JSON: its schema's JSON type, or any but `string`
 * (which marks a raw value) when it has no single one.
 */
function typeAttr(schema: unknown): Expr {
  const t = (schema as Record<string, unknown> | undefined)?.type;
  if (typeof t === "string" && TYPES[t]) return lit(TYPES[t]);
  return alt(...["number", "boolean", "object", "array", "null"].map(lit));
}

const INDEX: Expr = seq(cls(charSet("123456789")), rep(cls(charSet("0123456789")), 0, 2));

/** A call's arguments object from `[key, type attribute, written value]`. */
function argsJson(t: ToolSpec, args: [string, string, string][], json: Record<string, unknown>) {
  const out: Record<string, unknown> = { ...json };
  for (const [key, type, raw] of args) {
    const v = parseJson(raw);
    // A string is written raw; read as JSON only where the schema wants something else.
    if (type === "string") {
      out[key] = isRawArg(t, key) || typeof v !== "string" ? raw : v;
    } else out[key] = v === undefined ? raw : v;
  }
  return JSON.stringify(out);
}

/**
 * Reads turn markup (dropped), or a `tools` section (or bare calls) from its marker. `final`: the
 * output ended (cut by the token limit) inside a call whose name is written: the arguments
 * written so far are the call (a cut string too).
 */
function parseSection(s: string, tools: Map<string, ToolSpec>, final: boolean): SectionResult {
  const markup = MARKUP.find((m) => s.startsWith(m));
  if (markup) return { kind: "ok", calls: [], length: markup.length };
  const more: SectionResult = { kind: "more" };
  const wrapped = s.startsWith(TOOLS);
  let pos = wrapped ? TOOLS.length : 0;
  const calls: ParsedCall[] = [];
  const done = (length: number): SectionResult =>
    calls.length ? { kind: "ok", calls, length } : { kind: "bad" };
  const prefixOf = (...ms: string[]) => ms.some((m) => m.startsWith(s.slice(pos)));
  for (;;) {
    const before = pos;
    while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
    if (wrapped && s.startsWith(END_TOOLS, pos)) {
      return { kind: "ok", calls, length: pos + END_TOOLS.length };
    }
    if (!s.startsWith(CALL, pos)) {
      if (!final && prefixOf(END_TOOLS, CALL)) return more;
      return done(before);
    }
    const head = s.indexOf(SEP, pos);
    if (head < 0) return final ? done(before) : s.length - pos > 300 ? done(before) : more;
    const name = attrs(s.slice(pos, head)).get("tool") ?? "";
    const tool = tools.get(name);
    if (!tool) return done(before);
    pos = head + SEP.length;
    const args: [string, string, string][] = [];
    let json: Record<string, unknown> = {};
    const call = () => ({ name, arguments: argsJson(tool, args, json) });
    const cut = (): SectionResult =>
      final ? { kind: "ok", calls: [...calls, call()], length: s.length } : more;
    for (;;) {
      if (s.startsWith(END_CALL, pos)) {
        pos += END_CALL.length;
        calls.push(call());
        break;
      }
      const isArg = s.startsWith(ARG, pos);
      if (!isArg && !s.startsWith(JSON_ARG, pos)) {
        if (prefixOf(END_CALL, ARG, JSON_ARG)) return cut();
        return done(before);
      }
      const tagEnd = s.indexOf(SEP, pos);
      if (tagEnd < 0) return cut();
      const a = attrs(s.slice(pos, tagEnd));
      const end = s.indexOf(isArg ? END_ARG : END_JSON, tagEnd);
      const value = s.slice(tagEnd + SEP.length, end < 0 ? s.length : end);
      if (end < 0) {
        if (final && isArg && a.get("type") === "string") {
          args.push([a.get("key") ?? "", "string", value]);
        }
        return cut();
      }
      if (isArg) args.push([a.get("key") ?? "", a.get("type") ?? "", value]);
      else {
        const obj = parseJson(value);
        if (typeof obj !== "object" || obj === null || Array.isArray(obj)) return done(before);
        json = obj as Record<string, unknown>;
      }
      pos = end + (isArg ? END_ARG : END_JSON).length;
    }
  }
}

export const kimiK3Format: ToolFormat = {
  family: "kimi-k3",
  rendersTools: true,
  printMarkers: ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
    const set = newSchemaSet();
    const raw = rawFor(END_ARG);
    const args = tools.map((t, i) =>
      forTool(t, i, () => {
        const layout = tagLayout(t);
        const opts = relax ? { relax: relaxFor(relax, i) } : {};
        return alt(...layout.branches.map((b) =>
          seq(
            ...b.props.map(([key, pointer]) => {
              const tag = (type: Expr) =>
                seq(lit(`${ARG}key="${escapeAttr(key)}" type="`), type, lit(`"${SEP}`));
              const base = `${t.name}-${key}`;
              const p = layout.raw.has(key)
                ? seq(
                  tag(lit("string")),
                  set.compile(layout.root, base, pointer, { ...opts, notation: raw }),
                )
                : seq(
                  tag(typeAttr(schemaAt(layout.root, pointer))),
                  set.compile(layout.root, base, pointer, opts),
                );
              const whole = seq(p, lit(END_ARG));
              return b.required.has(key) ? whole : opt(whole);
            }),
          )
        ));
      })
    );
    const calls = (index: Expr) =>
      tools.map((t, i) =>
        seq(
          lit(`${CALL}tool="${escapeAttr(t.name)}" index="`),
          index,
          lit(`"${SEP}`),
          args[i],
          lit(END_CALL),
        )
      );
    // The template numbers a message's calls from 1.
    const first = alt(...calls(lit("1")));
    const body = parallel ? seq(first, rep(alt(...calls(INDEX)), 0, Infinity)) : first;
    // The template writes an empty `response` before the calls; a lazy grammar starts at `tools`.
    const section = seq(lit(TOOLS), body, lit(END_TOOLS));
    return render(set.g, seq(opt(lit(RESPONSE + END_RESPONSE)), section));
  },
  // Fires anywhere in the opening up to the tool name, whatever the tokens' boundaries.
  triggers: { patterns: [prefixPattern([TOOLS, `${CALL}tool="`])], tokens: [] },
  reasoning: { start: open("think"), end: close("think") },
  newParser(tools) {
    const byName = new Map(tools.map((t) => [t.name, t]));
    return newSectionParser({
      markers: [...MARKUP, TOOLS, CALL],
      closers: ">",
      parse: (s, final) => parseSection(s, byName, final),
    });
  },
};
