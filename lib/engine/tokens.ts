/**
 * Text <-> token ids for the loaded model, with the checks a public endpoint needs (ids in range,
 * so a bad id is a client error rather than an out-of-bounds read inside llama.cpp).
 *
 * @example
 * ```ts
 * import { detokenizeIds, tokenizeText } from "./tokens.ts";
 * const ids = tokenizeText(model, "Hello", true); // [128000, 9906]
 * detokenizeIds(model, ids, true); // "Hello"
 * ```
 * @module
 */
import { detokenize, tokenize, tokenText } from "../../ffi/mod.ts";
import type { EngineModel } from "./model.ts";
import { refusal } from "./scheduler.ts";

/** Tokenizes like llama.cpp; special tokens written in the text (`<|eot_id|>`) are parsed. */
export function tokenizeText(m: EngineModel, text: string, addSpecial: boolean): number[] {
  return Array.from(tokenize(m.llama, m.vocab, text, addSpecial, true));
}

/** Throws an `invalid` refusal naming the first id outside the vocabulary. */
export function checkIds(m: EngineModel, ids: number[], field = "tokens"): void {
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (!Number.isInteger(t) || t < 0 || t >= m.nVocab) {
      throw refusal(
        "invalid",
        `${field}[${i}]: token id ${t} is out of range (the vocabulary has ${m.nVocab} tokens, ` +
          `ids 0..${m.nVocab - 1})`,
      );
    }
  }
}

export function detokenizeIds(m: EngineModel, ids: number[], skipSpecial: boolean): string {
  checkIds(m, ids);
  return detokenize(m.llama, m.vocab, ids, skipSpecial, !skipSpecial);
}

/** The vocabulary's own spelling of each id (`Ġworld`), as vLLM's `return_token_strs`. */
export function tokenStrings(m: EngineModel, ids: number[]): string[] {
  return ids.map((t) => tokenText(m.llama, m.vocab, t) ?? "");
}

/** How the model spells BOS and EOS, for chat templates (`bos_token`, `eos_token`). */
export function specialSpellings(m: EngineModel): { bos?: string; eos?: string } {
  const spell = (t: number) => (t >= 0 ? tokenText(m.llama, m.vocab, t) : undefined);
  return { bos: spell(m.vocabInfo.bos), eos: spell(m.vocabInfo.eos) };
}
