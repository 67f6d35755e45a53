/**
 * Integers that are multiples of `m` (JSON Schema `multipleOf` on integers) as a grammar: within
 * narrow bounds the multiples are listed; without bounds (or from 0 up) a divisibility automaton
 * reads the digits (state = value so far modulo `m`), one rule per remainder.
 *
 * @example
 * ```ts
 * import { multiplesOf } from "./multiples.ts";
 * import { newGrammar, render } from "./gbnf.ts";
 * render(newGrammar(), multiplesOf(5, 0n, 20n)!); // 0, 5, 10, 15 or 20
 * multiplesOf(7, null, null); // any multiple of 7, as digits read modulo 7
 * multiplesOf(3, 5n, 10n ** 12n); // undefined: too wide to list, not open enough for the automaton
 * ```
 * @module
 */
import {
  alt,
  charSet,
  cls,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  lit,
  NEVER,
  newGrammar,
  ref,
  reserve,
  seq,
} from "./gbnf.ts";
import { integerRange } from "./numeric.ts";
import { literalTrie } from "./text_without.ts";

/** Most multiples listed one by one. */
const MAX_LISTED = 1024;
/** Largest divisor read by an automaton (one rule per remainder). */
const MAX_AUTOMATON = 1000;

/**
 * Multiples of `m` in `[lo, hi]` (null: open), or undefined when neither listing nor the
 * automaton fits (wide bounds that are not `[0, ∞)` or `(-∞, ∞)`).
 */
export function multiplesOf(
  m: number,
  lo: bigint | null,
  hi: bigint | null,
  g: Grammar = newGrammar(),
): Expr | undefined {
  if (m === 1) return integerRange(lo, hi);
  const k = BigInt(m);
  if (lo !== null && hi !== null) {
    if (lo > hi) return NEVER;
    const first = lo % k === 0n ? lo : lo > 0n ? lo + (k - lo % k) : lo - lo % k;
    const count = first > hi ? 0n : (hi - first) / k + 1n;
    if (count === 0n) return NEVER;
    if (count <= BigInt(MAX_LISTED)) {
      const values: string[] = [];
      for (let v = first; v <= hi; v += k) values.push(String(v));
      return literalTrie(values, g, `mult-${m}`);
    }
  }
  const open = hi === null && (lo === null || lo === 0n || lo === 1n);
  if (!open || m > MAX_AUTOMATON) return undefined;
  // Rule r: the digits still to come, given the value read so far is r modulo m.
  const names = Array.from({ length: m }, (_, r) => reserve(g, `mult-${m}-r${r}`));
  for (let r = 0; r < m; r++) {
    const byTarget = new Map<number, string>();
    for (let d = 0; d <= 9; d++) {
      const t = (10 * r + d) % m;
      byTarget.set(t, (byTarget.get(t) ?? "") + d);
    }
    const branches = [...byTarget].map(([t, ds]) => seq(cls(charSet(ds)), ref(names[t])));
    define(g, names[r], alt(r === 0 ? EMPTY : NEVER, ...branches));
  }
  // A leading non-zero digit, then the automaton; 0 is a multiple too (unless lo is 1).
  const byStart = new Map<number, string>();
  for (let d = 1; d <= 9; d++) byStart.set(d % m, (byStart.get(d % m) ?? "") + d);
  const positive = alt(...[...byStart].map(([t, ds]) => seq(cls(charSet(ds)), ref(names[t]))));
  if (lo === 1n) return positive;
  if (lo === 0n) return alt(lit("0"), positive);
  return alt(lit("0"), seq(alt(EMPTY, lit("-")), positive));
}
