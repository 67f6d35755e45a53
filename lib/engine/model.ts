/**
 * A loaded model with its one llama.cpp context: the facts the engine and the routes need
 * (vocabulary, end-of-generation tokens, context per sequence, chat template), read once.
 *
 * @example
 * ```ts
 * import { loadEngineModel } from "./model.ts";
 * const m = await loadEngineModel({ path: "tiny.gguf", maxBatch: 4, maxSeqLen: 2048 });
 * m.nCtxSeq; // 2048
 * ```
 * @module
 */
import {
  attachThreadpool,
  contextInfo,
  type ContextPtr,
  createThreadpool,
  freeContext,
  freeModel,
  isEog,
  type Llama,
  loadModel,
  memory,
  type ModelInfo,
  modelInfo,
  type ModelPtr,
  modelVocab,
  newContext,
  openLlama,
  type Pointer,
  type Threadpool,
  type VocabInfo,
  vocabInfo,
  type VocabPtr,
} from "../../ffi/mod.ts";

/** ggml type ids for the KV cache (`enum ggml_type`). */
export const GGML_TYPES: Record<string, number> = {
  f32: 0,
  f16: 1,
  q4_0: 2,
  q4_1: 3,
  q5_0: 6,
  q5_1: 7,
  q8_0: 8,
  iq4_nl: 20,
  bf16: 30,
};

export type LoadOptions = {
  path: string;
  maxBatch: number;
  /** Context per sequence; default the model's training context. */
  maxSeqLen?: number;
  kvType?: string;
  threads?: number;
  /** Pooled embeddings for `/v1/embeddings` (mean pooling unless the model sets one). */
  embeddings?: boolean;
  libDir?: string;
};

export type EngineModel = {
  llama: Llama;
  model: ModelPtr;
  ctx: ContextPtr;
  mem: Pointer;
  vocab: VocabPtr;
  info: ModelInfo;
  vocabInfo: VocabInfo;
  nVocab: number;
  eogTokens: number[];
  nCtxSeq: number;
  nBatch: number;
  maxBatch: number;
  path: string;
  /** ggml's CPU threadpool for this context (kept warm between decodes). */
  threadpool?: Threadpool;
};

export async function loadEngineModel(o: LoadOptions): Promise<EngineModel> {
  const llama = openLlama(o.libDir);
  const model = await loadModel(llama, o.path, {});
  try {
    const info = modelInfo(llama, model);
    const nCtxSeq = Math.min(o.maxSeqLen ?? info.nCtxTrain, info.nCtxTrain || Infinity);
    const threads = o.threads ?? navigator.hardwareConcurrency;
    const kv = GGML_TYPES[o.kvType && o.kvType !== "auto" ? o.kvType : "f16"];
    if (kv === undefined) throw new Error(`unknown KV cache type ${o.kvType}`);
    const ctx = newContext(llama, model, {
      n_ctx: nCtxSeq * o.maxBatch,
      n_batch: 2048,
      n_ubatch: 512,
      n_seq_max: o.maxBatch,
      n_threads: threads,
      n_threads_batch: threads,
      type_k: kv,
      type_v: kv,
      embeddings: o.embeddings ?? false,
      no_perf: true,
    });
    // ggml's default poll level, as llama-server uses: workers spin briefly after a graph, so
    // the next step (a few hundred microseconds of sampling away) finds them awake.
    const pool = createThreadpool(llama, { threads, poll: 50 });
    if (pool) attachThreadpool(llama, ctx, pool);
    const vocab = modelVocab(llama, model);
    const vInfo = vocabInfo(llama, vocab);
    const eogTokens: number[] = [];
    for (let t = 0; t < vInfo.nTokens; t++) if (isEog(llama, vocab, t)) eogTokens.push(t);
    const cInfo = contextInfo(llama, ctx);
    return {
      llama,
      model,
      ctx,
      mem: memory(llama, ctx),
      vocab,
      info,
      vocabInfo: vInfo,
      nVocab: vInfo.nTokens,
      eogTokens,
      nCtxSeq: cInfo.nCtxSeq,
      nBatch: cInfo.nBatch,
      maxBatch: cInfo.nSeqMax,
      path: o.path,
      threadpool: pool,
    };
  } catch (e) {
    freeModel(llama, model);
    throw e;
  }
}

export function unloadEngineModel(m: EngineModel): void {
  freeContext(m.llama, m.ctx);
  m.threadpool?.free();
  freeModel(m.llama, m.model);
}
