/**
 * The operator's prompt blocklist (`--video-blocklist FILE`): one term or phrase per line, `#`
 * starts a comment, blank lines are skipped. A prompt is blocked when it contains a term as a whole
 * word or phrase, case-insensitively (Unicode-aware; runs of whitespace inside a phrase match any
 * whitespace), so "gun" blocks "a gun fight" but not "begun". Only the prompt is checked, not the
 * negative prompt: a negative prompt names what must NOT appear, so "no blood" there is a request
 * for safer output, and blocking it would punish the careful caller.
 *
 * A blocked request completes at once like the real service's safety filter: `done: true`,
 * `raiMediaFilteredCount` and `raiMediaFilteredReasons`, no samples, nothing rendered.
 *
 * @example
 * ```ts
 * import { compileBlocklist, readBlocklist } from "./blocklist.ts";
 * const match = compileBlocklist(await readBlocklist("/etc/hearth/blocklist.txt"));
 * match("A Gun fight at dawn"); // "gun" when that line is in the file
 * ```
 * @module
 */

/** The reason string a blocked request reports (worded like the real service's filter). */
export const BLOCKED_REASON =
  "Veo could not generate videos because the prompt violates the usage guidelines of this " +
  "service. You will not be charged for blocked videos. Try rephrasing the prompt.";

/** Reads a blocklist file: one term per line, `#` comments, blank lines ignored. */
export async function readBlocklist(path: string): Promise<string[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`blocklist ${path}: ${(e as Error).message}`);
  }
  return parseBlocklist(text);
}

export function parseBlocklist(text: string): string[] {
  const terms: string[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const hash = raw.indexOf("#");
    const term = (hash >= 0 ? raw.slice(0, hash) : raw).trim().replace(/\s+/g, " ");
    if (term) terms.push(term);
  }
  return terms;
}

/** Returns a matcher that gives the first blocked term found in a text, or undefined. */
export function compileBlocklist(terms: readonly string[]): (text: string) => string | undefined {
  const clean = [...new Set(terms.map((t) => t.trim().replace(/\s+/g, " ")).filter(Boolean))]
    // Longest first, so a phrase wins over a word it contains.
    .sort((a, b) => b.length - a.length);
  if (clean.length === 0) return () => undefined;
  const alternatives = clean.map((t) => escapeRegExp(t).replace(/ /g, "\\s+"));
  const re = new RegExp(
    `(?<![\\p{L}\\p{N}_])(?:${alternatives.join("|")})(?![\\p{L}\\p{N}_])`,
    "iu",
  );
  return (text) => {
    const m = re.exec(text);
    if (!m) return undefined;
    const found = m[0].replace(/\s+/g, " ").toLowerCase();
    return clean.find((t) => t.toLowerCase() === found) ?? m[0];
  };
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\\/]/g, "\\$&");
}
