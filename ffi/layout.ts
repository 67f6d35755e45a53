/**
 * C struct layouts of llama.cpp's by-value parameter structs, transcribed field by field from
 * `include/llama.h` of llama.cpp v0.5.0 (the build inside `@node-llama-cpp/linux-x64@3.22.1`).
 *
 * Offsets are computed with the x86-64 System V rules (each field aligned to its own size, the
 * struct padded to its largest member), so a layout is just the ordered field list; a test compiles
 * the real header with `offsetof` and compares every offset and size.
 *
 * @example
 * ```ts
 * import { contextParams, readStruct, writeStruct } from "./layout.ts";
 * const buf = new Uint8Array(contextParams.size);
 * writeStruct(contextParams, buf, { n_ctx: 4096, embeddings: true });
 * readStruct(contextParams, buf).n_ctx; // 4096
 * ```
 * @module
 */

/** C scalar kinds that appear in llama.cpp's parameter structs. */
export type FieldKind = "u8" | "bool" | "i32" | "u32" | "f32" | "i64" | "u64" | "ptr";

/** One field with its computed offset. */
export type Field = { name: string; kind: FieldKind; offset: number };

/** A struct: fields in declaration order, total size, and the Deno FFI struct type. */
export type StructLayout = {
  name: string;
  fields: Field[];
  size: number;
  align: number;
  ffi: { struct: Deno.NativeType[] };
};

const sizes: Record<FieldKind, number> = {
  u8: 1,
  bool: 1,
  i32: 4,
  u32: 4,
  f32: 4,
  i64: 8,
  u64: 8,
  ptr: 8,
};

const ffiTypes: Record<FieldKind, Deno.NativeType> = {
  u8: "u8",
  bool: "bool",
  i32: "i32",
  u32: "u32",
  f32: "f32",
  i64: "i64",
  u64: "u64",
  ptr: "pointer",
};

/** Lays out `[name, kind]` pairs the way a C compiler does on x86-64. */
export function defineStruct(name: string, decl: [string, FieldKind][]): StructLayout {
  let offset = 0;
  let align = 1;
  const fields: Field[] = [];
  for (const [fieldName, kind] of decl) {
    const size = sizes[kind];
    offset = Math.ceil(offset / size) * size;
    fields.push({ name: fieldName, kind, offset });
    offset += size;
    align = Math.max(align, size);
  }
  return {
    name,
    fields,
    size: Math.ceil(offset / align) * align,
    align,
    ffi: { struct: decl.map(([, kind]) => ffiTypes[kind]) },
  };
}

// Enums are `int` on this ABI, hence i32; callbacks and arrays are pointers.
export const modelParams: StructLayout = defineStruct("llama_model_params", [
  ["devices", "ptr"],
  ["tensor_buft_overrides", "ptr"],
  ["n_gpu_layers", "i32"],
  ["split_mode", "i32"],
  ["load_mode", "i32"],
  ["lazy_mode", "i32"],
  ["main_gpu", "i32"],
  ["tensor_split", "ptr"],
  ["progress_callback", "ptr"],
  ["progress_callback_user_data", "ptr"],
  ["kv_overrides", "ptr"],
  ["vocab_only", "bool"],
  ["check_tensors", "bool"],
  ["use_extra_bufts", "bool"],
  ["no_host", "bool"],
  ["no_alloc", "bool"],
  ["load_mtp", "bool"],
]);

export const contextParams: StructLayout = defineStruct("llama_context_params", [
  ["n_ctx", "u32"],
  ["n_batch", "u32"],
  ["n_ubatch", "u32"],
  ["n_seq_max", "u32"],
  ["n_rs_seq", "u32"],
  ["n_outputs_max", "u32"],
  ["n_outputs_max_per_seq", "u32"],
  ["n_threads", "i32"],
  ["n_threads_batch", "i32"],
  ["ctx_type", "i32"],
  ["rope_scaling_type", "i32"],
  ["pooling_type", "i32"],
  ["attention_type", "i32"],
  ["flash_attn_type", "i32"],
  ["rope_freq_base", "f32"],
  ["rope_freq_scale", "f32"],
  ["yarn_ext_factor", "f32"],
  ["yarn_attn_factor", "f32"],
  ["yarn_beta_fast", "f32"],
  ["yarn_beta_slow", "f32"],
  ["yarn_orig_ctx", "u32"],
  ["defrag_thold", "f32"],
  ["cb_eval", "ptr"],
  ["cb_eval_user_data", "ptr"],
  ["type_k", "i32"],
  ["type_v", "i32"],
  ["abort_callback", "ptr"],
  ["abort_callback_data", "ptr"],
  ["embeddings", "bool"],
  ["offload_kqv", "bool"],
  ["no_perf", "bool"],
  ["op_offload", "bool"],
  ["swa_full", "bool"],
  ["kv_unified", "bool"],
  ["samplers", "ptr"],
  ["n_samplers", "u64"],
  ["ctx_other", "ptr"],
]);

export const batch: StructLayout = defineStruct("llama_batch", [
  ["n_tokens", "i32"],
  ["token", "ptr"],
  ["embd", "ptr"],
  ["pos", "ptr"],
  ["n_seq_id", "ptr"],
  ["seq_id", "ptr"],
  ["logits", "ptr"],
]);

export const samplerChainParams: StructLayout = defineStruct("llama_sampler_chain_params", [
  ["no_perf", "bool"],
]);

export const modelQuantizeParams: StructLayout = defineStruct("llama_model_quantize_params", [
  ["nthread", "i32"],
  ["ftype", "i32"],
  ["output_tensor_type", "i32"],
  ["token_embedding_type", "i32"],
  ["allow_requantize", "bool"],
  ["quantize_output_tensor", "bool"],
  ["only_copy", "bool"],
  ["pure", "bool"],
  ["keep_split", "bool"],
  ["dry_run", "bool"],
  ["imatrix", "ptr"],
  ["kv_overrides", "ptr"],
  ["tt_overrides", "ptr"],
  ["prune_layers", "ptr"],
  ["max_buf_size", "u64"],
]);

export const tokenData: StructLayout = defineStruct("llama_token_data", [
  ["id", "i32"],
  ["logit", "f32"],
  ["p", "f32"],
]);

export const tokenDataArray: StructLayout = defineStruct("llama_token_data_array", [
  ["data", "ptr"],
  ["size", "u64"],
  ["selected", "i64"],
  ["sorted", "bool"],
]);

export const logitBias: StructLayout = defineStruct("llama_logit_bias", [
  ["token", "i32"],
  ["bias", "f32"],
]);

/** Every layout a test checks against the header. */
export const allLayouts: StructLayout[] = [
  modelParams,
  contextParams,
  batch,
  samplerChainParams,
  modelQuantizeParams,
  tokenData,
  tokenDataArray,
  logitBias,
];

/** Field values as JS numbers (pointers as bigint addresses, 0n for NULL). */
export type StructValues = Record<string, number | bigint | boolean>;

function view(buf: Uint8Array): DataView {
  return new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Reads every field of `layout` from `buf`. */
export function readStruct(layout: StructLayout, buf: Uint8Array): StructValues {
  const dv = view(buf);
  const out: StructValues = {};
  for (const f of layout.fields) out[f.name] = readField(dv, f);
  return out;
}

function readField(dv: DataView, f: Field): number | bigint | boolean {
  switch (f.kind) {
    case "u8":
      return dv.getUint8(f.offset);
    case "bool":
      return dv.getUint8(f.offset) !== 0;
    case "i32":
      return dv.getInt32(f.offset, true);
    case "u32":
      return dv.getUint32(f.offset, true);
    case "f32":
      return dv.getFloat32(f.offset, true);
    case "i64":
      return dv.getBigInt64(f.offset, true);
    case "u64":
    case "ptr":
      return dv.getBigUint64(f.offset, true);
  }
}

/** Writes the given fields into `buf`; an unknown field name throws so typos never pass silently. */
export function writeStruct(layout: StructLayout, buf: Uint8Array, values: StructValues): void {
  const dv = view(buf);
  for (const [name, value] of Object.entries(values)) {
    const f = layout.fields.find((x) => x.name === name);
    if (!f) throw new Error(`${layout.name} has no field ${name}`);
    switch (f.kind) {
      case "u8":
        dv.setUint8(f.offset, Number(value));
        break;
      case "bool":
        dv.setUint8(f.offset, value ? 1 : 0);
        break;
      case "i32":
        dv.setInt32(f.offset, Number(value), true);
        break;
      case "u32":
        dv.setUint32(f.offset, Number(value), true);
        break;
      case "f32":
        dv.setFloat32(f.offset, Number(value), true);
        break;
      case "i64":
        dv.setBigInt64(f.offset, BigInt(value), true);
        break;
      case "u64":
      case "ptr":
        dv.setBigUint64(f.offset, BigInt(value), true);
        break;
    }
  }
}
