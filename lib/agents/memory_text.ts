/**
 * The words of memory search (memory.ts): the user's text cut into words (never handed to FTS5's
 * query language, so no input is a syntax error), the FTS5 query made of them, the snippet shown
 * around a note's first match, and the `<memory>` block of relevant notes handed to an agent before
 * its prompt.
 *
 * @example
 * ```ts
 * import { matchQuery, queryWords, snippetOf } from "./memory_text.ts";
 * const words = queryWords("how do I deploy the site?", true); // ["deploy", "site"]
 * matchQuery(words); // '"deploy" OR "site"'
 * snippetOf("Run make deploy from the repo root.", words); // "Run make deploy from the repo root."
 * ```
 * @module
 */

// Words too common to say what a prompt is about; `relevant` drops them (with words under 3 chars).
const STOPWORDS = new Set(
  `about above after again against all also and any are because been before being below between
  both but can could did does doing down during each few for from further had has have having her
  here hers him his how into its itself just let like make more most much must not now off once
  only other our ours out over own please same she should some such than that the their them then
  there these they this those through too under until use very was way were what when where which
  while who whom why will with would you your yours`.split(/\s+/),
);

/** Letters and digits, with the combining marks that belong to them. */
const WORD_RE = /[\p{L}\p{N}][\p{L}\p{N}\p{M}]*/gu;
/** At most this many distinct words of a query reach FTS5: a long prompt stays a cheap query. */
const MAX_QUERY_WORDS = 200;

/** The distinct lowercased words of `text` a query looks for (for a prompt: not the filler). */
export function queryWords(text: string, forPrompt: boolean): string[] {
  const words = new Set<string>();
  for (const m of text.matchAll(WORD_RE)) {
    const w = m[0].toLowerCase();
    if (forPrompt && ([...w].length < 3 || STOPWORDS.has(w))) continue;
    words.add(w);
    if (words.size >= MAX_QUERY_WORDS) break;
  }
  return [...words];
}

/** The FTS5 query for `words`: each quoted (no FTS5 syntax survives), OR-ed. */
export const matchQuery = (words: string[]) => words.map((w) => `"${w}"`).join(" OR ");

/** Words of the snippet around the first match. */
const SNIPPET_WORDS = 16;
/** Words shown before the first match. */
const SNIPPET_LEAD = 4;

/**
 * Up to SNIPPET_WORDS words of `body` around the first word that looks like a query word (its
 * first letters, a cheap stand-in for the index's stemming). FTS5's own snippet() costs time
 * quadratic in the matches of a note, which one note of a repeated word turns into seconds.
 */
export function snippetOf(body: string, words: string[]): string {
  const prefixes = words.map((w) => w.slice(0, Math.max(3, Math.ceil(w.length * 0.75))));
  let at = 0;
  for (const m of body.matchAll(WORD_RE)) {
    const w = m[0].toLowerCase();
    if (prefixes.some((p) => w.startsWith(p))) {
      at = m.index;
      break;
    }
  }
  const lead = [...body.slice(Math.max(0, at - 200), at).matchAll(/\S+\s*$|\S+\s+/g)]
    .slice(-SNIPPET_LEAD).map((m) => m[0]).join("");
  const start = at - lead.length;
  const re = /\S+/g;
  re.lastIndex = start;
  let end = start;
  for (let n = 0; n < SNIPPET_WORDS; n++) {
    const m = re.exec(body);
    if (!m) break;
    end = m.index + m[0].length;
  }
  const text = body.slice(start, end).replace(/\s+/g, " ").trim();
  return (start > 0 ? "…" : "") + text + (body.slice(end).trim() ? "…" : "");
}

/** Cuts `s` to at most `n` UTF-16 units ending in "…", at a word break when one is near. */
function cut(s: string, n: number): string {
  if (s.length <= n) return s;
  let end = n - 1;
  if (end > 0 && /[\uD800-\uDBFF]/.test(s[end - 1])) end--; // never split a surrogate pair
  const space = s.lastIndexOf(" ", end);
  const nl = s.lastIndexOf("\n", end);
  const brk = Math.max(space, nl);
  if (brk > end - 40 && brk > 0) end = brk;
  return s.slice(0, end).trimEnd() + "…";
}

const RELEVANT_HEAD =
  "<memory>\nNotes saved in Hearth's memory that may help (most relevant first):\n\n";
const RELEVANT_TAIL = "\n</memory>\n\n";
/** Fewer body chars than this is not worth handing to an agent. */
const MIN_RELEVANT_BODY = 40;
/** Most notes `relevant` considers. */
export const RELEVANT_HITS = 8;

/**
 * The block of `notes` (best first) within `maxChars` in all: whole notes while they fit, then the
 * start of the next one when enough of it fits; "" when none does. A body is read only when reached.
 */
export function relevantBlock(
  notes: Iterable<{ name: string; body: () => string }>,
  maxChars: number,
): string {
  let budget = Math.floor(maxChars) - RELEVANT_HEAD.length - RELEVANT_TAIL.length;
  const sections: string[] = [];
  for (const note of notes) {
    const body = note.body().trim();
    const head = `${sections.length ? "\n\n" : ""}## ${note.name}\n`;
    const room = budget - head.length;
    if (body.length <= room) {
      sections.push(head + body);
      budget -= head.length + body.length;
      continue;
    }
    if (room >= MIN_RELEVANT_BODY) sections.push(head + cut(body, room));
    break;
  }
  if (!sections.length) return "";
  return RELEVANT_HEAD + sections.join("") + RELEVANT_TAIL;
}
