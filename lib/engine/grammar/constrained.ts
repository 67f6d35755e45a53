/**
 * Grammar-constrained sampling at close to the cost of free sampling, exactly: every pick is
 * the sampler chain applied to the grammar-masked logits (greedy: the masked argmax).
 *
 * The set of tokens a grammar allows depends only on its parse state, and JSON grammars revisit
 * the same states constantly (every array element, key, whitespace run), so allowed-token masks
 * are cached per grammar and state (grammar_mask.ts). The state is read from llama.cpp's own
 * grammar (its pushdown stacks, through a build-pinned layout proven at start-up by
 * ffi/grammar_state.ts) rather than tracked by a second GBNF matcher in TS: llama.cpp stays the
 * only judge of which tokens are allowed, and the memory read only names the state. Masks are
 * built by walking a token trie with llama.cpp judging a level at a time, so a state with few
 * allowed tokens costs a few thousand checks instead of the whole vocabulary.
 *
 * Each step takes one of two paths, chosen by the state alone:
 * - small mask (at most 1/8 of the vocabulary: structure, keys, numbers, whitespace): the chain
 *   runs on just the allowed tokens, in ascending id order with their logits. That is the chain
 *   on the full array with the others at -inf (greedy keeps the lowest id among equal maxima; the
 *   distribution sampler's running sum only skips zeros).
 * - dense mask (inside a string) or no usable cache: the chain picks from the full vocabulary
 *   first and only that token is checked; on rejection the chain runs again on the allowed tokens
 *   (rejection sampling, as llama.cpp's common sampler does: for temperature sampling exactly the
 *   masked distribution, for greedy the masked argmax).
 * Greedy output is therefore identical to the plain path's. A seeded sampler draws differently
 * from the plain path (it skips the first draw on small masks), from the same distribution, and
 * its output does not depend on what the cache held: sampling chains build a missing mask before
 * choosing the path, greedy ones (whose pick is the same either way) only use cached ones.
 *
 * Every token picked from a mask is still confirmed by llama.cpp's grammar before it is accepted
 * (accepting a token the grammar rejects would throw through FFI); should a mask ever disagree,
 * the cache is switched off for the process and the step redone the plain way, as it is when the
 * layout check fails. `setConstrainedMode("slow")` forces the plain way with the grammar applied
 * to the whole vocabulary on each rejection (the reference the tests compare against).
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
  samplerClone,
  samplerFree,
  type SamplerPtr,
  samplers,
  samplerSample,
  tokenDataArray,
  tokenToPiece,
} from "../../../ffi/mod.ts";
import {
  awaitingTrigger,
  grammarAddress,
  partialUtf8,
  type RuleTable,
  ruleTable,
  stateKey,
} from "../../../ffi/grammar_state.ts";
import type { EngineModel } from "../model.ts";
import {
  byteTokens,
  cachedMask,
  fullMask,
  type GrammarMasks,
  grammarMasks,
  layoutProblem,
  type Mask,
  maskFor,
  maskHas,
  sameMask,
} from "./grammar_mask.ts";
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

/**
 * A sequence's grammar: llama.cpp's sampler and, when lazy, the JS twin of its trigger state;
 * `fast` holds what the mask cache needs (filled on first use).
 */
export type SeqGrammar = {
  sampler: SamplerPtr;
  gbnf: string;
  watch?: TriggerWatch;
  fast?: FastState;
  /** What the sequence's chain (at this address) is. */
  chain?: { at: number; kind: ChainKind };
  /** Bytes of a UTF-8 sequence the output has begun and not finished (see `utf8Next`). */
  utf8?: number[];
};

type ChainKind = { greedy: boolean; statelessAccept: boolean };

type FastState = { grammar: number; rules: RuleTable; masks: GrammarMasks };

/**
 * `fast` (default): masks as described above. `slow`: first pick over the full vocabulary, and the
 * grammar applied to the whole vocabulary on every rejection. `verify` (tests): fast, and every
 * mask built is compared with the full-vocabulary apply (throws on a difference).
 */
export type ConstrainedMode = "fast" | "slow" | "verify";

let mode: ConstrainedMode = "fast";
/** Why the mask cache is off for this process (a mask disagreed with llama.cpp), if it is. */
let disabled: string | undefined;

export function setConstrainedMode(m: ConstrainedMode): void {
  mode = m;
}

export function constrainedMode(): ConstrainedMode {
  return mode;
}

/** Why masks are not used on `m` (layout check failed, or a mask disagreed), if they are not. */
export function maskCacheProblem(m: EngineModel): string | undefined {
  return disabled ?? layoutProblem(m);
}

/** Counters for measurement: calls, time inside `sampleConstrained`, how steps went. */
export const constrainedStats = {
  calls: 0,
  ms: 0,
  /** First picks (over the full vocabulary) the grammar rejected. */
  rejections: 0,
  /** Masks found cached / built. */
  maskHits: 0,
  maskMisses: 0,
  /** Grammar applications to the whole vocabulary on the plain rejection path. */
  fullApplies: 0,
  /** Steps sampled straight from a mask, without a first pick over the full vocabulary. */
  direct: 0,
};

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

/**
 * Fresh grammar samplers by grammar and triggers, kept to be cloned: llama.cpp takes ~300 ms to
 * parse a coding agent's tool grammar (Claude Code's 12 tools: 43 KB of GBNF, 2 cores), which
 * every turn of the session would otherwise pay before its first token; a clone copies the parsed
 * rules in well under a millisecond. Per thread (module state), least recently used out first.
 */
const pristine = new Map<string, SamplerPtr>();
const PRISTINE_MAX = 32;

function makeSampler(m: EngineModel, gbnf: string, triggers?: GrammarTriggers): SamplerPtr {
  const key = `${Deno.UnsafePointer.value(m.vocab)}\0${gbnf}\0${JSON.stringify(triggers ?? null)}`;
  let g = pristine.get(key);
  if (g) pristine.delete(key); // re-inserted last: most recently used
  else {
    g = parseGrammar(m, gbnf, triggers);
    if (pristine.size >= PRISTINE_MAX) {
      const [oldKey, old] = pristine.entries().next().value!;
      pristine.delete(oldKey);
      samplerFree(m.llama, old);
    }
  }
  pristine.set(key, g);
  return samplerClone(m.llama, g);
}

function parseGrammar(m: EngineModel, gbnf: string, triggers?: GrammarTriggers): SamplerPtr {
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

/**
 * Accepts a token the engine forces (a reasoning budget's end marker) as if sampled: only while
 * a lazy grammar still awaits its trigger and the token does not fire it, since a grammar that
 * governs the output decides every token itself. Returns whether the token was taken.
 */
export function acceptForced(
  m: EngineModel,
  chain: SamplerPtr,
  g: SeqGrammar,
  token: number,
): boolean {
  const w = g.watch;
  if (!w?.awaiting) return false;
  const p = peekTrigger(w, token, tokenToPiece(m.llama, m.vocab, token, true));
  if (p.replay) return false;
  samplerAccept(m.llama, g.sampler, token);
  commitTrigger(w, token, p);
  samplerAccept(m.llama, chain, token);
  return true;
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
  const t0 = performance.now();
  try {
    return sampleStep(m, chain, g, idx, banEog);
  } finally {
    constrainedStats.calls++;
    constrainedStats.ms += performance.now() - t0;
  }
}

function sampleStep(
  m: EngineModel,
  chain: SamplerPtr,
  g: SeqGrammar,
  idx: number,
  banEog: boolean,
): number | undefined {
  const s = getScratch(m.nVocab);
  const kind = chainKind(m, g, chain);
  let pick = maskedPick(m, s, chain, g, idx, banEog, kind);
  if (pick === "slow") pick = rejectionPick(m, s, chain, g, idx, banEog, kind);
  // llama.cpp's grammar reads code points leniently (an overlong form, a surrogate, a lead byte
  // past U+10FFFF all decode to something a string allows), so a constrained string could hold
  // bytes that are no UTF-8 and come out as U+FFFD, longer than its schema allows. Such tokens are
  // refused like any other the grammar rejects, while the grammar governs the output.
  const banned: number[] = [];
  let utf8: number[] | undefined;
  while (pick && !g.watch?.awaiting && !m.eogTokens.includes(pick.token)) {
    utf8 = utf8Next(g.utf8 ?? [], tokenToPiece(m.llama, m.vocab, pick.token, true));
    if (utf8) break;
    constrainedStats.rejections++;
    banned.push(pick.token);
    pick = resample(m, s, chain, g, idx, banEog, banned);
  }
  if (!pick) return undefined;
  if (utf8) g.utf8 = utf8;
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
 * The bytes of an unfinished UTF-8 sequence after `piece` follows `pending`, or undefined when the
 * bytes are not UTF-8 (strictly: no overlong forms, surrogates, or code points past U+10FFFF).
 */
export function utf8Next(pending: number[], piece: Uint8Array): number[] | undefined {
  let seq = [...pending];
  for (const b of piece) {
    if (seq.length === 0) {
      if (b < 0x80) continue;
      if (b < 0xc2 || b > 0xf4) return undefined;
      seq = [b];
      continue;
    }
    const lead = seq[0];
    // The second byte of some leads has a narrower range (overlong, surrogate, > U+10FFFF).
    const lo = seq.length === 1 && lead === 0xe0
      ? 0xa0
      : seq.length === 1 && lead === 0xf0
      ? 0x90
      : 0x80;
    const hi = seq.length === 1 && lead === 0xed
      ? 0x9f
      : seq.length === 1 && lead === 0xf4
      ? 0x8f
      : 0xbf;
    if (b < lo || b > hi) return undefined;
    seq.push(b);
    const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (seq.length === need) seq = [];
  }
  return seq;
}

/** Masks allowing at most this fraction of the vocabulary are sampled from directly. */
const DIRECT_MAX = 1 / 8;

/**
 * The chain run straight on the allowed tokens of the state's mask when the mask is small, or
 * "slow" to take the first-pick path instead (a dense mask, inside a string say: a first pick over
 * the full vocabulary is cheaper there and nearly always allowed). The masked pick is the chain
 * applied to grammar-masked logits by definition; the first-pick path gives the same distribution
 * (greedy: the same token, as an allowed first pick is the lowest id among the maxima, and so is
 * the masked pick). Sampling chains build the mask on a miss, so which path a step takes depends
 * on the grammar state alone and a seed gives the same output whatever the cache held; greedy
 * only uses a cached mask, as either path picks the same token.
 */
function maskedPick(
  m: EngineModel,
  s: Scratch,
  chain: SamplerPtr,
  g: SeqGrammar,
  idx: number,
  banEog: boolean,
  kind: ChainKind,
): Pick | undefined | "slow" {
  const st = cacheState(m, g);
  if (!st) return "slow";
  let mask: Mask | undefined;
  if (kind.greedy) {
    mask = cachedMask(st.f.masks, st.key);
    if (mask) constrainedStats.maskHits++;
  } else mask = stateMask(m, g, st);
  if (!mask || mask.count > m.nVocab * DIRECT_MAX) return "slow";
  const pick = sampleMasked(m, s, chain, g, mask, idx, banEog);
  if (pick !== "slow") constrainedStats.direct++;
  return pick;
}

/**
 * A first pick over the full vocabulary, checked against the grammar; on rejection the chain runs
 * again on the allowed tokens (from the state's mask, or the grammar applied to the whole
 * vocabulary when masks are off).
 */
function rejectionPick(
  m: EngineModel,
  s: Scratch,
  chain: SamplerPtr,
  g: SeqGrammar,
  idx: number,
  banEog: boolean,
  kind: ChainKind,
): Pick | undefined {
  let first: number | undefined;
  if (kind.statelessAccept && mode !== "slow") {
    // Filled and picked in C; the chain's own accept inside is a no-op for these samplers.
    first = samplerSample(m.llama, chain, m.ctx, idx);
    if (banEog && m.eogTokens.includes(first)) first = undefined; // only when all are -inf
  } else {
    fillCandidates(m, s, idx);
    m.llama.sym.llama_sampler_apply(chain, s.allArr);
    first = selected(s);
  }
  if (first !== undefined && allowedByGrammar(m, s, g.sampler, first)) {
    const trigger = triggerCheck(m, s, g, first);
    if (trigger !== false) return { token: first, trigger };
    return resample(m, s, chain, g, idx, banEog, [first]);
  }
  constrainedStats.rejections++;
  const st = cacheState(m, g);
  if (st) {
    const pick = sampleMasked(m, s, chain, g, stateMask(m, g, st), idx, banEog);
    if (pick !== "slow") return pick;
  }
  return resample(m, s, chain, g, idx, banEog, []);
}

/**
 * The rejection path without masks: the grammar masks the vocabulary and the chain runs again.
 * `banned` are tokens whose trigger replay the grammar rejects, masked by hand (an awaiting
 * grammar's `apply` lets everything through); a new such pick joins them and the chain runs once
 * more.
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
    constrainedStats.fullApplies++;
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

/** The mask of the grammar's current state, from the cache or built (and checked in "verify"). */
function stateMask(m: EngineModel, g: SeqGrammar, st: { f: FastState; key: string }): Mask {
  const { f, key } = st;
  const partial = partialUtf8(f.grammar);
  const { mask, hit } = maskFor(m, f.masks, g.sampler, key, partial, !f.rules.hasTokenElements);
  if (hit) constrainedStats.maskHits++;
  else {
    constrainedStats.maskMisses++;
    if (mode === "verify" && !sameMask(mask, fullMask(m, g.sampler), m.nVocab)) {
      throw new Error(`grammar mask for state ${key} differs from llama.cpp's full apply`);
    }
  }
  return mask;
}

/**
 * Runs the chain on the tokens `mask` allows; "slow" when llama.cpp's grammar refuses the pick
 * (a mask that disagrees with it switches the cache off for the rest of the process).
 */
function sampleMasked(
  m: EngineModel,
  s: Scratch,
  chain: SamplerPtr,
  g: SeqGrammar,
  mask: Mask,
  idx: number,
  banEog: boolean,
): Pick | undefined | "slow" {
  if (!fillFromMask(m, s, mask, idx, banEog)) return undefined;
  m.llama.sym.llama_sampler_apply(chain, s.allArr);
  const token = selected(s);
  if (token === undefined) return undefined;
  if (!allowedByGrammar(m, s, g.sampler, token)) {
    disabled = `a cached grammar mask allowed token ${token}, which llama.cpp's grammar rejects`;
    return "slow";
  }
  return { token };
}

/**
 * The grammar's cache and current state key, or undefined when masks cannot be used now: cache
 * off or forced slow, a lazy grammar still awaiting its trigger (it constrains nothing, and picks
 * go through the trigger checks), a state that cannot be read safely.
 */
function cacheState(m: EngineModel, g: SeqGrammar): { f: FastState; key: string } | undefined {
  if (mode === "slow" || disabled !== undefined || layoutProblem(m) !== undefined) return undefined;
  if (g.watch?.awaiting) return undefined;
  const f = fastState(m, g);
  if (!f || awaitingTrigger(f.grammar)) return undefined;
  const key = stateKey(f.grammar, f.rules);
  return key === undefined ? undefined : { f, key };
}

/** Samplers whose `accept` does nothing on a CPU chain (no history, no RNG bookkeeping). */
const NO_ACCEPT_STATE = new Set([
  "logit-bias",
  "top-k",
  "top-p",
  "min-p",
  "temp",
  "dist",
  "greedy",
]);

/**
 * What `chain` is: `greedy` when it is elementwise logit changes (bias, penalties) then the
 * argmax, as `buildSamplerChain` makes at temperature 0; `statelessAccept` when no sampler in it
 * keeps state from `accept`, so `llama_sampler_sample` may pick (and accept) on it freely.
 * Remembered per sequence and chain address. Unknown names (a backend-initialised "+greedy")
 * make neither true, which only costs speed.
 */
function chainKind(m: EngineModel, g: SeqGrammar, chain: SamplerPtr): ChainKind {
  const at = Number(Deno.UnsafePointer.value(chain));
  if (g.chain?.at === at) return g.chain.kind;
  const sym = m.llama.sym;
  const n = sym.llama_sampler_chain_n(chain);
  const names: string[] = [];
  for (let i = 0; i < n; i++) {
    const p = sym.llama_sampler_chain_get(chain, i);
    const name = p && sym.llama_sampler_name(p);
    names.push(name ? Deno.UnsafePointerView.getCString(name) : "");
  }
  const kind = {
    greedy: n > 0 && names[n - 1] === "greedy" &&
      names.slice(0, -1).every((x) => x === "logit-bias" || x === "penalties"),
    statelessAccept: n > 0 && names.every((x) => NO_ACCEPT_STATE.has(x)),
  };
  g.chain = { at, kind };
  return kind;
}

/** The grammar's address and rules, re-read when llama.cpp replaced its grammar object. */
function fastState(m: EngineModel, g: SeqGrammar): FastState | undefined {
  const addr = grammarAddress(g.sampler);
  if (!addr) return undefined;
  if (g.fast?.grammar === addr) return g.fast;
  const rules = ruleTable(addr);
  if (!rules) return undefined;
  g.fast = { grammar: addr, rules, masks: grammarMasks(m, g.gbnf) };
  return g.fast;
}

/**
 * Writes the allowed candidates of batch row `idx` into the scratch array; false when none is
 * left (banned end-of-generation tokens do not count).
 */
function fillFromMask(
  m: EngineModel,
  s: Scratch,
  mask: Mask,
  idx: number,
  banEog: boolean,
): boolean {
  const logits = logitsIth(m.llama, m.ctx, idx, m.nVocab);
  const { allI32, allF32 } = s;
  let n = 0;
  if (mask.list) {
    const list = mask.list;
    for (let i = 0, j = 0; i < list.length; i++, j += 3) {
      const t = list[i];
      allI32[j] = t;
      allF32[j + 1] = logits[t];
      allF32[j + 2] = 0;
    }
    n = list.length;
  } else {
    const bits = mask.bits!;
    let j = 0;
    for (let w = 0; w < bits.length; w++) {
      let word = bits[w];
      while (word) {
        const low = word & -word;
        const t = (w << 5) + 31 - Math.clz32(low);
        allI32[j] = t;
        allF32[j + 1] = logits[t];
        allF32[j + 2] = 0;
        j += 3;
        word ^= low;
      }
    }
    n = j / 3;
  }
  // Banned end-of-generation tokens (a handful) leave the array, order kept.
  const banned = banEog ? m.eogTokens.filter((t) => maskHas(mask, t)) : [];
  if (banned.length) {
    let k = 0;
    for (let i = 0; i < n; i++) {
      const t = allI32[i * 3];
      if (banned.includes(t)) continue;
      if (k !== i) {
        allI32[k * 3] = t;
        allF32[k * 3 + 1] = allF32[i * 3 + 1];
      }
      k++;
    }
    n = k;
  }
  const dv = new DataView(s.allArr.buffer);
  dv.setBigUint64(0, BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(s.all))), true);
  dv.setBigUint64(8, BigInt(n), true);
  dv.setBigInt64(16, -1n, true);
  dv.setUint8(24, 0);
  return n > 0;
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
