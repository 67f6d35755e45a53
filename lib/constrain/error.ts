/**
 * The one error type every constraint compiler throws: a plain `Error` tagged with
 * `kind: "constraint"`, the offending keyword or construct, and (for JSON Schema) the JSON-pointer
 * path of that keyword, so an HTTP layer can turn it into a 400 that tells the client exactly what
 * to change.
 *
 * @example
 * ```ts
 * import { constraintError, isConstraintError } from "./error.ts";
 * try {
 *   throw constraintError("multipleOf", "unsupported keyword", "#/properties/a/multipleOf");
 * } catch (e) {
 *   if (isConstraintError(e)) console.log(e.keyword, e.path); // multipleOf #/properties/a/multipleOf
 * }
 * ```
 * @module
 */

/** A constraint that cannot be compiled (unsupported, contradictory, or malformed). */
export type ConstraintError = Error & {
  kind: "constraint";
  /** The JSON Schema keyword or regex construct at fault, e.g. `multipleOf`, `lookahead (?=`. */
  keyword: string;
  /** JSON pointer of the keyword inside the schema (`#/properties/a/multipleOf`), or a position. */
  path?: string;
};

/** Builds a {@link ConstraintError}; the message gets the path appended so logs stay readable. */
export function constraintError(keyword: string, message: string, path?: string): ConstraintError {
  const err = new Error(path ? `${message} (at ${path})` : message) as ConstraintError;
  err.name = "ConstraintError";
  err.kind = "constraint";
  err.keyword = keyword;
  if (path !== undefined) err.path = path;
  return err;
}

/** True for errors made by {@link constraintError}, also across module copies. */
export function isConstraintError(e: unknown): e is ConstraintError {
  return e instanceof Error && (e as Partial<ConstraintError>).kind === "constraint" &&
    typeof (e as Partial<ConstraintError>).keyword === "string";
}
