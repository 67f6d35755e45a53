/**
 * Where a new sequence's prompt prefix comes from, and where a slot's cells go before another
 * request overwrites them: the slot it takes (the free one sharing the longest prefix), the
 * prompt cache beyond the slots (`prompt_cache.ts`: saved before a slot is reused, restored
 * when it shares a longer prefix), or a prefill server's cells (`req.kv`). Models whose cache
 * cannot be cut back (`exact`) reuse a state only whole, so their prefills pause near the end of
 * the prompt to keep a checkpoint.
 *
 * @example
 * ```ts ignore
 * import { createSlotCache } from "./slot_cache.ts";
 * const slotCache = createSlotCache({ m, slots, stats, opts: { promptCache } });
 * const { slot, common } = slotCache.takeSlot(seq.req.prompt);
 * seq.slot = slot;
 * slotCache.fillSlot(seq, common); // seq.fed: the prompt tokens the slot now holds
 * ```
 * @module
 */
import { memorySeqPosMax, memorySeqRm, seqStateGet, seqStateSet } from "../../../ffi/mod.ts";
import type { EngineModel } from "../model.ts";
import { dropFrom } from "../speculative/mtp_heads.ts";
import { type CacheHit, openPromptCache, type PromptCache } from "./prompt_cache.ts";
import type { Seq, SlotState, StepCounters } from "../sched_state.ts";
import type { SchedulerOptions } from "../scheduler_types.ts";

/** Tokens before the end of a prompt at which a model that cannot trim its cache checkpoints. */
const CHECKPOINT_TAIL = 4;

export type SlotCacheDeps = {
  m: EngineModel;
  slots: SlotState;
  stats: StepCounters;
  /**
   * The prompt cache's tiers (`promptCache`: off when absent or without one), the fewest tokens
   * worth a state copy (`cacheMinTokens`, default 256) and who hears of a state written to disk.
   */
  opts: Pick<SchedulerOptions, "promptCache" | "cacheMinTokens" | "onCacheWritten">;
};

export type SlotCache = {
  /** The prompt cache beyond the slots, when it is on. */
  cache: PromptCache | undefined;
  /** Takes the free slot sharing the longest prefix with `prompt` (`common` tokens). */
  takeSlot(prompt: Int32Array): { slot: number; common: number };
  /** Empties a slot's cells (the MTP heads' too). */
  clearSlot(slot: number): void;
  /** Gives a sequence that just took its slot the longest prefix it can get; sets `fed`, `pos`. */
  fillSlot(seq: Seq, common: number): void;
  /** After a step: saves the prefills that paused for a checkpoint (models that cannot trim). */
  takeCheckpoints(running: readonly Seq[]): void;
};

export function createSlotCache(d: SlotCacheDeps): SlotCache {
  const { m, slots, stats, opts } = d;
  const slotTokens = slots.tokens;
  const cache: PromptCache | undefined = opts.promptCache &&
      (opts.promptCache.ramBytes > 0 || opts.promptCache.dir)
    ? openPromptCache({ ...opts.promptCache, onWritten: opts.onCacheWritten })
    : undefined;
  const cacheMin = Math.max(1, opts.cacheMinTokens ?? 256);
  // Recurrent and hybrid caches cannot be cut back to a shorter prefix, and restored states of
  // sliding-window ones neither: there a state is reused only whole (`exact`), so the cache
  // keeps checkpoints of prompts' prefixes.
  const exact = !m.stateTrim;
  const liveTrim = m.kvTrim;

  function clearSlot(slot: number): void {
    memorySeqRm(m.llama, m.mem, slot, -1, -1);
    if (slots.heads) dropFrom(slots.heads, m, slot, 0);
    slotTokens[slot] = [];
  }

  /**
   * Picks the free slot sharing the longest prefix with `prompt`; ties go to the lowest slot id.
   * Low, dense ids matter: llama.cpp's attention view spans the KV streams from the lowest to the
   * highest sequence id in a batch, so scattered ids cost compute for idle streams.
   */
  function takeSlot(prompt: Int32Array): { slot: number; common: number } {
    const freeSlots = slots.free;
    let best = -1;
    let bestLen = -1;
    for (let i = 0; i < freeSlots.length; i++) {
      const toks = slotTokens[freeSlots[i]];
      let n = 0;
      const max = Math.min(toks.length, prompt.length);
      while (n < max && toks[n] === prompt[n]) n++;
      if (n > bestLen || (n === bestLen && freeSlots[i] < freeSlots[best])) {
        best = i;
        bestLen = n;
      }
    }
    const slot = freeSlots.splice(best, 1)[0];
    return { slot, common: bestLen };
  }

  function fillSlot(seq: Seq, common: number): void {
    const slot = seq.slot;
    // Keep the shared prefix, but always recompute at least the last prompt token: its logits
    // are what the first sample needs.
    let keep = seq.promptLogprobs ? 0 : Math.min(common, seq.req.prompt.length - 1);
    // A cache that cannot be cut back is reused only when the slot holds nothing past the prefix.
    if (!liveTrim && keep < slotTokens[slot].length) keep = 0;
    const kv = seq.req.kv;
    if (kv && !seq.promptLogprobs && kv.tokens > keep) {
      stash(slot, 0);
      loadRemoteKv(seq, kv);
      return;
    }
    keep = reuse(seq, keep);
    if (keep > 0 && !memorySeqRm(m.llama, m.mem, slot, keep, -1)) keep = 0;
    if (keep === 0) clearSlot(slot);
    else if (slots.heads) {
      dropFrom(slots.heads, m, slot, keep);
      slots.heads.hLast[slot].fill(0); // h(keep - 1) of a cached prefix is not kept
    }
    slotTokens[slot].length = keep;
    seq.fed = keep;
    seq.pos = keep;
    seq.cached = keep;
    if (exact && cache) {
      const at = seq.req.prompt.length - CHECKPOINT_TAIL;
      if (at - keep >= cacheMin && !seq.req.exportKv) seq.checkpointAt = at;
    }
  }

  /**
   * Where a new sequence's prefix comes from: the slot it took (`keep` tokens of it), or the
   * prompt cache's entry sharing a longer prefix, restored into the slot. The slot's own cells
   * are saved to the cache first when the new sequence would throw enough of them away. Returns
   * the prompt tokens the slot now holds for the sequence.
   */
  function reuse(seq: Seq, keep: number): number {
    const { prompt } = seq.req;
    const slot = seq.slot;
    const counted = prompt.length >= cacheMin;
    if (!cache || seq.promptLogprobs) {
      if (keep > 0 && counted) slotHit(keep);
      return keep;
    }
    const hit = counted ? cache.find(prompt, { limit: prompt.length - 1, exact }) : undefined;
    if (hit && hit.common >= keep + cacheMin) {
      stash(slot, keep);
      const restored = restore(slot, hit);
      cache.count(hit, restored);
      return restored;
    }
    stash(slot, keep);
    if (keep > 0 && counted) slotHit(keep);
    else if (counted) cache.count(undefined, 0);
    return keep;
  }

  function slotHit(tokens: number): void {
    stats.slotHits++;
    stats.slotTokens += tokens;
  }

  /**
   * Saves what slot `slot` holds to the prompt cache, unless a request keeping its first `keep`
   * tokens would throw away too little of it to matter, or the cache has it already.
   */
  function stash(slot: number, keep: number): void {
    const toks = slotTokens[slot];
    if (!cache || toks.length - keep < cacheMin) return;
    if (cache.covers(toks, exact)) return;
    try {
      cache.put(Int32Array.from(toks), seqStateGet(m.llama, m.ctx, slot), exact);
    } catch (e) {
      console.error(`hearth: prompt cache: could not save a slot: ${(e as Error).message}`);
    }
  }

  /** Loads a cache entry into `slot`; returns the prompt tokens it serves (0: refused). */
  function restore(slot: number, hit: CacheHit): number {
    const got = cache!.take(hit.id);
    clearSlot(slot);
    if (
      got && seqStateSet(m.llama, m.ctx, slot, got.state) &&
      memorySeqPosMax(m.llama, m.mem, slot) === got.tokens.length - 1
    ) {
      slotTokens[slot] = Array.from(got.tokens);
      if (slots.heads) slots.heads.hLast[slot].fill(0); // the MTP context has none of these cells
      return hit.common;
    }
    // Another layout or a damaged state: llama.cpp refused it, so nobody gets it again.
    clearSlot(slot);
    cache!.drop(hit.id);
    return 0;
  }

  /** Keeps checkpoints of the prefills that paused for one (models that cannot trim). */
  function takeCheckpoints(running: readonly Seq[]): void {
    if (!exact || !cache) return;
    for (const seq of running) {
      if (seq.checkpointAt > 0 && seq.fed === seq.checkpointAt) {
        seq.checkpointAt = 0;
        stash(seq.slot, 0);
      }
    }
  }

  /**
   * Puts a prefill server's cells for the prompt's first `kv.tokens` tokens into the sequence's
   * slot; when llama.cpp refuses them, the whole prompt is computed here instead.
   */
  function loadRemoteKv(seq: Seq, kv: { state: Uint8Array; tokens: number }): void {
    const slot = seq.slot;
    clearSlot(slot);
    let keep = 0;
    if (
      seqStateSet(m.llama, m.ctx, slot, kv.state) &&
      memorySeqPosMax(m.llama, m.mem, slot) === kv.tokens - 1
    ) {
      keep = kv.tokens;
      slotTokens[slot] = Array.from(seq.req.prompt.subarray(0, keep));
      stats.remotePrefillTokensTotal += keep;
      // The MTP context has no cells for these positions: its drafts start cold (and are
      // verified as always, so output is unchanged).
      if (slots.heads) slots.heads.hLast[slot].fill(0);
    } else {
      clearSlot(slot);
      stats.remotePrefillRefusedTotal++;
    }
    seq.fed = keep;
    seq.pos = keep;
    seq.cached = 0;
    seq.remote = keep;
  }

  return { cache, takeSlot, clearSlot, fillSlot, takeCheckpoints };
}
