/**
 * `--max-seq-len auto` and `--max-batch auto`: the context per sequence and the sequence count
 * that fit the free memory of the devices the model sits on, so that `serve` never fails to load
 * on its defaults, and the refusal, with the memory it would need, of an explicit value that
 * cannot fit (README, "Flags of `serve`"). The start-up log and `/props` (`fit`) say what was
 * chosen and why.
 *
 * The memory of a context, as llama.cpp allocates it with flash attention (its `auto` turns it on
 * for the CPU and CUDA backends), measured on the tiny and small presets (`llama_kv_cache` and
 * `sched_reserve` log lines, 4k..4M cells):
 * - the KV cache: cells x layers x (K + V width) x the KV type's bytes per element;
 * - an output row of logits per sequence (n_vocab x 4 bytes);
 * - the compute buffer: the logits of one ubatch (n_vocab x n_ubatch x 4, 250.5 MiB for the
 *   Llama-3 vocabulary) or the f16 attention mask (n_kv x n_ubatch x 2, where n_kv is one
 *   sequence's cells, or all of them in a unified cache), whichever is larger, plus activations.
 *   Both are counted (an upper bound), with activations bounded by n_ubatch x (4 n_embd + 2 n_ff)
 *   floats (measured: under 7 MiB for `small`, where the bound says 11).
 *
 * The budget (`budgetFor`): on a GPU or RPC device the free memory after the weights are placed;
 * on a CPU host `/proc/meminfo` MemAvailable read before the load less the weights (mmapped, so
 * their pages must stay resident). Headroom: 10% of that or 1 GiB, whichever is larger, as
 * vLLM's `--gpu-memory-utilization 0.9` leaves; it covers the MTP draft context, CUDA graphs and
 * what this estimate leaves out. An explicit value may use all the rest. `auto` on a CPU host
 * takes half of it: the cache shares RAM with every other program and the page cache the
 * weights live in, and a server that pushes its host into swap serves nobody.
 *
 * The `auto` policy: agents need long contexts more than many sequences. The model's full context
 * for 32 sequences; else the full context for as many as fit, down to 8; else 8 sequences with the
 * context shrunk, down to 32768 tokens; else fewer sequences of at least 32768 tokens (the batch
 * goes before the context does); else one sequence of whatever fits, at least 256 tokens.
 * Contexts are multiples of 256 tokens (llama.cpp pads its cache to 256 cells) unless the
 * model's own.
 *
 * @example
 * ```ts
 * import { fitContext, GIB } from "./fit.ts";
 * // Llama-3.1-8B (128 KiB of f16 KV a token) in F16 on a 24 GiB GPU: 8 GiB free after the weights.
 * const r = fitContext({
 *   trainCtx: 131072,
 *   cost: { kvBytesPerToken: 131072, bytesPerSeq: 513024, maskBytesPerCell: 1024, fixedBytes: 3e8, unified: false },
 *   budget: { freeBytes: 8 * GIB, weightsBytes: 0, autoShare: 1, where: "CUDA0" },
 *   requested: { maxSeqLen: "auto", maxBatch: "auto" },
 * });
 * if ("error" in r) console.error(r.error);
 * else r.maxSeqLen; // 54528 tokens for 1 sequence: what 7 GiB holds beside 1 GiB headroom
 * ```
 * @module
 */
import type { DeviceInfo } from "../../ffi/devices.ts";

export const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/** `--max-batch auto` wants this many sequences. */
export const DEFAULT_BATCH = 32;
/** `auto` keeps at least this many sequences at the model's context before shrinking it. */
export const BATCH_FLOOR = 8;
/** `auto` keeps at least this much context per sequence (or the model's) before going below 8. */
export const CTX_FLOOR = 32768;
/** The least context `auto` settles for. */
export const MIN_CTX = 256;
const ROUND = 256;

/** What a context of `ctx` cells for `batch` sequences costs, in bytes (see the module doc). */
export type ContextCost = {
  /** K and V of every layer, for one cell. */
  kvBytesPerToken: number;
  /** The logits output row of one sequence. */
  bytesPerSeq: number;
  /** The attention mask's bytes per KV cell a ubatch attends to. */
  maskBytesPerCell: number;
  /** Logits of one ubatch and activations. */
  fixedBytes: number;
  /** A unified cache: the mask spans every sequence's cells (`--graph-batch`). */
  unified: boolean;
};

/** The memory the cache may use. */
export type Budget = {
  /** Free memory of the devices, as measured. */
  freeBytes: number;
  /** Weights that are still to come out of `freeBytes` (0 where they are already placed). */
  weightsBytes: number;
  /** The share of the usable memory `auto` takes (1 on an accelerator, 0.5 on a CPU host). */
  autoShare: number;
  /** The devices, for messages: `CPU (MemAvailable)`, `CUDA0`. */
  where: string;
};

export type FitRequest = { maxSeqLen: number | "auto"; maxBatch: number | "auto" };

export type FitInput = {
  /** The model's training context (`n_ctx_train`); 0 when the model does not say. */
  trainCtx: number;
  cost: ContextCost;
  budget: Budget;
  requested: FitRequest;
};

export type Fit = {
  maxSeqLen: number;
  maxBatch: number;
  /** What the chosen context costs. */
  bytes: number;
  /** What it was fitted into (usable memory, after the weights and the headroom). */
  usableBytes: number;
  freeBytes: number;
  why: string;
};

export type FitResult = Fit | { error: string };

/** Bytes of a context of `ctx` cells per sequence for `batch` sequences. */
export function contextBytes(c: ContextCost, ctx: number, batch: number): number {
  const cells = ctx * batch;
  return cells * c.kvBytesPerToken + batch * c.bytesPerSeq +
    c.maskBytesPerCell * (c.unified ? cells : ctx) + c.fixedBytes;
}

/** Headroom left free: 10% of what is there, or 1 GiB, whichever is larger. */
export function headroomBytes(freeAfterWeights: number): number {
  return Math.max(GIB, 0.1 * freeAfterWeights);
}

/** `12.3 GiB`, `512 MiB`. */
export function formatBytes(n: number): string {
  return n >= GIB ? `${(n / GIB).toFixed(1)} GiB` : `${Math.ceil(n / MIB)} MiB`;
}

const floorTo = (n: number, step: number) => Math.floor(n / step) * step;

/** The largest context (up to `cap`) for `batch` sequences within `bytes`; 0 when none. */
function maxCtx(c: ContextCost, batch: number, bytes: number, cap: number): number {
  const perCtx = batch * c.kvBytesPerToken + c.maskBytesPerCell * (c.unified ? batch : 1);
  const room = (bytes - c.fixedBytes - batch * c.bytesPerSeq) / perCtx;
  if (room >= cap) return cap;
  return room < 0 ? 0 : floorTo(room, ROUND);
}

/** The most sequences (up to `cap`) of `ctx` cells within `bytes`; 0 when none. */
function maxBatch(c: ContextCost, ctx: number, bytes: number, cap: number): number {
  const perSeq = ctx * c.kvBytesPerToken + c.bytesPerSeq +
    (c.unified ? ctx * c.maskBytesPerCell : 0);
  const room = bytes - c.fixedBytes - (c.unified ? 0 : ctx * c.maskBytesPerCell);
  return Math.max(0, Math.min(cap, Math.floor(room / perSeq)));
}

/**
 * The context and sequence count to create, or the one-line refusal of explicit values that do
 * not fit. Pure: the caller measures the budget and the cost (`budgetFor`, `contextCost`).
 */
export function fitContext(i: FitInput): FitResult {
  const { cost, budget } = i;
  const trainCtx = i.trainCtx > 0 ? i.trainCtx : Number.MAX_SAFE_INTEGER;
  const afterWeights = budget.freeBytes - budget.weightsBytes;
  const usable = Math.max(0, afterWeights - headroomBytes(afterWeights));
  const autoBytes = usable * budget.autoShare;
  const fitted = (maxSeqLen: number, maxBatch: number, why: string): Fit => ({
    maxSeqLen,
    maxBatch,
    bytes: Math.ceil(contextBytes(cost, maxSeqLen, maxBatch)),
    usableBytes: Math.floor(usable),
    freeBytes: budget.freeBytes,
    why,
  });
  const free =
    `${formatBytes(usable)} is usable on ${budget.where} (${formatBytes(budget.freeBytes)} free${
      budget.weightsBytes ? `, less ${formatBytes(budget.weightsBytes)} of weights` : ""
    }, ` +
    `less ${formatBytes(Math.max(0, afterWeights - usable))} headroom)`;
  const needs = (flags: string, ctx: number, batch: number) => ({
    error: `${flags} needs ${formatBytes(contextBytes(cost, ctx, batch))} for the KV cache and ` +
      `compute buffers (${ctx} tokens x ${batch} sequence${
        batch === 1 ? "" : "s"
      }), but only ${free}`,
  });
  const { maxSeqLen: seqReq, maxBatch: batchReq } = i.requested;
  // A context beyond the model's is held to the model's, as before `auto` existed.
  const ctxReq = seqReq === "auto" ? undefined : Math.min(seqReq, trainCtx);
  const share = budget.autoShare < 1 ? ` (auto takes ${budget.autoShare * 100}% of it)` : "";

  if (ctxReq !== undefined && batchReq !== "auto") {
    if (contextBytes(cost, ctxReq, batchReq) <= usable) {
      return fitted(ctxReq, batchReq, "--max-seq-len and --max-batch as given");
    }
    return needs(`--max-seq-len ${seqReq} x --max-batch ${batchReq}`, ctxReq, batchReq);
  }
  if (ctxReq !== undefined) {
    // The batch is auto: as many as fit in auto's share, else in all that is usable.
    const b = maxBatch(cost, ctxReq, autoBytes, DEFAULT_BATCH) ||
      maxBatch(cost, ctxReq, usable, 1);
    if (b === 0) return needs(`--max-seq-len ${seqReq}`, ctxReq, 1);
    return fitted(
      ctxReq,
      b,
      b === DEFAULT_BATCH
        ? `--max-seq-len as given, ${DEFAULT_BATCH} sequences fit`
        : `--max-seq-len as given: ${b} sequences fit in ${formatBytes(autoBytes)}${share}`,
    );
  }
  const least = Math.min(trainCtx, MIN_CTX);
  if (batchReq !== "auto") {
    let ctx = maxCtx(cost, batchReq, autoBytes, trainCtx);
    if (ctx < least) ctx = maxCtx(cost, batchReq, usable, trainCtx);
    if (ctx < least) return needs(`--max-batch ${batchReq}`, least, batchReq);
    return fitted(
      ctx,
      batchReq,
      ctx === trainCtx
        ? `the model's full context fits --max-batch ${batchReq}`
        : `context shrunk to fit --max-batch ${batchReq} in ${formatBytes(autoBytes)}${share}`,
    );
  }
  const full = `the model's ${trainCtx} tokens x ${DEFAULT_BATCH} would need ${
    formatBytes(contextBytes(cost, trainCtx, DEFAULT_BATCH))
  }, ${formatBytes(autoBytes)} is there for the cache${share}`;
  const atFull = maxBatch(cost, trainCtx, autoBytes, DEFAULT_BATCH);
  if (atFull === DEFAULT_BATCH) {
    return fitted(trainCtx, atFull, `the model's full context fits ${DEFAULT_BATCH} sequences`);
  }
  if (atFull >= BATCH_FLOOR) return fitted(trainCtx, atFull, `fewer sequences: ${full}`);
  const floor = Math.min(trainCtx, CTX_FLOOR);
  const at8 = maxCtx(cost, BATCH_FLOOR, autoBytes, trainCtx);
  if (at8 >= floor) return fitted(at8, BATCH_FLOOR, `shorter context: ${full}`);
  const b = maxBatch(cost, floor, autoBytes, BATCH_FLOOR);
  if (b >= 1) {
    return fitted(maxCtx(cost, b, autoBytes, trainCtx), b, `fewer, shorter sequences: ${full}`);
  }
  let one = maxCtx(cost, 1, autoBytes, trainCtx);
  if (one < least) one = maxCtx(cost, 1, usable, trainCtx);
  if (one < least) return needs("the least context (--max-seq-len auto)", least, 1);
  return fitted(one, 1, `one short sequence: ${full}`);
}

/** Bytes per element of each `--kvcache-dtype` (ggml block sizes: 32 values per block). */
export const KV_TYPE_BYTES: Record<string, number> = {
  f32: 4,
  f16: 2,
  bf16: 2,
  q8_0: 34 / 32,
  q4_0: 18 / 32,
  q4_1: 20 / 32,
  q5_0: 22 / 32,
  q5_1: 24 / 32,
  iq4_nl: 18 / 32,
};

/** The GGUF metadata `contextCost` reads (`general.architecture` and `<arch>.*`). */
export type MetadataLookup = (key: string) => unknown;

/**
 * The cost of a context for a model, from its GGUF hyperparameters: `<arch>.block_count`,
 * `attention.head_count_kv` (a number or one per layer; 0 for layers without attention),
 * `attention.key_length` / `value_length` (default `embedding_length / head_count`). Every
 * attention layer is counted at full context, sliding-window ones too: an overestimate for such
 * models (a shorter fitted context), never a failed load.
 */
export function contextCost(
  meta: MetadataLookup,
  o: { kvType: string; nVocab: number; nUbatch: number; unified: boolean },
): ContextCost {
  const arch = String(meta("general.architecture") ?? "llama");
  const num = (k: string, d = 0) => {
    const v = meta(`${arch}.${k}`);
    return typeof v === "number" || typeof v === "bigint" ? Number(v) : d;
  };
  const nLayer = num("block_count");
  const nEmbd = num("embedding_length");
  const headsV = meta(`${arch}.attention.head_count`);
  const nHead = typeof headsV === "number" ? headsV : Math.max(0, ...toNumbers(headsV));
  const kvV = meta(`${arch}.attention.head_count_kv`);
  const kvHeads = typeof kvV === "number" || typeof kvV === "bigint"
    ? Array(nLayer).fill(Number(kvV))
    : kvV === undefined
    ? Array(nLayer).fill(nHead)
    : toNumbers(kvV);
  const headDim = nHead ? nEmbd / nHead : 0;
  const kDim = num("attention.key_length", headDim);
  const vDim = num("attention.value_length", headDim);
  const elem = KV_TYPE_BYTES[o.kvType === "auto" ? "f16" : o.kvType] ?? 2;
  const perToken = kvHeads.reduce((s, h) => s + h * (kDim + vDim) * elem, 0);
  const nFf = Math.max(num("feed_forward_length"), 0);
  return {
    kvBytesPerToken: perToken,
    bytesPerSeq: o.nVocab * 4,
    maskBytesPerCell: o.nUbatch * 2,
    fixedBytes: o.nUbatch * 4 * (o.nVocab + 4 * nEmbd + 2 * nFf),
    unified: o.unified,
  };
}

function toNumbers(v: unknown): number[] {
  if (v && typeof v === "object" && "length" in v) {
    return Array.from(v as ArrayLike<unknown>, (x) => Number(x) || 0);
  }
  return [];
}

/** `/proc/meminfo` MemAvailable in bytes, or undefined where there is none (not Linux). */
export function hostMemAvailable(): number | undefined {
  try {
    const m = /^MemAvailable:\s+(\d+) kB$/m.exec(Deno.readTextFileSync("/proc/meminfo"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The budget of a model on `devices` (those it sits on, as listed after its weights were placed):
 * the GPU and RPC devices' free memory summed (llama.cpp splits the layers, and with them the
 * cache, in proportion to it), else the host's MemAvailable (`hostAvailable`, read before the
 * load) less the weights.
 */
export function budgetFor(
  devices: DeviceInfo[],
  hostAvailable: number | undefined,
  weightsBytes: number,
): Budget {
  const acc = devices.filter((d) => d.type === "gpu" || d.type === "igpu" || d.backend === "RPC");
  if (acc.length) {
    return {
      freeBytes: acc.reduce((s, d) => s + d.memoryFree, 0),
      weightsBytes: 0,
      autoShare: 1,
      where: acc.map((d) => d.name).join(" + "),
    };
  }
  const cpu = devices.find((d) => d.type === "cpu");
  return {
    freeBytes: hostAvailable ?? cpu?.memoryFree ?? 0,
    weightsBytes,
    autoShare: 0.5,
    where: hostAvailable === undefined ? "the CPU" : "the CPU (MemAvailable)",
  };
}

/** The start-up log's line: what was chosen and why. */
export function describeFit(f: Fit): string {
  return `${f.maxSeqLen} tokens x ${f.maxBatch} sequences (${f.why}); the cache and compute ` +
    `buffers take up to ${formatBytes(f.bytes)} of ${formatBytes(f.usableBytes)} usable`;
}
