/**
 * Grammar-constrained sampling that costs almost nothing when the model already agrees with the
 * grammar: the sampler chain picks a token from the full distribution first, only that one token
 * is checked against the grammar, and only on rejection is the grammar applied to the whole
 * vocabulary and the chain run again (rejection sampling, as llama.cpp's common sampler does).
 * Checking every candidate at every step would walk the grammar stacks for all 128k tokens.
 *
 * A lazy grammar (`triggers`) is inert until a trigger token or pattern shows up: its `apply`
 * leaves candidates alone, so the same path samples freely until then. The one danger is the
 * moment it triggers: llama.cpp replays the trigger text into the grammar and throws (aborting
 * the process, through FFI) if the grammar rejects it. A JS twin of the trigger state sees that
 * moment coming, checks the replay against a fresh copy of the grammar, and a token whose replay
 * would be rejected is treated like any other rejected token: banned, and the chain runs again.
 *
 * @example
 * ```ts
 * import { newGrammarSampler, sampleConstrained } from "./constrained.ts";
 * const g = newGrammarSampler(model, gbnf); // throws with llama.cpp's reason if it does not parse
 * const token = sampleConstrained(model, chain, g, batchRow, false); // undefined: nothing allowed
 * const lazy = newGrammarSampler(model, gbnf, { patterns: ["<tool_call>"], tokens: [] });
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
  tokenToPiece,
} from "../../ffi/mod.ts";
import type { EngineModel } from "./model.ts";
import {
  commitTrigger,
  compileTriggerPatterns,
  type GrammarTriggers,
  newTriggerWatch,
  type Peek,
  peekTrigger,
  type Replayed,
  type TriggerWatch,
} from "./triggers.ts";

/** A sequence's grammar: llama.cpp's sampler and, when lazy, the JS twin of its trigger state. */
export type SeqGrammar = { sampler: SamplerPtr; gbnf: string; watch?: TriggerWatch };

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

function makeSampler(m: EngineModel, gbnf: string, triggers?: GrammarTriggers): SamplerPtr {
  m.llama.recentLog.length = 0;
  const make = samplers(m.llama);
  const g = triggers
    ? make.grammarLazyPatterns(m.vocab, gbnf, "root", triggers.patterns, triggers.tokens)
    : make.grammar(m.vocab, gbnf, "root");
  if (!g) {
    const why = m.llama.recentLog.filter((l) => l.trim()).slice(-3).join("; ");
    throw new Error(`llama.cpp rejected the grammar${why ? `: ${why}` : ""}`);
  }
  return g as SamplerPtr;
}

/**
 * A grammar for one sequence, lazy when `triggers` is given; throws with llama.cpp's parse error
 * when it is invalid, or naming a trigger pattern std::regex might not read as JS does (those
 * are refused before llama.cpp sees them: a pattern it cannot compile aborts the process).
 */
export function newGrammarSampler(
  m: EngineModel,
  gbnf: string,
  triggers?: GrammarTriggers,
): SeqGrammar {
  if (!triggers) return { sampler: makeSampler(m, gbnf), gbnf };
  const watch = newTriggerWatch(triggers); // throws on a refused pattern
  const outside = triggers.tokens.find((t) => !Number.isInteger(t) || t < 0 || t >= m.nVocab);
  if (outside !== undefined) throw new Error(`grammar trigger token ${outside} is out of range`);
  return { sampler: makeSampler(m, gbnf, triggers), gbnf, watch };
}

export function freeGrammarSampler(m: EngineModel, g: SeqGrammar): void {
  samplerFree(m.llama, g.sampler);
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

const byteTokenMaps = new WeakMap<EngineModel, Int32Array>();

/** For each byte, a token whose piece is exactly that byte (-1 when none): built once. */
function byteTokens(m: EngineModel): Int32Array {
  let map = byteTokenMaps.get(m);
  if (map) return map;
  map = new Int32Array(256).fill(-1);
  for (let t = 0; t < m.nVocab; t++) {
    if (m.eogTokens.includes(t)) continue;
    const piece = tokenToPiece(m.llama, m.vocab, t, true);
    if (piece.length === 1 && map[piece[0]] < 0) map[piece[0]] = t;
  }
  byteTokenMaps.set(m, map);
  return map;
}

/**
 * Whether the grammar accepts what llama.cpp would replay into it when it triggers. Whole
 * pieces are checked by their own token (so token-typed grammar elements work); a piece cut by
 * the match start is fed byte by byte through single-byte tokens, which the grammar reads as the
 * same characters.
 */
function replayAllowed(m: EngineModel, s: Scratch, gbnf: string, replay: Replayed[]): boolean {
  const checker = makeSampler(m, gbnf);
  try {
    for (const r of replay) {
      const ids = r.whole ? [r.token] : Array.from(r.bytes, (b) => byteTokens(m)[b]);
      for (const t of ids) {
        if (t < 0 || !allowedByGrammar(m, s, checker, t)) return false;
        samplerAccept(m.llama, checker, t);
      }
    }
    return true;
  } finally {
    samplerFree(m.llama, checker);
  }
}

/**
 * For a lazy grammar still awaiting its trigger: what accepting `token` does to the trigger
 * state, or false when it would trigger with text the grammar rejects. Undefined otherwise.
 */
function triggerCheck(
  m: EngineModel,
  s: Scratch,
  g: SeqGrammar,
  token: number,
): Peek | false | undefined {
  const w = g.watch;
  if (!w?.awaiting || m.eogTokens.includes(token)) return undefined;
  const p = peekTrigger(w, token, tokenToPiece(m.llama, m.vocab, token, true));
  if (p.replay && !replayAllowed(m, s, g.gbnf, p.replay)) return false;
  return p;
}

/** Rejected candidates tried before giving up on a step (only lazy triggers add more than one). */
const MAX_REJECTED = 16;

/**
 * Samples batch row `idx` under grammar `g` and accepts the token into both samplers. Returns
 * undefined when the grammar allows nothing (it is complete and end-of-generation is banned).
 */
export function sampleConstrained(
  m: EngineModel,
  chain: SamplerPtr,
  g: SeqGrammar,
  idx: number,
  banEog: boolean,
): number | undefined {
  const s = getScratch(m.nVocab);
  fillCandidates(m, s, idx);
  m.llama.sym.llama_sampler_apply(chain, s.allArr);
  const first = selected(s);
  let pick: Pick | undefined;
  if (first !== undefined && allowedByGrammar(m, s, g.sampler, first)) {
    const trigger = triggerCheck(m, s, g, first);
    pick = trigger === false ? undefined : { token: first, trigger };
    if (!pick) pick = resample(m, s, chain, g, idx, banEog, [first]);
  } else pick = resample(m, s, chain, g, idx, banEog, []);
  if (!pick) return undefined;
  const { token, trigger } = pick;
  // End-of-generation is not fed to the grammar: the sequence stops there.
  if (!m.eogTokens.includes(token)) {
    samplerAccept(m.llama, g.sampler, token);
    if (trigger) commitTrigger(g.watch!, token, trigger);
  }
  samplerAccept(m.llama, chain, token);
  return token;
}

type Pick = { token: number; trigger?: Peek };

/**
 * The rejection path: the grammar masks the vocabulary and the chain runs again. `banned` are
 * tokens whose trigger replay the grammar rejects, masked by hand (an awaiting grammar's `apply`
 * lets everything through); a new such pick joins them and the chain runs once more.
 */
function resample(
  m: EngineModel,
  s: Scratch,
  chain: SamplerPtr,
  g: SeqGrammar,
  idx: number,
  banEog: boolean,
  banned: number[],
): Pick | undefined {
  while (banned.length <= MAX_REJECTED) {
    fillCandidates(m, s, idx);
    m.llama.sym.llama_sampler_apply(g.sampler, s.allArr);
    for (const b of banned) s.allF32[b * 3 + 1] = -Infinity;
    if (!anyAllowed(m, s, banEog)) return undefined;
    m.llama.sym.llama_sampler_apply(chain, s.allArr);
    const token = selected(s);
    if (token === undefined) return undefined;
    const trigger = triggerCheck(m, s, g, token);
    if (trigger !== false) return { token, trigger };
    banned.push(token);
  }
  return undefined;
}

const checked = new Map<string, string | undefined>();

/**
 * Parses `gbnf` with llama.cpp (lazily armed by `triggers`, when given); returns the complaint,
 * or undefined when the grammar is valid. A lazy grammar is also refused when a trigger pattern
 * is outside what std::regex and JS read alike, or a trigger token cannot start the grammar
 * (llama.cpp feeds the trigger token to it). Results are remembered (last 256 grammars).
 */
export function checkGrammar(
  m: EngineModel,
  gbnf: string,
  triggers?: GrammarTriggers,
): string | undefined {
  const key = triggers ? JSON.stringify([gbnf, triggers.patterns, triggers.tokens]) : gbnf;
  if (checked.has(key)) return checked.get(key);
  let why: string | undefined;
  try {
    if (triggers) compileTriggerPatterns(triggers.patterns);
    freeGrammarSampler(m, newGrammarSampler(m, gbnf, triggers));
    for (const t of triggers?.tokens ?? []) {
      if (
        !replayAllowed(m, getScratch(m.nVocab), gbnf, [{
          token: t,
          bytes: new Uint8Array(),
          whole: true,
        }])
      ) {
        const piece = new TextDecoder().decode(tokenToPiece(m.llama, m.vocab, t, true));
        throw new Error(
          `grammar trigger token ${t} (${JSON.stringify(piece)}) is not allowed at the start of ` +
            "the grammar (llama.cpp feeds the trigger token to it)",
        );
      }
    }
  } catch (e) {
    why = (e as Error).message;
  }
  if (checked.size >= 256) checked.delete(checked.keys().next().value!);
  checked.set(key, why);
  return why;
}
