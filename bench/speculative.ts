/**
 * Speculative decoding (`--mtp N`) measured in-process on the engine: greedy generation with and
 * without drafts, the acceptance rate and the speed-up, on two kinds of text:
 *
 * - **repeating**: the context-free tiny MTP model (`bench/support/models.ts`: its trunk ignores
 *   context, so greedy text falls into a cycle), prompted with that cycle, with prompt-lookup
 *   drafts: output that repeats its input, as a code edit or a quote does;
 * - **oracle**: the bench model with drafts taken from a first, draft-free run of the same
 *   request: every draft is right, so this is the ceiling the verification step allows.
 *
 * Both runs of a pair must give the same tokens; the bench fails loudly otherwise.
 *
 * @example
 * ```ts
 * import { speculativeRows } from "./speculative.ts";
 * const rows = await speculativeRows(benchModelPath, { draftTokens: 4, genTokens: 128 });
 * ```
 * @module
 */
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import type { SchedulerOptions } from "../lib/engine/scheduler.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { mtpModelPath } from "./support/models.ts";

export type SpeculativeRow = {
  text: "repeating" | "oracle";
  model: string;
  concurrency: number;
  draftTokens: number;
  baseTps: number;
  specTps: number;
  speedup: number;
  drafted: number;
  accepted: number;
  acceptance: number;
  /** Decode steps without drafts / with them (prefill steps included in both). */
  stepRatio: number;
};

type Opts = { draftTokens: number; genTokens: number; threads: number };

async function generate(
  path: string,
  prompts: number[][],
  genTokens: number,
  threads: number,
  opts: SchedulerOptions,
) {
  const m = await loadEngineModel({ path, maxBatch: 8, maxSeqLen: 512, threads });
  try {
    const engine = inProcessScheduler(m, opts);
    const t0 = performance.now();
    const tokens = await Promise.all(prompts.map(async (p) => {
      let out: number[] = [];
      for await (
        const ev of engine.submit({
          prompt: Int32Array.from(p),
          maxTokens: genTokens,
          sampling: { ...defaultSampling(), temperature: 0 },
          stop: [],
          ignoreEos: true,
          logprobs: 0,
        })
      ) if (ev.type === "done") out = ev.tokens!;
      return out;
    }));
    const ms = performance.now() - t0;
    const st = engine.stats();
    return { tokens, ms, stats: st };
  } finally {
    unloadEngineModel(m);
  }
}

function prompt(n: number, variant: number): number[] {
  const ids = [128000];
  for (let i = 1; i < n; i++) ids.push(1000 + ((i * 7919 + variant * 4729) % 20000));
  return ids;
}

async function pair(
  text: SpeculativeRow["text"],
  path: string,
  prompts: number[][],
  o: Opts,
): Promise<SpeculativeRow> {
  const c = prompts.length;
  const base = await generate(path, prompts, o.genTokens, o.threads, {});
  // The oracle knows each request's draft-free continuation and proposes what follows.
  const known = new Map(prompts.map((p, i) => [p.join(","), base.tokens[i]]));
  const oracle = (history: readonly number[], k: number): number[] => {
    for (const [key, cont] of known) {
      const p = key.split(",").map(Number);
      if (history.length < p.length || history[p.length - 1] !== p[p.length - 1]) continue;
      if (!p.every((t, i) => history[i] === t)) continue;
      // history = prompt + generated so far; the next tokens are the continuation's.
      const at = history.length - p.length;
      return cont.slice(at, at + k);
    }
    return [];
  };
  const spec = await generate(path, prompts, o.genTokens, o.threads, {
    draftTokens: o.draftTokens,
    ...(text === "oracle" ? { draft: oracle } : {}),
  });
  for (let i = 0; i < c; i++) {
    if (spec.tokens[i].join() !== base.tokens[i].join()) {
      throw new Error(`speculative ${text} c=${c}: request ${i} differs from the draft-free run`);
    }
  }
  const n = base.tokens.reduce((s, t) => s + t.length, 0);
  const drafted = spec.stats.draftTokensTotal;
  const accepted = spec.stats.draftAcceptedTotal;
  return {
    text,
    model: path.split("/").pop()!,
    concurrency: c,
    draftTokens: o.draftTokens,
    baseTps: n / (base.ms / 1000),
    specTps: n / (spec.ms / 1000),
    speedup: base.ms / spec.ms,
    drafted,
    accepted,
    acceptance: drafted ? accepted / drafted : 0,
    stepRatio: base.stats.decodeSteps / spec.stats.decodeSteps,
  };
}

/** Rows for concurrency 1 and 8 on repeating text and with an oracle draft. */
export async function speculativeRows(benchModel: string, o: Opts): Promise<SpeculativeRow[]> {
  const repeating = await mtpModelPath();
  // The context-free model's greedy text is periodic once it reaches its cycle: prompts made of
  // that text (rotated per sequence) make output that repeats its input from the first token.
  const warm = await generate(repeating, [prompt(64, 500)], 256, o.threads, {});
  const cycle = warm.tokens[0].slice(-128);
  const rotations = (c: number) =>
    Array.from({ length: c }, (_, i) => [128000, ...cycle.slice(i * 7), ...cycle.slice(0, i * 7)]);
  const rows: SpeculativeRow[] = [];
  for (const c of [1, 8]) rows.push(await pair("repeating", repeating, rotations(c), o));
  for (const c of [1, 8]) {
    const prompts = Array.from({ length: c }, (_, i) => prompt(64, 500 + i));
    rows.push(await pair("oracle", benchModel, prompts, o));
  }
  return rows;
}
