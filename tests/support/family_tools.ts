/**
 * The tools, conversations and replayed replies every tool-call family test uses: two tools with
 * strict schemas (each call checked by ajv), the request that forces a call of them, and a
 * history with one call and its result.
 *
 * @example
 * ```ts ignore
 * import { assertValidCall, conversation } from "./family_tools.ts";
 * const conv = conversation({ type: "required" }); // TOOLS offered, no parallel calls
 * assertValidCall("get_weather", '{"city":"Paris","unit":"celsius"}', "example");
 * ```
 * @module
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Conversation, ToolSpec } from "../../lib/chat/conversation.ts";
import type { GenEvent } from "../../lib/engine/scheduler.ts";

/** Engine events replaying `chunks` (what the model wrote), then the end of generation. */
export async function* replay(chunks: string[]): AsyncGenerator<GenEvent> {
  for (const text of chunks) yield { type: "text", text };
  yield {
    type: "done",
    finishReason: "stop",
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
  };
}

/** Longest reply a forced call may take on the random model, unless a test says less. */
export const FAMILY_MAX_TOKENS = 900;

/** The names of `TOOLS`, as a regular expression group. */
export const TOOL_NAMES = "(?:get_weather|place_order)";

const weather = {
  type: "object",
  properties: {
    city: { type: "string", pattern: "^[A-Za-z ]{1,12}$" },
    unit: { enum: ["celsius", "fahrenheit"] },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const order = {
  type: "object",
  properties: {
    items: {
      type: "array",
      items: {
        type: "object",
        properties: {
          sku: { enum: ["ABC-12", "XYZ-99"] },
          qty: { type: "integer", minimum: 1, maximum: 9 },
        },
        required: ["sku", "qty"],
        additionalProperties: false,
      },
      minItems: 1,
      maxItems: 2,
    },
    express: { type: "boolean" },
  },
  required: ["items", "express"],
  additionalProperties: false,
};
export const SCHEMAS: Record<string, Record<string, unknown>> = {
  get_weather: weather,
  place_order: order,
};
export const TOOLS: ToolSpec[] = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  name,
  description: `The ${name} tool`,
  parameters,
}));
const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(
  Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]),
);

export function assertValidCall(name: string, args: string, where: string): void {
  const v = validators[name];
  assert.ok(v, `${where}: unknown tool ${name}`);
  const parsed = JSON.parse(args);
  assert.ok(v(parsed), `${where}: ${args} fails the schema: ${ajv.errorsText(v.errors)}`);
}

/** A system and a user turn with `TOOLS` offered and no parallel calls. */
export function conversation(toolChoice: Conversation["toolChoice"]): Conversation {
  return {
    turns: [
      { role: "system", parts: [{ type: "text", text: "You are terse." }] },
      { role: "user", parts: [{ type: "text", text: "Weather in Paris? Order two apples." }] },
    ],
    tools: TOOLS,
    toolChoice,
    parallelToolCalls: false,
  };
}

/** `conversation`, then an assistant turn reasoning and calling get_weather, then its result. */
export function toolRoundTrip(result: string): Conversation {
  return {
    ...conversation({ type: "auto" }),
    turns: [
      ...conversation({ type: "auto" }).turns,
      {
        role: "assistant",
        parts: [
          { type: "reasoning", text: "checked the map" },
          {
            type: "tool_call",
            id: "call_1",
            name: "get_weather",
            arguments: '{"city":"Paris","unit":"celsius"}',
          },
        ],
      },
      { role: "tool", parts: [{ type: "tool_result", callId: "call_1", content: result }] },
    ],
  };
}
