/**
 * Checks a client-supplied GBNF grammar for the inputs that make llama.cpp's grammar parser crash
 * or run away instead of returning an error: a repetition `{m,n}` with `n < m` (an unsigned
 * underflow that loops while allocating) and very deep nesting (the recursive-descent parser
 * overflows the stack). Everything else is left to llama.cpp, which rejects it cleanly.
 *
 * @example
 * ```ts
 * import { guardGbnf } from "./gbnf_guard.ts";
 * guardGbnf('root ::= "a"{2,5}'); // fine
 * guardGbnf('root ::= "a"{3,1}'); // throws a ConstraintError naming the repetition
 * ```
 * @module
 */
import { constraintError } from "./error.ts";

/** Deeper than this is refused; llama.cpp's own limits reject far smaller real grammars. */
export const MAX_NESTING = 256;

export function guardGbnf(gbnf: string): void {
  let depth = 0;
  let line = 1;
  for (let i = 0; i < gbnf.length; i++) {
    const ch = gbnf[i];
    if (ch === "\n") line++;
    else if (ch === "#") {
      while (i + 1 < gbnf.length && gbnf[i + 1] !== "\n") i++;
    } else if (ch === '"' || ch === "[") {
      // Skip a literal or a class, honouring backslash escapes, so their contents never count.
      const close = ch === '"' ? '"' : "]";
      for (i++; i < gbnf.length && gbnf[i] !== close; i++) if (gbnf[i] === "\\") i++;
    } else if (ch === "(") {
      if (++depth > MAX_NESTING) {
        throw constraintError(
          "grammar",
          `grammar nests groups deeper than ${MAX_NESTING} (line ${line})`,
        );
      }
    } else if (ch === ")") depth = Math.max(0, depth - 1);
    else if (ch === "{") {
      const m = /^\{\s*(\d+)\s*,\s*(\d+)\s*\}/.exec(gbnf.slice(i, i + 64));
      if (m && Number(m[2]) < Number(m[1])) {
        throw constraintError(
          "grammar",
          `grammar repetition ${m[0]} has a maximum below its minimum (line ${line})`,
        );
      }
    }
  }
}
