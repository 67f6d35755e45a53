/**
 * Tool-call formats of the model families Hearth serves: detect the family from the chat
 * template, then use its {@link ToolFormat} to build the call grammar and its lazy triggers and
 * to parse the model's streamed output into reply events.
 *
 * @example
 * ```ts
 * import { detectToolFormat } from "./mod.ts";
 * declare const templateSource: string, outputText: string;
 * const f = detectToolFormat(templateSource);
 * const tools = [{ name: "weather", parameters: { type: "object",
 *   properties: { city: { type: "string" } }, required: ["city"] } }];
 * const gbnf = f.callGrammar(tools, { parallel: true }); // armed lazily by f.triggers
 * const parser = f.newParser(tools);
 * const events = [...parser.push(outputText), ...parser.end()];
 * ```
 * @module
 */
import { endsInsideReasoning } from "../reasoning.ts";
import { detectToolFamily } from "./detect.ts";
import { genericFormat } from "./generic.ts";
import { hermesFormat } from "./hermes.ts";
import { llama3Format } from "./llama3.ts";
import { mistralFormat } from "./mistral.ts";
import { qwen3CoderFormat } from "./qwen3_coder.ts";
import { deepseekV3Format } from "./deepseek_v3.ts";
import { deepseekV32Format, deepseekV4Format } from "./deepseek_dsml.ts";
import { devstralCallIdFormat, devstralFormat } from "./devstral.ts";
import { gemma4Format } from "./gemma4.ts";
import { glmFormat } from "./glm.ts";
import { harmonyFormat } from "./harmony.ts";
import { kimiK2Format } from "./kimi_k2.ts";
import { kimiK3Format } from "./kimi_k3.ts";
import { minimaxM2Format } from "./minimax_m2.ts";
import { minimaxM3Format } from "./minimax_m3.ts";
import type { ToolFamily, ToolFormat } from "./types.ts";

export type { OutputParser, ToolFamily, ToolFormat, Triggers } from "./types.ts";
export { detectToolFamily } from "./detect.ts";
export { toolListPrompt } from "./generic.ts";

export const TOOL_FORMATS: Readonly<Record<ToolFamily, ToolFormat>> = {
  llama3: llama3Format,
  hermes: hermesFormat,
  mistral: mistralFormat,
  "qwen3-coder": qwen3CoderFormat,
  generic: genericFormat,
  "deepseek-v3": deepseekV3Format,
  "deepseek-v3.2": deepseekV32Format,
  "deepseek-v4": deepseekV4Format,
  gemma4: gemma4Format,
  devstral: devstralFormat,
  harmony: harmonyFormat,
  glm: glmFormat,
  "kimi-k2": kimiK2Format,
  "kimi-k3": kimiK3Format,
  "minimax-m2": minimaxM2Format,
  "minimax-m3": minimaxM3Format,
};

/** The format of the family whose markers `templateSource` mentions (generic when none). */
export function detectToolFormat(templateSource: string): ToolFormat {
  const family = detectToolFamily(templateSource);
  // Within a family, what the template renders decides the details (a call id or none).
  if (family === "devstral" && templateSource.includes("[CALL_ID]")) return devstralCallIdFormat;
  return TOOL_FORMATS[family];
}

/**
 * Whether the reply to `prompt` starts inside the family's reasoning block (the generation
 * prompt opened `<think>` and did not close it), so the reasoning splitter starts `open`.
 */
export function startsInReasoning(f: ToolFormat, prompt: string): boolean {
  return f.reasoning !== undefined && endsInsideReasoning(prompt, f.reasoning);
}
