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
import {
  defaultSampling,
  type Sampling,
  type SamplingDefaults,
} from "../lib/engine/sampling/sampling.ts";
import { compileConstraint, isConstraintError, jsonObjectGbnf } from "../lib/constrain/mod.ts";
import { openaiError } from "./errors.ts";
import type { EngineRefusal } from "../lib/engine/scheduler.ts";

const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() });

/** A chat message as `/tokenize {messages}` takes it (the chat route has its own, fuller one). */
export const messageSchema = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(contentPart)]).nullable().optional(),
});

const num = (min: number, max: number) => z.number().min(min).max(max).nullable().optional();

/** Sampling fields accepted by completions and chat; null means "default". */
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
export function toSampling(
  b: SamplingInput,
  seedOffset = 0,
  defaults?: SamplingDefaults,
): Sampling {
  const d = defaultSampling(defaults);
  return {
    ...d,
    temperature: b.temperature ?? d.temperature,
    topP: b.top_p ?? d.topP,
    // Absent: the default chain's top-k (llama-server's 40, or the model's); 0 or -1 turns it off.
    topK: b.top_k == null ? d.topK : b.top_k > 0 ? b.top_k : 0,
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

/** An engine refusal in OpenAI's shape: a full queue is a 503 with Retry-After, the rest 400s. */
export function refusalError(c: Context, e: EngineRefusal, param: string): Response {
  const busy = e.kind === "busy";
  const res = openaiError(c, busy ? 503 : 400, e.message, {
    type: busy ? "overloaded_error" : "invalid_request_error",
    param: busy ? null : param,
    code: e.kind === "too_long" ? "context_length_exceeded" : null,
  });
  if (busy) res.headers.set("retry-after", "1");
  return res;
}

/** `structured_outputs`: exactly one of the four keys (checked after parsing, to name them). */
export const structuredOutputsSchema = z.looseObject({
  choice: z.array(z.string()).min(1, "must list at least one choice").optional(),
  regex: z.string().min(1).optional(),
  json: z.union([z.record(z.string(), z.unknown()), z.boolean()]).optional(),
  grammar: z.string().min(1).optional(),
}).nullable().optional();

export const responseFormatSchema = z.union([
  z.looseObject({ type: z.literal("text") }),
  z.looseObject({ type: z.literal("json_object") }),
  z.looseObject({
    type: z.literal("json_schema"),
    json_schema: z.looseObject({
      name: z.string().optional(),
      description: z.string().optional(),
      schema: z.union([z.record(z.string(), z.unknown()), z.boolean()]),
      strict: z.boolean().nullable().optional(),
    }),
  }),
], "must be {type: text}, {type: json_object} or {type: json_schema, json_schema: {schema}}")
  .nullable().optional();

export type ConstraintRequest = {
  structured_outputs?: z.output<typeof structuredOutputsSchema>;
  response_format?: z.output<typeof responseFormatSchema>;
};

const CONSTRAINT_KEYS = ["choice", "regex", "json", "grammar"] as const;

/**
 * The GBNF a request asks for, or a 400-ready message naming what is wrong: exactly one key of
 * `structured_outputs`, never together with a `response_format` other than text, and a constraint
 * that compiles.
 */
export function requestedGrammar(
  b: ConstraintRequest,
): { gbnf?: string } | { error: string; param: string } {
  const so = b.structured_outputs;
  const rf = b.response_format && b.response_format.type !== "text" ? b.response_format : undefined;
  if (so && rf) {
    return {
      error: "give either `structured_outputs` or `response_format`, not both",
      param: "structured_outputs",
    };
  }
  try {
    if (so) {
      const extra = Object.keys(so).filter((k) =>
        !(CONSTRAINT_KEYS as readonly string[]).includes(k)
      );
      const given = CONSTRAINT_KEYS.filter((k) => so[k] !== undefined);
      if (extra.length || given.length !== 1) {
        return {
          error: `\`structured_outputs\` needs exactly one of choice, regex, json, grammar; got ${
            [...given, ...extra].join(", ") || "none"
          }`,
          param: "structured_outputs",
        };
      }
      const key = given[0];
      return { gbnf: compileConstraint({ [key]: so[key] }) };
    }
    if (rf?.type === "json_object") return { gbnf: jsonObjectGbnf() };
    if (rf?.type === "json_schema") {
      return { gbnf: compileConstraint({ json: rf.json_schema.schema }) };
    }
    return {};
  } catch (e) {
    if (isConstraintError(e)) {
      const where = so
        ? `structured_outputs.${CONSTRAINT_KEYS.find((k) => so[k] !== undefined)}`
        : "response_format";
      return { error: `${where}: ${e.message}`, param: where };
    }
    throw e;
  }
}

/** Fields both generation routes (completions and chat) share. */
export const generationFields = {
  model: z.string().nullable().optional(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullable().optional() }).nullable()
    .optional(),
  n: z.number().int().min(1).max(16).nullable().optional(),
  structured_outputs: structuredOutputsSchema,
  response_format: responseFormatSchema,
  ...samplingFields,
};

type GenerationInput = {
  stop?: string | string[] | null;
  stream?: boolean | null;
  stream_options?: unknown;
};

export function stopList(b: GenerationInput): string[] {
  return b.stop == null ? [] : typeof b.stop === "string" ? [b.stop] : b.stop;
}

export function streamOptionsCheck(
  b: GenerationInput,
): { message: string; param: string } | undefined {
  if (b.stream_options && !b.stream) {
    return {
      message: "`stream_options` is only allowed when `stream` is true",
      param: "stream_options",
    };
  }
  return undefined;
}

/** The payload a stream ends with when generation fails midway (OpenAI's error shape). */
export function streamErrorPayload(message: string): string {
  return JSON.stringify({
    error: {
      message: `generation failed: ${message}`,
      type: "server_error",
      param: null,
      code: null,
    },
  });
}

/** Interleaves several event streams, tagging each event with its stream's position. */
export async function* merge<T>(streams: AsyncIterable<T>[]): AsyncGenerator<[number, T]> {
  const its = streams.map((s) => s[Symbol.asyncIterator]());
  const next = (i: number) => its[i].next().then((r) => ({ i, r }));
  const pending = new Map(its.map((_, i) => [i, next(i)]));
  try {
    while (pending.size) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(i);
        continue;
      }
      pending.set(i, next(i));
      yield [i, r.value];
    }
  } finally {
    for (const i of pending.keys()) await its[i].return?.();
  }
}
