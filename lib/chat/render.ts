/**
 * The neutral conversation rendered to prompt text by the model's own Jinja template: turns
 * become Hugging Face-style messages (assistant `tool_calls` with parsed `arguments`, `tool`
 * messages with `tool_call_id`, `reasoning_content`), the tools are passed as `tools` so the
 * template writes them the way the model was trained on, and templates that know no tools get
 * the family's instruction block in the system message instead.
 *
 * System and developer turns after the first user turn (Claude Code sends them mid-conversation)
 * are folded into the next user turn, since most templates accept a system message only first;
 * folding keeps everything before them byte-identical, so the cached prefix still matches.
 *
 * @example
 * ```ts
 * import { renderConversation } from "./render.ts";
 * declare const template: import("./template.ts").CompiledTemplate;
 * declare const format: import("./formats/mod.ts").ToolFormat;
 * declare const conv: import("./conversation.ts").Conversation;
 * const { text } = renderConversation(template, format, { bos: "<s>" }, conv, {
 *   addGenerationPrompt: true,
 * });
 * ```
 * @module
 */
import {
  chatInputError,
  type Conversation,
  type Part,
  partsText,
  type ToolSpec,
} from "./conversation.ts";
import type { ToolFormat } from "./formats/mod.ts";
import { type ChatMessage, type CompiledTemplate, renderChat } from "./template.ts";

/** How the model spells its BOS and EOS tokens, for templates that write them. */
export type SpecialSpellings = { bos?: string; eos?: string };

export type RenderOptions = {
  addGenerationPrompt: boolean;
  /** Extra template variables (`reasoning_effort`, `enable_thinking`, `chat_template_kwargs`). */
  extra?: Record<string, unknown>;
};

export type Rendered = {
  /** The prompt text, prefilled assistant text included. */
  text: string;
  /** Text of a trailing assistant turn the reply continues (Anthropic prefill). */
  prefill?: string;
  /** Tools the template could not render, listed in the system message instead. */
  unrendered?: string[];
};

const TURN_JOIN = "\n\n";

/** Tools as the OpenAI-style list templates iterate over. */
export function templateTools(tools: ToolSpec[]): unknown[] {
  return tools.map((t) => ({
    type: "function",
    function: {
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      parameters: t.parameters,
    },
  }));
}

function parseArguments(text: string): unknown {
  try {
    const v = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? v : text;
  } catch {
    return text;
  }
}

/** The text parts of a turn, one per line (as vLLM joins text parts). */
function text(parts: Part[]): string {
  return partsText(parts, "\n");
}

/**
 * Turns to template messages: leading system/developer turns merged into one system message,
 * later ones folded into the user turn that follows, consecutive user turns merged, and every
 * tool result its own `tool` message (named after the call it answers).
 */
export function toTemplateMessages(conv: Conversation, systemExtra = ""): ChatMessage[] {
  const out: ChatMessage[] = [];
  const callNames = new Map<string, string>();
  let system: string[] = [];
  let seenOther = false;
  let pendingNote: string[] = [];
  for (const turn of conv.turns) {
    if (turn.role === "system" || turn.role === "developer") {
      const t = text(turn.parts);
      if (!seenOther) system.push(t);
      else if (t) pendingNote.push(t);
      continue;
    }
    seenOther = true;
    if (turn.role === "user") {
      const t = [...pendingNote, text(turn.parts)].filter((s) => s !== "").join(TURN_JOIN);
      pendingNote = [];
      const last = out.at(-1);
      if (last?.role === "user" && typeof last.content === "string") {
        last.content += TURN_JOIN + t;
      } else out.push({ role: "user", content: t });
      continue;
    }
    if (turn.role === "tool") {
      for (const p of turn.parts) {
        if (p.type !== "tool_result") continue;
        const name = p.name ?? callNames.get(p.callId) ?? "";
        out.push({
          role: "tool",
          tool_call_id: p.callId,
          name,
          content: p.isError ? `Error: ${p.content}` : p.content,
        });
      }
      continue;
    }
    // assistant
    if (pendingNote.length) {
      out.push({ role: "user", content: pendingNote.join(TURN_JOIN) });
      pendingNote = [];
    }
    const calls = turn.parts.filter((p) => p.type === "tool_call");
    const reasoning = turn.parts.filter((p) => p.type === "reasoning")
      .map((p) => (p as { text: string }).text).join("\n");
    for (const c of calls) callNames.set(c.id, c.name);
    const msg: ChatMessage = { role: "assistant", content: text(turn.parts) };
    if (reasoning) msg.reasoning_content = reasoning;
    if (calls.length) {
      msg.tool_calls = calls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: parseArguments(c.arguments) },
      }));
    }
    const last = out.at(-1);
    if (
      last?.role === "assistant" && !last.tool_calls && !msg.tool_calls && !msg.reasoning_content
    ) {
      last.content += TURN_JOIN + (msg.content ?? "");
    } else out.push(msg);
  }
  if (pendingNote.length) out.push({ role: "user", content: pendingNote.join(TURN_JOIN) });
  if (systemExtra) system = [...system.filter((s) => s !== ""), systemExtra];
  const sys = system.filter((s) => s !== "").join(TURN_JOIN);
  if (sys) out.unshift({ role: "system", content: sys });
  return out;
}

/**
 * Renders the conversation to the prompt text. A trailing assistant turn without tool calls is
 * a prefill when `prefill` is asked: the generation prompt is added and its text follows it.
 */
export function renderConversation(
  template: CompiledTemplate,
  format: ToolFormat,
  special: SpecialSpellings,
  conv: Conversation,
  opts: RenderOptions & { prefill?: boolean },
): Rendered {
  try {
    return renderWith(template, format, special, conv, opts, []);
  } catch (e) {
    // A template may fail on a tool schema it was not written for (Hermes 3's type mapper recurses
    // for ever on `"type": "null"`, in Python too): those tools are listed in the system message
    // the generic way and the others rendered by the template, rather than refusing the request.
    if (!(conv.tools.length && format.rendersTools && format.toolSystemPrompt)) throw refused(e);
    const alone = (t: ToolSpec) => {
      try {
        renderChat(template, {
          messages: [{ role: "user", content: "." }],
          addGenerationPrompt: true,
          extra: { ...opts.extra, tools: templateTools([t]) },
        });
        return true;
      } catch {
        return false;
      }
    };
    const bad = conv.tools.filter((t) => !alone(t));
    if (!bad.length) throw refused(e);
    try {
      return {
        ...renderWith(template, format, special, conv, opts, bad),
        unrendered: bad.map((t) => t.name),
      };
    } catch {
      throw refused(e);
    }
  }
}

function refused(e: unknown): Error {
  // Templates refuse conversations they cannot render (`raise_exception`): the client's
  // conversation is at fault, not the server.
  return chatInputError("messages", `the chat template refused it: ${(e as Error).message}`);
}

/** The rendering with `listed` tools described in the system message rather than by the template. */
function renderWith(
  template: CompiledTemplate,
  format: ToolFormat,
  special: SpecialSpellings,
  conv: Conversation,
  opts: RenderOptions & { prefill?: boolean },
  listed: ToolSpec[],
): Rendered {
  const offerTools = conv.tools.length > 0;
  const byTemplate = format.rendersTools ? conv.tools.filter((t) => !listed.includes(t)) : [];
  const inSystem = format.rendersTools ? listed : conv.tools;
  const systemExtra = offerTools && inSystem.length && format.toolSystemPrompt
    ? format.toolSystemPrompt(inSystem)
    : "";
  const plain = toTemplateMessages(conv, systemExtra);
  const messages = format.templateMessages ? format.templateMessages(plain) : plain;
  let prefill: string | undefined;
  const last = messages.at(-1);
  if (opts.prefill && last?.role === "assistant" && !last.tool_calls) {
    messages.pop();
    prefill = typeof last.content === "string" ? last.content : "";
    // Anthropic rejects a prefill ending in whitespace; trimming keeps tokenization natural.
    prefill = prefill.replace(/\s+$/, "");
  }
  const extra: Record<string, unknown> = { ...opts.extra };
  if (byTemplate.length) extra.tools = templateTools(byTemplate);
  const out = renderChat(template, {
    messages,
    addGenerationPrompt: prefill !== undefined ? true : opts.addGenerationPrompt,
    bosToken: special.bos,
    eosToken: special.eos,
    extra,
  });
  return { text: out + (prefill ?? ""), prefill };
}
