/**
 * OpenAI's `POST /v1/embeddings`: `input` is a string, an array of strings, an array of token
 * ids or an array of those; each becomes one unit-length vector from the served model (strings
 * are tokenized with BOS). `encoding_format: "base64"` packs each vector as little-endian float32
 * bytes, which is what the official SDKs ask for by default and decode themselves.
 *
 * @example
 * ```ts
 * import { embeddingsHandlers } from "./embeddings.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "embeddings"), embeddingsHandlers(state)); // routes/table.ts
 * // POST /v1/embeddings {"input": ["hello", "world"]}
 * // -> {"object":"list","data":[{"object":"embedding","index":0,"embedding":[...]}, ...],
 * //     "model":"hearth-tiny","usage":{"prompt_tokens":4,"total_tokens":4}}
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import { createEmbedder, type Embedder, type EmbedderOptions } from "../lib/engine/embeddings.ts";
import { isRefusal, type Scheduler } from "../lib/engine/scheduler.ts";
import type { ServerState } from "./state.ts";
import { checkIds, tokenizeText } from "../lib/engine/tokens.ts";
import { openaiError, parseBody } from "./errors.ts";
import { modelNotFound } from "./openai_common.ts";

/** OpenAI's own cap on inputs per request. */
const MAX_INPUTS = 2048;

const text = z.string().min(1, "must not be empty");
const tokenIds = z.array(z.number().int("token ids must be integers")).min(1);

const embeddingSchema = z.strictObject({
  model: z.string().optional(),
  input: z.union(
    [
      text,
      z.array(text).min(1).max(MAX_INPUTS),
      tokenIds,
      z.array(tokenIds).min(1).max(MAX_INPUTS),
    ],
    "must be a non-empty string, a non-empty array of non-empty strings, a non-empty array of " +
      `token ids, or a non-empty array of those (at most ${MAX_INPUTS} inputs)`,
  ),
  encoding_format: z.enum(["float", "base64"]).nullable().optional(),
  dimensions: z.number().int().min(1).nullable().optional(),
  user: z.string().nullable().optional(),
});

type EmbeddingBody = z.output<typeof embeddingSchema>;

/** The handler of the `embeddings` row of routes/table.ts. */
export function embeddingsHandlers(state: ServerState, opts: EmbedderOptions = {}) {
  // One embedder (and so one extra llama.cpp context) per engine, made on the first request:
  // servers that never embed pay nothing, and a reloaded engine gets a fresh one.
  let current: { engine: Scheduler; embedder: Embedder } | undefined;
  const embedderFor = (engine: Scheduler): Embedder => {
    if (current?.engine !== engine) {
      current?.embedder.close().catch(() => {});
      current = { engine, embedder: createEmbedder(engine, opts) };
    }
    return current.embedder;
  };

  const createEmbeddings = async (c: Context) => {
    const body = await parseBody(c, embeddingSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    if (b.model != null && b.model !== state.modelId) return modelNotFound(c, b.model);
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading", { code: "loading" });
    const embedder = embedderFor(engine);
    if (b.dimensions != null && b.dimensions !== embedder.dimensions) {
      return openaiError(
        c,
        400,
        `\`dimensions\` is not supported: this model's embeddings have ${embedder.dimensions} ` +
          "dimensions and cannot be shortened",
        { param: "dimensions" },
      );
    }

    let vectors: Float32Array[];
    let inputs: number[][];
    try {
      inputs = toTokenInputs(engine, b);
      vectors = await embedder.embed(inputs);
    } catch (e) {
      if (isRefusal(e)) return openaiError(c, 400, e.message, { param: "input" });
      throw e;
    }
    const base64 = b.encoding_format === "base64";
    const tokens = inputs.reduce((n, ids) => n + ids.length, 0);
    return c.json({
      object: "list",
      data: vectors.map((v, index) => ({
        object: "embedding",
        index,
        embedding: base64 ? float32Base64(v) : Array.from(v),
      })),
      model: state.modelId,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  };

  return { createEmbeddings };
}

/** Every input as token ids, checked against the vocabulary (an `invalid` refusal if not). */
function toTokenInputs(engine: Scheduler, b: EmbeddingBody): number[][] {
  const m = engine.model;
  const input = b.input;
  let inputs: number[][];
  if (typeof input === "string") inputs = [tokenizeText(m, input, true)];
  else if (typeof input[0] === "string") {
    inputs = (input as string[]).map((s) => tokenizeText(m, s, true));
  } else if (typeof input[0] === "number") inputs = [input as number[]];
  else inputs = input as number[][];
  inputs.forEach((ids, i) => checkIds(m, ids, inputs.length > 1 ? `input[${i}]` : "input"));
  return inputs;
}

/** Little-endian float32 bytes as base64, whatever the host's byte order. */
function float32Base64(v: Float32Array): string {
  const bytes = new Uint8Array(v.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < v.length; i++) view.setFloat32(i * 4, v[i], true);
  let bin = "";
  // Chunks keep String.fromCharCode's argument list well under engine limits.
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}
