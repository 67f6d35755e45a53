/**
 * A typed wrapper of `llama_sampler_init_grammar_lazy_patterns`: a grammar sampler that leaves
 * candidates alone until a trigger (a token in `tokens`, or generated text matching a pattern of
 * the family's {@link Triggers}), then constrains from the trigger on. Token spellings are looked
 * up in the vocabulary (a spelling that is not one token is skipped: the patterns cover it).
 *
 * Patterns go to `std::regex` unchecked: use the families' own triggers, which are plain
 * ECMAScript that std::regex compiles (an uncompilable pattern throws through the C ABI).
 *
 * @example
 * ```ts
 * import { newLazyGrammarSampler } from "./lazy_sampler.ts";
 * import { hermesFormat } from "./hermes.ts";
 * const gbnf = hermesFormat.callGrammar(tools, { parallel: false });
 * const s = newLazyGrammarSampler(llama, vocab, gbnf, hermesFormat.triggers); // null: bad grammar
 * ```
 * @module
 */
import { cString, type Llama, type SamplerPtr, tokenize, type VocabPtr } from "../../../ffi/mod.ts";
import type { Triggers } from "./types.ts";

/** A NUL-terminated copy in its own ArrayBuffer, so its address is fixed while it is alive. */
function offHeapCString(s: string): Uint8Array<ArrayBuffer> {
  const c = cString(s);
  const out = new Uint8Array(new ArrayBuffer(c.length));
  out.set(c);
  return out;
}

/** Ids of the trigger spellings that are single tokens of `vocab`. */
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
  triggers: Triggers,
): SamplerPtr | null {
  // `const char **`: off-heap strings (fixed addresses), kept alive by `strings` for the call.
  const strings = triggers.patterns.map(offHeapCString);
  const ptrs = new BigUint64Array(new ArrayBuffer(Math.max(1, strings.length) * 8));
  strings.forEach((s, i) => {
    ptrs[i] = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(s)));
  });
  const ids = triggerTokenIds(llama, vocab, triggers.tokens);
  const toks = new Int32Array(new ArrayBuffer(Math.max(1, ids.length) * 4));
  toks.set(ids);
  const s = llama.sym.llama_sampler_init_grammar_lazy_patterns(
    vocab,
    cString(gbnf),
    cString("root"),
    new Uint8Array(ptrs.buffer),
    BigInt(strings.length),
    new Uint8Array(toks.buffer),
    BigInt(ids.length),
  );
  strings.length = 0;
  return s as SamplerPtr | null;
}
