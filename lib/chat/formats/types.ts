/**
 * The record every tool-call format provides: how tools reach the prompt, the grammar that
 * constrains a call, what arms that grammar lazily, and a streaming parser of the model's output.
 * One module per family builds one of these; `mod.ts` picks the family from a chat template.
 *
 * @example
 * ```ts
 * import type { ToolFormat } from "./types.ts";
 * function describe(f: ToolFormat): string {
 *   return `${f.family}: triggers ${f.triggers.patterns.join(" ")}`;
 * }
 * ```
 * @module
 */
import type { ReplyEvent, ToolSpec } from "../conversation.ts";
import type { ReasoningMarkers } from "../reasoning.ts";
import type { ChatMessage } from "../template.ts";
import type { ToolRelax } from "./grammar.ts";

export type ToolFamily =
  | "llama3"
  | "hermes"
  | "mistral"
  | "qwen3-coder"
  | "generic"
  | "deepseek-v3"
  | "deepseek-v3.2"
  | "deepseek-v4"
  | "gemma4"
  | "devstral"
  | "harmony"
  | "glm"
  | "kimi-k2"
  | "kimi-k3"
  | "minimax-m2"
  | "minimax-m3";

/**
 * What arms a lazy grammar (`llama_sampler_init_grammar_lazy_patterns`). Every pattern ends with
 * `$` (fires only when the output ends inside its match) and its first capture group starts the
 * text replayed into the grammar, which accepts every such text as a prefix. `tokens` are
 * special-token spellings whose ids the caller looks up (absent ones are skipped); the grammar
 * starts with that token's text.
 */
export type Triggers = { patterns: string[]; tokens: string[] };

/** A streaming parser of one reply (reasoning already split off). */
export type OutputParser = {
  push(text: string): ReplyEvent[];
  /** Flushes what is held; a call section that never completed comes back as text. */
  end(): ReplyEvent[];
};

export type ToolFormat = {
  family: ToolFamily;
  /** Whether the model's template renders `tools` itself; if not, see `toolSystemPrompt`. */
  rendersTools: boolean;
  /** Instructions listing the tools, to add to the system message when `rendersTools` is false. */
  toolSystemPrompt(tools: ToolSpec[]): string;
  /**
   * GBNF whose root is a whole call section. With `relax`, what a tool's schema asks beyond the
   * grammar is relaxed and reported to it; without, such a tool throws a ConstraintError.
   */
  callGrammar(tools: ToolSpec[], opts: { parallel: boolean; relax?: ToolRelax }): string;
  triggers: Triggers;
  /** The reasoning markers of the family's output, if it reasons. */
  reasoning?: ReasoningMarkers;
  /**
   * Where a reasoning budget counts and what it forces at the cap, for a family whose reasoning
   * is no marker pair the splitter reads (Harmony's `analysis` channel). Default: `reasoning`,
   * forcing its end marker.
   */
  reasoningBudget?: { start: string; end: string; force: string };
  /**
   * Markers the engine must print even where the vocabulary makes them control tokens, beyond
   * the trigger tokens, reasoning markers and markup literals of the call grammar (which it finds
   * itself): those that only occur inside longer literals (Kimi-K3's `<|open|>`).
   */
  printMarkers?: string[];
  /** Reshapes the template messages for a template that reads other fields (gpt-oss: `thinking`). */
  templateMessages?(messages: ChatMessage[]): ChatMessage[];
  newParser(tools: ToolSpec[]): OutputParser;
};
