/**
 * Mistral (7B Instruct v0.3 and kin) tool calls: `[TOOL_CALLS] [{"name": "f", "arguments":
 * {...}, "id": "a1b2c3d4e"}, ...]`, one array for all calls; the model's own 9-character id is
 * kept when it writes one.
 *
 * @example
 * ```ts
 * import { mistralFormat } from "./mistral.ts";
 * const p = mistralFormat.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('[TOOL_CALLS] [{"name": "f", "arguments": {}, "id": "abcDEF123"}]'); // id abcDEF123
 * ```
 * @module
 */
import { charSet, cls, lit, opt, render, rep, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { jsonCall, LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { jsonEnd, parseJson, toCall } from "./json_calls.ts";
import { newSectionParser, type ParsedCall } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const MARKER = "[TOOL_CALLS]";
const COLON = seq(LAYOUT, lit(":"), LAYOUT);
const COMMA = seq(LAYOUT, lit(","), LAYOUT);
const ID = seq(
  COMMA,
  lit('"id"'),
  COLON,
  lit('"'),
  rep(cls(charSet(["a", "z"], ["A", "Z"], ["0", "9"])), 9, 9),
  lit('"'),
);

export const mistralFormat: ToolFormat = {
  family: "mistral",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar(tools, { parallel, relax }) {
    const s = toolSchemas(tools, relax);
    const call = jsonCall(s, "arguments", opt(ID));
    return render(
      s.set.g,
      seq(
        lit(MARKER),
        LAYOUT,
        lit("["),
        LAYOUT,
        oneOrMore(call, parallel, COMMA),
        LAYOUT,
        lit("]"),
      ),
    );
  },
  triggers: {
    patterns: [
      prefixPattern([
        MARKER,
        { ws: true },
        "[",
        { ws: true },
        "{",
        { ws: true },
        '"name"',
        {
          ws: true,
        },
        ":",
        { ws: true },
        '"',
      ]),
    ],
    tokens: [MARKER],
  },
  newParser(tools) {
    const names = new Set(tools.map((t) => t.name));
    return newSectionParser({
      markers: [MARKER],
      closers: "]",
      parse(s) {
        let pos = MARKER.length;
        while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
        if (pos >= s.length) return { kind: "more" };
        if (s[pos] !== "[") return { kind: "bad" };
        const end = jsonEnd(s, pos);
        if (end < 0) return { kind: "more" };
        const value = parseJson(s.slice(pos, end));
        if (!Array.isArray(value) || value.length === 0) return { kind: "bad" };
        const calls = value.map((v) => toCall(v, names, ["arguments"]));
        if (calls.some((c) => !c)) return { kind: "bad" };
        return { kind: "ok", calls: calls as ParsedCall[], length: end };
      },
    });
  },
};
