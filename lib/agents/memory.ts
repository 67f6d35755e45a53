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
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import type { EventBus } from "../events/bus.ts";
import { type Row, sqlHelpers } from "./sqlite.ts";

/** Largest note, in bytes of UTF-8. */
export const MAX_NOTE_BYTES = 64 * 1024;
/** Most notes one memory holds. */
export const MAX_NOTES = 1000;
export const MAX_SEARCH_LIMIT = 50;
export const DEFAULT_SEARCH_LIMIT = 10;
/** Default size of the block `relevant` returns, and the least it will fill. */
export const DEFAULT_RELEVANT_CHARS = 4000;
export const MIN_RELEVANT_CHARS = 200;
/** How long the watcher waits for the directory to settle before reindexing. */
export const WATCH_DEBOUNCE_MS = 200;

export type NoteInfo = { name: string; bytes: number; updatedAt: string };
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

export type MemoryOptions = {
  /** The notes directory (created if missing). */
  dir: string;
  bus: EventBus;
  /** Clock (ms since the epoch) for the modification time of notes written through `put`. */
  now?: () => number;
  /** Watch the directory for edits made outside the server; default true. */
  watch?: boolean;
};

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const RESERVED = new Set(["search"]);
const NAME_RULE =
  "a note name is 1-100 characters of letters, digits, '.', '_' and '-', starting with a letter or digit";

const bad = (message: string) => new MemoryError("BAD_REQUEST", 400, message);
const notFound = (name: string) => new MemoryError("NOT_FOUND", 404, `no note named ${name}`);

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
function fileNote(file: string): string | undefined {
  if (!file.endsWith(".md")) return undefined;
  try {
    return noteName(file);
  } catch {
    return undefined;
  }
}

const encoder = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function checkText(text: string) {
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
function badContent(data: Uint8Array): string | undefined {
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
function queryWords(text: string, forPrompt: boolean): string[] {
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
const matchQuery = (words: string[]) => words.map((w) => `"${w}"`).join(" OR ");

/** Words of the snippet around the first match. */
const SNIPPET_WORDS = 16;
/** Words shown before the first match. */
const SNIPPET_LEAD = 4;

/**
 * Up to SNIPPET_WORDS words of `body` around the first word that looks like a query word (its
 * first letters, a cheap stand-in for the index's stemming). FTS5's own snippet() costs time
 * quadratic in the matches of a note, which one note of a repeated word turns into seconds.
 */
function snippetOf(body: string, words: string[]): string {
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
const RELEVANT_HITS = 8;

const SCHEMA_VERSION = 2;
const SCHEMA = `
CREATE TABLE notes (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  bytes INTEGER NOT NULL,
  mtime INTEGER NOT NULL
);
CREATE VIRTUAL TABLE notes_fts USING fts5(name, body, tokenize='porter unicode61');
CREATE VIRTUAL TABLE names_fts USING fts5(name, tokenize='porter unicode61');
PRAGMA user_version = ${SCHEMA_VERSION};
`;
/** bm25 weights of the FTS columns: a word in the name says more than one in the body. */
const NAME_WEIGHT = 5.0;
const BODY_WEIGHT = 1.0;

function initIndex(db: DatabaseSync) {
  db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;");
  const version = Number((db.prepare("PRAGMA user_version").get() as Row).user_version);
  if (version === SCHEMA_VERSION) return;
  // An index of another version (or none yet) is rebuilt from the files.
  db.exec(
    "DROP TABLE IF EXISTS notes; DROP TABLE IF EXISTS notes_fts; DROP TABLE IF EXISTS names_fts;",
  );
  db.exec(SCHEMA);
}

/** Opens the index; a damaged one is deleted and rebuilt, since the files hold everything. */
function openIndex(path: string): DatabaseSync {
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(path);
    initIndex(db);
    return db;
  } catch (err) {
    console.error(`hearth: memory index ${path} is unusable, rebuilding it:`, err);
    try {
      db?.close();
    } catch { /* already unusable */ }
    for (const f of [path, `${path}-wal`, `${path}-shm`]) {
      try {
        Deno.removeSync(f);
      } catch { /* not there */ }
    }
    db = new DatabaseSync(path);
    initIndex(db);
    return db;
  }
}

type FileStat = { bytes: number; mtime: number };

function lstatOrUndefined(path: string): Deno.FileInfo | undefined {
  try {
    return Deno.lstatSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/** Opens (creating if needed) the memory in `opts.dir`, reconciles the index and starts watching. */
export async function createMemory(opts: MemoryOptions): Promise<Memory> {
  const { dir, bus } = opts;
  const now = opts.now ?? Date.now;
  await Deno.mkdir(dir, { recursive: true });
  const db = openIndex(join(dir, ".index.db"));

  const { all, get, run, tx } = sqlHelpers(db);

  /** Valid note files as of the last scan, kept current by put/remove: `files` of the events. */
  const known = new Map<string, FileStat>();
  /** Skipped files already logged, with why, so a watcher pass does not log them again. */
  const warned = new Map<string, string>();
  const skip = (file: string, why: string) => {
    if (warned.get(file) === why) return;
    warned.set(file, why);
    console.error(`hearth: memory: skipping ${join(dir, file)}: ${why}`);
  };

  const pathOf = (name: string) => join(dir, `${name}.md`);
  const indexedCount = () => Number(get("SELECT COUNT(*) AS n FROM notes")!.n);
  const info = (name: string, s: FileStat): NoteInfo => ({
    name,
    bytes: s.bytes,
    updatedAt: new Date(s.mtime).toISOString(),
  });
  const publish = (reason: string, name?: string) =>
    bus.publish("memory", "memory_status", {
      reason,
      files: known.size,
      indexed: indexedCount(),
      ...(name !== undefined ? { name } : {}),
    });

  // Rows of notes, notes_fts (name and body: the ranking) and names_fts (the name alone: which
  // query words a name holds) share their id.
  const upsert = (name: string, s: FileStat, body: string) => {
    const row = get("SELECT id FROM notes WHERE name = ?", name);
    let id: SQLInputValue;
    if (row) {
      id = row.id;
      run("UPDATE notes SET bytes = ?, mtime = ? WHERE id = ?", s.bytes, s.mtime, id);
      run("DELETE FROM notes_fts WHERE rowid = ?", id);
    } else {
      id = run("INSERT INTO notes (name, bytes, mtime) VALUES (?, ?, ?)", name, s.bytes, s.mtime)
        .lastInsertRowid;
      run("INSERT INTO names_fts (rowid, name) VALUES (?, ?)", id, name);
    }
    run("INSERT INTO notes_fts (rowid, name, body) VALUES (?, ?, ?)", id, name, body);
  };
  const drop = (name: string) => {
    const row = get("SELECT id FROM notes WHERE name = ?", name);
    if (!row) return false;
    run("DELETE FROM notes_fts WHERE rowid = ?", row.id);
    run("DELETE FROM names_fts WHERE rowid = ?", row.id);
    run("DELETE FROM notes WHERE id = ?", row.id);
    return true;
  };
  const bodyOf = (id: SQLInputValue) =>
    (get("SELECT body FROM notes_fts WHERE rowid = ?", id)?.body as string | undefined) ?? "";

  /** Brings the index in line with the directory; returns the names it changed. */
  function reconcile(): string[] {
    const found = new Map<string, FileStat>();
    const seen = new Set<string>();
    for (const entry of Deno.readDirSync(dir)) {
      // Hidden files are the index, temporary files of writes, editors' swap files.
      if (entry.name.startsWith(".") || !entry.name.endsWith(".md")) continue;
      seen.add(entry.name);
      const name = fileNote(entry.name);
      if (name === undefined) {
        skip(entry.name, `not a valid note name (${NAME_RULE}, not "search")`);
        continue;
      }
      // A symlink could point anywhere on the host; the API would then serve it.
      if (!entry.isFile) {
        skip(entry.name, "not a regular file");
        continue;
      }
      const st = lstatOrUndefined(join(dir, entry.name));
      if (!st?.isFile) continue; // gone (or replaced) since the listing
      if (st.size > MAX_NOTE_BYTES) {
        skip(entry.name, `${st.size} bytes, over the ${MAX_NOTE_BYTES}-byte limit`);
        continue;
      }
      found.set(name, { bytes: st.size, mtime: st.mtime?.getTime() ?? 0 });
    }
    for (const file of warned.keys()) if (!seen.has(file)) warned.delete(file);

    const names = [...found.keys()].sort();
    for (const name of names.slice(MAX_NOTES)) {
      skip(`${name}.md`, `more than ${MAX_NOTES} notes (the first ${MAX_NOTES} by name are kept)`);
    }
    const keep = new Set(names.slice(0, MAX_NOTES));
    const indexed = new Map(
      all("SELECT name, bytes, mtime FROM notes").map((r) => [
        r.name as string,
        { bytes: Number(r.bytes), mtime: Number(r.mtime) },
      ]),
    );
    const changed: string[] = [];
    tx(() => {
      for (const name of keep) {
        const s = found.get(name)!;
        const old = indexed.get(name);
        if (old && old.bytes === s.bytes && old.mtime === s.mtime) continue;
        let data: Uint8Array;
        try {
          data = Deno.readFileSync(pathOf(name));
        } catch (err) {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
          found.delete(name);
          keep.delete(name);
          continue;
        }
        const why = badContent(data);
        if (why) {
          skip(`${name}.md`, why);
          found.delete(name);
          keep.delete(name);
          continue;
        }
        // The size read may differ from the one listed when the file is being written: record
        // what was indexed, so the next pass sees the difference if the write goes on.
        upsert(name, { bytes: data.length, mtime: s.mtime }, strictUtf8.decode(data));
        found.set(name, { bytes: data.length, mtime: s.mtime });
        changed.push(name);
      }
      for (const name of indexed.keys()) {
        if (!keep.has(name) && drop(name)) changed.push(name);
      }
    });
    known.clear();
    for (const [name, s] of found) known.set(name, s);
    return changed;
  }

  try {
    reconcile();
  } catch (err) {
    db.close();
    throw err;
  }
  publish("startup");

  let closed = false;
  const open = () => {
    if (closed) throw new Error("memory is closed");
  };

  // The watcher: any non-hidden path changing schedules one reconcile after things settle.
  let watcher: Deno.FsWatcher | undefined;
  let watching: Promise<void> = Promise.resolve();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const external = () => {
    timer = undefined;
    if (closed) return;
    try {
      const files = known.size;
      const changed = reconcile();
      // A file past the note limit changes `files` without touching the index.
      if (changed.length || known.size !== files) {
        publish("external", changed.length === 1 ? changed[0] : undefined);
      }
    } catch (err) {
      console.error(`hearth: memory: reindexing ${dir} failed:`, err);
    }
  };
  if (opts.watch ?? true) {
    try {
      watcher = Deno.watchFs(dir, { recursive: false });
    } catch (err) {
      db.close();
      throw err;
    }
    const w = watcher;
    watching = (async () => {
      try {
        for await (const ev of w) {
          if (ev.kind === "access") continue;
          const ours = ev.paths.every((p) => (p.split(/[/\\]/).pop() ?? "").startsWith("."));
          if (ours) continue;
          if (timer !== undefined) clearTimeout(timer);
          timer = setTimeout(external, WATCH_DEBOUNCE_MS);
        }
      } catch (err) {
        // The directory vanished or the watcher broke: notes still work, only edits made
        // outside the server go unseen until the next start.
        if (!closed) console.error(`hearth: memory: watching ${dir} stopped:`, err);
      }
    })();
  }

  // Ranked by how many of the query's words the name holds (a name is a note's title: the note
  // "deploy" answers "deploy" better than a long note repeating it), then by bm25 over the whole
  // note. bm25 alone cannot promise that: its term frequency saturates, and a word in more than
  // half the notes gets a near-zero weight. `score` keeps the same order: the name matches plus
  // bm25 squashed into [0, 1). The name matches come from names_fts, whose rows are a few tokens:
  // highlight() over notes_fts would walk every match in every body.
  const ranked = (words: string[], limit: number) =>
    all(
      `WITH nm AS (
         SELECT rowid AS id, highlight(names_fts, 0, char(1), char(2)) AS h
         FROM names_fts WHERE names_fts MATCH ?1)
       SELECT n.id, n.name, n.bytes, n.mtime,
              bm25(notes_fts, ${NAME_WEIGHT}, ${BODY_WEIGHT}) AS rank,
              coalesce(length(nm.h) - length(replace(nm.h, char(1), '')), 0) AS in_name
       FROM notes_fts JOIN notes n ON n.id = notes_fts.rowid LEFT JOIN nm ON nm.id = n.id
       WHERE notes_fts MATCH ?1
       ORDER BY in_name DESC, rank, n.name LIMIT ?2`,
      matchQuery(words),
      limit,
    ).map((r) => {
      const bm25 = Math.max(0, -Number(r.rank));
      return {
        id: r.id,
        info: info(r.name as string, { bytes: Number(r.bytes), mtime: Number(r.mtime) }),
        score: Number(r.in_name) + bm25 / (1 + bm25),
      };
    });

  return {
    list() {
      open();
      return all("SELECT name, bytes, mtime FROM notes ORDER BY name").map((r) =>
        info(r.name as string, { bytes: Number(r.bytes), mtime: Number(r.mtime) })
      );
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
        ...info(name, { bytes: data.length, mtime: st.mtime?.getTime() ?? 0 }),
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
      // Write beside the note, then rename: a reader (or a crash) sees the old or the new text.
      const tmp = join(dir, `.${name}.md.${crypto.randomUUID()}.tmp`);
      const data = encoder.encode(text);
      const mtime = new Date(now());
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
      const st = Deno.lstatSync(path);
      const s = { bytes: data.length, mtime: st.mtime?.getTime() ?? mtime.getTime() };
      tx(() => upsert(name, s, text));
      known.set(name, s);
      warned.delete(`${name}.md`);
      publish("saved", name);
      return { note: info(name, s), created };
    },

    remove(input) {
      open();
      const name = noteName(input);
      const st = lstatOrUndefined(pathOf(name));
      const isFile = st !== undefined && !st.isDirectory;
      const wasIndexed = tx(() => drop(name));
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
      return ranked(words, limit).map((r) => ({
        ...r.info,
        snippet: snippetOf(bodyOf(r.id), words),
        score: r.score,
      }));
    },

    relevant(text, maxChars = DEFAULT_RELEVANT_CHARS) {
      open();
      if (typeof text !== "string" || !(maxChars >= MIN_RELEVANT_CHARS)) return "";
      const words = queryWords(text, true);
      if (!words.length) return "";
      let budget = Math.floor(maxChars) - RELEVANT_HEAD.length - RELEVANT_TAIL.length;
      const sections: string[] = [];
      for (const { id, info: { name } } of ranked(words, RELEVANT_HITS)) {
        const body = bodyOf(id).trim();
        const head = `${sections.length ? "\n\n" : ""}## ${name}\n`;
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
    },

    async close() {
      if (closed) return;
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      try {
        watcher?.close();
      } catch { /* already closed */ }
      await watching;
      db.close();
    },
  };
}
