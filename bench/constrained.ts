/**
 * Grammar-constrained generation against the same requests without a grammar, on the `small`
 * bench model: a JSON-schema grammar (an array of objects), temperature 0 and 0.8 (seeded), 128
 * generated tokens per client with `ignore_eos` (a client whose output completes early sends the
 * next request, so the batch stays full), at concurrency 1 and 8. Modes: `free` (no grammar),
 * `slow` (full-vocabulary grammar apply on every rejection, the old path), `fast-cold` (mask cache
 * emptied first) and `fast-warm`. Prints tok/s, ms per step, sampling ms per token and the time
 * spent in `sampleConstrained` per call.
 *
 * @example
 * ```sh
 * HEARTH_LLAMA_LOG=off deno run -A bench/constrained.ts --model ~/.cache/hearth-src/bench/hearth-small-q8_0.gguf
 * HEARTH_LLAMA_LOG=off deno run -A bench/constrained.ts --concurrency 1 --modes free,fast-warm
 * ```
 * @module
 */
import { parseArgs } from "node:util";
import { tokenize } from "../ffi/mod.ts";
import { compileConstraint } from "../lib/constrain/mod.ts";
import { constrainedStats, setConstrainedMode } from "../lib/engine/grammar/constrained.ts";
import { clearMaskCache, maskStats } from "../lib/engine/grammar/grammar_mask.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import type { GenRequest } from "../lib/engine/scheduler.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { BENCH_SCHEMA } from "./schema.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    model: {
      type: "string",
      default: `${Deno.env.get("HOME")}/.cache/hearth-src/bench/hearth-small-q8_0.gguf`,
    },
    concurrency: { type: "string", default: "1,8" },
    temperatures: { type: "string", default: "0,0.8" },
    rounds: { type: "string", default: "1" },
    tokens: { type: "string", default: "128" },
    threads: { type: "string", default: "2" },
    modes: { type: "string", default: "free,slow,fast-cold,fast-warm" },
    json: { type: "string" },
  },
});

const SCHEMA = BENCH_SCHEMA;

const gbnf = compileConstraint({ json: SCHEMA });
const m = await loadEngineModel({
  path: values.model,
  maxBatch: 8,
  maxSeqLen: 512,
  threads: Number(values.threads),
});
const engine = inProcessScheduler(m);

function request(i: number, temperature: number, grammar: boolean): GenRequest {
  const text = `Request ${i}: list a few items as JSON with a name, a count and a flag.`;
  return {
    prompt: tokenize(m.llama, m.vocab, text, true, true),
    grammar: grammar ? gbnf : undefined,
    maxTokens: Number(values.tokens),
    sampling: { ...defaultSampling(), temperature, seed: 1000 + i },
    stop: [],
    ignoreEos: true,
  };
}

async function runOne(req: GenRequest): Promise<{ tokens: number; text: string }> {
  let text = "";
  for await (const ev of engine.submit(req)) {
    if (ev.type === "text") text += ev.text;
    if (ev.type === "error") throw new Error(ev.message);
    if (ev.type === "done") return { tokens: ev.completionTokens, text };
  }
  throw new Error("no done event");
}

type Mode = "free" | "slow" | "fast-cold" | "fast-warm";

/**
 * `c` clients, each issuing requests back to back until it has `tokens` generated tokens (a
 * constrained output often completes early), so the batch stays at `c` rows throughout.
 */
async function measure(c: number, temperature: number, mode: Mode, round: number) {
  if (mode === "slow") setConstrainedMode("slow");
  else setConstrainedMode("fast");
  if (mode === "fast-cold") clearMaskCache();
  const grammar = mode !== "free";
  const target = Number(values.tokens);
  const before = engine.stats();
  const cs0 = { ...constrainedStats };
  const ms0 = maskStats.buildMs;
  const t0 = performance.now();
  let requests = 0;
  let complete = 0;
  const counts = await Promise.all(Array.from({ length: c }, async (_, client) => {
    let got = 0;
    for (let k = 0; got < target; k++) {
      const seed = round * 10000 + client * 100 + k;
      const req = request(seed, temperature, grammar);
      req.maxTokens = target - got;
      const o = await runOne(req);
      got += o.tokens;
      requests++;
      try {
        JSON.parse(o.text);
        complete++;
      } catch { /* cut by max_tokens */ }
    }
    return got;
  }));
  const ms = performance.now() - t0;
  const after = engine.stats();
  const tokens = counts.reduce((a, b) => a + b, 0);
  const steps = after.decodeSteps - before.decodeSteps;
  const calls = constrainedStats.calls - cs0.calls;
  return {
    mode,
    tokS: tokens / ms * 1000,
    msPerStep: ms / steps,
    decodeMsPerStep: (after.loopMs.decode - before.loopMs.decode) / steps,
    sampleMsPerToken: (after.loopMs.sample - before.loopMs.sample) / tokens,
    perCallMs: calls ? (constrainedStats.ms - cs0.ms) / calls : 0,
    calls,
    direct: constrainedStats.direct - cs0.direct,
    rejections: constrainedStats.rejections - cs0.rejections,
    hits: constrainedStats.maskHits - cs0.maskHits,
    misses: constrainedStats.maskMisses - cs0.maskMisses,
    buildMs: maskStats.buildMs - ms0,
    fullApplies: constrainedStats.fullApplies - cs0.fullApplies,
    requests,
    complete,
  };
}

// Warm-up (page in the weights, JIT).
await runOne(request(99, 0, false));

const modes = values.modes.split(",") as Mode[];
const results: unknown[] = [];
for (let round = 0; round < Number(values.rounds); round++) {
  for (const c of values.concurrency.split(",").map(Number)) {
    for (const t of values.temperatures.split(",").map(Number)) {
      let free = 0;
      for (const mode of modes) {
        const r = await measure(c, t, mode, round);
        results.push({ round, c, temperature: t, ...r });
        if (mode === "free") free = r.tokS;
        console.log(
          `c=${c} T=${t} ${mode.padEnd(9)} ${r.tokS.toFixed(1).padStart(6)} tok/s` +
            (mode === "free" ? "       " : ` ${(r.tokS / free).toFixed(2)}x`) +
            ` ${r.msPerStep.toFixed(1).padStart(6)} ms/step (decode ${
              r.decodeMsPerStep.toFixed(1)
            })` +
            ` sample ${r.sampleMsPerToken.toFixed(3)} ms/token` +
            (mode === "free" ? "" : `, sampleConstrained ${r.perCallMs.toFixed(3)} ms/call,` +
              ` ${r.direct}/${r.calls} direct, ${r.rejections} first picks rejected;` +
              ` masks ${r.hits} hits ${r.misses} misses` +
              ` (${r.buildMs.toFixed(0)} ms building) ${r.fullApplies} full applies;` +
              ` ${r.complete}/${r.requests} requests complete JSON`),
        );
      }
    }
  }
}
const load = Deno.loadavg();
console.log(`load average ${load.map((x) => x.toFixed(2)).join(" ")}`);
if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(results, null, 1));
Deno.exit(0);
