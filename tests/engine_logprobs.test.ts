// Logprobs from the engine, on the tiny model: greedy picks are top[0], the alternatives are a
// descending sub-distribution, prompt logprobs match an independent FFI decode with a plain
// log-softmax, batching does not change them, and a grammar does not either (they are the raw
// logits' values). Plus `logSoftmaxTop` against a full sort.
import assert from "node:assert/strict";
import { decodeOneSequence } from "./support/decode.ts";
import { freeContext, logitsIth, newContext } from "../ffi/mod.ts";
import { compileConstraint } from "../lib/constrain/mod.ts";
import { logSoftmaxTop } from "../lib/engine/sampling/logprobs.ts";
import type { EngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import {
  type GenEvent,
  type GenRequest,
  isRefusal,
  type Scheduler,
  type TokenLogprob,
} from "../lib/engine/scheduler.ts";
import { tinyEngine } from "./support/tiny_engine.ts";

// Rows decoded in the same batch shape agree to float precision: prompt logprobs are held to this.
const EPS = 1e-4;
// Generated tokens are decoded one per step, with a prefix from the cache or beside other
// sequences; llama.cpp's CPU kernels round differently per batch shape, and this random-weight
// model's raw logits span +-35, so the same position differs by 1e-4..2e-3 nats between two
// schedules (measured; the sampled tokens still agree). Comparisons across schedules use this.
const EPS_SCHEDULE = 5e-3;

const engine = tinyEngine;

type Run = {
  events: GenEvent[];
  entries: TokenLogprob[];
  text: string;
  done: Extract<GenEvent, { type: "done" }>;
};

async function run(e: Scheduler, req: Partial<GenRequest> & { seed?: number }): Promise<Run> {
  const { seed = 1, ...rest } = req;
  const out = { events: [], entries: [], text: "" } as unknown as Run;
  for await (
    const ev of e.submit({
      prompt: Int32Array.from([128000, 9906, 1917, 11, 856]),
      maxTokens: 10,
      sampling: { ...defaultSampling(), seed, temperature: 0 },
      stop: [],
      ignoreEos: true,
      ...rest,
    })
  ) {
    out.events.push(ev);
    if (ev.type === "logprobs") out.entries.push(...ev.entries);
    else if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "done") out.done = ev;
    else if (ev.type === "error") throw new Error(ev.message);
  }
  return out;
}

/**
 * Raw-logit log-softmax rows for every position of `ids`, computed without the engine: a fresh
 * context, batches of `chunk` tokens asking for all logits, and a plain log-sum-exp per row.
 */
async function reference(m: EngineModel, ids: number[], chunk = 512): Promise<Float64Array[]> {
  const ctx = newContext(m.llama, m.model, {
    n_ctx: 512,
    n_batch: 512,
    n_ubatch: 512,
    n_seq_max: 1,
    n_threads: 1,
    n_threads_batch: 1,
    no_perf: true,
  });
  try {
    const rows: Float64Array[] = [];
    for (let start = 0; start < ids.length; start += chunk) {
      const part = ids.slice(start, start + chunk);
      assert.equal(await decodeOneSequence(m.llama, ctx, part, { pos0: start }), 0);
      for (let i = 0; i < part.length; i++) {
        const logits = logitsIth(m.llama, ctx, i, m.nVocab);
        let max = -Infinity;
        for (const v of logits) max = Math.max(max, v);
        let sum = 0;
        for (const v of logits) sum += Math.exp(v - max);
        const lse = max + Math.log(sum);
        const row = new Float64Array(logits.length);
        for (let t = 0; t < row.length; t++) row[t] = logits[t] - lse;
        rows.push(row);
      }
    }
    return rows;
  } finally {
    freeContext(m.llama, ctx);
  }
}

/** Indices of `row` by descending value (a full sort: the slow, obvious way). */
function ranked(row: Float64Array, n: number): number[] {
  return Array.from(row.keys()).sort((a, b) => row[b] - row[a] || a - b).slice(0, n);
}

Deno.test("logSoftmaxTop equals a full log-softmax and sort", () => {
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const logits = Float32Array.from({ length: 5000 }, () => (rnd() - 0.5) * 40);
  logits[17] = logits[4000] = 30; // a tie at the top: the lower id comes first
  const lse = Math.log(logits.reduce((s, v) => s + Math.exp(v), 0));
  const full = Float64Array.from(logits, (v) => v - lse);
  for (const n of [0, 1, 5, 20]) {
    const r = logSoftmaxTop(logits, 123, n);
    assert.ok(Math.abs(r.logprob - full[123]) < 1e-9);
    assert.deepEqual(r.top.map((t) => t.token), ranked(full, n));
    r.top.forEach((t) => assert.ok(Math.abs(t.logprob - full[t.token]) < 1e-9));
  }
  assert.deepEqual(logSoftmaxTop(logits, 0, 2).top.map((t) => t.token), [17, 4000]);
  assert.equal(logSoftmaxTop(new Float32Array([1, 2]), 0, 20).top.length, 2);
  const one = logSoftmaxTop(new Float32Array([1, 3, 2]), 2, 2);
  assert.ok(Math.abs(one.logprob - (2 - Math.log(Math.E + Math.E ** 3 + Math.E ** 2))) < 1e-9);
});

Deno.test("greedy picks are top[0]; alternatives are descending and sum to at most 1", async () => {
  const { m, engine: e } = await engine();
  const r = await run(e, { logprobs: 5 });
  assert.equal(r.entries.length, 10);
  assert.deepEqual(r.done.tokens, r.entries.map((x) => x.token));
  for (const x of r.entries) {
    assert.equal(x.top.length, 5);
    assert.equal(x.token, x.top[0].token);
    assert.equal(x.logprob, x.top[0].logprob);
    for (let i = 1; i < x.top.length; i++) assert.ok(x.top[i - 1].logprob >= x.top[i].logprob);
    assert.ok(x.top.reduce((s, t) => s + Math.exp(t.logprob), 0) <= 1 + 1e-9);
    assert.ok(x.logprob <= 0);
  }
  // Each token's event comes before the text it produces; its bytes spell the output.
  assert.equal(r.events[0].type, "logprobs");
  const bytes = new Uint8Array(r.entries.flatMap((x) => x.bytes));
  assert.equal(new TextDecoder().decode(bytes), r.text);
  // Pieces spell special tokens.
  const first = (await run(e, { logprobs: 20, maxTokens: 1 })).entries[0];
  assert.equal(first.top.length, 20);
  assert.ok(first.top.every((t) => typeof t.text === "string" && Array.isArray(t.bytes)));
  // Requests without logprobs get no events and no ids.
  const plain = await run(e, {});
  assert.ok(plain.events.every((ev) => ev.type !== "logprobs"));
  assert.equal(plain.done.tokens, undefined);
  assert.equal(plain.text, r.text);
  // Out-of-range counts are refused up front.
  for (const bad of [21, -1, 1.5]) {
    assert.throws(() => e.submit({ ...defaultReq(), logprobs: bad }), (x) => isRefusal(x));
    assert.throws(() => e.submit({ ...defaultReq(), promptLogprobs: bad }), (x) => isRefusal(x));
  }
  void m;
});

function defaultReq(): GenRequest {
  return {
    prompt: Int32Array.from([128000, 9906]),
    maxTokens: 1,
    sampling: defaultSampling(),
    stop: [],
    ignoreEos: true,
  };
}

Deno.test("prompt logprobs equal an independent FFI decode, and skip prefix reuse", async () => {
  const { m, engine: e } = await engine();
  const prompt = [128000, 9906, 1917, 11, 856, 836, 374, 13, 578, 6864, 315, 9822];
  // Warm the prefix cache with the same prompt: the scored request must not reuse it.
  await run(e, { prompt: Int32Array.from(prompt), maxTokens: 1 });
  const r = await run(e, { prompt: Int32Array.from(prompt), promptLogprobs: 3, logprobs: 3 });
  assert.equal(r.done.cachedTokens, 0);
  const got = r.done.promptLogprobs!;
  assert.equal(got.length, prompt.length);
  assert.equal(got[0], null);
  const rows = await reference(m, [...prompt, ...r.done.tokens!]);
  for (let i = 1; i < prompt.length; i++) {
    const x = got[i]!;
    assert.equal(x.token, prompt[i]);
    assert.ok(Math.abs(x.logprob - rows[i - 1][prompt[i]]) < EPS, `prompt token ${i}`);
    assert.deepEqual(x.top.map((t) => t.token), ranked(rows[i - 1], 3));
    x.top.forEach((t) => assert.ok(Math.abs(t.logprob - rows[i - 1][t.token]) < EPS));
  }
  // Scoring alone (`echo` with max_tokens 0) still decodes the prompt, and generates nothing.
  const echo = await run(e, { prompt: Int32Array.from(prompt), promptLogprobs: 3, maxTokens: 0 });
  assert.equal(echo.done.completionTokens, 0);
  assert.equal(echo.done.finishReason, "length");
  echo.done.promptLogprobs!.slice(1).forEach((x, i) => {
    assert.ok(Math.abs(x!.logprob - got[i + 1]!.logprob) < EPS);
  });
  // The generated tokens' logprobs agree with the same reference rows.
  r.entries.forEach((x, k) => {
    const row = rows[prompt.length - 1 + k];
    assert.ok(Math.abs(x.logprob - row[x.token]) < EPS_SCHEDULE, `generated token ${k}`);
  });
});

Deno.test("prompt logprobs of a long prompt are scored across several steps", async () => {
  const { m, engine: e } = await engine();
  // 200 tokens: more than one step's worth of scored rows (128), so it is prefilled in chunks.
  // The reference decodes the same chunks: llama.cpp itself gives a 300-token prompt decoded
  // at once and in chunks of 128 logprobs ~0.06 apart (past position 256) on this model.
  const prompt = [128000, ...Array.from({ length: 199 }, (_, i) => 1000 + ((i * 7919) % 5000))];
  const r = await run(e, { prompt: Int32Array.from(prompt), promptLogprobs: 1, maxTokens: 1 });
  const got = r.done.promptLogprobs!;
  const rows = await reference(m, prompt, 128);
  const bad: string[] = [];
  for (let i = 1; i < prompt.length; i++) {
    const d = got[i]!.logprob - rows[i - 1][prompt[i]];
    if (!(Math.abs(d) < EPS)) bad.push(`${i}:${d}`);
    if (got[i]!.top[0].logprob !== Math.max(...got[i]!.top.map((t) => t.logprob))) bad.push(`${i}`);
  }
  assert.deepEqual(bad, []);
});

Deno.test("logprobs of a batched run equal those of solo runs", async () => {
  const { engine: e } = await engine();
  const prompts = [[128000, 9906, 1917], [128000, 791, 6864, 315], [128000, 13347]];
  const req = (i: number) => ({
    prompt: Int32Array.from(prompts[i]),
    seed: i + 1,
    sampling: { ...defaultSampling(), seed: i + 1, temperature: 0.9 },
    logprobs: 4,
    promptLogprobs: 2,
  });
  const solo: Run[] = [];
  for (let i = 0; i < prompts.length; i++) solo.push(await run(e, req(i)));
  const batched = await Promise.all(prompts.map((_, i) => run(e, req(i))));
  for (let i = 0; i < prompts.length; i++) {
    assert.deepEqual(batched[i].done.tokens, solo[i].done.tokens);
    const pairs: [TokenLogprob, TokenLogprob, number][] = [
      ...batched[i].entries.map((x, k): [TokenLogprob, TokenLogprob, number] => [
        x,
        solo[i].entries[k],
        EPS_SCHEDULE,
      ]),
      ...batched[i].done.promptLogprobs!.slice(1).map((x, k): [
        TokenLogprob,
        TokenLogprob,
        number,
      ] => [x!, solo[i].done.promptLogprobs![k + 1]!, EPS]),
    ];
    for (const [a, b, eps] of pairs) {
      assert.ok(Math.abs(a.logprob - b.logprob) < eps, `${a.logprob} vs ${b.logprob}`);
      assert.deepEqual(a.top.map((t) => t.token), b.top.map((t) => t.token));
      a.top.forEach((t, j) => assert.ok(Math.abs(t.logprob - b.top[j].logprob) < eps));
    }
  }
});

Deno.test("under a grammar, logprobs still report the raw logits", async () => {
  const { m, engine: e } = await engine();
  const prompt = [128000, 9906, 1917];
  const grammar = compileConstraint({ regex: "[0-9]{6}" });
  const r = await run(e, { prompt: Int32Array.from(prompt), grammar, logprobs: 2, maxTokens: 8 });
  assert.match(r.text, /^[0-9]{6}$/);
  const rows = await reference(m, [...prompt, ...r.done.tokens!]);
  let belowTop = 0;
  r.entries.forEach((x, k) => {
    const row = rows[prompt.length - 1 + k];
    assert.ok(Math.abs(x.logprob - row[x.token]) < EPS_SCHEDULE);
    assert.deepEqual(x.top.map((t) => t.token), ranked(row, 2));
    if (x.token !== x.top[0].token) belowTop++;
  });
  // Random weights rarely favour digits: the grammar forced tokens the raw logits did not rank
  // first, and their reported logprobs are the raw (low) ones, not renormalised.
  assert.ok(belowTop > 0);
});
