/**
 * The fallback for templates that know no tools: the tools and the exact answer shape are
 * described in the system message (`toolSystemPrompt`), and the model answers with
 * `<tool_call>{"name": "f", "arguments": {...}}</tool_call>` in plain text, one block per call.
 * The markers are ordinary text to such a model (several tokens), so the lazy grammar is armed by
 * a pattern at whatever token boundary the opening ends on.
 *
 * @example
 * ```ts
 * import { genericFormat } from "./generic.ts";
 * const tools = [{ name: "f", description: "Does f", parameters: { type: "object" } }];
 * genericFormat.toolSystemPrompt(tools); // "# Tools\n\nYou can call these functions..."
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { lit, render, seq } from "../../constrain/gbnf.ts";
import { jsonCall, LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { parseJson, toCall } from "./json_calls.ts";
import { newSectionParser } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** An instruction block listing the tools and the exact JSON a call is written as. */
export function toolListPrompt(tools: ToolSpec[]): string {
  const list = tools.map((t) =>
    JSON.stringify({ name: t.name, description: t.description ?? "", parameters: t.parameters })
  ).join("\n");
  return "# Tools\n\nYou can call these functions (JSON Schema of their arguments given):\n" +
    `<tools>\n${list}\n</tools>\n\n` +
    "To call a function, answer with exactly this, one block per call, and nothing after it:\n" +
    `${OPEN}{"name": "<function name>", "arguments": {<arguments as a JSON object>}}${CLOSE}\n` +
    "Otherwise answer normally.";
}

/**
 * Grammar, trigger pattern and parser of calls written as `OPEN{"name", "arguments"}CLOSE`
 * blocks (this fallback, and Hermes / Qwen, whose blocks are the same).
 */
export function taggedJsonCalls(open: string, close: string):
  & Pick<
    ToolFormat,
    "callGrammar" | "newParser"
  >
  & { pattern: string } {
  return {
    callGrammar(tools, { parallel, relax }) {
      const s = toolSchemas(tools, relax);
      const block = seq(lit(open), LAYOUT, jsonCall(s, "arguments"), LAYOUT, lit(close));
      return render(s.set.g, oneOrMore(block, parallel, LAYOUT));
    },
    pattern: prefixPattern([
      open,
      { ws: true },
      "{",
      { ws: true },
      '"name"',
      { ws: true },
      ":",
      { ws: true },
      '"',
    ]),
    newParser(tools) {
      const names = new Set(tools.map((t) => t.name));
      return newSectionParser({
        markers: [open],
        closers: ">",
        parse(section) {
          const end = section.indexOf(close, open.length);
          if (end < 0) return { kind: "more" };
          const value = parseJson(section.slice(open.length, end));
          const call = toCall(value, names, ["arguments", "parameters"]);
          return call ? { kind: "ok", calls: [call], length: end + close.length } : { kind: "bad" };
        },
      });
    },
  };
}

const tagged = taggedJsonCalls(OPEN, CLOSE);

export const genericFormat: ToolFormat = {
  family: "generic",
  rendersTools: false,
  toolSystemPrompt: toolListPrompt,
  callGrammar: tagged.callGrammar,
  triggers: { patterns: [tagged.pattern], tokens: [] },
  newParser: tagged.newParser,
};
