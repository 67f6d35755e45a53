/**
 * Read-only access to the parse state of a llama.cpp grammar sampler, which the C API keeps
 * opaque: `llama_sampler` → `llama_sampler_grammar` → `llama_grammar` (src/llama-sampler.cpp,
 * src/llama-grammar.h of the bundled llama.cpp 3.22.1, compiled with libstdc++ on x86_64). The
 * state is the set of pushdown stacks (vectors of pointers into the grammar's rules) plus the
 * pending partial UTF-8 sequence; `stateKey` turns it into a string that names the state
 * independently of where the rules sit in memory, so equal keys mean equal grammar states in
 * any sampler built from the same GBNF.
 *
 * The offsets below are pinned to that build. `verifyGrammarLayout` proves them at start-up
 * against a grammar whose encoding and parse states are known (rule elements, initial stacks,
 * stacks after accepting tokens, the partial UTF-8 field, the lazy flags); callers must not use
 * `stateKey` unless it returned true. `stateKey` also checks every pointer it follows (rule
 * bounds, alignment, element kinds) and returns undefined rather than guess.
 *
 * @example
 * ```ts
 * import { grammarAddress, ruleTable, stateKey } from "./grammar_state.ts";
 * const g = grammarAddress(sampler); // the llama_grammar behind a grammar sampler
 * const rules = ruleTable(g);
 * const key = stateKey(g, rules); // "0,0|0:3" or undefined
 * ```
 * @module
 */
import type { Llama } from "./library.ts";
import type { SamplerPtr, VocabPtr } from "./llama.ts";

/** Byte offsets, libstdc++ on x86_64 (std::vector: begin/end/cap; std::string: 32 bytes). */
const OFF = {
  samplerCtx: 8, // llama_sampler { iface*, ctx* }
  sgVocab: 0, // llama_sampler_grammar { vocab*, std::string grammar_str, grammar_root, grammar* }
  sgStr: 8,
  sgRoot: 40,
  sgGrammar: 72,
  gVocab: 0, // llama_grammar { vocab*, rules, stacks, partial_utf8, lazy, awaiting_trigger, ... }
  gRules: 8,
  gStacks: 32,
  gPartialValue: 56,
  gPartialRemain: 60,
  gLazy: 64,
  gAwaiting: 65,
} as const;

const VEC = 24; // sizeof(std::vector<T>)
const ELEM = 8; // sizeof(llama_grammar_element): { enum type (u32), uint32_t value }

/** Element types (llama_gretype). */
export const GRETYPE = {
  END: 0,
  ALT: 1,
  RULE_REF: 2,
  CHAR: 3,
  CHAR_NOT: 4,
  CHAR_RNG_UPPER: 5,
  CHAR_ALT: 6,
  CHAR_ANY: 7,
  TOKEN: 8,
  TOKEN_NOT: 9,
} as const;

/** Bounds on what a sane state looks like; a state beyond them is not keyed. */
const MAX_STACKS = 1024;
const MAX_DEPTH = 4096;
const MAX_RULES = 1 << 16;
const MAX_RULE_LEN = 1 << 20;

function view(addr: number): Deno.UnsafePointerView {
  const p = Deno.UnsafePointer.create(BigInt(addr));
  if (!p) throw new Error("null pointer");
  return new Deno.UnsafePointerView(p);
}

function u64(v: Deno.UnsafePointerView, off: number): number {
  return v.getUint32(off) + v.getUint32(off + 4) * 4294967296;
}

function ptrValue(p: Deno.PointerValue): number {
  return p ? Number(Deno.UnsafePointer.value(p)) : 0;
}

/** Address of the `llama_grammar` behind a grammar sampler (0 when it has none). */
export function grammarAddress(sampler: SamplerPtr): number {
  const ctx = u64(new Deno.UnsafePointerView(sampler), OFF.samplerCtx);
  return ctx ? u64(view(ctx), OFF.sgGrammar) : 0;
}

/** Where each rule's elements lie, sorted by address for lookups, and their contents. */
export type RuleTable = {
  grammar: number;
  rulesBegin: number;
  /** Per rule: [begin, end) byte addresses. */
  begin: number[];
  end: number[];
  /** Rule indices ordered by `begin`. */
  order: number[];
  /** Per rule: element (type, value) pairs, flattened. */
  elems: Uint32Array[];
  /** Whether any element matches tokens by id (`<[id]>`, `!<[id]>`). */
  hasTokenElements: boolean;
};

/** Reads the rules of the grammar at `grammar` (they are const for the grammar's life). */
export function ruleTable(grammar: number): RuleTable | undefined {
  const g = view(grammar);
  const rb = u64(g, OFF.gRules);
  const re = u64(g, OFF.gRules + 8);
  const n = (re - rb) / VEC;
  if (!rb || !Number.isInteger(n) || n <= 0 || n > MAX_RULES) return undefined;
  const rv = view(rb);
  const begin: number[] = [];
  const end: number[] = [];
  const elems: Uint32Array[] = [];
  let hasTokenElements = false;
  for (let i = 0; i < n; i++) {
    const b = u64(rv, i * VEC);
    const e = u64(rv, i * VEC + 8);
    const len = (e - b) / ELEM;
    if (!Number.isInteger(len) || len > MAX_RULE_LEN || (len > 0 && !b)) return undefined;
    begin.push(b);
    end.push(e);
    const el = new Uint32Array(len * 2);
    if (len > 0) {
      const ev = view(b);
      for (let k = 0; k < len * 2; k++) el[k] = ev.getUint32(k * 4);
      if (el[len * 2 - 2] !== GRETYPE.END) return undefined;
    }
    for (let k = 0; k < len; k++) {
      const t = el[k * 2];
      if (t > GRETYPE.TOKEN_NOT) return undefined;
      if (t === GRETYPE.TOKEN || t === GRETYPE.TOKEN_NOT) hasTokenElements = true;
    }
    elems.push(el);
  }
  const order = begin.map((_, i) => i).filter((i) => end[i] > begin[i]);
  order.sort((a, b) => begin[a] - begin[b]);
  return { grammar, rulesBegin: rb, begin, end, order, elems, hasTokenElements };
}

/** The rule index holding element address `p`, or -1. */
function ruleOf(t: RuleTable, p: number): number {
  let lo = 0;
  let hi = t.order.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = t.order[mid];
    if (p < t.begin[r]) hi = mid - 1;
    else if (p >= t.end[r]) lo = mid + 1;
    else return r;
  }
  return -1;
}

/**
 * The partial UTF-8 sequence pending in the grammar: code point bits so far, bytes missing (value
 * 0 when none is missing: llama.cpp leaves the last code point there, which means nothing).
 */
export function partialUtf8(grammar: number): { value: number; remain: number } {
  const g = view(grammar);
  const remain = g.getInt32(OFF.gPartialRemain);
  return { value: remain ? g.getUint32(OFF.gPartialValue) : 0, remain };
}

/** Whether a lazy grammar is still waiting for its trigger (then it constrains nothing). */
export function awaitingTrigger(grammar: number): boolean {
  return view(grammar).getUint8(OFF.gAwaiting) !== 0;
}

/**
 * The grammar's state as a string, `value,remain|stack|stack…` with each stack written as
 * `rule:element` pairs bottom to top, or undefined when it cannot be read safely (the rules moved,
 * a pointer falls outside them, a bound is exceeded).
 */
export function stateKey(grammar: number, t: RuleTable): string | undefined {
  const g = view(grammar);
  if (u64(g, OFF.gRules) !== t.rulesBegin) return undefined;
  const sb = u64(g, OFF.gStacks);
  const se = u64(g, OFF.gStacks + 8);
  const n = (se - sb) / VEC;
  if (!Number.isInteger(n) || n < 0 || n > MAX_STACKS || (n > 0 && !sb)) return undefined;
  const remain = g.getInt32(OFF.gPartialRemain);
  if (remain < 0 || remain > 3) return undefined;
  // The value bits matter only while bytes are missing (llama.cpp leaves the last code point
  // there otherwise).
  let key = remain ? `${g.getUint32(OFF.gPartialValue)},${remain}` : "0,0";
  if (n === 0) return key;
  const sv = view(sb);
  for (let i = 0; i < n; i++) {
    const b = u64(sv, i * VEC);
    const e = u64(sv, i * VEC + 8);
    const depth = (e - b) / 8;
    if (!Number.isInteger(depth) || depth < 0 || depth > MAX_DEPTH || (depth > 0 && !b)) {
      return undefined;
    }
    key += "|";
    if (depth === 0) continue;
    const ev = view(b);
    for (let k = 0; k < depth; k++) {
      const p = u64(ev, k * 8);
      const r = ruleOf(t, p);
      if (r < 0) return undefined;
      const off = p - t.begin[r];
      if (off % ELEM !== 0) return undefined;
      const idx = off / ELEM;
      const type = t.elems[r][idx * 2];
      // Stack entries point at elements still to match: never at the end of an alternate or
      // inside a character range.
      if (type === GRETYPE.END || type === GRETYPE.ALT) return undefined;
      if (type === GRETYPE.CHAR_RNG_UPPER || type === GRETYPE.CHAR_ALT) return undefined;
      key += k ? `;${r}:${idx}` : `${r}:${idx}`;
    }
  }
  return key;
}

function readStdString(v: Deno.UnsafePointerView, off: number): string | undefined {
  const data = u64(v, off);
  const len = u64(v, off + 8);
  if (!data || len > 1 << 24) return undefined;
  return new TextDecoder().decode(
    new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(
      Deno.UnsafePointer.create(BigInt(data))!,
      len,
    )),
  );
}

/** Everything `verifyGrammarLayout` needs from the engine, so this file stays policy-free. */
export type LayoutProbe = {
  llama: Llama;
  vocab: VocabPtr;
  /** A grammar sampler for `gbnf` (root `root`), lazy with the trigger pattern when given. */
  make(gbnf: string, lazyPattern?: string): SamplerPtr | undefined;
  /** A token whose piece is exactly this one byte, or -1. */
  byteToken(byte: number): number;
};

const PROBE_GBNF = 'root ::= "a" b | "c"\nb ::= [x-z] b | "d"\n';
// Rule 0 (root): CHAR a, RULE_REF 1, ALT, CHAR c, END. Rule 1 (b): CHAR x, RNG_UPPER z,
// RULE_REF 1, ALT, CHAR d, END. Symbol ids go in order of first appearance.
const PROBE_RULES = [
  [3, 97, 2, 1, 1, 0, 3, 99, 0, 0],
  [3, 120, 5, 122, 2, 1, 1, 0, 3, 100, 0, 0],
];

/**
 * Proves the pinned layout against the loaded library: a probe grammar's sampler must show the
 * vocab pointer, the GBNF text and root name where expected, the rules as llama.cpp encodes them,
 * and the stacks and partial UTF-8 state that accepting known tokens must produce (stacks
 * compared as sets). Returns a reason when anything differs, undefined when all matches.
 */
export function verifyGrammarLayout(p: LayoutProbe): string | undefined {
  const sym = p.llama.sym;
  const tok = (c: string) => p.byteToken(c.charCodeAt(0));
  const needed = ["a", "c", "x", "d"].map(tok);
  const lead = p.byteToken(0xc3); // first byte of a two-byte sequence
  if (needed.some((t) => t < 0) || lead < 0) return "the vocabulary lacks single-byte tokens";
  const s = p.make(PROBE_GBNF);
  if (!s) return "the probe grammar did not parse";
  const names: string[] = [];
  try {
    if (Deno.UnsafePointerView.getCString(sym.llama_sampler_name(s)!) !== "grammar") {
      return "the sampler is not a grammar sampler";
    }
    const ctx = u64(new Deno.UnsafePointerView(s), OFF.samplerCtx);
    if (!ctx) return "no sampler context";
    const cv = view(ctx);
    if (u64(cv, OFF.sgVocab) !== ptrValue(p.vocab)) return "sampler vocab pointer differs";
    if (readStdString(cv, OFF.sgStr) !== PROBE_GBNF) return "grammar text not where expected";
    if (readStdString(cv, OFF.sgRoot) !== "root") return "grammar root not where expected";
    const g = grammarAddress(s);
    if (!g) return "no grammar";
    const gv = view(g);
    if (u64(gv, OFF.gVocab) !== ptrValue(p.vocab)) return "grammar vocab pointer differs";
    if (gv.getUint8(OFF.gLazy) !== 0 || gv.getUint8(OFF.gAwaiting) !== 0) {
      return "lazy flags set on an eager grammar";
    }
    const t = ruleTable(g);
    if (!t) return "rules unreadable";
    if (t.elems.length !== PROBE_RULES.length) return `expected 2 rules, read ${t.elems.length}`;
    for (let r = 0; r < PROBE_RULES.length; r++) {
      if (t.elems[r].join() !== PROBE_RULES[r].join()) return `rule ${r} reads ${t.elems[r]}`;
    }
    const expect = (what: string, want: string[]): string | undefined => {
      const key = stateKey(g, t);
      if (key === undefined) return `state unreadable ${what}`;
      const [partial, ...stacks] = key.split("|");
      names.push(key);
      const got = `${partial}|${stacks.sort().join("|")}`;
      const w = `${want[0]}|${want.slice(1).sort().join("|")}`;
      return got === w ? undefined : `state ${what}: read ${got}, expected ${w}`;
    };
    const steps: [string, number | undefined, string[]][] = [
      ["at start", undefined, ["0,0", "0:0", "0:3"]],
      ["after a", needed[0], ["0,0", "1:0", "1:4"]],
      ["after x", needed[2], ["0,0", "1:0", "1:4"]],
      ["after d", needed[3], ["0,0", ""]],
    ];
    for (const [what, token, want] of steps) {
      if (token !== undefined) sym.llama_sampler_accept(s, token);
      const why = expect(what, want);
      if (why) return why;
    }
  } finally {
    sym.llama_sampler_free(s);
  }
  // The partial UTF-8 field: a lone lead byte leaves the stacks alone and records its bits.
  const u = p.make('root ::= [\\u00C0-\\u00FF] "z"\n');
  if (!u) return "the UTF-8 probe grammar did not parse";
  try {
    const g = grammarAddress(u);
    const before = view(g);
    if (before.getUint32(OFF.gPartialValue) !== 0 || before.getInt32(OFF.gPartialRemain) !== 0) {
      return "partial UTF-8 not zero at start";
    }
    sym.llama_sampler_accept(u, lead);
    const after = partialUtf8(g);
    if (after.value !== 3 || after.remain !== 1) {
      return `partial UTF-8 after 0xC3 reads ${after.value},${after.remain}`;
    }
    const t = ruleTable(g);
    if (!t || stateKey(g, t) !== "3,1|0:0") return "state with a partial UTF-8 sequence differs";
  } finally {
    sym.llama_sampler_free(u);
  }
  const lazy = p.make(PROBE_GBNF, "zzz(c)");
  if (!lazy) return "the lazy probe grammar did not parse";
  try {
    const gv = view(grammarAddress(lazy));
    if (gv.getUint8(OFF.gLazy) !== 1 || gv.getUint8(OFF.gAwaiting) !== 1) {
      return "lazy flags not where expected";
    }
  } finally {
    sym.llama_sampler_free(lazy);
  }
  return undefined;
}
