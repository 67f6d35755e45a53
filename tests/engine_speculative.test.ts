// Speculative decoding (`--mtp N`, prompt-lookup drafts verified in one batched decode): the
// output is token for token what the scheduler gives without drafts, greedy and seeded, with
// stop strings, grammars, logprobs and several sequences at once; drafts are accepted where the
// text repeats; and a cancelled sequence still frees its cells.
import assert from "node:assert/strict";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling, type Sampling } from "../lib/engine/sampling/sampling.ts";
import type { GenRequest, Scheduler } from "../lib/engine/scheduler.ts";
import { lookupDraft } from "../lib/engine/speculative/lookup.ts";
import { newMetrics, renderMetrics } from "../lib/engine/metrics.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { tinyModelPath } from "./support/models.ts";
import { mtpModelPath } from "./support/mtp_model.ts";

type Out = { text: string; tokens?: number[]; finish?: string; lp?: number[] };

async function run(engine: Scheduler, r: GenRequest): Promise<Out> {
  const out: Out = { text: "" };
  for await (const ev of engine.submit(r)) {
    if (ev.type === "text") out.text += ev.text;
    if (ev.type === "logprobs") (out.lp ??= []).push(...ev.entries.map((e) => e.logprob));
    if (ev.type === "error") throw new Error(ev.message);
    if (ev.type === "done") {
      out.tokens = ev.tokens;
      out.finish = ev.finishReason;
    }
  }
  return out;
}

// A prompt that repeats itself, so lookup has something to propose from the start.
const phrase = [791, 6864, 315, 9822, 374, 12366, 13, 578];
const repeating = [128000, ...phrase, ...phrase, ...phrase];
const plain = [128000, 9906, 1917, 11, 1268];

function req(prompt: number[], s: Partial<Sampling>, extra: Partial<GenRequest> = {}): GenRequest {
  return {
    prompt: Int32Array.from(prompt),
    // Long enough for the context-free model's greedy text to close its cycle.
    maxTokens: 160,
    sampling: { ...defaultSampling(), seed: 11, ...s },
    stop: [],
    ignoreEos: true,
    logprobs: 0,
    ...extra,
  };
}

Deno.test("lookup drafts: the tokens after the latest earlier match of the suffix", () => {
  assert.deepEqual(lookupDraft([5, 6, 7, 8, 9, 5, 6, 7], 3), [8, 9, 5]);
  assert.deepEqual(lookupDraft([1, 2, 3, 4], 3), []);
  // The longest suffix wins over a later, shorter match.
  assert.deepEqual(lookupDraft([1, 2, 3, 9, 2, 3, 7, 1, 2, 3], 2), [9, 2]);
  assert.deepEqual(lookupDraft([1, 2, 1, 2], 0), []);
});

for (const model of ["tiny", "context-free"] as const) {
  Deno.test(`speculative decoding (${model} model): same output as without drafts`, async () => {
    // The context-free model (the trunk of the MTP test model ignores context) falls into a cycle,
    // so lookup drafts get accepted; the tiny model's random text never repeats.
    const path = model === "tiny" ? await tinyModelPath() : await mtpModelPath();
    const m = await loadEngineModel({ path, maxBatch: 4, maxSeqLen: 256 });
    try {
      const cases: GenRequest[] = [
        req(repeating, { temperature: 0 }),
        req(plain, { temperature: 0 }),
        req(repeating, { temperature: 0.9, topK: 40 }),
        req(repeating, { temperature: 0.7, repetitionPenalty: 1.1 }),
        req(repeating, { temperature: 0 }, { maxTokens: 7 }),
      ];
      const base = inProcessScheduler(m);
      const want: Out[] = [];
      for (const c of cases) want.push(await run(base, c));
      await base.idle();

      const spec = inProcessScheduler(m, { draftTokens: 4 });
      const solo: Out[] = [];
      for (const c of cases) solo.push(await run(spec, c));
      assert.deepEqual(solo.map((o) => o.tokens), want.map((o) => o.tokens));
      assert.deepEqual(solo.map((o) => o.text), want.map((o) => o.text));
      assert.equal(solo[4].tokens!.length, 7);
      // Logprobs are those of the rows the tokens were sampled from.
      for (const [i, o] of solo.entries()) {
        o.lp!.forEach((v, k) => assert.ok(Math.abs(v - want[i].lp![k]) < 1e-3, `case ${i} #${k}`));
      }
      const st = spec.stats();
      if (model === "context-free") {
        assert.ok(st.draftTokensTotal > 0, "nothing was drafted");
        assert.ok(st.draftAcceptedTotal > 0, "no draft was accepted");
        // Fewer steps than tokens: accepted drafts gave more than one token per step.
        const steps = st.decodeSteps;
        const tokens = want.reduce((n, o) => n + o.tokens!.length, 0);
        assert.ok(steps < tokens, `${steps} steps for ${tokens} tokens`);
      }

      // All at once: sequences verify their drafts side by side. Only the greedy cases are
      // compared: a different batch changes logits in the last bits, which can move a token
      // sampled at temperature 0.9 (it does without drafts too).
      const greedy = [0, 1, 4];
      const batched = await Promise.all(greedy.map((i) => run(spec, cases[i])));
      assert.deepEqual(batched.map((o) => o.tokens), greedy.map((i) => want[i].tokens));
      await spec.idle();
      assert.equal(spec.stats().running, 0);
    } finally {
      unloadEngineModel(m);
    }
  });
}

Deno.test("speculative decoding: stop strings, grammars and cancellation", async () => {
  const m = await loadEngineModel({ path: await mtpModelPath(), maxBatch: 4, maxSeqLen: 256 });
  try {
    const base = inProcessScheduler(m);
    const ref = await run(base, req(repeating, { temperature: 0 }, { maxTokens: 160 }));
    // A stop string from the middle of the reference output.
    const stop = ref.text.slice(-12, -8);
    const grammar = 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"';
    const cases = [
      req(repeating, { temperature: 0 }, { maxTokens: 160, stop: [stop] }),
      req(repeating, { temperature: 0 }, { maxTokens: 24, grammar, ignoreEos: false }),
    ];
    const want: Out[] = [];
    for (const c of cases) want.push(await run(base, c));
    await base.idle();
    assert.equal(want[0].finish, "stop");

    const spec = inProcessScheduler(m, { draftTokens: 3 });
    const got: Out[] = [];
    for (const c of cases) got.push(await run(spec, c));
    assert.deepEqual(got.map((o) => [o.text, o.finish]), want.map((o) => [o.text, o.finish]));

    const ac = new AbortController();
    const it = spec.submit(
      req(repeating, { temperature: 0 }, { maxTokens: 200, signal: ac.signal }),
    )[
      Symbol.asyncIterator
    ]();
    await it.next();
    ac.abort();
    await spec.idle();
    assert.equal(spec.stats().running, 0);
    // The slot's cells are usable again: the same request gives the reference output.
    assert.deepEqual(
      (await run(spec, req(repeating, { temperature: 0 }, { maxTokens: 160 }))).tokens,
      ref.tokens,
    );
  } finally {
    unloadEngineModel(m);
  }
});

Deno.test("speculative decoding with the model's MTP heads: same output, drafts accepted", async () => {
  const m = await loadEngineModel({
    path: await mtpModelPath(),
    maxBatch: 4,
    maxSeqLen: 256,
    mtpHeads: true,
  });
  try {
    assert.ok(m.mtp, "the MTP context was not created");
    const cases = [
      req(plain, { temperature: 0 }, { maxTokens: 64 }),
      req(repeating, { temperature: 0 }, { maxTokens: 64 }),
      req(plain, { temperature: 0.8, topK: 40 }, { maxTokens: 64 }),
    ];
    const base = inProcessScheduler(m);
    const want: Out[] = [];
    for (const c of cases) want.push(await run(base, c));
    await base.idle();

    const spec = inProcessScheduler(m, { draftTokens: 3 });
    const solo: Out[] = [];
    for (const c of cases) solo.push(await run(spec, c));
    assert.deepEqual(solo.map((o) => o.tokens), want.map((o) => o.tokens));
    const st = spec.stats();
    // The heads draft from the first generated token on (lookup would need a repeat first), and
    // the test model's head mostly agrees with its trunk.
    assert.ok(st.draftTokensTotal >= 3 * 20, `${st.draftTokensTotal} drafted`);
    assert.ok(st.draftAcceptedTotal > st.draftTokensTotal / 4, JSON.stringify(st));
    const text = renderMetrics(newMetrics(), st);
    assert.match(
      text,
      new RegExp(`^hearth_draft_accepted_tokens_total ${st.draftAcceptedTotal}$`, "m"),
    );
    assert.match(text, new RegExp(`^hearth_draft_tokens_total ${st.draftTokensTotal}$`, "m"));
    // Two greedy sequences verifying side by side, the second reusing the first's cached prefix.
    const batched = await Promise.all([run(spec, cases[0]), run(spec, cases[1])]);
    assert.deepEqual(batched.map((o) => o.tokens), [want[0].tokens, want[1].tokens]);
    await spec.idle();
    assert.equal(spec.stats().running, 0);
  } finally {
    unloadEngineModel(m);
  }
});
