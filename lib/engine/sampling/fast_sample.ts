/**
 * Seeded temperature sampling straight from the logits row, with the semantics of the chain
 * `buildSamplerChain` makes without penalties or top-k (logit bias, top-p, min-p, temperature,
 * dist): the same candidate set, in the same order, with the same draws of the same Mersenne
 * Twister, so a seed picks the token llama.cpp's chain picks (up to float rounding at a top-p
 * boundary).
 *
 * Why not the chain: `llama_sampler_sample` copies the whole 128k-vocabulary row into a candidate
 * array, and a top-p without a top-k in front (a request's `top_k: 0`, or a model whose GGUF
 * defaults carry none) then sorts all of it: 1.7-3 ms a token on 2 cores. Every token that can end
 * up in the candidate set lies within a few logits of the maximum (min-p bounds it; a top-p set is
 * a prefix of the sorted row), so this scans the row once (after a strided look for the maximum),
 * sums the top-p's total only where it is not negligible, and sorts just the few survivors:
 * 0.14-0.3 ms.
 *
 * @example
 * ```ts
 * import { fastSampler } from "./fast_sample.ts";
 * import { defaultSampling } from "./sampling.ts";
 * declare const row: Float32Array;
 * const sample = fastSampler({ ...defaultSampling(), topK: 0, seed: 7 }, [], row.length)!;
 * const token: number = sample(row);
 * ```
 * @module
 */
import { greedyBias, isNeutralPenalty, randomSeed, type Sampling } from "./sampling.ts";

/** Samples one token from a logits row (left as it was found). */
export type RowSampler = (row: Float32Array) => number;

/**
 * Rows this thread's fast samplers have sampled since it started: the scheduler's other paths
 * (llama.cpp's chain) give the same tokens, so this is how a test sees which one ran.
 */
export const fastSampleCount: { rows: number } = { rows: 0 };

/** llama.cpp's "no seed" value: its dist sampler then seeds from the system. */
const DEFAULT_SEED = 0xFFFFFFFF;

/** The first window (in logits below the maximum) a lone top-p searches; it doubles. */
const FIRST_WINDOW = 16;

/**
 * A top-p's total is summed over the tokens within this many logits of the maximum; the rest,
 * each under e^-20, move it by at most 128k * 2e-9: it is exact enough to place the top-p cut
 * unless the cut falls within that of a boundary, and then the whole row is summed.
 */
const NEAR = 20;

/**
 * The sampler for `s` with `banned` tokens at -inf (EOG under `ignore_eos`), or undefined when
 * its chain is not one this module reproduces: greedy (see `greedyPick`) or with penalties.
 */
export function fastSampler(
  s: Sampling,
  banned: number[],
  nVocab: number,
): RowSampler | undefined {
  // With a top-k, llama.cpp's partial sort of the copied row is as fast as a pass here (0.14 ms
  // a 128k row on 2 cores, against 0.23 for a heap in JS): the chain keeps those.
  if (s.temperature <= 0 || !isNeutralPenalty(s) || s.topK > 0) return undefined;
  // The chain's logit-bias sampler: the same per-token float additions as the greedy pick's.
  const bias = greedyBias({ ...s, temperature: 0 }, banned, nVocab)!;
  const saved = new Float32Array(bias.ids.length);
  const next = mt19937(s.seed >>> 0 === DEFAULT_SEED ? randomSeed() : s.seed >>> 0);
  const o: Options = {
    topP: Math.fround(s.topP),
    minP: Math.fround(s.minP),
    temperature: Math.fround(s.temperature),
    logMinP: s.minP > 0 ? Math.fround(Math.log(Math.fround(s.minP))) : -Infinity,
  };
  return (row) => {
    for (let k = 0; k < bias.ids.length; k++) {
      const t = bias.ids[k];
      saved[k] = row[t];
      let v = row[t];
      for (const x of bias.biases[k]) v = Math.fround(v + x);
      row[t] = v;
    }
    fastSampleCount.rows++;
    try {
      return pick(row, o, uniform01(next));
    } finally {
      for (let k = 0; k < bias.ids.length; k++) row[bias.ids[k]] = saved[k];
    }
  };
}

type Options = {
  topP: number;
  minP: number;
  temperature: number;
  /** `logf(min_p)` as llama.cpp computes it, -inf without min-p. */
  logMinP: number;
};

/** Token ids scratch, shared: sampling runs on the engine's one thread, one row at a time. */
let scratch = new Int32Array(1024);
/** The candidates' weights, shared likewise. */
let weights = new Float64Array(1024);

/** The chain on `row` (biases applied), drawing with `rnd` in [0, 1). */
function pick(row: Float32Array, o: Options, rnd: number): number {
  const n = row.length;
  // Min-p keeps the tokens at most -logMinP below the maximum, and a top-p's prefix beyond them
  // is cut back to them, so that window holds the answer; a top-p alone starts with a guess and
  // widens it; with neither, the whole row is the set.
  let window = o.minP > 0 ? -o.logMinP + 1 : o.topP < 1 ? FIRST_WINDOW : Infinity;
  if (o.topP >= 1) {
    const m = rowMax(row);
    if (m === -Infinity) return 0;
    const count = collect(row, m - window);
    return temperatureDist(row, scratch, minPUnsorted(row, count, m, o), o, rnd);
  }
  let reach = Math.max(NEAR, window);
  for (;;) {
    // One pass: every token within `reach` of the maximum, sorted, with the top-p's total.
    const m = collectWithin(row, reach);
    if (m === -Infinity) return 0;
    const count = nearCount;
    const total = nearTotal(row, count, m);
    // Each token outside weighs less than e^-reach.
    const high = total + (n - count) * Math.exp(-reach);
    // Only the window's tokens can be kept: sort just those.
    const inWindow = keepAbove(row, count, m - window);
    const ids = sortDescending(row, inWindow);
    const cut = topPCutBounded(row, ids, inWindow, m, total, high, o.topP);
    if (cut === undefined && inWindow < n && o.minP <= 0) {
      // The prefix reaching top_p is longer than the window: look further.
      window *= 2;
      reach = Math.max(reach, window);
      continue;
    }
    // Without a cut in the window, min-p (whose set the window holds) cuts inside it.
    let size = cut ?? inWindow;
    if (o.minP > 0) size = minPSorted(row, ids, size, o);
    return temperatureDist(row, ids, size, o, rnd);
  }
}

/**
 * The weights e^(v - m) of the scratch list's first `count` tokens, summed with a polynomial
 * `exp` (relative error under 1e-6, inside the 1e-4 the bounds allow for rounding): a random
 * model keeps thousands of tokens within reach, and `Math.exp` costs 20 ns each.
 */
function nearTotal(row: Float32Array, count: number, m: number): number {
  let total = 0;
  for (let i = 0; i < count; i++) {
    const y = (row[scratch[i]] - m) * Math.LOG2E;
    const k = Math.floor(y);
    const t = (y - k) * Math.LN2;
    // e^t on [0, ln 2): Taylor to t^8 (error under 3e-8 relative).
    const e = 1 + t * (1 + t * (1 / 2 + t * (1 / 6 + t * (1 / 24 + t * (1 / 120 +
                          t * (1 / 720 + t * (1 / 5040 + t / 40320)))))));
    total += k < -1000 ? 0 : e * POW2[-k];
  }
  return total;
}

/** 2^-i for i in 0..1023 (past that, a weight is 0 for the total). */
const POW2 = Float64Array.from({ length: 1025 }, (_, i) => 2 ** -i);

/** Moves the scratch list's tokens at or above `lo` to its front, in order; their count. */
function keepAbove(row: Float32Array, count: number, lo: number): number {
  let kept = 0;
  for (let i = 0; i < count; i++) {
    const t = scratch[i];
    if (row[t] >= lo) scratch[kept++] = t;
  }
  return kept;
}

/** The largest logit of the row. */
function rowMax(row: Float32Array): number {
  let m = -Infinity;
  for (let i = 0; i < row.length; i++) {
    const v = row[i];
    if (v > m) m = v;
  }
  return m;
}

/** Puts the ids of the tokens at or above `lo` into the scratch list, in order; their count. */
function collect(row: Float32Array, lo: number): number {
  const n = row.length;
  // Room for the whole row, so the loop has no growth check (one 4-byte slot per token, shared).
  if (scratch.length < n) scratch = new Int32Array(n);
  const ids = scratch;
  let count = 0;
  for (let i = 0; i < n; i++) if (row[i] >= lo) ids[count++] = i;
  return count;
}

/** How many tokens the last `collectWithin` left in the scratch list. */
let nearCount = 0;

/**
 * Puts the ids of the tokens within `reach` of the row's maximum into the scratch list (in
 * order; their count in `nearCount`) and returns the maximum, in one pass over the row.
 */
function collectWithin(row: Float32Array, reach: number): number {
  const n = row.length;
  if (scratch.length < n) scratch = new Int32Array(n);
  const ids = scratch;
  // The maximum of every 16th logit: at most the row's, and close enough to it that the tokens
  // kept on the way (within reach of it but not of the row's maximum) stay few.
  let m = -Infinity;
  for (let i = 0; i < n; i += 16) {
    const v = row[i];
    if (v > m) m = v;
  }
  let lo = m - reach;
  let count = 0;
  for (let i = 0; i < n; i++) {
    const v = row[i];
    if (v < lo) continue;
    ids[count++] = i;
    if (v > m) {
      m = v;
      lo = m - reach;
    }
  }
  nearCount = keepAbove(row, count, lo);
  return m;
}

/** The scratch list's first `count` ids sorted by logit, highest first (lower id among equals). */
function sortDescending(row: Float32Array, count: number): Int32Array {
  return scratch.subarray(0, count).sort((a, b) => row[b] - row[a] || a - b);
}

/**
 * The top-p cut among the `count` sorted window tokens, the row's total being between `low` and
 * `high`; only when the bounds put the cut in different places is the total summed exactly, in
 * float and in vocabulary order as llama.cpp sums it.
 */
function topPCutBounded(
  row: Float32Array,
  ids: Int32Array,
  count: number,
  m: number,
  low: number,
  high: number,
  p: number,
): number | undefined {
  // 1e-4: what float rounding of llama.cpp's 128k-term sum may be off by.
  const a = topPCut(row, ids, count, m, Math.fround(low * (1 - 1e-4)), p);
  const b = topPCut(row, ids, count, m, Math.fround(high * (1 + 1e-4)), p);
  if (a === b) return a;
  return topPCut(row, ids, count, m, floatMass(row, m), p);
}

/** llama.cpp's softmax total: float weights summed in float, in vocabulary order. */
function floatMass(row: Float32Array, m: number): number {
  let mass = 0;
  for (let i = 0; i < row.length; i++) {
    mass = Math.fround(mass + Math.fround(Math.exp(Math.fround(row[i] - m))));
  }
  return mass;
}

/** llama.cpp's min-p on a sorted prefix: the first token, then those at least min-p of it. */
function minPSorted(row: Float32Array, ids: Int32Array, size: number, o: Options): number {
  const min = Math.fround(row[ids[0]] + o.logMinP);
  let i = 1;
  while (i < size && row[ids[i]] >= min) i++;
  return i;
}

/**
 * llama.cpp's top-p on a sorted prefix: probabilities normalised by the float `sum`, summed in
 * float until they reach `p`; undefined when the `size` tokens do not reach it.
 */
function topPCut(
  row: Float32Array,
  ids: Int32Array,
  size: number,
  m: number,
  sum: number,
  p: number,
): number | undefined {
  let cum = 0;
  for (let i = 0; i < size; i++) {
    const e = Math.fround(Math.exp(Math.fround(row[ids[i]] - m)));
    cum = Math.fround(cum + Math.fround(e / sum));
    if (cum >= p) return i + 1;
  }
  return undefined;
}

/** llama.cpp's min-p on an unsorted row: the scratch tokens at least min-p of the top, in order. */
function minPUnsorted(row: Float32Array, count: number, m: number, o: Options): number {
  if (o.minP <= 0) return count;
  const min = Math.fround(m + o.logMinP);
  let kept = 0;
  for (let i = 0; i < count; i++) {
    if (row[scratch[i]] >= min) scratch[kept++] = scratch[i];
  }
  return kept;
}

/**
 * The temperature and dist samplers on the candidates `ids[0..size)` in the chain's order:
 * logits divided by the temperature in float, float `expf` weights summed in double, and the
 * first candidate whose running sum reaches `rnd` of the total.
 */
function temperatureDist(
  row: Float32Array,
  ids: Int32Array,
  size: number,
  o: Options,
  rnd: number,
): number {
  if (size === 1) return ids[0];
  if (weights.length < size) weights = new Float64Array(Math.max(size, weights.length * 2));
  let max = -Infinity;
  for (let i = 0; i < size; i++) {
    const l = Math.fround(row[ids[i]] / o.temperature);
    weights[i] = l;
    if (l > max) max = l;
  }
  let total = 0;
  for (let i = 0; i < size; i++) {
    weights[i] = Math.fround(Math.exp(Math.fround(weights[i] - max)));
    total += weights[i];
  }
  const target = total * rnd;
  let run = 0;
  for (let i = 0; i < size; i++) {
    run += weights[i];
    if (run >= target) return ids[i];
  }
  return ids[size - 1];
}

/** `std::mt19937` seeded with `seed`: the next 32-bit output on each call. */
export function mt19937(seed: number): () => number {
  const mt = new Uint32Array(624);
  mt[0] = seed >>> 0;
  for (let k = 1; k < 624; k++) {
    const x = mt[k - 1] ^ (mt[k - 1] >>> 30);
    mt[k] = (Math.imul(1812433253, x) + k) >>> 0;
  }
  let at = 624;
  return () => {
    if (at >= 624) {
      for (let k = 0; k < 624; k++) {
        const y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7fffffff);
        mt[k] = mt[(k + 397) % 624] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
      }
      at = 0;
    }
    let y = mt[at++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  };
}

/**
 * `std::uniform_real_distribution<double>(0, 1)` over a 32-bit generator as libstdc++ draws it
 * (`generate_canonical<double, 53>`: two outputs, the first as the low word).
 */
export function uniform01(next: () => number): number {
  const lo = next();
  const hi = next();
  const r = (lo + hi * 4294967296) / 18446744073709551616;
  return r >= 1 ? 1 - 2 ** -53 : r;
}
