/**
 * The newer Mistral tool-call syntax (Devstral, Mistral Small 3.2, Magistral / Ministral 3): each
 * call is `[TOOL_CALLS]NAME[ARGS]{...}` with the arguments as bare JSON, parallel calls follow one
 * another, and Mistral Small 3.2 puts `[CALL_ID]ID` between the name and `[ARGS]`. The reasoning
 * models of the family think inside `[THINK]...[/THINK]`. (The older `[TOOL_CALLS] [{...}]`
 * array is `mistral.ts`.)
 *
 * @example
 * ```ts
 * import { devstralFormat } from "./devstral.ts";
 * const p = devstralFormat.newParser([{ name: "f", parameters: { type: "object" } }]);
 * p.push('[TOOL_CALLS]f[ARGS]{"x": 1}'); // tool_call_start f, tool_call_args {"x":1}, ..._end
 * ```
 * @module
 */
import { alt, charSet, cls, lit, render, rep, seq } from "../../constrain/gbnf.ts";
import { toolListPrompt } from "./generic.ts";
import { LAYOUT, oneOrMore, prefixPattern, toolSchemas } from "./grammar.ts";
import { jsonEnd, parseJson } from "./json_calls.ts";
import { newSectionParser, type SectionResult } from "./section_parser.ts";
import type { ToolFormat } from "./types.ts";
import type { ToolSpec } from "../conversation.ts";

const MARKER = "[TOOL_CALLS]";
const ARGS = "[ARGS]";
const CALL_ID = "[CALL_ID]";

const ID = seq(lit(CALL_ID), rep(cls(charSet(["a", "z"], ["A", "Z"], ["0", "9"])), 9, 9));

/** Reads one `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{..}` call; `more` while it may still complete. */
function parseCall(s: string, names: Set<string>): SectionResult {
  const argsAt = s.indexOf(ARGS, MARKER.length);
  if (argsAt < 0) {
    // Until `[ARGS]` comes, only a tool name (and a call id) may follow the marker.
    const head = s.slice(MARKER.length);
    return /^[A-Za-z0-9_.:-]*(\[CALL_ID\][A-Za-z0-9]*)?(\[[A-Z_]*)?$/.test(head)
      ? { kind: "more", recheck: true }
      : { kind: "bad" };
  }
  let name = s.slice(MARKER.length, argsAt);
  let id: string | undefined;
  const idAt = name.indexOf(CALL_ID);
  if (idAt >= 0) {
    id = name.slice(idAt + CALL_ID.length);
    name = name.slice(0, idAt);
  }
  if (!names.has(name)) return { kind: "bad" };
  let pos = argsAt + ARGS.length;
  while (pos < s.length && " \t\r\n".includes(s[pos])) pos++;
  if (pos >= s.length) return { kind: "more", recheck: true };
  if (s[pos] !== "{") return { kind: "bad" };
  const end = jsonEnd(s, pos);
  if (end < 0) return { kind: "more" };
  const args = parseJson(s.slice(pos, end));
  if (typeof args !== "object" || args === null || Array.isArray(args)) return { kind: "bad" };
  return {
    kind: "ok",
    calls: [{ name, arguments: JSON.stringify(args), ...(id ? { id } : {}) }],
    length: end,
  };
}

/**
 * The format for a template: Devstral's (and Ministral's) render `[TOOL_CALLS]NAME[ARGS]{..}`,
 * Mistral Small 3.2's put `[CALL_ID]ID` before `[ARGS]`; the grammar writes an id only where the
 * template renders one (the parser reads both).
 */
function devstral(callIds: boolean): ToolFormat {
  return {
    family: "devstral",
    rendersTools: true,
    toolSystemPrompt: toolListPrompt,
    callGrammar(tools: ToolSpec[], { parallel, relax }) {
      const s = toolSchemas(tools, relax);
      const call = seq(
        lit(MARKER),
        alt(...tools.map((t, i) => seq(lit(t.name), callIds ? ID : seq(), lit(ARGS), s.args[i]))),
      );
      return render(s.set.g, oneOrMore(call, parallel, LAYOUT));
    },
    triggers: { patterns: [prefixPattern([MARKER])], tokens: [MARKER] },
    reasoning: { start: "[THINK]", end: "[/THINK]" },
    newParser(tools) {
      const names = new Set(tools.map((t) => t.name));
      return newSectionParser({
        markers: [MARKER],
        closers: "}",
        parse: (s) => parseCall(s, names),
      });
    },
  };
}

export const devstralFormat: ToolFormat = devstral(false);
/** Mistral Small 3.2: the same calls with `[CALL_ID]ID` (see {@link devstral}). */
export const devstralCallIdFormat: ToolFormat = devstral(true);
