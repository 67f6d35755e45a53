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
import { chainAdd, type Llama, samplerChain, type SamplerPtr, samplers } from "../../ffi/mod.ts";

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

export function defaultSampling(): Sampling {
  return {
    temperature: 1,
    topP: 1,
    topK: 0,
    minP: 0,
    repetitionPenalty: 1,
    frequencyPenalty: 0,
    presencePenalty: 0,
    penaltyLastN: 64,
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
