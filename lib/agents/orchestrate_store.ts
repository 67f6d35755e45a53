/**
 * The record of an orchestration run (orchestrate.ts) and its table in the agents store: one JSON
 * record per run in `orchestrations`, rewritten on every change, so a run cut by a restart can go
 * on where it stopped. The stored record holds what a resume needs beyond the public one (the
 * working directory, which fallbacks each step already tried); `toJson` leaves that out.
 *
 * @example
 * ```ts
 * import { DatabaseSync } from "node:sqlite";
 * import { openRunTable, toJson } from "./orchestrate_store.ts";
 * const table = openRunTable(new DatabaseSync(":memory:"));
 * for (const rec of table.unfinished()) console.log(toJson(rec).state); // "plan" | "build" | "check"
 * ```
 * @module
 */
import type { DatabaseSync, SQLInputValue } from "node:sqlite";

export type OrchestrationState = "plan" | "build" | "check" | "done" | "failed";
export type StepStatus = "pending" | "running" | "done" | "failed";

export type OrchestrationStep = {
  n: number;
  /** What the step is: a line of the plan, or `fix: REASON` in a later round. */
  text: string;
  /** The agent the step runs on now (its fallback after a failure). */
  agent: string;
  /** 1 for the plan's steps; the round of a fix step. */
  round: number;
  sessionId?: string;
  status: StepStatus;
  /** The worker's answer, bounded to ANSWER_CHARS. */
  answer?: string;
  error?: string;
};

export type OrchestrationJson = {
  runId: string;
  /** The parent session the run belongs to. */
  sessionId: string;
  task: string;
  state: OrchestrationState;
  round: number;
  maxRounds: number;
  planner: string;
  workers: string[];
  checker: string;
  steps: OrchestrationStep[];
  verdict?: { pass: boolean; reason?: string };
  /** At the end: the checker's answer, or a summary of the steps. */
  text?: string;
  error?: string;
  plannerSessionId?: string;
  checkerSessionId?: string;
  createdAt: string;
  updatedAt: string;
  finishedAt?: string;
};

export type StepRec = OrchestrationStep & {
  /** Agents this step already failed on, so a fallback chain is walked once. */
  tried: string[];
  /** The one same-agent retry is spent. */
  retried: boolean;
};

/** What is stored: the public record plus what a resume needs. */
export type Rec = Omit<OrchestrationJson, "steps"> & { steps: StepRec[]; cwd: string };

export const FINISHED: ReadonlySet<OrchestrationState> = new Set(["done", "failed"]);

const SCHEMA = `
CREATE TABLE IF NOT EXISTS orchestrations (
  run_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  state TEXT NOT NULL,
  data TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS orchestrations_by_session ON orchestrations (session_id, created_at);
`;

export type RunTable = {
  /** Inserts or rewrites the run's record (its `updatedAt` as it is). */
  write(r: Rec): void;
  one(runId: string): Rec | undefined;
  /** Oldest first. */
  all(): Rec[];
  /** The parent session's runs, oldest first. */
  bySession(sessionId: string): Rec[];
  /** The runs neither done nor failed, oldest first (each parsed as the walk reaches it). */
  unfinished(): Iterable<Rec>;
};

/** A stored row's record; steps of an older record get the resume fields they lack. */
function parse(row: unknown): Rec {
  const rec = JSON.parse((row as Record<string, SQLInputValue>).data as string) as Rec;
  for (const s of rec.steps) {
    s.tried ??= [];
    s.retried ??= false;
  }
  return rec;
}

/** Creates the `orchestrations` table if missing and prepares its statements. */
export function openRunTable(db: DatabaseSync): RunTable {
  db.exec(SCHEMA);
  const upsert = db.prepare(
    `INSERT INTO orchestrations (run_id, session_id, state, data, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT(run_id) DO UPDATE SET
       state = excluded.state, data = excluded.data, updated_at = excluded.updated_at`,
  );
  const selectOne = db.prepare("SELECT data FROM orchestrations WHERE run_id = ?");
  const selectAll = db.prepare("SELECT data FROM orchestrations ORDER BY created_at, run_id");
  const selectBySession = db.prepare(
    "SELECT data FROM orchestrations WHERE session_id = ? ORDER BY created_at, run_id",
  );
  const selectUnfinished = db.prepare(
    `SELECT data FROM orchestrations WHERE state NOT IN ('done', 'failed')
     ORDER BY created_at, run_id`,
  );
  return {
    write(r) {
      upsert.run(
        r.runId,
        r.sessionId,
        r.state,
        JSON.stringify(r),
        Date.parse(r.createdAt),
        Date.parse(r.updatedAt),
      );
    },
    one(runId) {
      const row = selectOne.get(runId);
      return row ? parse(row) : undefined;
    },
    all: () => selectAll.all().map(parse),
    bySession: (sessionId) => selectBySession.all(sessionId).map(parse),
    *unfinished() {
      for (const row of selectUnfinished.all()) yield parse(row);
    },
  };
}

/** The public record: a deep copy without what only a resume needs. */
export function toJson(r: Rec): OrchestrationJson {
  const { cwd: _cwd, steps, ...rest } = r;
  return structuredClone({
    ...rest,
    steps: steps.map(({ tried: _t, retried: _r, ...s }) => s),
  });
}
