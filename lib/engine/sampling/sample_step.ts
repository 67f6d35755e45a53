/**
 * What the scheduler does with a decoded step's logits: scores the prompt rows of sequences that
 * asked for prompt logprobs, then samples every sequence that produced logits (its token, and
 * while they agree, its drafts), hands each token to its request (logprobs, text, stop strings,
 * the reasoning budget) and ends the sequences that are done. A prefill-only sequence sends its
 * cells instead (`exportKv`).
 *
 * @example
 * ```ts ignore
 * import { createSampleStep } from "./sample_step.ts";
 * const step = createSampleStep({ m, running, slots, stats, sampler, finish, fail });
 * decodeSync(m.llama, m.ctx, batch);
 * step.scorePrompts();
 * step.sampleAll();
 * ```
 * @module
 */
import { logitsIth, memorySeqRm, seqStateGet, tokenToPiece } from "../../../ffi/mod.ts";
import { logSoftmaxTop, type TokenLogprob, type TopTokenLogprob } from "./logprobs.ts";
import type { EngineModel } from "../model.ts";
import { dropFrom, settle } from "../speculative/mtp_heads.ts";
import { countReasoning } from "./reasoning_budget.ts";
import {
  gone,
  headsFailed,
  NO_DRAFTS,
  type Seq,
  type SlotState,
  type StepCounters,
} from "../sched_state.ts";
import type { FinishReason } from "../scheduler_types.ts";
import type { SeqSampler } from "./seq_sampler.ts";
import { pushPiece } from "../text_stream.ts";

export type SampleStepDeps = {
  m: EngineModel;
  /** The scheduler's running sequences (`finish` and `fail` take ended ones out). */
  running: readonly Seq[];
  slots: SlotState;
  stats: StepCounters;
  sampler: SeqSampler;
  /** Ends a sequence with its `done` event and frees it (keeping its cells for reuse). */
  finish(seq: Seq, reason: FinishReason, stopString?: string): void;
  /** Ends a sequence with an `error` event and frees it. */
  fail(seq: Seq, message: string): void;
};

export type SampleStep = {
  /** Scores this step's prompt rows of sequences that asked for prompt logprobs. */
  scorePrompts(): void;
  /** Samples every running sequence that has a logits row in this step. */
  sampleAll(): void;
};

export function createSampleStep(d: SampleStepDeps): SampleStep {
  const { m, running, slots, stats, sampler, finish, fail } = d;
  const slotTokens = slots.tokens;
  // Pieces of tokens seen in logprobs, spelled with special tokens; filled as they come up.
  const pieces = new Map<number, { text: string; bytes: number[] }>();
  const lossy = new TextDecoder();

  function piece(token: number): { text: string; bytes: number[] } {
    let p = pieces.get(token);
    if (!p) {
      const bytes = tokenToPiece(m.llama, m.vocab, token, true);
      p = { text: lossy.decode(bytes), bytes: Array.from(bytes) };
      pieces.set(token, p);
    }
    return p;
  }

  /** The logprob entry of `token` at batch row `row` (read before the next decode). */
  function tokenLogprob(row: number, token: number, n: number): TokenLogprob {
    const r = logSoftmaxTop(logitsIth(m.llama, m.ctx, row, m.nVocab), token, n);
    const entry = (t: number, logprob: number): TopTokenLogprob => {
      const p = piece(t);
      return { token: t, text: p.text, bytes: p.bytes.slice(), logprob };
    };
    return { ...entry(token, r.logprob), top: r.top.map((a) => entry(a.token, a.logprob)) };
  }

  function scorePrompts(): void {
    for (const seq of running) {
      const rows = seq.promptRows;
      if (!rows) continue;
      seq.promptRows = undefined;
      const { prompt, promptLogprobs: n } = seq.req;
      for (let r = 0; r < rows.count; r++) {
        const next = rows.from + r + 1; // row k's logits predict prompt token k + 1
        if (next < prompt.length) {
          seq.promptLogprobs![next] = tokenLogprob(rows.row + r, prompt[next], n!);
        }
      }
    }
  }

  /**
   * Hands a sampled token to the request: end of generation, logprobs, text, stop strings and
   * length. Returns whether the sequence goes on; `pos` is the position the token would take.
   */
  function takeToken(seq: Seq, token: number | undefined, row: number, pos: number): boolean {
    // Nothing the grammar allows is left: the constrained output is complete.
    if (token === undefined || (!seq.req.ignoreEos && m.eogTokens.includes(token))) {
      finish(seq, "stop");
      return false;
    }
    seq.generated++;
    stats.generatedTokensTotal++;
    if (seq.tokens) {
      seq.tokens.push(token);
      seq.out.push({ type: "logprobs", entries: [tokenLogprob(row, token, seq.req.logprobs!)] });
    }
    const piece = tokenToPiece(m.llama, m.vocab, token, seq.print?.has(token) ?? false);
    if (seq.budget) countReasoning(seq, new TextDecoder().decode(piece));
    const { emit, stopped, stop } = pushPiece(seq.text, piece);
    if (emit) seq.out.push({ type: "text", text: emit });
    if (stopped) finish(seq, "stop", stop);
    else if (seq.generated >= seq.req.maxTokens || pos + 1 >= m.nCtxSeq) finish(seq, "length");
    else return true;
    return false;
  }

  /**
   * Samples a sequence's rows of this step. Row 0 holds the token sampled last step; rows 1..k
   * hold drafts. The sample from row j is the real next token; while it equals draft j+1, row
   * j+1 was computed on the right input and is sampled too. Every token is drawn from the chain
   * exactly as without drafts (the same draws in the same order), so greedy and seeded output
   * are unchanged; drafts only decide how many tokens one step yields. Cells of rejected drafts
   * are removed.
   */
  function sampleSeq(seq: Seq): void {
    const drafts = seq.drafts;
    seq.drafts = NO_DRAFTS;
    const slot = seq.slot;
    const first = seq.pos - 1 - drafts.length; // position of row 0's token
    let j = 0;
    for (;; j++) {
      const token = sampler.sampleRow(seq, seq.logitIndex + j);
      if (!takeToken(seq, token, seq.logitIndex + j, first + j + 1)) break;
      if (j < drafts.length && token === drafts[j]) {
        stats.draftAcceptedTotal++;
        continue;
      }
      seq.pending = token!;
      break;
    }
    // Cells after row j hold drafts that the samples did not confirm.
    const keep = first + j + 1;
    if (drafts.length && slotTokens[slot].length > keep) {
      memorySeqRm(m.llama, m.mem, slot, keep, -1);
      slotTokens[slot].length = keep;
    }
    const heads = slots.heads;
    if (heads) {
      try {
        if (seq.slot >= 0) settle(heads, m, slot, keep, seq.logitIndex + j);
        else if (slotTokens[slot].length) dropFrom(heads, m, slot, keep);
      } catch (e) {
        headsFailed(slots, e);
      }
    }
    if (seq.slot >= 0) seq.pos = keep;
  }

  function sampleAll(): void {
    for (const seq of [...running]) {
      if (seq.logitIndex < 0) continue;
      if (gone(seq)) continue;
      if (seq.req.maxTokens <= 0) {
        // Only its prompt was to be scored, or its cells sent to a decode server.
        if (seq.req.exportKv) {
          try {
            const state = seqStateGet(m.llama, m.ctx, seq.slot);
            seq.out.push({ type: "kv", state, tokens: seq.req.prompt.length });
          } catch (e) {
            fail(seq, (e as Error).message);
            continue;
          }
        }
        finish(seq, "length");
        continue;
      }
      try {
        sampleSeq(seq);
      } catch (e) {
        fail(seq, (e as Error).message);
      }
    }
  }

  return { scorePrompts, sampleAll };
}
