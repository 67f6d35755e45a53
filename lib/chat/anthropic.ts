/**
 * Anthropic Messages requests mapped onto the engine, with no HTTP in sight: the conversation
 * (system prompt, text blocks, a prefilled assistant turn) becomes prompt tokens through the chat
 * template, sampling fields become engine settings, and the engine's events become an Anthropic
 * reply (text, then a stop reason, stop sequence and token counts).
 *
 * Stop sequences are matched by the engine, whose `done` event names the stop string that ended
 * generation, so the token counts and the cached prefix stay exact on every stop reason.
 *
 * @example
 * ```ts
 * import { anthropicGenRequest, anthropicPromptIds, anthropicReply } from "./anthropic.ts";
 * const prompt = anthropicPromptIds(engine.model, template, {
 *   system: "Answer in one word.",
 *   messages: [{ role: "user", content: "Capital of France?" }],
 * });
 * const events = engine.submit(anthropicGenRequest(prompt, { max_tokens: 8, temperature: 0 }));
 * for await (const ev of anthropicReply(events, ["\n"])) {
 *   if (ev.type === "text") console.log(ev.text);
 *   else if (ev.type === "end") console.log(ev.stopReason, ev.stopSequence, ev.outputTokens);
 * }
 * ```
 * @module
 */
import type { EngineModel } from "../engine/model.ts";
import { defaultSampling, type Sampling } from "../engine/sampling.ts";
import type { GenEvent, GenRequest } from "../engine/scheduler.ts";
import { specialSpellings, tokenizeText } from "../engine/tokens.ts";
import { chatPromptText, type InputMessage, type SpecialSpellings } from "./prompt.ts";
import type { CompiledTemplate } from "./template.ts";

/** A content block as sent; only `text` blocks are understood so far. */
export type AnthropicBlock = { type: string; text?: unknown; [k: string]: unknown };

export type AnthropicMessage = {
  role: "user" | "assistant";
  content: string | AnthropicBlock[];
};

export type AnthropicConversation = {
  system?: string | AnthropicBlock[];
  messages: AnthropicMessage[];
};

/** Something wrong with the request itself; `param` is the dotted path of the field at fault. */
export type AnthropicInputError = Error & { param: string };

export function inputError(param: string, message: string): AnthropicInputError {
  return Object.assign(new Error(`${param}: ${message}`), { param });
}

export function isInputError(e: unknown): e is AnthropicInputError {
  return e instanceof Error && "param" in e;
}

// Separate blocks read as separate lines (as vLLM joins text parts); separate consecutive turns
// of one role, which Anthropic merges into one turn, read as separate paragraphs.
const BLOCK_JOIN = "\n";
const TURN_JOIN = "\n\n";

/** Joins text blocks; any other block type is refused by name. */
export function blocksText(content: string | AnthropicBlock[], param: string): string {
  if (typeof content === "string") return content;
  return content.map((b, i) => {
    if (b.type !== "text") {
      throw inputError(
        `${param}[${i}]`,
        `content block type "${b.type}" is not supported yet (only "text" blocks are)`,
      );
    }
    if (typeof b.text !== "string") throw inputError(`${param}[${i}].text`, "must be a string");
    return b.text;
  }).join(BLOCK_JOIN);
}

/**
 * The conversation as chat-template messages (system first, consecutive turns of one role
 * merged), and the text of a trailing assistant turn, which the reply continues rather than
 * follows.
 */
export function toChatMessages(
  conv: AnthropicConversation,
): { messages: InputMessage[]; prefill?: string } {
  const messages: InputMessage[] = [];
  const system = conv.system === undefined ? "" : blocksText(conv.system, "system");
  if (system) messages.push({ role: "system", content: system });
  const turns: { role: string; content: string }[] = [];
  conv.messages.forEach((m, i) => {
    const text = blocksText(m.content, `messages[${i}].content`);
    const last = turns.at(-1);
    if (last && last.role === m.role) last.content += TURN_JOIN + text;
    else turns.push({ role: m.role, content: text });
  });
  let prefill: string | undefined;
  if (turns.at(-1)?.role === "assistant") prefill = turns.pop()!.content;
  messages.push(...turns);
  return { messages, prefill };
}

/** The prompt text: the template with a generation prompt, plus any prefilled reply start. */
export function anthropicPromptText(
  template: CompiledTemplate,
  special: SpecialSpellings,
  conv: AnthropicConversation,
): string {
  const { messages, prefill } = toChatMessages(conv);
  let text: string;
  try {
    text = chatPromptText(template, special, messages, { addGenerationPrompt: true });
  } catch (e) {
    // Templates refuse conversations they cannot render (`raise_exception`); that is the
    // client's conversation at fault, not the server.
    throw inputError("messages", `the chat template refused it: ${(e as Error).message}`);
  }
  return text + (prefill ?? "");
}

/** Prompt token ids; the template writes BOS itself, so the tokenizer adds none. */
export function anthropicPromptIds(
  m: EngineModel,
  template: CompiledTemplate,
  conv: AnthropicConversation,
): number[] {
  return tokenizeText(m, anthropicPromptText(template, specialSpellings(m), conv), false);
}

export type AnthropicSamplingInput = {
  max_tokens: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
};

export function anthropicSampling(b: AnthropicSamplingInput): Sampling {
  const d = defaultSampling();
  return {
    ...d,
    temperature: b.temperature ?? d.temperature,
    topP: b.top_p ?? d.topP,
    topK: b.top_k ?? d.topK,
  };
}

/** The engine request, stop sequences included. */
export function anthropicGenRequest(
  prompt: number[],
  b: AnthropicSamplingInput & { stop_sequences?: string[] },
): GenRequest {
  return {
    prompt: Int32Array.from(prompt),
    maxTokens: b.max_tokens,
    sampling: anthropicSampling(b),
    stop: b.stop_sequences ?? [],
    ignoreEos: false,
  };
}

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence";

export type ReplyEvent =
  | { type: "text"; text: string }
  | {
    type: "end";
    stopReason: StopReason;
    stopSequence: string | null;
    outputTokens: number;
    cachedTokens: number;
  }
  | { type: "error"; message: string };

/**
 * The engine's events as an Anthropic reply: text, then one `end` (or `error`). Ending the
 * iteration early, or `signal` aborting, closes the engine's iterator, which frees the sequence;
 * after an abort nothing more is yielded.
 */
export async function* anthropicReply(
  events: AsyncIterable<GenEvent>,
  signal?: AbortSignal,
): AsyncGenerator<ReplyEvent> {
  const it = events[Symbol.asyncIterator]();
  // Closing the iterator on abort ends a `next()` that is still waiting, at once.
  const onAbort = () => void it.return?.();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    while (!signal?.aborted) {
      const r = await it.next();
      if (r.done || signal?.aborted) break;
      const ev = r.value;
      if (ev.type === "text") yield { type: "text", text: ev.text };
      else if (ev.type === "done") {
        const bySequence = ev.stopString !== undefined;
        yield {
          type: "end",
          stopReason: bySequence
            ? "stop_sequence"
            : ev.finishReason === "stop"
            ? "end_turn"
            : "max_tokens",
          stopSequence: ev.stopString ?? null,
          outputTokens: ev.completionTokens,
          cachedTokens: ev.cachedTokens,
        };
        return;
      } else {
        yield { type: "error", message: ev.message };
        return;
      }
    }
    if (!signal?.aborted) yield { type: "error", message: "generation ended without a result" };
  } finally {
    signal?.removeEventListener("abort", onAbort);
    await it.return?.();
  }
}
