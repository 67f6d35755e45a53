/**
 * A grammar that accepts exactly one of a fixed list of strings (the vLLM-style `choice`
 * constraint).
 *
 * @example
 * ```ts
 * import { choiceToGbnf } from "./choice.ts";
 * choiceToGbnf(["yes", "no", 'say "maybe"']);
 * // 'root ::= "yes" | "no" | "say \\"maybe\\""\n'
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import { alt, lit, newGrammar, render } from "./gbnf.ts";

/** Alternation of the exact strings; an empty or non-string list is a ConstraintError. */
export function choiceToGbnf(choices: string[]): string {
  if (!Array.isArray(choices) || choices.length === 0) {
    throw constraintError("choice", "choice needs a non-empty list of strings");
  }
  const bad = choices.findIndex((c) => typeof c !== "string");
  if (bad >= 0) {
    throw constraintError("choice", `choice[${bad}] is not a string`, `choice/${bad}`);
  }
  return render(newGrammar(), alt(...choices.map(lit)));
}
