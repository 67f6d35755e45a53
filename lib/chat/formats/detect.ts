/**
 * Which tool-call family a chat template speaks, read from the markers its source mentions (the
 * way llama.cpp's `common/chat` picks a parser): `<function=` is Qwen3-Coder XML, `<tool_call>`
 * Hermes / Qwen JSON, `[TOOL_CALLS]` Mistral, `<|python_tag|>` (or an `ipython` role with
 * `"parameters"`) Llama 3.x; anything else gets the generic fallback.
 *
 * @example
 * ```ts
 * import { detectToolFamily } from "./detect.ts";
 * detectToolFamily("...<tool_call>\n{{ tool_call | tojson }}\n</tool_call>..."); // "hermes"
 * detectToolFamily("{% for m in messages %}{{ m.content }}{% endfor %}"); // "generic"
 * ```
 * @module
 */
import type { ToolFamily } from "./types.ts";

export function detectToolFamily(templateSource: string): ToolFamily {
  const has = (s: string) => templateSource.includes(s);
  // DeepSeek V3.1: NAME<｜tool▁sep｜>{json}; R1's templates share the markers but write
  // `function<｜tool▁sep｜>NAME` and a ```json fence, so they stay generic.
  if (has("<｜tool▁calls▁begin｜>") && has("<｜tool▁sep｜>") && !has("```json")) {
    return "deepseek-v3";
  }
  // DeepSeek V3.2 / V4: DSML invokes inside a `function_calls` (V3.2) or `tool_calls` (V4) block.
  if (has("｜DSML｜") && has("invoke name=") && has("parameter name=")) {
    if (has("function_calls>")) return "deepseek-v3.2";
    if (has("tool_calls>")) return "deepseek-v4";
  }
  if (has("<|tool_call>call:") && has("<tool_call|>")) return "gemma4";
  // gpt-oss (Harmony): channels, recipients and `<|call|>`.
  if (has("<|channel|>") && has("<|message|>") && has("<|start|>") && has("<|call|>")) {
    return "harmony";
  }
  if (has("<|tool_calls_section_begin|>") && has("<|tool_call_argument_begin|>")) return "kimi-k2";
  // Kimi-K3: XTML tags (`<|open|>call tool=..<|sep|>`, `<|close|>call<|sep|>`), `<|end_of_msg|>`.
  if (has("<|open|>") && has("<|close|>") && has("<|sep|>") && has("<|end_of_msg|>")) {
    return "kimi-k3";
  }
  if (has("<minimax:tool_call>") && has("<invoke name=") && has("<parameter name=")) {
    return "minimax-m2";
  }
  // GLM-4.5/4.6/4.7 also say `<tool_call>`, so before Hermes: the name, then key/value tags.
  // Ling 3.0 (Bailing V3, `<role>ASSISTANT</role>` turns) writes the same calls and `<think>`.
  if (
    has("<tool_call>") && has("<arg_key>") && has("<arg_value>") &&
    (has("<|assistant|>") || has("<role>ASSISTANT</role>"))
  ) {
    return "glm";
  }
  // MiniMax-M3 namespaces every tag with `]<]minimax[>[` (`NS<tool_call>`, `NS<invoke name=..>`,
  // nested `NS<key>` values), so before Hermes.
  if (has("]<]minimax[>[") && has("<invoke name=") && has("<mm:think>")) return "minimax-m3";
  // Devstral / Magistral: [TOOL_CALLS]NAME[ARGS]{..}; older Mistral: [TOOL_CALLS] [{..}].
  if (has("[TOOL_CALLS]") && has("[ARGS]")) return "devstral";
  // Qwen3-Coder, Qwen3.5 and Nemotron 3 write the same XML calls.
  if (has("<function=") && has("<parameter=")) return "qwen3-coder";
  if (has("<tool_call>")) return "hermes";
  if (has("[TOOL_CALLS]")) return "mistral";
  if (has("<|python_tag|>") || (has("ipython") && has('"parameters"'))) return "llama3";
  return "generic";
}
