/**
 * Grammar-constrained sampling that costs almost nothing when the model already agrees with the
 * grammar: the sampler chain picks a token from the full distribution first, only that one token
 * is checked against the grammar, and only on rejection is the grammar applied to the whole
 * vocabulary and the chain run again (rejection sampling, as llama.cpp's common sampler does).
 * Checking every candidate at every step would walk the grammar stacks for all 128k tokens.
 *
 * @example
 * ```ts
 * import { newGrammarSampler, sampleConstrained } from "./constrained.ts";
 * const g = newGrammarSampler(model, gbnf); // throws with llama.cpp's reason if it does not parse
 * const token = sampleConstrained(model, chain, g, batchRow); // undefined: nothing is allowed
 * ```
 * @module
 */
import {
  logitsIth,
  samplerAccept,
  samplerFree,
  type SamplerPtr,
  samplers,
  tokenDataArray,
} from "../../ffi/mod.ts";
import type { EngineModel } from "./model.ts";

/** Scratch `llama_token_data` arrays, shared: sampling is sequential on the JS thread. */
type Scratch = {
  n: number;
  all: ArrayBuffer;
  allI32: Int32Array;
  allF32: Float32Array;
  allArr: Uint8Array<ArrayBuffer>;
  one: ArrayBuffer;
  oneI32: Int32Array;
  oneF32: Float32Array;
  oneArr: Uint8Array<ArrayBuffer>;
};

let scratch: Scratch | undefined;

function arrayStruct(data: ArrayBuffer, size: number): Uint8Array<ArrayBuffer> {
  const s = new Uint8Array(tokenDataArray.size);
  const dv = new DataView(s.buffer);
  const ptr = Deno.UnsafePointer.value(Deno.UnsafePointer.of(data));
  dv.setBigUint64(0, BigInt(ptr), true); // data
  dv.setBigUint64(8, BigInt(size), true); // size
  dv.setBigInt64(16, -1n, true); // selected
  dv.setUint8(24, 0); // sorted
  return s;
}

function getScratch(nVocab: number): Scratch {
  if (scratch && scratch.n === nVocab) return scratch;
  const all = new ArrayBuffer(nVocab * 12);
  const one = new ArrayBuffer(64);
  scratch = {
    n: nVocab,
    all,
    allI32: new Int32Array(all),
    allF32: new Float32Array(all),
    allArr: arrayStruct(all, nVocab),
    one,
    oneI32: new Int32Array(one),
    oneF32: new Float32Array(one),
    oneArr: arrayStruct(one, 1),
  };
  return scratch;
}

/** A grammar sampler for one sequence; throws with llama.cpp's parse error when it is invalid. */
export function newGrammarSampler(m: EngineModel, gbnf: string): SamplerPtr {
  m.llama.recentLog.length = 0;
  const g = samplers(m.llama).grammar(m.vocab, gbnf, "root");
  if (!g) {
    const why = m.llama.recentLog.filter((l) => l.trim()).slice(-3).join("; ");
    throw new Error(`llama.cpp rejected the grammar${why ? `: ${why}` : ""}`);
  }
  return g as SamplerPtr;
}

export function freeGrammarSampler(m: EngineModel, g: SamplerPtr): void {
  samplerFree(m.llama, g);
}

/** Resets the full candidate array from the logits of batch row `idx`. */
function fillCandidates(m: EngineModel, s: Scratch, idx: number): void {
  const logits = logitsIth(m.llama, m.ctx, idx, m.nVocab);
  const { allI32, allF32 } = s;
  for (let i = 0, j = 0; i < s.n; i++, j += 3) {
    allI32[j] = i;
    allF32[j + 1] = logits[i];
    allF32[j + 2] = 0;
  }
  const dv = new DataView(s.allArr.buffer);
  dv.setBigUint64(0, BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(s.all))), true);
  dv.setBigUint64(8, BigInt(s.n), true);
  dv.setBigInt64(16, -1n, true);
  dv.setUint8(24, 0);
}

/** The token the chain selected in the candidate array, or undefined when none was. */
function selected(s: Scratch): number | undefined {
  const dv = new DataView(s.allArr.buffer);
  const sel = Number(dv.getBigInt64(16, true));
  const size = Number(dv.getBigUint64(8, true));
  if (sel < 0 || sel >= size) return undefined;
  const data = dv.getBigUint64(0, true);
  const view = new Deno.UnsafePointerView(Deno.UnsafePointer.create(data)!);
  // Samplers may sort or shrink the array in place, or point it elsewhere: read where it is now.
  const token = view.getInt32(sel * 12);
  const logit = view.getFloat32(sel * 12 + 4);
  return logit === -Infinity ? undefined : token;
}

/**
 * Whether any candidate survived the grammar (the chain must not run on all -inf); banned
 * end-of-generation tokens (`ignore_eos`) do not count as survivors.
 */
function anyAllowed(m: EngineModel, s: Scratch, banEog: boolean): boolean {
  for (let i = 0, j = 1; i < s.n; i++, j += 3) {
    if (s.allF32[j] !== -Infinity && !(banEog && m.eogTokens.includes(s.allI32[j - 1]))) {
      return true;
    }
  }
  return false;
}

function allowedByGrammar(m: EngineModel, s: Scratch, g: SamplerPtr, token: number): boolean {
  s.oneI32[0] = token;
  s.oneF32[1] = 1;
  s.oneF32[2] = 0;
  const dv = new DataView(s.oneArr.buffer);
  dv.setBigUint64(8, 1n, true);
  dv.setBigInt64(16, -1n, true);
  m.llama.sym.llama_sampler_apply(g, s.oneArr);
  return s.oneF32[1] !== -Infinity;
}

/**
 * Samples batch row `idx` under grammar `g` and accepts the token into both samplers. Returns
 * undefined when the grammar allows nothing (it is complete and end-of-generation is banned).
 */
export function sampleConstrained(
  m: EngineModel,
  chain: SamplerPtr,
  g: SamplerPtr,
  idx: number,
  banEog: boolean,
): number | undefined {
  const s = getScratch(m.nVocab);
  fillCandidates(m, s, idx);
  m.llama.sym.llama_sampler_apply(chain, s.allArr);
  let token = selected(s);
  if (token === undefined || !allowedByGrammar(m, s, g, token)) {
    fillCandidates(m, s, idx);
    m.llama.sym.llama_sampler_apply(g, s.allArr);
    if (!anyAllowed(m, s, banEog)) return undefined;
    m.llama.sym.llama_sampler_apply(chain, s.allArr);
    token = selected(s);
    if (token === undefined) return undefined;
  }
  // End-of-generation is not fed to the grammar: the sequence stops there.
  if (!m.eogTokens.includes(token)) samplerAccept(m.llama, g, token);
  samplerAccept(m.llama, chain, token);
  return token;
}

const checked = new Map<string, string | undefined>();

/**
 * Parses `gbnf` with llama.cpp; returns its complaint, or undefined when the grammar is valid.
 * Results are remembered (last 256 grammars), so a repeated constraint is not parsed again.
 */
export function checkGrammar(m: EngineModel, gbnf: string): string | undefined {
  if (checked.has(gbnf)) return checked.get(gbnf);
  let why: string | undefined;
  try {
    freeGrammarSampler(m, newGrammarSampler(m, gbnf));
  } catch (e) {
    why = (e as Error).message;
  }
  if (checked.size >= 256) checked.delete(checked.keys().next().value!);
  checked.set(gbnf, why);
  return why;
}
