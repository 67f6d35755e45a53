/**
 * Random texts of a GBNF grammar, drawn by a seeded walk over its rules: the way a model at
 * temperature 1 writes whatever a grammar forces, but one that finishes. Random-weight models
 * almost never close an unbounded string (its end is one token of thousands allowed), so tests
 * that must see every tool of a corpus called in every family draw the call from the grammar
 * itself; each text is then checked against llama.cpp's own grammar matcher, so the walk cannot
 * stray from what the engine would allow.
 *
 * The walk favours ending: each choice is uniform at first (alternatives, repetition counts,
 * characters), and once the text is long it takes the shortest way out (alternatives and
 * repetitions by the fewest characters they need). Characters are drawn from printable ASCII
 * where a class allows it, else from anywhere in the class.
 *
 * @example
 * ```ts
 * import { gbnfWalker } from "./gbnf_walk.ts";
 * const w = gbnfWalker('root ::= "a" [0-9]{1,3} ("x" | "yz")?\n');
 * w.sample(1); // e.g. "a07yz"
 * ```
 * @module
 */

type Node =
  | { k: "lit"; s: string }
  | { k: "cls"; ranges: [number, number][]; neg: boolean }
  | { k: "ref"; name: string }
  | { k: "seq"; xs: Node[] }
  | { k: "alt"; xs: Node[] }
  | { k: "rep"; x: Node; min: number; max: number };

const MAX_CP = 0x10ffff;

function parseGbnf(text: string): Map<string, Node> {
  const rules = new Map<string, Node>();
  let i = 0;
  const ws = (nl: boolean) => {
    for (;;) {
      const c = text[i];
      if (c === "#") { while (i < text.length && text[i] !== "\n") i++; }
      else if (c === " " || c === "\t" || c === "\r" || (nl && c === "\n")) i++;
      else return;
    }
  };
  const name = () => {
    const m = /^[A-Za-z0-9-]+/.exec(text.slice(i));
    if (!m) throw new Error(`gbnf: a name expected at ${i}: ${text.slice(i, i + 40)}`);
    i += m[0].length;
    return m[0];
  };
  const escape = (): number => {
    const c = text[i++];
    const hex = (n: number) => {
      const v = parseInt(text.slice(i, i + n), 16);
      i += n;
      return v;
    };
    switch (c) {
      case "n":
        return 10;
      case "r":
        return 13;
      case "t":
        return 9;
      case "x":
        return hex(2);
      case "u":
        return hex(4);
      case "U":
        return hex(8);
      default:
        return c.codePointAt(0)!;
    }
  };
  const char = (): number => {
    if (text[i] === "\\") {
      i++;
      return escape();
    }
    const c = text.codePointAt(i)!;
    i += c > 0xffff ? 2 : 1;
    return c;
  };
  const atom = (): Node => {
    const c = text[i];
    if (c === '"') {
      i++;
      let s = "";
      while (text[i] !== '"') s += String.fromCodePoint(char());
      i++;
      return { k: "lit", s };
    }
    if (c === "[") {
      i++;
      const neg = text[i] === "^";
      if (neg) i++;
      const ranges: [number, number][] = [];
      while (text[i] !== "]") {
        const a = char();
        if (text[i] === "-" && text[i + 1] !== "]") {
          i++;
          ranges.push([a, char()]);
        } else ranges.push([a, a]);
      }
      i++;
      return { k: "cls", ranges, neg };
    }
    if (c === ".") {
      i++;
      return { k: "cls", ranges: [], neg: true };
    }
    if (c === "(") {
      i++;
      ws(true);
      const e = alternation();
      ws(true);
      if (text[i] !== ")") throw new Error(`gbnf: ) expected at ${i}`);
      i++;
      return e;
    }
    return { k: "ref", name: name() };
  };
  const postfix = (): Node => {
    let x = atom();
    for (;;) {
      const c = text[i];
      if (c === "?") x = { k: "rep", x, min: 0, max: 1 };
      else if (c === "*") x = { k: "rep", x, min: 0, max: Infinity };
      else if (c === "+") x = { k: "rep", x, min: 1, max: Infinity };
      else if (c === "{") {
        const m = /^\{(\d+)(,(\d*))?\}/.exec(text.slice(i))!;
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
        x = { k: "rep", x, min, max };
        i += m[0].length - 1;
      } else return x;
      i++;
    }
  };
  const sequence = (): Node => {
    const xs: Node[] = [];
    for (;;) {
      ws(false);
      const c = text[i];
      if (c === undefined || c === "|" || c === ")" || c === "\n") break;
      xs.push(postfix());
    }
    return xs.length === 1 ? xs[0] : { k: "seq", xs };
  };
  function alternation(): Node {
    const xs = [sequence()];
    for (;;) {
      ws(false);
      if (text[i] !== "|") break;
      i++;
      ws(true);
      xs.push(sequence());
    }
    return xs.length === 1 ? xs[0] : { k: "alt", xs };
  }
  for (;;) {
    ws(true);
    if (i >= text.length) break;
    const n = name();
    ws(false);
    if (!text.startsWith("::=", i)) throw new Error(`gbnf: ::= expected after ${n}`);
    i += 3;
    ws(true);
    rules.set(n, alternation());
  }
  return rules;
}

/** Fewest characters each rule needs (a fixpoint over the grammar). */
function minLengths(rules: Map<string, Node>): Map<string, number> {
  const len = new Map<string, number>([...rules.keys()].map((k) => [k, Infinity]));
  const of = (n: Node): number => {
    switch (n.k) {
      case "lit":
        return [...n.s].length;
      case "cls":
        return 1;
      case "ref":
        return len.get(n.name) ?? Infinity;
      case "seq":
        return n.xs.reduce((a, x) => a + of(x), 0);
      case "alt":
        return Math.min(...n.xs.map(of));
      case "rep":
        return n.min === 0 ? 0 : n.min * of(n.x);
    }
  };
  for (let changed = true; changed;) {
    changed = false;
    for (const [k, n] of rules) {
      const v = of(n);
      if (v < len.get(k)!) len.set(k, v), changed = true;
    }
  }
  return len;
}

function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type GbnfWalker = {
  /** A random text of the grammar (from `root`), the same for the same seed. */
  sample(seed: number, opts?: { softLength?: number }): string;
};

export function gbnfWalker(gbnf: string): GbnfWalker {
  const rules = parseGbnf(gbnf);
  const lens = minLengths(rules);
  const minOf = (n: Node): number => {
    switch (n.k) {
      case "lit":
        return [...n.s].length;
      case "cls":
        return 1;
      case "ref":
        return lens.get(n.name)!;
      case "seq":
        return n.xs.reduce((a, x) => a + minOf(x), 0);
      case "alt":
        return Math.min(...n.xs.map(minOf));
      case "rep":
        return n.min === 0 ? 0 : n.min * minOf(n.x);
    }
  };
  return {
    sample(seed, opts = {}) {
      const soft = opts.softLength ?? 160;
      const r = rng(seed);
      let out = "";
      let steps = 0;
      const closing = () => [...out].length > soft || steps > 20_000;
      const pickChar = (n: Extract<Node, { k: "cls" }>): string => {
        const inSet = (c: number) =>
          n.ranges.some(([a, b]) => a <= c && c <= b) !== n.neg && (c < 0xd800 || c > 0xdfff);
        // Mostly printable ASCII (what tool arguments hold), now and then a newline or anything.
        const pool: number[] = [];
        for (let c = 0x20; c < 0x7f; c++) if (inSet(c)) pool.push(c);
        if (pool.length && r() < 0.97) {
          return String.fromCodePoint(pool[Math.floor(r() * pool.length)]);
        }
        for (let tries = 0; tries < 64; tries++) {
          const c = r() < 0.5 ? Math.floor(r() * 0x3000) : Math.floor(r() * MAX_CP);
          if (inSet(c)) return String.fromCodePoint(c);
        }
        if (pool.length) return String.fromCodePoint(pool[0]);
        const [a] = n.neg ? [[0, 0]] : n.ranges;
        return String.fromCodePoint(a[0]);
      };
      const walk = (n: Node): void => {
        steps++;
        switch (n.k) {
          case "lit":
            out += n.s;
            return;
          case "cls":
            out += pickChar(n);
            return;
          case "ref":
            return walk(rules.get(n.name)!);
          case "seq":
            for (const x of n.xs) walk(x);
            return;
          case "alt": {
            const finite = n.xs.filter((x) => minOf(x) < Infinity);
            if (closing()) {
              const best = Math.min(...finite.map(minOf));
              const shortest = finite.filter((x) => minOf(x) === best);
              return walk(shortest[Math.floor(r() * shortest.length)]);
            }
            return walk(finite[Math.floor(r() * finite.length)]);
          }
          case "rep": {
            let count = n.min;
            // Geometric extras, mean about 2, none once the text is long.
            while (count < n.max && !closing() && r() < 0.6) count++;
            for (let k = 0; k < count; k++) walk(n.x);
            return;
          }
        }
      };
      walk(rules.get("root")!);
      return out;
    },
  };
}
