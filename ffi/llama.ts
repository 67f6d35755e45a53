/**
 * Typed wrappers over the raw llama.cpp symbols: models, contexts, batches, tokens, samplers.
 * No policy lives here (no defaults beyond llama.cpp's own, no scheduling, no HTTP): every
 * function maps one C call, or one C call plus its buffer bookkeeping, to plain JS values.
 *
 * @example
 * ```ts
 * import { openLlama } from "./library.ts";
 * import { loadModel, modelVocab, tokenize } from "./llama.ts";
 * const llama = openLlama();
 * const model = await loadModel(llama, "tiny.gguf", {});
 * tokenize(llama, modelVocab(llama, model), "Hello", true, false); // Int32Array [128000, 9906]
 * ```
 * @module
 */
import { cString, libraryFiles, type Llama } from "./library.ts";
import { loadOnBigStack } from "./load_thread.ts";
import {
  batch as batchLayout,
  contextParams,
  modelParams,
  modelQuantizeParams,
  readStruct,
  samplerChainParams,
  type StructValues,
  writeStruct,
} from "./layout.ts";

export type Pointer = NonNullable<Deno.PointerValue>;
export type ModelPtr = Pointer & { readonly __model: unique symbol };
export type ContextPtr = Pointer & { readonly __context: unique symbol };
export type VocabPtr = Pointer & { readonly __vocab: unique symbol };
export type SamplerPtr = Pointer & { readonly __sampler: unique symbol };

const decoder = new TextDecoder();

function cStr(p: Deno.PointerValue): string | undefined {
  return p ? Deno.UnsafePointerView.getCString(p) : undefined;
}

// ---------------------------------------------------------------- params

/** `llama_model_default_params()` as a struct buffer. */
export function defaultModelParams(llama: Llama): Uint8Array<ArrayBuffer> {
  return new Uint8Array(llama.sym.llama_model_default_params());
}

/** `llama_context_default_params()` as a struct buffer. */
export function defaultContextParams(llama: Llama): Uint8Array<ArrayBuffer> {
  return new Uint8Array(llama.sym.llama_context_default_params());
}

/** Decoded default params of every struct, for inspection and layout tests. */
export function defaultParams(llama: Llama): Record<string, StructValues> {
  return {
    llama_model_params: readStruct(modelParams, defaultModelParams(llama)),
    llama_context_params: readStruct(contextParams, defaultContextParams(llama)),
    llama_sampler_chain_params: readStruct(
      samplerChainParams,
      new Uint8Array(llama.sym.llama_sampler_chain_default_params()),
    ),
    llama_model_quantize_params: readStruct(
      modelQuantizeParams,
      new Uint8Array(llama.sym.llama_model_quantize_default_params()),
    ),
  };
}

// ---------------------------------------------------------------- models and contexts

/**
 * Loads a GGUF; `overrides` are `llama_model_params` fields. Runs off the event loop, on a thread
 * with a 64 MiB stack (`load_thread.ts`), never on Deno's 2 MiB blocking pool.
 */
export async function loadModel(
  llama: Llama,
  path: string,
  overrides: StructValues,
): Promise<ModelPtr> {
  const params = defaultModelParams(llama);
  writeStruct(modelParams, params, overrides);
  llama.recentLog.length = 0;
  const model = await loadOnBigStack(
    llama.dir,
    libraryFiles(llama.dir)!.llama,
    path,
    params,
    modelParams.ffi,
  );
  if (!model) {
    const why = llama.recentLog.filter((l) => /error|failed/i.test(l)).slice(-2).join("; ");
    throw new Error(`llama.cpp could not load ${path}${why ? `: ${why}` : ""}`);
  }
  return model as ModelPtr;
}

export function freeModel(llama: Llama, model: ModelPtr): void {
  llama.sym.llama_model_free(model);
}

/** Creates a context; `overrides` are `llama_context_params` fields. */
export function newContext(llama: Llama, model: ModelPtr, overrides: StructValues): ContextPtr {
  const params = defaultContextParams(llama);
  writeStruct(contextParams, params, overrides);
  llama.recentLog.length = 0;
  const ctx = llama.sym.llama_init_from_model(model, params);
  if (!ctx) {
    const why = llama.recentLog.slice(-2).join("; ");
    throw new Error(`llama.cpp could not create a context${why ? `: ${why}` : ""}`);
  }
  return ctx as ContextPtr;
}

export function freeContext(llama: Llama, ctx: ContextPtr): void {
  llama.sym.llama_free(ctx);
}

/** Facts about a loaded model, read once. */
export type ModelInfo = {
  description: string;
  nCtxTrain: number;
  nEmbd: number;
  nLayer: number;
  nHead: number;
  nHeadKv: number;
  nParams: number;
  sizeBytes: number;
  fileType: string;
  chatTemplate?: string;
  hasEncoder: boolean;
};

export function modelInfo(llama: Llama, model: ModelPtr): ModelInfo {
  const s = llama.sym;
  const desc = new Uint8Array(256);
  const n = s.llama_model_desc(model, desc, BigInt(desc.length));
  return {
    description: decoder.decode(desc.subarray(0, Math.max(0, n))),
    nCtxTrain: s.llama_model_n_ctx_train(model),
    nEmbd: s.llama_model_n_embd(model),
    nLayer: s.llama_model_n_layer(model),
    nHead: s.llama_model_n_head(model),
    nHeadKv: s.llama_model_n_head_kv(model),
    nParams: Number(s.llama_model_n_params(model)),
    sizeBytes: Number(s.llama_model_size(model)),
    fileType: cStr(s.llama_ftype_name(s.llama_model_ftype(model))) ?? "unknown",
    chatTemplate: cStr(s.llama_model_chat_template(model, null)),
    hasEncoder: s.llama_model_has_encoder(model),
  };
}

/** A metadata value as a string, or undefined when the key is absent. */
export function modelMeta(llama: Llama, model: ModelPtr, key: string): string | undefined {
  const out = new Uint8Array(4096);
  const n = llama.sym.llama_model_meta_val_str(model, cString(key), out, BigInt(out.length));
  return n < 0 ? undefined : decoder.decode(out.subarray(0, Math.min(n, out.length - 1)));
}

export type ContextInfo = {
  nCtx: number;
  nCtxSeq: number;
  nBatch: number;
  nUbatch: number;
  nSeqMax: number;
  poolingType: number;
};

export function contextInfo(llama: Llama, ctx: ContextPtr): ContextInfo {
  const s = llama.sym;
  return {
    nCtx: s.llama_n_ctx(ctx),
    nCtxSeq: s.llama_n_ctx_seq(ctx),
    nBatch: s.llama_n_batch(ctx),
    nUbatch: s.llama_n_ubatch(ctx),
    nSeqMax: s.llama_n_seq_max(ctx),
    poolingType: s.llama_pooling_type(ctx),
  };
}

/** Quantizes a GGUF file (`ftype` is a `llama_ftype`). Returns llama.cpp's status, 0 = ok. */
export async function quantizeModel(
  llama: Llama,
  input: string,
  output: string,
  overrides: StructValues,
): Promise<number> {
  const params = new Uint8Array(llama.sym.llama_model_quantize_default_params());
  writeStruct(modelQuantizeParams, params, overrides);
  return await llama.sym.llama_model_quantize(cString(input), cString(output), params);
}

// ---------------------------------------------------------------- vocab and tokens

export function modelVocab(llama: Llama, model: ModelPtr): VocabPtr {
  return llama.sym.llama_model_get_vocab(model) as VocabPtr;
}

export type VocabInfo = {
  type: number;
  nTokens: number;
  bos: number;
  eos: number;
  eot: number;
  addBos: boolean;
  addEos: boolean;
};

export function vocabInfo(llama: Llama, vocab: VocabPtr): VocabInfo {
  const s = llama.sym;
  return {
    type: s.llama_vocab_type(vocab),
    nTokens: s.llama_vocab_n_tokens(vocab),
    bos: s.llama_vocab_bos(vocab),
    eos: s.llama_vocab_eos(vocab),
    eot: s.llama_vocab_eot(vocab),
    addBos: s.llama_vocab_get_add_bos(vocab),
    addEos: s.llama_vocab_get_add_eos(vocab),
  };
}

const encoder = new TextEncoder();

/** `llama_tokenize`, growing the output buffer when llama.cpp asks for more room. */
export function tokenize(
  llama: Llama,
  vocab: VocabPtr,
  text: string,
  addSpecial: boolean,
  parseSpecial: boolean,
): Int32Array {
  const bytes = encoder.encode(text);
  const run = (out: Int32Array) =>
    llama.sym.llama_tokenize(
      vocab,
      bytes,
      bytes.length,
      new Uint8Array(out.buffer),
      out.length,
      addSpecial,
      parseSpecial,
    );
  // A negative result is the size llama.cpp needs: retry once with exactly that much room.
  let out = new Int32Array(bytes.length + 8);
  let n = run(out);
  if (n < 0) n = run(out = new Int32Array(-n));
  if (n < 0) throw new Error(`llama_tokenize failed (${n})`);
  return out.slice(0, n);
}

const pieceBuf = new Uint8Array(256);

/** The raw bytes of one token (may be a partial UTF-8 sequence). */
export function tokenToPiece(
  llama: Llama,
  vocab: VocabPtr,
  token: number,
  special: boolean,
): Uint8Array {
  let n = llama.sym.llama_token_to_piece(vocab, token, pieceBuf, pieceBuf.length, 0, special);
  if (n >= 0) return pieceBuf.slice(0, n);
  const big = new Uint8Array(-n);
  n = llama.sym.llama_token_to_piece(vocab, token, big, big.length, 0, special);
  return big.subarray(0, Math.max(0, n));
}

/** `llama_detokenize` to a string (invalid UTF-8 becomes U+FFFD). */
export function detokenize(
  llama: Llama,
  vocab: VocabPtr,
  tokens: ArrayLike<number>,
  removeSpecial: boolean,
  unparseSpecial: boolean,
): string {
  const ids = Int32Array.from(tokens);
  const idBytes = new Uint8Array(ids.buffer);
  const run = (out: Uint8Array) =>
    llama.sym.llama_detokenize(
      vocab,
      idBytes,
      ids.length,
      out,
      out.length,
      removeSpecial,
      unparseSpecial,
    );
  let out = new Uint8Array(Math.max(64, ids.length * 8));
  let n = run(out);
  if (n < 0) n = run(out = new Uint8Array(-n));
  if (n < 0) throw new Error(`llama_detokenize failed (${n})`);
  return decoder.decode(out.subarray(0, n));
}

export function tokenText(llama: Llama, vocab: VocabPtr, token: number): string | undefined {
  return cStr(llama.sym.llama_vocab_get_text(vocab, token));
}

export function isEog(llama: Llama, vocab: VocabPtr, token: number): boolean {
  return llama.sym.llama_vocab_is_eog(vocab, token);
}

// ---------------------------------------------------------------- batches

/**
 * A `llama_batch` whose arrays are JS-owned typed arrays (one sequence id per token), so filling
 * it is plain array writes; `struct` is the by-value 56-byte struct pointing at them.
 */
export type Batch = {
  capacity: number;
  token: Int32Array;
  pos: Int32Array;
  nSeqId: Int32Array;
  seqId: Int32Array;
  logits: Int8Array;
  /** Kept alive here because `struct` points into it. */
  seqIdPtrs: BigUint64Array;
  struct: Uint8Array<ArrayBuffer>;
};

function addr(view: ArrayBufferView): bigint {
  return Deno.UnsafePointer.value(Deno.UnsafePointer.of(view as BufferSource));
}

export function newBatch(capacity: number): Batch {
  // Buffers are created from their own ArrayBuffer (never on the V8 heap) so their addresses
  // stay fixed for the lifetime of the batch.
  const size = Math.max(capacity, 16);
  const token = new Int32Array(new ArrayBuffer(size * 4));
  const pos = new Int32Array(new ArrayBuffer(size * 4));
  const nSeqId = new Int32Array(new ArrayBuffer(size * 4));
  const seqId = new Int32Array(new ArrayBuffer(size * 4));
  const logits = new Int8Array(new ArrayBuffer(Math.max(size, 64)));
  const seqIdPtrs = new BigUint64Array(new ArrayBuffer(size * 8));
  const base = addr(seqId);
  for (let i = 0; i < size; i++) seqIdPtrs[i] = base + BigInt(i * 4);
  nSeqId.fill(1);
  const struct = new Uint8Array(batchLayout.size);
  writeStruct(batchLayout, struct, {
    n_tokens: 0,
    token: addr(token),
    embd: 0n,
    pos: addr(pos),
    n_seq_id: addr(nSeqId),
    seq_id: addr(seqIdPtrs),
    logits: addr(logits),
  });
  return { capacity, token, pos, nSeqId, seqId, logits, seqIdPtrs, struct };
}

/** Sets `n_tokens` in the struct; the caller has filled the first `n` entries. */
export function setBatchSize(b: Batch, n: number): void {
  if (n > b.capacity) throw new Error(`batch overflow: ${n} > ${b.capacity}`);
  new DataView(b.struct.buffer).setInt32(0, n, true);
}

/**
 * `llama_decode` off the event loop. Returns llama.cpp's status: 0 ok, 1 no KV slot,
 * 2 aborted, negative on error.
 */
export function decode(llama: Llama, ctx: ContextPtr, b: Batch): Promise<number> {
  return llama.sym.llama_decode(ctx, b.struct);
}

/** `llama_decode` on the calling thread (blocks the event loop for the step). */
export function decodeSync(llama: Llama, ctx: ContextPtr, b: Batch): number {
  return llama.sym.llama_decode_sync(ctx, b.struct);
}

/**
 * Makes `chain` sample sequence `seq` inside the decode graph (backend sampling), or detaches
 * it (`null`). False when the chain cannot run there (the sequence then samples on the CPU).
 * Changing the set of attached chains makes the next decode reserve its graph again.
 */
export function setBackendSampler(
  llama: Llama,
  ctx: ContextPtr,
  seq: number,
  chain: SamplerPtr | null,
): boolean {
  return llama.sym.llama_set_sampler(ctx, seq, chain);
}

/** The token the backend sampler chose for batch row `i` (-1 when it chose none). */
export function sampledToken(llama: Llama, ctx: ContextPtr, i: number): number {
  return llama.sym.llama_get_sampled_token_ith(ctx, i);
}

/** Logits row of batch position `i` as a view (valid until the next decode). */
export function logitsIth(llama: Llama, ctx: ContextPtr, i: number, nVocab: number): Float32Array {
  const p = llama.sym.llama_get_logits_ith(ctx, i);
  if (!p) throw new Error(`no logits for batch position ${i}`);
  return new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nVocab * 4));
}

/** Pooled embedding of a sequence (copied), or undefined when pooling is off. */
export function embeddingsSeq(
  llama: Llama,
  ctx: ContextPtr,
  seq: number,
  nEmbd: number,
): Float32Array | undefined {
  const p = llama.sym.llama_get_embeddings_seq(ctx, seq);
  if (!p) return undefined;
  return new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nEmbd * 4).slice(0));
}

/** Embedding of batch position `i` (copied). */
export function embeddingsIth(
  llama: Llama,
  ctx: ContextPtr,
  i: number,
  nEmbd: number,
): Float32Array | undefined {
  const p = llama.sym.llama_get_embeddings_ith(ctx, i);
  if (!p) return undefined;
  return new Float32Array(Deno.UnsafePointerView.getArrayBuffer(p, nEmbd * 4).slice(0));
}

// ---------------------------------------------------------------- KV memory

export function memory(llama: Llama, ctx: ContextPtr): Pointer {
  const m = llama.sym.llama_get_memory(ctx);
  if (!m) throw new Error("context has no memory");
  return m;
}

/** Removes positions [p0, p1) of `seq` (-1 = open end). */
export function memorySeqRm(
  llama: Llama,
  mem: Pointer,
  seq: number,
  p0: number,
  p1: number,
): boolean {
  return llama.sym.llama_memory_seq_rm(mem, seq, p0, p1);
}

export function memorySeqCp(
  llama: Llama,
  mem: Pointer,
  src: number,
  dst: number,
  p0: number,
  p1: number,
): void {
  llama.sym.llama_memory_seq_cp(mem, src, dst, p0, p1);
}

export function memorySeqPosMax(llama: Llama, mem: Pointer, seq: number): number {
  return llama.sym.llama_memory_seq_pos_max(mem, seq);
}

export function memoryClear(llama: Llama, mem: Pointer): void {
  llama.sym.llama_memory_clear(mem, true);
}

/** One sequence's KV cells as bytes (`llama_state_seq_get_data`), to load into another context. */
export function seqStateGet(llama: Llama, ctx: ContextPtr, seq: number): Uint8Array<ArrayBuffer> {
  const size = Number(llama.sym.llama_state_seq_get_size(ctx, seq));
  const out = new Uint8Array(size);
  const n = Number(llama.sym.llama_state_seq_get_data(ctx, out, BigInt(size), seq));
  if (n !== size) throw new Error(`llama.cpp wrote ${n} of ${size} bytes of sequence ${seq}`);
  return out;
}

/** Loads bytes from `seqStateGet` into `seq` (emptied first); false when llama.cpp refuses them. */
export function seqStateSet(llama: Llama, ctx: ContextPtr, seq: number, data: Uint8Array): boolean {
  // FFI needs an ArrayBuffer-backed buffer (a 30k-token state is hundreds of MiB: no needless copy).
  const copy = data.buffer instanceof ArrayBuffer
    ? data as Uint8Array<ArrayBuffer>
    : new Uint8Array(data);
  return Number(llama.sym.llama_state_seq_set_data(ctx, copy, BigInt(copy.length), seq)) > 0;
}

/** `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: only the SWA KV cells or the recurrent state. */
export const STATE_SEQ_PARTIAL_ONLY = 1;

/** `seqStateGet` with `llama_state_seq_flags` (`llama_state_seq_get_data_ext`). */
export function seqStateGetExt(
  llama: Llama,
  ctx: ContextPtr,
  seq: number,
  flags: number,
): Uint8Array<ArrayBuffer> {
  const size = Number(llama.sym.llama_state_seq_get_size_ext(ctx, seq, flags));
  const out = new Uint8Array(size);
  const n = Number(llama.sym.llama_state_seq_get_data_ext(ctx, out, BigInt(size), seq, flags));
  if (n !== size) throw new Error(`llama.cpp wrote ${n} of ${size} bytes of sequence ${seq}`);
  return out;
}

/** `seqStateSet` with `llama_state_seq_flags`; false when llama.cpp refuses the bytes. */
export function seqStateSetExt(
  llama: Llama,
  ctx: ContextPtr,
  seq: number,
  data: Uint8Array,
  flags: number,
): boolean {
  const copy = new Uint8Array(data);
  return Number(
    llama.sym.llama_state_seq_set_data_ext(ctx, copy, BigInt(copy.length), seq, flags),
  ) >
    0;
}

/** The smallest position `seq` still has cells for (-1 when empty); SWA caches drop old ones. */
export function memorySeqPosMin(llama: Llama, mem: Pointer, seq: number): number {
  return llama.sym.llama_memory_seq_pos_min(mem, seq);
}

/** How a model's memory can be trimmed: recurrent / hybrid state, sliding window (0 = none). */
export type ModelMemoryKind = { recurrent: boolean; hybrid: boolean; nSwa: number };

export function modelMemoryKind(llama: Llama, model: ModelPtr): ModelMemoryKind {
  const s = llama.sym;
  return {
    recurrent: s.llama_model_is_recurrent(model),
    hybrid: s.llama_model_is_hybrid(model),
    nSwa: s.llama_model_n_swa(model),
  };
}

/** Recurrent-state snapshots per sequence for partial rollback (`n_rs_seq`, 0 = none). */
export function contextRsSeq(llama: Llama, ctx: ContextPtr): number {
  return llama.sym.llama_n_rs_seq(ctx);
}

// ---------------------------------------------------------------- samplers

export function samplerChain(llama: Llama, noPerf = true): SamplerPtr {
  const params = new Uint8Array(samplerChainParams.size);
  writeStruct(samplerChainParams, params, { no_perf: noPerf });
  return llama.sym.llama_sampler_chain_init(params) as SamplerPtr;
}

/** Adds `s` to `chain`; the chain owns it from here on. */
export function chainAdd(llama: Llama, chain: SamplerPtr, s: Deno.PointerValue): void {
  if (!s) throw new Error("sampler could not be created");
  llama.sym.llama_sampler_chain_add(chain, s);
}

export function samplerFree(llama: Llama, s: SamplerPtr): void {
  llama.sym.llama_sampler_free(s);
}

/** A copy of a sampler with its state (`llama_sampler_clone`). */
export function samplerClone(llama: Llama, s: SamplerPtr): SamplerPtr {
  const c = llama.sym.llama_sampler_clone(s);
  if (!c) throw new Error("llama_sampler_clone returned null");
  return c as SamplerPtr;
}

export function samplerSample(llama: Llama, s: SamplerPtr, ctx: ContextPtr, i: number): number {
  return llama.sym.llama_sampler_sample(s, ctx, i);
}

export function samplerAccept(llama: Llama, s: SamplerPtr, token: number): void {
  llama.sym.llama_sampler_accept(s, token);
}

/** Constructors of the individual samplers, each returning a raw sampler pointer. */
export function samplers(llama: Llama) {
  const s = llama.sym;
  return {
    greedy: () => s.llama_sampler_init_greedy(),
    dist: (seed: number) => s.llama_sampler_init_dist(seed >>> 0),
    topK: (k: number) => s.llama_sampler_init_top_k(k),
    topP: (p: number, minKeep = 1) => s.llama_sampler_init_top_p(p, BigInt(minKeep)),
    minP: (p: number, minKeep = 1) => s.llama_sampler_init_min_p(p, BigInt(minKeep)),
    typical: (p: number, minKeep = 1) => s.llama_sampler_init_typical(p, BigInt(minKeep)),
    temp: (t: number) => s.llama_sampler_init_temp(t),
    tempExt: (t: number, delta: number, exponent: number) =>
      s.llama_sampler_init_temp_ext(t, delta, exponent),
    penalties: (nVocab: number, lastN: number, repeat: number, freq: number, present: number) =>
      s.llama_sampler_init_penalties(nVocab, lastN, repeat, freq, present),
    logitBias: (nVocab: number, biases: [number, number][]) => {
      const b = new DataView(new ArrayBuffer(Math.max(8, biases.length * 8)));
      biases.forEach(([tok, bias], i) => {
        b.setInt32(i * 8, tok, true);
        b.setFloat32(i * 8 + 4, bias, true);
      });
      return s.llama_sampler_init_logit_bias(nVocab, biases.length, new Uint8Array(b.buffer));
    },
    grammar: (vocab: VocabPtr, grammar: string, root: string) =>
      s.llama_sampler_init_grammar(vocab, cString(grammar), cString(root)),
    /**
     * A grammar that stays inactive (its `apply` leaves candidates alone) until a trigger: a
     * token in `tokens`, or generated text matching one of `patterns` (std::regex, ECMAScript
     * flavour; llama.cpp throws through the C ABI, which aborts the process, on a pattern that
     * does not compile: validate patterns first). Null when the grammar does not parse.
     */
    grammarLazyPatterns: (
      vocab: VocabPtr,
      grammar: string,
      root: string,
      patterns: string[],
      tokens: number[],
    ) => {
      // `const char **`: an array of pointers to NUL-terminated strings. Each string gets its own
      // off-heap ArrayBuffer so its address is fixed; `strings` keeps them alive for the call.
      const strings = patterns.map((p) => {
        const c = cString(p);
        const out = new Uint8Array(new ArrayBuffer(c.length));
        out.set(c);
        return out;
      });
      const ptrs = new BigUint64Array(new ArrayBuffer(Math.max(1, strings.length) * 8));
      strings.forEach((str, i) => (ptrs[i] = addr(str)));
      const toks = new Int32Array(new ArrayBuffer(Math.max(1, tokens.length) * 4));
      toks.set(tokens);
      const sampler = s.llama_sampler_init_grammar_lazy_patterns(
        vocab,
        cString(grammar),
        cString(root),
        new Uint8Array(ptrs.buffer),
        BigInt(strings.length),
        new Uint8Array(toks.buffer),
        BigInt(tokens.length),
      );
      strings.length = 0; // only now may they be collected
      return sampler;
    },
  };
}
