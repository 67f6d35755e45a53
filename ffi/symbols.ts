/**
 * The llama.cpp and ggml symbols Hearth binds, with their C signatures as Deno FFI types.
 *
 * Strings and arrays going in are `buffer` (a NUL-terminated `Uint8Array` for `const char *`) so a
 * call needs no pointer bookkeeping; strings coming out are `pointer` and read with
 * `Deno.UnsafePointerView`. Only `llama_decode`/`llama_encode` (and model loading, quantizing)
 * are `nonblocking`: they are the calls long enough to stall the HTTP event loop.
 *
 * @example
 * ```ts
 * import { llamaSymbols } from "./symbols.ts";
 * const lib = Deno.dlopen("libllama.v0.5.0.so", llamaSymbols);
 * ```
 * @module
 */
import {
  batch,
  contextParams,
  modelParams,
  modelQuantizeParams,
  samplerChainParams,
} from "./layout.ts";

const ptr = "pointer" as const;
const buf = "buffer" as const;

/** Symbols of `libggml` needed before any llama.cpp call. */
export const ggmlSymbols = {
  ggml_backend_load_all_from_path: { parameters: [buf], result: "void" },
  ggml_backend_dev_count: { parameters: [], result: "usize" },
  ggml_backend_reg_count: { parameters: [], result: "usize" },
  ggml_backend_dev_by_type: { parameters: ["i32"], result: ptr },
  ggml_backend_dev_backend_reg: { parameters: [ptr], result: ptr },
  ggml_backend_reg_get_proc_address: { parameters: [ptr, buf], result: ptr },
  ggml_threadpool_params_init: { parameters: [buf, "i32"], result: "void" },
  // the device registry: listing devices, loading a backend module, adding RPC servers
  ggml_backend_load: { parameters: [buf], result: ptr },
  ggml_backend_register: { parameters: [ptr], result: "void" },
  ggml_backend_reg_by_name: { parameters: [buf], result: ptr },
  ggml_backend_reg_name: { parameters: [ptr], result: ptr },
  ggml_backend_dev_get: { parameters: ["usize"], result: ptr },
  ggml_backend_dev_name: { parameters: [ptr], result: ptr },
  ggml_backend_dev_description: { parameters: [ptr], result: ptr },
  ggml_backend_dev_type: { parameters: [ptr], result: "i32" },
  ggml_backend_dev_memory: { parameters: [ptr, buf, buf], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

/** Symbols of `libllama`: lifecycle, batch, decode, memory, vocab, samplers, state, quantize. */
export const llamaSymbols = {
  // lifecycle and defaults
  llama_backend_init: { parameters: [], result: "void" },
  llama_backend_free: { parameters: [], result: "void" },
  llama_print_system_info: { parameters: [], result: ptr },
  llama_log_set: { parameters: ["function", ptr], result: "void" },
  llama_model_default_params: { parameters: [], result: modelParams.ffi },
  llama_context_default_params: { parameters: [], result: contextParams.ffi },
  llama_sampler_chain_default_params: { parameters: [], result: samplerChainParams.ffi },
  llama_model_quantize_default_params: { parameters: [], result: modelQuantizeParams.ffi },
  llama_model_load_from_file: {
    parameters: [buf, modelParams.ffi],
    result: ptr,
    nonblocking: true,
  },
  llama_model_free: { parameters: [ptr], result: "void" },
  llama_init_from_model: { parameters: [ptr, contextParams.ffi], result: ptr },
  llama_free: { parameters: [ptr], result: "void" },
  llama_model_quantize: {
    parameters: [buf, buf, buf],
    result: "u32",
    nonblocking: true,
  },
  llama_supports_gpu_offload: { parameters: [], result: "bool" },
  llama_max_devices: { parameters: [], result: "usize" },
  llama_max_parallel_sequences: { parameters: [], result: "usize" },
  llama_time_us: { parameters: [], result: "i64" },
  llama_attach_threadpool: { parameters: [ptr, ptr, ptr], result: "void" },
  llama_detach_threadpool: { parameters: [ptr], result: "void" },

  // context facts
  llama_n_ctx: { parameters: [ptr], result: "u32" },
  llama_n_ctx_seq: { parameters: [ptr], result: "u32" },
  llama_n_batch: { parameters: [ptr], result: "u32" },
  llama_n_ubatch: { parameters: [ptr], result: "u32" },
  llama_n_seq_max: { parameters: [ptr], result: "u32" },
  llama_get_model: { parameters: [ptr], result: ptr },
  llama_get_memory: { parameters: [ptr], result: ptr },
  llama_pooling_type: { parameters: [ptr], result: "i32" },
  llama_set_n_threads: { parameters: [ptr, "i32", "i32"], result: "void" },
  llama_set_embeddings: { parameters: [ptr, "bool"], result: "void" },
  llama_set_causal_attn: { parameters: [ptr, "bool"], result: "void" },
  llama_synchronize: { parameters: [ptr], result: "void" },

  // model metadata
  llama_model_get_vocab: { parameters: [ptr], result: ptr },
  llama_model_n_ctx_train: { parameters: [ptr], result: "i32" },
  llama_model_n_embd: { parameters: [ptr], result: "i32" },
  llama_model_n_embd_out: { parameters: [ptr], result: "i32" },
  llama_model_n_layer: { parameters: [ptr], result: "i32" },
  llama_model_n_head: { parameters: [ptr], result: "i32" },
  llama_model_n_head_kv: { parameters: [ptr], result: "i32" },
  llama_model_desc: { parameters: [ptr, buf, "usize"], result: "i32" },
  llama_model_size: { parameters: [ptr], result: "u64" },
  llama_model_n_params: { parameters: [ptr], result: "u64" },
  llama_model_ftype: { parameters: [ptr], result: "i32" },
  llama_ftype_name: { parameters: ["i32"], result: ptr },
  llama_model_chat_template: { parameters: [ptr, ptr], result: ptr },
  llama_model_meta_val_str: { parameters: [ptr, buf, buf, "usize"], result: "i32" },
  llama_model_meta_count: { parameters: [ptr], result: "i32" },
  llama_model_meta_key_by_index: { parameters: [ptr, "i32", buf, "usize"], result: "i32" },
  llama_model_meta_val_str_by_index: { parameters: [ptr, "i32", buf, "usize"], result: "i32" },
  llama_model_has_encoder: { parameters: [ptr], result: "bool" },
  llama_model_has_decoder: { parameters: [ptr], result: "bool" },
  llama_model_is_recurrent: { parameters: [ptr], result: "bool" },
  llama_model_is_hybrid: { parameters: [ptr], result: "bool" },
  llama_model_n_swa: { parameters: [ptr], result: "i32" },

  // batch and decode
  llama_batch_init: { parameters: ["i32", "i32", "i32"], result: batch.ffi },
  llama_batch_free: { parameters: [batch.ffi], result: "void" },
  llama_batch_get_one: { parameters: [buf, "i32"], result: batch.ffi },
  llama_decode: { parameters: [ptr, batch.ffi], result: "i32", nonblocking: true },
  // The same function called on the JS thread: for steps short enough that the hop to a
  // blocking-pool thread and back costs more than it saves.
  llama_decode_sync: { name: "llama_decode", parameters: [ptr, batch.ffi], result: "i32" },
  llama_encode: { parameters: [ptr, batch.ffi], result: "i32", nonblocking: true },
  llama_get_logits: { parameters: [ptr], result: ptr },
  llama_get_logits_ith: { parameters: [ptr, "i32"], result: ptr },
  llama_get_embeddings: { parameters: [ptr], result: ptr },
  llama_get_embeddings_ith: { parameters: [ptr, "i32"], result: ptr },
  llama_get_embeddings_seq: { parameters: [ptr, "i32"], result: ptr },

  // KV memory
  llama_memory_clear: { parameters: [ptr, "bool"], result: "void" },
  llama_memory_seq_rm: { parameters: [ptr, "i32", "i32", "i32"], result: "bool" },
  llama_memory_seq_cp: { parameters: [ptr, "i32", "i32", "i32", "i32"], result: "void" },
  llama_memory_seq_keep: { parameters: [ptr, "i32"], result: "void" },
  llama_memory_seq_add: { parameters: [ptr, "i32", "i32", "i32", "i32"], result: "void" },
  llama_memory_seq_pos_min: { parameters: [ptr, "i32"], result: "i32" },
  llama_memory_seq_pos_max: { parameters: [ptr, "i32"], result: "i32" },
  llama_memory_can_shift: { parameters: [ptr], result: "bool" },
  llama_n_rs_seq: { parameters: [ptr], result: "u32" },

  // per-sequence state (prefix cache save/restore)
  llama_state_seq_get_size: { parameters: [ptr, "i32"], result: "usize" },
  llama_state_seq_get_data: { parameters: [ptr, buf, "usize", "i32"], result: "usize" },
  llama_state_seq_set_data: { parameters: [ptr, buf, "usize", "i32"], result: "usize" },
  llama_state_seq_save_file: { parameters: [ptr, buf, "i32", buf, "usize"], result: "usize" },
  llama_state_seq_load_file: {
    parameters: [ptr, buf, "i32", buf, "usize", buf],
    result: "usize",
  },
  // `flags`: LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (1) saves only the SWA / recurrent part
  llama_state_seq_get_size_ext: { parameters: [ptr, "i32", "u32"], result: "usize" },
  llama_state_seq_get_data_ext: { parameters: [ptr, buf, "usize", "i32", "u32"], result: "usize" },
  llama_state_seq_set_data_ext: { parameters: [ptr, buf, "usize", "i32", "u32"], result: "usize" },

  // vocab and tokenizer
  llama_vocab_type: { parameters: [ptr], result: "i32" },
  llama_vocab_n_tokens: { parameters: [ptr], result: "i32" },
  llama_vocab_get_text: { parameters: [ptr, "i32"], result: ptr },
  llama_vocab_get_attr: { parameters: [ptr, "i32"], result: "i32" },
  llama_vocab_is_eog: { parameters: [ptr, "i32"], result: "bool" },
  llama_vocab_is_control: { parameters: [ptr, "i32"], result: "bool" },
  llama_vocab_bos: { parameters: [ptr], result: "i32" },
  llama_vocab_eos: { parameters: [ptr], result: "i32" },
  llama_vocab_eot: { parameters: [ptr], result: "i32" },
  llama_vocab_sep: { parameters: [ptr], result: "i32" },
  llama_vocab_nl: { parameters: [ptr], result: "i32" },
  llama_vocab_pad: { parameters: [ptr], result: "i32" },
  llama_vocab_get_add_bos: { parameters: [ptr], result: "bool" },
  llama_vocab_get_add_eos: { parameters: [ptr], result: "bool" },
  llama_tokenize: {
    parameters: [ptr, buf, "i32", buf, "i32", "bool", "bool"],
    result: "i32",
  },
  llama_token_to_piece: { parameters: [ptr, "i32", buf, "i32", "i32", "bool"], result: "i32" },
  llama_detokenize: {
    parameters: [ptr, buf, "i32", buf, "i32", "bool", "bool"],
    result: "i32",
  },

  // samplers
  llama_sampler_chain_init: { parameters: [samplerChainParams.ffi], result: ptr },
  llama_sampler_chain_add: { parameters: [ptr, ptr], result: "void" },
  llama_sampler_chain_n: { parameters: [ptr], result: "i32" },
  llama_sampler_chain_get: { parameters: [ptr, "i32"], result: ptr },
  llama_sampler_name: { parameters: [ptr], result: ptr },
  llama_sampler_accept: { parameters: [ptr, "i32"], result: "void" },
  llama_sampler_apply: { parameters: [ptr, buf], result: "void" },
  llama_sampler_reset: { parameters: [ptr], result: "void" },
  llama_sampler_clone: { parameters: [ptr], result: ptr },
  llama_sampler_free: { parameters: [ptr], result: "void" },
  // backend sampling: a sequence's chain computed inside the decode graph
  llama_set_sampler: { parameters: [ptr, "i32", ptr], result: "bool" },
  llama_get_sampled_token_ith: { parameters: [ptr, "i32"], result: "i32" },
  llama_sampler_sample: { parameters: [ptr, ptr, "i32"], result: "i32" },
  llama_sampler_get_seed: { parameters: [ptr], result: "u32" },
  llama_sampler_init_greedy: { parameters: [], result: ptr },
  llama_sampler_init_dist: { parameters: ["u32"], result: ptr },
  llama_sampler_init_top_k: { parameters: ["i32"], result: ptr },
  llama_sampler_init_top_p: { parameters: ["f32", "usize"], result: ptr },
  llama_sampler_init_min_p: { parameters: ["f32", "usize"], result: ptr },
  llama_sampler_init_typical: { parameters: ["f32", "usize"], result: ptr },
  llama_sampler_init_temp: { parameters: ["f32"], result: ptr },
  llama_sampler_init_temp_ext: { parameters: ["f32", "f32", "f32"], result: ptr },
  llama_sampler_init_xtc: { parameters: ["f32", "f32", "usize", "u32"], result: ptr },
  llama_sampler_init_top_n_sigma: { parameters: ["f32"], result: ptr },
  llama_sampler_init_mirostat: { parameters: ["i32", "u32", "f32", "f32", "i32"], result: ptr },
  llama_sampler_init_mirostat_v2: { parameters: ["u32", "f32", "f32"], result: ptr },
  llama_sampler_init_grammar: { parameters: [ptr, buf, buf], result: ptr },
  llama_sampler_init_grammar_lazy_patterns: {
    parameters: [ptr, buf, buf, buf, "usize", buf, "usize"],
    result: ptr,
  },
  llama_sampler_init_penalties: { parameters: ["i32", "i32", "f32", "f32", "f32"], result: ptr },
  llama_sampler_init_dry: {
    parameters: [ptr, "f32", "f32", "i32", "i32", buf, "usize"],
    result: ptr,
  },
  llama_sampler_init_logit_bias: { parameters: ["i32", "i32", buf], result: ptr },
} as const satisfies Deno.ForeignLibraryInterface;

/** The opened llama library's callable symbols. */
export type LlamaSymbols = Deno.DynamicLibrary<typeof llamaSymbols>["symbols"];
/** The opened ggml library's callable symbols. */
export type GgmlSymbols = Deno.DynamicLibrary<typeof ggmlSymbols>["symbols"];
