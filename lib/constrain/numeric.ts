/**
 * Exact grammars for bounded numbers in JSON text: integers in `[lo, hi]` (either end open) and
 * plain decimals (`-1.25`, no exponent) between two bounds. Digits never have leading zeros and
 * `-0` is never produced.
 *
 * Bounds arrive as JS doubles and validators compare the *parsed double* of the text, so a bound
 * is turned into a decimal that makes every accepted text valid after rounding: an inclusive
 * bound uses its shortest round-trip decimal, an exclusive one the next double inward (rounding
 * is monotonic, so `text >= decimal` implies `parse(text) >= bound`).
 *
 * @example
 * ```ts
 * import { integerRange } from "./numeric.ts";
 * import { newGrammar, render } from "./gbnf.ts";
 * render(newGrammar(), integerRange(0n, 255n));
 * // 'root ::= [0-9] | [1-9] [0-9] | "1" [0-9]{2} | "2" ([0-4] [0-9] | "5" [0-5])\n'
 * ```
 * @module
 */
import { alt, charSet, cls, EMPTY, type Expr, lit, NEVER, opt, rep, seq } from "./gbnf.ts";

const DIGIT = cls(charSet(["0", "9"]));
const NONZERO = cls(charSet(["1", "9"]));

function digitRange(a: number, b: number): Expr {
  return a > b ? NEVER : cls(charSet([String(a), String(b)]));
}

// Same-length digit strings between lo and hi inclusive (lo <= hi).
function sameLength(lo: string, hi: string): Expr {
  if (lo === hi) return lit(lo);
  if (lo[0] === hi[0]) return seq(lit(lo[0]), sameLength(lo.slice(1), hi.slice(1)));
  const n = lo.length - 1;
  const a = Number(lo[0]);
  const b = Number(hi[0]);
  if (n === 0) return digitRange(a, b);
  const loIsMin = /^0*$/.test(lo.slice(1));
  const hiIsMax = /^9*$/.test(hi.slice(1));
  return alt(
    loIsMin ? NEVER : seq(lit(lo[0]), sameLength(lo.slice(1), "9".repeat(n))),
    seq(digitRange(loIsMin ? a : a + 1, hiIsMax ? b : b - 1), rep(DIGIT, n, n)),
    hiIsMax ? NEVER : seq(lit(hi[0]), sameLength("0".repeat(n), hi.slice(1))),
  );
}

/** Non-negative integers in `[a, b]` (`b` null: no upper bound), canonical decimal. */
export function naturalRange(a: bigint, b: bigint | null): Expr {
  if (a < 0n) a = 0n;
  if (b !== null && a > b) return NEVER;
  const la = String(a).length;
  const parts: Expr[] = [];
  if (b === null) {
    parts.push(sameLength(String(a), "9".repeat(la)));
    // Longer numbers up to MAX_DIGITS (or one digit past `a`): exact as a double, never Infinity.
    const most = Math.max(la + 1, MAX_DIGITS);
    if (most > la) parts.push(seq(NONZERO, rep(DIGIT, la, most - 1)));
  } else {
    const lb = String(b).length;
    for (let len = la; len <= lb; len++) {
      const lo = len === la ? String(a) : "1" + "0".repeat(len - 1);
      const hi = len === lb ? String(b) : "9".repeat(len);
      parts.push(sameLength(lo, hi));
    }
  }
  return alt(...parts);
}

/** Integers in `[lo, hi]` (null: open), as JSON text. */
export function integerRange(lo: bigint | null, hi: bigint | null): Expr {
  if (lo !== null && hi !== null && lo > hi) return NEVER;
  const parts: Expr[] = [];
  if (lo === null || lo < 0n) {
    const negHi = hi === null || hi >= 0n ? -1n : hi;
    parts.push(seq(lit("-"), naturalRange(-negHi, lo === null ? null : -lo)));
  }
  if (hi === null || hi >= 0n) parts.push(naturalRange(lo === null || lo < 0n ? 0n : lo, hi));
  return alt(...parts);
}

/**
 * Most digits of an integer part an unbounded number may have: every such integer is exact as a
 * double (below 2^53), so the value a client parses is the one the model wrote.
 */
export const MAX_DIGITS = 15;

/** Any JSON integer (no `-0`) of at most {@link MAX_DIGITS} digits. */
export function anyInteger(): Expr {
  return alt(lit("0"), seq(opt(lit("-")), NONZERO, rep(DIGIT, 0, MAX_DIGITS - 1)));
}

/**
 * Any JSON number whose value is finite as a double: at most {@link MAX_DIGITS} integer digits
 * and a two-digit exponent (a text like `1e999` parses to Infinity, which no validator accepts).
 */
export function anyNumber(): Expr {
  return seq(
    opt(lit("-")),
    alt(lit("0"), seq(NONZERO, rep(DIGIT, 0, MAX_DIGITS - 1))),
    opt(seq(lit("."), rep(DIGIT, 1, Infinity))),
    opt(seq(cls(charSet("eE")), opt(cls(charSet("+-"))), rep(DIGIT, 1, 2))),
  );
}

// ---------------------------------------------------------------- doubles and decimals

const f64 = new Float64Array(1);
const i64 = new BigInt64Array(f64.buffer);

/** The next double towards +Infinity (`dir` 1) or -Infinity (`dir` -1). */
export function nextDouble(x: number, dir: 1 | -1): number {
  if (Number.isNaN(x) || x === dir * Infinity) return x;
  if (x === 0) return dir * Number.MIN_VALUE;
  f64[0] = x;
  i64[0] += (x > 0) === (dir > 0) ? 1n : -1n;
  return f64[0];
}

/** A decimal magnitude: integer part and fraction digits without trailing zeros. */
export type Decimal = { neg: boolean; int: bigint; frac: string };

/** Exact plain-notation value of the shortest round-trip decimal of `x` (finite). */
export function toDecimal(x: number): Decimal {
  const [mant, e] = String(Math.abs(x)).split("e");
  const dot = mant.indexOf(".");
  const digits = mant.replace(".", "");
  const point = (dot === -1 ? mant.length : dot) + Number(e ?? 0);
  let intPart: string, frac: string;
  if (point <= 0) intPart = "0", frac = "0".repeat(-point) + digits;
  else if (point >= digits.length) intPart = digits + "0".repeat(point - digits.length), frac = "";
  else intPart = digits.slice(0, point), frac = digits.slice(point);
  return { neg: x < 0, int: BigInt(intPart), frac: frac.replace(/0+$/, "") };
}

function cmpMagnitude(a: Decimal, b: Decimal): number {
  if (a.int !== b.int) return a.int < b.int ? -1 : 1;
  const n = Math.max(a.frac.length, b.frac.length);
  const fa = a.frac.padEnd(n, "0");
  const fb = b.frac.padEnd(n, "0");
  return fa < fb ? -1 : fa > fb ? 1 : 0;
}

type FracDigits = { eps: boolean; ne: Expr };

// Fraction digit strings D with 0.lo <= 0.D <= 0.hi (null: that side is free; hi "" means D is
// all zeros); `nz` demands a non-zero digit (a strictly positive value with integer part 0).
function fracDigits(lo: string | null, hi: string | null, nz: boolean): FracDigits {
  if (lo === "") lo = null;
  if (lo === null && hi === null) {
    return nz
      ? { eps: false, ne: seq(rep(lit("0"), 0, Infinity), NONZERO, rep(DIGIT, 0, Infinity)) }
      : { eps: true, ne: rep(DIGIT, 1, Infinity) };
  }
  if (hi === "") {
    return nz || lo !== null
      ? { eps: false, ne: NEVER }
      : { eps: true, ne: rep(lit("0"), 1, Infinity) };
  }
  const a = lo === null ? 0 : Number(lo[0]);
  const b = hi === null ? 9 : Number(hi[0]);
  const groups = new Map<
    string,
    { digits: number[]; lo: string | null; hi: string | null; nz: boolean }
  >();
  for (let c = a; c <= b; c++) {
    const nextLo = lo !== null && c === a ? lo.slice(1) : null;
    const nextHi = hi !== null && c === b ? hi.slice(1) : null;
    const nextNz = nz && c === 0;
    const key = JSON.stringify([nextLo, nextHi, nextNz]);
    const g = groups.get(key);
    if (g) g.digits.push(c);
    else groups.set(key, { digits: [c], lo: nextLo, hi: nextHi, nz: nextNz });
  }
  const ne = alt(
    ...[...groups.values()].map((g) => {
      const rest = fracDigits(g.lo, g.hi, g.nz);
      return seq(
        cls(charSet(...g.digits.map((d) => 48 + d))),
        alt(rest.eps ? EMPTY : NEVER, rest.ne),
      );
    }),
  );
  return { eps: lo === null && !nz, ne };
}

function fraction(lo: string | null, hi: string | null, nz: boolean): Expr {
  const f = fracDigits(lo, hi, nz);
  return alt(f.eps ? EMPTY : NEVER, seq(lit("."), f.ne));
}

// Texts `I` or `I.F` whose value lies in [lo, hi] (hi null: unbounded); `positive` excludes 0.
function magnitude(lo: Decimal, hi: Decimal | null, positive: boolean): Expr {
  if (hi && cmpMagnitude(lo, hi) > 0) return NEVER;
  const nz = positive && lo.int === 0n && lo.frac === "";
  if (hi && lo.int === hi.int) return seq(lit(String(lo.int)), fraction(lo.frac, hi.frac, nz));
  return alt(
    seq(lit(String(lo.int)), fraction(lo.frac, null, nz)),
    seq(naturalRange(lo.int + 1n, hi ? hi.int - 1n : null), fraction(null, null, false)),
    hi ? seq(lit(String(hi.int)), fraction(null, hi.frac, false)) : NEVER,
  );
}

const ZERO: Decimal = { neg: false, int: 0n, frac: "" };

/**
 * Plain decimals (`-?int(.frac)?`, no exponent) whose value is in `[min, max]` as rationals;
 * `min`/`max` are the decimals of the (already inclusive) bounds, null when open.
 */
export function decimalRange(min: Decimal | null, max: Decimal | null): Expr {
  const parts: Expr[] = [];
  // Non-negative texts: magnitude in [max(min, 0), max].
  if (max === null || !max.neg) {
    parts.push(magnitude(min === null || min.neg ? ZERO : min, max, false));
  }
  // Negative texts: "-m" with m > 0 and -m in [min, max].
  if (min === null || min.neg) {
    const lo = max === null || !max.neg ? ZERO : { ...max, neg: false };
    parts.push(seq(lit("-"), magnitude(lo, min === null ? null : { ...min, neg: false }, true)));
  }
  return alt(...parts);
}

/** Effective inclusive bounds from JSON Schema's four keywords (undefined where absent). */
export function inclusiveBounds(
  k: { minimum?: number; maximum?: number; exclusiveMinimum?: number; exclusiveMaximum?: number },
): { lo?: number; hi?: number } {
  const los = [
    k.minimum,
    k.exclusiveMinimum === undefined ? undefined : nextDouble(k.exclusiveMinimum, 1),
  ]
    .filter((x): x is number => x !== undefined);
  const his = [
    k.maximum,
    k.exclusiveMaximum === undefined ? undefined : nextDouble(k.exclusiveMaximum, -1),
  ]
    .filter((x): x is number => x !== undefined);
  return {
    lo: los.length ? Math.max(...los) : undefined,
    hi: his.length ? Math.min(...his) : undefined,
  };
}
