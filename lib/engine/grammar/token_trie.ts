/**
 * The vocabulary as a prefix tree, for computing grammar masks by walking shared prefixes once.
 * Every token's parent is the token whose piece (the bytes llama.cpp's grammar reads: the piece
 * with special tokens rendered, up to its first NUL byte) is the longest prefix of its own piece;
 * a token with an identical piece hangs under the lowest such id. Tokens with no prefix among the
 * others are roots. End-of-generation tokens and tokens the grammar always refuses (empty piece)
 * are kept apart in `loose`: the grammar decides them by other rules than their text.
 *
 * The tree is used for pruning, never for deciding: when the grammar rejects a token whose piece
 * ends on a complete UTF-8 character, it rejects every longer piece starting with it (see
 * grammar_mask.ts), so the subtree need not be asked.
 *
 * @example
 * ```ts
 * import { tokenTrie } from "./token_trie.ts";
 * const trie = tokenTrie(model); // built once per model (~0.3 s for 128k tokens)
 * trie.roots; // tokens with no proper prefix token
 * ```
 * @module
 */
import { tokenToPiece } from "../../../ffi/mod.ts";
import type { EngineModel } from "../model.ts";

export type TokenTrie = {
  /** Tokens without a parent, ascending. */
  roots: Int32Array;
  /** Children of token t: `children[childStart[t] .. childStart[t + 1])`, ascending. */
  childStart: Int32Array;
  children: Int32Array;
  /** End-of-generation tokens and tokens with an empty piece. */
  loose: Int32Array;
  /**
   * Each token's piece as llama.cpp's grammar reads it (up to the first NUL):
   * `pieceBytes[pieceStart[t] .. pieceStart[t + 1])`.
   */
  pieceBytes: Uint8Array;
  pieceStart: Int32Array;
  /**
   * Per token, the UTF-8 state its piece ends in when decoded from a clean start, as llama.cpp's
   * grammar decodes it: 0 complete, 1..3 bytes still missing, -1 invalid.
   */
  endRemain: Int8Array;
};

const tries = new WeakMap<EngineModel, TokenTrie>();

/** The model's token trie, built on first use. */
export function tokenTrie(m: EngineModel): TokenTrie {
  let t = tries.get(m);
  if (!t) {
    t = buildTrie(m);
    tries.set(m, t);
  }
  return t;
}

function latin1(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 4096) {
    s += String.fromCharCode(...bytes.subarray(i, i + 4096));
  }
  return s;
}

function buildTrie(m: EngineModel): TokenTrie {
  const n = m.nVocab;
  const eog = new Set(m.eogTokens);
  const pieces: Uint8Array[] = new Array(n);
  const keys: string[] = new Array(n);
  const endRemain = new Int8Array(n);
  const pieceStart = new Int32Array(n + 1);
  const loose: number[] = [];
  const inTree: number[] = [];
  for (let t = 0; t < n; t++) {
    const raw = tokenToPiece(m.llama, m.vocab, t, true);
    const nul = raw.indexOf(0);
    const piece = nul < 0 ? raw : raw.subarray(0, nul);
    pieces[t] = piece;
    pieceStart[t + 1] = pieceStart[t] + piece.length;
    endRemain[t] = utf8Remain(piece, 0, piece.length, 0);
    if (eog.has(t) || piece.length === 0) loose.push(t);
    else {
      keys[t] = latin1(piece);
      inTree.push(t);
    }
  }
  const pieceBytes = new Uint8Array(pieceStart[n]);
  for (let t = 0; t < n; t++) pieceBytes.set(pieces[t], pieceStart[t]);
  // Sorted by piece (latin1 strings compare byte by byte), then id: a token's ancestors come
  // before it, and the nearest one still on the stack is its longest prefix. Pieces hold no NUL,
  // so "piece NUL id" sorts as (piece, id) with the engine's own string sort.
  const width = String(n).length;
  const tagged = inTree.map((t) => `${keys[t]}\0${String(t).padStart(width, "0")}`);
  tagged.sort();
  const sorted = tagged.map((k) => Number(k.slice(k.length - width)));
  const parent = new Int32Array(n).fill(-1);
  const stack: number[] = [];
  for (const t of sorted) {
    const k = keys[t];
    while (stack.length && !k.startsWith(keys[stack[stack.length - 1]])) stack.pop();
    if (stack.length) parent[t] = stack[stack.length - 1];
    stack.push(t);
  }
  const count = new Int32Array(n + 1);
  const roots: number[] = [];
  for (const t of sorted) {
    if (parent[t] < 0) roots.push(t);
    else count[parent[t] + 1]++;
  }
  const childStart = new Int32Array(n + 1);
  for (let t = 0; t < n; t++) childStart[t + 1] = childStart[t] + count[t + 1];
  const fill = childStart.slice(0, n);
  const children = new Int32Array(childStart[n]);
  for (let t = 0; t < n; t++) if (parent[t] >= 0) children[fill[parent[t]]++] = t;
  roots.sort((a, b) => a - b);
  return {
    roots: Int32Array.from(roots),
    childStart,
    children,
    loose: Int32Array.from(loose),
    pieceBytes,
    pieceStart,
    endRemain,
  };
}

// Sequence length by the high nibble of a lead byte; 0 marks a continuation byte (invalid lead).
const LEAD_LEN = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];

/**
 * What llama.cpp's `decode_utf8` leaves pending after the bytes `[from, to)` of `bytes`, starting
 * from a partial sequence with `remain` bytes missing: 0 complete, 1..3 bytes missing, -1 invalid
 * (mirrors src/llama-grammar.cpp, including its reading of 0xF8..0xFF as four-byte leads).
 */
export function utf8Remain(bytes: Uint8Array, from: number, to: number, remain: number): number {
  let i = from;
  let r = remain;
  while (i < to && r > 0) {
    if (bytes[i] >> 6 !== 2) return -1;
    i++;
    r--;
  }
  while (i < to) {
    r = LEAD_LEN[bytes[i] >> 4] - 1;
    if (r < 0) return -1;
    i++;
    while (i < to && r > 0) {
      i++;
      r--;
    }
  }
  return r;
}
