/**
 * Encoders for ggml's F16 and Q8_0 tensor formats, plus decoders used to check them.
 *
 * Q8_0 follows ggml's `quantize_row_q8_0_ref` exactly (scale `d = max|x| / 127` stored as
 * f16, `q = roundf(x * (1/d))` with the reciprocal and product in single precision, ties
 * away from zero), so a tensor quantized here is bit-identical to what llama.cpp's own
 * quantizer would produce from the same floats.
 *
 * @example
 * ```ts
 * import { encodeF16, f32ToF16, quantizeQ8_0 } from "./quantize.ts";
 *
 * f32ToF16(1); // 0x3c00
 * const x = new Float32Array(64).fill(0.5);
 * encodeF16(x).length; // 128 bytes
 * quantizeQ8_0(x).length; // 68 bytes: 2 blocks of (f16 d + 32 int8)
 * ```
 *
 * @module
 */

import { Q8_0_BLOCK_BYTES, QK8_0 } from "./types.ts";

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/**
 * IEEE half-precision bits of `x` (rounded to single precision first, then to half with
 * round-to-nearest-even, as F16C hardware and ggml's software fallback do). Overflow gives
 * infinity, tiny values become subnormals or signed zero, NaN stays a quiet NaN.
 */
export function f32ToF16(x: number): number {
  scratchF32[0] = x;
  const bits = scratchU32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0);
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half: value = m * 2^-24 with m = (1.mant as 24-bit integer) >> (14 - e).
    const shift = 14 - e;
    if (shift > 24) return sign;
    const full = mant | 0x800000;
    let m = full >>> shift;
    const rem = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (m & 1) !== 0)) m++;
    return sign | m; // m === 0x400 is exactly the smallest normal, so the carry is correct
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa bumps the exponent, which is the correct rounding (and
  // turns 65520 and above into infinity).
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++;
  return sign | h;
}

/** The value of IEEE half-precision bits `h`. */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Encode `src` as little-endian F16 into `out` (allocated when omitted; 2 bytes each). */
export function encodeF16(src: Float32Array, out?: Uint8Array): Uint8Array {
  const n = src.length;
  const dst = out ?? new Uint8Array(n * 2);
  if (dst.length < n * 2) throw new Error(`F16 output needs ${n * 2} bytes, got ${dst.length}`);
  for (let i = 0, o = 0; i < n; i++, o += 2) {
    const h = f32ToF16(src[i]);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
  }
  return dst;
}

/** Bytes of Q8_0 data for `n` values (`n` must be a multiple of 32). */
export function q8_0Size(n: number): number {
  if (n % QK8_0 !== 0) throw new Error(`Q8_0 needs a multiple of ${QK8_0} values, got ${n}`);
  return (n / QK8_0) * Q8_0_BLOCK_BYTES;
}

/**
 * Quantize `src` to Q8_0 blocks (`ggml_half d; int8_t qs[32]`) into `out` (allocated when
 * omitted). `src.length` must be a multiple of 32.
 */
export function quantizeQ8_0(src: Float32Array, out?: Uint8Array): Uint8Array {
  const size = q8_0Size(src.length);
  const dst = out ?? new Uint8Array(size);
  if (dst.length < size) throw new Error(`Q8_0 output needs ${size} bytes, got ${dst.length}`);
  const fround = Math.fround;
  for (let i = 0, o = 0; i < src.length; i += QK8_0, o += Q8_0_BLOCK_BYTES) {
    let amax = 0;
    for (let j = i; j < i + QK8_0; j++) {
      const v = src[j];
      const abs = v < 0 ? -v : v;
      if (abs > amax) amax = abs;
    }
    const d = fround(amax / 127);
    const id = d !== 0 ? fround(1 / d) : 0;
    const dh = f32ToF16(d);
    dst[o] = dh & 0xff;
    dst[o + 1] = dh >>> 8;
    for (let j = 0; j < QK8_0; j++) {
      const x = fround(src[i + j] * id);
      // roundf: halves away from zero (Math.round alone rounds -2.5 to -2). x +- 0.5 is
      // exact in double precision for these magnitudes, so truncation rounds correctly.
      dst[o + 2 + j] = Math.trunc(x < 0 ? x - 0.5 : x + 0.5);
    }
  }
  return dst;
}

/** Decode Q8_0 blocks back to floats (`d * q`, with `d` read as f16). */
export function dequantizeQ8_0(bytes: Uint8Array, n?: number): Float32Array {
  const blocks = Math.floor(bytes.length / Q8_0_BLOCK_BYTES);
  const count = n ?? blocks * QK8_0;
  if (count > blocks * QK8_0) throw new Error(`Q8_0 data holds only ${blocks * QK8_0} values`);
  const out = new Float32Array(count);
  for (let k = 0; k < count; k++) {
    const o = Math.floor(k / QK8_0) * Q8_0_BLOCK_BYTES;
    const d = f16ToF32(bytes[o] | (bytes[o + 1] << 8));
    const q = (bytes[o + 2 + (k % QK8_0)] << 24) >> 24;
    out[k] = d * q;
  }
  return out;
}
