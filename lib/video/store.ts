/**
 * Durable records of video operations and generated files: SQLite at `<dataDir>/video/video.db`,
 * MP4s under `<dataDir>/video/files/`.
 *
 * Why SQLite (`node:sqlite`) rather than Deno KV: its API is stable in this Deno (KV still needs
 * `--unstable-kv`, which every way of starting Hearth would then have to pass); the whole state is
 * one file that can be copied, inspected with `sqlite3` and backed up; the sweeper's question
 * ("what expired before T?") is an indexed range query instead of a scan over every key; and its
 * transactions are synchronous, so "insert the files and mark the operation done" happens all at
 * once or not at all even if the process dies in between, with no await in the middle where
 * another request could see half of it. WAL mode with `synchronous=NORMAL` loses no committed
 * record when the process is killed (only an OS crash can drop the last commits).
 *
 * The store is plain storage: no clock, no policy. `operations.ts` decides what expires and when.
 *
 * @example
 * ```ts
 * import { openVideoStore } from "./store.ts";
 * const store = openVideoStore("/data");
 * store.insertOp({ id: "abcdefghij12", model: "veo-2.0-generate-001", state: "pending",
 *   createdAt: 0, updatedAt: 0, expiresAt: 1, progress: 0, request: {}, files: [] });
 * store.getOp("abcdefghij12")?.state; // "pending"
 * store.close();
 * ```
 * @module
 */
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import type { AspectRatio, Family, OperationRecord, Resolution } from "./types.ts";

/** One generated video (or, for the gateway, one upstream video reached through this server). */
export type FileRecord = {
  id: string;
  /** Absolute path of the MP4; empty for a gateway file (bytes stay upstream). */
  path: string;
  opId: string;
  model: string;
  family: Family;
  durationSeconds: number;
  resolution: Resolution;
  aspectRatio: AspectRatio;
  /** How many extensions produced this video (0 for a fresh one). */
  extensionCount: number;
  /** Hex SHA-256 of the bytes (lets an uploaded copy of the video be recognised). */
  sha256: string;
  expiresAt: number;
  size: number;
  createdAt: number;
  /** Gateway: the upstream uri this file stands for. */
  upstreamUri?: string;
};

export type OperationPatch = Partial<Omit<OperationRecord, "id">>;

export type VideoStore = {
  /** `<dataDir>/video` */
  dir: string;
  /** `<dataDir>/video/files` */
  filesDir: string;
  insertOp(op: OperationRecord): void;
  getOp(id: string): OperationRecord | undefined;
  updateOp(id: string, patch: OperationPatch): void;
  /** Newest first; `after` is the last record of the previous page. */
  listOps(
    model: string,
    opts: { limit: number; after?: { createdAt: number; id: string } },
  ): OperationRecord[];
  /** Local operations left pending or running (by a previous process), oldest first. */
  unfinishedOps(): OperationRecord[];
  /** Inserts `files` and applies `patch` to the operation in one transaction. */
  finishOp(id: string, patch: OperationPatch, files: FileRecord[]): void;
  insertFile(f: FileRecord): void;
  getFile(id: string): FileRecord | undefined;
  fileBySha256(sha256: string): FileRecord | undefined;
  filesOfOp(opId: string): FileRecord[];
  /** Sets the expiry of an operation and all its files. */
  setExpiry(opId: string, expiresAt: number): void;
  /**
   * Deletes every record that expired at or before `now` (finished operations and their files,
   * and files on their own) and returns the deleted files, whose bytes the caller removes.
   */
  deleteExpired(now: number): { ops: string[]; files: FileRecord[] };
  /** Every file path the store knows (to find orphans on disk). */
  knownPaths(): Set<string>;
  close(): void;
};

const SCHEMA = `
CREATE TABLE IF NOT EXISTS operations (
  id TEXT PRIMARY KEY,
  model TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  progress REAL NOT NULL DEFAULT 0,
  request TEXT NOT NULL,
  files TEXT NOT NULL DEFAULT '[]',
  error TEXT,
  filtered_reasons TEXT,
  upstream_name TEXT
);
CREATE INDEX IF NOT EXISTS operations_expiry ON operations (expires_at);
CREATE INDEX IF NOT EXISTS operations_state ON operations (state);
CREATE INDEX IF NOT EXISTS operations_model ON operations (model, created_at, id);
CREATE TABLE IF NOT EXISTS files (
  id TEXT PRIMARY KEY,
  path TEXT NOT NULL,
  op_id TEXT NOT NULL,
  model TEXT NOT NULL,
  family TEXT NOT NULL,
  duration_seconds REAL NOT NULL,
  resolution TEXT NOT NULL,
  aspect_ratio TEXT NOT NULL,
  extension_count INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  size INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  upstream_uri TEXT
);
CREATE INDEX IF NOT EXISTS files_expiry ON files (expires_at);
CREATE INDEX IF NOT EXISTS files_sha256 ON files (sha256);
CREATE INDEX IF NOT EXISTS files_op ON files (op_id);
`;

type Row = Record<string, SQLInputValue>;

const OP_COLUMNS: Record<keyof OperationPatch, string> = {
  model: "model",
  state: "state",
  createdAt: "created_at",
  updatedAt: "updated_at",
  expiresAt: "expires_at",
  progress: "progress",
  request: "request",
  files: "files",
  error: "error",
  filteredReasons: "filtered_reasons",
  upstreamName: "upstream_name",
};
const JSON_FIELDS = new Set(["request", "files", "error", "filteredReasons"]);

function opToRow(op: OperationPatch): Row {
  const row: Row = {};
  for (const [k, v] of Object.entries(op)) {
    const col = OP_COLUMNS[k as keyof OperationPatch];
    if (!col) continue;
    row[col] = JSON_FIELDS.has(k) ? (v === undefined ? null : JSON.stringify(v)) : (v ?? null) as
      | string
      | number
      | null;
  }
  return row;
}

function rowToOp(r: Row): OperationRecord {
  const op: OperationRecord = {
    id: r.id as string,
    model: r.model as string,
    state: r.state as OperationRecord["state"],
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
    expiresAt: Number(r.expires_at),
    progress: Number(r.progress),
    request: JSON.parse(r.request as string),
    files: JSON.parse(r.files as string),
  };
  if (r.error != null) op.error = JSON.parse(r.error as string);
  if (r.filtered_reasons != null) op.filteredReasons = JSON.parse(r.filtered_reasons as string);
  if (r.upstream_name != null) op.upstreamName = r.upstream_name as string;
  return op;
}

function fileToRow(f: FileRecord): Row {
  return {
    id: f.id,
    path: f.path,
    op_id: f.opId,
    model: f.model,
    family: f.family,
    duration_seconds: f.durationSeconds,
    resolution: f.resolution,
    aspect_ratio: f.aspectRatio,
    extension_count: f.extensionCount,
    sha256: f.sha256,
    expires_at: f.expiresAt,
    size: f.size,
    created_at: f.createdAt,
    upstream_uri: f.upstreamUri ?? null,
  };
}

function rowToFile(r: Row): FileRecord {
  const f: FileRecord = {
    id: r.id as string,
    path: r.path as string,
    opId: r.op_id as string,
    model: r.model as string,
    family: r.family as Family,
    durationSeconds: Number(r.duration_seconds),
    resolution: r.resolution as Resolution,
    aspectRatio: r.aspect_ratio as AspectRatio,
    extensionCount: Number(r.extension_count),
    sha256: r.sha256 as string,
    expiresAt: Number(r.expires_at),
    size: Number(r.size),
    createdAt: Number(r.created_at),
  };
  if (r.upstream_uri != null) f.upstreamUri = r.upstream_uri as string;
  return f;
}

function insertSql(table: string, row: Row): string {
  const cols = Object.keys(row);
  return `INSERT INTO ${table} (${cols.join(", ")}) VALUES (${
    cols.map((c) => `:${c}`).join(", ")
  })`;
}

/** Opens (creating when needed) the store under `<dataDir>/video`. */
export function openVideoStore(dataDir: string): VideoStore {
  const dir = `${dataDir}/video`;
  const filesDir = `${dir}/files`;
  Deno.mkdirSync(filesDir, { recursive: true });
  const db = new DatabaseSync(`${dir}/video.db`);
  db.exec("PRAGMA journal_mode = WAL");
  db.exec("PRAGMA synchronous = NORMAL");
  // A second process (or a restarted one while the old is still exiting) waits instead of failing.
  db.exec("PRAGMA busy_timeout = 5000");
  db.exec(SCHEMA);

  const tx = <T>(fn: () => T): T => {
    db.exec("BEGIN IMMEDIATE");
    try {
      const r = fn();
      db.exec("COMMIT");
      return r;
    } catch (e) {
      db.exec("ROLLBACK");
      throw e;
    }
  };

  const getOpStmt = db.prepare("SELECT * FROM operations WHERE id = ?");
  const getFileStmt = db.prepare("SELECT * FROM files WHERE id = ?");
  const bySha = db.prepare(
    "SELECT * FROM files WHERE sha256 = ? AND path != '' ORDER BY created_at DESC LIMIT 1",
  );
  const ofOp = db.prepare("SELECT * FROM files WHERE op_id = ? ORDER BY created_at, id");

  const updateOp = (id: string, patch: OperationPatch) => {
    const row = opToRow(patch);
    const cols = Object.keys(row);
    if (cols.length === 0) return;
    db.prepare(`UPDATE operations SET ${cols.map((c) => `${c} = :${c}`).join(", ")} WHERE id = :id`)
      .run({ ...row, id });
  };
  const insertFile = (f: FileRecord) => {
    const row = fileToRow(f);
    db.prepare(insertSql("files", row)).run(row);
  };

  return {
    dir,
    filesDir,
    insertOp(op) {
      const row = { ...opToRow(op), id: op.id };
      db.prepare(insertSql("operations", row)).run(row);
    },
    getOp(id) {
      const r = getOpStmt.get(id) as Row | undefined;
      return r ? rowToOp(r) : undefined;
    },
    updateOp,
    listOps(model, { limit, after }) {
      const rows = after
        ? db.prepare(
          `SELECT * FROM operations WHERE model = ? AND (created_at < ? OR (created_at = ? AND id < ?))
           ORDER BY created_at DESC, id DESC LIMIT ?`,
        ).all(model, after.createdAt, after.createdAt, after.id, limit)
        : db.prepare(
          "SELECT * FROM operations WHERE model = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        ).all(model, limit);
      return (rows as Row[]).map(rowToOp);
    },
    unfinishedOps() {
      return (db.prepare(
        `SELECT * FROM operations WHERE state IN ('pending', 'running') AND upstream_name IS NULL
         ORDER BY created_at, id`,
      ).all() as Row[]).map(rowToOp);
    },
    finishOp(id, patch, files) {
      tx(() => {
        for (const f of files) insertFile(f);
        updateOp(id, patch);
      });
    },
    insertFile,
    getFile(id) {
      const r = getFileStmt.get(id) as Row | undefined;
      return r ? rowToFile(r) : undefined;
    },
    fileBySha256(sha256) {
      const r = bySha.get(sha256) as Row | undefined;
      return r ? rowToFile(r) : undefined;
    },
    filesOfOp(opId) {
      return (ofOp.all(opId) as Row[]).map(rowToFile);
    },
    setExpiry(opId, expiresAt) {
      tx(() => {
        db.prepare("UPDATE operations SET expires_at = ? WHERE id = ?").run(expiresAt, opId);
        db.prepare("UPDATE files SET expires_at = ? WHERE op_id = ?").run(expiresAt, opId);
      });
    },
    deleteExpired(now) {
      return tx(() => {
        // Unfinished operations never expire: their clock starts again when they finish.
        const ops = (db.prepare(
          `SELECT id FROM operations WHERE expires_at <= ? AND state NOT IN ('pending', 'running')`,
        ).all(now) as Row[]).map((r) => r.id as string);
        const files = (db.prepare("SELECT * FROM files WHERE expires_at <= ?").all(now) as Row[])
          .map(rowToFile);
        const seen = new Set(files.map((f) => f.id));
        for (const id of ops) {
          for (const f of (ofOp.all(id) as Row[]).map(rowToFile)) {
            if (seen.has(f.id)) continue;
            files.push(f);
            seen.add(f.id);
          }
          db.prepare("DELETE FROM operations WHERE id = ?").run(id);
        }
        for (const f of files) db.prepare("DELETE FROM files WHERE id = ?").run(f.id);
        return { ops, files };
      });
    },
    knownPaths() {
      return new Set(
        (db.prepare("SELECT path FROM files WHERE path != ''").all() as Row[]).map((r) =>
          r.path as string
        ),
      );
    },
    close() {
      db.close();
    },
  };
}
