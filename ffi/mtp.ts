/**
 * Multi-token-prediction (MTP / NextN) heads: typed wrappers for drafting tokens with a model's
 * own NextN blocks through a second llama.cpp context of type `LLAMA_CONTEXT_TYPE_MTP`. The call
 * sequence and its invariants are in `lib/engine/speculative/MTP.md`; nothing here decides when to draft,
 * how many tokens, or what to accept.
 *
 * The NextN calls live in llama.cpp's staging header `src/llama-ext.h`, which is C++: the
 * prebuilt library exports them under mangled names (`_Z26llama_set_embeddings_nextnP13...`),
 * bound here with Deno's `name` alias. Opening the same library again returns the loaded copy,
 * so contexts and models from `openLlama()` are valid here.
 *
 * @example
 * ```ts
 * import { openLlama } from "./library.ts";
 * import { newContext } from "./llama.ts";
 * import {
 *   draftGreedy,
 *   enableTargetNextn,
 *   loadModelWithMtp,
 *   mtpCatchUp,
 *   newMtpContext,
 * } from "./mtp.ts";
 * const llama = openLlama();
 * const model = await loadModelWithMtp(llama, "tiny-mtp.gguf", {});
 * const target = newContext(llama, model, { n_ctx: 4096, kv_unified: true });
 * enableTargetNextn(llama, target);
 * const mtp = newMtpContext(llama, model, target, {});
 * // decode the prompt on `target`, take its next token `last`, then:
 * // let h = await mtpCatchUp(llama, mtp, target, 0, prompt, 0, 0, new Float32Array(mtp.nEmbd));
 * // const drafts = await draftGreedy(llama, mtp, 0, last, prompt.length, h, 4);
 * ```
 * @module
 */
import { libraryFiles, type Llama, LLAMA_LIB } from "./library.ts";
import { batch as batchLayout, type StructValues, writeStruct } from "./layout.ts";
import {
  type Batch,
  type ContextPtr,
  decode,
  freeContext,
  freeModel,
  loadModel,
  memory,
  memorySeqPosMax,
  memorySeqRm,
  modelMeta,
  type ModelPtr,
  newBatch,
  newContext,
  type Pointer,
  setBatchSize,
} from "./llama.ts";

const ptr = "pointer" as const;

/**
 * The NextN symbols `symbols.ts` lacks: `llama_model_n_layer_nextn` (C, `llama.h`) and the C++
 * ones of `llama-ext.h` under their mangled names. Everything else comes from `llama.sym`.
 */
export const mtpSymbols = {
  llama_model_n_layer_nextn: { parameters: [ptr], result: "i32" },
  // void llama_set_embeddings_nextn(llama_context *, bool value, bool masked)
  llama_set_embeddings_nextn: {
    name: "_Z26llama_set_embeddings_nextnP13llama_contextbb",
    parameters: [ptr, "bool", "bool"],
    result: "void",
  },
  // void llama_set_nextn_layer_offset(llama_context *, int32_t offset)
  llama_set_nextn_layer_offset: {
    name: "_Z28llama_set_nextn_layer_offsetP13llama_contexti",
    parameters: [ptr, "i32"],
    result: "void",
  },
  // float * llama_get_embeddings_nextn(llama_context *)
  llama_get_embeddings_nextn: {
    name: "_Z26llama_get_embeddings_nextnP13llama_context",
    parameters: [ptr],
    result: ptr,
  },
  // float * llama_get_embeddings_nextn_ith(llama_context *, int32_t i)
  llama_get_embeddings_nextn_ith: {
    name: "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
    parameters: [ptr, "i32"],
    result: ptr,
  },
  // llama_context * llama_get_ctx_other(llama_context *)
  llama_get_ctx_other: {
    name: "_Z19llama_get_ctx_otherP13llama_context",
    parameters: [ptr],
    result: ptr,
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The bound NextN symbols. */
export type MtpSymbols = Deno.DynamicLibrary<typeof mtpSymbols>["symbols"];

const opened = new Map<string, MtpSymbols>();

/** Binds the NextN symbols of `llama`'s library (once per library directory). */
export function mtpSym(llama: Llama): MtpSymbols {
  let sym = opened.get(llama.dir);
  if (!sym) {
    // The build's own file name: a source build names it libllama.so, the CUDA prebuilt
    // libllama.cuda.v0.5.0.so.
    const file = libraryFiles(llama.dir)?.llama ?? LLAMA_LIB;
    sym = Deno.dlopen(`${llama.dir}/${file}`, mtpSymbols).symbols;
    opened.set(llama.dir, sym);
  }
  return sym;
}

/** `LLAMA_CONTEXT_TYPE_MTP` (`llama_context_params.ctx_type`). */
export const LLAMA_CONTEXT_TYPE_MTP = 1;

// ---------------------------------------------------------------- model and contexts

/**
 * Architectures whose llama.cpp model builds an MTP graph (`LLM_GRAPH_TYPE_DECODER_MTP`), by
 * `general.architecture`. Any other architecture would run its trunk graph in the MTP context
 * (with a KV cache that only has the NextN layers): never create an MTP context for one.
 */
export const MTP_ARCHES: ReadonlySet<string> = new Set([
  "glm4moe",
  "glm-dsa",
  "deepseek2",
  "deepseek32",
  "deepseek4",
  "qwen35",
  "qwen35moe",
  "qwen3next",
  "bailingmoe3",
  "cohere2moe",
  "nemotron_h_moe",
  "step35",
  "mimo2",
  "hy_v3",
]);

/** Of `MTP_ARCHES`, those whose graph takes more than one NextN block (chained heads). */
export const MTP_MULTI_HEAD_ARCHES: ReadonlySet<string> = new Set(["step35", "mimo2", "hy_v3"]);

/** Addresses of models loaded by `loadModelWithMtp`, i.e. with their NextN tensors in memory. */
const mtpLoaded = new Set<bigint>();

/**
 * Loads a GGUF with its NextN blocks (`load_mtp: true`); without that llama.cpp skips their
 * tensors and creating an MTP context aborts the process (see MTP.md).
 */
export async function loadModelWithMtp(
  llama: Llama,
  path: string,
  overrides: StructValues,
): Promise<ModelPtr> {
  const model = await loadModel(llama, path, { ...overrides, load_mtp: true });
  mtpLoaded.add(Deno.UnsafePointer.value(model));
  return model;
}

/** Frees a model from `loadModelWithMtp` (after every context on it). */
export function freeMtpModel(llama: Llama, model: ModelPtr): void {
  mtpLoaded.delete(Deno.UnsafePointer.value(model));
  freeModel(llama, model);
}

/**
 * Why an MTP context cannot be created for `model` without aborting the process, or undefined
 * when it can: the model must come from `loadModelWithMtp`, be of an `MTP_ARCHES` architecture
 * and have NextN blocks (exactly one unless the architecture chains heads). One thing it cannot
 * see: a GGUF that declares `nextn_predict_layers` but lacks the `blk.N.nextn.*` tensors (some
 * conversions drop them) also aborts; check the file's tensor names before loading.
 */
export function mtpUnsupportedReason(llama: Llama, model: ModelPtr): string | undefined {
  const arch = modelMeta(llama, model, "general.architecture") ?? "unknown";
  const n = mtpSym(llama).llama_model_n_layer_nextn(model);
  if (n <= 0) return "the model has no NextN (MTP) blocks";
  if (!MTP_ARCHES.has(arch)) return `llama.cpp has no MTP graph for architecture ${arch}`;
  if (n > 1 && !MTP_MULTI_HEAD_ARCHES.has(arch)) {
    return `llama.cpp's ${arch} MTP graph runs one NextN block, the model has ${n}`;
  }
  if (!mtpLoaded.has(Deno.UnsafePointer.value(model))) {
    return "the model was not loaded with its NextN tensors (use loadModelWithMtp)";
  }
  return undefined;
}

/** `llama_model_n_layer_nextn`: NextN blocks in the file (0 = no MTP heads). */
export function modelNLayerNextn(llama: Llama, model: ModelPtr): number {
  return mtpSym(llama).llama_model_n_layer_nextn(model);
}

/** Width of a hidden-state row (`llama_model_n_embd_out`). */
export function modelNEmbdOut(llama: Llama, model: ModelPtr): number {
  return llama.sym.llama_model_n_embd_out(model);
}

/**
 * `llama_set_embeddings_nextn`: keep the hidden state the NextN head reads (`h_nextn`) after each
 * decode. `masked`: only for rows with `batch.logits[i] != 0`, indexed like logits; unmasked:
 * for every token of the batch, indexed by batch position, which holds only where llama.cpp
 * keeps batch order: `kv_unified`, or one sequence per batch (MTP.md §5).
 */
export function setEmbeddingsNextn(
  llama: Llama,
  ctx: ContextPtr,
  value: boolean,
  masked: boolean,
): void {
  mtpSym(llama).llama_set_embeddings_nextn(ctx, value, masked);
}

/** Puts a target context in the mode MTP needs: a hidden-state row for every batch token. */
export function enableTargetNextn(llama: Llama, target: ContextPtr): void {
  setEmbeddingsNextn(llama, target, true, false);
}

/**
 * `llama_set_nextn_layer_offset`: which NextN block the MTP graph runs (0-based). Checked: an
 * offset outside `[0, n_layer_nextn)` makes the next MTP decode abort the process.
 */
export function setNextnLayerOffset(llama: Llama, mtp: MtpContext, offset: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset >= mtp.nLayerNextn) {
    throw new Error(`NextN block ${offset} out of range [0, ${mtp.nLayerNextn})`);
  }
  mtpSym(llama).llama_set_nextn_layer_offset(mtp.ctx, offset);
}

/** The MTP draft context of one target context. */
export type MtpContext = {
  ctx: ContextPtr;
  mem: Pointer;
  target: ContextPtr;
  nEmbd: number;
  nVocab: number;
  nBatch: number;
  /** NextN blocks of the model (heads that `setNextnLayerOffset` can select). */
  nLayerNextn: number;
  /**
   * Reused for catch-up and draft decodes (so one call at a time per MTP context, as decodes on a
   * context must be anyway); holds `nBatch` tokens with one hidden row each.
   */
  batch: MtpBatch;
};

/**
 * Creates the MTP context for `target` on the same model (loaded with `loadModelWithMtp`): same
 * `n_ctx`, `n_batch`, `n_ubatch`, `n_seq_max` as the target unless overridden, `ctx_type` MTP,
 * `ctx_other` the target, and masked NextN rows (the draft reads the head's own hidden state of
 * each output row). Throws where `mtpUnsupportedReason` has a reason, instead of letting
 * llama.cpp abort. Free it before the target context.
 */
export function newMtpContext(
  llama: Llama,
  model: ModelPtr,
  target: ContextPtr,
  overrides: StructValues,
): MtpContext {
  const s = llama.sym;
  const why = mtpUnsupportedReason(llama, model);
  if (why) throw new Error(`cannot create an MTP context: ${why}`);
  const ctx = newContext(llama, model, {
    n_ctx: s.llama_n_ctx(target),
    n_batch: s.llama_n_batch(target),
    n_ubatch: s.llama_n_ubatch(target),
    n_seq_max: s.llama_n_seq_max(target),
    ...overrides,
    ctx_type: LLAMA_CONTEXT_TYPE_MTP,
    ctx_other: Deno.UnsafePointer.value(target),
  });
  setEmbeddingsNextn(llama, ctx, true, true);
  const nEmbd = s.llama_model_n_embd_out(model);
  const nBatch = s.llama_n_batch(ctx);
  return {
    ctx,
    mem: memory(llama, ctx),
    target,
    nEmbd,
    nVocab: s.llama_vocab_n_tokens(s.llama_model_get_vocab(model)),
    nBatch,
    nLayerNextn: mtpSym(llama).llama_model_n_layer_nextn(model),
    batch: newMtpBatch(nBatch, nEmbd),
  };
}

export function freeMtpContext(llama: Llama, mtp: MtpContext): void {
  freeContext(llama, mtp.ctx);
}

// ---------------------------------------------------------------- hidden states

/**
 * Hidden-state row `i` of the last decode (copied). On a target context with unmasked rows `i`
 * is the batch position; on a masked (MTP) context it is the batch position of an output row.
 * Throws where llama.cpp has no such row.
 */
export function embeddingsNextnIth(
  llama: Llama,
  ctx: ContextPtr,
  i: number,
  nEmbd: number,
): Float32Array {
  const p = mtpSym(llama).llama_get_embeddings_nextn_ith(ctx, i);
  if (!p) throw new Error(`no NextN hidden state for batch position ${i}`);
  return new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nEmbd * 4).slice(0));
}

/** The first `nRows` hidden-state rows of the last decode, as a view (valid until the next). */
export function embeddingsNextnRows(
  llama: Llama,
  ctx: ContextPtr,
  nRows: number,
  nEmbd: number,
): Float32Array {
  const p = mtpSym(llama).llama_get_embeddings_nextn(ctx);
  if (!p) throw new Error("the context keeps no NextN hidden states");
  return new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nRows * nEmbd * 4));
}

// ---------------------------------------------------------------- batches

/** A `Batch` that also carries one hidden-state row per token (`llama_batch.embd`). */
export type MtpBatch = Batch & { embd: Float32Array; nEmbd: number };

/** A batch of `capacity` tokens with both `token` and `embd` set, as MTP decodes need. */
export function newMtpBatch(capacity: number, nEmbd: number): MtpBatch {
  const b = newBatch(capacity);
  const embd = new Float32Array(new ArrayBuffer(Math.max(capacity, 16) * nEmbd * 4));
  const at = Deno.UnsafePointer.value(Deno.UnsafePointer.of(embd));
  writeStruct(batchLayout, b.struct, { embd: at });
  return { ...b, embd, nEmbd };
}

function argmax(row: Float32Array): number {
  let best = 0;
  let bestV = row[0];
  for (let i = 1; i < row.length; i++) {
    if (row[i] > bestV) {
      bestV = row[i];
      best = i;
    }
  }
  return best;
}

// ---------------------------------------------------------------- the two MTP steps

/**
 * Mirrors one sequence's slice of the target's last decode into the MTP context (llama.cpp's
 * `common_speculative_process`): tokens `tokens[k]` at positions `pos0 + k`, each paired with the
 * hidden state of the token before it: `hPrev` for the first, then the target's rows
 * `row0 .. row0 + n - 2`. Returns the hidden state of the last token (target row
 * `row0 + n - 1`, copied): the `hPrev` of the next call and of `draftGreedy`.
 *
 * Call it right after the target decode (before the next one overwrites its rows), for every
 * token the sequence keeps: all prompt tokens, and after a verification only the accepted prefix
 * (the last sampled token plus the accepted drafts). `hPrev` is zeros before the first prompt
 * token. `tokens.length` must be at most the MTP context's `n_batch`. Throws when the decode
 * fails (for instance when `pos0` does not follow the MTP context's last cell of `seq`).
 */
export async function mtpCatchUp(
  llama: Llama,
  mtp: MtpContext,
  target: ContextPtr,
  seq: number,
  tokens: ArrayLike<number>,
  pos0: number,
  row0: number,
  hPrev: Float32Array,
): Promise<Float32Array> {
  const n = tokens.length;
  const { nEmbd, batch: b } = mtp;
  if (n === 0) return hPrev;
  if (n > mtp.nBatch) throw new Error(`MTP catch-up of ${n} tokens > n_batch ${mtp.nBatch}`);
  if (row0 < 0 || row0 + n > llama.sym.llama_n_batch(target)) {
    throw new Error(`target rows ${row0}..${row0 + n - 1} are outside its batch`);
  }
  const rows = embeddingsNextnRows(llama, target, row0 + n, nEmbd);
  b.embd.set(hPrev.subarray(0, nEmbd), 0);
  b.embd.set(rows.subarray(row0 * nEmbd, (row0 + n - 1) * nEmbd), nEmbd);
  const last = rows.slice((row0 + n - 1) * nEmbd, (row0 + n) * nEmbd);
  for (let k = 0; k < n; k++) {
    b.token[k] = tokens[k];
    b.pos[k] = pos0 + k;
    b.seqId[k] = seq;
    b.logits[k] = 0;
  }
  setBatchSize(b, n);
  const rc = await decode(llama, mtp.ctx, b);
  if (rc !== 0) throw new Error(`MTP catch-up decode failed (${rc}) at pos ${pos0}`);
  return last;
}

/**
 * Drafts up to `k` tokens greedily for one sequence by chaining the head on itself: step 0 feeds
 * `lastToken` (sampled from the target, not yet decoded anywhere) at `pos0` with `hPrev` (the
 * target's hidden state of the token before it); step i feeds draft i-1 at `pos0 + i` with the
 * head's own hidden state from step i-1. The MTP context's cells from `pos0` on are removed again
 * before returning, so its memory ends as it started (the verified tokens come back through
 * `mtpCatchUp`). `pos0` must follow the sequence's last MTP cell.
 */
export async function draftGreedy(
  llama: Llama,
  mtp: MtpContext,
  seq: number,
  lastToken: number,
  pos0: number,
  hPrev: Float32Array,
  k: number,
): Promise<Int32Array> {
  const { nEmbd, nVocab, batch: b } = mtp;
  const have = memorySeqPosMax(llama, mtp.mem, seq);
  if (have !== pos0 - 1) {
    throw new Error(`MTP draft at pos ${pos0}, but sequence ${seq} ends at ${have}`);
  }
  const out = new Int32Array(k);
  let token = lastToken;
  let h = hPrev;
  try {
    for (let i = 0; i < k; i++) {
      b.token[0] = token;
      b.pos[0] = pos0 + i;
      b.seqId[0] = seq;
      b.logits[0] = 1;
      b.embd.set(h.subarray(0, nEmbd), 0);
      setBatchSize(b, 1);
      const rc = await decode(llama, mtp.ctx, b);
      if (rc !== 0) throw new Error(`MTP draft decode failed (${rc}) at pos ${pos0 + i}`);
      const p = llama.sym.llama_get_logits_ith(mtp.ctx, 0);
      if (!p) throw new Error("MTP draft produced no logits");
      token = argmax(new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nVocab * 4)));
      out[i] = token;
      if (i + 1 < k) h = embeddingsNextnIth(llama, mtp.ctx, 0, nEmbd);
    }
  } finally {
    memorySeqRm(llama, mtp.mem, seq, pos0, -1);
  }
  return out;
}
