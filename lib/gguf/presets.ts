/**
 * Synthetic llama-architecture test models that llama.cpp loads and runs.
 *
 * Each model carries the real Llama-3 BPE tokenizer (copied verbatim from
 * `assets/llama-bpe.vocab.gguf`) and random weights, so tokenization, chat templating,
 * stop tokens, generation and embeddings all behave like a real model while the file
 * stays small and is generated in seconds.
 *
 * Weight initialisation (seeded, so a given preset + options always gives a byte-identical
 * file):
 * - norm vectors are all 1.0 and always F32 (llama.cpp expects F32 norms);
 * - `token_embd.weight` ~ N(0, 1). Embeddings are tied (there is no `output.weight`), so
 *   the same matrix produces the logits; unit scale spreads logits over tens of units, so
 *   sampling is not a near-uniform draw over 128k tokens;
 * - every other matrix ~ N(0, (2/sqrt(ne0))²), i.e. twice the usual 1/sqrt(fan_in). With
 *   tied embeddings the logit of the current token is boosted by its own embedding in the
 *   residual stream; at gain 1 (or with 0.02-style init) that term dominates and greedy
 *   decoding just repeats the input token, while at gain 2 each layer changes the residual
 *   stream enough that greedy output varies with the context (checked with llama.cpp).
 *
 * Each tensor has its own random stream derived from the seed and the tensor name.
 *
 * @example
 * ```ts
 * import { makeModel } from "./presets.ts";
 *
 * const { path, bytes } = await makeModel({ preset: "tiny", out: "/tmp/tiny.gguf" });
 * await makeModel({ preset: "small", out: "/tmp/small-embed.gguf", embedding: true });
 * ```
 *
 * @module
 */

import { readGgufHeader } from "./reader.ts";
import { createRng, deriveSeed, fillNormal } from "./random.ts";
import { encodeF16, quantizeQ8_0 } from "./quantize.ts";
import {
  elementCount,
  GgmlType,
  type GgufKv,
  GgufType,
  kvF32,
  kvI32,
  kvString,
  kvU32,
  Q8_0_BLOCK_BYTES,
  QK8_0,
  tensorByteSize,
} from "./types.ts";
import { type TensorSpec, writeGguf } from "./writer.ts";
import { applyChatFormat, CHAT_FORMATS, type ChatFormatName } from "./make_model_formats.ts";
import { endOfTurnIds, planReplyLength } from "./reply_length.ts";
import { makeMtpModel } from "./mtp.ts";
import { type ArchVariant, makeArchVariantModel } from "./arch_variants.ts";

/** Names of the built-in presets. */
export type PresetName = "tiny" | "small" | "1b";
/** Storage type of the 2-D weights. */
export type ModelDtype = "f32" | "f16" | "q8_0";

/** Shape and defaults of a preset. */
export type ModelPreset = {
  name: PresetName;
  nLayer: number;
  nEmbd: number;
  nHead: number;
  nHeadKv: number;
  nFf: number;
  contextLength: number;
  dtype: ModelDtype;
};

/**
 * `tiny`: minimal shapes for fast tests. `small`: SmolLM2-135M shapes, for realistic load
 * and speed measurements. `1b`: Llama-3.2-1B shapes in F16 (2.5 GB), the GPU benchmark's model.
 */
export const PRESETS: Readonly<Record<PresetName, Readonly<ModelPreset>>> = {
  tiny: {
    name: "tiny",
    nLayer: 2,
    nEmbd: 64,
    nHead: 4,
    nHeadKv: 2,
    nFf: 128,
    contextLength: 32768,
    dtype: "f32",
  },
  small: {
    name: "small",
    nLayer: 30,
    nEmbd: 576,
    nHead: 9,
    nHeadKv: 3,
    nFf: 1536,
    contextLength: 8192,
    dtype: "q8_0",
  },
  "1b": {
    name: "1b",
    nLayer: 16,
    nEmbd: 2048,
    nHead: 32,
    nHeadKv: 8,
    nFf: 8192,
    contextLength: 8192,
    dtype: "f16",
  },
};

/** Seed used when none is given, so default models are reproducible. */
export const DEFAULT_SEED = 42;

/** Meta's Llama-3 Instruct chat template (the `\n` are Jinja escapes, not newlines). */
export const LLAMA3_CHAT_TEMPLATE: string =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = " +
  "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] " +
  "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}" +
  "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}" +
  "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/** Location of the vocab-only GGUF whose tokenizer every preset uses. */
export const LLAMA_BPE_VOCAB_URL: URL = new URL("./assets/llama-bpe.vocab.gguf", import.meta.url);

/** Options for {@linkcode makeModel}. */
export type MakeModelOptions = {
  preset: PresetName;
  /** Output path; written atomically (temporary file, then rename). */
  out: string;
  /** Mark the model as an embedding model (`llama.pooling_type` = 1, mean pooling). */
  embedding?: boolean;
  /** Type of the 2-D weights; defaults to the preset's. Norms stay F32. */
  dtype?: ModelDtype;
  seed?: number;
  /** `general.name`; defaults to `hearth-<preset>` (plus `-embed` for embedding models). */
  name?: string;
  /**
   * A tool-calling family's chat template and marker tokens (see `make_model_formats.ts`); without it
   * the model has the plain Llama-3 template.
   */
  chatFormat?: ChatFormatName;
  /**
   * Make the random model end its replies after about this many tokens (it emits its
   * end-of-turn token with a probability of roughly 1/N per step), so agents driven by it get
   * answers that finish instead of running into the output limit. See `reply_length.ts`.
   */
  replyLength?: number;
  /**
   * Write a `glm4moe` model with this many multi-token-prediction (NextN) blocks after a
   * one-block trunk, for speculative decoding tests (only 1 is supported). See `mtp.ts`.
   */
  mtpLayers?: number;
  /** Override the preset's layer count (the GPU smoke decode uses a one-layer `tiny`). */
  layers?: number;
  /**
   * The model's recommended sampling, as `general.sampling.*` keys (`temp`, `top_k`, `top_p`,
   * `min_p`, ...): what a request that names no sampling field gets.
   */
  sampling?: Record<string, number>;
  /** Type the chat format's markers as control tokens (see `applyChatFormat`). */
  controlMarkers?: boolean;
  /**
   * Override the preset's training context (`llama.context_length`): a model whose full context
   * x 32 sequences cannot fit in memory tests `--max-seq-len auto` (`lib/engine/fit.ts`).
   */
  contextLength?: number;
  /**
   * Write another llama.cpp architecture with the preset's shapes and tokenizer: `gemma2`
   * (sliding-window attention) or `lfm2` (hybrid short-convolution + attention). See
   * `arch_variants.ts`. Default `llama`.
   */
  arch?: "llama" | ArchVariant;
  /** The attention window of an `arch` variant (`gemma2` default 32; `lfm2` has none unless set). */
  slidingWindow?: number;
};

/** What {@linkcode makeModel} wrote. */
export type MakeModelResult = {
  path: string;
  bytes: number;
  tensorCount: number;
  parameterCount: number;
  dtype: ModelDtype;
  seed: number;
};

/** A tensor of a generated model: its shape, storage type and how it is initialised. */
export type PlannedTensor = {
  name: string;
  type: number;
  dims: number[];
  /** `"ones"` for norms, else the standard deviation of the normal init. */
  init: "ones" | { std: number };
  /** Rewrites a chunk of the initialised values in place (`offset`: index of its first value). */
  edit?: (values: Float32Array, offset: number) => void;
};

/** Init std of the projection matrices is `WEIGHT_GAIN / sqrt(fan_in)`; see the module doc. */
const WEIGHT_GAIN = 2;

const DTYPE_GGML: Readonly<Record<ModelDtype, number>> = {
  f32: GgmlType.F32,
  f16: GgmlType.F16,
  q8_0: GgmlType.Q8_0,
};

/** `general.file_type` (llama_ftype) for each dtype: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0. */
const DTYPE_FILE_TYPE: Readonly<Record<ModelDtype, number>> = { f32: 0, f16: 1, q8_0: 7 };

/** The tensors of a preset, in file order (ggml dims: ne0 first). */
export function planTensors(
  preset: ModelPreset,
  nVocab: number,
  dtype: ModelDtype = preset.dtype,
): PlannedTensor[] {
  const { nEmbd, nFf, nHead, nHeadKv, nLayer } = preset;
  const nEmbdKv = (nEmbd / nHead) * nHeadKv;
  const wType = DTYPE_GGML[dtype];
  const norm = (name: string): PlannedTensor => ({
    name,
    type: GgmlType.F32,
    dims: [nEmbd],
    init: "ones",
  });
  const mat = (name: string, ne0: number, ne1: number, std = WEIGHT_GAIN / Math.sqrt(ne0)) => ({
    name,
    type: wType,
    dims: [ne0, ne1],
    init: { std },
  });
  const out: PlannedTensor[] = [
    mat("token_embd.weight", nEmbd, nVocab, 1),
    norm("output_norm.weight"),
  ];
  for (let i = 0; i < nLayer; i++) {
    out.push(
      norm(`blk.${i}.attn_norm.weight`),
      mat(`blk.${i}.attn_q.weight`, nEmbd, nEmbd),
      mat(`blk.${i}.attn_k.weight`, nEmbd, nEmbdKv),
      mat(`blk.${i}.attn_v.weight`, nEmbd, nEmbdKv),
      mat(`blk.${i}.attn_output.weight`, nEmbd, nEmbd),
      norm(`blk.${i}.ffn_norm.weight`),
      mat(`blk.${i}.ffn_gate.weight`, nEmbd, nFf),
      mat(`blk.${i}.ffn_up.weight`, nEmbd, nFf),
      mat(`blk.${i}.ffn_down.weight`, nFf, nEmbd),
    );
  }
  return out;
}

let vocabCache: Promise<[string, GgufKv][]> | undefined;

/**
 * The `tokenizer.*` KVs of the bundled Llama-3 vocab, in file order with their exact GGUF
 * types. Cached: the 7.8 MB vocab is parsed once per process.
 */
export function loadLlamaBpeVocab(): Promise<[string, GgufKv][]> {
  vocabCache ??= readGgufHeader(LLAMA_BPE_VOCAB_URL).then((h) =>
    [...h.metadata].filter(([key]) => key.startsWith("tokenizer."))
  );
  vocabCache.catch(() => {
    vocabCache = undefined;
  });
  return vocabCache;
}

/** All metadata of a generated model, in file order. */
export async function modelMetadata(
  preset: ModelPreset,
  opts: {
    dtype?: ModelDtype;
    embedding?: boolean;
    name?: string;
    chatFormat?: ChatFormatName;
    controlMarkers?: boolean;
    sampling?: Record<string, number>;
  } = {},
): Promise<Map<string, GgufKv>> {
  const dtype = opts.dtype ?? preset.dtype;
  const vocab = await loadLlamaBpeVocab();
  const tokenizer = new Map(vocab);
  if (opts.chatFormat) {
    applyChatFormat(tokenizer, opts.chatFormat, { controlMarkers: opts.controlMarkers });
  }
  const tokens = tokenizer.get("tokenizer.ggml.tokens");
  if (tokens?.type !== GgufType.ARRAY || tokens.itemType !== GgufType.STRING) {
    throw new Error("bundled vocab has no tokenizer.ggml.tokens string array");
  }
  const tokenList = tokens.value;
  if (!tokenizer.has("tokenizer.chat_template")) {
    tokenizer.set("tokenizer.chat_template", kvString(LLAMA3_CHAT_TEMPLATE));
  }
  if (!tokenizer.has("tokenizer.ggml.eot_token_id")) {
    const eot = Array.prototype.indexOf.call(tokenList, "<|eot_id|>");
    if (eot < 0) throw new Error("bundled vocab has no <|eot_id|> token");
    tokenizer.set("tokenizer.ggml.eot_token_id", kvU32(eot));
  }

  const { nEmbd, nHead } = preset;
  const md = new Map<string, GgufKv>([
    ["general.architecture", kvString("llama")],
    [
      "general.name",
      kvString(
        opts.name ??
          `hearth-${preset.name}${opts.chatFormat ? `-${opts.chatFormat}` : ""}${
            opts.embedding ? "-embed" : ""
          }`,
      ),
    ],
    ["general.file_type", kvU32(DTYPE_FILE_TYPE[dtype])],
    ["general.alignment", kvU32(32)],
    ["llama.context_length", kvU32(preset.contextLength)],
    ["llama.embedding_length", kvU32(nEmbd)],
    ["llama.block_count", kvU32(preset.nLayer)],
    ["llama.feed_forward_length", kvU32(preset.nFf)],
    ["llama.attention.head_count", kvU32(nHead)],
    ["llama.attention.head_count_kv", kvU32(preset.nHeadKv)],
    ["llama.rope.dimension_count", kvU32(nEmbd / nHead)],
    ["llama.rope.freq_base", kvF32(500000)],
    ["llama.attention.layer_norm_rms_epsilon", kvF32(1e-5)],
    ["llama.vocab_size", kvU32(tokenList.length)],
  ]);
  if (opts.embedding) md.set("llama.pooling_type", kvU32(1));
  // llama.cpp reads the counts as int32 and the rest as float32.
  for (const [key, v] of Object.entries(opts.sampling ?? {})) {
    const whole = key === "top_k" || key === "penalty_last_n" || key === "mirostat";
    md.set(`general.sampling.${key}`, whole ? kvI32(v) : kvF32(v));
  }
  for (const [key, kv] of tokenizer) md.set(key, kv);
  return md;
}

// 256k values: a multiple of the Q8_0 block and even (normals are drawn in pairs, so chunk
// boundaries do not change the stream), small enough to stay cache-friendly, large enough
// that per-chunk overhead is negligible.
const CHUNK = 1 << 18;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function f32Bytes(src: Float32Array, out: Uint8Array): Uint8Array {
  const n = src.length * 4;
  if (LITTLE_ENDIAN) return new Uint8Array(src.buffer, src.byteOffset, n);
  const view = new DataView(out.buffer, out.byteOffset, n);
  for (let i = 0; i < src.length; i++) view.setFloat32(i * 4, src[i], true);
  return out.subarray(0, n);
}

/** Chunks of encoded data for one tensor; buffers are reused between chunks. */
export function* tensorChunks(t: PlannedTensor, seed: number): Generator<Uint8Array> {
  const total = elementCount(t.dims);
  const values = new Float32Array(Math.min(CHUNK, total));
  const bytes = new Uint8Array(values.length * 4);
  const rng = t.init === "ones" ? undefined : createRng(deriveSeed(seed, t.name));
  if (t.init === "ones") values.fill(1);
  for (let done = 0; done < total; done += CHUNK) {
    const n = Math.min(CHUNK, total - done);
    const chunk = values.subarray(0, n);
    if (rng && t.init !== "ones") fillNormal(rng, chunk, 0, t.init.std); // norms stay 1.0
    t.edit?.(chunk, done);
    if (t.type === GgmlType.F32) yield f32Bytes(chunk, bytes);
    else if (t.type === GgmlType.F16) yield encodeF16(chunk, bytes).subarray(0, n * 2);
    else if (t.type === GgmlType.Q8_0) {
      yield quantizeQ8_0(chunk, bytes).subarray(0, (n / QK8_0) * Q8_0_BLOCK_BYTES);
    } else throw new Error(`cannot generate ggml type ${t.type}`);
  }
}

/**
 * Write a seeded synthetic llama model for `preset` to `out`. Equal options always give
 * byte-identical files.
 */
export async function makeModel(opts: MakeModelOptions): Promise<MakeModelResult> {
  // hasOwn, not a lookup: "constructor" or "toString" must not pass as a preset or dtype.
  if (!Object.hasOwn(PRESETS, opts.preset)) {
    throw new Error(
      `unknown preset "${opts.preset}" (expected one of: ${Object.keys(PRESETS).join(", ")})`,
    );
  }
  if (opts.layers !== undefined && !(Number.isInteger(opts.layers) && opts.layers >= 1)) {
    throw new Error(`layers must be a positive integer, got ${opts.layers}`);
  }
  if (
    opts.contextLength !== undefined &&
    !(Number.isInteger(opts.contextLength) && opts.contextLength >= 1 &&
      opts.contextLength < 2 ** 32)
  ) {
    throw new Error(`contextLength must be a positive 32-bit integer, got ${opts.contextLength}`);
  }
  const base = PRESETS[opts.preset];
  const preset = {
    ...base,
    nLayer: opts.layers ?? base.nLayer,
    contextLength: opts.contextLength ?? base.contextLength,
  };
  const dtype = opts.dtype ?? preset.dtype;
  if (!Object.hasOwn(DTYPE_GGML, dtype)) {
    throw new Error(`unknown dtype "${dtype}" (f32, f16 or q8_0)`);
  }
  if (
    opts.chatFormat !== undefined && !(CHAT_FORMATS as readonly string[]).includes(opts.chatFormat)
  ) {
    throw new Error(`unknown chat format "${opts.chatFormat}" (${CHAT_FORMATS.join(", ")})`);
  }
  if (opts.arch !== undefined && opts.arch !== "llama") return makeArchVariantModel(opts);
  if (opts.slidingWindow !== undefined) {
    throw new Error("slidingWindow needs an arch variant (gemma2 or lfm2)");
  }
  if (opts.mtpLayers) return makeMtpModel(opts);
  const seed = opts.seed ?? DEFAULT_SEED;
  // A reply length is planned for plain sampling at temperature 1 over the whole vocabulary; the
  // model recommends exactly that (`general.sampling.*`), or the common defaults' top-k and min-p
  // would make its end-of-turn token win at once.
  const sampling = opts.sampling ??
    (opts.replyLength !== undefined ? { temp: 1, top_k: 0, top_p: 1, min_p: 0 } : undefined);
  const metadata = await modelMetadata(preset, { ...opts, dtype, sampling });
  const nVocab = metadata.get("llama.vocab_size")?.value as number;
  const plan = planTensors(preset, nVocab, dtype);
  if (opts.replyLength !== undefined) {
    const eog = endOfTurnIds(metadata);
    planReplyLength(plan, preset.nEmbd, eog, opts.replyLength);
  }
  return await writePlan(opts.out, metadata, plan, (t) => tensorChunks(t, seed), dtype, seed);
}

/** Writes a planned model (tensor data produced lazily by `chunks`) and describes the file. */
export async function writePlan<T extends { name: string; type: number; dims: number[] }>(
  out: string,
  metadata: Parameters<typeof writeGguf>[1]["metadata"],
  plan: T[],
  chunks: (t: T) => Iterable<Uint8Array>,
  dtype: ModelDtype,
  seed: number,
): Promise<MakeModelResult> {
  const tensors: TensorSpec[] = plan.map((t) => {
    tensorByteSize(t.type, t.dims); // fail early on shapes the type cannot hold
    return { name: t.name, type: t.type, dims: t.dims, data: () => chunks(t) };
  });
  await writeGguf(out, { metadata, tensors });
  const { size } = await Deno.stat(out);
  return {
    path: out,
    bytes: size,
    tensorCount: plan.length,
    parameterCount: plan.reduce((sum, t) => sum + elementCount(t.dims), 0),
    dtype,
    seed,
  };
}
