/**
 * Request pieces shared by the OpenAI-style routes: the message schema, sampling fields and their
 * mapping to engine settings, and the unknown-model error.
 *
 * @example
 * ```ts
 * import { samplingFields, toSampling } from "./openai_common.ts";
 * const schema = z.strictObject({ prompt: z.string(), ...samplingFields });
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import { defaultSampling, type Sampling } from "../lib/engine/sampling.ts";
import { openaiError } from "./errors.ts";

const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() });

export const messageSchema = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(contentPart)]).nullable().optional(),
});

const num = (min: number, max: number) => z.number().min(min).max(max).nullable().optional();

/** Sampling fields accepted by completions (and chat later); null means "default". */
export const samplingFields = {
  temperature: num(0, 2),
  top_p: z.number().gt(0, "must be greater than 0").max(1).nullable().optional(),
  top_k: z.number().int().min(-1).nullable().optional(),
  min_p: num(0, 1),
  repetition_penalty: z.number().gt(0, "must be greater than 0").max(10).nullable().optional(),
  frequency_penalty: num(-2, 2),
  presence_penalty: num(-2, 2),
  seed: z.number().int().nullable().optional(),
  logit_bias: z.record(
    z.string().regex(/^\d+$/, "logit_bias keys must be token ids"),
    z.number().min(-100).max(100),
  ).nullable().optional(),
};

type SamplingInput = {
  [K in keyof typeof samplingFields]?: z.output<(typeof samplingFields)[K]>;
};

/** Maps request fields to engine settings; `seedOffset` separates the `n` choices. */
export function toSampling(b: SamplingInput, seedOffset = 0): Sampling {
  const d = defaultSampling();
  return {
    ...d,
    temperature: b.temperature ?? d.temperature,
    topP: b.top_p ?? d.topP,
    topK: b.top_k != null && b.top_k > 0 ? b.top_k : 0,
    minP: b.min_p ?? d.minP,
    repetitionPenalty: b.repetition_penalty ?? d.repetitionPenalty,
    frequencyPenalty: b.frequency_penalty ?? d.frequencyPenalty,
    presencePenalty: b.presence_penalty ?? d.presencePenalty,
    seed: b.seed != null ? Number(BigInt.asUintN(32, BigInt(b.seed) + BigInt(seedOffset))) : d.seed,
    logitBias: Object.entries(b.logit_bias ?? {}).map(([k, v]) => [Number(k), v]),
  };
}

export function modelNotFound(c: Context, model: string): Response {
  return openaiError(c, 404, `The model \`${model}\` does not exist.`, {
    type: "invalid_request_error",
    param: "model",
    code: "model_not_found",
  });
}
