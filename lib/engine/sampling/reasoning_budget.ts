/**
 * A request's reasoning budget (`reasoningBudget`) as the scheduler keeps it: generated text is
 * watched for the family's `start` and `end` markers, tokens between them are counted, and at the
 * cap the `force` tokens (the end marker) are handed out as the next tokens instead of samples, so
 * the model goes on to answer. A grammar that already governs the output may refuse them, which
 * ends the forcing.
 *
 * @example
 * ```ts
 * import { countReasoning, newBudget } from "./reasoning_budget.ts";
 * const reasoningBudget = { tokens: 1, open: false, start: "<think>", end: "</think>", force: [7] };
 * const seq = { req: { reasoningBudget }, budget: newBudget(reasoningBudget) };
 * countReasoning(seq, "<think>");
 * countReasoning(seq, "hmm");
 * seq.budget.forcing; // [7]: `forcedToken` hands it out before the next sample
 * ```
 * @module
 */
import { samplerAccept, type SamplerPtr } from "../../../ffi/mod.ts";
import { acceptForced, type SeqGrammar } from "../grammar/constrained.ts";
import type { EngineModel } from "../model.ts";
import type { GreedyBias } from "./sampling.ts";
import type { ReasoningBudget } from "../scheduler_types.ts";

/** A sequence's progress against its reasoning budget. */
export type BudgetState = {
  left: number;
  inside: boolean;
  tail: string;
  forcing: number[];
  done: boolean;
};

/** What of a sequence the budget reads and feeds (the scheduler's `Seq` is one). */
export type BudgetedSeq = {
  req: { reasoningBudget?: ReasoningBudget };
  budget?: BudgetState;
  chain?: SamplerPtr;
  grammar?: SeqGrammar;
  greedy?: GreedyBias;
};

/**
 * A fresh budget: reasoning is already under way when the prompt left it `open`, and a cap of 0
 * there forces the end marker at once; a family without an end marker has nothing to force.
 */
export function newBudget(rb: ReasoningBudget): BudgetState {
  return {
    left: rb.tokens,
    inside: rb.open,
    tail: "",
    forcing: rb.open && rb.tokens <= 0 ? [...rb.force] : [],
    done: rb.force.length === 0,
  };
}

/**
 * The next token of a reasoning budget's end marker, accepted into the sequence's samplers as
 * if sampled; undefined when nothing is being forced (or a grammar that already governs the
 * output would not take it, which ends the forcing).
 */
export function forcedToken(m: EngineModel, seq: BudgetedSeq): number | undefined {
  const b = seq.budget;
  if (!b?.forcing.length) return undefined;
  const token = b.forcing[0];
  if (seq.grammar) {
    if (!acceptForced(m, seq.chain!, seq.grammar, token)) {
      b.forcing = [];
      b.done = true;
      return undefined;
    }
  } else if (!seq.greedy) samplerAccept(m.llama, seq.chain!, token);
  b.forcing.shift();
  return token;
}

/** Counts a generated piece against the reasoning budget; at the cap, starts the forcing. */
export function countReasoning(seq: BudgetedSeq, piece: string): void {
  const b = seq.budget;
  if (!b || b.done) return;
  const marks = seq.req.reasoningBudget!;
  b.tail = (b.tail + piece).slice(-(Math.max(marks.start.length, marks.end.length) + 16));
  if (!b.inside) {
    const at = b.tail.indexOf(marks.start);
    if (at < 0) return;
    b.inside = true;
    b.tail = b.tail.slice(at + marks.start.length);
    if (b.left <= 0) b.forcing = [...marks.force];
    return;
  }
  if (b.tail.includes(marks.end)) {
    b.done = true;
    b.forcing = [];
    return;
  }
  if (b.forcing.length) return;
  if (--b.left <= 0) b.forcing = [...marks.force];
}
