/**
 * Pooled, L2-normalised sentence embeddings from the served model, for `/v1/embeddings`.
 *
 * The generation context stays as it is: a second llama.cpp context on the same weights, made
 * lazily on first use, has `embeddings` on and a pooling type (the model's own when its GGUF
 * names one, else mean). Inputs are packed several to a batch, one sequence id each, and every
 * decode runs through `Scheduler.exclusive`, so it never overlaps a generation step (two
 * concurrent decodes on a few cores only thrash each other).
 *
 * @example
 * ```ts
 * import { createEmbedder } from "./embeddings.ts";
 * const embedder = createEmbedder(engine);
 * const [a, b] = await embedder.embed([[128000, 9906], [128000, 1917]]);
 * a.length; // the model's embedding size; each vector has norm 1
 * embedder.close();
 * ```
 * @module
 */
import {
  type Batch,
  type ContextPtr,
  decode,
  embeddingsSeq,
  freeContext,
  memoryClear,
  modelMeta,
  newBatch,
  newContext,
  type Pointer,
  setBatchSize,
} from "../../ffi/mod.ts";
import { refusal, type Scheduler } from "./scheduler.ts";

/** `enum llama_pooling_type` values this module can turn into one vector per input. */
export const POOLING = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 } as const;

export type EmbedderOptions = {
  /** Longest input in tokens; default the engine's context per sequence. */
  maxTokens?: number;
  /** Inputs decoded together in one batch (sequence ids 0..maxSeqs-1). Default 8. */
  maxSeqs?: number;
  /**
   * Tokens per decode for causal models; longer inputs are fed in chunks whose pooled results
   * are combined. Default min(maxTokens, 512).
   */
  chunkTokens?: number;
  /** Pooling to use instead of the model's own: `POOLING.mean`, `.cls` or `.last`. */
  pooling?: number;
  /** Threads for the embedding context; default all cores. */
  threads?: number;
};

export type Embedder = {
  /** Size of each vector (`llama_model_n_embd_out`). */
  dimensions: number;
  /** Longest accepted input in tokens. */
  maxTokens: number;
  /** The `llama_pooling_type` in use (mean, cls or last). */
  pooling: number;
  /**
   * One unit-length vector per input, in order. Throws an `invalid` refusal for an empty input
   * and a `too_long` refusal for one over `maxTokens`, before any work is done.
   */
  embed(inputs: number[][]): Promise<Float32Array[]>;
  /** Frees the embedding context (waits for a decode in flight). */
  close(): Promise<void>;
};

export function createEmbedder(engine: Scheduler, opts: EmbedderOptions = {}): Embedder {
  const m = engine.model;
  const { llama, model } = m;
  const dimensions = llama.sym.llama_model_n_embd_out(model) || m.info.nEmbd;
  const maxTokens = Math.max(1, opts.maxTokens ?? m.nCtxSeq);
  const maxSeqs = Math.max(1, Math.min(opts.maxSeqs ?? 8, 64));
  const pooling = opts.pooling ?? poolingFor(engine);
  if (pooling !== POOLING.mean && pooling !== POOLING.cls && pooling !== POOLING.last) {
    throw new Error(`pooling type ${pooling} does not give one vector per input`);
  }
  // Causal decoders keep earlier chunks in the KV cache, so a long input can be fed in pieces
  // and the per-piece pooled vectors combined. Encoders and non-causal models see only what is
  // in one ubatch (llama.cpp asserts n_ubatch >= n_tokens there), so a whole group goes at once.
  const chunked = !m.info.hasEncoder && !nonCausal(engine);
  // Every token of an embedding batch is an output, and llama-family graphs still compute the
  // vocabulary logits for each: n_ubatch x n_vocab floats of scratch. Chunks keep that bounded.
  // Sizes are multiples of maxSeqs: llama.cpp rounds its worst-case reserve batch up to one,
  // and with every token an output a rounded batch no longer matches its pooling matrix (abort).
  const step = roundUp(chunked ? Math.min(opts.chunkTokens ?? 512, maxTokens) : maxTokens, maxSeqs);

  let ctx: ContextPtr | undefined;
  let mem: Pointer | null = null;
  let batch: Batch | undefined;
  let closed = false;
  // Groups share the one context and its KV cells, so they run one after another.
  let lock: Promise<unknown> = Promise.resolve();

  function open(): ContextPtr {
    if (ctx) return ctx;
    const threads = opts.threads ?? navigator.hardwareConcurrency;
    ctx = newContext(llama, model, {
      // One KV pool shared by all sequences (a unified cache): a group is at most maxTokens
      // tokens in total whatever its number of inputs, and llama.cpp then splits a batch into
      // ubatches in order, never cutting a sequence across two pooled outputs.
      n_ctx: roundUp(maxTokens, maxSeqs),
      n_batch: step,
      n_ubatch: step,
      n_seq_max: maxSeqs,
      kv_unified: true,
      n_threads: threads,
      n_threads_batch: threads,
      embeddings: true,
      pooling_type: pooling,
      no_perf: true,
    });
    // Models without a KV cache (non-causal encoders such as BERT) have no memory to clear.
    mem = llama.sym.llama_get_memory(ctx);
    batch = newBatch(step);
    return ctx;
  }

  function check(inputs: number[][]): void {
    inputs.forEach((ids, i) => {
      const where = inputs.length > 1 ? `input[${i}]` : "input";
      if (ids.length === 0) throw refusal("invalid", `${where} is empty (0 tokens)`);
      if (ids.length > maxTokens) {
        throw refusal(
          "too_long",
          `${where} has ${ids.length} tokens but the embedding context holds at most ` +
            `${maxTokens} tokens per input`,
        );
      }
    });
  }

  /** Splits inputs, in order, into groups that fit the context together. */
  function groups(inputs: number[][]): number[][] {
    const out: number[][] = [];
    let cur: number[] = [];
    let tokens = 0;
    inputs.forEach((ids, i) => {
      // Non-chunked models decode a group in a single call, which holds at most `step` tokens.
      const cap = chunked ? maxTokens : step;
      if (cur.length && (cur.length >= maxSeqs || tokens + ids.length > cap)) {
        out.push(cur);
        cur = [];
        tokens = 0;
      }
      cur.push(i);
      tokens += ids.length;
    });
    if (cur.length) out.push(cur);
    return out;
  }

  async function runGroup(inputs: number[][], group: number[], out: Float32Array[]) {
    if (closed) throw new Error("the embedder is closed");
    const c = open();
    const b = batch!;
    // Pooled parts per sequence: mean sums token-weighted chunk means, cls keeps the first
    // chunk's vector (the lowest position), last the final one's.
    const acc = group.map(() => new Float64Array(dimensions));
    const seen = group.map(() => false);
    const decodeOnce = async (n: number) => {
      setBatchSize(b, n);
      const rc = await engine.exclusive(() =>
        m.info.hasEncoder ? llama.sym.llama_encode(c, b.struct) : decode(llama, c, b)
      );
      if (rc !== 0) throw new Error(`embedding decode failed (llama.cpp status ${rc})`);
      const counts = new Map<number, number>();
      for (let k = 0; k < n; k++) counts.set(b.seqId[k], (counts.get(b.seqId[k]) ?? 0) + 1);
      for (const [seq, count] of counts) {
        const v = embeddingsSeq(llama, c, seq, dimensions);
        if (!v) throw new Error(`llama.cpp returned no pooled embedding for sequence ${seq}`);
        const a = acc[seq];
        if (pooling === POOLING.mean) {
          for (let d = 0; d < dimensions; d++) a[d] += v[d] * count;
        } else if (pooling === POOLING.last || !seen[seq]) {
          a.set(v);
        }
        seen[seq] = true;
      }
    };
    try {
      let n = 0;
      for (let s = 0; s < group.length; s++) {
        const ids = inputs[group[s]];
        for (let p = 0; p < ids.length; p++) {
          b.token[n] = ids[p];
          b.pos[n] = p;
          b.seqId[n] = s;
          // llama.cpp outputs every token of an embeddings context anyway and refuses a
          // batch that says otherwise.
          b.logits[n] = 1;
          n++;
          if (n === step) {
            await decodeOnce(n);
            n = 0;
          }
        }
      }
      if (n > 0) await decodeOnce(n);
    } finally {
      if (mem) memoryClear(llama, mem);
    }
    group.forEach((i, s) => out[i] = normalize(acc[s]));
  }

  function embed(inputs: number[][]): Promise<Float32Array[]> {
    if (closed) return Promise.reject(new Error("the embedder is closed"));
    try {
      check(inputs);
    } catch (e) {
      return Promise.reject(e);
    }
    const out: Float32Array[] = new Array(inputs.length);
    const work = async () => {
      for (const group of groups(inputs)) {
        const run = lock.then(() => runGroup(inputs, group, out));
        lock = run.catch(() => {});
        await run;
      }
      return out;
    };
    return work();
  }

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    await lock;
    if (ctx) freeContext(llama, ctx);
    ctx = undefined;
  }

  return { dimensions, maxTokens, pooling, embed, close };
}

/** The model's own pooling when its GGUF names one that yields a vector, else mean. */
function poolingFor(engine: Scheduler): number {
  const { llama, model } = engine.model;
  const arch = modelMeta(llama, model, "general.architecture");
  const own = arch ? Number(modelMeta(llama, model, `${arch}.pooling_type`)) : NaN;
  // none gives per-token vectors and rank a reranker's scores: neither is one embedding per
  // input, so those fall back to mean like a model with no pooling type at all.
  return own === POOLING.mean || own === POOLING.cls || own === POOLING.last ? own : POOLING.mean;
}

function nonCausal(engine: Scheduler): boolean {
  const { llama, model } = engine.model;
  const arch = modelMeta(llama, model, "general.architecture");
  return !!arch && modelMeta(llama, model, `${arch}.attention.causal`) === "false";
}

function roundUp(n: number, k: number): number {
  return Math.max(1, Math.ceil(n / k)) * k;
}

/** Unit length; the mean's 1/n factor cancels here, so mean pooling can keep plain sums. */
function normalize(v: Float64Array): Float32Array {
  let sq = 0;
  for (let d = 0; d < v.length; d++) sq += v[d] * v[d];
  const norm = Math.sqrt(sq);
  const out = new Float32Array(v.length);
  // A zero vector has no direction; it is returned as is rather than as NaNs.
  if (norm > 0) {
    for (let d = 0; d < v.length; d++) out[d] = v[d] / norm;
  }
  return out;
}
