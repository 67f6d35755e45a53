/**
 * Per-request sampling settings and the llama.cpp sampler chain built from them. The chain order
 * follows llama.cpp's common defaults: logit bias, penalties, top-k, top-p, min-p, temperature,
 * then the seeded distribution (or greedy at temperature 0).
 *
 * @example
 * ```ts
 * import { buildSamplerChain, defaultSampling } from "./sampling.ts";
 * const chain = buildSamplerChain(llama, nVocab, { ...defaultSampling(), seed: 7 }, []);
 * ```
 * @module
 */
import { chainAdd, type Llama, samplerChain, type SamplerPtr, samplers } from "../../../ffi/mod.ts";

export type Sampling = {
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repetitionPenalty: number;
  frequencyPenalty: number;
  presencePenalty: number;
  /** Tokens the penalties look back over. */
  penaltyLastN: number;
  seed: number;
  logitBias: [number, number][];
};

/**
 * What a request that names no sampling field gets (agents send none): the model's own
 * recommendation where its GGUF has one (`general.sampling.*`), else llama.cpp's common defaults.
 */
export type SamplingDefaults = {
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  repetitionPenalty: number;
  penaltyLastN: number;
  /** Which of these the model's GGUF set (the rest are Hearth's). */
  fromModel: string[];
};

/** llama.cpp's common defaults (`llama-server` samples with these when a request sends none). */
export const HEARTH_SAMPLING_DEFAULTS: SamplingDefaults = {
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repetitionPenalty: 1,
  penaltyLastN: 64,
  fromModel: [],
};

/** The GGUF keys a model may recommend its sampling with, and the field each sets. */
const MODEL_SAMPLING_KEYS: [string, keyof Omit<SamplingDefaults, "fromModel">][] = [
  ["general.sampling.temp", "temperature"],
  ["general.sampling.top_k", "topK"],
  ["general.sampling.top_p", "topP"],
  ["general.sampling.min_p", "minP"],
  ["general.sampling.penalty_repeat", "repetitionPenalty"],
  ["general.sampling.penalty_last_n", "penaltyLastN"],
];

/** The defaults for a model whose metadata `meta(key)` reads; values out of range are skipped. */
export function modelSamplingDefaults(meta: (key: string) => string | undefined): SamplingDefaults {
  const out: SamplingDefaults = { ...HEARTH_SAMPLING_DEFAULTS, fromModel: [] };
  for (const [key, field] of MODEL_SAMPLING_KEYS) {
    const raw = meta(key);
    if (raw === undefined || raw.trim() === "") continue;
    const v = Number(raw);
    const ok = Number.isFinite(v) && v >= 0 &&
      (field === "topP" || field === "minP" ? v <= 1 : true) &&
      (field === "topK" || field === "penaltyLastN" ? Number.isInteger(v) : true);
    if (!ok) continue;
    out[field] = v;
    out.fromModel.push(key);
  }
  return out;
}

export function defaultSampling(d: SamplingDefaults = HEARTH_SAMPLING_DEFAULTS): Sampling {
  return {
    temperature: d.temperature,
    topP: d.topP,
    topK: d.topK,
    minP: d.minP,
    repetitionPenalty: d.repetitionPenalty,
    frequencyPenalty: 0,
    presencePenalty: 0,
    penaltyLastN: d.penaltyLastN,
    seed: randomSeed(),
    logitBias: [],
  };
}

export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

/** Builds a chain; `banned` tokens (EOG under `ignore_eos`) get a -inf bias. */
export function buildSamplerChain(
  llama: Llama,
  nVocab: number,
  s: Sampling,
  banned: number[],
): SamplerPtr {
  const make = samplers(llama);
  const chain = samplerChain(llama);
  const bias = [...s.logitBias, ...banned.map((t): [number, number] => [t, -Infinity])];
  if (bias.length) chainAdd(llama, chain, make.logitBias(nVocab, bias));
  if (!isNeutralPenalty(s)) {
    chainAdd(
      llama,
      chain,
      make.penalties(
        nVocab,
        s.penaltyLastN,
        s.repetitionPenalty,
        s.frequencyPenalty,
        s.presencePenalty,
      ),
    );
  }
  if (s.temperature <= 0) {
    chainAdd(llama, chain, make.greedy());
    return chain;
  }
  if (s.topK > 0) chainAdd(llama, chain, make.topK(s.topK));
  if (s.topP < 1) chainAdd(llama, chain, make.topP(s.topP));
  if (s.minP > 0) chainAdd(llama, chain, make.minP(s.minP));
  chainAdd(llama, chain, make.temp(s.temperature));
  chainAdd(llama, chain, make.dist(s.seed));
  return chain;
}

/** Whether the penalties are all off (no penalty sampler in the chain). */
export function isNeutralPenalty(s: Sampling): boolean {
  return s.repetitionPenalty === 1 && s.frequencyPenalty === 0 && s.presencePenalty === 0;
}

/**
 * Whether llama.cpp's decode graph can run this chain cheaply (backend sampling): every sampler
 * the chain uses has a graph form, but top-p and min-p over the whole vocabulary sort 128k
 * logits in the graph, so without a top-k in front they stay on the CPU.
 */
export function backendSamplingFits(s: Sampling): boolean {
  if (s.temperature <= 0) return true;
  return s.topK > 0 || (s.topP >= 1 && s.minP <= 0);
}

/** A greedy request's logit biases: token ids ascending, each with its biases in order. */
export type GreedyBias = { ids: Int32Array; biases: number[][] };

/**
 * The biases of a request whose chain is plain greedy (temperature 0, no penalties: logit bias
 * then argmax), or undefined when its chain does more. Such a request is sampled by `greedyPick`
 * on the logits row in place: llama.cpp's CPU chain first copies the whole row into a candidate
 * array to take the same argmax (128k vocabulary, 2 cores: 0.145 ms a row, against 0.105).
 */
export function greedyBias(s: Sampling, banned: number[], nVocab: number): GreedyBias | undefined {
  if (s.temperature > 0 || !isNeutralPenalty(s)) return undefined;
  const byToken = new Map<number, number[]>();
  // The chain's one logit-bias sampler takes the user's biases, then the banned tokens, and adds
  // each as a float in that order; ids outside the vocabulary are ignored.
  const entries: [number, number][] = [
    ...s.logitBias,
    ...banned.map((t): [number, number] => [t, -Infinity]),
  ];
  for (const [t, b] of entries) {
    if (!Number.isInteger(t) || t < 0 || t >= nVocab) continue;
    const list = byToken.get(t) ?? [];
    list.push(Math.fround(b));
    byToken.set(t, list);
  }
  const ids = Int32Array.from([...byToken.keys()].sort((a, b) => a - b));
  return { ids, biases: Array.from(ids, (t) => byToken.get(t)!) };
}

/**
 * The token llama.cpp's greedy chain would pick from `row` with biases `b`: the highest biased
 * logit, the lowest id among equals (its greedy sampler keeps the first maximum in vocabulary
 * order). Biased ids are visited between the plain runs, so the scan costs one compare a token.
 */
export function greedyPick(row: Float32Array, b: GreedyBias): number {
  let best = -Infinity;
  let pick = 0;
  let from = 0;
  for (let k = 0; k <= b.ids.length; k++) {
    const to = k < b.ids.length ? b.ids[k] : row.length;
    for (let i = from; i < to; i++) {
      const v = row[i];
      if (v > best) {
        best = v;
        pick = i;
      }
    }
    if (k === b.ids.length) break;
    let v = row[to];
    for (const x of b.biases[k]) v = Math.fround(v + x);
    if (v > best) {
      best = v;
      pick = to;
    }
    from = to + 1;
  }
  return pick;
}
