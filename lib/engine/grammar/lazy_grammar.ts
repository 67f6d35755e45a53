/**
 * A family's lazy grammar sampler outside the engine (tests and tools): the trigger spellings
 * looked up as token ids, the patterns checked by the engine's own rules first (a pattern
 * `std::regex` would choke on throws here instead of aborting llama.cpp), then
 * `llama_sampler_init_grammar_lazy_patterns` through the FFI wrapper. The engine builds its own
 * from `GenRequest.grammarTriggers`, with the trigger-replay guard on top.
 *
 * @example
 * ```ts
 * import { newLazyGrammarSampler } from "./lazy_grammar.ts";
 * import { hermesFormat } from "../../chat/formats/hermes.ts";
 * const gbnf = hermesFormat.callGrammar(tools, { parallel: false });
 * const s = newLazyGrammarSampler(llama, vocab, gbnf, hermesFormat.triggers); // null: bad grammar
 * ```
 * @module
 */
import {
  type Llama,
  type SamplerPtr,
  samplers,
  tokenize,
  type VocabPtr,
} from "../../../ffi/mod.ts";
import { compileTriggerPatterns } from "./triggers.ts";

/** Trigger spellings: regexes over the text, and strings that may be single tokens. */
export type TriggerSpellings = { patterns: string[]; tokens: string[] };

/** Ids of the trigger spellings that are single tokens of `vocab` (others are left to patterns). */
export function triggerTokenIds(llama: Llama, vocab: VocabPtr, spellings: string[]): number[] {
  return spellings.flatMap((s) => {
    const ids = tokenize(llama, vocab, s, false, true);
    return ids.length === 1 ? [ids[0]] : [];
  });
}

/** A lazy grammar sampler, or null when llama.cpp refuses the grammar. */
export function newLazyGrammarSampler(
  llama: Llama,
  vocab: VocabPtr,
  gbnf: string,
  triggers: TriggerSpellings,
): SamplerPtr | null {
  compileTriggerPatterns(triggers.patterns);
  const ids = triggerTokenIds(llama, vocab, triggers.tokens);
  return samplers(llama).grammarLazyPatterns(vocab, gbnf, "root", triggers.patterns, ids) as
    | SamplerPtr
    | null;
}
