/**
 * Seeded pseudo-random numbers for reproducible test weights.
 *
 * The generator is sfc32 (Chris Doty-Humphrey's Small Fast Counting generator, 128-bit
 * state, passes PractRand) seeded through splitmix32. It needs only 32-bit integer
 * operations, which V8 runs fast, and the bulk `fill*` functions keep the state in locals
 * so that filling hundreds of millions of values allocates nothing per element. The
 * output depends only on the seed (integer ops, `Math.sqrt`, and V8's fdlibm-based
 * `Math.log`), so generated models are byte-identical across machines.
 *
 * @example
 * ```ts
 * import { createRng, fillNormal, nextFloat } from "./random.ts";
 *
 * const rng = createRng(42);
 * nextFloat(rng); // in [0, 1)
 * const w = new Float32Array(1024);
 * fillNormal(rng, w, 0, 0.02);
 * ```
 *
 * @module
 */

/** Generator state; treat as opaque and advance it only through this module. */
export type Rng = { state: Uint32Array };

/** splitmix32 step, used to spread a small seed over the whole state. */
function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  let z = x;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** A generator for `seed` (any number; its low 32 bits are used). */
export function createRng(seed: number): Rng {
  const state = new Uint32Array(4);
  let x = seed >>> 0;
  for (let i = 0; i < 3; i++) {
    x = splitmix32(x + i);
    state[i] = x;
  }
  state[3] = 1; // sfc32's counter
  const rng = { state };
  // Discard the first outputs, as the sfc32 reference does, to mix the seed in fully.
  for (let i = 0; i < 12; i++) nextU32(rng);
  return rng;
}

/**
 * Derive an independent seed from `seed` and a label (FNV-1a of the label mixed in), so
 * each tensor gets its own stream and does not depend on what was generated before it.
 */
export function deriveSeed(seed: number, label: string): number {
  let h = 0x811c9dc5 ^ (seed >>> 0);
  for (let i = 0; i < label.length; i++) {
    h = Math.imul(h ^ label.charCodeAt(i), 0x01000193);
  }
  return splitmix32(h >>> 0);
}

/** Next uniform 32-bit unsigned integer. */
export function nextU32(rng: Rng): number {
  const s = rng.state;
  let a = s[0], b = s[1], c = s[2], d = s[3];
  const t = (((a + b) | 0) + d) | 0;
  d = (d + 1) | 0;
  a = b ^ (b >>> 9);
  b = (c + (c << 3)) | 0;
  c = (c << 21) | (c >>> 11);
  c = (c + t) | 0;
  s[0] = a;
  s[1] = b;
  s[2] = c;
  s[3] = d;
  return t >>> 0;
}

/** Next uniform float in [0, 1) with 32 bits of randomness. */
export function nextFloat(rng: Rng): number {
  return nextU32(rng) / 4294967296;
}

/** Fill `out` with uniform values in [lo, hi). */
export function fillUniform(rng: Rng, out: Float32Array, lo = 0, hi = 1): void {
  const s = rng.state;
  let a = s[0], b = s[1], c = s[2], d = s[3];
  const scale = (hi - lo) / 4294967296;
  for (let i = 0; i < out.length; i++) {
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    out[i] = lo + (t >>> 0) * scale;
  }
  s[0] = a;
  s[1] = b;
  s[2] = c;
  s[3] = d;
}

/**
 * Fill `out` with normal values N(mean, std²) using Marsaglia's polar method: each accepted
 * pair of uniforms yields two values, so the stream is consumed two values at a time. The
 * polar method avoids Box-Muller's sin/cos and is about twice as fast here, which matters
 * when generating ~180M weights.
 */
export function fillNormal(rng: Rng, out: Float32Array, mean = 0, std = 1): void {
  const s = rng.state;
  let a = s[0], b = s[1], c = s[2], d = s[3];
  const n = out.length;
  const SCALE = 2 / 4294967296;
  for (let i = 0; i < n; i += 2) {
    let u = 0, v = 0, q = 0;
    do {
      let t = (((a + b) | 0) + d) | 0;
      d = (d + 1) | 0;
      a = b ^ (b >>> 9);
      b = (c + (c << 3)) | 0;
      c = (c << 21) | (c >>> 11);
      c = (c + t) | 0;
      u = (t >>> 0) * SCALE - 1;
      t = (((a + b) | 0) + d) | 0;
      d = (d + 1) | 0;
      a = b ^ (b >>> 9);
      b = (c + (c << 3)) | 0;
      c = (c << 21) | (c >>> 11);
      c = (c + t) | 0;
      v = (t >>> 0) * SCALE - 1;
      q = u * u + v * v;
    } while (q >= 1 || q === 0);
    const f = std * Math.sqrt((-2 * Math.log(q)) / q);
    out[i] = mean + u * f;
    if (i + 1 < n) out[i + 1] = mean + v * f;
  }
  s[0] = a;
  s[1] = b;
  s[2] = c;
  s[3] = d;
}
