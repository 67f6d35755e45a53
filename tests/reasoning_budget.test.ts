// The reasoning budget on its own (`lib/engine/sampling/reasoning_budget.ts`), without a model: where
// counting starts (an `open` prompt, or a start marker split across pieces), the cap that starts
// the forcing, an end marker before the cap, a family without an end marker, and the forced
// tokens handed out in order without touching the request's own list.
import assert from "node:assert/strict";
import type { EngineModel } from "../lib/engine/model.ts";
import {
  type BudgetedSeq,
  countReasoning,
  forcedToken,
  newBudget,
} from "../lib/engine/sampling/reasoning_budget.ts";
import type { ReasoningBudget } from "../lib/engine/scheduler.ts";

const marks = (tokens: number, open = false, force = [90, 91]): ReasoningBudget => ({
  tokens,
  open,
  start: "<think>",
  end: "</think>",
  force,
});

/** A budgeted sequence sampled greedily: forcing then touches no llama.cpp sampler. */
function seqOf(rb: ReasoningBudget): BudgetedSeq & { budget: NonNullable<BudgetedSeq["budget"]> } {
  return { req: { reasoningBudget: rb }, budget: newBudget(rb), greedy: {} as never };
}

const noModel = {} as EngineModel;

Deno.test("a fresh budget: open prompts count at once, a cap of 0 there forces at once", () => {
  assert.deepEqual(newBudget(marks(3)), {
    left: 3,
    inside: false,
    tail: "",
    forcing: [],
    done: false,
  });
  assert.deepEqual(newBudget(marks(3, true)).inside, true);
  assert.deepEqual(newBudget(marks(3, true)).forcing, []);
  const rb = marks(0, true);
  const b = newBudget(rb);
  assert.deepEqual(b.forcing, [90, 91]);
  assert.notEqual(b.forcing, rb.force, "the forcing is a copy: handing it out leaves the request");
  // Nothing to force: the budget is done before it starts.
  assert.equal(newBudget(marks(3, false, [])).done, true);
});

Deno.test("tokens after a split start marker count; the cap starts the forcing", () => {
  const seq = seqOf(marks(2));
  countReasoning(seq, "Sure. <thi");
  assert.equal(seq.budget.inside, false);
  countReasoning(seq, "nk>");
  assert.equal(seq.budget.inside, true, "the marker is found across two pieces");
  assert.equal(seq.budget.left, 2, "the marker's own piece is not counted");
  countReasoning(seq, "one");
  assert.deepEqual(seq.budget.forcing, []);
  countReasoning(seq, "two");
  assert.deepEqual(seq.budget.forcing, [90, 91]);
  assert.equal(seq.budget.left, 0);
  // While forcing, further pieces (the forced ones) do not count again.
  countReasoning(seq, "</thi");
  assert.deepEqual(seq.budget.forcing, [90, 91]);
  assert.equal(seq.budget.left, 0);
  countReasoning(seq, "nk>");
  assert.equal(seq.budget.done, true, "the end marker ends the budget");
  assert.deepEqual(seq.budget.forcing, []);
});

Deno.test("an end marker before the cap ends the budget with nothing forced", () => {
  const seq = seqOf(marks(10, true));
  countReasoning(seq, "short thought");
  countReasoning(seq, "</think>");
  assert.equal(seq.budget.done, true);
  assert.deepEqual(seq.budget.forcing, []);
  assert.equal(seq.budget.left, 9);
  // A done budget counts nothing more, not even a second start marker.
  countReasoning(seq, "<think> again");
  assert.equal(seq.budget.left, 9);
  assert.deepEqual(seq.budget.forcing, []);
});

Deno.test("a cap of 0 forces as soon as the start marker shows", () => {
  const seq = seqOf(marks(0));
  countReasoning(seq, "<think>");
  assert.deepEqual(seq.budget.forcing, [90, 91]);
});

Deno.test("forced tokens come out in order, then sampling resumes", () => {
  const rb = marks(1, true);
  const seq = seqOf(rb);
  assert.equal(forcedToken(noModel, seq), undefined, "nothing forced before the cap");
  countReasoning(seq, "x");
  assert.equal(forcedToken(noModel, seq), 90);
  assert.equal(forcedToken(noModel, seq), 91);
  assert.equal(forcedToken(noModel, seq), undefined);
  assert.deepEqual(rb.force, [90, 91], "the request's end marker is left as it was");
  // A sequence without a budget is never forced.
  assert.equal(forcedToken(noModel, { req: {} }), undefined);
});
