/**
 * Agent memory (docs/ARCHITECTURE.md, "Goals, orchestration, memory"): markdown notes kept as `<dir>/NAME.md`, searchable through
 * a SQLite FTS5 index at `<dir>/.index.db`. The files are the source of truth: people edit them
 * with any editor, back them up, put them under git. The index is a cache that can be deleted at
 * any time; opening the memory reconciles it with the directory (by mtime and size), and a
 * debounced `Deno.watchFs` keeps it current while the server runs. Every change is announced on
 * the bus as `memory_status {reason, files, indexed, name?}` (topic `memory`).
 *
 * Rules worth knowing:
 * - A name is `[A-Za-z0-9][A-Za-z0-9._-]{0,99}` (a trailing `.md` from the client is stripped),
 *   without `..`, not ending in `.` or `.md` itself, and not `search` (its route would shadow the
 *   note).
 * - A note holds at most 64 KiB of UTF-8 without NUL; there are at most 1000 notes. Files in the
 *   directory that break these rules are left alone and not indexed (logged once each).
 * - Hidden files (a leading dot) are never notes: the index and the temporary files of atomic
 *   writes live beside the notes under such names.
 * - Searches never hand the user's text to FTS5's query language: it is cut into words, each
 *   quoted and OR-ed, so no input is a syntax error.
 * - Everything is synchronous on purpose: a reconcile never interleaves with a write, and notes
 *   are small.
 *
 * The parts: the rules of a note (memory_notes.ts), the words of a search (memory_text.ts), the
 * index (memory_index.ts), and how it follows the directory (memory_sync.ts); this module holds the
 * operations.
 *
 * @example
 * ```ts
 * import { createMemory } from "./memory.ts";
 * const memory = await createMemory({ dir: "/var/lib/hearth/agents/memory", bus });
 * memory.put("deploy", "Run `make deploy` from the repo root; never on Fridays.");
 * console.log(memory.search("how do I deploy")[0].name); // "deploy"
 * const prompt = memory.relevant("deploy the site") + "deploy the site";
 * await memory.close();
 * ```
 * @module
 */
import { join } from "node:path";
import type { EventBus } from "../events/bus.ts";
import { openNoteIndex } from "./memory_index.ts";
import {
  bad,
  badContent,
  checkText,
  lstatOrUndefined,
  MAX_NOTES,
  MemoryError,
  type NoteInfo,
  noteInfo,
  noteName,
  notFound,
  strictUtf8,
} from "./memory_notes.ts";
import { type NoteFiles, reconcile, watchDir } from "./memory_sync.ts";
import { queryWords, RELEVANT_HITS, relevantBlock, snippetOf } from "./memory_text.ts";

export {
  MAX_NOTE_BYTES,
  MAX_NOTES,
  MemoryError,
  type MemoryErrorCode,
  type NoteInfo,
  noteName,
} from "./memory_notes.ts";
export { WATCH_DEBOUNCE_MS } from "./memory_sync.ts";

export const MAX_SEARCH_LIMIT = 50;
export const DEFAULT_SEARCH_LIMIT = 10;
/** Default size of the block `relevant` returns, and the least it will fill. */
export const DEFAULT_RELEVANT_CHARS = 4000;
export const MIN_RELEVANT_CHARS = 200;

export type Note = NoteInfo & { text: string };
/**
 * A search result. `score` is larger for better matches: its integer part counts the query's words
 * found in the note's name, its fraction is bm25's verdict on the whole note.
 */
export type SearchHit = NoteInfo & { snippet: string; score: number };

export type Memory = {
  /** Indexed notes, sorted by name. */
  list(): NoteInfo[];
  /** Reads the note's file; throws MemoryError `NOT_FOUND`. */
  get(name: string): Note;
  /** Writes the note atomically and indexes it; `created` is false when it replaced one. */
  put(name: string, text: string): { note: NoteInfo; created: boolean };
  /** Deletes the note's file and its index entry; throws MemoryError `NOT_FOUND`. */
  remove(name: string): void;
  /** Notes matching any word of `q`, best first; `limit` 1..50, default 10. */
  search(q: string, limit?: number): SearchHit[];
  /**
   * The block handed to an agent before its prompt: the most relevant notes for `text`, at most
   * `maxChars` chars in all (default 4000), "" when nothing is relevant.
   */
  relevant(text: string, maxChars?: number): string;
  /** Stops the watcher and closes the index. */
  close(): Promise<void>;
};

export type MemoryOptions = {
  /** The notes directory (created if missing). */
  dir: string;
  bus: EventBus;
  /** Clock (ms since the epoch) for the modification time of notes written through `put`. */
  now?: () => number;
  /** Watch the directory for edits made outside the server; default true. */
  watch?: boolean;
};

const encoder = new TextEncoder();

/** Writes `data` beside `path`, then renames: a reader (or a crash) sees the old or the new text. */
function writeAtomic(path: string, tmp: string, data: Uint8Array, mtime: Date) {
  try {
    const f = Deno.openSync(tmp, { write: true, createNew: true });
    try {
      let off = 0;
      while (off < data.length) off += f.writeSync(data.subarray(off));
      f.syncSync();
    } finally {
      f.close();
    }
    Deno.utimeSync(tmp, mtime, mtime);
    Deno.renameSync(tmp, path);
  } catch (err) {
    try {
      Deno.removeSync(tmp);
    } catch { /* never created, or already renamed */ }
    throw err;
  }
}

/** Opens (creating if needed) the memory in `opts.dir`, reconciles the index and starts watching. */
export async function createMemory(opts: MemoryOptions): Promise<Memory> {
  const { dir, bus } = opts;
  const now = opts.now ?? Date.now;
  await Deno.mkdir(dir, { recursive: true });
  const index = openNoteIndex(join(dir, ".index.db"));
  const notes: NoteFiles = { dir, index, known: new Map(), warned: new Map() };
  const { known } = notes;

  const pathOf = (name: string) => join(dir, `${name}.md`);
  const publish = (reason: string, name?: string) =>
    bus.publish("memory", "memory_status", {
      reason,
      files: known.size,
      indexed: index.count(),
      ...(name !== undefined ? { name } : {}),
    });

  try {
    reconcile(notes);
  } catch (err) {
    index.close();
    throw err;
  }
  publish("startup");

  let closed = false;
  const open = () => {
    if (closed) throw new Error("memory is closed");
  };

  // Edits made outside the server: one reconcile once the directory settles.
  let watch: { close(): Promise<void> } | undefined;
  if (opts.watch ?? true) {
    try {
      watch = watchDir(dir, () => {
        try {
          const files = known.size;
          const changed = reconcile(notes);
          // A file past the note limit changes `files` without touching the index.
          if (changed.length || known.size !== files) {
            publish("external", changed.length === 1 ? changed[0] : undefined);
          }
        } catch (err) {
          console.error(`hearth: memory: reindexing ${dir} failed:`, err);
        }
      });
    } catch (err) {
      index.close();
      throw err;
    }
  }

  return {
    list() {
      open();
      return index.list().map((n) => noteInfo(n.name, n.stat));
    },

    get(input) {
      open();
      const name = noteName(input);
      const path = pathOf(name);
      const st = lstatOrUndefined(path);
      if (!st) throw notFound(name);
      if (!st.isFile) throw new MemoryError("NOT_FOUND", 404, `${name}.md is not a regular file`);
      const data = Deno.readFileSync(path);
      const why = badContent(data);
      if (why) throw new MemoryError("NOT_FOUND", 404, `${name}.md is not a usable note: ${why}`);
      return {
        ...noteInfo(name, { bytes: data.length, mtime: st.mtime?.getTime() ?? 0 }),
        text: strictUtf8.decode(data),
      };
    },

    put(input, text) {
      open();
      const name = noteName(input);
      checkText(text);
      const path = pathOf(name);
      const before = lstatOrUndefined(path);
      if (before?.isDirectory) throw bad(`a directory named ${name}.md is in the way`);
      const created = before === undefined;
      if (created && known.size >= MAX_NOTES && !known.has(name)) {
        throw new MemoryError(
          "LIMIT",
          409,
          `memory holds at most ${MAX_NOTES} notes; delete one before adding ${name}`,
        );
      }
      const data = encoder.encode(text);
      const mtime = new Date(now());
      writeAtomic(path, join(dir, `.${name}.md.${crypto.randomUUID()}.tmp`), data, mtime);
      const st = Deno.lstatSync(path);
      const s = { bytes: data.length, mtime: st.mtime?.getTime() ?? mtime.getTime() };
      index.tx(() => index.upsert(name, s, text));
      known.set(name, s);
      notes.warned.delete(`${name}.md`);
      publish("saved", name);
      return { note: noteInfo(name, s), created };
    },

    remove(input) {
      open();
      const name = noteName(input);
      const st = lstatOrUndefined(pathOf(name));
      const isFile = st !== undefined && !st.isDirectory;
      const wasIndexed = index.tx(() => index.drop(name));
      if (!isFile && !wasIndexed) throw notFound(name);
      if (isFile) {
        try {
          Deno.removeSync(pathOf(name));
        } catch (err) {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
        }
      }
      known.delete(name);
      publish("deleted", name);
    },

    search(q, limit = DEFAULT_SEARCH_LIMIT) {
      open();
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_SEARCH_LIMIT) {
        throw bad(`limit must be an integer from 1 to ${MAX_SEARCH_LIMIT}`);
      }
      if (typeof q !== "string") throw bad("q must be a string");
      const words = queryWords(q, false);
      if (!words.length) return [];
      return index.ranked(words, limit).map((r) => ({
        ...noteInfo(r.name, r.stat),
        snippet: snippetOf(index.body(r.id), words),
        score: r.score,
      }));
    },

    relevant(text, maxChars = DEFAULT_RELEVANT_CHARS) {
      open();
      if (typeof text !== "string" || !(maxChars >= MIN_RELEVANT_CHARS)) return "";
      const words = queryWords(text, true);
      if (!words.length) return "";
      const hits = index.ranked(words, RELEVANT_HITS);
      return relevantBlock(
        hits.map((h) => ({ name: h.name, body: () => index.body(h.id) })),
        maxChars,
      );
    },

    async close() {
      if (closed) return;
      closed = true;
      await watch?.close();
      index.close();
    },
  };
}
