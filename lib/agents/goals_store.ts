/**
 * A goal's record (goals.ts): its row in the agents store (table `goals`), its clock of active
 * time, its budget, and the public JSON a route returns. The clock runs only while the goal is
 * active on a running server: `activeMs` holds the time of earlier stretches, `activeSince` when
 * the current one began.
 *
 * @example
 * ```ts
 * import { DatabaseSync } from "node:sqlite";
 * import { goalJson, openGoalTable } from "./goals_store.ts";
 * const table = openGoalTable(new DatabaseSync(":memory:"), Date.now);
 * const g = table.latest("session-1");
 * if (g) console.log(goalJson(g, Date.now).minutesUsed);
 * ```
 * @module
 */
import type { DatabaseSync, SQLInputValue } from "node:sqlite";

export type GoalStatus = "active" | "paused" | "done" | "cancelled";

export type Checkpoint = {
  summary: string;
  evidence: string[];
  by: "agent" | "user";
  at: string;
};

export type GoalJson = {
  goalId: string;
  sessionId: string;
  objective: string;
  status: GoalStatus;
  /** Why it is paused, cancelled or done (`budget`, `user`, `agent: ...`). */
  reason?: string;
  maxTurns: number;
  maxMinutes: number;
  turns: number;
  minutesUsed: number;
  checkpoints: Checkpoint[];
  /** An agent asked to pause once; a second request pauses the goal. */
  pauseGatePending: boolean;
  /** Why the agent's last `/goal done` did not count (cleared when one does). */
  doneWithheld?: string;
  createdAt: string;
  updatedAt: string;
  finishedAt?: string;
};

export type GoalRow = {
  id: string;
  sessionId: string;
  objective: string;
  status: GoalStatus;
  reason: string | null;
  maxTurns: number;
  maxMinutes: number;
  turns: number;
  /** Active time before `activeSince`. */
  activeMs: number;
  /** When the current active stretch began (null while not active or not running here). */
  activeSince: number | null;
  gate: string | null;
  withheld: string | null;
  failures: number;
  checkpoints: Checkpoint[];
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
};

const SCHEMA = `
CREATE TABLE IF NOT EXISTS goals (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  objective TEXT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT,
  max_turns INTEGER NOT NULL,
  max_minutes REAL NOT NULL,
  turns INTEGER NOT NULL DEFAULT 0,
  active_ms INTEGER NOT NULL DEFAULT 0,
  active_since INTEGER,
  gate TEXT,
  withheld TEXT,
  failures INTEGER NOT NULL DEFAULT 0,
  checkpoints TEXT NOT NULL DEFAULT '[]',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  finished_at INTEGER
);
CREATE INDEX IF NOT EXISTS goals_by_session ON goals (session_id, created_at);
`;

const COLUMNS: Record<keyof GoalRow, string> = {
  id: "id",
  sessionId: "session_id",
  objective: "objective",
  status: "status",
  reason: "reason",
  maxTurns: "max_turns",
  maxMinutes: "max_minutes",
  turns: "turns",
  activeMs: "active_ms",
  activeSince: "active_since",
  gate: "gate",
  withheld: "withheld",
  failures: "failures",
  checkpoints: "checkpoints",
  createdAt: "created_at",
  updatedAt: "updated_at",
  finishedAt: "finished_at",
};

export const iso = (ms: number) => new Date(ms).toISOString();

const toRow = (r: Record<string, SQLInputValue>): GoalRow => ({
  id: r.id as string,
  sessionId: r.session_id as string,
  objective: r.objective as string,
  status: r.status as GoalStatus,
  reason: r.reason as string | null,
  maxTurns: Number(r.max_turns),
  maxMinutes: Number(r.max_minutes),
  turns: Number(r.turns),
  activeMs: Number(r.active_ms),
  activeSince: r.active_since === null ? null : Number(r.active_since),
  gate: r.gate as string | null,
  withheld: r.withheld as string | null,
  failures: Number(r.failures),
  checkpoints: JSON.parse(r.checkpoints as string),
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
  finishedAt: r.finished_at === null ? null : Number(r.finished_at),
});

export type GoalTable = {
  /** The session's newest goal. */
  latest(sessionId: string): GoalRow | undefined;
  byId(id: string): GoalRow | undefined;
  /** The active goals (each read as the walk reaches it). */
  active(): Iterable<GoalRow>;
  /** Writes the whole row, `updatedAt` set to now. */
  save(g: GoalRow): void;
};

/** Creates the `goals` table if missing; `now` stamps every save. */
export function openGoalTable(db: DatabaseSync, now: () => number): GoalTable {
  db.exec(SCHEMA);
  return {
    latest(sessionId) {
      const r = db.prepare(
        "SELECT * FROM goals WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
      ).get(sessionId) as Record<string, SQLInputValue> | undefined;
      return r && toRow(r);
    },
    byId(id) {
      const r = db.prepare("SELECT * FROM goals WHERE id = ?").get(id) as
        | Record<string, SQLInputValue>
        | undefined;
      return r && toRow(r);
    },
    *active() {
      const rows = db.prepare("SELECT * FROM goals WHERE status = 'active'").all() as Record<
        string,
        SQLInputValue
      >[];
      for (const r of rows) yield toRow(r);
    },
    save(g) {
      g.updatedAt = now();
      const keys = Object.keys(COLUMNS) as (keyof GoalRow)[];
      const values = keys.map((k) =>
        k === "checkpoints" ? JSON.stringify(g.checkpoints) : g[k] as SQLInputValue
      );
      db.prepare(
        `INSERT OR REPLACE INTO goals (${keys.map((k) => COLUMNS[k]).join(", ")})
         VALUES (${keys.map(() => "?").join(", ")})`,
      ).run(...values);
    },
  };
}

export const minutesUsed = (g: GoalRow, now: () => number) =>
  (g.activeMs + (g.activeSince !== null ? now() - g.activeSince : 0)) / 60_000;

/** Ends the current active stretch: its time joins `activeMs`. */
export const stopClock = (g: GoalRow, now: () => number) => {
  if (g.activeSince !== null) g.activeMs += now() - g.activeSince;
  g.activeSince = null;
};

export const budgetLeft = (g: GoalRow, now: () => number) => ({
  turns: Math.max(0, g.maxTurns - g.turns),
  minutes: Math.max(0, Math.round((g.maxMinutes - minutesUsed(g, now)) * 10) / 10),
});

/** The turns or the minutes of the budget are used up. */
export const spent = (g: GoalRow, now: () => number) =>
  g.turns >= g.maxTurns || minutesUsed(g, now) >= g.maxMinutes;

export const goalJson = (g: GoalRow, now: () => number): GoalJson => ({
  goalId: g.id,
  sessionId: g.sessionId,
  objective: g.objective,
  status: g.status,
  ...(g.reason !== null ? { reason: g.reason } : {}),
  maxTurns: g.maxTurns,
  maxMinutes: g.maxMinutes,
  turns: g.turns,
  minutesUsed: Math.round(minutesUsed(g, now) * 100) / 100,
  checkpoints: g.checkpoints,
  pauseGatePending: g.gate !== null,
  ...(g.withheld !== null ? { doneWithheld: g.withheld } : {}),
  createdAt: iso(g.createdAt),
  updatedAt: iso(g.updatedAt),
  ...(g.finishedAt !== null ? { finishedAt: iso(g.finishedAt) } : {}),
});
