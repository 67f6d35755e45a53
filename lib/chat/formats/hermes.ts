/**
 * Hermes 2 Pro / Qwen2.5 / Qwen3 tool calls: each call is
 * `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, parallel calls are several such
 * blocks, and Qwen3 reasons inside `<think>...</think>` first.
 *
 * @example
 * ```ts
 * import { hermesFormat } from "./hermes.ts";
 * const tools = [{ name: "f", parameters: { type: "object" } }];
 * const p = hermesFormat.newParser(tools);
 * p.push('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'); // start, args, end
 * ```
 * @module
 */
import { taggedJsonCalls, toolListPrompt } from "./generic.ts";
import type { ToolFormat } from "./types.ts";

const tagged = taggedJsonCalls("<tool_call>", "</tool_call>");

export const hermesFormat: ToolFormat = {
  family: "hermes",
  rendersTools: true,
  toolSystemPrompt: toolListPrompt,
  callGrammar: tagged.callGrammar,
  // <tool_call> is one token in these models; the pattern catches it spelled out in pieces.
  triggers: { patterns: [tagged.pattern], tokens: ["<tool_call>"] },
  reasoning: { start: "<think>", end: "</think>" },
  newParser: tagged.newParser,
};
