/**
 * GGUF files for Hearth: read headers and summaries of models, write GGUF files, and
 * generate small seeded llama test models with the real Llama-3 tokenizer.
 *
 * @example Generate a test model and inspect it
 * ```ts
 * import { makeModel, readGgufHeader, summarizeGguf } from "./mod.ts";
 *
 * await makeModel({ preset: "tiny", out: "/tmp/tiny.gguf" });
 * const summary = summarizeGguf(await readGgufHeader("/tmp/tiny.gguf"));
 * console.log(summary.architecture, summary.vocabSize); // "llama" 128256
 * ```
 *
 * @module
 */

export * from "./types.ts";
export { type GgufSummary, readGgufHeader, summarizeGguf } from "./reader.ts";
export {
  type GgufContents,
  layoutTensors,
  type TensorData,
  type TensorSpec,
  writeGguf,
} from "./writer.ts";
export {
  dequantizeQ8_0,
  encodeF16,
  f16ToF32,
  f32ToF16,
  q8_0Size,
  quantizeQ8_0,
} from "./quantize.ts";
export {
  createRng,
  deriveSeed,
  fillNormal,
  fillUniform,
  nextFloat,
  nextU32,
  type Rng,
} from "./random.ts";
export {
  DEFAULT_SEED,
  LLAMA3_CHAT_TEMPLATE,
  LLAMA_BPE_VOCAB_URL,
  loadLlamaBpeVocab,
  makeModel,
  type MakeModelOptions,
  type MakeModelResult,
  type ModelDtype,
  modelMetadata,
  type ModelPreset,
  type PlannedTensor,
  planTensors,
  type PresetName,
  PRESETS,
} from "./presets.ts";
export {
  ARCH_VARIANTS,
  type ArchVariant,
  DEFAULT_SLIDING_WINDOW,
  lfm2IsAttention,
  SHORTCONV_L_CACHE,
} from "./arch_variants.ts";
