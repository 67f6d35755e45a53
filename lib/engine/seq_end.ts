/**
 * How a running sequence ends: with its `done` event (`finish`, keeping its slot's cells for the
 * next request sharing their prefix), with an `error` event (`fail`, its cells freed), or
 * silently when its consumer went away (`release`). Each frees the sequence's sampler and slot
 * and takes it out of the scheduler's `running` list.
 *
 * @example
 * ```ts ignore
 * import { createSeqEnds } from "./seq_end.ts";
 * const ends = createSeqEnds({ running, slots, sampler, slotCache });
 * ends.finish(seq, "length"); // `done` pushed, outlet closed, slot free with its cells kept
 * ```
 * @module
 */
import { doneEvent, type Seq, type SlotState } from "./sched_state.ts";
import type { FinishReason } from "./scheduler_types.ts";
import type { SeqSampler } from "./sampling/seq_sampler.ts";
import type { SlotCache } from "./cache/slot_cache.ts";
import { endText } from "./text_stream.ts";

export type SeqEndsDeps = {
  /** The scheduler's running sequences: an ended one is taken out. */
  running: Seq[];
  slots: SlotState;
  sampler: Pick<SeqSampler, "detach">;
  slotCache: Pick<SlotCache, "clearSlot">;
};

export type SeqEnds = {
  /** Frees the sequence; `keepCache` leaves its KV cells for prefix reuse. */
  release(seq: Seq, keepCache?: boolean): void;
  /** Ends a sequence; text held back is released unless a stop string ended it. */
  finish(seq: Seq, reason: FinishReason, stopString?: string): void;
  /** Ends a sequence with an `error` event; its cells are freed. */
  fail(seq: Seq, message: string): void;
};

export function createSeqEnds(d: SeqEndsDeps): SeqEnds {
  const { running, slots, sampler, slotCache } = d;

  function release(seq: Seq, keepCache = false): void {
    sampler.detach(seq);
    if (seq.slot >= 0) {
      if (!keepCache) slotCache.clearSlot(seq.slot);
      slots.free.push(seq.slot);
      seq.slot = -1;
    }
    const i = running.indexOf(seq);
    if (i >= 0) running.splice(i, 1);
  }

  function finish(seq: Seq, reason: FinishReason, stopString?: string): void {
    const rest = stopString !== undefined ? "" : endText(seq.text);
    if (rest) seq.out.push({ type: "text", text: rest });
    seq.out.push(doneEvent(seq, reason, stopString));
    seq.out.close();
    release(seq, true);
  }

  function fail(seq: Seq, message: string): void {
    seq.out.push({ type: "error", message });
    seq.out.close();
    release(seq);
  }

  return { release, finish, fail };
}
