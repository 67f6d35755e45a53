// Lazy grammars in the engine, on the tiny model: a large logit bias makes the random weights
// emit a trigger (a reserved special token), after which the output must satisfy the grammar;
// without the bias the grammar never arms and the output is the unconstrained one. Trigger
// patterns std::regex might read differently are refused before llama.cpp sees them (a pattern
// it cannot compile would abort the process), and a trigger whose replay the grammar rejects is
// resampled instead of crashing.
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import { detokenize } from "../ffi/mod.ts";
import { compileConstraint } from "../lib/constrain/mod.ts";
import { checkGrammar } from "../lib/engine/grammar/constrained.ts";
import type { EngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { type GenEvent, type GenRequest, type Scheduler } from "../lib/engine/scheduler.ts";
import {
  compileTriggerPatterns,
  newTriggerWatch,
  peekTrigger,
} from "../lib/engine/grammar/triggers.ts";
import { tinyEngine } from "./support/tiny_engine.ts";

const TRIGGER = 128002; // <|reserved_special_token_0|>
const TRIGGER_TEXT = "<|reserved_special_token_0|>";
const SEEDS = [1, 2, 3, 4];
// Enough to make the trigger likely (the tiny model's logits span about +-35) but not certain,
// so some seeds write a few free tokens first.
const BIAS = 32;

const schema = {
  type: "object",
  properties: {
    ok: { type: "boolean" },
    n: { type: "integer", minimum: 0, maximum: 9 },
  },
  required: ["ok", "n"],
  additionalProperties: false,
};
const json = compileConstraint({ json: schema });
// The grammar starts with what the trigger replays into it: the trigger token's own text.
const lazyGbnf = json.replace(/^root ::=/m, "after-trigger ::=") +
  `\nroot ::= "${TRIGGER_TEXT}" after-trigger\n`;

const engine = tinyEngine;

type Run = { text: string; tokens: number[]; finish: string };

async function run(e: Scheduler, req: Partial<GenRequest> & { seed: number; bias?: number }) {
  const { seed, bias, ...rest } = req;
  const events: AsyncIterable<GenEvent> = e.submit({
    prompt: Int32Array.from([128000, 9906, 1917]),
    maxTokens: 80,
    sampling: {
      ...defaultSampling(),
      seed,
      logitBias: bias ? [[TRIGGER, bias]] : [],
    },
    stop: [],
    ignoreEos: true,
    logprobs: 0, // for the sampled ids in `done.tokens`
    ...rest,
  });
  const out: Run = { text: "", tokens: [], finish: "" };
  for await (const ev of events) {
    if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "done") {
      out.tokens = ev.tokens!;
      out.finish = ev.finishReason;
    } else if (ev.type === "error") throw new Error(ev.message);
  }
  return out;
}

const validate = new Ajv2020({ strict: false }).compile(schema);

function afterTrigger(m: EngineModel, r: Run): unknown {
  const at = r.tokens.indexOf(TRIGGER);
  assert.ok(at >= 0, `the trigger was not sampled: ${JSON.stringify(r.text)}`);
  return JSON.parse(detokenize(m.llama, m.vocab, r.tokens.slice(at + 1), false, false));
}

for (const kind of ["tokens", "patterns"] as const) {
  Deno.test(`lazy grammar (${kind} trigger): output after the trigger satisfies the schema`, async () => {
    const { m, engine: e } = await engine();
    const grammarTriggers = kind === "tokens"
      ? { patterns: [], tokens: [TRIGGER] }
      : { patterns: ["[\\s\\S]*?(<\\|reserved_special_token_0\\|>)[\\s\\S]*"], tokens: [] };
    assert.equal(checkGrammar(m, lazyGbnf, grammarTriggers), undefined);
    let freeFirst = 0;
    for (const seed of SEEDS) {
      const r = await run(e, { seed, bias: BIAS, grammar: lazyGbnf, grammarTriggers });
      const value = afterTrigger(m, r);
      assert.ok(validate(value), `${JSON.stringify(value)}: ${JSON.stringify(validate.errors)}`);
      // The grammar was complete and ignore_eos banned the end: it stops, not runs out.
      assert.equal(r.finish, "stop");
      if (r.tokens.indexOf(TRIGGER) > 0) freeFirst++;
    }
    assert.ok(freeFirst > 0, "some seed should write free text before the trigger");
  });
}

Deno.test("lazy grammar without its trigger leaves the output unconstrained", async () => {
  const { engine: e } = await engine();
  const grammarTriggers = { patterns: [], tokens: [TRIGGER] };
  for (const seed of SEEDS) {
    const lazy = await run(e, { seed, grammar: lazyGbnf, grammarTriggers });
    const free = await run(e, { seed });
    const strict = await run(e, { seed, grammar: json });
    assert.ok(!lazy.tokens.includes(TRIGGER));
    assert.deepEqual(lazy.tokens, free.tokens, "an unarmed grammar changes nothing");
    assert.equal(lazy.finish, "length");
    assert.notEqual(lazy.text, strict.text);
    assert.ok(validate(JSON.parse(strict.text)));
  }
});

Deno.test("a trigger whose replay the grammar rejects is resampled, not fed to llama.cpp", async () => {
  const { engine: e } = await engine();
  // The pattern matches inside the special token's text, so llama.cpp would replay
  // "<|reserved_special_token_0|>" into a grammar that only allows "<|reserved" "X": a C++
  // exception, which through FFI would abort the process.
  const grammarTriggers = { patterns: ["(<\\|reserved)"], tokens: [] };
  const gbnf = 'root ::= "<|reserved" "X"';
  const { m } = await engine();
  assert.equal(checkGrammar(m, gbnf, grammarTriggers), undefined);
  for (const seed of SEEDS.slice(0, 2)) {
    const r = await run(e, {
      seed,
      bias: BIAS + 20,
      grammar: gbnf,
      grammarTriggers,
      maxTokens: 12,
    });
    assert.ok(!r.tokens.includes(TRIGGER), "the biased trigger must have been refused");
    assert.equal(r.tokens.length, 12);
  }
});

Deno.test("checkGrammar refuses bad trigger patterns and tokens with a message", async () => {
  const { m } = await engine();
  const lazy = (patterns: string[], tokens: number[] = []) =>
    checkGrammar(m, lazyGbnf, { patterns, tokens });
  for (const bad of ["(?<name>x)", "(", "a{", "[[:alpha:]]", "\\p{L}", "x\0y", "[z-a]", "a**"]) {
    const why = lazy([bad]);
    assert.ok(why && /trigger pattern 0/.test(why), `${JSON.stringify(bad)}: ${why}`);
  }
  assert.equal(lazy(["<tool_call>", '^\\s*(\\{"name")$', "[\\w.-]+@", "a{2,3}?"]), undefined);
  assert.match(lazy([], [m.nVocab])!, /out of range/);
  // llama.cpp feeds a trigger token to the grammar: one it cannot start with is refused.
  assert.match(lazy([], [9906])!, /not allowed at the start of the grammar/);
  // A grammar that does not parse is still llama.cpp's complaint, lazy or not.
  assert.match(checkGrammar(m, "root ::= nowhere", { patterns: ["x"], tokens: [] })!, /grammar/);
  // The engine refuses the same request at admission instead of crashing.
  const { engine: e } = await engine();
  await assert.rejects(
    () =>
      run(e, { seed: 1, grammar: lazyGbnf, grammarTriggers: { patterns: ["(?<=a)"], tokens: [] } }),
    /could not build the sampler: .*trigger pattern/,
  );
});

Deno.test("trigger patterns: JS twin finds llama.cpp's replay start (first non-empty group)", () => {
  const enc = new TextEncoder();
  const w = newTriggerWatch({ patterns: ["[\\s\\S]*?(<call>)[\\s\\S]*"], tokens: [5] });
  let p = peekTrigger(w, 1, enc.encode("say <ca"));
  assert.equal(p.replay, undefined);
  w.spans.push({ token: 1, start: 0, end: 7 });
  w.buffer = p.buffer;
  p = peekTrigger(w, 2, enc.encode("ll>{"));
  assert.deepEqual(
    p.replay!.map((r) => [r.token, new TextDecoder().decode(r.bytes), r.whole]),
    [[1, "<ca", false], [2, "ll>{", true]],
  );
  // A trigger token replays itself, whole.
  assert.deepEqual(peekTrigger(w, 5, enc.encode("T")).replay!.map((r) => r.token), [5]);
  // Non-ASCII is matched as UTF-8 bytes, as std::regex<char> does.
  const [re] = compileTriggerPatterns(["é+"]);
  assert.ok(re.test("\xc3\xa9\xa9"));
  assert.ok(!re.test("é"));
});
