/**
 * Durable state of the agent sessions in one embedded SQLite file
 * (`<dataDir>/agents/sessions.db`): sessions, their histories, their queues of pending messages,
 * the run in flight (its partial output and process, so a restart can mark it interrupted and stop
 * what it left running) and the scheduled wake-ups with their due times. Every write is a single
 * statement or one transaction, so a crash leaves the file consistent.
 *
 * Times are milliseconds since the epoch.
 *
 * @example
 * ```ts
 * import { openStore } from "./store.ts";
 * const store = openStore("/var/lib/hearth/agents/sessions.db");
 * store.insertSession({ id: "s1", agent: "claude", cwd: "/src", status: "idle",
 *   createdAt: Date.now(), updatedAt: Date.now(), cliSessions: {} });
 * store.appendMessage("s1", { role: "user", content: "hi", at: Date.now() });
 * console.log(store.history("s1"));
 * store.close();
 * ```
 * @module
 */
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import type { ErrorKind } from "./types.ts";
import { type Row, sqlHelpers } from "./sqlite.ts";

export type SessionStatus = "idle" | "running";

export type SessionRow = {
  id: string;
  agent: string;
  cwd: string;
  status: SessionStatus;
  createdAt: number;
  updatedAt: number;
  /** The CLIs' own session ids by agent name, so later runs resume the same conversation. */
  cliSessions: Record<string, string>;
};

export type StoredMessage = {
  role: "user" | "assistant";
  content: string;
  at: number;
  error?: string;
  errorKind?: ErrorKind;
  partial?: boolean;
  fromQueue?: boolean;
};

export type QueueItem = { id: number; text: string; at: number };

export type LiveRun = {
  sessionId: string;
  agent: string;
  output: string;
  pid: number | null;
  startTicks: string | null;
  startedAt: number;
};

export type ScheduleRow = {
  id: number;
  sessionId: string;
  text: string;
  delaySeconds: number;
  dueAt: number;
  createdAt: number;
};

export type Store = {
  insertSession(s: SessionRow): void;
  updateSession(
    id: string,
    patch: { status?: SessionStatus; updatedAt: number; cliSessions?: Record<string, string> },
  ): void;
  /** Removes the session with its history, queue and run record (not its schedules). */
  deleteSession(id: string): void;
  getSession(id: string): SessionRow | undefined;
  listSessions(): SessionRow[];

  appendMessage(sessionId: string, m: StoredMessage): void;
  history(sessionId: string): StoredMessage[];
  /** The newest message of one session, or of all sessions. */
  latestMessage(sessionId?: string): { sessionId: string; message: StoredMessage } | undefined;

  queue(sessionId: string): QueueItem[];
  /** Adds to the end of the queue, or before everything when `front`; returns the item's id. */
  enqueue(sessionId: string, text: string, at: number, front?: boolean): number;
  /** Removes and returns the first queued item. */
  dequeue(sessionId: string): QueueItem | undefined;
  clearQueue(sessionId: string): void;
  /** Sessions with anything queued. */
  queuedSessions(): string[];

  beginRun(run: LiveRun): void;
  updateRun(
    sessionId: string,
    patch: { output?: string; pid?: number | null; startTicks?: string | null; agent?: string },
  ): void;
  endRun(sessionId: string): void;
  liveRuns(): LiveRun[];

  addSchedule(s: Omit<ScheduleRow, "id">): number;
  removeSchedule(id: number): void;
  schedules(): ScheduleRow[];

  getMeta(key: string): string | undefined;
  setMeta(key: string, value: string | null): void;

  /** The open database, for the tables of goals and orchestrations that live beside sessions. */
  readonly db: DatabaseSync;

  close(): void;
};

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  agent TEXT NOT NULL,
  cwd TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  cli_sessions TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL,
  role TEXT NOT NULL,
  content TEXT NOT NULL,
  at INTEGER NOT NULL,
  error TEXT,
  error_kind TEXT,
  partial INTEGER NOT NULL DEFAULT 0,
  from_queue INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, id);
CREATE TABLE IF NOT EXISTS queue (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL,
  pos INTEGER NOT NULL,
  text TEXT NOT NULL,
  at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_by_session ON queue (session_id, pos);
CREATE TABLE IF NOT EXISTS live_runs (
  session_id TEXT PRIMARY KEY,
  agent TEXT NOT NULL,
  output TEXT NOT NULL DEFAULT '',
  pid INTEGER,
  start_ticks TEXT,
  started_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL,
  text TEXT NOT NULL,
  delay_seconds REAL NOT NULL,
  due_at INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
`;

const toSession = (r: Row): SessionRow => ({
  id: r.id as string,
  agent: r.agent as string,
  cwd: r.cwd as string,
  status: r.status as SessionStatus,
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
  cliSessions: JSON.parse(r.cli_sessions as string),
});

const toMessage = (r: Row): StoredMessage => {
  const m: StoredMessage = {
    role: r.role as StoredMessage["role"],
    content: r.content as string,
    at: Number(r.at),
  };
  if (r.error !== null) m.error = r.error as string;
  if (r.error_kind !== null) m.errorKind = r.error_kind as ErrorKind;
  if (r.partial) m.partial = true;
  if (r.from_queue) m.fromQueue = true;
  return m;
};

const toRun = (r: Row): LiveRun => ({
  sessionId: r.session_id as string,
  agent: r.agent as string,
  output: r.output as string,
  pid: r.pid === null ? null : Number(r.pid),
  startTicks: r.start_ticks as string | null,
  startedAt: Number(r.started_at),
});

/** Opens (creating if needed) the store at `path`; the directory must exist. */
export function openStore(path: string): Store {
  const db = new DatabaseSync(path);
  db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;");
  db.exec(SCHEMA);

  const { all, get, run, tx } = sqlHelpers(db);

  return {
    insertSession(s) {
      run(
        `INSERT INTO sessions (id, agent, cwd, status, created_at, updated_at, cli_sessions)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
        s.id,
        s.agent,
        s.cwd,
        s.status,
        s.createdAt,
        s.updatedAt,
        JSON.stringify(s.cliSessions),
      );
    },
    updateSession(id, patch) {
      const sets = ["updated_at = ?"];
      const params: SQLInputValue[] = [patch.updatedAt];
      if (patch.status !== undefined) {
        sets.push("status = ?");
        params.push(patch.status);
      }
      if (patch.cliSessions !== undefined) {
        sets.push("cli_sessions = ?");
        params.push(JSON.stringify(patch.cliSessions));
      }
      run(`UPDATE sessions SET ${sets.join(", ")} WHERE id = ?`, ...params, id);
    },
    deleteSession(id) {
      tx(() => {
        for (const t of ["messages", "queue", "live_runs"]) {
          run(`DELETE FROM ${t} WHERE session_id = ?`, id);
        }
        run("DELETE FROM sessions WHERE id = ?", id);
      });
    },
    getSession(id) {
      const r = get("SELECT * FROM sessions WHERE id = ?", id);
      return r && toSession(r);
    },
    listSessions: () => all("SELECT * FROM sessions ORDER BY created_at, id").map(toSession),

    appendMessage(sessionId, m) {
      run(
        `INSERT INTO messages (session_id, role, content, at, error, error_kind, partial, from_queue)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        sessionId,
        m.role,
        m.content,
        m.at,
        m.error ?? null,
        m.errorKind ?? null,
        m.partial ? 1 : 0,
        m.fromQueue ? 1 : 0,
      );
    },
    history: (sessionId) =>
      all("SELECT * FROM messages WHERE session_id = ? ORDER BY id", sessionId).map(toMessage),
    latestMessage(sessionId) {
      const r = sessionId === undefined
        ? get("SELECT * FROM messages ORDER BY id DESC LIMIT 1")
        : get("SELECT * FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT 1", sessionId);
      return r && { sessionId: r.session_id as string, message: toMessage(r) };
    },

    queue: (sessionId) =>
      all("SELECT id, text, at FROM queue WHERE session_id = ? ORDER BY pos, id", sessionId)
        .map((r) => ({ id: Number(r.id), text: r.text as string, at: Number(r.at) })),
    enqueue(sessionId, text, at, front = false) {
      return tx(() => {
        const edge = get(
          `SELECT ${front ? "MIN" : "MAX"}(pos) AS p FROM queue WHERE session_id = ?`,
          sessionId,
        );
        const pos = edge?.p === null || edge?.p === undefined
          ? 0
          : Number(edge.p) + (front ? -1 : 1);
        const r = run(
          "INSERT INTO queue (session_id, pos, text, at) VALUES (?, ?, ?, ?)",
          sessionId,
          pos,
          text,
          at,
        );
        return Number(r.lastInsertRowid);
      });
    },
    dequeue(sessionId) {
      return tx(() => {
        const r = get(
          "SELECT id, text, at FROM queue WHERE session_id = ? ORDER BY pos, id LIMIT 1",
          sessionId,
        );
        if (!r) return undefined;
        run("DELETE FROM queue WHERE id = ?", r.id);
        return { id: Number(r.id), text: r.text as string, at: Number(r.at) };
      });
    },
    clearQueue(sessionId) {
      run("DELETE FROM queue WHERE session_id = ?", sessionId);
    },
    queuedSessions: () =>
      all("SELECT DISTINCT session_id FROM queue").map((r) => r.session_id as string),

    beginRun(r) {
      run(
        `INSERT OR REPLACE INTO live_runs (session_id, agent, output, pid, start_ticks, started_at)
         VALUES (?, ?, ?, ?, ?, ?)`,
        r.sessionId,
        r.agent,
        r.output,
        r.pid,
        r.startTicks,
        r.startedAt,
      );
    },
    updateRun(sessionId, patch) {
      const sets: string[] = [];
      const params: SQLInputValue[] = [];
      const cols = { output: "output", pid: "pid", startTicks: "start_ticks", agent: "agent" };
      for (const [k, col] of Object.entries(cols)) {
        const v = patch[k as keyof typeof patch];
        if (v === undefined) continue;
        sets.push(`${col} = ?`);
        params.push(v);
      }
      if (sets.length) {
        run(`UPDATE live_runs SET ${sets.join(", ")} WHERE session_id = ?`, ...params, sessionId);
      }
    },
    endRun(sessionId) {
      run("DELETE FROM live_runs WHERE session_id = ?", sessionId);
    },
    liveRuns: () => all("SELECT * FROM live_runs").map(toRun),

    addSchedule(s) {
      const r = run(
        `INSERT INTO schedules (session_id, text, delay_seconds, due_at, created_at)
         VALUES (?, ?, ?, ?, ?)`,
        s.sessionId,
        s.text,
        s.delaySeconds,
        s.dueAt,
        s.createdAt,
      );
      return Number(r.lastInsertRowid);
    },
    removeSchedule(id) {
      run("DELETE FROM schedules WHERE id = ?", id);
    },
    schedules: () =>
      all("SELECT * FROM schedules ORDER BY due_at, id").map((r) => ({
        id: Number(r.id),
        sessionId: r.session_id as string,
        text: r.text as string,
        delaySeconds: Number(r.delay_seconds),
        dueAt: Number(r.due_at),
        createdAt: Number(r.created_at),
      })),

    getMeta(key) {
      const r = get("SELECT value FROM meta WHERE key = ?", key);
      return r ? (r.value as string) : undefined;
    },
    setMeta(key, value) {
      if (value === null) run("DELETE FROM meta WHERE key = ?", key);
      else run("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", key, value);
    },

    db,
    close: () => db.close(),
  };
}
