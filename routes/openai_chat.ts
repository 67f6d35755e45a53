/**
 * `POST /v1/chat/completions`: parse and validate, map to the shared conversation
 * (`lib/chat/openai_chat.ts`), run the chat turn (`lib/chat/turn.ts`: one engine job per `n`
 * choice, MCP tools executed server-side), and shape the reply as a
 * `chat.completion` or as `chat.completion.chunk`s (content, `reasoning_content` and
 * `tool_calls` deltas) ending in `[DONE]`.
 *
 * @example
 * ```ts
 * import { chatCompletionHandlers } from "./openai_chat.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "chat"), chatCompletionHandlers(state)); // routes/table.ts
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import { type ChatEvent, collectReply, effortBudget } from "../lib/chat/generation.ts";
import { chatLogprobs, type TokenLogprob } from "../lib/chat/logprobs.ts";
import { mcpToolEntries } from "../lib/chat/mcp_attach.ts";
import {
  chatCompletionsConversation,
  chatDelta,
  chatMessage,
  recordSteps,
  type ToolStep,
  toolStep,
} from "../lib/chat/openai_chat.ts";
import type { LoopEvent } from "../lib/chat/tool_loop.ts";
import { planTurn, startTurn, turnError, turnReady } from "../lib/chat/turn.ts";
import type { ServerState } from "./state.ts";
import { openaiError, openaiTurnError, parseBody } from "./errors.ts";
import { noteIgnored, noteRelaxed } from "./ignored.ts";
import {
  generationFields,
  merge,
  modelNotFound,
  requestedGrammar,
  stopList,
  streamErrorPayload,
  streamOptionsCheck,
  toSampling,
} from "./openai_common.ts";
import { KEEPALIVE_MS, sseResponse } from "./sse.ts";

const part = z.looseObject({ type: z.string() });
const content = z.union([z.string(), z.array(part)]).nullable().optional();

const messageSchema = z.looseObject({
  role: z.string().min(1),
  content,
  name: z.string().nullable().optional(),
  tool_calls: z.array(z.looseObject({
    id: z.string().optional(),
    type: z.string().optional(),
    function: z.looseObject({
      name: z.string(),
      arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).optional(),
    }),
  })).nullable().optional(),
  tool_call_id: z.string().optional(),
  reasoning_content: z.string().nullable().optional(),
});

const toolSchema = z.looseObject({
  type: z.string(),
  function: z.looseObject({
    name: z.string().min(1),
    description: z.string().nullable().optional(),
    parameters: z.record(z.string(), z.unknown()).nullable().optional(),
    strict: z.boolean().nullable().optional(),
  }).optional(),
});

const chatSchema = z.looseObject({
  messages: z.array(messageSchema).min(1, "must contain at least one message"),
  max_tokens: z.number().int().min(1).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).nullable().optional(),
  reasoning_effort: z.string().nullable().optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullable().optional(),
  add_generation_prompt: z.boolean().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.number().int().min(0).max(20).nullable().optional(),
  tools: z.array(toolSchema).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({ type: z.string() })]).nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  ...generationFields,
});

type ChatBody = z.output<typeof chatSchema>;

/** The handler of the `chat` row of routes/table.ts. */
export function chatCompletionHandlers(state: ServerState) {
  const createChatCompletion = async (c: Context) => {
    const body = await parseBody(c, chatSchema);
    if (!body.ok) return body.response;
    return await chat(c, state, body.data);
  };
  return { createChatCompletion };
}

function badField(b: ChatBody): { message: string; param: string } | undefined {
  if (b.max_tokens != null && b.max_completion_tokens != null) {
    return {
      message: "give only one of `max_tokens` and `max_completion_tokens`",
      param: "max_completion_tokens",
    };
  }
  if (b.top_logprobs != null && b.top_logprobs > 0 && !b.logprobs) {
    return { message: "`top_logprobs` needs `logprobs: true`", param: "top_logprobs" };
  }
  return streamOptionsCheck(b);
}

async function chat(c: Context, state: ServerState, b: ChatBody): Promise<Response> {
  const bad = badField(b);
  if (bad) return openaiError(c, 400, bad.message, { param: bad.param });
  if (b.model != null && b.model !== state.modelId) return modelNotFound(c, b.model);
  const notReady = turnReady(state);
  if (notReady) return openaiTurnError(c, notReady, "messages");
  const constraint = requestedGrammar(b);
  if ("error" in constraint) {
    return openaiError(c, 400, constraint.error, { param: constraint.param });
  }

  const extra: Record<string, unknown> = { ...b.chat_template_kwargs };
  if (b.reasoning_effort != null) extra.reasoning_effort = b.reasoning_effort;
  const attach = mcpToolEntries(b.tools);
  let mapped;
  try {
    mapped = chatCompletionsConversation(
      attach.length ? { ...b, tools: b.tools!.filter((t) => t.type !== "mcp") } : b,
    );
  } catch (e) {
    return openaiTurnError(c, turnError(e), "messages");
  }
  const planned = await planTurn(state, {
    conv: mapped.conv,
    ignored: mapped.ignored,
    mcp: attach,
    toolChoiceGiven: b.tool_choice != null,
    toolParam: (i) => `tools[${i}].function`,
    promptParam: "messages",
    choices: b.n ?? 1,
    gen: {
      maxTokens: b.max_completion_tokens ?? b.max_tokens ?? undefined,
      sampling: toSampling(b, 0, state.engine?.model.samplingDefaults),
      stop: stopList(b),
      ignoreEos: b.ignore_eos ?? false,
      grammar: constraint.gbnf,
      grammarParam: b.structured_outputs ? "structured_outputs" : "response_format",
      ...(b.logprobs ? { logprobs: b.top_logprobs ?? 0 } : {}),
      reasoningBudget: effortBudget(b.reasoning_effort),
    },
    render: { addGenerationPrompt: b.add_generation_prompt ?? true, extra },
  });
  if (!planned.ok) return openaiTurnError(c, planned.error, "messages");
  noteIgnored(c, planned.value.notes);
  noteRelaxed(c, planned.value.plan.checks);
  const started = startTurn(planned.value, {
    signal: c.req.raw.signal,
    sampling: (k) => toSampling(b, k, state.engine?.model.samplingDefaults),
  });
  if (!started.ok) return openaiTurnError(c, started.error, "messages");
  const { replies, cancel } = started.value;
  const mcp = planned.value.serverTools !== undefined;

  const base = {
    id: `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
    created: Math.floor(Date.now() / 1000),
    model: state.modelId,
  };
  const log = (response: unknown, status = 200) =>
    state.chatLog?.({ route: c.req.path, request: b, response, status });

  if (b.stream) {
    return sseResponse(streamChunks(replies, base, b, cancel, log), {
      bufferLimit: state.sseBufferLimit,
      onCancel: cancel,
      // A comment: ignored by every SSE parser, and bytes on the wire through a long prefill.
      keepalive: { everyMs: KEEPALIVE_MS, frame: () => ": keepalive\n\n" },
    });
  }

  const steps: ToolStep[][] = replies.map(() => []);
  const results = await Promise.all(replies.map((r, i) => collectReply(recordSteps(r, steps[i]))));
  cancel();
  const failed = results.find((r) => r.error || !r.end);
  if (failed) {
    const why = failed.error ?? "the request was cancelled";
    log({ error: why }, 500);
    return openaiError(c, 500, `generation failed: ${why}`);
  }
  const choices = results.map((r, index) => ({
    index,
    message: mcp ? { ...chatMessage(r), hearth_tool_steps: steps[index] } : chatMessage(r),
    logprobs: b.logprobs ? chatLogprobs(r.logprobs) : null,
    finish_reason: r.end!.finishReason,
  }));
  const response = {
    ...base,
    object: "chat.completion",
    choices,
    usage: usage(results.map((r) => r.end!)),
  };
  log(response);
  return c.json(response);
}

type End = Extract<ChatEvent, { type: "end" }>;

/** One prompt for every choice: prompt tokens count once. */
function usage(ends: End[]) {
  const completion = ends.reduce((s, e) => s + e.completionTokens, 0);
  const prompt = ends[0]?.promptTokens ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: ends[0]?.cachedTokens ?? 0 },
    completion_tokens_details: {
      reasoning_tokens: ends.reduce((s, e) => s + e.reasoningTokens, 0),
    },
  };
}

async function* streamChunks(
  replies: AsyncIterable<LoopEvent>[],
  base: Record<string, unknown>,
  b: ChatBody,
  cancel: () => void,
  log: (response: unknown, status?: number) => void,
): AsyncGenerator<string> {
  const chunk = (
    index: number,
    delta: Record<string, unknown>,
    finish: string | null,
    lps: TokenLogprob[] | null = null,
  ) =>
    JSON.stringify({
      ...base,
      object: "chat.completion.chunk",
      choices: [{
        index,
        delta,
        logprobs: lps ? chatLogprobs(lps) : null,
        finish_reason: finish,
      }],
    });
  const ends: (End | undefined)[] = replies.map(() => undefined);
  const pending: TokenLogprob[][] = replies.map(() => []);
  const take = (i: number) => (b.logprobs ? pending[i].splice(0) : null);
  try {
    for (let i = 0; i < replies.length; i++) {
      yield chunk(i, { role: "assistant", content: "" }, null);
    }
    for await (const [i, ev] of merge(replies)) {
      if (ev.type === "logprobs") {
        pending[i].push(...ev.entries);
        continue;
      }
      if (ev.type === "end") {
        ends[i] = ev;
        yield chunk(i, {}, ev.finishReason, take(i));
        continue;
      }
      if (ev.type === "error") {
        log({ error: ev.message }, 500);
        yield streamErrorPayload(ev.message);
        return;
      }
      if (ev.type === "server_tool_call") continue;
      if (ev.type === "server_tool_result") {
        // Each step once it has its result: the call and what it returned, on the message.
        yield chunk(i, { hearth_tool_steps: [toolStep(ev)] }, null);
        continue;
      }
      const delta = chatDelta(ev);
      if (delta) yield chunk(i, delta, null, take(i));
    }
    const done = ends.filter((e): e is End => e !== undefined);
    const u = usage(done);
    if (b.stream_options?.include_usage) {
      yield JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage: u });
    }
    log({ finish_reasons: ends.map((e) => e?.finishReason ?? null), usage: u });
    yield "[DONE]";
  } finally {
    cancel();
  }
}
