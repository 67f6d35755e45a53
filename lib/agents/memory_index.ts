/**
 * The search index of the memory (memory.ts): a SQLite FTS5 database at `<dir>/.index.db`, a cache
 * of the note files that may be deleted at any time. Three tables share each note's id: `notes`
 * (name, size and mtime, against which the files are reconciled), `notes_fts` (name and body: the
 * ranking) and `names_fts` (the name alone: which query words a name holds). An index of another
 * schema version is rebuilt empty, a damaged one deleted and rebuilt.
 *
 * @example
 * ```ts ignore
 * import { openNoteIndex } from "./memory_index.ts";
 * const index = openNoteIndex("/var/lib/hearth/agents/memory/.index.db");
 * index.tx(() => index.upsert("deploy", { bytes: 12, mtime: Date.now() }, "make deploy"));
 * for (const hit of index.ranked(["deploy"], 10)) console.log(hit.name, hit.score);
 * index.close();
 * ```
 * @module
 */
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import type { FileStat } from "./memory_notes.ts";
import { matchQuery } from "./memory_text.ts";
import { type Row, sqlHelpers } from "./sqlite.ts";

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
function openIndexDb(path: string): DatabaseSync {
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

/** A note the index ranked for a query; `score` is larger for better matches. */
export type RankedNote = { id: SQLInputValue; name: string; stat: FileStat; score: number };

export type NoteIndex = {
  /** Notes indexed. */
  count(): number;
  /** Indexed notes with their size and mtime, sorted by name. */
  list(): { name: string; stat: FileStat }[];
  /** Every indexed note's size and mtime, by name. */
  stats(): Map<string, FileStat>;
  /** Indexes (or re-indexes) a note's text. Call inside `tx`. */
  upsert(name: string, s: FileStat, body: string): void;
  /** Removes a note from the index; false when it was not there. Call inside `tx`. */
  drop(name: string): boolean;
  /** The indexed text of a note ("" when gone). */
  body(id: SQLInputValue): string;
  /** Notes holding any of `words`, best first, at most `limit`. */
  ranked(words: string[], limit: number): RankedNote[];
  /** Runs `f` in one transaction, rolled back when it throws. */
  tx<T>(f: () => T): T;
  close(): void;
};

const statOf = (r: Row): FileStat => ({ bytes: Number(r.bytes), mtime: Number(r.mtime) });

/** Opens (creating or rebuilding as needed) the index at `path`. */
export function openNoteIndex(path: string): NoteIndex {
  const db = openIndexDb(path);
  const { all, get, run, tx } = sqlHelpers(db);
  return {
    count: () => Number(get("SELECT COUNT(*) AS n FROM notes")!.n),
    list: () =>
      all("SELECT name, bytes, mtime FROM notes ORDER BY name").map((r) => ({
        name: r.name as string,
        stat: statOf(r),
      })),
    stats: () =>
      new Map(
        all("SELECT name, bytes, mtime FROM notes").map((r) => [r.name as string, statOf(r)]),
      ),
    // Rows of the three tables share their id; names_fts changes only with the name.
    upsert(name, s, body) {
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
    },
    drop(name) {
      const row = get("SELECT id FROM notes WHERE name = ?", name);
      if (!row) return false;
      run("DELETE FROM notes_fts WHERE rowid = ?", row.id);
      run("DELETE FROM names_fts WHERE rowid = ?", row.id);
      run("DELETE FROM notes WHERE id = ?", row.id);
      return true;
    },
    body: (id) =>
      (get("SELECT body FROM notes_fts WHERE rowid = ?", id)?.body as string | undefined) ?? "",
    // Ranked by how many of the query's words the name holds (a name is a note's title: the note
    // "deploy" answers "deploy" better than a long note repeating it), then by bm25 over the whole
    // note. bm25 alone cannot promise that: its term frequency saturates, and a word in more than
    // half the notes gets a near-zero weight. `score` keeps the same order: the name matches plus
    // bm25 squashed into [0, 1). The name matches come from names_fts, whose rows are a few
    // tokens: highlight() over notes_fts would walk every match in every body.
    ranked: (words, limit) =>
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
          name: r.name as string,
          stat: statOf(r),
          score: Number(r.in_name) + bm25 / (1 + bm25),
        };
      }),
    tx,
    close: () => db.close(),
  };
}
