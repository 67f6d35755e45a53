/**
 * Chat templates: the model's Jinja template (or `--chat-template FILE`) rendered with
 * `@huggingface/jinja`, the same way the Hugging Face tokenizers and llama.cpp's `--jinja` do:
 * `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, plus extra variables such as
 * `reasoning_effort` or `tools` passed straight through.
 *
 * @example
 * ```ts
 * import { compileTemplate, renderChat } from "./template.ts";
 * const t = compileTemplate("{% for m in messages %}{{ m.content }}{% endfor %}");
 * renderChat(t, { messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true }); // "hi"
 * ```
 * @module
 */
import { Template } from "@huggingface/jinja";

export type ChatMessage = { role: string; content: string | null; [k: string]: unknown };

export type CompiledTemplate = { source: string; template: Template };

/** Parses a template once; a syntax error throws with the parser's reason. */
export function compileTemplate(source: string): CompiledTemplate {
  return { source, template: new Template(source) };
}

export type RenderInput = {
  messages: ChatMessage[];
  addGenerationPrompt: boolean;
  bosToken?: string;
  eosToken?: string;
  /** Extra template variables (`reasoning_effort`, `tools`, ...). */
  extra?: Record<string, unknown>;
};

/** Renders the conversation to the prompt text the model was trained on. */
export function renderChat(t: CompiledTemplate, input: RenderInput): string {
  return t.template.render({
    ...input.extra,
    messages: input.messages,
    add_generation_prompt: input.addGenerationPrompt,
    bos_token: input.bosToken ?? "",
    eos_token: input.eosToken ?? "",
  });
}
