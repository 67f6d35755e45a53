/**
 * llama.cpp through Deno FFI: library discovery, the symbol table, struct layouts and typed
 * wrappers. Nothing here decides anything; `lib/engine` owns policy.
 *
 * @example
 * ```ts
 * import { loadModel, openLlama } from "./mod.ts";
 * const llama = openLlama();
 * const model = await loadModel(llama, "model.gguf", { vocab_only: true });
 * ```
 * @module
 */
export * from "./library.ts";
export * from "./layout.ts";
export * from "./llama.ts";
export * from "./threadpool.ts";
export * from "./devices.ts";
