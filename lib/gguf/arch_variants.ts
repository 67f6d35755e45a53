/**
 * Tiny test models of two architectures whose memory llama.cpp cannot trim like a plain KV cache,
 * for prompt-cache tests (checkpoints instead of `llama_memory_seq_rm`):
 *
 * - `gemma2`: interleaved sliding-window attention (iSWA). Of llama.cpp's iSWA architectures it
 *   needs the fewest tensors beyond llama's (two extra norms per block, tied output) and no extra
 *   required keys; the default pattern makes every second block full attention, so both of the
 *   iSWA cache's halves (base and SWA) hold cells. The window is small (`DEFAULT_SLIDING_WINDOW`)
 *   so a test sequence passes it in a few dozen tokens.
 * - `lfm2`: hybrid short-convolution + attention (llama.cpp's `llama_memory_hybrid`: a recurrent
 *   state per sequence beside a KV cache). Blocks alternate, convolution first
 *   (`attention.head_count_kv` is 0 on the convolution blocks, as LFM2 files mark them); every FFN
 *   is dense. With `slidingWindow` its attention blocks are SWA too (hybrid iSWA memory).
 *
 * Both carry the preset's shapes, the bundled Llama-3 tokenizer and chat template (or a
 * `chatFormat`'s), and seeded random weights initialised as `presets.ts` does (norms 1, token
 * embeddings N(0,1), projections N(0, (2/sqrt(fan_in))²)).
 *
 * @example
 * ```ts
 * import { makeModel } from "./presets.ts";
 * await makeModel({ preset: "tiny", arch: "gemma2", out: "/tmp/tiny-gemma2.gguf" });
 * await makeModel({ preset: "tiny", arch: "lfm2", out: "/tmp/tiny-lfm2.gguf", dtype: "q8_0" });
 * ```
 * @module
 */
import { GgmlType, type GgufKv, GgufType, kvArray, kvF32, kvString, kvU32 } from "./types.ts";
import {
  DEFAULT_SEED,
  type MakeModelOptions,
  type MakeModelResult,
  type ModelDtype,
  modelMetadata,
  type ModelPreset,
  type PlannedTensor,
  PRESETS,
  tensorChunks,
  writePlan,
} from "./presets.ts";

/** Architectures `makeModel({ arch })` writes besides the presets' `llama`. */
export const ARCH_VARIANTS = ["gemma2", "lfm2"] as const;
/** One of {@linkcode ARCH_VARIANTS}. */
export type ArchVariant = typeof ARCH_VARIANTS[number];

/** The gemma2 window when none is given: small, so tests pass it quickly. */
export const DEFAULT_SLIDING_WINDOW = 32;
/** LFM2's convolution length (`shortconv.l_cache`), as the released LFM2 models. */
export const SHORTCONV_L_CACHE = 3;

/** Init std of the projection matrices is `WEIGHT_GAIN / sqrt(fan_in)`, as in `presets.ts`. */
const WEIGHT_GAIN = 2;

const DTYPE_GGML: Readonly<Record<ModelDtype, number>> = {
  f32: GgmlType.F32,
  f16: GgmlType.F16,
  q8_0: GgmlType.Q8_0,
};
const DTYPE_FILE_TYPE: Readonly<Record<ModelDtype, number>> = { f32: 0, f16: 1, q8_0: 7 };

/** Whether block `i` of a tiny lfm2 model is attention (else short convolution). */
export function lfm2IsAttention(i: number): boolean {
  return i % 2 === 1;
}

/** The tensors of an arch variant, in file order (ggml dims: ne0 first). */
export function planArchTensors(
  arch: ArchVariant,
  preset: ModelPreset,
  nVocab: number,
  dtype: ModelDtype,
): PlannedTensor[] {
  const { nEmbd, nFf, nHead, nHeadKv, nLayer } = preset;
  const headDim = nEmbd / nHead;
  const nEmbdKv = headDim * nHeadKv;
  const w = DTYPE_GGML[dtype];
  const ones = (name: string, n = nEmbd): PlannedTensor => ({
    name,
    type: GgmlType.F32,
    dims: [n],
    init: "ones",
  });
  const mat = (name: string, ne0: number, ne1: number, std = WEIGHT_GAIN / Math.sqrt(ne0)) => ({
    name,
    type: w,
    dims: [ne0, ne1],
    init: { std },
  });
  const ffn = (i: number) => [
    mat(`blk.${i}.ffn_gate.weight`, nEmbd, nFf),
    mat(`blk.${i}.ffn_up.weight`, nEmbd, nFf),
    mat(`blk.${i}.ffn_down.weight`, nFf, nEmbd),
  ];
  const qkvo = (i: number) => [
    mat(`blk.${i}.attn_q.weight`, nEmbd, nEmbd),
    mat(`blk.${i}.attn_k.weight`, nEmbd, nEmbdKv),
    mat(`blk.${i}.attn_v.weight`, nEmbd, nEmbdKv),
    mat(`blk.${i}.attn_output.weight`, nEmbd, nEmbd),
  ];
  // Both tie the output matrix to the token embeddings (no `output.weight`).
  const out: PlannedTensor[] = [mat("token_embd.weight", nEmbd, nVocab, 1)];
  if (arch === "gemma2") {
    out.push(ones("output_norm.weight"));
    for (let i = 0; i < nLayer; i++) {
      out.push(
        ones(`blk.${i}.attn_norm.weight`),
        ...qkvo(i),
        ones(`blk.${i}.post_attention_norm.weight`),
        ones(`blk.${i}.ffn_norm.weight`),
        ...ffn(i),
        ones(`blk.${i}.post_ffw_norm.weight`),
      );
    }
    return out;
  }
  // lfm2 names its final norm `token_embd_norm` (llama.cpp keeps the converter's name).
  out.push(ones("token_embd_norm.weight"));
  for (let i = 0; i < nLayer; i++) {
    out.push(ones(`blk.${i}.attn_norm.weight`));
    if (lfm2IsAttention(i)) {
      out.push(
        ones(`blk.${i}.attn_q_norm.weight`, headDim),
        ones(`blk.${i}.attn_k_norm.weight`, headDim),
        ...qkvo(i),
      );
    } else {
      out.push(
        // ggml's ssm_conv reads an F32 kernel (converted LFM2 files keep it F32 too).
        {
          ...mat(`blk.${i}.shortconv.conv.weight`, SHORTCONV_L_CACHE, nEmbd),
          type: GgmlType.F32,
        },
        mat(`blk.${i}.shortconv.in_proj.weight`, nEmbd, 3 * nEmbd),
        mat(`blk.${i}.shortconv.out_proj.weight`, nEmbd, nEmbd),
      );
    }
    out.push(ones(`blk.${i}.ffn_norm.weight`), ...ffn(i));
  }
  return out;
}

/** The architecture's keys, then the preset's tokenizer (and chat template). */
async function archMetadata(
  arch: ArchVariant,
  preset: ModelPreset,
  opts: MakeModelOptions,
  dtype: ModelDtype,
): Promise<Map<string, GgufKv>> {
  const base = await modelMetadata(preset, {
    dtype,
    chatFormat: opts.chatFormat,
    controlMarkers: opts.controlMarkers,
    sampling: opts.sampling,
  });
  const nVocab = base.get("llama.vocab_size")?.value as number;
  const { nEmbd, nHead, nLayer } = preset;
  const a = arch;
  const window = opts.slidingWindow ?? (arch === "gemma2" ? DEFAULT_SLIDING_WINDOW : undefined);
  const md = new Map<string, GgufKv>([
    ["general.architecture", kvString(a)],
    [
      "general.name",
      kvString(
        opts.name ?? `hearth-${preset.name}-${a}${opts.chatFormat ? `-${opts.chatFormat}` : ""}`,
      ),
    ],
    ["general.file_type", kvU32(DTYPE_FILE_TYPE[dtype])],
    ["general.alignment", kvU32(32)],
    [`${a}.context_length`, kvU32(preset.contextLength)],
    [`${a}.embedding_length`, kvU32(nEmbd)],
    [`${a}.block_count`, kvU32(nLayer)],
    [`${a}.feed_forward_length`, kvU32(preset.nFf)],
    [`${a}.attention.head_count`, kvU32(nHead)],
    [`${a}.attention.layer_norm_rms_epsilon`, kvF32(1e-6)],
    [`${a}.vocab_size`, kvU32(nVocab)],
  ]);
  if (arch === "gemma2") {
    md.set(`${a}.attention.head_count_kv`, kvU32(preset.nHeadKv));
    md.set(`${a}.rope.freq_base`, kvF32(10000));
    md.set(`${a}.attn_logit_softcapping`, kvF32(50));
    md.set(`${a}.final_logit_softcapping`, kvF32(30));
  } else {
    // Per block: 0 KV heads marks a short-convolution block.
    const kv = Array.from({ length: nLayer }, (_, i) => lfm2IsAttention(i) ? preset.nHeadKv : 0);
    md.set(`${a}.attention.head_count_kv`, kvArray({ itemType: GgufType.UINT32, value: kv }));
    md.set(`${a}.rope.freq_base`, kvF32(1000000));
    md.set(`${a}.shortconv.l_cache`, kvU32(SHORTCONV_L_CACHE));
  }
  if (window !== undefined) md.set(`${a}.attention.sliding_window`, kvU32(window));
  for (const [key, kv] of base) {
    if (key.startsWith("general.sampling.") || key.startsWith("tokenizer.")) md.set(key, kv);
  }
  return md;
}

/**
 * Writes the `opts.arch` variant of `opts.preset` (shapes, context, tokenizer, chat format).
 * Equal options give byte-identical files. Called by `makeModel` when `arch` is not `llama`.
 */
export async function makeArchVariantModel(opts: MakeModelOptions): Promise<MakeModelResult> {
  const arch = opts.arch as ArchVariant;
  if (!(ARCH_VARIANTS as readonly string[]).includes(arch)) {
    throw new Error(`unknown arch "${arch}" (llama, ${ARCH_VARIANTS.join(", ")})`);
  }
  if (opts.mtpLayers) throw new Error(`an ${arch} test model cannot have MTP layers`);
  if (opts.embedding) throw new Error(`an ${arch} test model cannot be an embedding model`);
  if (opts.replyLength !== undefined) {
    throw new Error(`reply length is not supported with arch ${arch}`);
  }
  const w = opts.slidingWindow;
  if (w !== undefined && !(Number.isInteger(w) && w >= 1 && w < 2 ** 32)) {
    throw new Error(`slidingWindow must be a positive 32-bit integer, got ${w}`);
  }
  const base = PRESETS[opts.preset];
  const preset = {
    ...base,
    nLayer: opts.layers ?? base.nLayer,
    contextLength: opts.contextLength ?? base.contextLength,
  };
  const dtype = opts.dtype ?? preset.dtype;
  const seed = opts.seed ?? DEFAULT_SEED;
  const metadata = await archMetadata(arch, preset, opts, dtype);
  const nVocab = metadata.get(`${arch}.vocab_size`)?.value as number;
  const plan = planArchTensors(arch, preset, nVocab, dtype);
  return await writePlan(opts.out, metadata, plan, (t) => tensorChunks(t, seed), dtype, seed);
}
