/**
 * Constrained decoding: compile a `choice` list, a `regex`, a JSON Schema (`json`) or a raw
 * `grammar` to llama.cpp GBNF. Compiled grammars are kept in a small LRU cache, so a client that
 * sends the same schema with every request pays for compilation once.
 *
 * @example
 * ```ts
 * import { compileConstraint, isConstraintError } from "./mod.ts";
 * const gbnf = compileConstraint({ json: { type: "array", items: { type: "integer" } } });
 * try {
 *   compileConstraint({ regex: "(a)\\1" });
 * } catch (e) {
 *   if (isConstraintError(e)) console.log(e.keyword); // "backreference \1"
 * }
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import { choiceToGbnf } from "./choice.ts";
import { regexToGbnf } from "./regex.ts";
import { jsonSchemaToGbnf } from "./json_schema.ts";
import { guardGbnf } from "./gbnf_guard.ts";

export { type ConstraintError, constraintError, isConstraintError } from "./error.ts";
export { choiceToGbnf } from "./choice.ts";
export { parseRegex, regexToGbnf } from "./regex.ts";
export { FORMATS, jsonObjectGbnf, jsonSchemaToGbnf } from "./json_schema.ts";
export { LARK_KEYWORD, larkToGbnf } from "./lark.ts";
export { charClass, charSet, literal } from "./gbnf.ts";
export { guardGbnf } from "./gbnf_guard.ts";

/** One constraint; exactly one key may be set. */
export type Constraint = {
  choice?: string[];
  regex?: string;
  json?: unknown;
  grammar?: string;
};

const KINDS = ["choice", "regex", "json", "grammar"] as const;
const CACHE_SIZE = 64;

// Insertion-ordered Map as LRU: a hit is re-inserted at the end, the first key is the oldest.
// Failures are cached too, so a client retrying a bad schema is refused just as cheaply.
const cache = new Map<string, { gbnf?: string; error?: unknown }>();

/** Compiles `c` to GBNF (cached). Throws a ConstraintError unless exactly one key is given. */
export function compileConstraint(c: Constraint): string {
  const given = KINDS.filter((k) => c[k] !== undefined);
  if (given.length !== 1) {
    throw constraintError(
      "constraint",
      given.length === 0
        ? `a constraint needs exactly one of ${KINDS.join(", ")}; none was given`
        : `a constraint needs exactly one of ${KINDS.join(", ")}; got ${given.join(", ")}`,
    );
  }
  const kind = given[0];
  // Plain JSON.stringify, not a key-sorted form: property order is part of a schema's meaning
  // here (it fixes the order the model writes them in).
  const key = kind + ":" + JSON.stringify(c[kind]);
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    if (hit.error !== undefined) throw hit.error;
    return hit.gbnf!;
  }
  const entry: { gbnf?: string; error?: unknown } = {};
  try {
    entry.gbnf = compileUncached(kind, c);
  } catch (e) {
    entry.error = e;
  }
  cache.set(key, entry);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
  if (entry.error !== undefined) throw entry.error;
  return entry.gbnf!;
}

function compileUncached(kind: (typeof KINDS)[number], c: Constraint): string {
  switch (kind) {
    case "choice":
      return choiceToGbnf(c.choice!);
    case "regex":
      if (typeof c.regex !== "string") throw constraintError("regex", "regex must be a string");
      return regexToGbnf(c.regex);
    case "json":
      return jsonSchemaToGbnf(c.json);
    case "grammar":
      if (typeof c.grammar !== "string" || c.grammar.trim() === "") {
        throw constraintError("grammar", "grammar must be a non-empty GBNF string");
      }
      if (c.grammar.includes("\0")) throw constraintError("grammar", "grammar contains a NUL byte");
      guardGbnf(c.grammar);
      return c.grammar;
  }
}

/** Number of cached constraints (for tests and metrics). */
export function constraintCacheSize(): number {
  return cache.size;
}

/** Empties the cache (for tests). */
export function clearConstraintCache(): void {
  cache.clear();
}
