/**
 * vLLM's `/tokenize` and `/detokenize`. `/tokenize` takes `{prompt}` (BOS added unless
 * `add_special_tokens: false`) or `{messages}` rendered through the chat template (where the
 * template itself writes BOS, so `add_special_tokens` defaults to false) and answers
 * `{tokens, count, max_model_len}`; `/detokenize` takes `{tokens}` and answers `{prompt}`.
 *
 * @example
 * ```ts
 * import { tokenRoutes } from "./tokens.ts";
 * app.route("/", tokenRoutes(state));
 * ```
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { chatPromptText } from "../lib/chat/prompt.ts";
import { isRefusal } from "../lib/engine/scheduler.ts";
import type { ServerState } from "./state.ts";
import {
  detokenizeIds,
  specialSpellings,
  tokenizeText,
  tokenStrings,
} from "../lib/engine/tokens.ts";
import { openaiError, parseBody } from "./errors.ts";
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

export function tokenRoutes(state: ServerState): Hono {
  const app = new Hono();

  app.post("/tokenize", async (c) => {
    const body = await parseBody(c, tokenizeSchema);
    if (!body.ok) return body.response;
    const b = body.data;
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading");
    if (b.model !== undefined && b.model !== state.modelId) return modelNotFound(c, b.model);
    const m = engine.model;
    let text: string;
    let addSpecial: boolean;
    if (b.messages) {
      if (!state.template) {
        return openaiError(c, 400, "the model has no chat template; use `prompt`", {
          param: "messages",
        });
      }
      try {
        text = chatPromptText(state.template, specialSpellings(m), b.messages, {
          addGenerationPrompt: b.add_generation_prompt ?? true,
          extra: b.chat_template_kwargs,
        });
      } catch (e) {
        return openaiError(c, 400, `chat template failed: ${(e as Error).message}`, {
          param: "messages",
        });
      }
      addSpecial = b.add_special_tokens ?? false;
    } else {
      text = b.prompt!;
      addSpecial = b.add_special_tokens ?? true;
    }
    const tokens = tokenizeText(m, text, addSpecial);
    return c.json({
      tokens,
      count: tokens.length,
      max_model_len: m.nCtxSeq,
      ...(b.return_token_strs ? { token_strs: tokenStrings(m, tokens) } : {}),
    });
  });

  app.post("/detokenize", async (c) => {
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
  });

  return app;
}
