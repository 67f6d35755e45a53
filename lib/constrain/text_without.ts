/**
 * Text that never contains a given terminator (the `</parameter>` that ends a raw tool argument,
 * Gemma's `<|"|>` string quote), and literal alternations shared by prefix (a trie), the two
 * grammar shapes that plain alternation and character classes cannot express compactly.
 *
 * @example
 * ```ts
 * import { literalTrie, textWithout } from "./text_without.ts";
 * import { newGrammar, render, seq, lit } from "./gbnf.ts";
 * const g = newGrammar();
 * render(g, seq(textWithout(g, "</v>", "value"), lit("</v>"))); // anything, then the first </v>
 * render(newGrammar(), literalTrie(["alpha", "alpine", "beta"])); // "al" ("pha" | "pine") | "beta"
 * ```
 * @module
 */
import {
  alt,
  charSet,
  cls,
  complementSet,
  define,
  EMPTY,
  type Expr,
  type Grammar,
  lit,
  ref,
  reserve,
  ruleRef,
  seq,
} from "./gbnf.ts";

/** The state of a KMP matcher of `stop` after reading `text` from state `from`. */
export function stopState(stop: string, text: string, from = 0): number {
  const chars = [...stop];
  let state = from;
  for (const c of text) {
    const seen = chars.slice(0, state).join("") + c;
    state = 0;
    for (let k = Math.min([...seen].length, chars.length); k > 0; k--) {
      if (seen.endsWith(chars.slice(0, k).join(""))) {
        state = k;
        break;
      }
    }
  }
  return state;
}

/**
 * Any text without `stop` inside (a right-linear rule per matched prefix of `stop`, KMP style),
 * so a model cannot write the terminator inside a value. `after`: text just before it that counts
 * too (the newline after `<parameter=P>`, so a value cannot start with `</parameter>`).
 */
export function textWithout(g: Grammar, stop: string, base: string, after = ""): Expr {
  const chars = [...stop];
  const names = chars.map((_, i) => reserve(g, `${base}-${i}`));
  const alphabet = [...new Set(chars)];
  chars.forEach((_, i) => {
    const byTarget = new Map<number, string[]>();
    for (const c of alphabet) {
      const j = stopState(stop, c, i);
      byTarget.set(j, [...(byTarget.get(j) ?? []), c]);
    }
    const branches: Expr[] = [EMPTY];
    const other = cls(complementSet(charSet(alphabet.join(""))));
    branches.push(seq(other, ref(names[0])));
    for (const [j, cs] of byTarget) {
      if (j === chars.length) continue; // the whole terminator: not allowed inside
      branches.push(seq(cls(charSet(cs.join(""))), ref(names[j])));
    }
    define(g, names[i], alt(...branches));
  });
  return ref(names[stopState(stop, after)]);
}

/**
 * The characters a length- or pattern-constrained value may not hold so that `stop` can never
 * appear in it (nor complete what `after` began): the terminator's first character, and the one
 * that would continue a match already started. A subset of what is safe, never more.
 */
export function stopStarts(stop: string, after = ""): string {
  const chars = [...stop];
  const s = stopState(stop, after);
  return [...new Set([chars[0], chars[s]])].join("");
}

type TrieNode = { end: boolean; kids: Map<string, TrieNode> };

/**
 * Exactly one of `texts`, with common prefixes written once: a long enum starts with a few parse
 * stacks instead of one per value. Each level of 8 characters becomes a named rule so nesting
 * stays shallow.
 */
export function literalTrie(texts: string[], g?: Grammar, base = "enum"): Expr {
  const root: TrieNode = { end: false, kids: new Map() };
  for (const t of new Set(texts)) {
    let n = root;
    for (const ch of t) {
      let k = n.kids.get(ch);
      if (!k) n.kids.set(ch, k = { end: false, kids: new Map() });
      n = k;
    }
    n.end = true;
  }
  const walk = (n: TrieNode, depth: number): Expr => {
    // A chain with one way on is one literal.
    let text = "";
    while (!n.end && n.kids.size === 1) {
      const [[ch, k]] = n.kids;
      text += ch;
      n = k;
    }
    const branches = [...n.kids].map(([ch, k]) => seq(lit(ch), walk(k, depth + 1)));
    const rest = alt(n.end ? EMPTY : alt(), ...branches);
    const body = seq(lit(text), rest);
    return g && depth > 0 && depth % 8 === 0 && n.kids.size > 1 ? ruleRef(g, base, body) : body;
  };
  return walk(root, 0);
}
