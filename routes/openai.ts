/**
 * OpenAI-style routes: `GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions`
 * (plain and streamed). Requests are validated with Zod (unknown fields are refused, as OpenAI
 * does), turned into engine jobs (one per prompt × `n`), and the engine's events are shaped into
 * OpenAI objects or `data:` chunks ending in `[DONE]`.
 *
 * @example
 * ```ts
 * import { openaiRoutes } from "./openai.ts";
 * app.route("/", openaiRoutes(state));
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import { chatPromptText } from "../lib/chat/prompt.ts";
import {
  type FinishReason,
  type GenEvent,
  type GenRequest,
  isRefusal,
  type Scheduler,
} from "../lib/engine/scheduler.ts";
import type { ServerState } from "../lib/engine/state.ts";
import { checkIds, detokenizeIds, specialSpellings, tokenizeText } from "../lib/engine/tokens.ts";
import { openaiError, parseBody } from "./errors.ts";
import {
  messageSchema,
  modelNotFound,
  requestedGrammar,
  responseFormatSchema,
  samplingFields,
  structuredOutputsSchema,
  toSampling,
} from "./openai_common.ts";
import { checkGrammar } from "../lib/engine/constrained.ts";
import { sseResponse } from "./sse.ts";

const tokenIds = z.array(z.number().int("token ids must be integers")).min(1);

/** Fields both generation routes share. */
const generationFields = {
  model: z.string().optional(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullable()
    .optional(),
  n: z.number().int().min(1).max(16).nullable().optional(),
  user: z.string().optional(),
  structured_outputs: structuredOutputsSchema,
  response_format: responseFormatSchema,
  ...samplingFields,
};

const completionSchema = z.strictObject({
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1),
    tokenIds,
    z.array(tokenIds).min(1),
  ], "must be a string, an array of strings, an array of token ids, or an array of those"),
  max_tokens: z.number().int().min(0).nullable().optional(),
  best_of: z.number().int().min(1).nullable().optional(),
  echo: z.boolean().nullable().optional(),
  logprobs: z.number().int().min(0).nullable().optional(),
  suffix: z.string().nullable().optional(),
  ...generationFields,
});

const chatSchema = z.strictObject({
  messages: z.array(messageSchema).min(1, "must contain at least one message"),
  max_tokens: z.number().int().min(1).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).nullable().optional(),
  reasoning_effort: z.string().nullable().optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullable().optional(),
  add_generation_prompt: z.boolean().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.number().int().nullable().optional(),
  tools: z.array(z.unknown()).nullable().optional(),
  tool_choice: z.unknown().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  ...generationFields,
});

type CompletionBody = z.output<typeof completionSchema>;
type ChatBody = z.output<typeof chatSchema>;
type GenerationBody = CompletionBody | ChatBody;

/** One engine job: which prompt (by index) and which of its `n` choices. */
type Job = { index: number; promptIndex: number; prompt: number[]; req: GenRequest };

type Usage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
};

export function openaiRoutes(state: ServerState): Hono {
  const app = new Hono();

  app.get("/v1/models", (c) =>
    c.json({
      object: "list",
      data: [{
        id: state.modelId,
        object: "model",
        created: state.created,
        owned_by: "hearth",
        max_model_len: state.engine?.model.nCtxSeq ?? null,
      }],
    }));

  app.post("/v1/completions", async (c) => {
    const body = await parseBody(c, completionSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    const bad = unsupportedCompletionField(b);
    if (bad) return openaiError(c, 400, bad.message, { param: bad.param });
    return await generate(c, state, b, "completion", (engine) => {
      const m = engine.model;
      const p = b.prompt;
      if (typeof p === "string") return [tokenizeText(m, p, true)];
      if (typeof p[0] === "string") return (p as string[]).map((s) => tokenizeText(m, s, true));
      if (typeof p[0] === "number") return [p as number[]];
      return p as number[][];
    });
  });

  app.post("/v1/chat/completions", async (c) => {
    const body = await parseBody(c, chatSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    const bad = unsupportedChatField(b);
    if (bad) return openaiError(c, 400, bad.message, { param: bad.param });
    if (state.engine && !state.template) {
      return openaiError(c, 400, "the model has no chat template; use /v1/completions", {
        param: "messages",
      });
    }
    return await generate(c, state, b, "chat", (engine) => {
      const extra: Record<string, unknown> = { ...b.chat_template_kwargs };
      if (b.reasoning_effort != null) extra.reasoning_effort = b.reasoning_effort;
      const text = chatPromptText(state.template!, specialSpellings(engine.model), b.messages, {
        addGenerationPrompt: b.add_generation_prompt ?? true,
        extra,
      });
      // The template writes BOS itself.
      return [tokenizeText(engine.model, text, false)];
    });
  });

  return app;
}

function unsupportedCompletionField(
  b: CompletionBody,
): { message: string; param: string } | undefined {
  if (b.logprobs != null && b.logprobs > 0) {
    return { message: "`logprobs` is not supported yet", param: "logprobs" };
  }
  if (b.suffix) {
    return { message: "`suffix` (fill-in-the-middle) is not supported", param: "suffix" };
  }
  if (b.best_of != null && b.best_of !== (b.n ?? 1)) {
    return { message: "`best_of` other than `n` is not supported", param: "best_of" };
  }
  return streamOptionsCheck(b);
}

function unsupportedChatField(b: ChatBody): { message: string; param: string } | undefined {
  if (b.logprobs) return { message: "`logprobs` is not supported yet", param: "logprobs" };
  if (b.top_logprobs != null) {
    return { message: "`top_logprobs` is not supported yet", param: "top_logprobs" };
  }
  if (b.tools != null && b.tools.length > 0) {
    return { message: "`tools` (function calling) is not supported yet", param: "tools" };
  }
  if (b.tool_choice !== undefined && b.tool_choice !== null && b.tool_choice !== "none") {
    return { message: "`tool_choice` is not supported yet", param: "tool_choice" };
  }
  if (b.max_tokens != null && b.max_completion_tokens != null) {
    return {
      message: "give only one of `max_tokens` and `max_completion_tokens`",
      param: "max_completion_tokens",
    };
  }
  return streamOptionsCheck(b);
}

function streamOptionsCheck(b: GenerationBody): { message: string; param: string } | undefined {
  if (b.stream_options && !b.stream) {
    return {
      message: "`stream_options` is only allowed when `stream` is true",
      param: "stream_options",
    };
  }
  return undefined;
}

function stopList(b: GenerationBody): string[] {
  return b.stop == null ? [] : typeof b.stop === "string" ? [b.stop] : b.stop;
}

/** Shared path of both generation routes: prompts -> jobs -> engine -> response or stream. */
async function generate(
  c: Context,
  state: ServerState,
  b: GenerationBody,
  kind: "completion" | "chat",
  prompts: (engine: Scheduler) => number[][],
): Promise<Response> {
  if (b.model !== undefined && b.model !== state.modelId) return modelNotFound(c, b.model);
  const engine = state.engine;
  if (!engine) return openaiError(c, 503, "the model is still loading", { code: "loading" });
  const m = engine.model;
  const constraint = requestedGrammar(b);
  if ("error" in constraint) {
    return openaiError(c, 400, constraint.error, { param: constraint.param });
  }
  const grammar = constraint.gbnf;
  if (grammar !== undefined) {
    // Parsed once by llama.cpp here (cached), so a grammar it rejects is a 400, not a failed job.
    const why = checkGrammar(m, grammar);
    if (why) {
      return openaiError(c, 400, why, {
        param: b.structured_outputs ? "structured_outputs" : "response_format",
      });
    }
  }

  let jobs: Job[];
  try {
    const ids = prompts(engine);
    ids.forEach((p, i) => checkIds(m, p, ids.length > 1 ? `prompt[${i}]` : "prompt"));
    const maxTokens = (p: number[]) =>
      kind === "chat"
        ? (b as ChatBody).max_completion_tokens ?? (b as ChatBody).max_tokens ??
          Math.max(1, m.nCtxSeq - p.length)
        : (b as CompletionBody).max_tokens ?? 16;
    const n = b.n ?? 1;
    jobs = ids.flatMap((prompt, promptIndex) =>
      Array.from({ length: n }, (_, k) => ({
        index: promptIndex * n + k,
        promptIndex,
        prompt,
        req: {
          prompt: Int32Array.from(prompt),
          grammar,
          maxTokens: maxTokens(prompt),
          sampling: toSampling(b, k),
          stop: stopList(b),
          ignoreEos: b.ignore_eos ?? false,
        },
      }))
    );
  } catch (e) {
    if (isRefusal(e)) return openaiError(c, 400, e.message, { param: "prompt" });
    const msg = (e as Error).message;
    if (kind === "chat") {
      return openaiError(c, 400, `could not build the prompt: ${msg}`, { param: "messages" });
    }
    throw e;
  }

  const aborter = new AbortController();
  const signal = AbortSignal.any([c.req.raw.signal, aborter.signal]);
  const streams: AsyncIterable<GenEvent>[] = [];
  try {
    for (const job of jobs) {
      job.req.signal = signal;
      streams.push(engine.submit(job.req));
    }
  } catch (e) {
    aborter.abort();
    if (isRefusal(e)) {
      const busy = e.kind === "busy";
      const res = openaiError(c, busy ? 503 : 400, e.message, {
        type: busy ? "overloaded_error" : "invalid_request_error",
        param: busy ? null : kind === "chat" ? "messages" : "prompt",
      });
      if (busy) res.headers.set("retry-after", "1");
      return res;
    }
    throw e;
  }

  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === "chat" ? "chat.completion" : "text_completion";
  const base = { id, object, created, model: state.modelId };
  const echo = kind === "completion" && (b as CompletionBody).echo;
  const echoText = (job: Job) => (echo ? detokenizeIds(m, job.prompt, false) : "");
  const log = (response: unknown, status = 200) =>
    state.chatLog?.({ route: c.req.path, request: b, response, status });

  if (b.stream) {
    const chunks = streamChunks(jobs, streams, base, kind, echoText, b, aborter, log);
    return sseResponse(chunks, {
      bufferLimit: state.sseBufferLimit,
      onCancel: () => aborter.abort(),
    });
  }

  const results = await Promise.all(streams.map(collect));
  aborter.abort();
  const failed = results.find((r) => r.error);
  if (failed) {
    log({ error: failed.error }, 500);
    return openaiError(c, 500, `generation failed: ${failed.error}`);
  }
  const usage = sumUsage(jobs, results);
  const choices = results.map((r, i) =>
    kind === "chat"
      ? {
        index: jobs[i].index,
        message: { role: "assistant", content: r.text },
        logprobs: null,
        finish_reason: r.finishReason,
      }
      : {
        index: jobs[i].index,
        text: echoText(jobs[i]) + r.text,
        logprobs: null,
        finish_reason: r.finishReason,
      }
  );
  const response = { ...base, choices, usage };
  log(response);
  return c.json(response);
}

type Collected = {
  text: string;
  finishReason: FinishReason | null;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  error?: string;
};

async function collect(events: AsyncIterable<GenEvent>): Promise<Collected> {
  const out: Collected = {
    text: "",
    finishReason: null,
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
  };
  for await (const ev of events) {
    if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "done") {
      out.finishReason = ev.finishReason;
      out.promptTokens = ev.promptTokens;
      out.cachedTokens = ev.cachedTokens;
      out.completionTokens = ev.completionTokens;
    } else out.error = ev.message;
  }
  return out;
}

/** Prompt tokens count once per distinct prompt (not once per `n` choice). */
function sumUsage(jobs: Job[], results: (Collected | undefined)[]): Usage {
  let prompt = 0;
  let cached = 0;
  let completion = 0;
  const seen = new Set<number>();
  results.forEach((r, i) => {
    if (!r) return;
    if (!seen.has(jobs[i].promptIndex)) {
      seen.add(jobs[i].promptIndex);
      prompt += r.promptTokens;
      cached += r.cachedTokens;
    }
    completion += r.completionTokens;
  });
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

/** Interleaves several event streams, tagging each event with its stream's position. */
async function* merge<T>(streams: AsyncIterable<T>[]): AsyncGenerator<[number, T]> {
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

async function* streamChunks(
  jobs: Job[],
  streams: AsyncIterable<GenEvent>[],
  base: Record<string, unknown>,
  kind: "completion" | "chat",
  echoText: (job: Job) => string,
  b: GenerationBody,
  aborter: AbortController,
  log: (response: unknown, status?: number) => void,
): AsyncGenerator<string> {
  const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const chunk = (index: number, text: string | null, finish: FinishReason | null, role = false) =>
    JSON.stringify({
      ...base,
      object,
      choices: [
        kind === "chat"
          ? {
            index,
            delta: finish && text === null
              ? {}
              : { ...(role ? { role: "assistant" } : {}), content: text ?? "" },
            logprobs: null,
            finish_reason: finish,
          }
          : { index, text: text ?? "", logprobs: null, finish_reason: finish },
      ],
    });
  const results: (Collected | undefined)[] = jobs.map(() => undefined);
  const texts = jobs.map(() => "");
  try {
    for (const job of jobs) {
      if (kind === "chat") yield chunk(job.index, "", null, true);
      else if ((b as CompletionBody).echo) yield chunk(job.index, echoText(job), null);
    }
    for await (const [i, ev] of merge(streams)) {
      const job = jobs[i];
      if (ev.type === "text") {
        texts[i] += ev.text;
        yield chunk(job.index, ev.text, null);
      } else if (ev.type === "done") {
        results[i] = { ...ev, text: texts[i] };
        yield chunk(job.index, null, ev.finishReason);
      } else {
        log({ error: ev.message }, 500);
        yield JSON.stringify({
          error: {
            message: `generation failed: ${ev.message}`,
            type: "server_error",
            param: null,
            code: null,
          },
        });
        return;
      }
    }
    const usage = sumUsage(jobs, results);
    if (b.stream_options?.include_usage) {
      yield JSON.stringify({ ...base, object, choices: [], usage });
    }
    log({ texts, finish_reasons: results.map((r) => r?.finishReason ?? null), usage });
    yield "[DONE]";
  } finally {
    aborter.abort();
  }
}
