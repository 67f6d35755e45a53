/**
 * Reading calls written as JSON in a model's output: finding where a JSON object or array ends
 * in text that may still be streaming, and checking that a parsed value is a call to one of the
 * offered tools with an object of arguments.
 *
 * @example
 * ```ts
 * import { jsonEnd, toCall } from "./json_calls.ts";
 * jsonEnd('{"a": "}"} tail', 0); // 10
 * jsonEnd('{"a": ', 0); // -1 (incomplete)
 * toCall({ name: "f", arguments: { x: 1 } }, new Set(["f"]), ["arguments"]);
 * // { name: "f", arguments: '{"x":1}' }
 * ```
 * @module
 */
import type { ParsedCall } from "./section_parser.ts";

/**
 * Index just past the JSON object or array that starts at `pos` (brackets are matched outside
 * strings only; `JSON.parse` judges the rest), or -1 when the text ends first.
 */
export function jsonEnd(text: string, pos: number): number {
  let depth = 0;
  let inString = false;
  for (let i = pos; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (--depth === 0) return i + 1;
    }
  }
  return -1;
}

/** `JSON.parse`, or undefined for text that is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/**
 * The call `value` describes (`{name, <argsKey>: {...}, id?}`), or undefined when it is not a
 * call to one of `names`. Arguments given as JSON text (some models quote them) are read too.
 */
export function toCall(
  value: unknown,
  names: Set<string>,
  argsKeys: string[],
): ParsedCall | undefined {
  if (!isRecord(value) || typeof value.name !== "string" || !names.has(value.name)) return;
  const key = argsKeys.find((k) => k in value);
  let args = key === undefined ? {} : value[key];
  if (typeof args === "string") args = parseJson(args);
  if (!isRecord(args)) return;
  const call: ParsedCall = { name: value.name, arguments: JSON.stringify(args) };
  if (typeof value.id === "string" && value.id) call.id = value.id;
  return call;
}
