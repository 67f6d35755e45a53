/**
 * Regexes with a length bound, or several at once: the strings every regex matches in full whose
 * length lies within bounds, as rules of the product of the regexes' position automata (Glushkov)
 * and a length counter. What JSON Schema asks of a string with a pattern and `maxLength`, or a
 * `pattern` beside a `format`. The product can grow large (positions times lengths): past a budget
 * of states it throws, so the caller can tighten the bound or check it after generation.
 *
 * @example
 * ```ts
 * import { regexProduct } from "./regex_product.ts";
 * import { branchesToNode, parseRegex } from "./regex.ts";
 * import { cls, newGrammar, render } from "./gbnf.ts";
 * const g = newGrammar();
 * const url = branchesToNode(parseRegex("^https?://"), true);
 * render(g, regexProduct(g, [url], 0, 64, cls, "url")); // urls of at most 64 characters
 * ```
 * @module
 */
import { constraintError } from "./error.ts";
import {
  alt,
  type CharSet,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  intersectSets as intersect,
  NEVER,
  ref,
  reserve,
  ruleRef,
  seq,
} from "./gbnf.ts";
import type { RegexNode } from "./regex.ts";

/** Most automaton states × lengths a length-bounded pattern may expand to. */
const MAX_LENGTH_STATES = 20_000;

type Flat =
  | { t: "pos"; id: number }
  | { t: "seq"; items: Flat[] }
  | { t: "alt"; alts: Flat[] }
  | { t: "star"; node: Flat }
  | { t: "opt"; node: Flat };

type Glushkov = { nullable: boolean; first: Set<number>; last: Set<number> };

/**
 * The strings matched by `n` (in full) whose length is within `[minLen, maxLen]`, as rules: the
 * regex's position automaton (Glushkov) times a length counter. Throws a ConstraintError when
 * that product has more than `maxStates` states.
 */
export function regexWithLength(
  g: Grammar,
  n: RegexNode,
  minLen: number,
  maxLen: number,
  char: (set: CharSet) => Expr,
  base: string,
  maxStates = MAX_LENGTH_STATES,
): Expr {
  return regexProduct(g, [n], minLen, maxLen, char, base, maxStates);
}

type Automaton = {
  sets: CharSet[];
  follow: Map<number, Set<number>>;
  accepting: Set<number>;
};

/** The position automaton of `n`: position 0 is the start; each other position reads one set. */
function glushkovOf(n: RegexNode, tooBig: () => Error, maxStates: number): Automaton {
  const sets: CharSet[] = [[]];
  const unroll = (x: RegexNode): Flat => {
    if (sets.length > maxStates) throw tooBig();
    switch (x.t) {
      case "chars":
        sets.push(x.set);
        return { t: "pos", id: sets.length - 1 };
      case "seq":
        return { t: "seq", items: x.items.map(unroll) };
      case "alt":
        return { t: "alt", alts: x.alts.map(unroll) };
      case "rep": {
        const items: Flat[] = [];
        for (let i = 0; i < x.min; i++) items.push(unroll(x.node));
        if (x.max === Infinity) items.push({ t: "star", node: unroll(x.node) });
        else for (let i = x.min; i < x.max; i++) items.push({ t: "opt", node: unroll(x.node) });
        return { t: "seq", items };
      }
    }
  };
  const follow = new Map<number, Set<number>>();
  const link = (from: Set<number>, to: Set<number>) => {
    for (const p of from) {
      const f = follow.get(p) ?? new Set();
      for (const q of to) f.add(q);
      follow.set(p, f);
    }
  };
  const glushkov = (x: Flat): Glushkov => {
    switch (x.t) {
      case "pos":
        return { nullable: false, first: new Set([x.id]), last: new Set([x.id]) };
      case "seq":
        return x.items.map(glushkov).reduce((a, b) => {
          link(a.last, b.first);
          return {
            nullable: a.nullable && b.nullable,
            first: a.nullable ? new Set([...a.first, ...b.first]) : a.first,
            last: b.nullable ? new Set([...a.last, ...b.last]) : b.last,
          };
        }, { nullable: true, first: new Set<number>(), last: new Set<number>() });
      case "alt":
        return x.alts.map(glushkov).reduce((a, b) => ({
          nullable: a.nullable || b.nullable,
          first: new Set([...a.first, ...b.first]),
          last: new Set([...a.last, ...b.last]),
        }), { nullable: false, first: new Set<number>(), last: new Set<number>() });
      case "star": {
        const inner = glushkov(x.node);
        link(inner.last, inner.first);
        return { ...inner, nullable: true };
      }
      case "opt":
        return { ...glushkov(x.node), nullable: true };
    }
  };
  const top = glushkov(unroll(n));
  follow.set(0, top.first);
  const accepting = new Set(top.last);
  if (top.nullable) accepting.add(0);
  return { sets, follow, accepting };
}

/**
 * The strings every one of `nodes` matches (in full), of a length within `[minLen, maxLen]`, as
 * rules: the product of their position automata and a length counter (a pattern and a format,
 * say, or a pattern and its length bounds). Throws a ConstraintError when the product has more
 * than `maxStates` states.
 */
export function regexProduct(
  g: Grammar,
  nodes: RegexNode[],
  minLen: number,
  maxLen: number,
  char: (set: CharSet) => Expr,
  base: string,
  maxStates = MAX_LENGTH_STATES,
): Expr {
  const tooBig = () =>
    constraintError(
      "maxLength",
      nodes.length > 1
        ? `the intersection of ${nodes.length} patterns is too large to compile`
        : `pattern combined with minLength/maxLength ${minLen}..${maxLen} is too large to compile`,
    );
  const autos = nodes.map((n) => glushkovOf(n, tooBig, maxStates));
  // Counts saturate at minLen when there is no maximum, which keeps the product finite.
  const cap = maxLen === Infinity ? minLen : maxLen;
  const nextCount = (c: number) => Math.min(c + 1, cap);
  type State = { ps: number[]; c: number; key: string };
  const keyOf = (ps: number[], c: number) => `${ps.join(",")}|${c}`;
  const states = new Map<string, State>();
  // Successors of a state: one position per automaton whose sets meet, with what they share.
  const succCache = new Map<string, { ps: number[]; set: CharSet }[]>();
  const successors = (ps: number[]): { ps: number[]; set: CharSet }[] => {
    const k = ps.join(",");
    const have = succCache.get(k);
    if (have) return have;
    let combos: { ps: number[]; set: CharSet }[] = [{ ps: [], set: [[0, 0x10ffff]] }];
    ps.forEach((p, i) => {
      const a = autos[i];
      const next: { ps: number[]; set: CharSet }[] = [];
      for (const c of combos) {
        for (const q of a.follow.get(p) ?? []) {
          const set = intersect(c.set, a.sets[q]);
          if (set.length) next.push({ ps: [...c.ps, q], set });
        }
      }
      combos = next;
      if (combos.length > maxStates) throw tooBig();
    });
    succCache.set(k, combos);
    return combos;
  };
  const accepts = (s: State) => s.ps.every((p, i) => autos[i].accepting.has(p)) && s.c >= minLen;
  const start: State = { ps: nodes.map(() => 0), c: 0, key: keyOf(nodes.map(() => 0), 0) };
  const stack = [start];
  while (stack.length) {
    const s = stack.pop()!;
    if (states.has(s.key)) continue;
    states.set(s.key, s);
    if (states.size > maxStates) throw tooBig();
    if (s.c + 1 > maxLen) continue;
    for (const t of successors(s.ps)) {
      const c = nextCount(s.c);
      stack.push({ ps: t.ps, c, key: keyOf(t.ps, c) });
    }
  }
  // Keep only states from which an accepting state is reachable.
  const live = new Set<string>();
  for (let changed = true; changed;) {
    changed = false;
    for (const s of states.values()) {
      if (live.has(s.key)) continue;
      const ok = accepts(s) ||
        (s.c + 1 <= maxLen && successors(s.ps).some((t) => live.has(keyOf(t.ps, nextCount(s.c)))));
      if (ok) live.add(s.key), changed = true;
    }
  }
  if (!live.has(start.key)) return NEVER;
  const names = new Map<string, string>();
  const nameOf = (key: string) => {
    let name = names.get(key);
    if (!name) names.set(key, name = reserve(g, `${base}-${names.size}`));
    return name;
  };
  const charRule = new Map<string, Expr>();
  const charOf = (set: CharSet) => {
    const k = JSON.stringify(set);
    let e = charRule.get(k);
    if (!e) {
      const x = char(set);
      charRule.set(k, e = x.k === "lit" || x.k === "cls" ? x : ruleRef(g, `${base}-char`, x));
    }
    return e;
  };
  for (const s of states.values()) {
    if (!live.has(s.key)) continue;
    const alts: Expr[] = [];
    if (accepts(s)) alts.push(EMPTY);
    if (s.c + 1 <= maxLen) {
      for (const t of successors(s.ps)) {
        const key = keyOf(t.ps, nextCount(s.c));
        if (live.has(key)) alts.push(seq(charOf(t.set), ref(nameOf(key))));
      }
    }
    define(g, nameOf(s.key), alt(...alts));
  }
  return ref(nameOf(start.key));
}
