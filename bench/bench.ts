/**
 * `deno task bench`: Hearth's speed on the `small` preset (SmolLM2-135M shapes, Q8_0), each figure
 * next to the library's own limit measured in the same run by a plain FFI loop over the same
 * library and model, and optionally next to llama.cpp's `llama-server` (`--peer`).
 *
 * 1. Single sequence: prompt processing and generation tok/s, server vs library.
 * 2. Concurrency: `c` streaming clients, each issuing `--requests` completions back to back
 *    (128-token prompts, all different, 128 generated tokens, temperature 0, `ignore_eos`):
 *    aggregate generated tok/s and client-side TTFT p50/p95, against a library loop that decodes
 *    the same batch shapes (prefill of `c` prompts, then steps of `c` one-token sequences, each
 *    greedy-sampled).
 *
 * Prints tables and writes everything, load average included, as JSON to `bench/results/`.
 * See `bench/README.md` for what each figure means.
 *
 * @example
 * ```sh
 * deno task bench                                   # both sections, concurrency 1,8,32
 * deno task bench --concurrency 1,4,16,32 --requests 2 --peer
 * ```
 * @module
 */
import {
  attachThreadpool,
  chainAdd,
  type ContextPtr,
  createThreadpool,
  decode,
  decodeSync,
  freeContext,
  freeModel,
  type Llama,
  loadModel,
  type ModelPtr,
  modelVocab,
  newBatch,
  newContext,
  openLlama,
  samplerChain,
  samplerFree,
  type SamplerPtr,
  samplers,
  samplerSample,
  setBatchSize,
  type Threadpool,
  vocabInfo,
} from "../ffi/mod.ts";
import { buildSamplerChain } from "../lib/engine/sampling/sampling.ts";
import { toSampling } from "../routes/openai_common.ts";
import { startServer } from "../tools/server_process.ts";
import { BENCH_PRESETS, benchModel } from "./support/models.ts";
import { BENCH_SCHEMA } from "./schema.ts";
import { type SpeculativeRow, speculativeRows } from "./speculative.ts";
import {
  buildLlamaServer,
  peerArgs,
  type PeerBuild,
  peerVersion,
  startLlamaServer,
} from "./peer.ts";
import { clientCpuMs, cpuSplit, threadTimes } from "./thread_cpu.ts";

const USAGE =
  `usage: deno task bench [options]        inference: server vs. library (and llama-server)
       deno task bench events [--listeners 256 --rate 1000 --seconds 10]   event channel fan-out
       deno task bench video [--runs 3 --seconds 8 --resolution 720p]      video start-to-done
       deno task bench tools [--families LIST --rounds 3 --no-server]      tool-schema grammars
       deno task bench --agent-trace FILE [--sessions N --serial ...]     replay an agent trace
       deno task bench --cache-restore [--prefix-tokens 30000]            prompt cache restore
options of the inference benchmark:
  --model PATH          GGUF to use (default: the small preset, written once to the cache)
  --runs N              single-sequence runs after one warm-up (default 3)
  --prompt-tokens N     prompt length, BOS included (default 128)
  --gen-tokens N        generated tokens per request (default 128)
  --concurrency LIST    comma-separated client counts, each 1..--max-batch (default 1,8,32)
  --requests N          requests each client issues back to back (default 2)
  --lib-runs N          library-limit runs per concurrency; the best is kept (default 2)
  --rounds N            with --peer: Hearth, llama-server and the library loop take turns
                        N times per concurrency (HPL, PLH, LHP, ...), each round giving paired
                        ratios; the median round is reported (default 3)
  --round-seconds N     with --peer: more rounds, up to 5x --rounds, until a concurrency's
                        rounds took N seconds, so short phases (c=1) get as many (default 60)
  --max-batch N         server sequences and llama-server -np (default 32)
  --max-seq-len N       context per sequence (default prompt+gen+1 rounded up to 64)
  --peer                also measure llama.cpp's llama-server (built once, ~5 min on 2 cores)
  --presets LIST        with --peer: the presets of the paired rows (default small,tiny;
                        with --model, only the main run on it unless these two say otherwise)
  --modes LIST          with --peer: their sampling, of greedy, t1 (temperature 1, top_p 0.95)
                        and defaults (no sampling field) (default all three); the small greedy
                        row is the main run (single, constrained, speculative sections beside it)
  --extra-rounds N      paired rounds of the rows beyond the main run (default 2)
  --extra-seconds N     and their --round-seconds (default 15)
  --extra-requests N    and their --requests (default 1)
  --no-single           skip the single-sequence section
  --no-constrained      skip the JSON-schema constrained rows
  --no-speculative      skip the speculative decoding rows (in-process, --mtp 4)
  --peer-bin PATH       with --peer: this llama-server instead of building one (bench/gpu.sh
                        passes the one built with the libraries under test)
  --server-arg ARG      one more \`hearth serve\` argument (repeatable; e.g. --graph-batch=off)
  --json-out FILE       write the JSON here instead of bench/results/bench-<date>.json`;

type Args = {
  model?: string;
  runs: number;
  promptTokens: number;
  genTokens: number;
  concurrency: number[];
  requests: number;
  libRuns: number;
  rounds: number;
  roundSeconds: number;
  maxBatch: number;
  maxSeqLen: number;
  peer: boolean;
  single: boolean;
  constrained: boolean;
  speculative: boolean;
  peerBin?: string;
  serverArgs: string[];
  jsonOut?: string;
  presets: string[];
  modes: string[];
  extraRounds: number;
  extraRoundSeconds: number;
  extraRequests: number;
};

function parseArgs(argv: string[]): Args {
  const a: Args = {
    runs: 3,
    promptTokens: 128,
    genTokens: 128,
    concurrency: [1, 8, 32],
    requests: 2,
    libRuns: 2,
    rounds: 3,
    roundSeconds: 60,
    maxBatch: 32,
    maxSeqLen: 0,
    peer: false,
    single: true,
    constrained: true,
    speculative: true,
    serverArgs: [],
    presets: [],
    modes: [],
    extraRounds: 2,
    extraRoundSeconds: 15,
    extraRequests: 1,
  };
  const bad = (msg: string): never => {
    console.error(`bench: ${msg}\n${USAGE}`);
    Deno.exit(2);
  };
  const int = (name: string, v: string | undefined, min = 1): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) bad(`${name} needs an integer >= ${min}, got ${v}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const v = argv[i + 1];
    switch (flag) {
      case "--model":
        if (!v) bad("--model needs a path");
        a.model = v;
        i++;
        break;
      case "--runs":
        a.runs = int(flag, v);
        i++;
        break;
      case "--prompt-tokens":
        a.promptTokens = int(flag, v, 2);
        i++;
        break;
      case "--gen-tokens":
        a.genTokens = int(flag, v);
        i++;
        break;
      case "--concurrency":
        a.concurrency = (v ?? "").split(",").map((s) => int(flag, s));
        i++;
        break;
      case "--requests":
        a.requests = int(flag, v);
        i++;
        break;
      case "--lib-runs":
        a.libRuns = int(flag, v);
        i++;
        break;
      case "--rounds":
        a.rounds = int(flag, v);
        i++;
        break;
      case "--round-seconds":
        a.roundSeconds = int(flag, v, 0);
        i++;
        break;
      case "--max-batch":
        a.maxBatch = int(flag, v);
        i++;
        break;
      case "--max-seq-len":
        a.maxSeqLen = int(flag, v);
        i++;
        break;
      case "--peer":
        a.peer = true;
        break;
      case "--no-constrained":
        a.constrained = false;
        break;
      case "--no-speculative":
        a.speculative = false;
        break;
      case "--no-single":
        a.single = false;
        break;
      case "--peer-bin":
        if (!v) bad("--peer-bin needs a path");
        a.peerBin = v;
        a.peer = true;
        i++;
        break;
      case "--server-arg":
        if (!v) bad("--server-arg needs a value");
        a.serverArgs.push(v);
        i++;
        break;
      case "--presets":
        a.presets = (v ?? "").split(",");
        if (a.presets.some((x) => !BENCH_PRESETS[x])) bad(`--presets: one of small, tiny`);
        i++;
        break;
      case "--modes":
        a.modes = (v ?? "").split(",");
        if (a.modes.some((x) => !MODES[x])) bad(`--modes: of ${Object.keys(MODES).join(", ")}`);
        i++;
        break;
      case "--extra-rounds":
        a.extraRounds = int(flag, v);
        i++;
        break;
      case "--extra-seconds":
        a.extraRoundSeconds = int(flag, v, 0);
        i++;
        break;
      case "--extra-requests":
        a.extraRequests = int(flag, v);
        i++;
        break;
      case "--json-out":
        if (!v) bad("--json-out needs a path");
        a.jsonOut = v;
        i++;
        break;
      case "-h":
      case "--help":
        console.log(USAGE);
        Deno.exit(0);
        break;
      default:
        bad(`unknown argument ${flag}`);
    }
  }
  // One spare cell: a sequence ends "length" once the next position would not fit.
  if (!a.maxSeqLen) a.maxSeqLen = Math.ceil((a.promptTokens + a.genTokens + 1) / 64) * 64;
  if (a.maxSeqLen <= a.promptTokens + a.genTokens) {
    bad(`--max-seq-len ${a.maxSeqLen} leaves no room for ${a.promptTokens}+${a.genTokens} tokens`);
  }
  const over = a.concurrency.find((c) => c > a.maxBatch);
  if (over) bad(`concurrency ${over} exceeds --max-batch ${a.maxBatch}`);
  if (!a.peer && (a.presets.length || a.modes.length)) bad("--presets and --modes need --peer");
  // The presets × modes rows are the standard run's; with --model (bench/gpu.sh) only the main
  // run, unless asked for.
  const all = a.peer && !a.model;
  if (!a.presets.length) a.presets = all ? ["small", "tiny"] : ["small"];
  if (!a.modes.length) a.modes = all ? Object.keys(MODES) : ["greedy"];
  return a;
}

/**
 * The sampling of the paired rows: what each request body adds to the bench's (temperature 0,
 * `ignore_eos`). Both servers get the same body; `defaults` sends no sampling field at all, so
 * each server samples with its own defaults.
 */
const MODES: Record<string, { label: string; body: Record<string, unknown> }> = {
  greedy: { label: "greedy (temperature 0)", body: {} },
  t1: { label: "temperature 1, top_p 0.95", body: { temperature: 1, top_p: 0.95 } },
  defaults: {
    label: "no sampling field (each server's defaults)",
    body: { temperature: undefined },
  },
};

/**
 * The llama.cpp chain Hearth builds for a mode's requests (its OpenAI routes' `toSampling`, on
 * Hearth's defaults), for the library loop to sample with: the library limit of sampled rows pays
 * llama.cpp's own chain per token.
 */
function modeChain(lib: Lib, mode: string): SamplerPtr {
  if (mode === "greedy") return greedyChain(lib.llama);
  const nVocab = vocabInfo(lib.llama, modelVocab(lib.llama, lib.model)).nTokens;
  const sampling = toSampling({ temperature: 0, ...MODES[mode].body }, 0);
  return buildSamplerChain(lib.llama, nVocab, { ...sampling, seed: 1 }, []);
}

// Constrained requests stop where the JSON ends: llama-server fails a request whose grammar has
// ended while `ignore_eos` keeps it going ("Unexpected empty grammar stack").
const JSON_HEARTH = { structured_outputs: { json: BENCH_SCHEMA }, ignore_eos: false };
const JSON_PEER = { json_schema: BENCH_SCHEMA, ignore_eos: false };

/** JSON-Schema constrained requests: Hearth next to its own unconstrained figure and the peer. */
type ConstrainedRow = {
  concurrency: number;
  json: Phase;
  /** constrained / unconstrained tok/s on Hearth. */
  ratio: number;
  peer?: Phase;
  ratioToPeer?: number;
};

/** Hearth's scheduler loop per generated token (from /metrics), in ms. */
type LoopBreakdown = { decode: number; sample: number; io: number; other: number; tokens: number };

async function loopCounters(url: string): Promise<LoopBreakdown> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (re: RegExp) => Number(text.match(re)?.[1] ?? NaN);
  const phase = (p: string) =>
    get(new RegExp(`hearth_engine_loop_seconds_total\\{phase="${p}"\\} (\\S+)`)) * 1000;
  return {
    decode: phase("decode"),
    sample: phase("sample"),
    io: phase("io"),
    other: phase("other"),
    tokens: get(/^hearth_generated_tokens_total (\S+)$/m),
  };
}

function perToken(a: LoopBreakdown, b: LoopBreakdown): LoopBreakdown {
  const n = b.tokens - a.tokens;
  const d = (k: "decode" | "sample" | "io" | "other") => (b[k] - a[k]) / n;
  return { decode: d("decode"), sample: d("sample"), io: d("io"), other: d("other"), tokens: n };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Nearest-rank percentile, so p95 of few samples is an observed value, not an interpolation. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/**
 * Machine state when a section starts. The load average shows other processes of this kernel
 * (and, during a section, the bench's own threads); CPU steal shows other tenants of the host,
 * which the load average cannot see. Both cost the figures time.
 */
type Snapshot = {
  at: string;
  load1: number;
  load5: number;
  load15: number;
  /** Cumulative jiffies of the `cpu` line of /proc/stat: steal and all states together. */
  stealTicks: number;
  totalTicks: number;
  /** Share of CPU time stolen from this point to the next snapshot, in percent. */
  stealPct?: number;
};

function snapshot(at: string): Snapshot {
  const s: Snapshot = { at, load1: NaN, load5: NaN, load15: NaN, stealTicks: 0, totalTicks: 0 };
  try {
    [s.load1, s.load5, s.load15] = Deno.readTextFileSync("/proc/loadavg").split(" ").map(Number);
    const cpu = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/).slice(1)
      .map(Number);
    s.stealTicks = cpu[7] ?? 0;
    s.totalTicks = cpu.slice(0, 8).reduce((x, y) => x + y, 0);
  } catch { /* not Linux: the figures just go unannotated */ }
  return s;
}

function withSteal(snaps: Snapshot[]): Snapshot[] {
  return snaps.map((s, i) => {
    const n = snaps[i + 1];
    if (!n || n.totalTicks === s.totalTicks) return s;
    return {
      ...s,
      stealPct: (100 * (n.stealTicks - s.stealTicks)) / (n.totalTicks - s.totalTicks),
    };
  });
}

/**
 * Token ids of a deterministic prompt: BOS then ordinary word tokens. `variant` changes every
 * token after BOS (4729 is coprime with 20000, so up to 20000 variants never share token 1),
 * which keeps either server from reusing a cached prefix between requests.
 */
function promptIds(n: number, variant = 0): number[] {
  const ids = [128000];
  for (let i = 1; i < n; i++) ids.push(1000 + ((i * 7919 + variant * 4729) % 20000));
  return ids;
}

// ---------------------------------------------------------------- the library limit

type Lib = { llama: Llama; model: ModelPtr; threads: number; pool?: Threadpool };

function contextFor(lib: Lib, nCtx: number, nSeqMax: number): ContextPtr {
  // The server's own settings (lib/engine/model.ts), so both decode the same graphs.
  const ctx = newContext(lib.llama, lib.model, {
    n_ctx: nCtx,
    n_batch: 2048,
    n_ubatch: 512,
    n_seq_max: nSeqMax,
    n_threads: lib.threads,
    n_threads_batch: lib.threads,
    no_perf: true,
  });
  if (lib.pool) attachThreadpool(lib.llama, ctx, lib.pool);
  return ctx;
}

function greedyChain(llama: Llama): SamplerPtr {
  const chain = samplerChain(llama);
  chainAdd(llama, chain, samplers(llama).greedy());
  return chain;
}

type Speeds = { promptTps: number; genTps: number };

/** Single sequence: one prefill batch, then one-token decode steps with greedy sampling. */
async function singleLibrary(lib: Lib, a: Args): Promise<Speeds> {
  const { llama } = lib;
  const ctx = contextFor(lib, 1024, 1);
  const mem = llama.sym.llama_get_memory(ctx)!;
  const batch = newBatch(a.promptTokens);
  const chain = greedyChain(llama);
  const ids = promptIds(a.promptTokens);
  const prompt: number[] = [];
  const gen: number[] = [];
  try {
    for (let run = 0; run <= a.runs; run++) {
      llama.sym.llama_memory_clear(mem, true);
      ids.forEach((t, i) => {
        batch.token[i] = t;
        batch.pos[i] = i;
        batch.seqId[i] = 0;
        batch.logits[i] = i === ids.length - 1 ? 1 : 0;
      });
      setBatchSize(batch, ids.length);
      let t0 = performance.now();
      if (await decode(llama, ctx, batch)) throw new Error("prefill failed");
      const tPrompt = performance.now() - t0;
      let tok = samplerSample(llama, chain, ctx, ids.length - 1);
      t0 = performance.now();
      for (let i = 0; i < a.genTokens; i++) {
        batch.token[0] = tok;
        batch.pos[0] = ids.length + i;
        batch.logits[0] = 1;
        setBatchSize(batch, 1);
        // On this thread, as the engine decodes short steps: the limit, without the pool hop.
        if (decodeSync(llama, ctx, batch)) throw new Error("decode failed");
        tok = samplerSample(llama, chain, ctx, 0);
      }
      const tGen = performance.now() - t0;
      if (run === 0) continue; // warm-up
      prompt.push(ids.length / (tPrompt / 1000));
      gen.push(a.genTokens / (tGen / 1000));
    }
  } finally {
    samplerFree(llama, chain);
    freeContext(llama, ctx);
  }
  return { promptTps: median(prompt), genTps: median(gen) };
}

type LibLimit = {
  concurrency: number;
  /** c × gen-tokens / time of the one-token decode steps (sampling included). */
  genTps: number;
  /** c × gen-tokens / (prefill + steps): what a server could reach if it never idled. */
  withPrefillTps: number;
  prefillMs: number;
  stepsMs: number;
  runs: { prefillMs: number; stepsMs: number }[];
};

/**
 * The batch shapes the scheduler builds for `c` clients arriving together: their prompts packed
 * into decodes of at most n_batch tokens (a prompt may straddle two, as in `pack()`), then
 * gen-tokens steps of `c` one-token sequences. Each sequence samples with its own chain (greedy,
 * or the `mode`'s, see `modeChain`) after every decode that produced its logits, as the server
 * does per sequence.
 */
async function libraryLimit(
  lib: Lib,
  ctx: ContextPtr,
  c: number,
  a: Args,
  mode = "greedy",
): Promise<LibLimit> {
  const { llama } = lib;
  const nBatch = 2048;
  const mem = llama.sym.llama_get_memory(ctx)!;
  const batch = newBatch(nBatch);
  const chains = Array.from({ length: c }, () => modeChain(lib, mode));
  const runs: LibLimit["runs"] = [];
  try {
    for (let run = 0; run < a.libRuns; run++) {
      llama.sym.llama_memory_clear(mem, true);
      const flat: { tok: number; pos: number; seq: number; last: boolean }[] = [];
      for (let s = 0; s < c; s++) {
        const ids = promptIds(a.promptTokens, 1 + run * c + s);
        ids.forEach((tok, pos) => flat.push({ tok, pos, seq: s, last: pos === ids.length - 1 }));
      }
      const next = new Int32Array(c);
      let t0 = performance.now();
      for (let off = 0; off < flat.length; off += nBatch) {
        const part = flat.slice(off, off + nBatch);
        part.forEach((e, i) => {
          batch.token[i] = e.tok;
          batch.pos[i] = e.pos;
          batch.seqId[i] = e.seq;
          batch.logits[i] = e.last ? 1 : 0;
        });
        setBatchSize(batch, part.length);
        if (await decode(llama, ctx, batch)) throw new Error(`prefill failed (c=${c})`);
        part.forEach((e, i) => {
          if (e.last) next[e.seq] = samplerSample(llama, chains[e.seq], ctx, i);
        });
      }
      const prefillMs = performance.now() - t0;
      t0 = performance.now();
      for (let step = 0; step < a.genTokens; step++) {
        for (let s = 0; s < c; s++) {
          batch.token[s] = next[s];
          batch.pos[s] = a.promptTokens + step;
          batch.seqId[s] = s;
          batch.logits[s] = 1;
        }
        setBatchSize(batch, c);
        if (decodeSync(llama, ctx, batch)) throw new Error(`decode failed (c=${c})`);
        for (let s = 0; s < c; s++) next[s] = samplerSample(llama, chains[s], ctx, s);
      }
      runs.push({ prefillMs, stepsMs: performance.now() - t0 });
    }
  } finally {
    for (const ch of chains) samplerFree(llama, ch);
  }
  // Background load only ever slows a run down, so the fastest run is the closest to the limit.
  const best = runs.reduce((x, y) => (y.stepsMs < x.stepsMs ? y : x));
  const tokens = c * a.genTokens;
  return {
    concurrency: c,
    genTps: tokens / (best.stepsMs / 1000),
    withPrefillTps: tokens / ((best.prefillMs + best.stepsMs) / 1000),
    prefillMs: best.prefillMs,
    stepsMs: best.stepsMs,
    runs,
  };
}

// ---------------------------------------------------------------- the client

type Completion = {
  startMs: number;
  ttftMs: number;
  totalMs: number;
  completionTokens: number;
  /** ms between consecutive chunks after the first text (the inter-token latency). */
  gapsMs: number[];
};

/**
 * `fetch`, sent once more when a pooled keep-alive connection turns out to be closed before any
 * response ("connection closed before message completed"): the request never reached a handler,
 * so the retry is what any HTTP client does. llama-server's HTTP library closes idle keep-alive
 * connections, which killed two --peer runs at a round boundary.
 */
async function fetchFresh(url: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    const cause = String((e as Error & { cause?: unknown }).cause ?? "");
    if (!/connection closed before message completed/.test(cause)) throw e;
    return await fetch(url, init);
  }
}

/**
 * One streaming `/v1/completions` request, timed at the client. The first token is the first
 * chunk carrying text: both servers hold back a token that ends inside a UTF-8 sequence, so an
 * empty chunk would not be a token the user could see.
 */
export async function streamCompletion(
  url: string,
  prompt: number[],
  maxTokens: number,
  extra: Record<string, unknown> = {},
) {
  const t0 = performance.now();
  const r = await fetchFresh(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      prompt,
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
      ...extra,
    }),
  });
  if (!r.ok || !r.body) {
    throw new Error(`POST ${url}/v1/completions: ${r.status} ${await r.text()}`);
  }
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let tFirst = 0;
  let tLast = 0;
  const gapsMs: number[] = [];
  let completionTokens = -1;
  let buf = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const msg = buf.slice(0, i).trim();
      buf = buf.slice(i + 2);
      if (!msg.startsWith("data: {")) continue;
      if (tFirst && !msg.includes('"usage"')) {
        const now = performance.now();
        gapsMs.push(now - tLast);
        tLast = now;
      }
      // The client shares the 2 cores with the server it measures: parse only the chunks that
      // matter (up to the first text, the usage, an error). Escaped text cannot match `"usage"`.
      if (tFirst && !msg.includes('"usage"') && !msg.includes('"error"')) continue;
      const body = JSON.parse(msg.slice(6));
      if (body.error) throw new Error(`${url}: ${JSON.stringify(body.error)}`);
      if (body.usage) completionTokens = body.usage.completion_tokens;
      if (!tFirst && body.choices?.[0]?.text) tFirst = tLast = performance.now();
    }
  }
  const tEnd = performance.now();
  if (completionTokens < 0) throw new Error(`${url}: the stream ended without a usage chunk`);
  return {
    startMs: t0,
    ttftMs: (tFirst || tEnd) - t0,
    totalMs: tEnd - t0,
    completionTokens,
    gapsMs,
  } satisfies Completion;
}

type Phase = {
  concurrency: number;
  requests: number;
  completionTokens: number;
  wallMs: number;
  /** Total completion tokens / wall time of the phase. */
  genTps: number;
  ttftP50Ms: number;
  ttftP95Ms: number;
  ttftMs: number[];
  /**
   * Streaming rate of a request once its first token is out: Σ(tokens − 1) / Σ(time after the
   * first token). Unlike `genTps` it does not depend on how long outputs are (constrained
   * outputs end where their JSON does, and two servers' grammars close it at different lengths).
   */
  streamTps: number;
  /** Inter-token latency over every gap between chunks of every request. */
  itlP50Ms: number;
  itlP99Ms: number;
  /** Hearth only: where the scheduler loop's time went, per generated token. */
  loop?: LoopBreakdown;
  /** CPU per generated token (ms) of the server's threads and of this client (Linux only). */
  cpu?: PhaseCpu;
};

type PhaseCpu = {
  /** The `--threads` busiest server threads: ggml's. */
  compute: number;
  /** Every other server thread: HTTP, event loop, GC. */
  serving: number;
  /** The benchmark's JavaScript thread: the client's share of the same cores. */
  client: number;
  /** Server threads by CPU over the phase (ms, not per token). */
  threads: { name: string; ms: number }[];
};

/** A server process to watch during a phase, and how many ggml threads it runs. */
type Watch = { pid: number; threads: number };

/** `c` clients, each issuing `perClient` requests back to back; fresh prompts throughout. */
async function drive(
  url: string,
  c: number,
  perClient: number,
  a: Args,
  variants: { next: number },
  extra: Record<string, unknown> = {},
  watch?: Watch,
): Promise<Phase> {
  const done: Completion[] = [];
  const threads0 = watch && threadTimes(watch.pid);
  const client0 = clientCpuMs();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (let k = 0; k < perClient; k++) {
        const prompt = promptIds(a.promptTokens, variants.next++);
        done.push(await streamCompletion(url, prompt, a.genTokens, extra));
      }
    }),
  );
  const wallMs = performance.now() - t0;
  const split = watch && cpuSplit(threads0, threadTimes(watch.pid), watch.threads);
  const client1 = clientCpuMs();
  const completionTokens = done.reduce((s, d) => s + d.completionTokens, 0);
  const expected = c * perClient * a.genTokens;
  if (completionTokens !== expected && !extra.structured_outputs && !extra.json_schema) {
    console.error(`bench: warning: ${completionTokens} completion tokens, expected ${expected}`);
  }
  const ttft = done.map((d) => d.ttftMs);
  const gaps = done.flatMap((d) => d.gapsMs);
  return {
    concurrency: c,
    requests: done.length,
    completionTokens,
    wallMs,
    genTps: completionTokens / (wallMs / 1000),
    ttftP50Ms: percentile(ttft, 50),
    ttftP95Ms: percentile(ttft, 95),
    ttftMs: ttft.map((x) => Math.round(x * 10) / 10),
    streamTps: done.reduce((n, d) => n + Math.max(0, d.completionTokens - 1), 0) /
      (done.reduce((t, d) => t + d.totalMs - d.ttftMs, 0) / 1000),
    itlP50Ms: gaps.length ? percentile(gaps, 50) : NaN,
    itlP99Ms: gaps.length ? percentile(gaps, 99) : NaN,
    cpu: split && client0 !== undefined && client1 !== undefined && completionTokens
      ? {
        compute: split.computeMs / completionTokens,
        serving: split.servingMs / completionTokens,
        client: (client1 - client0) / completionTokens,
        threads: split.threads,
      }
      : undefined,
  };
}

/**
 * Runs every concurrency against one server after a warm-up request; `extra` goes into every
 * request body. With `hearth`, each phase also gets the scheduler loop's time per token.
 */
async function sweep(
  url: string,
  a: Args,
  variants: { next: number },
  extra: Record<string, unknown> = {},
  hearth = false,
  watch?: Watch,
): Promise<Phase[]> {
  await streamCompletion(url, promptIds(a.promptTokens, variants.next++), 8, extra);
  const out: Phase[] = [];
  for (const c of a.concurrency) {
    const before = hearth ? await loopCounters(url) : undefined;
    const p = await drive(url, c, a.requests, a, variants, extra, watch);
    if (before) p.loop = perToken(before, await loopCounters(url));
    console.error(
      `bench:   c=${c}: ${p.genTps.toFixed(1)} tok/s, TTFT p50 ${p.ttftP50Ms.toFixed(0)} ms, ` +
        `ITL p50/p99 ${f1(p.itlP50Ms)}/${f1(p.itlP99Ms)} ms ` +
        `(${p.requests} requests, ${(p.wallMs / 1000).toFixed(1)} s)`,
    );
    out.push(p);
  }
  return out;
}

/** A server in the paired rounds; its log's tail is printed if a phase against it fails. */
type PairedServer = { url: string; watch: Watch; stderr: () => string };

/** One concurrency measured in rounds: both servers and the library loop, taking turns. */
type PairedRounds = {
  hearth: Phase[];
  peer: Phase[];
  library: LibLimit[];
  /** Hearth / llama-server tok/s, per round. */
  ratios: number[];
  /** Hearth / library tok/s (prefill included), per round. */
  libraryRatios: number[];
};

type Turn = "hearth" | "peer" | "library";
const TURNS: Turn[][] = [
  ["hearth", "peer", "library"],
  ["peer", "library", "hearth"],
  ["library", "hearth", "peer"],
];

/**
 * The host's speed drifts by ±10% over minutes (other tenants, clocks), more than the differences
 * measured here; the two servers and the library loop run back to back in rotating order (HPL,
 * PLH, LHP, ...) so all three see the same drift, and each round gives paired ratios. Both
 * servers stay up; an idle one waits on a condition variable and takes no CPU. A concurrency
 * gets at least `--rounds` rounds and more, up to five times as many, until its rounds took
 * `--round-seconds`: a c=1 phase lasts seconds, and a few short rounds are at the mercy of one
 * slow moment.
 */
async function sweepPaired(
  hearth: PairedServer,
  peer: PairedServer,
  library: (c: number) => Promise<LibLimit>,
  a: Args,
  variants: { next: number },
  extra: Record<string, unknown> = {},
): Promise<PairedRounds[]> {
  for (const { url } of [hearth, peer]) {
    await streamCompletion(url, promptIds(a.promptTokens, variants.next++), 8, extra);
  }
  const out: PairedRounds[] = [];
  for (const c of a.concurrency) {
    const r: PairedRounds = { hearth: [], peer: [], library: [], ratios: [], libraryRatios: [] };
    const t0 = performance.now();
    for (let round = 0;; round++) {
      const spent = (performance.now() - t0) / 1000;
      if (round >= a.rounds && (spent >= a.roundSeconds || round >= 5 * a.rounds)) break;
      for (const who of TURNS[round % TURNS.length]) {
        if (who === "library") {
          r.library.push(await library(c));
          continue;
        }
        const { url, watch, stderr } = who === "hearth" ? hearth : peer;
        const before = who === "hearth" ? await loopCounters(url) : undefined;
        const p = await drive(url, c, a.requests, a, variants, extra, watch).catch((e) => {
          const name = who === "hearth" ? "Hearth" : "llama-server";
          console.error(
            `bench: ${name} failed at c=${c}, round ${round + 1}: ${(e as Error).message}\n` +
              `bench: ${name}'s log ends:\n${stderr().slice(-4000)}`,
          );
          throw e;
        });
        if (before) p.loop = perToken(before, await loopCounters(url));
        r[who].push(p);
      }
      const h = r.hearth[round].genTps;
      r.ratios.push(h / r.peer[round].genTps);
      r.libraryRatios.push(h / r.library[round].withPrefillTps);
      console.error(
        `bench:   c=${c} round ${round + 1}: Hearth ${h.toFixed(1)}, llama-server ${
          r.peer[round].genTps.toFixed(1)
        }, library ${r.library[round].withPrefillTps.toFixed(1)} tok/s; ratios ${
          r.ratios[round].toFixed(3)
        } / ${r.libraryRatios[round].toFixed(3)}`,
      );
    }
    out.push(r);
  }
  return out;
}

/** Each CPU figure's median over the phases that have one. */
function cpuMedian(ps: Phase[]): Omit<PhaseCpu, "threads"> | undefined {
  const cs = ps.flatMap((p) => (p.cpu ? [p.cpu] : []));
  if (!cs.length) return undefined;
  return {
    compute: middle(cs.map((c) => c.compute)),
    serving: middle(cs.map((c) => c.serving)),
    client: middle(cs.map((c) => c.client)),
  };
}

/** The median; the mean of the two middle values for an even count. */
function middle(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const h = Math.floor(s.length / 2);
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

/** The library run with the median tok/s, prefill included (the lower middle one if even). */
function medianLibrary(ls: LibLimit[]): LibLimit {
  const sorted = [...ls].sort((x, y) => x.withPrefillTps - y.withPrefillTps);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

/** The phase with the median tok/s (the lower middle one for an even count). */
function medianPhase(ps: Phase[]): Phase {
  const sorted = [...ps].sort((x, y) => x.genTps - y.genTps);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

// ---------------------------------------------------------------- the server

/** Single sequence through `POST /v1/completions` with streaming, timed at the client. */
async function singleServer(url: string, a: Args): Promise<Speeds> {
  const prompt: number[] = [];
  const gen: number[] = [];
  for (let run = 0; run <= a.runs; run++) {
    // A fresh prompt every run: the server keeps finished sequences' KV for prefix reuse, and a
    // repeated prompt would skip the very prefill being timed.
    const r = await streamCompletion(url, promptIds(a.promptTokens, 10_000 + run), a.genTokens + 1);
    if (run === 0) continue;
    // Time to first token covers the prompt; every later token is one decode step.
    prompt.push(a.promptTokens / (r.ttftMs / 1000));
    gen.push((r.completionTokens - 1) / ((r.totalMs - r.ttftMs) / 1000));
  }
  return { promptTps: median(prompt), genTps: median(gen) };
}

function hearthArgs(path: string, maxBatch: number, maxSeqLen: number, threads: number) {
  return [
    "--model",
    path,
    "--max-batch",
    String(maxBatch),
    "--max-seq-len",
    String(maxSeqLen),
    "--threads",
    String(threads),
  ];
}

// ---------------------------------------------------------------- report

const f1 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? "-" : x.toFixed(1));
const f3 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? "-" : x.toFixed(3));
const f0 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? "-" : x.toFixed(0));

function table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((s, i) => (i === 0 ? s.padEnd(w[i]) : s.padStart(w[i])));
  return [
    line(head).join(" | "),
    w.map((n) => "-".repeat(n)).join("-|-"),
    ...rows.map((r) => line(r).join(" | ")),
  ].join("\n");
}

type ConcurrencyRow = {
  concurrency: number;
  server: Phase;
  library: LibLimit;
  /** server / library decode steps only (prefill left out: not like for like). */
  ratio: number;
  /**
   * server / library with prefill, the like-for-like limit: the median of the rounds' paired
   * ratios with --peer.
   */
  ratioWithPrefill: number;
  peer?: Phase;
  /** server / llama-server generated tok/s: the median of the rounds' paired ratios. */
  ratioToPeer?: number;
  /** Every round of both servers, when measured with --peer. */
  rounds?: PairedRounds;
};

/** The other suites run as their own scripts, each measuring in a clean process. */
const SUITES: Record<string, string> = {
  events: "./events.ts",
  video: "./video.ts",
  tools: "./tool_schemas.ts",
};
/**
 * Suites named by a flag (`deno task bench --agent-trace FILE`, DESIGN 4d), given all the
 * arguments: agent-trace replays and the prompt cache's restore times.
 */
const FLAG_SUITES: Record<string, string> = {
  "--agent-trace": "./agent_trace.ts",
  "--cache-restore": "./cache_restore.ts",
};
const flagSuite = Object.keys(FLAG_SUITES).find((f) =>
  Deno.args.some((a) => a === f || a.startsWith(`${f}=`))
);
const suite = SUITES[Deno.args[0]]
  ? { script: SUITES[Deno.args[0]], args: Deno.args.slice(1) }
  : flagSuite
  ? { script: FLAG_SUITES[flagSuite], args: Deno.args }
  : undefined;

if (import.meta.main && suite) {
  const script = new URL(suite.script, import.meta.url).pathname;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, ...suite.args],
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  Deno.exit((await child.status).code);
}

if (import.meta.main) {
  const a = parseArgs(Deno.args);
  const threads = navigator.hardwareConcurrency;
  const loads = [snapshot("start")];
  if (loads[0].load1 > 0.5) {
    console.error(
      `bench: warning: load average ${loads[0].load1} at start; on ${threads} cores other ` +
        `processes distort every figure (see \`uptime\`)`,
    );
  }
  // Build the peer first, so a failure costs nothing and its compile does not overlap a figure.
  let peerBuild: PeerBuild | undefined;
  if (a.peer) {
    try {
      peerBuild = a.peerBin
        ? { bin: a.peerBin, version: await peerVersion(a.peerBin), buildSeconds: 0, cached: true }
        : await buildLlamaServer();
    } catch (e) {
      console.error(`bench: --peer: cannot use llama-server: ${(e as Error).message}`);
      Deno.exit(1);
    }
    console.error(`bench: peer ${peerBuild.bin} (${peerBuild.version})`);
  }
  const date = new Date().toISOString();
  const base = { date, threads, cpu: cpuModel(), args: a };
  // The small preset's greedy row is the main run, with the sections beside it.
  const main = a.presets.includes("small") && a.modes.includes("greedy")
    ? await mainRun(a, threads, loads, peerBuild)
    : { loadavg: withSteal([...loads, snapshot("end")]) };
  const presetRows = peerBuild ? await presetModeRows(a, threads, peerBuild) : [];
  const result = { ...base, ...main, presetRows: presetRows.length ? presetRows : undefined };
  const dir = new URL("./results/", import.meta.url).pathname;
  await Deno.mkdir(dir, { recursive: true });
  const file = a.jsonOut ?? `${dir}bench-${date.replace(/[:.]/g, "-")}.json`;
  await Deno.writeTextFile(file, JSON.stringify(result, null, 2) + "\n");
  console.log(`\nwrote ${file}`);
}

/**
 * The main run on the small preset (or --model), greedy: the single-sequence section, the
 * concurrency sweep (paired with llama-server and the library loop with --peer), the constrained
 * and speculative rows; prints their tables and returns what goes into the JSON.
 */
async function mainRun(
  a: Args,
  threads: number,
  loads: Snapshot[],
  peerBuild: PeerBuild | undefined,
) {
  const path = a.model ?? await benchModel();
  console.error(
    `bench: model ${path}, ${threads} threads, load ${loads[0].load1}; ` +
      `concurrency ${a.concurrency.join(",")} × ${a.requests} requests, ` +
      `${a.promptTokens}+${a.genTokens} tokens, max-batch ${a.maxBatch}, ` +
      `max-seq-len ${a.maxSeqLen}`,
  );

  const llama = openLlama();
  const lib: Lib = {
    llama,
    model: await loadModel(llama, path, {}),
    threads,
    pool: createThreadpool(llama, { threads, poll: 50 }),
  };
  let single: { library: Speeds; server: Speeds } | undefined;
  const limits: LibLimit[] = [];
  // The library's model and context stay loaded until the concurrency section is done (a failure
  // on the way exits the process, which frees them).
  if (a.single) {
    loads.push(snapshot("single"));
    console.error("bench: single sequence, library...");
    const libSingle = await singleLibrary(lib, a);
    console.error("bench: single sequence, server...");
    const srv = await startServer(hearthArgs(path, 4, 1024, threads), { timeoutMs: 300_000 });
    try {
      single = { library: libSingle, server: await singleServer(srv.url, a) };
    } finally {
      await srv.stop();
    }
  }
  // With --peer the library loop takes its turns in the paired rounds; without, it runs here.
  const libCtx = contextFor(lib, a.maxSeqLen * a.maxBatch, a.maxBatch);
  await libraryLimit(lib, libCtx, 1, { ...a, libRuns: 1, genTokens: 8 }); // warm-up
  if (!peerBuild) {
    loads.push(snapshot("library"));
    console.error("bench: concurrency, library limit...");
    for (const c of a.concurrency) {
      const l = await libraryLimit(lib, libCtx, c, a);
      console.error(`bench:   c=${c}: ${l.genTps.toFixed(1)} tok/s`);
      limits.push(l);
    }
  }

  let speculative: SpeculativeRow[] = [];
  if (a.speculative) {
    loads.push(snapshot("speculative"));
    console.error("bench: speculative decoding (in-process, 4 drafts)...");
    speculative = await speculativeRows(path, { draftTokens: 4, genTokens: a.genTokens, threads });
  }

  // Prompt variants are unique across the whole run, so no request can hit a cached prefix.
  const variants = { next: 1_000 };
  loads.push(snapshot("server"));
  const srv = await startServer([
    ...hearthArgs(path, a.maxBatch, a.maxSeqLen, threads),
    ...a.serverArgs,
  ], {
    timeoutMs: 300_000,
  });
  let server: Phase[];
  let hearthJson: Phase[] = [];
  let peer: Phase[] | undefined;
  let paired: PairedRounds[] | undefined;
  const peerJson: Phase[] = [];
  let peerJsonError: string | undefined;
  try {
    if (peerBuild) {
      loads.push(snapshot("paired"));
      console.error(
        `bench: concurrency, Hearth, llama-server and the library loop in rounds (at least ` +
          `${a.rounds} and ${a.roundSeconds} s each)...`,
      );
      const p = await startLlamaServer(peerBuild.bin, path, {
        ctx: a.maxSeqLen * a.maxBatch,
        parallel: a.maxBatch,
        threads,
      });
      console.error(`bench: Hearth at ${srv.url}, llama-server at ${p.url}`);
      try {
        const library = (c: number) => libraryLimit(lib, libCtx, c, { ...a, libRuns: 1 });
        paired = await sweepPaired(
          { url: srv.url, watch: { pid: srv.child.pid, threads }, stderr: srv.stderr },
          { url: p.url, watch: { pid: p.child.pid, threads }, stderr: p.stderr },
          library,
          a,
          variants,
        );
        server = paired.map((r) => medianPhase(r.hearth));
        peer = paired.map((r) => medianPhase(r.peer));
        limits.push(...paired.map((r) => medianLibrary(r.library)));
        if (a.constrained) {
          console.error("bench: JSON-schema constrained, server...");
          hearthJson = await sweep(srv.url, a, variants, JSON_HEARTH);
          loads.push(snapshot("peer"));
          console.error("bench: JSON-schema constrained, llama-server...");
          // llama-server has been seen to die in this phase at concurrency 32 (the connection
          // closes mid-request); the run keeps the phases it finished and says so.
          try {
            for (const c of a.concurrency) {
              peerJson.push(await drive(p.url, c, a.requests, a, variants, JSON_PEER));
              const q = peerJson[peerJson.length - 1];
              console.error(
                `bench:   c=${c}: ${q.genTps.toFixed(1)} tok/s, TTFT p50 ${
                  q.ttftP50Ms.toFixed(0)
                } ms, ` +
                  `ITL p50/p99 ${f1(q.itlP50Ms)}/${f1(q.itlP99Ms)} ms`,
              );
            }
          } catch (e) {
            peerJsonError = (e as Error).message.split("\n")[0];
            console.error(`bench: llama-server failed in the constrained phase: ${peerJsonError}`);
          }
        }
      } finally {
        await p.stop();
      }
    } else {
      console.error("bench: concurrency, server...");
      server = await sweep(srv.url, a, variants, {}, true, { pid: srv.child.pid, threads });
      if (a.constrained) {
        console.error("bench: JSON-schema constrained, server...");
        hearthJson = await sweep(srv.url, a, variants, JSON_HEARTH);
      }
    }
  } finally {
    await srv.stop();
    freeContext(llama, libCtx);
    freeModel(llama, lib.model);
    lib.pool?.free();
  }
  const constrained: ConstrainedRow[] = hearthJson.map((json, i) => ({
    concurrency: json.concurrency,
    json,
    ratio: json.genTps / server[i].genTps,
    peer: peerJson[i],
    ratioToPeer: peerJson[i] ? json.streamTps / peerJson[i].streamTps : undefined,
  }));
  loads.push(snapshot("end"));

  if (single) {
    console.log("\nsingle sequence");
    console.log(table(["", "library", "server", "ratio"], [
      [
        "prompt processing tok/s",
        f1(single.library.promptTps),
        f1(single.server.promptTps),
        f3(single.server.promptTps / single.library.promptTps),
      ],
      [
        "generation tok/s",
        f1(single.library.genTps),
        f1(single.server.genTps),
        f3(single.server.genTps / single.library.genTps),
      ],
    ]));
  }
  const rows: ConcurrencyRow[] = a.concurrency.map((c, i) => ({
    concurrency: c,
    server: server[i],
    library: limits[i],
    ratio: server[i].genTps / limits[i].genTps,
    ratioWithPrefill: paired
      ? middle(paired[i].libraryRatios)
      : server[i].genTps / limits[i].withPrefillTps,
    peer: peer?.[i],
    // Paired rounds: the median of the rounds' own ratios, so drift between rounds cancels.
    ratioToPeer: paired ? middle(paired[i].ratios) : undefined,
    rounds: paired?.[i],
  }));
  const head = [
    "concurrency",
    "server tok/s",
    "library tok/s",
    "ratio",
    "TTFT p50/p95",
    "ITL p50/p99",
  ];
  if (peer) head.push("llama-server tok/s", "TTFT p50/p95", "ITL p50/p99", "vs llama-server");
  console.log(
    `\nconcurrency (${a.requests} requests per client, ${a.promptTokens}+${a.genTokens} tokens; ` +
      `TTFT and inter-token latency (ITL) in ms; library = the same prompts and steps in a ` +
      `plain FFI loop, prefill and sampling included)`,
  );
  console.log(table(
    head,
    rows.map((r) => [
      String(r.concurrency),
      f1(r.server.genTps),
      f1(r.library.withPrefillTps),
      f3(r.ratioWithPrefill),
      `${f0(r.server.ttftP50Ms)}/${f0(r.server.ttftP95Ms)}`,
      `${f1(r.server.itlP50Ms)}/${f1(r.server.itlP99Ms)}`,
      ...(peer
        ? [
          f1(r.peer?.genTps),
          `${f0(r.peer?.ttftP50Ms)}/${f0(r.peer?.ttftP95Ms)}`,
          `${f1(r.peer?.itlP50Ms)}/${f1(r.peer?.itlP99Ms)}`,
          f3(r.ratioToPeer),
        ]
        : []),
    ]),
  ));
  if (paired) {
    const list = (f: (r: PairedRounds) => number[]) =>
      rows.map((r) => `c=${r.concurrency} ${f(r.rounds!).map(f3).join("/")}`).join("; ");
    console.log(
      `ratio and vs llama-server: medians of paired rounds (Hearth, llama-server and the ` +
        `library loop back to back, in rotating order); tok/s and latencies are each one's ` +
        `median round.\n  vs llama-server by round: ${list((r) => r.ratios)}\n  ` +
        `vs library by round: ${list((r) => r.libraryRatios)}`,
    );
  }
  console.log(
    `library decode steps only tok/s (prefill left out, not like for like): ${
      rows.map((r) => `c=${r.concurrency} ${f1(r.library.genTps)} (server ${f3(r.ratio)})`)
        .join(", ")
    }`,
  );
  const machine = withSteal(loads);
  const fmtLoad = (l: Snapshot) =>
    `${l.at} ${l.load1.toFixed(2)}${l.stealPct === undefined ? "" : ` (${f1(l.stealPct)}%)`}`;
  console.log(
    `load average (1 min) at the start of each section (CPU steal during it): ` +
      machine.map(fmtLoad).join(", "),
  );
  if (machine.some((m) => (m.stealPct ?? 0) > 5)) {
    console.log("warning: other tenants of the host took CPU time during the run (steal > 5%)");
  }

  if (constrained.length) {
    console.log(
      "\nstructured outputs (JSON Schema; Hearth `structured_outputs.json`, llama-server " +
        "`json_schema`; json tok/s = tokens / wall time, stream tok/s = per request after its " +
        "first token; vs llama-server compares stream tok/s, since the two grammars close the " +
        "JSON at different lengths; ITL in ms)",
    );
    const cHead = [
      "concurrency",
      "tokens",
      "json tok/s",
      "stream tok/s",
      "vs unconstrained",
      "ITL p50/p99",
    ];
    if (peer) {
      cHead.push(
        "llama-server tokens",
        "json tok/s",
        "stream tok/s",
        "ITL p50/p99",
        "vs llama-server",
      );
    }
    console.log(table(
      cHead,
      constrained.map((r) => [
        String(r.concurrency),
        String(r.json.completionTokens),
        f1(r.json.genTps),
        f1(r.json.streamTps),
        f3(r.ratio),
        `${f1(r.json.itlP50Ms)}/${f1(r.json.itlP99Ms)}`,
        ...(peer
          ? [
            String(r.peer?.completionTokens ?? "-"),
            f1(r.peer?.genTps),
            f1(r.peer?.streamTps),
            `${f1(r.peer?.itlP50Ms)}/${f1(r.peer?.itlP99Ms)}`,
            f3(r.ratioToPeer),
          ]
          : []),
      ]),
    ));
  }
  if (speculative.length) {
    console.log(
      "\nspeculative decoding (in-process engine, greedy, 4 drafts per step; same tokens as " +
        "without drafts, checked)",
    );
    console.log(table(
      [
        "text",
        "concurrency",
        "--mtp 0 tok/s",
        "--mtp 4 tok/s",
        "speed-up",
        "acceptance",
        "steps saved",
      ],
      speculative.map((r) => [
        `${r.text} (${r.model})`,
        String(r.concurrency),
        f1(r.baseTps),
        f1(r.specTps),
        f3(r.speedup),
        `${r.accepted}/${r.drafted} ${f3(r.acceptance)}`,
        `${f3(r.stepRatio)}x`,
      ]),
    ));
  }
  console.log("\nHearth scheduler loop per generated token (ms; from /metrics, prefill included)");
  console.log(table(
    ["concurrency", "decode", "sample", "io turn", "other", "client-side ms/token"],
    rows.map((r) => {
      const l = r.server.loop;
      return [
        String(r.concurrency),
        f3(l?.decode),
        f3(l?.sample),
        f3(l?.io),
        f3(l?.other),
        f3(r.server.wallMs / r.server.completionTokens),
      ];
    }),
  ));

  const cpuRows = rows.map((r) => ({
    c: r.concurrency,
    hearth: cpuMedian(r.rounds?.hearth ?? [r.server]),
    peer: cpuMedian(r.rounds?.peer ?? (r.peer ? [r.peer] : [])),
  }));
  if (cpuRows.some((r) => r.hearth)) {
    console.log(
      "\nCPU per generated token (ms; /proc schedstat, median over the rounds): ggml's " +
        `${threads} threads, the server's other threads, and this benchmark client`,
    );
    const cpuHead = ["concurrency", "Hearth ggml", "Hearth serving", "client"];
    if (peer) cpuHead.push("llama-server ggml", "llama-server serving", "client");
    console.log(table(
      cpuHead,
      cpuRows.map((r) => [
        String(r.c),
        f3(r.hearth?.compute),
        f3(r.hearth?.serving),
        f3(r.hearth?.client),
        ...(peer ? [f3(r.peer?.compute), f3(r.peer?.serving), f3(r.peer?.client)] : []),
      ]),
    ));
  }

  return {
    constrained: constrained.length ? { schema: BENCH_SCHEMA, rows: constrained } : undefined,
    speculative: speculative.length ? speculative : undefined,
    peerConstrainedError: peerJsonError,
    model: path,
    loadavg: machine,
    single: single && {
      ...single,
      ratio: {
        prompt: single.server.promptTps / single.library.promptTps,
        gen: single.server.genTps / single.library.genTps,
      },
    },
    concurrency: rows,
    peer: peerBuild && {
      bin: peerBuild.bin,
      version: peerBuild.version,
      args: peerArgs(path, a.maxSeqLen * a.maxBatch, a.maxBatch, threads, 0).slice(0, -2),
    },
  };
}

/** The paired rows of one preset and sampling mode beyond the main run. */
type PresetModeRows = {
  preset: string;
  mode: string;
  label: string;
  model: string;
  /** What these rows ran with (the --extra-* flags). */
  requests: number;
  rounds: number;
  roundSeconds: number;
  rows: ConcurrencyRow[];
  loadavg: Snapshot[];
};

/**
 * Every preset × mode of `--presets` and `--modes` but the main run's (small, greedy): Hearth,
 * llama-server and the library loop (sampling with Hearth's chain for the mode) in paired rounds,
 * fewer and shorter than the main run's (`--extra-*`), one table each.
 */
async function presetModeRows(
  a: Args,
  threads: number,
  peerBuild: PeerBuild,
): Promise<PresetModeRows[]> {
  const out: PresetModeRows[] = [];
  const ax = {
    ...a,
    rounds: a.extraRounds,
    roundSeconds: a.extraRoundSeconds,
    requests: a.extraRequests,
  };
  // Past the main run's prompt variants, so no request finds a cached prefix.
  const variants = { next: 12_000 };
  for (const preset of a.presets) {
    const modes = a.modes.filter((m) => !(preset === "small" && m === "greedy"));
    if (!modes.length) continue;
    const path = preset === "small" && a.model ? a.model : await BENCH_PRESETS[preset]();
    const llama = openLlama();
    const lib: Lib = {
      llama,
      model: await loadModel(llama, path, {}),
      threads,
      pool: createThreadpool(llama, { threads, poll: 50 }),
    };
    const libCtx = contextFor(lib, a.maxSeqLen * a.maxBatch, a.maxBatch);
    const srv = await startServer([
      ...hearthArgs(path, a.maxBatch, a.maxSeqLen, threads),
      ...a.serverArgs,
    ], { timeoutMs: 300_000 });
    const p = await startLlamaServer(peerBuild.bin, path, {
      ctx: a.maxSeqLen * a.maxBatch,
      parallel: a.maxBatch,
      threads,
    });
    try {
      await libraryLimit(lib, libCtx, 1, { ...a, libRuns: 1, genTokens: 8 }); // warm-up
      for (const mode of modes) {
        const loads = [snapshot(`${preset} ${mode}`)];
        console.error(
          `bench: ${preset} preset, ${MODES[mode].label}: Hearth, llama-server and the library ` +
            `loop in rounds (at least ${ax.rounds} and ${ax.roundSeconds} s each)...`,
        );
        const paired = await sweepPaired(
          { url: srv.url, watch: { pid: srv.child.pid, threads }, stderr: srv.stderr },
          { url: p.url, watch: { pid: p.child.pid, threads }, stderr: p.stderr },
          (c) => libraryLimit(lib, libCtx, c, { ...ax, libRuns: 1 }, mode),
          ax,
          variants,
          MODES[mode].body,
        );
        loads.push(snapshot("end"));
        const rows = paired.map((r, i): ConcurrencyRow => {
          const server = medianPhase(r.hearth);
          const library = medianLibrary(r.library);
          return {
            concurrency: a.concurrency[i],
            server,
            library,
            ratio: server.genTps / library.genTps,
            ratioWithPrefill: middle(r.libraryRatios),
            peer: medianPhase(r.peer),
            ratioToPeer: middle(r.ratios),
            rounds: r,
          };
        });
        const row: PresetModeRows = {
          preset,
          mode,
          label: MODES[mode].label,
          model: path,
          requests: ax.requests,
          rounds: ax.rounds,
          roundSeconds: ax.roundSeconds,
          rows,
          loadavg: withSteal(loads),
        };
        printPresetMode(row);
        out.push(row);
      }
    } finally {
      await p.stop();
      await srv.stop();
      freeContext(llama, libCtx);
      freeModel(llama, lib.model);
      lib.pool?.free();
    }
  }
  return out;
}

/**
 * One preset × mode: tok/s and the paired ratios, then where each server's CPU went per token
 * (ggml's threads, the serving threads) and Hearth's sampling share of its loop, so a loss shows
 * its cause.
 */
function printPresetMode(r: PresetModeRows): void {
  const med = (xs: (number | undefined)[]) => {
    const ys = xs.filter((x): x is number => x !== undefined && !Number.isNaN(x));
    return ys.length ? middle(ys) : undefined;
  };
  const load = r.loadavg.map((l) => l.load1.toFixed(2)).join("→");
  console.log(
    `\n${r.preset} preset, ${r.label} (${r.requests} request(s) per client, ` +
      `${r.rows[0]?.rounds?.ratios.length ?? 0}+ paired rounds; load ${load}; CPU in ms per ` +
      `generated token, medians over the rounds; Hearth sample = its scheduler loop's sampling)`,
  );
  console.log(table(
    [
      "c",
      "Hearth tok/s",
      "llama-server tok/s",
      "vs llama-server",
      "library tok/s",
      "vs library",
      "Hearth ggml/serving",
      "Hearth sample",
      "llama-server ggml/serving",
    ],
    r.rows.map((x) => {
      const h = cpuMedian(x.rounds?.hearth ?? []);
      const q = cpuMedian(x.rounds?.peer ?? []);
      return [
        String(x.concurrency),
        f1(x.server.genTps),
        f1(x.peer?.genTps),
        f3(x.ratioToPeer),
        f1(x.library.withPrefillTps),
        f3(x.ratioWithPrefill),
        `${f3(h?.compute)}/${f3(h?.serving)}`,
        f3(med((x.rounds?.hearth ?? []).map((p) => p.loop?.sample))),
        `${f3(q?.compute)}/${f3(q?.serving)}`,
      ];
    }),
  ));
  console.log(
    `  vs llama-server by round: ${
      r.rows.map((x) => `c=${x.concurrency} ${(x.rounds?.ratios ?? []).map(f3).join("/")}`)
        .join("; ")
    }`,
  );
}

function cpuModel(): string | undefined {
  try {
    return Deno.readTextFileSync("/proc/cpuinfo").match(/^model name\s*:\s*(.*)$/m)?.[1];
  } catch {
    return undefined;
  }
}
