/**
 * Sampling cost alone, without decoding: one decode fills a logits row, then every step
 * overwrites that row with fresh pseudo-random logits (a random-weight model's worst case: the
 * grammar rejects the top pick at most structural positions) and samples it, either freely
 * (`llama_sampler_sample`) or under the JSON-schema grammar through `sampleConstrained` (slow
 * path, cold mask cache, warm mask cache). Prints ms per sampled token for each; a constrained
 * output that completes starts over with a fresh grammar.
 *
 * @example
 * ```sh
 * HEARTH_LLAMA_LOG=off deno run -A bench/constrained_sampling.ts --steps 400
 * ```
 * @module
 */
import { parseArgs } from "node:util";
import {
  decodeSync,
  logitsIth,
  newBatch,
  samplerFree,
  samplerSample,
  setBatchSize,
} from "../ffi/mod.ts";
import { compileConstraint } from "../lib/constrain/mod.ts";
import {
  constrainedStats,
  freeGrammarSampler,
  newGrammarSampler,
  sampleConstrained,
  setConstrainedMode,
} from "../lib/engine/grammar/constrained.ts";
import { clearMaskCache, maskStats } from "../lib/engine/grammar/grammar_mask.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { buildSamplerChain, defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { BENCH_SCHEMA } from "./schema.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    model: {
      type: "string",
      default: `${Deno.env.get("HOME")}/.cache/hearth-src/bench/hearth-small-q8_0.gguf`,
    },
    steps: { type: "string", default: "400" },
    temperatures: { type: "string", default: "0,0.8" },
    spread: { type: "string", default: "8" },
  },
});

const SCHEMA = BENCH_SCHEMA;
const gbnf = compileConstraint({ json: SCHEMA });
const m = await loadEngineModel({ path: values.model, maxBatch: 1, maxSeqLen: 64, threads: 1 });
const batch = newBatch(8);
batch.token[0] = 128000;
batch.pos[0] = 0;
batch.seqId[0] = 0;
batch.logits[0] = 1;
setBatchSize(batch, 1);
if (decodeSync(m.llama, m.ctx, batch) !== 0) throw new Error("decode failed");
const row = logitsIth(m.llama, m.ctx, 0, m.nVocab);
const steps = Number(values.steps);
const spread = Number(values.spread);

// xorshift32, so every variant sees the same logits sequence.
function randomLogits(seed: number): () => void {
  let x = seed >>> 0 || 1;
  return () => {
    for (let i = 0; i < row.length; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      row[i] = ((x >>> 0) / 4294967296 - 0.5) * spread;
    }
  };
}

type Variant = "free" | "slow" | "fast-cold" | "fast-warm";

function runVariant(v: Variant, temperature: number): { ms: number; tokens: number[] } {
  setConstrainedMode(v === "slow" ? "slow" : "fast");
  if (v === "fast-cold") clearMaskCache();
  const sampling = { ...defaultSampling(), temperature, seed: 42 };
  const chain = buildSamplerChain(m.llama, m.nVocab, sampling, m.eogTokens);
  let g = v === "free" ? undefined : newGrammarSampler(m, gbnf);
  const next = randomLogits(7);
  const tokens: number[] = [];
  let ms = 0;
  for (let k = 0; k < steps; k++) {
    next();
    const t0 = performance.now();
    let tok = g ? sampleConstrained(m, chain, g, 0, true) : samplerSample(m.llama, chain, m.ctx, 0);
    ms += performance.now() - t0;
    if (tok === undefined) {
      freeGrammarSampler(m, g!);
      g = newGrammarSampler(m, gbnf);
      tok = -1;
    }
    tokens.push(tok);
  }
  if (g) freeGrammarSampler(m, g);
  samplerFree(m.llama, chain);
  return { ms: ms / steps, tokens };
}

// JIT and one-time set-up (token trie, layout check) out of the way.
runVariant("fast-warm", 0);
runVariant("free", 0);

for (const t of values.temperatures.split(",").map(Number)) {
  const out: Partial<Record<Variant, { ms: number; tokens: number[] }>> = {};
  for (const v of ["free", "slow", "fast-cold", "fast-warm"] as Variant[]) {
    const c0 = { ...constrainedStats };
    const b0 = maskStats.buildMs;
    out[v] = runVariant(v, t);
    const extra = v === "free" ? "" : ` (${constrainedStats.direct - c0.direct} direct, ` +
      `${constrainedStats.rejections - c0.rejections} rejected, ` +
      `${constrainedStats.maskHits - c0.maskHits} hits, ${
        constrainedStats.maskMisses - c0.maskMisses
      } misses, ${(maskStats.buildMs - b0).toFixed(0)} ms building masks)`;
    console.log(`T=${t} ${v.padEnd(9)} ${out[v]!.ms.toFixed(3)} ms/token${extra}`);
  }
  const same = (a: Variant, b: Variant) => out[a]!.tokens.join() === out[b]!.tokens.join();
  // Greedy picks are the same every way; a seeded sampler draws differently once masks are
  // used directly (same distribution), but never depends on what the cache held.
  console.log(
    `T=${t} cold == warm: ${same("fast-cold", "fast-warm")}` +
      (t <= 0 ? `, fast == slow: ${same("slow", "fast-cold")}` : ""),
  );
}
Deno.exit(0);
