/**
 * The OpenAI Responses API (what Codex CLI speaks): `POST /v1/responses` (plain and streamed),
 * `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}`. Requests are mapped onto the shared
 * conversation (`lib/chat/responses.ts`); with `store` (the default) the response and its thread
 * are kept under the data dir, so `previous_response_id` continues it.
 *
 * @example
 * ```ts
 * import { responsesHandlers } from "./responses.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "responses"), responsesHandlers(state)); // routes/table.ts
 * // curl localhost:8000/v1/responses -d '{"model":"hearth-demo","input":"Hi"}'
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import { compileConstraint, isConstraintError, jsonObjectGbnf } from "../lib/constrain/mod.ts";
import { chatInputError } from "../lib/chat/conversation.ts";
import { type ChatEvent, effortBudget } from "../lib/chat/generation.ts";
import { mcpToolEntries } from "../lib/chat/mcp_attach.ts";
import { createResponseStore, type ResponseStore } from "../lib/chat/response_store.ts";
import {
  inputItems,
  newResponseEvents,
  newResponseId,
  type ResponseItem,
  responsesConversation,
  responseSegments,
  type ToolOrigins,
} from "../lib/chat/responses.ts";
import { collectLoop, type LoopEvent } from "../lib/chat/tool_loop.ts";
import { planTurn, startTurn, turnError, turnReady } from "../lib/chat/turn.ts";
import type { ServerState } from "./state.ts";
import { openaiError, openaiTurnError, parseBody } from "./errors.ts";
import type { ParamContext } from "./table.ts";
import { noteIgnored, noteRelaxed } from "./ignored.ts";
import { modelNotFound, toSampling } from "./openai_common.ts";
import { KEEPALIVE_MS, sseResponse } from "./sse.ts";

const item = z.looseObject({ type: z.string().optional() });

const responsesSchema = z.looseObject({
  model: z.string().nullable().optional(),
  input: z.union([z.string(), z.array(item)], "must be a string or an array of items")
    .optional(),
  instructions: z.string().nullable().optional(),
  tools: z.array(z.looseObject({ type: z.string() })).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({ type: z.string() })]).nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  max_output_tokens: z.number().int().min(1).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0, "must be greater than 0").max(1).nullable().optional(),
  reasoning: z.looseObject({
    effort: z.string().nullable().optional(),
    summary: z.string().nullable().optional(),
  }).nullable().optional(),
  text: z.looseObject({
    format: z.looseObject({
      type: z.enum(["text", "json_object", "json_schema"]),
      schema: z.union([z.record(z.string(), z.unknown()), z.boolean()]).optional(),
      name: z.string().optional(),
      strict: z.boolean().nullable().optional(),
    }).optional(),
  }).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  store: z.boolean().nullable().optional(),
  previous_response_id: z.string().nullable().optional(),
  background: z.boolean().nullable().optional(),
  conversation: z.unknown().optional(),
  top_logprobs: z.number().int().min(0).max(20).nullable().optional(),
});

type ResponsesBody = z.output<typeof responsesSchema>;

/** The handlers of the `responses` rows of routes/table.ts. */
export function responsesHandlers(state: ServerState) {
  let store: ResponseStore | undefined;
  const storeOf = () =>
    store ??= createResponseStore(
      `${state.dataDir ?? `${Deno.env.get("HOME") ?? "/tmp"}/.cache/hearth`}/responses`,
    );

  const createResponse = async (c: Context) => {
    const body = await parseBody(c, responsesSchema);
    if (!body.ok) return body.response;
    return await respond(c, state, storeOf(), body.data);
  };

  const getResponse = async (c: ParamContext<"id">) => {
    const found = await storeOf().get(c.req.param("id"));
    if (!found) return notFound(c, c.req.param("id"), "id");
    return c.json(found.response);
  };

  const listInputItems = async (c: ParamContext<"id">) => {
    const found = await storeOf().get(c.req.param("id"));
    if (!found) return notFound(c, c.req.param("id"), "id");
    const data = found.items.map((it, i) => ({ id: it.id ?? `item_${i}`, ...it }));
    return c.json({
      object: "list",
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: false,
    });
  };

  const deleteResponse = async (c: ParamContext<"id">) => {
    const id = c.req.param("id");
    if (!(await storeOf().delete(id))) return notFound(c, id, "id");
    return c.json({ id, object: "response", deleted: true });
  };
  return { createResponse, getResponse, listInputItems, deleteResponse };
}

function notFound(c: Context, id: string, param: string): Response {
  return openaiError(c, 404, `Response with id '${id}' not found.`, {
    type: "invalid_request_error",
    param,
    code: param === "previous_response_id" ? "previous_response_not_found" : "not_found",
  });
}

function refused(b: ResponsesBody): { message: string; param: string } | undefined {
  if (b.background) {
    return { message: "`background` responses are not supported", param: "background" };
  }
  if (b.conversation != null) {
    return {
      message: "`conversation` objects are not supported; use previous_response_id",
      param: "conversation",
    };
  }
  if (b.top_logprobs) {
    return { message: "`top_logprobs` is not supported on /v1/responses", param: "top_logprobs" };
  }
  return undefined;
}

/** The `text.format` grammar, or undefined for plain text. */
function formatGrammar(b: ResponsesBody): string | undefined {
  const f = b.text?.format;
  if (!f || f.type === "text") return undefined;
  if (f.type === "json_object") return jsonObjectGbnf();
  if (f.schema === undefined) {
    throw chatInputError("text.format.schema", "is required for json_schema");
  }
  try {
    return compileConstraint({ json: f.schema });
  } catch (e) {
    if (isConstraintError(e)) throw chatInputError("text.format.schema", e.message);
    throw e;
  }
}

async function respond(
  c: Context,
  state: ServerState,
  store: ResponseStore,
  b: ResponsesBody,
): Promise<Response> {
  const bad = refused(b);
  if (bad) return openaiError(c, 400, bad.message, { param: bad.param });
  if (b.model != null && b.model !== state.modelId) return modelNotFound(c, b.model);
  const notReady = turnReady(state);
  if (notReady) return openaiTurnError(c, notReady, "input");

  let earlier: ResponseItem[] = [];
  if (b.previous_response_id) {
    const prev = await store.get(b.previous_response_id);
    if (!prev) return notFound(c, b.previous_response_id, "previous_response_id");
    earlier = [...prev.items, ...((prev.response.output as ResponseItem[]) ?? [])];
  }

  const summary = b.reasoning?.summary != null && b.reasoning.summary !== "none";
  const extra: Record<string, unknown> = {};
  if (b.reasoning?.effort != null) extra.reasoning_effort = b.reasoning.effort;
  const attach = mcpToolEntries(b.tools as { type: string }[] | undefined);
  let mapped;
  let grammar;
  try {
    grammar = formatGrammar(b);
    mapped = responsesConversation(
      (attach.length
        ? { ...b, tools: b.tools!.filter((t) => (t as { type?: string }).type !== "mcp") }
        : b) as Parameters<typeof responsesConversation>[0],
      earlier,
    );
  } catch (e) {
    return openaiTurnError(c, turnError(e, "input"), "input");
  }
  const planned = await planTurn(state, {
    conv: mapped.conv,
    ignored: mapped.ignored,
    mcp: attach,
    toolChoiceGiven: b.tool_choice != null,
    toolParam: (i) => mapped.toolParams[i] ?? `tools[${i}]`,
    promptParam: "input",
    gen: {
      maxTokens: b.max_output_tokens ?? undefined,
      sampling: toSampling(
        { temperature: b.temperature, top_p: b.top_p },
        0,
        state.engine?.model.samplingDefaults,
      ),
      stop: [],
      ignoreEos: false,
      grammar,
      grammarParam: "text.format",
      reasoningBudget: effortBudget(b.reasoning?.effort),
    },
    render: { addGenerationPrompt: true, extra },
  });
  if (!planned.ok) return openaiTurnError(c, planned.error, "input");
  noteIgnored(c, planned.value.notes);
  noteRelaxed(c, planned.value.plan.checks);
  const started = startTurn(planned.value, { signal: c.req.raw.signal });
  if (!started.ok) return openaiTurnError(c, started.error, "input");
  const reply = started.value.replies[0];

  const stored = b.store ?? true;
  const thread = [...earlier, ...inputItems(b.input)];
  const shell: Record<string, unknown> & { id: string } = {
    id: newResponseId(),
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status: "in_progress",
    error: null,
    incomplete_details: null,
    instructions: b.instructions ?? null,
    max_output_tokens: b.max_output_tokens ?? null,
    model: state.modelId,
    output: [],
    parallel_tool_calls: b.parallel_tool_calls ?? true,
    previous_response_id: b.previous_response_id ?? null,
    reasoning: { effort: b.reasoning?.effort ?? null, summary: b.reasoning?.summary ?? null },
    store: stored,
    temperature: b.temperature ?? 1,
    text: { format: b.text?.format ?? { type: "text" } },
    tool_choice: b.tool_choice ?? "auto",
    tools: b.tools ?? [],
    top_p: b.top_p ?? 1,
    truncation: "disabled",
    usage: null,
    metadata: (b as { metadata?: unknown }).metadata ?? {},
  };
  const finished = async (
    output: ResponseItem[],
    end: Extract<ChatEvent, { type: "end" }>,
  ): Promise<Record<string, unknown>> => {
    const incomplete = end.finishReason === "length";
    const response = {
      ...shell,
      status: incomplete ? "incomplete" : "completed",
      incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
      output,
      usage: {
        input_tokens: end.promptTokens,
        input_tokens_details: { cached_tokens: end.cachedTokens },
        output_tokens: end.completionTokens,
        output_tokens_details: { reasoning_tokens: end.reasoningTokens },
        total_tokens: end.promptTokens + end.completionTokens,
      },
    };
    if (stored) {
      await store.put({ response, items: thread }).catch((e) =>
        console.error(`hearth: could not store response ${shell.id}: ${(e as Error).message}`)
      );
    }
    state.chatLog?.({ route: c.req.path, request: b, response, status: 200 });
    return response;
  };

  if (b.stream) {
    const frame = responseFramer();
    return sseResponse(streamEvents(reply, shell, summary, finished, frame, mapped.origins), {
      format: (frame) => frame,
      bufferLimit: state.sseBufferLimit,
      onCancel: started.value.cancel,
      // Codex counts only events as signs of life (not comments): the API's own in_progress.
      keepalive: {
        everyMs: KEEPALIVE_MS,
        frame: () => frame({ type: "response.in_progress", response: shell }),
      },
    });
  }

  const r = await collectLoop(reply);
  if (r.error || !r.end) {
    const why = r.error ?? "the request was cancelled";
    state.chatLog?.({ route: c.req.path, request: b, response: { error: why }, status: 500 });
    return openaiError(c, 500, `generation failed: ${why}`);
  }
  return c.json(await finished(responseSegments(r.segments, summary, mapped.origins), r.end));
}

/** Frames stream events in order, numbering them (`sequence_number`) as they are framed. */
function responseFramer(): (ev: Record<string, unknown>) => string {
  let seq = 0;
  return (ev) =>
    `event: ${ev.type}\ndata: ${JSON.stringify({ ...ev, sequence_number: seq++ })}\n\n`;
}

async function* streamEvents(
  reply: AsyncIterable<LoopEvent>,
  shell: Record<string, unknown>,
  summary: boolean,
  finished: (
    output: ResponseItem[],
    end: Extract<ChatEvent, { type: "end" }>,
  ) => Promise<Record<string, unknown>>,
  frame: (ev: Record<string, unknown>) => string,
  origins?: ToolOrigins,
): AsyncGenerator<string> {
  yield frame({ type: "response.created", response: shell });
  yield frame({ type: "response.in_progress", response: shell });
  const events = newResponseEvents(summary, origins);
  for await (const ev of reply) {
    if (ev.type === "error") {
      yield frame({
        type: "response.failed",
        response: {
          ...shell,
          status: "failed",
          error: { code: "server_error", message: `generation failed: ${ev.message}` },
        },
      });
      return;
    }
    if (ev.type === "end") {
      for (const e of events.close()) yield frame(e);
      const response = await finished(events.items, ev);
      const type = response.status === "incomplete" ? "response.incomplete" : "response.completed";
      yield frame({ type, response });
      return;
    }
    for (const e of events.push(ev)) yield frame(e);
  }
}
