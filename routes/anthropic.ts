/**
 * Anthropic Messages API routes: `POST /v1/messages` (streaming and not) and
 * `POST /v1/messages/count_tokens`, in the shapes `@anthropic-ai/sdk` and tools built on it
 * expect, errors included (`{"type":"error","error":{"type","message"}}`).
 *
 * `model` is required, as in the real API, but any name is accepted and echoed back: Anthropic
 * clients hard-code Claude model names, and there is only one model here to answer with.
 *
 * `usage.input_tokens` is the whole prompt, so it equals `count_tokens` for the same request. The
 * engine's automatic prefix reuse is not Anthropic's explicit prompt caching: reporting it as
 * `cache_read_input_tokens` on top would make clients that add the two count the prompt twice,
 * so both cache fields are 0 (the reuse shows in `/metrics` and OpenAI's `cached_tokens`).
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
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import {
  anthropicGenRequest,
  anthropicPromptIds,
  anthropicReply,
  isInputError,
  type ReplyEvent,
} from "../lib/chat/anthropic.ts";
import { type GenEvent, isRefusal } from "../lib/engine/scheduler.ts";
import type { ServerState } from "../lib/engine/state.ts";
import { anthropicError, parseBody } from "./errors.ts";
import { sseResponse } from "./sse.ts";

/** The real API's request size limit for Messages. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

// Blocks stay loose here: which block types are understood is decided (and named in the error)
// by the conversation mapping, not by a union whose errors would say nothing useful.
const block = z.looseObject({ type: z.string() });
const content = z.union([z.string(), z.array(block)], "must be a string or an array of blocks");

const conversationFields = {
  model: z.string().min(1),
  messages: z.array(z.strictObject({ role: z.enum(["user", "assistant"]), content })).min(1),
  system: z.union([z.string(), z.array(block)], "must be a string or an array of text blocks")
    .optional(),
  tools: z.array(z.unknown()).optional(),
  tool_choice: z.looseObject({ type: z.string() }).optional(),
  thinking: z.looseObject({ type: z.string() }).optional(),
  // Prompt caching is automatic here (the engine reuses any shared prefix), so the hint is moot.
  cache_control: z.looseObject({}).nullable().optional(),
};

const createSchema = z.strictObject({
  ...conversationFields,
  max_tokens: z.number().int().min(1),
  stop_sequences: z.array(z.string().min(1, "stop sequences must not be empty")).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0, "must be greater than 0").max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  stream: z.boolean().optional(),
  metadata: z.strictObject({ user_id: z.string().nullable().optional() }).optional(),
  service_tier: z.enum(["auto", "standard_only"]).optional(),
});

const countSchema = z.strictObject(conversationFields);

type ConversationBody = z.output<typeof countSchema>;

export function anthropicRoutes(state: ServerState): Hono {
  const app = new Hono();
  const badRequest = (_status: number, message: string) =>
    anthropicError(400, "invalid_request_error", message);

  const limit = bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: () =>
      anthropicError(
        413,
        "request_too_large",
        `request body is larger than ${MAX_BODY_BYTES} bytes`,
      ),
  });
  app.use("/v1/messages", limit);
  app.use("/v1/messages/*", limit);

  /** Prompt ids for a conversation, or the error response that explains why there are none. */
  function promptFor(b: ConversationBody): { ids: number[] } | { response: Response } {
    const unsupported = unsupportedFeature(b);
    if (unsupported) {
      return { response: anthropicError(400, "invalid_request_error", unsupported) };
    }
    const engine = state.engine;
    if (!engine) {
      return {
        response: anthropicError(529, "overloaded_error", "the model is still loading", {
          "retry-after": "1",
        }),
      };
    }
    if (!state.template) {
      return {
        response: anthropicError(
          400,
          "invalid_request_error",
          "the served model has no chat template; start the server with --chat-template FILE",
        ),
      };
    }
    try {
      return { ids: anthropicPromptIds(engine.model, state.template, b) };
    } catch (e) {
      if (isInputError(e)) {
        return { response: anthropicError(400, "invalid_request_error", e.message) };
      }
      throw e;
    }
  }

  app.post("/v1/messages/count_tokens", async (c) => {
    const body = await parseBody(c, countSchema, badRequest);
    if (!body.ok) return body.response;
    const prompt = promptFor(body.data);
    if ("response" in prompt) return prompt.response;
    return c.json({ input_tokens: prompt.ids.length });
  });

  app.post("/v1/messages", async (c) => {
    const body = await parseBody(c, createSchema, badRequest);
    if (!body.ok) return body.response;
    const b = body.data;
    const prompt = promptFor(b);
    if ("response" in prompt) return prompt.response;
    const engine = state.engine!;

    let events: AsyncIterable<GenEvent>;
    try {
      events = engine.submit(anthropicGenRequest(prompt.ids, b));
    } catch (e) {
      if (!isRefusal(e)) throw e;
      if (e.kind === "busy") {
        return anthropicError(529, "overloaded_error", e.message, { "retry-after": "1" });
      }
      return anthropicError(400, "invalid_request_error", e.message);
    }
    const reply = anthropicReply(events, c.req.raw.signal);
    const head = {
      id: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
      type: "message",
      role: "assistant",
      model: b.model,
    };
    const promptTokens = prompt.ids.length;

    if (b.stream) {
      // Frames arrive formatted (`event:` + `data:`); the shared writer adds the buffer bound.
      return sseResponse(streamFrames(reply, head, promptTokens), {
        format: (frame) => frame,
        bufferLimit: state.sseBufferLimit,
      });
    }

    let text = "";
    for await (const ev of reply) {
      if (ev.type === "text") text += ev.text;
      else if (ev.type === "error") {
        return anthropicError(500, "api_error", `generation failed: ${ev.message}`);
      } else {
        return c.json({
          ...head,
          content: [{ type: "text", text }],
          stop_reason: ev.stopReason,
          stop_sequence: ev.stopSequence,
          usage: usage(promptTokens, ev.outputTokens),
        });
      }
    }
    // Only an aborted request (client gone) gets here; nobody reads this.
    return anthropicError(499, "api_error", "the client closed the request");
  });

  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return anthropicError(500, "api_error", `internal error: ${err.message}`);
  });
  return app;
}

/** The request fields that ask for something not built yet; no-op forms of them pass. */
function unsupportedFeature(b: ConversationBody): string | undefined {
  if (b.tools?.length) return "tools: tool use is not supported yet";
  if (b.tool_choice && !["auto", "none"].includes(b.tool_choice.type)) {
    return `tool_choice: "${b.tool_choice.type}" is not supported yet (tool use is not)`;
  }
  if (b.thinking && b.thinking.type !== "disabled") {
    return `thinking: extended thinking ("${b.thinking.type}") is not supported yet`;
  }
  return undefined;
}

function usage(promptTokens: number, outputTokens: number) {
  return {
    input_tokens: promptTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    output_tokens: outputTokens,
  };
}

function frame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** One text content block, framed as the real API streams it. */
async function* streamFrames(
  reply: AsyncIterable<ReplyEvent>,
  head: Record<string, string>,
  promptTokens: number,
): AsyncGenerator<string> {
  yield frame("message_start", {
    type: "message_start",
    message: {
      ...head,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usage(promptTokens, 0),
    },
  });
  yield frame("content_block_start", {
    type: "content_block_start",
    index: 0,
    content_block: { type: "text", text: "" },
  });
  yield frame("ping", { type: "ping" });
  for await (const ev of reply) {
    if (ev.type === "text") {
      yield frame("content_block_delta", {
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text: ev.text },
      });
    } else if (ev.type === "error") {
      yield frame("error", {
        type: "error",
        error: { type: "api_error", message: `generation failed: ${ev.message}` },
      });
      return;
    } else {
      yield frame("content_block_stop", { type: "content_block_stop", index: 0 });
      yield frame("message_delta", {
        type: "message_delta",
        delta: { stop_reason: ev.stopReason, stop_sequence: ev.stopSequence },
        usage: usage(promptTokens, ev.outputTokens),
      });
      yield frame("message_stop", { type: "message_stop" });
      return;
    }
  }
}
