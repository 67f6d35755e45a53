/**
 * vLLM's `/tokenize` and `/detokenize`. `/tokenize` takes `{prompt}` (BOS added unless
 * `add_special_tokens: false`) or `{messages}` rendered through the chat template (where the
 * template itself writes BOS, so `add_special_tokens` defaults to false) and answers
 * `{tokens, count, max_model_len}` (`{messages}` renders through the chat turn's own path,
 * `lib/chat/turn.ts`, so the count is what a chat request would prompt with;
 * `continue_final_message` leaves the last assistant message open, as a prefill); `/detokenize` takes `{tokens}` and answers `{prompt}`.
 *
 * @example
 * ```ts
 * import { tokenHandlers } from "./tokens.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "tokens"), tokenHandlers(state)); // routes/table.ts
 * ```
 * @module
 */
import type { Context } from "hono";
import { z } from "zod";
import { chatCompletionsConversation } from "../lib/chat/openai_chat.ts";
import { type ChatTurn, planTurn, turnError, type TurnResult } from "../lib/chat/turn.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { isRefusal } from "../lib/engine/scheduler.ts";
import type { ServerState } from "./state.ts";
import { detokenizeIds, tokenizeText, tokenStrings } from "../lib/engine/tokens.ts";
import { openaiError, openaiTurnError, parseBody } from "./errors.ts";
import { messageSchema, modelNotFound } from "./openai_common.ts";

const tokenizeSchema = z.strictObject({
  model: z.string().optional(),
  prompt: z.string().optional(),
  messages: z.array(messageSchema).min(1).optional(),
  add_special_tokens: z.boolean().optional(),
  add_generation_prompt: z.boolean().optional(),
  continue_final_message: z.boolean().optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
  return_token_strs: z.boolean().optional(),
}).refine((b) => (b.prompt === undefined) !== (b.messages === undefined), {
  message: "give exactly one of `prompt` or `messages`",
});

const detokenizeSchema = z.strictObject({
  model: z.string().optional(),
  tokens: z.array(z.number().int("must be an integer token id")),
  skip_special_tokens: z.boolean().optional(),
});

/** The handlers of the `tokens` rows of routes/table.ts. */
export function tokenHandlers(state: ServerState) {
  const tokenize = async (c: Context) => {
    const body = await parseBody(c, tokenizeSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading");
    if (b.model !== undefined && b.model !== state.modelId) return modelNotFound(c, b.model);
    const m = engine.model;
    let tokens: number[];
    if (b.messages) {
      // The chat turn's own rendering, so this count is the prompt a chat request would get.
      const planned = await messagesTurn(b.messages, {
        addGenerationPrompt: b.add_generation_prompt ?? true,
        prefill: b.continue_final_message ?? false,
        extra: b.chat_template_kwargs,
      });
      if (!planned.ok) return openaiTurnError(c, planned.error, "messages");
      const plan = planned.value.plan;
      tokens = b.add_special_tokens ? tokenizeText(m, plan.text, true) : plan.prompt;
    } else tokens = tokenizeText(m, b.prompt!, b.add_special_tokens ?? true);
    return c.json({
      tokens,
      count: tokens.length,
      max_model_len: m.nCtxSeq,
      ...(b.return_token_strs ? { token_strs: tokenStrings(m, tokens) } : {}),
    });
  };

  function messagesTurn(
    messages: z.output<typeof messageSchema>[],
    render: { addGenerationPrompt: boolean; prefill: boolean; extra?: Record<string, unknown> },
  ): Promise<TurnResult<ChatTurn>> {
    let conv;
    try {
      conv = chatCompletionsConversation({ messages }).conv;
    } catch (e) {
      return Promise.resolve({ ok: false, error: turnError(e, "messages") });
    }
    return planTurn(state, {
      conv,
      toolChoiceGiven: false,
      toolParam: (i) => `tools[${i}]`,
      promptParam: "messages",
      gen: { sampling: defaultSampling(), stop: [], ignoreEos: false },
      render,
    });
  }

  const detokenize = async (c: Context) => {
    const body = await parseBody(c, detokenizeSchema);
    if (!body.ok) return body.response;
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading");
    if (body.data.model !== undefined && body.data.model !== state.modelId) {
      return modelNotFound(c, body.data.model);
    }
    try {
      const prompt = detokenizeIds(
        engine.model,
        body.data.tokens,
        body.data.skip_special_tokens ?? false,
      );
      return c.json({ prompt });
    } catch (e) {
      if (isRefusal(e)) return openaiError(c, 400, e.message, { param: "tokens" });
      throw e;
    }
  };

  return { tokenize, detokenize };
}
