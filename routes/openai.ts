/**
 * OpenAI-style routes: `GET /v1/models` and `POST /v1/completions` (plain and streamed, with
 * `logprobs` and `echo` as lm-evaluation-harness uses them); `POST /v1/chat/completions` lives
 * in `openai_chat.ts`. Requests are validated with Zod (unknown fields are
 * accepted and named in `x-hearth-ignored-fields`), turned into engine jobs (one per prompt ×
 * `n`), and the engine's events are shaped into OpenAI objects or `data:` chunks ending in
 * `[DONE]`.
 *
 * @example
 * ```ts
 * import { openaiHandlers } from "./openai.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "openai"), openaiHandlers(state)); // routes/table.ts
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import {
  type FinishReason,
  type GenEvent,
  type GenRequest,
  isRefusal,
} from "../lib/engine/scheduler.ts";
import type { ServerState } from "./state.ts";
import { checkIds, detokenizeIds, tokenizeText } from "../lib/engine/tokens.ts";
import { completionLogprobs, type TokenLogprob } from "../lib/chat/logprobs.ts";
import { openaiError, parseBody } from "./errors.ts";
import {
  generationFields,
  merge,
  modelNotFound,
  refusalError,
  requestedGrammar,
  stopList,
  streamErrorPayload,
  streamOptionsCheck,
  toSampling,
} from "./openai_common.ts";
import { checkGrammar } from "../lib/engine/grammar/constrained.ts";
import { sseResponse } from "./sse.ts";

const tokenIds = z.array(z.number().int("token ids must be integers")).min(1);

const completionSchema = z.looseObject({
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1),
    tokenIds,
    z.array(tokenIds).min(1),
  ], "must be a string, an array of strings, an array of token ids, or an array of those"),
  max_tokens: z.number().int().min(0).nullable().optional(),
  best_of: z.number().int().min(1).nullable().optional(),
  echo: z.boolean().nullable().optional(),
  logprobs: z.number().int().min(0).max(20).nullable().optional(),
  suffix: z.string().nullable().optional(),
  ...generationFields,
});

type CompletionBody = z.output<typeof completionSchema>;

/** One engine job: which prompt (by index) and which of its `n` choices. */
type Job = { index: number; promptIndex: number; prompt: number[]; req: GenRequest };

type Usage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
};

/** The handlers of the `openai` rows of routes/table.ts. */
export function openaiHandlers(state: ServerState) {
  const listModels = (c: Context) =>
    c.json({
      object: "list",
      data: [{
        id: state.modelId,
        object: "model",
        created: state.created,
        owned_by: "hearth",
        max_model_len: state.engine?.model.nCtxSeq ?? null,
      }],
    });

  const createCompletion = async (c: Context) => {
    const body = await parseBody(c, completionSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    const bad = unsupportedCompletionField(b);
    if (bad) return openaiError(c, 400, bad.message, { param: bad.param });
    return await complete(c, state, b);
  };

  return { listModels, createCompletion };
}

function unsupportedCompletionField(
  b: CompletionBody,
): { message: string; param: string } | undefined {
  if (b.suffix) {
    return { message: "`suffix` (fill-in-the-middle) is not supported", param: "suffix" };
  }
  if (b.best_of != null && b.best_of !== (b.n ?? 1)) {
    return { message: "`best_of` other than `n` is not supported", param: "best_of" };
  }
  if (b.echo && b.logprobs != null && b.stream) {
    return {
      message: "`echo` with `logprobs` is supported without `stream` only",
      param: "echo",
    };
  }
  return streamOptionsCheck(b);
}

function promptsOf(state: ServerState, b: CompletionBody): number[][] {
  const m = state.engine!.model;
  const p = b.prompt;
  if (typeof p === "string") return [tokenizeText(m, p, true)];
  if (typeof p[0] === "string") return (p as string[]).map((s) => tokenizeText(m, s, true));
  if (typeof p[0] === "number") return [p as number[]];
  return p as number[][];
}

/** Prompts -> jobs -> engine -> response or stream. */
async function complete(c: Context, state: ServerState, b: CompletionBody): Promise<Response> {
  if (b.model != null && b.model !== state.modelId) return modelNotFound(c, b.model);
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
  const wantLogprobs = b.logprobs != null;
  const echo = b.echo ?? false;

  let jobs: Job[];
  try {
    const ids = promptsOf(state, b);
    ids.forEach((p, i) => checkIds(m, p, ids.length > 1 ? `prompt[${i}]` : "prompt"));
    const n = b.n ?? 1;
    jobs = ids.flatMap((prompt, promptIndex) =>
      Array.from({ length: n }, (_, k) => ({
        index: promptIndex * n + k,
        promptIndex,
        prompt,
        req: {
          prompt: Int32Array.from(prompt),
          grammar,
          maxTokens: b.max_tokens ?? 16,
          sampling: toSampling(b, k, state.engine?.model.samplingDefaults),
          stop: stopList(b),
          ignoreEos: b.ignore_eos ?? false,
          ...(wantLogprobs ? { logprobs: b.logprobs! } : {}),
          ...(wantLogprobs && echo ? { promptLogprobs: b.logprobs! } : {}),
        },
      }))
    );
  } catch (e) {
    if (isRefusal(e)) return openaiError(c, 400, e.message, { param: "prompt" });
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
    if (isRefusal(e)) return refusalError(c, e, "prompt");
    throw e;
  }

  const base = {
    id: `cmpl-${crypto.randomUUID().replaceAll("-", "")}`,
    object: "text_completion",
    created: Math.floor(Date.now() / 1000),
    model: state.modelId,
  };
  const echoText = (job: Job) => (echo ? detokenizeIds(m, job.prompt, false) : "");
  const log = (response: unknown, status = 200) =>
    state.chatLog?.({ route: c.req.path, request: b, response, status });

  if (b.stream) {
    const chunks = streamChunks(jobs, streams, base, echoText, b, aborter, log);
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
  const choices = results.map((r, i) => {
    const job = jobs[i];
    let logprobs = null;
    if (wantLogprobs) {
      const prompt = echo ? promptEntries(m, job.prompt, r.promptLogprobs) : [];
      logprobs = completionLogprobs([...prompt, ...r.logprobs]);
    }
    return {
      index: job.index,
      text: echoText(job) + r.text,
      logprobs,
      finish_reason: r.finishReason,
    };
  });
  const response = { ...base, choices, usage };
  log(response);
  return c.json(response);
}

/** Prompt tokens as logprob entries; the first token (no context) has none, as OpenAI reports. */
function promptEntries(
  m: NonNullable<ServerState["engine"]>["model"],
  prompt: number[],
  lps: (TokenLogprob | null)[] | undefined,
): (TokenLogprob | { token: number; text: string; bytes: number[]; logprob: null; top: null })[] {
  return prompt.map((t, i) => {
    const e = lps?.[i];
    if (e) return e;
    const text = detokenizeIds(m, [t], false);
    return { token: t, text, bytes: [...new TextEncoder().encode(text)], logprob: null, top: null };
  });
}

type Collected = {
  text: string;
  finishReason: FinishReason | null;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  logprobs: TokenLogprob[];
  promptLogprobs?: (TokenLogprob | null)[];
  error?: string;
};

async function collect(events: AsyncIterable<GenEvent>): Promise<Collected> {
  const out: Collected = {
    text: "",
    finishReason: null,
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
    logprobs: [],
  };
  for await (const ev of events) {
    if (ev.type === "text") out.text += ev.text;
    else if (ev.type === "logprobs") out.logprobs.push(...ev.entries);
    else if (ev.type === "done") {
      out.finishReason = ev.finishReason;
      out.promptTokens = ev.promptTokens;
      out.cachedTokens = ev.cachedTokens;
      out.completionTokens = ev.completionTokens;
      out.promptLogprobs = ev.promptLogprobs;
    } else if (ev.type === "error") out.error = ev.message;
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

async function* streamChunks(
  jobs: Job[],
  streams: AsyncIterable<GenEvent>[],
  base: Record<string, unknown>,
  echoText: (job: Job) => string,
  b: CompletionBody,
  aborter: AbortController,
  log: (response: unknown, status?: number) => void,
): AsyncGenerator<string> {
  const chunk = (
    index: number,
    text: string,
    finish: FinishReason | null,
    lps: TokenLogprob[] | null = null,
  ) =>
    JSON.stringify({
      ...base,
      choices: [{
        index,
        text,
        logprobs: lps ? completionLogprobs(lps) : null,
        finish_reason: finish,
      }],
    });
  const results: (Collected | undefined)[] = jobs.map(() => undefined);
  const texts = jobs.map(() => "");
  // Logprobs of tokens whose text is still held back (a possible stop string) wait for it.
  const pending: TokenLogprob[][] = jobs.map(() => []);
  const wantLogprobs = b.logprobs != null;
  try {
    if (b.echo) { for (const job of jobs) yield chunk(job.index, echoText(job), null); }
    for await (const [i, ev] of merge(streams)) {
      const job = jobs[i];
      if (ev.type === "logprobs") pending[i].push(...ev.entries);
      else if (ev.type === "text") {
        texts[i] += ev.text;
        yield chunk(job.index, ev.text, null, wantLogprobs ? pending[i].splice(0) : null);
      } else if (ev.type === "done") {
        results[i] = { ...ev, text: texts[i], logprobs: [] };
        yield chunk(job.index, "", ev.finishReason, wantLogprobs ? pending[i].splice(0) : null);
      } else if (ev.type === "error") {
        log({ error: ev.message }, 500);
        yield streamErrorPayload(ev.message);
        return;
      }
    }
    const usage = sumUsage(jobs, results);
    if (b.stream_options?.include_usage) {
      yield JSON.stringify({ ...base, choices: [], usage });
    }
    log({ texts, finish_reasons: results.map((r) => r?.finishReason ?? null), usage });
    yield "[DONE]";
  } finally {
    aborter.abort();
  }
}
