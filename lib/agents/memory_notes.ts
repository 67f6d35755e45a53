/**
 * What a memory note (memory.ts) may be: its name (`[A-Za-z0-9][A-Za-z0-9._-]{0,99}`, a trailing
 * `.md` from the client stripped, no `..`, not ending in `.` or `.md`, not `search`), its text (at
 * most MAX_NOTE_BYTES of UTF-8 without NUL), how many there may be, and `MemoryError`, the refusal
 * the HTTP layer turns into `{"error", "message"}`. The same rules decide which files of the notes
 * directory are notes at all.
 *
 * @example
 * ```ts
 * import { MemoryError, noteName } from "./memory_notes.ts";
 * noteName("deploy.md"); // "deploy"
 * try {
 *   noteName("../etc/passwd");
 * } catch (err) {
 *   if (err instanceof MemoryError) console.log(err.status); // 400
 * }
 * ```
 * @module
 */

/** Largest note, in bytes of UTF-8. */
export const MAX_NOTE_BYTES = 64 * 1024;
/** Most notes one memory holds. */
export const MAX_NOTES = 1000;

export type NoteInfo = { name: string; bytes: number; updatedAt: string };

/** A note file's size and modification time (ms), as the index records it. */
export type FileStat = { bytes: number; mtime: number };

export type MemoryErrorCode = "BAD_REQUEST" | "NOT_FOUND" | "TOO_LARGE" | "LIMIT";

/** A refusal the HTTP layer turns into `{"error": code, "message"}` with `status`. */
export class MemoryError extends Error {
  constructor(
    readonly code: MemoryErrorCode,
    readonly status: 400 | 404 | 413 | 409,
    message: string,
  ) {
    super(message);
    this.name = "MemoryError";
  }
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const RESERVED = new Set(["search"]);
export const NAME_RULE =
  "a note name is 1-100 characters of letters, digits, '.', '_' and '-', starting with a letter or digit";

export const bad = (message: string) => new MemoryError("BAD_REQUEST", 400, message);
export const notFound = (name: string) =>
  new MemoryError("NOT_FOUND", 404, `no note named ${name}`);

/** Checks a client's note name and returns it without a trailing `.md`; throws `BAD_REQUEST`. */
export function noteName(input: string): string {
  if (typeof input !== "string") throw bad("note name must be a string");
  const name = input.endsWith(".md") ? input.slice(0, -3) : input;
  if (name === "") throw bad(`note name is empty: ${NAME_RULE}`);
  if (/[/\\]/.test(name)) throw bad(`note name ${JSON.stringify(input)} contains / or \\`);
  if (input.includes("..")) throw bad(`note name ${JSON.stringify(input)} contains ".."`);
  // Its file would be "NAME..md".
  if (name.endsWith(".")) throw bad(`note name ${JSON.stringify(input)} ends in "."`);
  if (!NAME_RE.test(name)) throw bad(`note name ${JSON.stringify(input)} is invalid: ${NAME_RULE}`);
  // Otherwise "a.md.md" and "a.md" would both reach the note "a".
  if (name.endsWith(".md")) throw bad(`note name ${JSON.stringify(input)} ends in .md twice`);
  if (RESERVED.has(name)) {
    throw bad(`note name ${JSON.stringify(name)} is reserved (GET /api/memory/search is search)`);
  }
  return name;
}

/** The note name of a directory entry, or undefined when the file is not a valid note name. */
export function fileNote(file: string): string | undefined {
  if (!file.endsWith(".md")) return undefined;
  try {
    return noteName(file);
  } catch {
    return undefined;
  }
}

const encoder = new TextEncoder();
export const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Checks a client's note text; throws `BAD_REQUEST` or `TOO_LARGE`. */
export function checkText(text: string) {
  if (typeof text !== "string") throw bad("text must be a string");
  const bytes = encoder.encode(text).length;
  if (bytes > MAX_NOTE_BYTES) {
    throw new MemoryError(
      "TOO_LARGE",
      413,
      `text is ${bytes} bytes of UTF-8; a note holds at most ${MAX_NOTE_BYTES}`,
    );
  }
  if (text.includes("\0")) throw bad("text must not contain NUL characters");
}

/** Why a file's bytes cannot be a note, or undefined when they can. */
export function badContent(data: Uint8Array): string | undefined {
  if (data.length > MAX_NOTE_BYTES) {
    return `${data.length} bytes, over the ${MAX_NOTE_BYTES}-byte limit`;
  }
  if (data.includes(0)) return "contains NUL bytes";
  try {
    strictUtf8.decode(data);
  } catch {
    return "is not valid UTF-8";
  }
  return undefined;
}

export const noteInfo = (name: string, s: FileStat): NoteInfo => ({
  name,
  bytes: s.bytes,
  updatedAt: new Date(s.mtime).toISOString(),
});

export function lstatOrUndefined(path: string): Deno.FileInfo | undefined {
  try {
    return Deno.lstatSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}
