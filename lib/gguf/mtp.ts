/**
 * A tiny test model with a multi-token-prediction (MTP, "NextN") head that llama.cpp can draft
 * with (`LLAMA_CONTEXT_TYPE_MTP`). See `lib/engine/speculative/MTP.md` for the call sequence.
 *
 * Architecture: `glm4moe` (GLM-4.5), the plainest of the architectures llama.cpp builds an MTP
 * graph for: a pure attention trunk, so rejected drafts roll back with `llama_memory_seq_rm`
 * (the Qwen3.5 / Qwen3-Next MTP models have recurrent trunks that need snapshots instead).
 * The file has `block_count = nTrunk + 1` blocks; the last one is the MTP block
 * (`glm4moe.nextn_predict_layers = 1`, llama.cpp's glm4moe graph supports exactly one). Its
 * feed-forward must be MoE (the graph asserts `ffn_gate_inp`), so the trunk is all dense
 * (`leading_dense_block_count = nTrunk`) and only the MTP block has experts (2, one used, plus
 * one shared expert).
 *
 * Weights are chosen so the head predicts what the trunk will say, mostly:
 * - the trunk is context-free: every `attn_output` is zero, so the last hidden state depends only
 *   on the current token, `h(x) = outnorm(e_x + FFN(norm(e_x)))`, and greedy decoding follows a
 *   fixed token-to-token map `f`;
 * - token embedding rows have RMS exactly 1, so the head's `enorm(e_x)` equals `e_x`;
 * - the MTP block copies the trunk: `eh_proj` is the identity on the embedding half, its
 *   attention output is zero, its shared expert has the trunk FFN's weights, its routed experts
 *   output zero (`ffn_down_exps` = 0), and it reuses `output_norm` and the tied output matrix.
 *   So fed token `x` it predicts `f(x)`, exactly the trunk's next token, and its own `h_nextn`
 *   equals the trunk's `h(x)`;
 * - the hidden-state half of `eh_proj` is small noise (`MTP_H_NOISE`), so the previous hidden
 *   state does enter the head and flips some close argmaxes: drafts are right most of the time
 *   and wrong sometimes, and both the accept and the rollback paths of a scheduler get exercised.
 *
 * The trunk FFN's down projection is scaled up (`FFN_DOWN_GAIN`) so `f` is not the identity (with
 * tied embeddings a token's own embedding otherwise wins the logits and greedy text repeats).
 *
 * @example
 * ```ts
 * import { makeModel } from "./presets.ts";
 * await makeModel({ preset: "tiny", out: "/tmp/tiny-mtp.gguf", mtpLayers: 1 });
 * ```
 * @module
 */
import { createRng, deriveSeed, fillNormal } from "./random.ts";
import { encodeF16, quantizeQ8_0 } from "./quantize.ts";
import {
  elementCount,
  GgmlType,
  type GgufKv,
  kvBool,
  kvF32,
  kvString,
  kvU32,
  Q8_0_BLOCK_BYTES,
  QK8_0,
} from "./types.ts";
import {
  DEFAULT_SEED,
  type MakeModelOptions,
  type MakeModelResult,
  type ModelDtype,
  modelMetadata,
  PRESETS,
  writePlan,
} from "./presets.ts";

/** The llama.cpp architecture of MTP test models. */
export const MTP_ARCH = "glm4moe";
/** Trunk blocks of an MTP test model (the MTP block comes after them). */
export const MTP_TRUNK_LAYERS = 1;
/** Routed experts in the MTP block, and how many each token uses. */
export const MTP_EXPERTS = 2;
export const MTP_EXPERTS_USED = 1;
/** Std of the hidden-state half of `nextn.eh_proj` (0 would make every draft right). */
export const MTP_H_NOISE = 0.005;
/** `ffn_down` init std is `FFN_DOWN_GAIN / sqrt(n_ff)`; see the module doc. */
const FFN_DOWN_GAIN = 4;
/** Init std of the other projections is `WEIGHT_GAIN / sqrt(fan_in)`, as in `presets.ts`. */
const WEIGHT_GAIN = 2;

const DTYPE_GGML: Readonly<Record<ModelDtype, number>> = {
  f32: GgmlType.F32,
  f16: GgmlType.F16,
  q8_0: GgmlType.Q8_0,
};
const DTYPE_FILE_TYPE: Readonly<Record<ModelDtype, number>> = { f32: 0, f16: 1, q8_0: 7 };

/** How a tensor's values are made. `stream` names the random stream (default: the tensor). */
type Init =
  | { kind: "ones" }
  | { kind: "zeros" }
  | { kind: "normal"; std: number; stream?: string; rowRms?: number }
  | { kind: "ehProj"; nEmbd: number; noise: number };

type MtpTensor = { name: string; type: number; dims: number[]; init: Init };

/** The tensors of an MTP test model, in file order (ggml dims: ne0 first). */
export function planMtpTensors(
  shape: { nEmbd: number; nHead: number; nHeadKv: number; nFf: number },
  nVocab: number,
  dtype: ModelDtype,
): MtpTensor[] {
  const { nEmbd, nHead, nHeadKv, nFf } = shape;
  const nEmbdKv = (nEmbd / nHead) * nHeadKv;
  const w = DTYPE_GGML[dtype];
  const f32 = GgmlType.F32;
  const ones = (name: string, n = nEmbd): MtpTensor => ({
    name,
    type: f32,
    dims: [n],
    init: { kind: "ones" },
  });
  const mat = (name: string, dims: number[], init?: Init): MtpTensor => ({
    name,
    type: w,
    dims,
    init: init ?? { kind: "normal", std: WEIGHT_GAIN / Math.sqrt(dims[0]) },
  });
  const zeros = (name: string, dims: number[]): MtpTensor => mat(name, dims, { kind: "zeros" });
  const attention = (i: number): MtpTensor[] => [
    ones(`blk.${i}.attn_norm.weight`),
    mat(`blk.${i}.attn_q.weight`, [nEmbd, nEmbd]),
    mat(`blk.${i}.attn_k.weight`, [nEmbd, nEmbdKv]),
    mat(`blk.${i}.attn_v.weight`, [nEmbd, nEmbdKv]),
    zeros(`blk.${i}.attn_output.weight`, [nEmbd, nEmbd]),
    ones(`blk.${i}.post_attention_norm.weight`),
  ];
  const downStd = FFN_DOWN_GAIN / Math.sqrt(nFf);
  const out: MtpTensor[] = [
    mat("token_embd.weight", [nEmbd, nVocab], { kind: "normal", std: 1, rowRms: 1 }),
    ones("output_norm.weight"),
  ];
  for (let i = 0; i < MTP_TRUNK_LAYERS; i++) {
    out.push(
      ...attention(i),
      mat(`blk.${i}.ffn_gate.weight`, [nEmbd, nFf]),
      mat(`blk.${i}.ffn_up.weight`, [nEmbd, nFf]),
      mat(`blk.${i}.ffn_down.weight`, [nFf, nEmbd], { kind: "normal", std: downStd }),
    );
  }
  // The MTP block copies the last trunk block's FFN into its shared expert.
  const m = MTP_TRUNK_LAYERS;
  const last = MTP_TRUNK_LAYERS - 1;
  out.push(
    ...attention(m),
    mat(`blk.${m}.ffn_gate_inp.weight`, [nEmbd, MTP_EXPERTS], { kind: "normal", std: 1 }),
    { name: `blk.${m}.exp_probs_b.bias`, type: f32, dims: [MTP_EXPERTS], init: { kind: "zeros" } },
    mat(`blk.${m}.ffn_gate_exps.weight`, [nEmbd, nFf, MTP_EXPERTS]),
    mat(`blk.${m}.ffn_up_exps.weight`, [nEmbd, nFf, MTP_EXPERTS]),
    zeros(`blk.${m}.ffn_down_exps.weight`, [nFf, nEmbd, MTP_EXPERTS]),
    mat(`blk.${m}.ffn_gate_shexp.weight`, [nEmbd, nFf], {
      kind: "normal",
      std: WEIGHT_GAIN / Math.sqrt(nEmbd),
      stream: `blk.${last}.ffn_gate.weight`,
    }),
    mat(`blk.${m}.ffn_up_shexp.weight`, [nEmbd, nFf], {
      kind: "normal",
      std: WEIGHT_GAIN / Math.sqrt(nEmbd),
      stream: `blk.${last}.ffn_up.weight`,
    }),
    mat(`blk.${m}.ffn_down_shexp.weight`, [nFf, nEmbd], {
      kind: "normal",
      std: downStd,
      stream: `blk.${last}.ffn_down.weight`,
    }),
    mat(`blk.${m}.nextn.eh_proj.weight`, [2 * nEmbd, nEmbd], {
      kind: "ehProj",
      nEmbd,
      noise: MTP_H_NOISE,
    }),
    ones(`blk.${m}.nextn.enorm.weight`),
    ones(`blk.${m}.nextn.hnorm.weight`),
  );
  return out;
}

/** Metadata of an MTP test model: the preset's tokenizer and chat template, glm4moe keys. */
async function mtpMetadata(
  opts: MakeModelOptions,
  dtype: ModelDtype,
): Promise<Map<string, GgufKv>> {
  const preset = PRESETS[opts.preset];
  const base = await modelMetadata(preset, { dtype, chatFormat: opts.chatFormat });
  const nVocab = base.get("llama.vocab_size")?.value as number;
  const a = MTP_ARCH;
  const { nEmbd, nHead } = preset;
  const md = new Map<string, GgufKv>([
    ["general.architecture", kvString(a)],
    [
      "general.name",
      kvString(
        opts.name ?? `hearth-${preset.name}-mtp${opts.chatFormat ? `-${opts.chatFormat}` : ""}`,
      ),
    ],
    ["general.file_type", kvU32(DTYPE_FILE_TYPE[dtype])],
    ["general.alignment", kvU32(32)],
    [`${a}.context_length`, kvU32(preset.contextLength)],
    [`${a}.embedding_length`, kvU32(nEmbd)],
    [`${a}.block_count`, kvU32(MTP_TRUNK_LAYERS + 1)],
    [`${a}.nextn_predict_layers`, kvU32(1)],
    [`${a}.leading_dense_block_count`, kvU32(MTP_TRUNK_LAYERS)],
    [`${a}.feed_forward_length`, kvU32(preset.nFf)],
    [`${a}.expert_feed_forward_length`, kvU32(preset.nFf)],
    [`${a}.expert_count`, kvU32(MTP_EXPERTS)],
    [`${a}.expert_used_count`, kvU32(MTP_EXPERTS_USED)],
    [`${a}.expert_shared_count`, kvU32(1)],
    [`${a}.expert_weights_scale`, kvF32(1)],
    [`${a}.expert_weights_norm`, kvBool(true)],
    [`${a}.expert_gating_func`, kvU32(2)], // sigmoid, as GLM-4.5
    [`${a}.attention.head_count`, kvU32(nHead)],
    [`${a}.attention.head_count_kv`, kvU32(preset.nHeadKv)],
    [`${a}.rope.dimension_count`, kvU32(nEmbd / nHead)],
    [`${a}.rope.freq_base`, kvF32(500000)],
    [`${a}.attention.layer_norm_rms_epsilon`, kvF32(1e-5)],
    [`${a}.vocab_size`, kvU32(nVocab)],
  ]);
  for (const [key, kv] of base) if (key.startsWith("tokenizer.")) md.set(key, kv);
  return md;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Chunks of encoded data for one tensor. Chunks hold whole rows and whole Q8_0 blocks. */
function* chunks(t: MtpTensor, seed: number): Generator<Uint8Array> {
  const total = elementCount(t.dims);
  const ne0 = t.dims[0];
  const chunk = Math.min(total, ne0 * QK8_0 * 128); // whole rows, whole blocks, an even count
  const values = new Float32Array(chunk);
  const bytes = new Uint8Array(chunk * 4);
  const init = t.init;
  const rng = init.kind === "normal"
    ? createRng(deriveSeed(seed, init.stream ?? t.name))
    : init.kind === "ehProj"
    ? createRng(deriveSeed(seed, t.name))
    : undefined;
  for (let done = 0; done < total; done += chunk) {
    const n = Math.min(chunk, total - done);
    const v = values.subarray(0, n);
    switch (init.kind) {
      case "ones":
        v.fill(1);
        break;
      case "zeros":
        v.fill(0);
        break;
      case "normal":
        fillNormal(rng!, v, 0, init.std);
        if (init.rowRms !== undefined) {
          for (let r = 0; r < n; r += ne0) {
            let ss = 0;
            for (let i = r; i < r + ne0; i++) ss += v[i] * v[i];
            const k = init.rowRms / Math.sqrt(ss / ne0);
            for (let i = r; i < r + ne0; i++) v[i] *= k;
          }
        }
        break;
      case "ehProj": {
        // Row j (output j) reads [enorm(e); hnorm(h)]: 1 at column j, noise on the h half.
        fillNormal(rng!, v, 0, init.noise);
        for (let i = 0; i < n; i++) {
          const col = (done + i) % ne0;
          const row = Math.floor((done + i) / ne0);
          if (col < init.nEmbd) v[i] = col === row ? 1 : 0;
        }
        break;
      }
    }
    if (t.type === GgmlType.F32) {
      if (LITTLE_ENDIAN) yield new Uint8Array(v.buffer, v.byteOffset, n * 4);
      else {
        const dv = new DataView(bytes.buffer);
        for (let i = 0; i < n; i++) dv.setFloat32(i * 4, v[i], true);
        yield bytes.subarray(0, n * 4);
      }
    } else if (t.type === GgmlType.F16) yield encodeF16(v, bytes).subarray(0, n * 2);
    else if (t.type === GgmlType.Q8_0) {
      yield quantizeQ8_0(v, bytes).subarray(0, (n / QK8_0) * Q8_0_BLOCK_BYTES);
    } else throw new Error(`cannot generate ggml type ${t.type}`);
  }
}

/**
 * Writes the MTP test model for `opts.preset`'s shapes (embedding width, heads, FFN width,
 * context, tokenizer) with `MTP_TRUNK_LAYERS` trunk blocks and one MTP block. Equal options give
 * byte-identical files. Called by `makeModel` when `mtpLayers` is set.
 */
export async function makeMtpModel(opts: MakeModelOptions): Promise<MakeModelResult> {
  if (opts.mtpLayers !== 1) {
    throw new Error(
      `mtp layers ${opts.mtpLayers}: must be 1 (llama.cpp's ${MTP_ARCH} MTP graph runs one head)`,
    );
  }
  if (opts.embedding) throw new Error("an MTP test model cannot be an embedding model");
  if (opts.replyLength !== undefined) {
    throw new Error("reply length is not supported with MTP layers");
  }
  const preset = PRESETS[opts.preset];
  const dtype = opts.dtype ?? preset.dtype;
  const seed = opts.seed ?? DEFAULT_SEED;
  const metadata = await mtpMetadata(opts, dtype);
  const nVocab = metadata.get(`${MTP_ARCH}.vocab_size`)?.value as number;
  const plan = planMtpTensors(preset, nVocab, dtype);
  return await writePlan(opts.out, metadata, plan, (t) => chunks(t, seed), dtype, seed);
}
