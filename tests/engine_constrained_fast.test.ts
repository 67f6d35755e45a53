// Grammar masks on the tiny model: greedy constrained sampling through the mask cache must pick
// exactly what the full-vocabulary grammar path picks, every mask it builds must equal
// llama.cpp's own full apply ("verify" mode checks each one), seeded sampling must not depend on
// what the cache held, sampled choices must follow the chain applied to grammar-masked logits,
// and the cache must hit and stay in its byte budget.
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import { samplerAccept, samplerFree, type SamplerPtr, samplers, tokenize } from "../ffi/mod.ts";
import { grammarAddress, partialUtf8, ruleTable, stateKey } from "../ffi/grammar_state.ts";
import { compileConstraint } from "../lib/constrain/mod.ts";
import {
  type ConstrainedMode,
  constrainedStats,
  maskCacheProblem,
  setConstrainedMode,
} from "../lib/engine/grammar/constrained.ts";
import {
  clearMaskCache,
  fullMask,
  grammarMasks,
  maskCacheBytes,
  maskStats,
  sameMask,
  setMaskCacheBudget,
  trieMask,
} from "../lib/engine/grammar/grammar_mask.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import type { GenRequest, Scheduler } from "../lib/engine/scheduler.ts";
import { tokenTrie } from "../lib/engine/grammar/token_trie.ts";
import { BENCH_SCHEMA } from "../bench/schema.ts";
import { tinyEngine } from "./support/tiny_engine.ts";

const ITEMS = BENCH_SCHEMA;
const SMALL = {
  type: "object",
  properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 } },
  required: ["ok", "n"],
  additionalProperties: false,
};
const SCHEMAS = [ITEMS, SMALL].map((schema) => ({
  schema,
  gbnf: compileConstraint({ json: schema }),
  validate: new Ajv2020({ strict: false }).compile(schema),
}));

const engine = tinyEngine;

type Out = { text: string; tokens: number[]; finish: string };

async function run(e: Scheduler, req: Partial<GenRequest>): Promise<Out> {
  const out: Out = { text: "", tokens: [], finish: "" };
  for await (
    const ev of e.submit({
      prompt: Int32Array.from([128000, 9906, 1917]),
      maxTokens: 96,
      sampling: defaultSampling(),
      stop: [],
      ignoreEos: true,
      logprobs: 0, // for the sampled ids in `done.tokens`
      ...req,
    })
  ) {
    if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "done") {
      out.tokens = ev.tokens!;
      out.finish = ev.finishReason;
    } else if (ev.type === "error") throw new Error(ev.message);
  }
  return out;
}

/** The same requests, all at once (so they share decode steps), in the given mode. */
async function batch(e: Scheduler, mode: ConstrainedMode, reqs: Partial<GenRequest>[]) {
  setConstrainedMode(mode);
  try {
    return await Promise.all(reqs.map((r) => run(e, r)));
  } finally {
    setConstrainedMode("fast");
  }
}

function requests(temperature: number, seeds: number[]): Partial<GenRequest>[] {
  return SCHEMAS.flatMap(({ gbnf }) =>
    seeds.map((seed) => ({
      prompt: Int32Array.from([128000, 9906, 1917, 11 + seed]),
      grammar: gbnf,
      sampling: { ...defaultSampling(), temperature, seed },
    }))
  );
}

function assertValid(outs: Out[], reqs: Partial<GenRequest>[]): number {
  let complete = 0;
  outs.forEach((o, i) => {
    const s = SCHEMAS.find((x) => x.gbnf === reqs[i].grammar)!;
    if (o.finish === "length") return; // cut by max_tokens
    const value = JSON.parse(o.text);
    assert.ok(s.validate(value), `${o.text}: ${JSON.stringify(s.validate.errors)}`);
    complete++;
  });
  return complete;
}

Deno.test("the grammar layout of the bundled llama.cpp is recognised", async () => {
  const { m } = await engine();
  assert.equal(maskCacheProblem(m), undefined);
});

Deno.test("state keys name grammar states across samplers; trie masks equal full masks", async () => {
  const { m } = await engine();
  const gbnf = SCHEMAS[0].gbnf;
  const make = () => samplers(m.llama).grammar(m.vocab, gbnf, "root") as SamplerPtr;
  const a = make();
  const b = make();
  try {
    const doc = '{"items": [{"name": "h\u00e9llo \u4e16\u754c", "count": -12, "ok": true},' +
      ' {"name":"x\\n","count":0,"ok":false}]}';
    const toks = tokenize(m.llama, m.vocab, doc, false, false);
    const ga = grammarAddress(a);
    const gb = grammarAddress(b);
    const ra = ruleTable(ga)!;
    const rb = ruleTable(gb)!;
    assert.notEqual(ga, gb);
    assert.equal(ra.hasTokenElements, false);
    const seen = new Map<string, number>();
    for (const t of toks) {
      const key = stateKey(ga, ra)!;
      assert.equal(stateKey(gb, rb), key, "same tokens, same state, same key");
      seen.set(key, (seen.get(key) ?? 0) + 1);
      const trie = trieMask(m, a, partialUtf8(ga), true);
      assert.ok(sameMask(trie, fullMask(m, a), m.nVocab), `mask of ${key}`);
      samplerAccept(m.llama, a, t);
      samplerAccept(m.llama, b, t);
    }
    // The second array element revisits the first one's states.
    assert.ok([...seen.values()].some((n) => n > 1));
    assert.ok(seen.size < toks.length);
  } finally {
    samplerFree(m.llama, a);
    samplerFree(m.llama, b);
  }
});

Deno.test("a state is not keyed when what is read does not add up", async () => {
  const { m } = await engine();
  const s = samplers(m.llama).grammar(m.vocab, SCHEMAS[1].gbnf, "root") as SamplerPtr;
  try {
    const g = grammarAddress(s);
    const rules = ruleTable(g)!;
    assert.ok(stateKey(g, rules));
    // Rules that moved, or stack pointers outside every rule: no key rather than a guess.
    assert.equal(stateKey(g, { ...rules, rulesBegin: rules.rulesBegin + 24 }), undefined);
    const shifted = rules.begin.map((b) => b + 2 ** 20);
    assert.equal(stateKey(g, { ...rules, begin: shifted, end: shifted }), undefined);
  } finally {
    samplerFree(m.llama, s);
  }
});

Deno.test("trie masks equal full masks in partial UTF-8 states", async () => {
  const { m } = await engine();
  const trie = tokenTrie(m);
  // A lead byte alone as a token: the grammar then waits for its continuation byte(s).
  const piece = (t: number) => trie.pieceBytes.subarray(trie.pieceStart[t], trie.pieceStart[t + 1]);
  const lead = [...trie.roots].find((t) => piece(t).length === 1 && piece(t)[0] === 0xe4);
  assert.ok(lead !== undefined);
  for (const gbnf of ['root ::= [^"]* "\\""', 'root ::= [\\u4e00-\\u4e10]+ | "x"']) {
    const s = samplers(m.llama).grammar(m.vocab, gbnf, "root") as SamplerPtr;
    try {
      samplerAccept(m.llama, s, lead);
      const g = grammarAddress(s);
      const key = stateKey(g, ruleTable(g)!)!;
      assert.match(key, /^4,2\|/);
      const mask = trieMask(m, s, { value: 4, remain: 2 }, true);
      assert.ok(sameMask(mask, fullMask(m, s), m.nVocab), `${gbnf} after 0xE4`);
      assert.ok(mask.count > 0);
    } finally {
      samplerFree(m.llama, s);
    }
  }
});

Deno.test("greedy: the mask cache picks exactly what the full-vocabulary path picks", async () => {
  const { engine: e } = await engine();
  clearMaskCache();
  const reqs = requests(0, [1, 2, 3, 4]);
  const slow = await batch(e, "slow", reqs);
  const hits0 = constrainedStats.maskHits;
  const fast = await batch(e, "verify", reqs); // every mask built is also checked against llama.cpp
  assert.deepEqual(fast.map((o) => o.tokens), slow.map((o) => o.tokens));
  assert.deepEqual(fast.map((o) => o.finish), slow.map((o) => o.finish));
  assert.ok(constrainedStats.maskHits > hits0, "states repeat, so masks are reused");
  assert.ok(assertValid(fast, reqs) >= 4, "the small schema completes");
  // Warm: the same requests now hit the cache throughout, still with the same outputs.
  const misses0 = maskStats.misses;
  const warm = await batch(e, "fast", reqs);
  assert.deepEqual(warm.map((o) => o.tokens), slow.map((o) => o.tokens));
  assert.equal(maskStats.misses, misses0);
});

Deno.test("seeded sampling: valid, varied, and the same whatever the mask cache held", async () => {
  const { engine: e } = await engine();
  const reqs = requests(0.8, [11, 12, 13, 14]);
  clearMaskCache();
  const cold = await batch(e, "verify", reqs); // every mask built is checked against llama.cpp
  const warm = await batch(e, "fast", reqs);
  assert.deepEqual(warm.map((o) => o.tokens), cold.map((o) => o.tokens));
  // A budget that keeps evicting (a dense mask alone is 16 KB): states rebuilt, the same draws.
  const evictions0 = maskStats.evictions;
  setMaskCacheBudget(20_000);
  try {
    const starved = await batch(e, "fast", reqs);
    assert.deepEqual(starved.map((o) => o.tokens), cold.map((o) => o.tokens));
    assert.ok(maskStats.evictions > evictions0);
  } finally {
    setMaskCacheBudget(32 * 1024 * 1024);
  }
  assertValid(cold, reqs);
  assert.ok(new Set(cold.map((o) => o.text)).size >= 6, "different seeds sample differently");
  // The full-vocabulary path draws differently (a first pick over every token before the masked
  // one) but from the same distribution, into outputs just as valid.
  assertValid(await batch(e, "slow", reqs), reqs);
});

Deno.test("sampled choices follow the chain applied to grammar-masked logits", async () => {
  const { m, engine: e } = await engine();
  const prompt = [128000, 9906, 1917];
  const letters = "abcde".split("");
  const ids = letters.map((c) => {
    const t = tokenize(m.llama, m.vocab, c, false, false);
    assert.equal(t.length, 1);
    return t[0];
  });
  // Raw-logit logprobs of each letter after the prompt (the prompt scored with it appended).
  const lp: number[] = [];
  for (const id of ids) {
    let got: number | undefined;
    for await (
      const ev of e.submit({
        prompt: Int32Array.from([...prompt, id]),
        promptLogprobs: 0,
        maxTokens: 0,
        sampling: defaultSampling(),
        stop: [],
        ignoreEos: false,
      })
    ) {
      if (ev.type === "done") got = ev.promptLogprobs!.at(-1)!.logprob;
    }
    lp.push(got!);
  }
  // A temperature that spreads the five letters, so the test says something.
  const spread = Math.max(...lp) - Math.min(...lp);
  const temperature = Math.max(0.5, spread / 2);
  const w = lp.map((x) => Math.exp((x - Math.max(...lp)) / temperature));
  const expected = w.map((x) => x / w.reduce((a, b) => a + b, 0));
  const N = 400;
  const counts = new Array(letters.length).fill(0);
  const hits0 = constrainedStats.maskHits;
  for (let k = 0; k < N; k += 8) {
    const outs = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      run(e, {
        prompt: Int32Array.from(prompt),
        grammar: "root ::= [a-e]",
        maxTokens: 1,
        // The plain chain (no top-k, top-p or min-p truncation): what `expected` computes.
        sampling: {
          ...defaultSampling(),
          topK: 0,
          topP: 1,
          minP: 0,
          temperature,
          seed: 5000 + k + i,
        },
      })));
    for (const o of outs) {
      const at = letters.indexOf(o.text);
      assert.ok(at >= 0, `not a letter: ${JSON.stringify(o.text)}`);
      counts[at]++;
    }
  }
  assert.ok(constrainedStats.maskHits > hits0, "the rejection path used cached masks");
  let chi2 = 0;
  for (let i = 0; i < letters.length; i++) {
    const want = expected[i] * N;
    if (want >= 1) chi2 += (counts[i] - want) ** 2 / want;
    else assert.ok(counts[i] <= 5, `${letters[i]}: ${counts[i]} of ${N}, expected ${want}`);
  }
  // 4 degrees of freedom: 18.5 is the 0.1% point.
  assert.ok(chi2 < 18.5, `counts ${counts} vs expected ${expected.map((p) => p * N)}: ${chi2}`);
});

Deno.test("the mask cache stays within its byte budget and still gives the same outputs", async () => {
  const { m, engine: e } = await engine();
  const reqs = requests(0, [21, 22]);
  const slow = await batch(e, "slow", reqs);
  clearMaskCache();
  const budget = 4_000;
  setMaskCacheBudget(budget);
  try {
    const evictions0 = maskStats.evictions;
    let peak = 0;
    const probe = setInterval(() => (peak = Math.max(peak, maskCacheBytes())), 1);
    const fast = await batch(e, "verify", reqs);
    clearInterval(probe);
    assert.deepEqual(fast.map((o) => o.tokens), slow.map((o) => o.tokens));
    assert.ok(maskCacheBytes() <= budget, `${maskCacheBytes()} bytes cached`);
    for (const { gbnf } of SCHEMAS) assert.ok(grammarMasks(m, gbnf).bytes <= budget / 2);
    assert.ok(peak <= budget, `peak ${peak} bytes`);
    assert.ok(maskStats.evictions > evictions0, "the budget forced evictions");
  } finally {
    setMaskCacheBudget(32 * 1024 * 1024);
  }
  setMaskCacheBudget(0);
  assert.equal(maskCacheBytes(), 0);
  setMaskCacheBudget(32 * 1024 * 1024);
});
