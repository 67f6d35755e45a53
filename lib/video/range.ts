/**
 * HTTP byte ranges (RFC 9110 section 14) for video downloads: one range per request, in any of the
 * three forms (`bytes=a-b`, `bytes=a-`, `bytes=-n`). A header this server does not honour (other
 * units, several ranges, bad syntax) means "send the whole file", which the RFC allows; a
 * well-formed range that starts past the end is unsatisfiable (416).
 *
 * @example
 * ```ts
 * import { parseRange } from "./range.ts";
 * parseRange("bytes=0-99", 1000); // { kind: "range", start: 0, end: 99 }
 * parseRange("bytes=-100", 1000); // { kind: "range", start: 900, end: 999 }
 * parseRange("bytes=5000-", 1000); // { kind: "unsatisfiable" }
 * ```
 * @module
 */

export type RangeResult =
  | { kind: "full" }
  | { kind: "range"; start: number; end: number }
  | { kind: "unsatisfiable" };

export function parseRange(header: string | null | undefined, size: number): RangeResult {
  if (!header) return { kind: "full" };
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!m || (m[1] === "" && m[2] === "")) return { kind: "full" };
  if (m[1] === "") {
    const n = Number(m[2]);
    if (n === 0 || size === 0) return { kind: "unsatisfiable" };
    return { kind: "range", start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === "" ? Infinity : Number(m[2]);
  if (end < start) return { kind: "full" }; // invalid: ignore the header
  if (start >= size) return { kind: "unsatisfiable" };
  return { kind: "range", start, end: Math.min(end, size - 1) };
}
