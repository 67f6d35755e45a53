/**
 * The one conversation model the three chat dialects (OpenAI Chat Completions, Anthropic
 * Messages, OpenAI Responses) are mapped onto: turns with a role and typed parts, the tools the
 * model may call, and how it may call them. Each dialect adapter translates its wire shape into
 * this and the generated reply back out of it; rendering, tool formats and output parsing only
 * ever see this model.
 *
 * @example
 * ```ts
 * import type { Conversation } from "./conversation.ts";
 * const conv: Conversation = {
 *   turns: [
 *     { role: "system", parts: [{ type: "text", text: "Be brief." }] },
 *     { role: "user", parts: [{ type: "text", text: "Weather in Paris?" }] },
 *     { role: "assistant", parts: [{ type: "tool_call", id: "call_1", name: "weather",
 *       arguments: '{"city":"Paris"}' }] },
 *     { role: "tool", parts: [{ type: "tool_result", callId: "call_1", name: "weather",
 *       content: "18C, sunny" }] },
 *   ],
 *   tools: [{ name: "weather", description: "Current weather", parameters: {
 *     type: "object", properties: { city: { type: "string" } }, required: ["city"] } }],
 *   toolChoice: { type: "auto" },
 *   parallelToolCalls: true,
 * };
 * ```
 * @module
 */

export type Role = "system" | "developer" | "user" | "assistant" | "tool";

export type TextPart = { type: "text"; text: string };
/** Reasoning the model wrote before its answer (`<think>`, Anthropic `thinking`, Responses `reasoning`). */
export type ReasoningPart = { type: "reasoning"; text: string };
/** A call the assistant made; `arguments` is JSON text, as every dialect carries it. */
export type ToolCallPart = { type: "tool_call"; id: string; name: string; arguments: string };
/** What a tool returned for a call; `name` is filled in from the call when the dialect omits it. */
export type ToolResultPart = {
  type: "tool_result";
  callId: string;
  name?: string;
  content: string;
  isError?: boolean;
};
/**
 * An image the client sent (`source`: the wire field that carried it). The served models read
 * text only; a refused image would break every later turn of an agent's session (the history is
 * resent), so the image is rendered as {@link IMAGE_PLACEHOLDER} and named as ignored.
 */
export type ImagePart = { type: "image"; source: string };

/** What an image becomes in the prompt of a text-only model. */
export const IMAGE_PLACEHOLDER = "[image omitted: this model reads text only]";

export type Part = TextPart | ReasoningPart | ToolCallPart | ToolResultPart | ImagePart;

export type Turn = { role: Role; parts: Part[] };

/** A function the model may call; `parameters` is its JSON Schema (an object schema). */
export type ToolSpec = {
  name: string;
  description?: string;
  parameters: Record<string, unknown>;
};

/**
 * `auto`: the model decides; `none`: no calls (tools still rendered, as OpenAI does);
 * `required`: at least one call (Anthropic `any`); `tool`: exactly the named function.
 */
export type ToolChoice =
  | { type: "auto" }
  | { type: "none" }
  | { type: "required" }
  | { type: "tool"; name: string };

export type Conversation = {
  turns: Turn[];
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
};

/** What the model produced, in order, for a dialect to shape (streamed or whole). */
export type ReplyEvent =
  | { type: "reasoning"; text: string }
  | { type: "text"; text: string }
  | { type: "tool_call_start"; index: number; id: string; name: string }
  | { type: "tool_call_args"; index: number; text: string }
  | { type: "tool_call_end"; index: number; arguments: string };

/** A request that cannot be rendered as given; `param` is the wire field at fault. */
export type ChatInputError = Error & { param: string; chatInput: true };

export function chatInputError(param: string, message: string): ChatInputError {
  return Object.assign(new Error(`${param}: ${message}`), { param, chatInput: true as const });
}

export function isChatInputError(e: unknown): e is ChatInputError {
  return e instanceof Error && (e as Partial<ChatInputError>).chatInput === true;
}

/**
 * A tool spec from one dialect's fields, checked the same way for all three: `at` is the wire
 * path of the tool (`tools[2].function`), the name must be a string, and the schema an object;
 * an absent schema means "any arguments object" unless the dialect requires one.
 */
export function toolSpec(
  at: string,
  fields: { name: unknown; description: unknown; schema: unknown },
  schemaKey: string,
  schemaRequired = false,
): ToolSpec {
  if (typeof fields.name !== "string") throw chatInputError(`${at}.name`, "is required");
  const schema = fields.schema ?? (schemaRequired ? undefined : { type: "object", properties: {} });
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw chatInputError(`${at}.${schemaKey}`, "must be a JSON Schema object");
  }
  return {
    name: fields.name,
    ...(typeof fields.description === "string" ? { description: fields.description } : {}),
    parameters: schema as Record<string, unknown>,
  };
}

/** A fresh id for a tool call, in the dialect's style (`call_…`, `toolu_…`). */
export function newCallId(prefix = "call_"): string {
  return prefix + crypto.randomUUID().replaceAll("-", "").slice(0, 24);
}

/** Plain text of a list of parts (text parts only), joined as the template expects. */
export function partsText(parts: Part[], join = "\n"): string {
  return parts.flatMap((p) =>
    p.type === "text" ? [p.text] : p.type === "image" ? [IMAGE_PLACEHOLDER] : []
  ).join(join);
}
