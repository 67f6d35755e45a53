/**
 * The records the scheduler's parts share, all owned and mutated by `createScheduler` on one
 * thread: a sequence (`Seq`, one admitted or waiting request), the slots (`SlotState`: what each
 * slot's KV cells hold, which are free, the MTP heads while they draft) and the step counters
 * (`StepCounters`). The batch packer, the slot cache, the samplers, the sampling step and the
 * sequence ends take them explicitly.
 *
 * @example
 * ```ts ignore
 * import { doneEvent, newSeq, newSlotState } from "./sched_state.ts";
 * const slots = newSlotState(model, undefined);
 * const seq = newSeq(req, { push: console.log, close() {}, cancelled: false });
 * seq.out.push(doneEvent(seq, "length"));
 * ```
 * @module
 */
import type { SamplerPtr } from "../../ffi/mod.ts";
import type { SeqGrammar } from "./grammar/constrained.ts";
import type { RowSampler } from "./sampling/fast_sample.ts";
import type { TokenLogprob } from "./sampling/logprobs.ts";
import type { EngineModel } from "./model.ts";
import type { Heads } from "./speculative/mtp_heads.ts";
import { type BudgetState, newBudget } from "./sampling/reasoning_budget.ts";
import type { GreedyBias } from "./sampling/sampling.ts";
import type { EngineStats, FinishReason, GenEvent, GenRequest } from "./scheduler_types.ts";
import { newTextStream, type TextStream } from "./text_stream.ts";

/** The drafts of a sequence that has none this step (shared, never written). */
export const NO_DRAFTS: number[] = [];

/** A request's event outlet: a channel (`submit`) or a caller's sink (`submitTo`). */
export type Outlet = { push(ev: GenEvent): void; close(): void; readonly cancelled: boolean };

export type Seq = {
  slot: number;
  req: GenRequest;
  out: Outlet;
  chain?: SamplerPtr;
  /** The chain runs inside the decode graph: no logits row is copied out for this sequence. */
  backend: boolean;
  /** A plain greedy chain on the CPU, taken straight from the logits row (`greedyPick`). */
  greedy?: GreedyBias;
  /** A seeded chain without penalties or top-k, sampled from the logits row (`fastSampler`). */
  fast?: RowSampler;
  grammar?: SeqGrammar;
  fed: number; // prompt tokens already in the KV cache
  pos: number; // next position
  pending: number; // sampled token not yet decoded (-1 none)
  /** Draft tokens decoded after `pending` in this step, to verify against its rows. */
  drafts: number[];
  logitIndex: number; // batch row to sample from after this step (-1 none)
  generated: number;
  cached: number;
  /** Prompt tokens loaded from `req.kv`. */
  remote: number;
  text: TextStream;
  /** Sampled ids, kept only when logprobs were asked for. */
  tokens?: number[];
  promptLogprobs?: (TokenLogprob | null)[];
  /** Prompt rows of this step with logits to score: batch row of prompt token `from` onwards. */
  promptRows?: { row: number; from: number; count: number };
  budget?: BudgetState;
  print?: Set<number>;
  /**
   * Models whose cache cannot be trimmed: the prompt position at which the prefill pauses so
   * the slot's state is kept as a checkpoint (0: none).
   */
  checkpointAt: number;
};

/** The slots (llama.cpp sequence ids) and what they hold. */
export type SlotState = {
  /**
   * What each slot's KV cells hold, in order: kept after a request ends so the next request with
   * the same prefix (a system prompt, a growing conversation) skips recomputing it.
   */
  tokens: number[][];
  /** Slots no sequence holds. */
  free: number[];
  /** The model's MTP heads while they draft; unset by `headsFailed` (lookup drafts then). */
  heads: Heads | undefined;
};

/** The counters of `EngineStats` (its gauges are computed when stats are read). */
export type StepCounters = Omit<
  EngineStats,
  "running" | "waiting" | "kvUsage" | "loopMs" | "promptCache"
>;

export function newSlotState(m: EngineModel, heads: Heads | undefined): SlotState {
  return {
    tokens: Array.from({ length: m.maxBatch }, () => []),
    free: Array.from({ length: m.maxBatch }, (_, i) => m.maxBatch - 1 - i),
    heads,
  };
}

/** Any failure of the MTP heads turns them off for good: drafting falls back to lookup. */
export function headsFailed(slots: SlotState, e: unknown): void {
  console.error(`hearth: MTP heads disabled, drafting by prompt lookup: ${(e as Error).message}`);
  slots.heads = undefined;
}

/** KV cells held (running sequences and cached prefixes) over the context's cells. */
export function kvUsage(m: EngineModel, slots: SlotState): number {
  let used = 0;
  for (const t of slots.tokens) used += t.length;
  return used / (m.nCtxSeq * m.maxBatch);
}

/** A sequence for `req`, not yet given a slot. */
export function newSeq(req: GenRequest, out: Outlet): Seq {
  return {
    slot: -1,
    req,
    out,
    backend: false,
    drafts: NO_DRAFTS,
    fed: 0,
    pos: 0,
    pending: -1,
    logitIndex: -1,
    generated: 0,
    cached: 0,
    remote: 0,
    text: newTextStream(req.stop),
    ...(req.printTokens?.length ? { print: new Set(req.printTokens) } : {}),
    ...(req.reasoningBudget ? { budget: newBudget(req.reasoningBudget) } : {}),
    checkpointAt: 0,
    ...(req.logprobs !== undefined ? { tokens: [] } : {}),
    ...(req.promptLogprobs !== undefined
      ? { promptLogprobs: new Array<TokenLogprob | null>(req.prompt.length).fill(null) }
      : {}),
  };
}

/** Whether the sequence's consumer went away (its outlet cancelled or its request aborted). */
export function gone(seq: Seq): boolean {
  return seq.out.cancelled || !!seq.req.signal?.aborted;
}

/** The `done` event that ends a sequence's events. */
export function doneEvent(seq: Seq, finishReason: FinishReason, stopString?: string): GenEvent {
  return {
    type: "done",
    finishReason,
    ...(stopString !== undefined ? { stopString } : {}),
    promptTokens: seq.req.prompt.length,
    cachedTokens: seq.cached,
    ...(seq.req.kv ? { remoteTokens: seq.remote } : {}),
    completionTokens: seq.generated,
    ...(seq.tokens ? { tokens: seq.tokens } : {}),
    ...(seq.promptLogprobs ? { promptLogprobs: seq.promptLogprobs } : {}),
  };
}
