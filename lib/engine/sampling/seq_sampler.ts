/**
 * Each sequence's sampler, from admission to release: the chain (in the decode graph where the
 * request allows backend sampling, else on the CPU: a plain greedy pick or a seeded fast sampler
 * straight from the logits row when the chain is that simple, llama.cpp's chain otherwise), its
 * grammar, and the draw of one batch row (a reasoning budget's forced token comes first).
 * Stateless backend chains stay attached to their slot for the next request that would build the
 * same one, because attaching or detaching a chain makes llama.cpp reserve its graphs again.
 *
 * @example
 * ```ts ignore
 * import { createSeqSampler } from "./seq_sampler.ts";
 * const sampler = createSeqSampler({ m, stats, backendSampling: false });
 * sampler.attach(seq); // after the sequence took its slot
 * const token = sampler.sampleRow(seq, seq.logitIndex); // after the decode
 * sampler.detach(seq);
 * ```
 * @module
 */
import {
  logitsIth,
  sampledToken,
  samplerAccept,
  samplerFree,
  type SamplerPtr,
  samplerSample,
  setBackendSampler,
} from "../../../ffi/mod.ts";
import {
  freeGrammarSampler,
  newGrammarSampler,
  sampleConstrained,
} from "../grammar/constrained.ts";
import { fastSampler } from "./fast_sample.ts";
import type { EngineModel } from "../model.ts";
import { forcedToken } from "./reasoning_budget.ts";
import {
  backendSamplingFits,
  buildSamplerChain,
  greedyBias,
  greedyPick,
  isNeutralPenalty,
} from "./sampling.ts";
import type { Seq, StepCounters } from "../sched_state.ts";

export type SeqSamplerDeps = {
  m: EngineModel;
  stats: StepCounters;
  /** Whether requests that allow it sample in the decode graph. */
  backendSampling: boolean;
};

export type SeqSampler = {
  /** Builds the sequence's chain and grammar (it holds its slot); throws when they cannot be. */
  attach(seq: Seq): void;
  /** Frees what `attach` built, but a chain left attached to the slot for the next request. */
  detach(seq: Seq): void;
  /** Samples batch row `row` of `seq`; undefined when the grammar allows nothing more. */
  sampleRow(seq: Seq, row: number): number | undefined;
};

export function createSeqSampler(d: SeqSamplerDeps): SeqSampler {
  const { m, stats, backendSampling } = d;
  /** Stateless chains left attached to idle slots for the next request (see attachChain). */
  const slotKept: ({ chain: SamplerPtr; key: string } | undefined)[] = new Array(m.maxBatch)
    .fill(undefined);

  function attach(seq: Seq): void {
    attachChain(seq);
    if (seq.req.grammar) {
      seq.grammar = newGrammarSampler(m, seq.req.grammar, seq.req.grammarTriggers);
    }
  }

  /**
   * Builds the sequence's sampler chain and, when the request allows it, hands it to the decode
   * graph (backend sampling). A stateless chain (greedy without penalties) stays attached to its
   * slot after the request and serves the next request that would build the same one, because
   * attaching or detaching a chain makes llama.cpp reserve its graphs again on the next step.
   */
  function attachChain(seq: Seq): void {
    const { req } = seq;
    const banned = req.ignoreEos ? m.eogTokens : [];
    const backend = backendSampling && !req.grammar && req.logprobs === undefined &&
      req.promptLogprobs === undefined && backendSamplingFits(req.sampling);
    const key = backend && req.sampling.temperature <= 0 && isNeutralPenalty(req.sampling)
      ? JSON.stringify([req.sampling.logitBias, banned.length > 0])
      : undefined;
    const kept = slotKept[seq.slot];
    if (kept && key !== undefined && kept.key === key) {
      seq.chain = kept.chain;
      seq.backend = true;
      return;
    }
    if (kept) {
      // The slot's kept chain would sample this request in the graph: take it off.
      setBackendSampler(m.llama, m.ctx, seq.slot, null);
      samplerFree(m.llama, kept.chain);
      slotKept[seq.slot] = undefined;
    }
    seq.chain = buildSamplerChain(m.llama, m.nVocab, req.sampling, banned);
    if (backend && setBackendSampler(m.llama, m.ctx, seq.slot, seq.chain)) {
      seq.backend = true;
      if (key !== undefined) slotKept[seq.slot] = { chain: seq.chain, key };
    } else if (!req.grammar) {
      seq.greedy = greedyBias(req.sampling, banned, m.nVocab);
      if (!seq.greedy) seq.fast = fastSampler(req.sampling, banned, m.nVocab);
    }
  }

  function detach(seq: Seq): void {
    if (seq.chain && slotKept[seq.slot]?.chain !== seq.chain) {
      if (seq.backend) setBackendSampler(m.llama, m.ctx, seq.slot, null);
      samplerFree(m.llama, seq.chain);
    }
    seq.chain = undefined;
    seq.backend = false;
    if (seq.grammar) freeGrammarSampler(m, seq.grammar);
    seq.grammar = undefined;
  }

  function sampleRow(seq: Seq, row: number): number | undefined {
    const forced = forcedToken(m, seq);
    if (forced !== undefined) return forced;
    if (seq.grammar) {
      return sampleConstrained(m, seq.chain!, seq.grammar, row, seq.req.ignoreEos);
    }
    if (seq.backend) {
      const token = sampledToken(m.llama, m.ctx, row);
      if (token < 0) throw new Error("the backend sampler returned no token");
      samplerAccept(m.llama, seq.chain!, token);
      stats.backendSampledTotal++;
      return token;
    }
    // Stateless (no penalties, no draws): the chain needs no accept.
    if (seq.greedy) return greedyPick(logitsIth(m.llama, m.ctx, row, m.nVocab), seq.greedy);
    if (seq.fast) {
      stats.fastSampledTotal++;
      return seq.fast(logitsIth(m.llama, m.ctx, row, m.nVocab));
    }
    return samplerSample(m.llama, seq.chain!, m.ctx, row);
  }

  return { attach, detach, sampleRow };
}
