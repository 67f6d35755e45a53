/**
 * The generation scheduler: owns the llama context and is the only caller of `llama_decode`.
 * Every step packs one token for each generating sequence plus prefill chunks of admitted prompts
 * into a single batch (a token budget keeps long prompts from stalling running streams), decodes
 * it, then samples each sequence that produced logits. A sequence whose consumer went away is
 * dropped before the next step and its KV cells freed.
 *
 * Every step is decoded with synchronous FFI and the loop takes no I/O turn of its own: it is
 * meant for a thread that serves nothing else (`worker_thread.ts`), where a turn would only wake
 * a blocking-pool thread that takes a core from ggml's, and a large step handed to such a thread
 * would cost a hop there and back (about 10 ms a step on 2 cores). Whoever shares the thread
 * (requests, cancels, pauses, the consumers of `submit`) gets in through `onStep`, between two
 * steps.
 *
 * Logprobs are opt-in per request (`logprobs`, `promptLogprobs`): a request without them costs
 * nothing extra, with them each sampled token's raw-logit log-softmax is computed from the logits
 * row already in the context, and every prompt row asks llama.cpp for logits.
 *
 * This module keeps admission and the loop; the parts it drives share one thread and get the
 * state they touch passed in (`sched_state.ts`): the batch (`batch_pack.ts`), where a prompt's
 * prefix comes from and where a slot's cells go (`slot_cache.ts`), each sequence's sampler
 * (`seq_sampler.ts`, with `reasoning_budget.ts`), what a step's logits become (`sample_step.ts`)
 * and how a sequence ends (`seq_end.ts`). The types callers see are in `scheduler_types.ts`,
 * re-exported here.
 *
 * @example
 * ```ts
 * import { createScheduler } from "./scheduler.ts";
 * const engine = createScheduler(model);
 * for await (const ev of engine.submit({ prompt, maxTokens: 16, sampling, stop: [], ignoreEos: false })) {
 *   if (ev.type === "text") console.log(ev.text);
 * }
 * ```
 * @module
 */
import { decodeSync } from "../../ffi/mod.ts";
import { createBatchPacker } from "./batch_pack.ts";
import { newChannel } from "./channel.ts";
import { onAccelerator } from "./devices.ts";
import type { EngineModel } from "./model.ts";
import { mirrorStep, newHeads } from "./speculative/mtp_heads.ts";
import { createSampleStep } from "./sampling/sample_step.ts";
import {
  doneEvent,
  gone,
  headsFailed,
  kvUsage,
  newSeq,
  newSlotState,
  type Outlet,
  type Seq,
} from "./sched_state.ts";
import {
  checkRequest,
  emptyStats,
  type EventSink,
  type GenEvent,
  type GenRequest,
  type LocalScheduler,
  refusal,
  type SchedulerOptions,
} from "./scheduler_types.ts";
import { createSeqEnds } from "./seq_end.ts";
import { createSeqSampler } from "./sampling/seq_sampler.ts";
import { createSlotCache } from "./cache/slot_cache.ts";

export { checkRequest, emptyStats, isRefusal, MAX_LOGPROBS, refusal } from "./scheduler_types.ts";
export type {
  EngineRefusal,
  EngineStats,
  EventSink,
  FinishReason,
  GenEvent,
  GenRequest,
  LocalScheduler,
  ReasoningBudget,
  Scheduler,
  SchedulerOptions,
  TokenLogprob,
  TopTokenLogprob,
} from "./scheduler_types.ts";

export function createScheduler(m: EngineModel, opts: SchedulerOptions = {}): LocalScheduler {
  const maxWaiting = opts.maxWaiting ?? 1024;
  const running: Seq[] = [];
  const waiting: Seq[] = [];
  // The counters start from emptyStats(); the gauges are computed when stats() is read.
  const { running: _r, waiting: _w, kvUsage: _k, loopMs, ...stats } = emptyStats();
  const exclusiveQueue: (() => Promise<void>)[] = [];
  const draftTokens = opts.draftTokens ?? 0;
  // The model's own heads draft when it has them; any failure there falls back to lookup.
  const slots = newSlotState(m, draftTokens > 0 && m.mtp && !opts.draft ? newHeads(m) : undefined);
  const packer = createBatchPacker({ m, running, slots, stats, opts });
  const { batch } = packer;
  const slotCache = createSlotCache({ m, slots, stats, opts });
  const { cache } = slotCache;
  // A verified draft needs logits for several rows of one sequence in a step; llama.cpp's
  // backend samplers give one row per sequence, so speculative sequences sample on the CPU.
  const backendSampling = (opts.backendSampling ?? onAccelerator(m.devices)) && draftTokens === 0;
  const sampler = createSeqSampler({ m, stats, backendSampling });
  const { release, finish, fail } = createSeqEnds({ running, slots, sampler, slotCache });
  const step = createSampleStep({ m, running, slots, stats, sampler, finish, fail });
  let looping = false;
  let idleWaiters: (() => void)[] = [];

  function submit(req: GenRequest): AsyncIterable<GenEvent> {
    const ch = newChannel<GenEvent>(() => wakeLoop());
    enqueue(req, ch);
    return ch.iterable;
  }

  function submitTo(req: GenRequest, sink: EventSink): void {
    enqueue(req, { push: sink.push, close: sink.close, cancelled: false });
  }

  function enqueue(req: GenRequest, out: Outlet): void {
    checkRequest(m, req);
    if (waiting.length >= maxWaiting) {
      throw refusal("busy", `the queue is full (${waiting.length} requests waiting)`);
    }
    const seq = newSeq(req, out);
    req.signal?.addEventListener("abort", () => wakeLoop(), { once: true });
    // Scoring a prompt without generating (`echo` with max_tokens 0) still has to decode it.
    if (req.maxTokens <= 0 && req.promptLogprobs === undefined && !req.exportKv) {
      seq.out.push(doneEvent(seq, "length"));
      seq.out.close();
      return;
    }
    waiting.push(seq);
    wakeLoop();
  }

  function admit(): void {
    while (waiting.length > 0 && slots.free.length > 0) {
      const seq = waiting.shift()!;
      if (gone(seq)) {
        seq.out.close();
        continue;
      }
      const { slot, common } = slotCache.takeSlot(seq.req.prompt);
      seq.slot = slot;
      try {
        sampler.attach(seq);
      } catch (e) {
        fail(seq, `could not build the sampler: ${(e as Error).message}`);
        continue;
      }
      slotCache.fillSlot(seq, common);
      // Batch rows must go in ascending sequence id: llama.cpp then packs one step's tokens
      // into a single ubatch (descending ids split it into one ubatch per sequence, ~4x slower).
      const at = running.findIndex((r) => r.slot > slot);
      running.splice(at < 0 ? running.length : at, 0, seq);
    }
  }

  async function loop(): Promise<void> {
    looping = true;
    let t = performance.now();
    /** Adds the time since the last mark to `phase`. */
    const mark = (phase: keyof typeof loopMs) => {
      const now = performance.now();
      loopMs[phase] += now - t;
      t = now;
    };
    try {
      while (running.length || waiting.length || exclusiveQueue.length) {
        if (opts.onStep) await opts.onStep();
        while (exclusiveQueue.length) await exclusiveQueue.shift()!();
        for (const seq of [...running]) {
          // Closing wakes a consumer still waiting on the channel of an aborted request.
          if (gone(seq)) {
            release(seq);
            seq.out.close();
          }
        }
        for (const seq of waiting.filter(gone)) {
          waiting.splice(waiting.indexOf(seq), 1);
          seq.out.close();
        }
        admit();
        const n = packer.pack();
        mark("other");
        if (n === 0) {
          if (!running.length && !waiting.length) continue;
          // Everything left is waiting for a slot that a cancelled consumer has not freed yet.
          await new Promise((r) => setTimeout(r, 1));
          mark("io");
          continue;
        }
        const rows = packer.padToGraphSize(n);
        const rc = decodeSync(m.llama, m.ctx, batch);
        if (rows > n) packer.dropPadding(rows - n);
        mark("decode");
        stats.decodeSteps++;
        if (rc !== 0) {
          // Only the sequences in this batch are affected; each is failed and its cells freed.
          const why = rc === 1
            ? "no room left in the KV cache for this step"
            : `llama_decode failed (${rc})`;
          for (const seq of [...running]) fail(seq, why);
          continue;
        }
        if (slots.heads) {
          try {
            mirrorStep(slots.heads, m, batch, n);
          } catch (e) {
            headsFailed(slots, e);
          }
        }
        step.scorePrompts();
        slotCache.takeCheckpoints(running);
        mark("other");
        step.sampleAll();
        mark("sample");
      }
    } finally {
      looping = false;
      const ws = idleWaiters;
      idleWaiters = [];
      for (const w of ws) w();
    }
  }

  function wakeLoop(): void {
    if (!looping && (running.length || waiting.length || exclusiveQueue.length)) {
      looping = true;
      // Start on a microtask so requests submitted in the same tick share the first step.
      queueMicrotask(() =>
        loop().catch((e) => {
          for (const seq of [...running, ...waiting.splice(0)]) {
            fail(seq, `engine error: ${(e as Error).message}`);
          }
        })
      );
    }
  }

  function exclusive<T>(fn: () => Promise<T> | T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      exclusiveQueue.push(async () => {
        try {
          resolve(await fn());
        } catch (e) {
          reject(e);
        }
      });
      wakeLoop();
    });
  }

  return {
    model: m,
    submit,
    submitTo,
    exclusive,
    flushCache: () => cache?.flushed() ?? Promise.resolve(),
    stats: () => ({
      running: running.length,
      waiting: waiting.length,
      kvUsage: kvUsage(m, slots),
      ...stats,
      ...(cache ? { promptCache: cache.stats() } : {}),
      loopMs: { ...loopMs },
    }),
    idle: () =>
      looping || running.length || waiting.length
        ? new Promise<void>((r) => idleWaiters.push(r))
        : Promise.resolve(),
  };
}
