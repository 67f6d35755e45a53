/**
 * Grammar pieces the families share: bounded layout whitespace, each tool's arguments compiled
 * from its JSON Schema into one grammar (an unsupported schema is refused naming the tool), a
 * JSON call object as an alternation over the tools, and trigger patterns that fire at any token
 * boundary inside a call's opening while only ever capturing text the grammar accepts.
 *
 * @example
 * ```ts
 * import { jsonCall, prefixPattern, toolSchemas } from "./grammar.ts";
 * import { render } from "../../constrain/gbnf.ts";
 * const set = toolSchemas([{ name: "f", parameters: { type: "object" } }]);
 * render(set.set.g, jsonCall(set, "arguments"));
 * prefixPattern(["<tool_call>", { ws: true }, '{"name"']); // '(<tool_call>(?:...)?)$'
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { isConstraintError } from "../../constrain/error.ts";
import { alt, charSet, cls, type Expr, lit, rep, seq } from "../../constrain/gbnf.ts";
import { newSchemaSet, type Relaxation, type SchemaSet } from "../../constrain/json_schema.ts";

/** Receives what a tool's grammar relaxed (`tool`: its index in the tools given). */
export type ToolRelax = (tool: number, r: Relaxation) => void;

/** Layout whitespace a model may put around markers and JSON: small and bounded, never a loop. */
export const WS_MAX = 4;
export const LAYOUT: Expr = rep(cls(charSet(" \t\n")), 0, WS_MAX);
/** The same whitespace as a regex (ECMAScript, as std::regex reads it). */
export const LAYOUT_RE = `[ \\t\\n]{0,${WS_MAX}}`;

/** The parameters schema to compile: an untyped schema still has to be an object. */
export function argumentsSchema(t: ToolSpec): Record<string, unknown> {
  const p = t.parameters ?? {};
  const combined = ["type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"].some((k) => k in p);
  return combined ? p : { ...p, type: "object" };
}

/** Tags a compile error with the tool it came from, so the caller can name it in a 400. */
export function forTool<T>(t: ToolSpec, index: number, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (isConstraintError(e)) {
      e.message = `tools[${index}] (${t.name}): ${e.message}`;
      Object.assign(e, { tool: t.name, toolIndex: index });
    }
    throw e;
  }
}

export type ToolSchemas = { set: SchemaSet; tools: ToolSpec[]; args: Expr[] };

/**
 * Every tool's arguments grammar, in one schema set. With `relax`, what a schema asks beyond the
 * grammar is relaxed and reported; without it, such a tool is refused (a ConstraintError).
 */
export function toolSchemas(tools: ToolSpec[], relax?: ToolRelax): ToolSchemas {
  if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
  const set = newSchemaSet();
  const args = tools.map((t, i) =>
    forTool(t, i, () =>
      set.compile(argumentsSchema(t), `${t.name}-args`, "#", {
        ...(relax ? { relax: (r: Relaxation) => relax(i, r) } : {}),
      }))
  );
  return { set, tools, args };
}

const COLON = seq(LAYOUT, lit(":"), LAYOUT);
const COMMA = seq(LAYOUT, lit(","), LAYOUT);

/**
 * `{"name": "<tool>", "<argsKey>": <args>}` for any of the tools, with bounded layout; `extra`
 * (e.g. an id member) may follow the arguments.
 */
export function jsonCall(s: ToolSchemas, argsKey: string, extra?: Expr): Expr {
  const branches = s.tools.map((t, i) =>
    seq(
      lit(JSON.stringify(t.name)),
      COMMA,
      lit(JSON.stringify(argsKey)),
      COLON,
      s.args[i],
      extra ?? seq(),
    )
  );
  return seq(lit("{"), LAYOUT, lit('"name"'), COLON, alt(...branches), LAYOUT, lit("}"));
}

/** One call, or (parallel) one or more separated by `sep`. */
export function oneOrMore(call: Expr, parallel: boolean, sep: Expr): Expr {
  return parallel ? seq(call, rep(seq(sep, call), 0, Infinity)) : call;
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A piece of a call opening: literal text, or bounded layout whitespace. */
export type OpeningPiece = string | { ws: true };

/**
 * A trigger pattern `(<opening prefix>)$`: it matches when the output ends anywhere inside the
 * opening (at least its first piece), so whatever token boundary the model's tokens give, it
 * fires once the first piece is complete, and the capture is always a prefix of the opening the
 * grammar accepts. `anchored`: only at the very start of the output (after layout).
 */
export function prefixPattern(pieces: OpeningPiece[], anchored = false): string {
  const units: string[] = [];
  for (const p of pieces) {
    if (typeof p === "string") units.push(...[...p].map(escapeRe));
    else units.push(LAYOUT_RE);
  }
  // The first piece is required whole; each later unit is optional and nested, so only prefixes
  // match.
  const first = typeof pieces[0] === "string" ? [...pieces[0]].length : 1;
  let tail = "";
  for (let i = units.length - 1; i >= first; i--) tail = `(?:${units[i]}${tail})?`;
  const body = units.slice(0, first).join("") + tail;
  return anchored ? `^${LAYOUT_RE}(${body})$` : `(${body})$`;
}
