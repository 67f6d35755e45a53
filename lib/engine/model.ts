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
import { modelSamplingDefaults, type SamplingDefaults } from "./sampling/sampling.ts";
import {
  attachLlama,
  attachThreadpool,
  contextInfo,
  type ContextPtr,
  createThreadpool,
  deviceArray,
  type DeviceInfo,
  freeContext,
  freeModel,
  isEog,
  listDevices,
  type Llama,
  loadModel,
  memory,
  type ModelInfo,
  modelInfo,
  type ModelMemoryKind,
  modelMemoryKind,
  modelMeta,
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
import {
  enableTargetNextn,
  freeMtpContext,
  loadModelWithMtp,
  MTP_ARCHES,
  type MtpContext,
  newMtpBatch,
  newMtpContext,
} from "../../ffi/mtp.ts";
import { readGgufHeader } from "../gguf/mod.ts";
import { attachRpcServers, pickRankDevices, type RankOptions } from "./devices.ts";
import { type GraphBatch, graphBatchLayout, N_UBATCH } from "./graph_batch.ts";
import { budgetFor, contextCost, type Fit, fitContext, hostMemAvailable } from "./fit.ts";

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
  /** Sequences; `auto` fits up to 32 in memory (`fit.ts`). */
  maxBatch: number | "auto";
  /**
   * Context per sequence, at most the model's; `auto` (the default) the longest that fits in
   * memory. A number that cannot fit is refused with the memory it needs (`fit.ts`).
   */
  maxSeqLen?: number | "auto";
  kvType?: string;
  threads?: number;
  /** Pooled embeddings for `/v1/embeddings` (mean pooling unless the model sets one). */
  embeddings?: boolean;
  libDir?: string;
  /**
   * Load the model's multi-token-prediction heads, when it has any llama.cpp can run, with an
   * MTP context beside the main one (speculative decoding, `--mtp`). Ignored for other models.
   */
  mtpHeads?: boolean;
  /** `host:port` of `hearth rpc-server`s whose devices join this model (`--master-addr`). */
  rpcServers?: string[];
  /** Which devices the model is split over (`--num-ranks` and friends); default all. */
  ranks?: RankOptions;
  /**
   * Decode batch sizes the scheduler pads small steps to (`--graph-batch`), so that a GPU backend
   * sees a few fixed graph shapes and reuses its captured CUDA graphs. Needs a unified KV cache
   * and spare sequence ids for the padding rows (see `graphBatchLayout`).
   */
  graphBatch?: number[];
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
  /** The MTP draft context, when loaded with `mtpHeads` and the model has usable heads. */
  mtp?: MtpContext;
  /** The devices ggml had when the model was placed (memory as of then). */
  devices: DeviceInfo[];
  /**
   * `--graph-batch`: sizes small decode steps are padded to, ascending. Padding rows use sequence
   * ids `maxBatch .. maxBatch + padSeqs - 1`, one row each, and are removed after the step.
   */
  graphBatch?: GraphBatch;
  /** What `--max-seq-len` and `--max-batch` became, and why (`fit.ts`). */
  fit?: Fit;
  /** What a request that names no sampling field gets (the model's own, else Hearth's). */
  samplingDefaults?: SamplingDefaults;
  /**
   * Whether llama.cpp can cut a live sequence's cache back to any shorter prefix: not for
   * recurrent or hybrid models (sliding-window ones can, as Hearth keeps llama.cpp's default
   * full-size SWA cache).
   */
  kvTrim: boolean;
  /**
   * Whether a state restored from `llama_state_seq_get_data` can be cut back too: not where
   * `kvTrim` is false, nor for sliding-window models (the state keeps only the window's last
   * positions). Where it cannot, the prompt cache reuses states only whole (checkpoints).
   */
  stateTrim: boolean;
};

/** Whether the GGUF has NextN blocks with their tensors (a file without them aborts llama.cpp). */
async function hasMtpHeads(path: string): Promise<boolean> {
  const h = await readGgufHeader(path);
  const arch = h.metadata.get("general.architecture")?.value;
  const n = Number(h.metadata.get(`${arch}.nextn_predict_layers`)?.value ?? 0);
  if (!(n > 0) || !MTP_ARCHES.has(String(arch))) return false;
  return h.tensors.some((t) => /^blk\.\d+\.nextn\.eh_proj\.weight$/.test(t.name));
}

export async function loadEngineModel(o: LoadOptions): Promise<EngineModel> {
  // Read before the weights are mapped: on a CPU host they come out of this (`fit.ts`).
  const hostAvailable = hostMemAvailable();
  const header = await readGgufHeader(o.path);
  const llama = openLlama(o.libDir);
  await attachRpcServers(llama, o.rpcServers ?? []);
  const picked = o.ranks ? pickRankDevices(listDevices(llama), o.ranks) : undefined;
  const devices = picked ? deviceArray(llama, picked) : undefined;
  // Split by layer over the picked devices (llama.cpp's default mode), weighted by free memory.
  const placement: Record<string, bigint | number> = devices
    ? { devices: devices.address, split_mode: 1 }
    : {};
  const heads = o.mtpHeads ? await hasMtpHeads(o.path) : false;
  const model = heads
    ? await loadModelWithMtp(llama, o.path, placement)
    : await loadModel(llama, o.path, placement);
  devices?.buffer.fill(0n); // referenced until here: llama.cpp read it during the load
  try {
    const info = modelInfo(llama, model);
    const threads = o.threads ?? navigator.hardwareConcurrency;
    const kvName = o.kvType && o.kvType !== "auto" ? o.kvType : "f16";
    const kv = GGML_TYPES[kvName];
    if (kv === undefined) throw new Error(`unknown KV cache type ${o.kvType}`);
    const vocab = modelVocab(llama, model);
    const vInfo = vocabInfo(llama, vocab);
    const onDevices = listDevices(llama).filter((d) => !picked || picked.includes(d.index));
    const fit = fitContext({
      trainCtx: info.nCtxTrain,
      cost: contextCost((k) => header.metadata.get(k)?.value, {
        kvType: kvName,
        nVocab: vInfo.nTokens,
        nUbatch: N_UBATCH,
        unified: o.graphBatch !== undefined,
      }),
      budget: budgetFor(onDevices, hostAvailable, info.sizeBytes),
      requested: { maxSeqLen: o.maxSeqLen ?? "auto", maxBatch: o.maxBatch },
    });
    if ("error" in fit) throw new Error(fit.error);
    const { maxSeqLen: nCtxSeq, maxBatch } = fit;
    const graph = o.graphBatch ? graphBatchLayout(o.graphBatch, maxBatch) : undefined;
    const ctx = newContext(llama, model, {
      // Padding rows take one cell each, for one step, beside every sequence's full context.
      n_ctx: nCtxSeq * maxBatch + (graph?.padSeqs ?? 0),
      n_batch: 2048,
      n_ubatch: N_UBATCH,
      n_seq_max: maxBatch + (graph?.padSeqs ?? 0),
      ...(graph ? { kv_unified: true } : {}),
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
    let mtp: MtpContext | undefined;
    if (heads) {
      enableTargetNextn(llama, ctx);
      mtp = newMtpContext(llama, model, ctx, { n_threads: threads, n_threads_batch: threads });
      if (pool) attachThreadpool(llama, mtp.ctx, pool);
    }
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
      // A unified cache lets any sequence use every cell; the scheduler still holds each to its own.
      nCtxSeq: graph ? Math.min(nCtxSeq, cInfo.nCtxSeq) : cInfo.nCtxSeq,
      nBatch: cInfo.nBatch,
      maxBatch: graph ? maxBatch : cInfo.nSeqMax,
      graphBatch: graph,
      fit,
      samplingDefaults: modelSamplingDefaults((key) => modelMeta(llama, model, key)),
      ...trimKinds(modelMemoryKind(llama, model)),
      path: o.path,
      threadpool: pool,
      mtp,
      devices: listDevices(llama),
    };
  } catch (e) {
    freeModel(llama, model);
    throw e;
  }
}

/** What of a model's memory can be cut back (see `EngineModel.kvTrim` and `stateTrim`). */
export function trimKinds(k: ModelMemoryKind): { kvTrim: boolean; stateTrim: boolean } {
  const kvTrim = !k.recurrent && !k.hybrid;
  return { kvTrim, stateTrim: kvTrim && k.nSwa === 0 };
}

export function unloadEngineModel(m: EngineModel): void {
  if (m.mtp) freeMtpContext(m.llama, m.mtp);
  freeContext(m.llama, m.ctx);
  m.threadpool?.free();
  freeModel(m.llama, m.model);
}

/** An `EngineModel` as plain data (pointers as addresses), to hand to a worker thread. */
export type ModelHandles =
  & Omit<
    EngineModel,
    "llama" | "model" | "ctx" | "mem" | "vocab" | "threadpool" | "mtp"
  >
  & {
    dir: string;
    model: bigint;
    ctx: bigint;
    mem: bigint;
    vocab: bigint;
    mtp?: Omit<MtpContext, "ctx" | "mem" | "target" | "batch"> & {
      ctx: bigint;
      mem: bigint;
      target: bigint;
    };
  };

const addr = (p: Deno.PointerValue) => BigInt(Deno.UnsafePointer.value(p));
const ptr = <T>(v: bigint) => Deno.UnsafePointer.create(v) as T;

export function modelHandles(m: EngineModel): ModelHandles {
  const { llama, model, ctx, mem, vocab, threadpool: _pool, mtp, ...plain } = m;
  return {
    ...plain,
    dir: llama.dir,
    model: addr(model),
    ctx: addr(ctx),
    mem: addr(mem),
    vocab: addr(vocab),
    ...(mtp
      ? {
        mtp: {
          nEmbd: mtp.nEmbd,
          nVocab: mtp.nVocab,
          nBatch: mtp.nBatch,
          nLayerNextn: mtp.nLayerNextn,
          ctx: addr(mtp.ctx),
          mem: addr(mtp.mem),
          target: addr(mtp.target),
        },
      }
      : {}),
  };
}

/** The model and contexts another thread loaded, for use on this one (one decoder at a time). */
export function modelFromHandles(h: ModelHandles): EngineModel {
  const { dir, model, ctx, mem, vocab, mtp, ...plain } = h;
  return {
    ...plain,
    llama: attachLlama(dir),
    model: ptr(model),
    ctx: ptr(ctx),
    mem: ptr(mem),
    vocab: ptr(vocab),
    ...(mtp
      ? {
        mtp: {
          ...mtp,
          ctx: ptr(mtp.ctx),
          mem: ptr(mtp.mem),
          target: ptr(mtp.target),
          batch: newMtpBatch(mtp.nBatch, mtp.nEmbd),
        },
      }
      : {}),
  };
}
