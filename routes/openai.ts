/**
 * OpenAI-style routes: `GET /v1/models` and `POST /v1/completions` (streaming and not). Requests
 * are validated with Zod (unknown fields are refused, as OpenAI does), mapped to engine requests,
 * and the engine's events are shaped into OpenAI objects or `data:` chunks ending in `[DONE]`.
 *
 * @example
 * ```ts
 * import { openaiRoutes } from "./openai.ts";
 * app.route("/", openaiRoutes(state));
 * ```
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import {
  type FinishReason,
  type GenEvent,
  type GenRequest,
  isRefusal,
  type Scheduler,
} from "../lib/engine/scheduler.ts";
import type { ServerState } from "../lib/engine/state.ts";
import { checkIds, detokenizeIds, tokenizeText } from "../lib/engine/tokens.ts";
import { openaiError, parseBody } from "./errors.ts";
import { modelNotFound, samplingFields, toSampling } from "./openai_common.ts";
import { sseResponse } from "./sse.ts";

const tokenIds = z.array(z.number().int("token ids must be integers")).min(1);

const completionSchema = z.strictObject({
  model: z.string().optional(),
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1),
    tokenIds,
    z.array(tokenIds).min(1),
  ], "must be a string, an array of strings, an array of token ids, or an array of those"),
  max_tokens: z.number().int().min(0).nullable().optional(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullable()
    .optional(),
  n: z.number().int().min(1).max(16).nullable().optional(),
  best_of: z.number().int().min(1).nullable().optional(),
  echo: z.boolean().nullable().optional(),
  logprobs: z.number().int().min(0).nullable().optional(),
  suffix: z.string().nullable().optional(),
  user: z.string().optional(),
  ...samplingFields,
});

type CompletionBody = z.output<typeof completionSchema>;

/** One engine job: which prompt (by index) and which of its `n` choices. */
type Job = { index: number; promptIndex: number; prompt: number[]; req: GenRequest };

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
    const unsupported = unsupportedField(b);
    if (unsupported) return openaiError(c, 400, unsupported.message, { param: unsupported.param });
    if (b.model !== undefined && b.model !== state.modelId) return modelNotFound(c, b.model);
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading", { code: "loading" });

    let jobs: Job[];
    try {
      jobs = buildJobs(engine, b);
    } catch (e) {
      if (isRefusal(e)) return openaiError(c, 400, e.message, { param: "prompt" });
      throw e;
    }
    const id = `cmpl-${crypto.randomUUID().replaceAll("-", "")}`;
    const created = Math.floor(Date.now() / 1000);
    const streams: AsyncIterable<GenEvent>[] = [];
    const aborter = new AbortController();
    try {
      for (const job of jobs) {
        job.req.signal = AbortSignal.any([c.req.raw.signal, aborter.signal]);
        streams.push(engine.submit(job.req));
      }
    } catch (e) {
      aborter.abort();
      if (isRefusal(e)) {
        const status = e.kind === "busy" ? 503 : 400;
        const res = openaiError(c, status, e.message, {
          type: e.kind === "busy" ? "overloaded_error" : "invalid_request_error",
          param: e.kind === "busy" ? null : "prompt",
        });
        if (e.kind === "busy") res.headers.set("retry-after", "1");
        return res;
      }
      throw e;
    }
    const echoText = (job: Job) => (b.echo ? detokenizeIds(engine.model, job.prompt, false) : "");
    const base = { id, object: "text_completion", created, model: state.modelId };

    if (b.stream) {
      return sseResponse(streamCompletion(jobs, streams, base, echoText, b, aborter));
    }

    const results = await Promise.all(streams.map((s) => collect(s)));
    aborter.abort();
    const failed = results.find((r) => r.error);
    if (failed) return openaiError(c, 500, `generation failed: ${failed.error}`);
    let promptTokens = 0;
    let completionTokens = 0;
    const seenPrompt = new Set<number>();
    const choices = results.map((r, i) => {
      const job = jobs[i];
      if (!seenPrompt.has(job.promptIndex)) {
        seenPrompt.add(job.promptIndex);
        promptTokens += r.promptTokens;
      }
      completionTokens += r.completionTokens;
      return {
        index: job.index,
        text: echoText(job) + r.text,
        logprobs: null,
        finish_reason: r.finishReason,
      };
    });
    return c.json({
      ...base,
      choices,
      usage: {
        prompt_tokens: promptTokens,
        completion_tokens: completionTokens,
        total_tokens: promptTokens + completionTokens,
      },
    });
  });

  return app;
}

function unsupportedField(b: CompletionBody): { message: string; param: string } | undefined {
  if (b.logprobs != null && b.logprobs > 0) {
    return { message: "`logprobs` is not supported yet", param: "logprobs" };
  }
  if (b.suffix) {
    return { message: "`suffix` (fill-in-the-middle) is not supported", param: "suffix" };
  }
  if (b.best_of != null && b.best_of !== (b.n ?? 1)) {
    return { message: "`best_of` other than `n` is not supported", param: "best_of" };
  }
  if (b.stream_options && !b.stream) {
    return {
      message: "`stream_options` is only allowed when `stream` is true",
      param: "stream_options",
    };
  }
  return undefined;
}

function buildJobs(engine: Scheduler, b: CompletionBody): Job[] {
  const m = engine.model;
  const p = b.prompt;
  let prompts: number[][];
  if (typeof p === "string") prompts = [tokenizeText(m, p, true)];
  else if (typeof p[0] === "string") prompts = (p as string[]).map((s) => tokenizeText(m, s, true));
  else if (typeof p[0] === "number") prompts = [p as number[]];
  else prompts = p as number[][];
  prompts.forEach((ids, i) => checkIds(m, ids, prompts.length > 1 ? `prompt[${i}]` : "prompt"));
  const n = b.n ?? 1;
  const stop = b.stop == null ? [] : typeof b.stop === "string" ? [b.stop] : b.stop;
  const jobs: Job[] = [];
  prompts.forEach((prompt, promptIndex) => {
    for (let k = 0; k < n; k++) {
      jobs.push({
        index: promptIndex * n + k,
        promptIndex,
        prompt,
        req: {
          prompt: Int32Array.from(prompt),
          maxTokens: b.max_tokens ?? 16,
          sampling: toSampling(b, k),
          stop,
          ignoreEos: b.ignore_eos ?? false,
        },
      });
    }
  });
  return jobs;
}

type Collected = {
  text: string;
  finishReason: FinishReason | null;
  promptTokens: number;
  completionTokens: number;
  error?: string;
};

async function collect(events: AsyncIterable<GenEvent>): Promise<Collected> {
  const out: Collected = { text: "", finishReason: null, promptTokens: 0, completionTokens: 0 };
  for await (const ev of events) {
    if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "done") {
      out.finishReason = ev.finishReason;
      out.promptTokens = ev.promptTokens;
      out.completionTokens = ev.completionTokens;
    } else out.error = ev.message;
  }
  return out;
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

async function* streamCompletion(
  jobs: Job[],
  streams: AsyncIterable<GenEvent>[],
  base: Record<string, unknown>,
  echoText: (job: Job) => string,
  b: CompletionBody,
  aborter: AbortController,
): AsyncGenerator<string> {
  const chunk = (index: number, text: string, finish: FinishReason | null) =>
    JSON.stringify({
      ...base,
      choices: [{ index, text, logprobs: null, finish_reason: finish }],
    });
  let promptTokens = 0;
  let completionTokens = 0;
  const seenPrompt = new Set<number>();
  try {
    if (b.echo) { for (const job of jobs) yield chunk(job.index, echoText(job), null); }
    for await (const [i, ev] of merge(streams)) {
      const job = jobs[i];
      if (ev.type === "text") yield chunk(job.index, ev.text, null);
      else if (ev.type === "done") {
        if (!seenPrompt.has(job.promptIndex)) {
          seenPrompt.add(job.promptIndex);
          promptTokens += ev.promptTokens;
        }
        completionTokens += ev.completionTokens;
        yield chunk(job.index, "", ev.finishReason);
      } else {
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
    if (b.stream_options?.include_usage) {
      yield JSON.stringify({
        ...base,
        choices: [],
        usage: {
          prompt_tokens: promptTokens,
          completion_tokens: completionTokens,
          total_tokens: promptTokens + completionTokens,
        },
      });
    }
    yield "[DONE]";
  } finally {
    aborter.abort();
  }
}
