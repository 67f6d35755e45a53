/**
 * Builds the prompt text of a conversation for the loaded model: OpenAI-style messages are
 * normalised (text parts joined; other part types refused by name) and rendered through the chat
 * template with the model's BOS/EOS spellings.
 *
 * @example
 * ```ts
 * import { chatPromptText } from "./prompt.ts";
 * chatPromptText(tmpl, { bos: "<|begin_of_text|>", eos: "<|eot_id|>" },
 *   [{ role: "user", content: "Hi" }], { addGenerationPrompt: true });
 * ```
 * @module
 */
import { type ChatMessage, type CompiledTemplate, renderChat } from "./template.ts";

export type ContentPart = { type: string; text?: string; [k: string]: unknown };
export type InputMessage = {
  role: string;
  content?: string | ContentPart[] | null;
  [k: string]: unknown;
};

/** Joins text parts; a non-text part is an error that names it (images are not supported). */
export function normalizeMessages(messages: InputMessage[]): ChatMessage[] {
  return messages.map((m, i) => {
    let content: string | null;
    if (typeof m.content === "string" || m.content == null) content = m.content ?? null;
    else {
      content = m.content.map((p, j) => {
        if (p.type !== "text" || typeof p.text !== "string") {
          throw new Error(
            `messages[${i}].content[${j}]: content part type "${p.type}" is not supported ` +
              `(only "text")`,
          );
        }
        return p.text;
      }).join("");
    }
    return { ...m, role: m.role, content };
  });
}

export type SpecialSpellings = { bos?: string; eos?: string };

export function chatPromptText(
  template: CompiledTemplate,
  special: SpecialSpellings,
  messages: InputMessage[],
  opts: { addGenerationPrompt: boolean; extra?: Record<string, unknown> },
): string {
  return renderChat(template, {
    messages: normalizeMessages(messages),
    addGenerationPrompt: opts.addGenerationPrompt,
    bosToken: special.bos,
    eosToken: special.eos,
    extra: opts.extra,
  });
}
