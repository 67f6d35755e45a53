/**
 * Anthropic Messages API routes: `POST /v1/messages` (streaming and not) and
 * `POST /v1/messages/count_tokens`, in the shapes `@anthropic-ai/sdk` and Claude Code expect,
 * errors included (`{"type":"error","error":{"type","message"}}`). The request is mapped onto
 * the shared conversation (`lib/chat/anthropic.ts`); tools, tool choice, thinking and stop
 * sequences are honoured; hints (`metadata`, `cache_control`, `context_management`,
 * `output_config`, ...) and unknown fields are accepted and named in `x-hearth-ignored-fields`.
 *
 * `model` is required, as in the real API, but any name is accepted and echoed back: Anthropic
 * clients hard-code Claude model names, and there is only one model here to answer with.
 * `max_tokens` beyond what the context leaves is clamped, not refused (Claude Code asks 32000).
 *
 * Usage counts as Anthropic does: `input_tokens` is the part of the prompt that was computed,
 * `cache_read_input_tokens` the prefix whose KV was reused; their sum is the prompt, which is
 * what `count_tokens` returns.
 *
 * @example
 * ```ts
 * import { anthropicRoutes } from "./anthropic.ts";
 * app.route("/", anthropicRoutes(state));
 * // curl localhost:8000/v1/messages -d '{"model":"m","max_tokens":64,
 * //   "messages":[{"role":"user","content":"Hi"}]}'
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import {
  anthropicConversation,
  anthropicSegments,
  anthropicStopReason,
  newBlockStream,
} from "../lib/chat/anthropic.ts";
import { anthropicMcpServers } from "../lib/chat/mcp_attach.ts";
import { collectLoop, type LoopEvent } from "../lib/chat/tool_loop.ts";
import {
  type ChatTurn,
  planTurn,
  startTurn,
  turnError,
  turnReady,
  type TurnResult,
} from "../lib/chat/turn.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import type { ServerState } from "./state.ts";
import { anthropicError, anthropicTurnError, parseBody } from "./errors.ts";
import { noteIgnored, noteRelaxed } from "./ignored.ts";
import { KEEPALIVE_MS, sseResponse } from "./sse.ts";
import { mountRoutes, routesOf, SERVE_ROUTES } from "./table.ts";

/** The real API's request size limit for Messages. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

// Blocks stay loose here: which block types are understood is decided (and named in the error)
// by the conversation mapping, not by a union whose errors would say nothing useful.
const block = z.looseObject({ type: z.string() });
const content = z.union([z.string(), z.array(block)], "must be a string or an array of blocks");

const conversationFields = {
  model: z.string().min(1),
  messages: z.array(z.looseObject({ role: z.string(), content })).min(1),
  system: z.union([z.string(), z.array(block)], "must be a string or an array of text blocks")
    .optional(),
  tools: z.array(z.looseObject({})).optional(),
  tool_choice: z.looseObject({ type: z.string() }).optional(),
  thinking: z.looseObject({
    type: z.string(),
    budget_tokens: z.number().int().min(0).optional(),
  }).nullable().optional(),
  mcp_servers: z.array(z.looseObject({})).optional(),
};

const createSchema = z.looseObject({
  ...conversationFields,
  max_tokens: z.number().int().min(1),
  stop_sequences: z.array(z.string().min(1, "stop sequences must not be empty")).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0, "must be greater than 0").max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  stream: z.boolean().optional(),
});

const countSchema = z.looseObject(conversationFields);

type CountBody = z.output<typeof countSchema>;
type CreateBody = z.output<typeof createSchema>;

/** The Messages routes (routes/table.ts, group `anthropic`) on their own app. */
export function anthropicRoutes(state: ServerState): Hono {
  return mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "anthropic"), anthropicHandlers(state));
}

/** The handlers (and the body limit) of the `anthropic` rows of routes/table.ts. */
export function anthropicHandlers(state: ServerState) {
  const badRequest = (_status: number, message: string) =>
    anthropicError(400, "invalid_request_error", message);

  const messagesBodyLimit = bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: () =>
      anthropicError(
        413,
        "request_too_large",
        `request body is larger than ${MAX_BODY_BYTES} bytes`,
      ),
  });
  /** The planned turn for a request (Messages and count_tokens plan alike, so counts agree). */
  async function planFor(
    c: Context,
    b: CountBody & Partial<CreateBody>,
  ): Promise<TurnResult<ChatTurn>> {
    const notReady = turnReady(state);
    if (notReady) return { ok: false, error: notReady };
    let mapped;
    try {
      mapped = anthropicConversation(b as Parameters<typeof anthropicConversation>[0]);
    } catch (e) {
      return { ok: false, error: turnError(e) };
    }
    const extra: Record<string, unknown> = {};
    const ignored = [...mapped.ignored];
    // `disabled` closes any reasoning the template still opens at once; `enabled` caps it at
    // `budget_tokens` (Claude Code sends 31999); `adaptive` leaves it to the model.
    let reasoningBudget: number | undefined;
    if (b.thinking) {
      extra.enable_thinking = b.thinking.type !== "disabled";
      if (b.thinking.type === "disabled") reasoningBudget = 0;
      else if (b.thinking.budget_tokens !== undefined) reasoningBudget = b.thinking.budget_tokens;
    }
    const d = defaultSampling(state.engine?.model.samplingDefaults);
    const planned = await planTurn(state, {
      conv: mapped.conv,
      ignored,
      mcp: anthropicMcpServers(b.mcp_servers),
      toolChoiceGiven: b.tool_choice != null,
      toolParam: (i) => `tools[${i}]`,
      schemaKey: "input_schema",
      gen: {
        maxTokens: b.max_tokens,
        sampling: {
          ...d,
          temperature: b.temperature ?? d.temperature,
          topP: b.top_p ?? d.topP,
          topK: b.top_k ?? d.topK,
        },
        stop: b.stop_sequences ?? [],
        ignoreEos: false,
        reasoningBudget,
      },
      render: { addGenerationPrompt: true, prefill: true, extra },
    });
    if (planned.ok) {
      noteIgnored(c, planned.value.notes);
      noteRelaxed(c, planned.value.plan.checks);
    }
    return planned;
  }

  const countTokens = async (c: Context) => {
    const body = await parseBody(c, countSchema, badRequest);
    if (!body.ok) return body.response;
    const planned = await planFor(c, body.data);
    if (!planned.ok) return anthropicTurnError(planned.error);
    return c.json({ input_tokens: planned.value.plan.prompt.length });
  };

  const createMessage = async (c: Context) => {
    const body = await parseBody(c, createSchema, badRequest);
    if (!body.ok) return body.response;
    const b = body.data;
    const planned = await planFor(c, b);
    if (!planned.ok) return anthropicTurnError(planned.error);
    const plan = planned.value.plan;
    const started = startTurn(planned.value, { signal: c.req.raw.signal });
    if (!started.ok) return anthropicTurnError(started.error);
    const reply = started.value.replies[0];
    const head = {
      id: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
      type: "message",
      role: "assistant",
      model: b.model,
    };
    const log = (response: unknown, status = 200) =>
      state.chatLog?.({ route: c.req.path, request: b, response, status });

    if (b.stream) {
      // Frames arrive formatted (`event:` + `data:`); the shared writer adds the buffer bound.
      return sseResponse(streamFrames(reply, head, plan.prompt.length, log), {
        format: (frame) => frame,
        bufferLimit: state.sseBufferLimit,
        onCancel: started.value.cancel,
        // The real API's own keepalive event, which the SDKs and Claude Code skip.
        keepalive: { everyMs: KEEPALIVE_MS, frame: () => frame("ping", { type: "ping" }) },
      });
    }

    const r = await collectLoop(reply);
    if (r.error || !r.end) {
      const why = r.error ?? "the request was cancelled";
      log({ error: why }, 500);
      return anthropicError(500, "api_error", `generation failed: ${why}`);
    }
    const response = {
      ...head,
      content: anthropicSegments(r.segments),
      stop_reason: anthropicStopReason(r.end),
      stop_sequence: r.end.stopString ?? null,
      usage: usage(r.end.promptTokens, r.end.cachedTokens, r.end.completionTokens),
    };
    log(response);
    return c.json(response);
  };

  return { messagesBodyLimit, countTokens, createMessage };
}

function usage(promptTokens: number, cachedTokens: number, outputTokens: number) {
  return {
    input_tokens: promptTokens - cachedTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cachedTokens,
    output_tokens: outputTokens,
  };
}

function frame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The reply framed as the real API streams it. */
async function* streamFrames(
  reply: AsyncIterable<LoopEvent>,
  head: Record<string, string>,
  promptTokens: number,
  log: (response: unknown, status?: number) => void,
): AsyncGenerator<string> {
  yield frame("message_start", {
    type: "message_start",
    message: {
      ...head,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usage(promptTokens, 0, 0),
    },
  });
  yield frame("ping", { type: "ping" });
  const blocks = newBlockStream();
  for await (const ev of reply) {
    if (ev.type === "error") {
      log({ error: ev.message }, 500);
      yield frame("error", {
        type: "error",
        error: { type: "api_error", message: `generation failed: ${ev.message}` },
      });
      return;
    }
    if (ev.type === "end") {
      for (const f of blocks.close()) yield frame(f.event, f.data);
      const u = usage(ev.promptTokens, ev.cachedTokens, ev.completionTokens);
      yield frame("message_delta", {
        type: "message_delta",
        delta: { stop_reason: anthropicStopReason(ev), stop_sequence: ev.stopString ?? null },
        usage: u,
      });
      yield frame("message_stop", { type: "message_stop" });
      log({ stop_reason: anthropicStopReason(ev), usage: u });
      return;
    }
    for (const f of blocks.push(ev)) yield frame(f.event, f.data);
  }
}
