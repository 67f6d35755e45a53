/**
 * Allowed-token masks of grammar states, computed with llama.cpp's own grammar as the judge and
 * cached per grammar, so that a state the generation comes back to (the same place in every
 * array element, object key, whitespace run) costs a lookup instead of a pass over the whole
 * vocabulary.
 *
 * Why read llama.cpp's state instead of running a GBNF matcher in TS: the mask must be exactly
 * what llama.cpp's sampler allows, and a second matcher is a second implementation of its
 * semantics (UTF-8 partial sequences, token elements, end-of-generation, empty pieces) that could
 * drift. Here llama.cpp decides every token that ends up in a mask; what is read from its memory
 * (the pushdown stacks and pending UTF-8 bits, through the build-pinned layout of
 * ffi/grammar_state.ts) only names the state, as a cache key. That layout is proven at start-up
 * against a probe grammar, and every pointer is bounds-checked on each read; when either fails the
 * cache is off and sampling takes the plain full-vocabulary path.
 *
 * A miss walks the token trie (token_trie.ts) level by level, asking llama.cpp about one level's
 * candidates at a time. A subtree is skipped only when the grammar rejected its root and that
 * root's piece ends on a complete UTF-8 character (or is invalid UTF-8): llama.cpp rejects a
 * token when every stack fails on one of its characters (or the grammar ended before them), and a
 * longer piece with the same leading characters meets the same failure. A piece cut inside a
 * character is not used to prune (llama.cpp judges a partial character by the range it could
 * complete to, which a longer piece narrows), nor is any pruning done in grammars with token
 * elements (`<[id]>`), which match by id rather than text. So a state whose allowed set is small
 * (structure: `{`, `,`, `"key":`, whitespace) costs a few thousand candidate checks, not 128k.
 *
 * Memory is bounded: masks are stored as a token list when few are allowed, else as a bitset
 * (nVocab/8 bytes), each grammar's cache is capped (16 MiB) and all grammars share one budget
 * (32 MiB), evicted least recently used (`setMaskCacheBudget`).
 *
 * @example
 * ```ts
 * import { grammarMasks, maskFor } from "./grammar_mask.ts";
 * const masks = grammarMasks(model, gbnf);
 * const mask = maskFor(model, masks, sampler, key, { value: 0, remain: 0 }); // cached after this
 * ```
 * @module
 */
import { type SamplerPtr, samplers, tokenDataArray, tokenToPiece } from "../../../ffi/mod.ts";
import { verifyGrammarLayout } from "../../../ffi/grammar_state.ts";
import type { EngineModel } from "../model.ts";
import { tokenTrie, utf8Remain } from "./token_trie.ts";

/** The tokens a grammar state allows: a sorted list when few, else a bitset. */
export type Mask = {
  count: number;
  list?: Int32Array;
  bits?: Uint32Array;
  bytes: number;
};

/** Masks of one grammar (one GBNF text) on one model, least recently used first. */
export type GrammarMasks = {
  gbnf: string;
  map: Map<string, Mask>;
  bytes: number;
};

export const maskStats = {
  hits: 0,
  misses: 0,
  evictions: 0,
  /** Candidates llama.cpp judged while building masks. */
  judged: 0,
  buildMs: 0,
};

let budgetBytes = 32 * 1024 * 1024;
let grammarBudgetBytes = 16 * 1024 * 1024;
let totalBytes = 0;
/** Every grammar's masks, least recently used grammar first. */
const lru = new Set<GrammarMasks>();
const perModel = new WeakMap<EngineModel, Map<string, GrammarMasks>>();

/**
 * Sets the byte budgets of cached masks: `total` over all grammars (default 32 MiB) and
 * `perGrammar` for any one (default 16 MiB, at most `total`); evicts down to them.
 */
export function setMaskCacheBudget(total: number, perGrammar = total / 2): void {
  budgetBytes = Math.max(0, total);
  grammarBudgetBytes = Math.max(0, Math.min(perGrammar, budgetBytes));
  for (const g of lru) evictFrom(g, grammarBudgetBytes);
  evict();
}

/** Bytes held by cached masks now (masks and their keys). */
export function maskCacheBytes(): number {
  return totalBytes;
}

/** Drops every cached mask. */
export function clearMaskCache(): void {
  for (const g of lru) {
    g.map.clear();
    g.bytes = 0;
  }
  lru.clear();
  totalBytes = 0;
}

/** The mask cache of `gbnf` on `m`. */
export function grammarMasks(m: EngineModel, gbnf: string): GrammarMasks {
  let byText = perModel.get(m);
  if (!byText) perModel.set(m, byText = new Map());
  let g = byText.get(gbnf);
  if (!g) {
    g = { gbnf, map: new Map(), bytes: 0 };
    // Forgetting an old grammar here only means its next sequence starts a fresh cache; what
    // its masks hold stays counted (and evictable) through `lru` until evicted.
    if (byText.size >= 256) byText.delete(byText.keys().next().value!);
    byText.set(gbnf, g);
  }
  return g;
}

/** What an entry costs: the mask, and its key (UTF-16). */
function entryBytes(key: string, mask: Mask): number {
  return mask.bytes + 2 * key.length;
}

/** Drops `g`'s least recently used masks until it holds at most `limit` bytes. */
function evictFrom(g: GrammarMasks, limit: number): void {
  for (const [k, mask] of g.map) {
    if (g.bytes <= limit) break;
    const b = entryBytes(k, mask);
    g.map.delete(k);
    g.bytes -= b;
    totalBytes -= b;
    maskStats.evictions++;
  }
  if (g.map.size === 0) lru.delete(g);
}

/** Drops least recently used masks (oldest grammar first) until the total fits the budget. */
function evict(): void {
  for (const g of lru) {
    if (totalBytes <= budgetBytes) return;
    evictFrom(g, Math.max(0, g.bytes - (totalBytes - budgetBytes)));
  }
}

function remember(g: GrammarMasks, key: string, mask: Mask): void {
  const b = entryBytes(key, mask);
  g.map.set(key, mask);
  g.bytes += b;
  totalBytes += b;
  lru.delete(g);
  lru.add(g);
  evictFrom(g, grammarBudgetBytes);
  evict();
}

/** A cached mask (marked as recently used), or undefined. */
export function cachedMask(g: GrammarMasks, key: string): Mask | undefined {
  const mask = g.map.get(key);
  if (!mask) return undefined;
  g.map.delete(key);
  g.map.set(key, mask);
  lru.delete(g);
  lru.add(g);
  return mask;
}

const layoutChecked = new WeakMap<EngineModel, string | null>();

/**
 * Whether the grammar layout of ffi/grammar_state.ts holds for this model's library (checked once
 * per model); the reason when it does not.
 */
export function layoutProblem(m: EngineModel): string | undefined {
  if (!layoutChecked.has(m)) {
    let why: string | undefined;
    try {
      why = verifyGrammarLayout({
        llama: m.llama,
        vocab: m.vocab,
        make: (gbnf, pattern) => {
          const make = samplers(m.llama);
          const s = pattern === undefined
            ? make.grammar(m.vocab, gbnf, "root")
            : make.grammarLazyPatterns(m.vocab, gbnf, "root", [pattern], []);
          return (s ?? undefined) as SamplerPtr | undefined;
        },
        byteToken: (b) => byteTokens(m)[b],
      });
    } catch (e) {
      why = `layout check failed: ${(e as Error).message}`;
    }
    layoutChecked.set(m, why ?? null);
  }
  return layoutChecked.get(m) ?? undefined;
}

const byteTokenMaps = new WeakMap<EngineModel, Int32Array>();

/** For each byte, a token whose piece is exactly that byte (-1 when none): built once. */
export function byteTokens(m: EngineModel): Int32Array {
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

/** Above 1/DENSE_ROOTS of the first bytes allowed, a mask is built by one full apply. */
const DENSE_ROOTS = 4;

/** A `llama_token_data` buffer for `n` candidates and its array struct. */
type Judge = {
  n: number;
  data: ArrayBuffer;
  i32: Int32Array;
  f32: Float32Array;
  arr: Uint8Array<ArrayBuffer>;
  dv: DataView;
  ids: Int32Array;
  next: Int32Array;
};

let judge: Judge | undefined;

function getJudge(n: number): Judge {
  if (judge && judge.n === n) return judge;
  const data = new ArrayBuffer(n * 12);
  const arr = new Uint8Array(tokenDataArray.size);
  const dv = new DataView(arr.buffer);
  dv.setBigUint64(0, BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(data))), true);
  judge = {
    n,
    data,
    i32: new Int32Array(data),
    f32: new Float32Array(data),
    arr,
    dv,
    ids: new Int32Array(n),
    next: new Int32Array(n),
  };
  return judge;
}

/**
 * Asks llama.cpp's grammar about `ids[0..len)`; writes 1 (allowed) or 0 into `out` per
 * position.
 */
function judgeTokens(
  m: EngineModel,
  sampler: SamplerPtr,
  j: Judge,
  ids: Int32Array,
  len: number,
  out: Uint8Array,
): void {
  const { i32, f32, dv } = j;
  for (let i = 0, k = 0; i < len; i++, k += 3) {
    i32[k] = ids[i];
    f32[k + 1] = 0;
    f32[k + 2] = 0;
  }
  dv.setBigUint64(8, BigInt(len), true);
  dv.setBigInt64(16, -1n, true);
  dv.setUint8(24, 0);
  m.llama.sym.llama_sampler_apply(sampler, j.arr);
  for (let i = 0, k = 1; i < len; i++, k += 3) out[i] = f32[k] === -Infinity ? 0 : 1;
  maskStats.judged += len;
}

function toMask(bits: Uint32Array, count: number): Mask {
  if (count * 4 < bits.byteLength) {
    const list = new Int32Array(count);
    let k = 0;
    for (let w = 0; w < bits.length; w++) {
      let word = bits[w];
      while (word) {
        const b = 31 - Math.clz32(word & -word);
        list[k++] = w * 32 + b;
        word &= word - 1;
      }
    }
    return { count, list, bytes: list.byteLength + 64 };
  }
  return { count, bits, bytes: bits.byteLength + 64 };
}

/** The mask of the grammar's current state, judging the whole vocabulary in one call. */
export function fullMask(m: EngineModel, sampler: SamplerPtr): Mask {
  const n = m.nVocab;
  const j = getJudge(n);
  for (let t = 0; t < n; t++) j.ids[t] = t;
  const ok = new Uint8Array(n);
  judgeTokens(m, sampler, j, j.ids, n, ok);
  const bits = new Uint32Array((n + 31) >>> 5);
  let count = 0;
  for (let t = 0; t < n; t++) {
    if (ok[t]) {
      bits[t >>> 5] |= 1 << (t & 31);
      count++;
    }
  }
  return toMask(bits, count);
}

/**
 * The mask of the grammar's current state by walking the token trie (see the module doc);
 * `partial` is the grammar's pending UTF-8 state, `pruneByText` false for grammars with token
 * elements.
 */
export function trieMask(
  m: EngineModel,
  sampler: SamplerPtr,
  partial: { value: number; remain: number },
  pruneByText: boolean,
): Mask {
  if (!pruneByText) return fullMask(m, sampler);
  const n = m.nVocab;
  const trie = tokenTrie(m);
  const j = getJudge(n);
  const bits = new Uint32Array((n + 31) >>> 5);
  const ok = new Uint8Array(n);
  let count = 0;
  let level = j.ids;
  let next = j.next;
  let len = 0;
  for (const t of trie.loose) level[len++] = t;
  for (const t of trie.roots) level[len++] = t;
  const { childStart, children, endRemain, pieceBytes, pieceStart } = trie;
  let first = true;
  while (len > 0) {
    judgeTokens(m, sampler, j, level, len, ok);
    if (first) {
      // Most first bytes allowed (inside a string): the trie would ask about nearly every token
      // anyway, in dozens of small calls; one call over the vocabulary is cheaper.
      let allowed = 0;
      for (let i = 0; i < len; i++) allowed += ok[i];
      if (allowed * DENSE_ROOTS > len) return fullMask(m, sampler);
      first = false;
    }
    let nextLen = 0;
    for (let i = 0; i < len; i++) {
      const t = level[i];
      if (ok[i]) {
        bits[t >>> 5] |= 1 << (t & 31);
        count++;
      } else {
        const remain = partial.remain === 0
          ? endRemain[t]
          : utf8Remain(pieceBytes, pieceStart[t], pieceStart[t + 1], partial.remain);
        if (remain <= 0) continue; // complete (or invalid): every extension fails the same way
      }
      for (let c = childStart[t], e = childStart[t + 1]; c < e; c++) next[nextLen++] = children[c];
    }
    const tmp = level;
    level = next;
    next = tmp;
    len = nextLen;
  }
  return toMask(bits, count);
}

/** Whether `mask` allows `token`. */
export function maskHas(mask: Mask, token: number): boolean {
  if (mask.bits) return (mask.bits[token >>> 5] & (1 << (token & 31))) !== 0;
  const l = mask.list!;
  let lo = 0;
  let hi = l.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (l[mid] === token) return true;
    if (l[mid] < token) lo = mid + 1;
    else hi = mid - 1;
  }
  return false;
}

/** The cached mask for `key`, or computes, stores and returns it. */
export function maskFor(
  m: EngineModel,
  g: GrammarMasks,
  sampler: SamplerPtr,
  key: string,
  partial: { value: number; remain: number },
  pruneByText: boolean,
): { mask: Mask; hit: boolean } {
  const hit = cachedMask(g, key);
  if (hit) {
    maskStats.hits++;
    return { mask: hit, hit: true };
  }
  maskStats.misses++;
  const t0 = performance.now();
  const mask = trieMask(m, sampler, partial, pruneByText);
  maskStats.buildMs += performance.now() - t0;
  remember(g, key, mask);
  return { mask, hit: false };
}

/** Whether two masks allow the same tokens. */
export function sameMask(a: Mask, b: Mask, n: number): boolean {
  if (a.count !== b.count) return false;
  for (let t = 0; t < n; t++) if (maskHas(a, t) !== maskHas(b, t)) return false;
  return true;
}
