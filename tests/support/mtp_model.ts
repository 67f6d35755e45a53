/**
 * The tiny MTP test model (`makeModel({ preset: "tiny", mtpLayers: 1 })`, a glm4moe model with
 * one NextN head), written once per machine into the test cache dir like the tiny model.
 *
 * @example
 * ```ts
 * import { mtpModelPath } from "./mtp_model.ts";
 * const gguf = await mtpModelPath();
 * ```
 * @module
 */
import { cachedTinyModel } from "./models.ts";

/** Path of the cached tiny MTP model, writing it first if needed (atomically). */
export function mtpModelPath(): Promise<string> {
  return cachedTinyModel("mtp", [], { mtpLayers: 1 });
}
