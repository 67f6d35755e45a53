/**
 * Goals (docs/ARCHITECTURE.md, "Goals, orchestration, memory"): one persistent objective per session that keeps its agent working across
 * turns. While a goal is active, every finished turn of the session is read for the agent's
 * `/goal ...` lines (goal_lines.ts) and, unless the goal ended, followed after a short delay
 * (`goalDelaySeconds`) by a continuation prompt built from the objective, the last checkpoint and
 * the budget left. Durable in the agents store (table `goals`): an active goal goes on after a
 * restart.
 *
 * Rules worth knowing:
 * - `/goal done` counts only after a checkpoint whose evidence paths all exist under the
 *   session's cwd (symlinks may not lead out of it); otherwise `goal_done_withheld` and the next
 *   prompt says why. The user's `done` route needs no evidence.
 * - The pause gate: an agent's first `/goal pause` arms it (`goal_pause_gate_pending`, the goal
 *   stays active and the next prompt asks again); a second one in the next turn pauses the goal
 *   (`goal_pause_detected`). A turn without a pause disarms the gate.
 * - Budget: `maxTurns` finished turns or `maxMinutes` of active time, whichever comes first, pauses
 *   the goal with reason `budget`; `resume` may raise either. `MAX_GOAL_TURNS` caps any budget.
 * - A turn the user cancelled pauses the goal (`run_cancelled`): a person stepped in. Three failed
 *   turns in a row pause it (`errors`).
 *
 * Events (topic `goal`, each with `{sessionId, goalId}`): `goal_started`, `goal_checkpoint`,
 * `goal_continue`, `goal_done_withheld`, `goal_pause_gate_pending`, `goal_pause_detected`,
 * `goal_paused`, `goal_resumed`, `goal_done`, `goal_cancel`.
 *
 * @example
 * ```ts
 * import { createGoals } from "./goals.ts";
 * const goals = createGoals({ service, bus });
 * goals.create(sessionId, { objective: "make the tests pass", maxTurns: 10 });
 * // ... the agent answers "/goal checkpoint all green [evidence: test.log]" then "/goal done"
 * console.log(goals.get(sessionId).status); // "done"
 * await goals.close();
 * ```
 * @module
 */
import { isAbsolute, relative, resolve } from "node:path";
import type { SQLInputValue } from "node:sqlite";
import type { EventBus } from "../events/bus.ts";
import { type GoalLine, parseGoalLines } from "./goal_lines.ts";
import { type AgentService, AgentServiceError, type TurnEnd } from "./sessions.ts";

export const MAX_GOAL_TURNS = 200;
export const MAX_GOAL_MINUTES = 7 * 24 * 60;
export const DEFAULT_GOAL_TURNS = 20;
export const DEFAULT_GOAL_MINUTES = 120;
export const MAX_OBJECTIVE_CHARS = 8000;
/** Failed turns in a row that pause a goal. */
const MAX_FAILED_TURNS = 3;
const MAX_CHECKPOINTS = 200;

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

export type GoalInput = { objective: string; maxTurns?: number; maxMinutes?: number };

export type Goals = {
  create(sessionId: string, input: GoalInput): GoalJson;
  /** The session's newest goal (404 when it never had one). */
  get(sessionId: string): GoalJson;
  pause(sessionId: string): GoalJson;
  resume(sessionId: string, budget?: { maxTurns?: number; maxMinutes?: number }): GoalJson;
  cancel(sessionId: string, reason?: string): GoalJson;
  done(sessionId: string): GoalJson;
  checkpoint(sessionId: string, input: { summary: string; evidence?: string[] }): GoalJson;
  /** Stops the timers; active goals stay active in the store for the next start. */
  close(): void;
};

export type GoalsOptions = {
  service: AgentService;
  bus: EventBus;
  now?: () => number;
  /** Delay before a continuation prompt; default the config's `goalDelaySeconds`. */
  delayMs?: number;
};

type GoalRow = {
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

const iso = (ms: number) => new Date(ms).toISOString();
const bad = (message: string) => new AgentServiceError("BAD_REQUEST", 400, message);
const conflict = (message: string) => new AgentServiceError("CONFLICT", 409, message);

/** Resolves `path` against `cwd` and refuses one that leads outside it. */
export function evidencePath(cwd: string, path: string): string {
  if (!path || path.includes("\0")) throw bad("evidence paths must be non-empty, without NUL");
  const abs = resolve(cwd, path);
  const rel = relative(cwd, abs);
  if (rel.startsWith("..") || isAbsolute(rel)) {
    throw bad(`evidence path ${path} is outside the session's cwd ${cwd}`);
  }
  return abs;
}

/** Why a checkpoint's evidence does not hold (null: every path exists inside `cwd`). */
export function missingEvidence(cwd: string, checkpoint: Checkpoint | undefined): string | null {
  if (!checkpoint) return "no checkpoint has been recorded yet";
  if (checkpoint.evidence.length === 0) {
    return `the last checkpoint ("${checkpoint.summary}") names no evidence files`;
  }
  let realCwd: string;
  try {
    realCwd = Deno.realPathSync(cwd);
  } catch {
    return `the session's cwd ${cwd} no longer exists`;
  }
  const missing: string[] = [];
  for (const p of checkpoint.evidence) {
    try {
      const real = Deno.realPathSync(evidencePath(cwd, p));
      const rel = relative(realCwd, real);
      if (rel.startsWith("..") || isAbsolute(rel)) missing.push(`${p} (outside the cwd)`);
    } catch (err) {
      missing.push(err instanceof AgentServiceError ? `${p} (outside the cwd)` : p);
    }
  }
  return missing.length
    ? `evidence of the last checkpoint does not exist: ${missing.join(", ")}`
    : null;
}

function checkObjective(objective: string) {
  if (!objective.trim()) throw bad("objective must not be empty");
  if (objective.includes("\0")) throw bad("objective must not contain NUL characters");
  if (objective.length > MAX_OBJECTIVE_CHARS) {
    throw bad(`objective must be at most ${MAX_OBJECTIVE_CHARS} characters`);
  }
}

function checkBudget(b: { maxTurns?: number; maxMinutes?: number }) {
  if (
    b.maxTurns !== undefined &&
    !(Number.isInteger(b.maxTurns) && b.maxTurns >= 1 && b.maxTurns <= MAX_GOAL_TURNS)
  ) {
    throw bad(`maxTurns must be an integer from 1 to ${MAX_GOAL_TURNS}`);
  }
  if (b.maxMinutes !== undefined && !(b.maxMinutes > 0 && b.maxMinutes <= MAX_GOAL_MINUTES)) {
    throw bad(`maxMinutes must be more than 0 and at most ${MAX_GOAL_MINUTES}`);
  }
}

// No line of the help starts with "/goal": an agent that quotes it back must not trigger it.
const DIRECTIVES_HELP = [
  "Speak to the goal with lines of their own in your answer, each starting with /goal:",
  "- progress, with files under your working directory that show it: " +
  "/goal checkpoint SUMMARY [evidence: PATH, ...]",
  "- the objective is met (counts only after a checkpoint whose evidence files exist): /goal done",
  "- you need a person (asked twice, the goal pauses): /goal pause REASON",
  "- the objective cannot or should not be reached: /goal cancel REASON",
].join("\n");

/** Opens the goals table, resumes active goals and follows the service's turns. */
export function createGoals(opts: GoalsOptions): Goals {
  const { service, bus } = opts;
  const now = opts.now ?? Date.now;
  const delayMs = opts.delayMs ?? service.config.goalDelaySeconds * 1000;
  const db = service.db;
  db.exec(SCHEMA);
  const timers = new Map<string, ReturnType<typeof setTimeout>>();
  let closed = false;

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
  const latest = (sessionId: string): GoalRow | undefined => {
    const r = db.prepare(
      "SELECT * FROM goals WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
    ).get(sessionId) as Record<string, SQLInputValue> | undefined;
    return r && toRow(r);
  };
  const activeRows = () =>
    db.prepare("SELECT * FROM goals WHERE status = 'active'").all() as Record<
      string,
      SQLInputValue
    >[];
  const save = (g: GoalRow) => {
    g.updatedAt = now();
    const keys = Object.keys(COLUMNS) as (keyof GoalRow)[];
    const values = keys.map((k) =>
      k === "checkpoints" ? JSON.stringify(g.checkpoints) : g[k] as SQLInputValue
    );
    db.prepare(
      `INSERT OR REPLACE INTO goals (${keys.map((k) => COLUMNS[k]).join(", ")})
       VALUES (${keys.map(() => "?").join(", ")})`,
    ).run(...values);
  };

  const minutesUsed = (g: GoalRow) =>
    (g.activeMs + (g.activeSince !== null ? now() - g.activeSince : 0)) / 60_000;
  const json = (g: GoalRow): GoalJson => ({
    goalId: g.id,
    sessionId: g.sessionId,
    objective: g.objective,
    status: g.status,
    ...(g.reason !== null ? { reason: g.reason } : {}),
    maxTurns: g.maxTurns,
    maxMinutes: g.maxMinutes,
    turns: g.turns,
    minutesUsed: Math.round(minutesUsed(g) * 100) / 100,
    checkpoints: g.checkpoints,
    pauseGatePending: g.gate !== null,
    ...(g.withheld !== null ? { doneWithheld: g.withheld } : {}),
    createdAt: iso(g.createdAt),
    updatedAt: iso(g.updatedAt),
    ...(g.finishedAt !== null ? { finishedAt: iso(g.finishedAt) } : {}),
  });
  const publish = (g: GoalRow, event: string, fields: Record<string, unknown> = {}) =>
    bus.publish("goal", event, { sessionId: g.sessionId, goalId: g.id, ...fields });

  const stopClock = (g: GoalRow) => {
    if (g.activeSince !== null) g.activeMs += now() - g.activeSince;
    g.activeSince = null;
  };
  const disarm = (g: GoalRow) => {
    clearTimeout(timers.get(g.id));
    timers.delete(g.id);
  };
  /** Ends or pauses a goal: the clock stops and no further prompt goes out. */
  const settle = (g: GoalRow, status: GoalStatus, reason: string) => {
    disarm(g);
    stopClock(g);
    g.status = status;
    g.reason = reason;
    g.gate = null;
    if (status === "done" || status === "cancelled") g.finishedAt = now();
    save(g);
  };

  const budgetLeft = (g: GoalRow) => ({
    turns: Math.max(0, g.maxTurns - g.turns),
    minutes: Math.max(0, Math.round((g.maxMinutes - minutesUsed(g)) * 10) / 10),
  });
  const spent = (g: GoalRow) => g.turns >= g.maxTurns || minutesUsed(g) >= g.maxMinutes;
  const pauseForBudget = (g: GoalRow) => {
    const detail = g.turns >= g.maxTurns
      ? `${g.turns} of ${g.maxTurns} turns used`
      : `${Math.round(minutesUsed(g) * 10) / 10} of ${g.maxMinutes} minutes used`;
    settle(g, "paused", "budget");
    publish(g, "goal_paused", { reason: "budget", detail, turns: g.turns });
  };

  function prompt(g: GoalRow, first: boolean): string {
    const left = budgetLeft(g);
    const budget = `Budget left: ${left.turns} turn(s), ${left.minutes} minute(s).`;
    if (first) {
      return [
        `Goal: ${g.objective}`,
        "",
        `You will work on this goal over several turns. ${budget}`,
      ]
        .concat(["", DIRECTIVES_HELP]).join("\n");
    }
    const last = g.checkpoints.at(-1);
    const lines = [`Continue working on the goal: ${g.objective}`, ""];
    lines.push(
      last
        ? `Last checkpoint: ${last.summary}${
          last.evidence.length ? ` (evidence: ${last.evidence.join(", ")})` : ""
        }`
        : "No checkpoint recorded yet.",
    );
    lines.push(budget);
    if (g.withheld) {
      lines.push(
        "",
        `Your /goal done was not accepted: ${g.withheld}. Record a checkpoint whose evidence ` +
          "files exist, then say /goal done again.",
      );
    }
    if (g.gate !== null) {
      lines.push(
        "",
        `You asked to pause${g.gate ? ` (${g.gate})` : ""}. If you still need a person, answer ` +
          "/goal pause again; otherwise go on.",
      );
    }
    lines.push("", DIRECTIVES_HELP);
    return lines.join("\n");
  }

  /** Sends the next prompt now if the session is free; a busy session calls back at its turn end. */
  function send(g: GoalRow, first: boolean) {
    if (closed || service.isBusy(g.sessionId)) return;
    if (!first && spent(g)) return pauseForBudget(g);
    try {
      service.sendMessage(g.sessionId, prompt(g, first), { goalId: g.id });
    } catch (err) {
      settle(g, "paused", "error");
      publish(g, "goal_paused", { reason: "error", detail: (err as Error).message });
      return;
    }
    if (!first) {
      const left = budgetLeft(g);
      publish(g, "goal_continue", {
        turns: g.turns,
        turn: g.turns + 1,
        turnsLeft: left.turns,
        minutesLeft: left.minutes,
      });
    }
  }

  function schedule(goalId: string) {
    disarm({ id: goalId } as GoalRow);
    const t = setTimeout(() => {
      timers.delete(goalId);
      const g = byId(goalId);
      if (g?.status === "active") send(g, false);
    }, delayMs);
    timers.set(goalId, t);
  }

  const byId = (id: string): GoalRow | undefined => {
    const r = db.prepare("SELECT * FROM goals WHERE id = ?").get(id) as
      | Record<string, SQLInputValue>
      | undefined;
    return r && toRow(r);
  };

  const requireGoal = (sessionId: string): GoalRow => {
    service.getSession(sessionId); // 404 for an unknown session
    const g = latest(sessionId);
    if (!g) {
      throw new AgentServiceError("NOT_FOUND", 404, `session ${sessionId} has no goal`);
    }
    return g;
  };
  const requireOpen = (sessionId: string, action: string): GoalRow => {
    const g = requireGoal(sessionId);
    if (g.status === "done" || g.status === "cancelled") {
      throw conflict(`cannot ${action}: the goal of session ${sessionId} is already ${g.status}`);
    }
    return g;
  };

  /** Applies one finished turn's lines; returns false once the goal is no longer active. */
  function applyLines(g: GoalRow, cwd: string, lines: GoalLine[]): boolean {
    let paused = false;
    for (const line of lines) {
      switch (line.kind) {
        case "checkpoint": {
          const evidence = line.evidence.filter((p) => {
            try {
              evidencePath(cwd, p);
              return true;
            } catch {
              return false;
            }
          });
          addCheckpoint(g, { summary: line.summary, evidence, by: "agent", at: iso(now()) });
          break;
        }
        case "done": {
          const why = missingEvidence(cwd, g.checkpoints.at(-1));
          if (why) {
            g.withheld = why;
            save(g);
            publish(g, "goal_done_withheld", { reason: why });
            break;
          }
          g.withheld = null;
          const last = g.checkpoints.at(-1)!;
          settle(g, "done", "agent");
          publish(g, "goal_done", {
            by: "agent",
            turns: g.turns,
            summary: last.summary,
            evidence: last.evidence,
          });
          return false;
        }
        case "pause":
          paused = true;
          if (g.gate !== null) {
            settle(g, "paused", `agent: ${line.reason || "no reason given"}`);
            publish(g, "goal_pause_detected", { reason: line.reason, turns: g.turns });
            return false;
          }
          g.gate = line.reason;
          save(g);
          publish(g, "goal_pause_gate_pending", { reason: line.reason });
          // The gate opens on the next turn's answer, not on a repeat within this one.
          return finishTurn(g, true);
        case "cancel":
          settle(g, "cancelled", `agent: ${line.reason || "no reason given"}`);
          publish(g, "goal_cancel", { by: "agent", reason: line.reason });
          return false;
      }
    }
    return finishTurn(g, paused);
  }

  function finishTurn(g: GoalRow, paused: boolean): boolean {
    if (!paused && g.gate !== null) {
      g.gate = null;
      save(g);
    }
    return true;
  }

  function addCheckpoint(g: GoalRow, c: Checkpoint) {
    g.checkpoints.push(c);
    if (g.checkpoints.length > MAX_CHECKPOINTS) g.checkpoints.splice(0, 1);
    save(g);
    publish(g, "goal_checkpoint", { summary: c.summary, evidence: c.evidence, by: c.by });
  }

  function onTurnEnd(end: TurnEnd) {
    if (closed) return;
    const g = latest(end.sessionId);
    if (!g || g.status !== "active") return;
    g.turns++;
    const { result } = end;
    if (result.errorKind === "cancelled") {
      settle(g, "paused", "run_cancelled");
      publish(g, "goal_paused", { reason: "run_cancelled", turns: g.turns });
      return;
    }
    if (!result.ok) {
      g.failures++;
      save(g);
      if (g.failures >= MAX_FAILED_TURNS) {
        settle(g, "paused", "errors");
        publish(g, "goal_paused", {
          reason: "errors",
          detail: `${g.failures} failed turns in a row; last: ${result.error}`,
          turns: g.turns,
        });
        return;
      }
    } else {
      g.failures = 0;
      save(g);
      let cwd: string;
      try {
        cwd = service.getSession(end.sessionId).cwd;
      } catch {
        return;
      }
      if (!applyLines(g, cwd, parseGoalLines(result.text))) return;
    }
    if (g.turns >= MAX_GOAL_TURNS || spent(g)) return pauseForBudget(g);
    schedule(g.id);
  }

  const unsubscribe = service.onTurnEnd(onTurnEnd);
  // A cancel between two turns (the continuation still waiting) is a person stepping in too.
  const unsubscribeCancel = service.onCancel((sessionId) => {
    const g = latest(sessionId);
    if (!g || g.status !== "active" || !timers.has(g.id) || service.isBusy(sessionId)) {
      return false;
    }
    settle(g, "paused", "run_cancelled");
    publish(g, "goal_paused", { reason: "run_cancelled", turns: g.turns });
    return true;
  });

  // Active goals go on where they stopped: the clock restarts now, the next prompt follows.
  for (
    const r of activeRows()
  ) {
    const g = toRow(r);
    let exists = true;
    try {
      service.getSession(g.sessionId);
    } catch {
      exists = false;
    }
    if (!exists) {
      settle(g, "cancelled", "session deleted");
      continue;
    }
    g.activeSince = now();
    save(g);
    schedule(g.id);
  }

  return {
    create(sessionId, input) {
      service.getSession(sessionId);
      checkObjective(input.objective);
      checkBudget(input);
      const open = latest(sessionId);
      if (open && (open.status === "active" || open.status === "paused")) {
        throw conflict(
          `session ${sessionId} already has a goal that is ${open.status} (${open.id}); cancel it or ` +
            "mark it done first",
        );
      }
      const at = now();
      const g: GoalRow = {
        id: crypto.randomUUID(),
        sessionId,
        objective: input.objective,
        status: "active",
        reason: null,
        maxTurns: input.maxTurns ?? DEFAULT_GOAL_TURNS,
        maxMinutes: input.maxMinutes ?? DEFAULT_GOAL_MINUTES,
        turns: 0,
        activeMs: 0,
        activeSince: at,
        gate: null,
        withheld: null,
        failures: 0,
        checkpoints: [],
        createdAt: at,
        updatedAt: at,
        finishedAt: null,
      };
      save(g);
      publish(g, "goal_started", {
        objective: g.objective,
        maxTurns: g.maxTurns,
        maxMinutes: g.maxMinutes,
      });
      send(g, true);
      return json(g);
    },

    get: (sessionId) => json(requireGoal(sessionId)),

    pause(sessionId) {
      const g = requireOpen(sessionId, "pause");
      if (g.status !== "active") throw conflict(`the goal of session ${sessionId} is not active`);
      settle(g, "paused", "user");
      publish(g, "goal_paused", { reason: "user", turns: g.turns });
      return json(g);
    },

    resume(sessionId, budget = {}) {
      const g = requireOpen(sessionId, "resume");
      if (g.status !== "paused") throw conflict(`the goal of session ${sessionId} is not paused`);
      checkBudget(budget);
      if (budget.maxTurns !== undefined) g.maxTurns = budget.maxTurns;
      if (budget.maxMinutes !== undefined) g.maxMinutes = budget.maxMinutes;
      if (spent(g)) {
        throw conflict(
          `the goal's budget is spent (${g.turns}/${g.maxTurns} turns, ` +
            `${Math.round(minutesUsed(g) * 10) / 10}/${g.maxMinutes} minutes); resume with a ` +
            "larger maxTurns or maxMinutes",
        );
      }
      g.status = "active";
      g.reason = null;
      g.gate = null;
      g.failures = 0;
      g.activeSince = now();
      save(g);
      publish(g, "goal_resumed", { maxTurns: g.maxTurns, maxMinutes: g.maxMinutes });
      send(g, false);
      return json(g);
    },

    cancel(sessionId, reason) {
      const g = requireOpen(sessionId, "cancel");
      settle(g, "cancelled", reason ? `user: ${reason}` : "user");
      publish(g, "goal_cancel", { by: "user", reason: reason ?? "" });
      return json(g);
    },

    done(sessionId) {
      const g = requireOpen(sessionId, "mark done");
      settle(g, "done", "user");
      const last = g.checkpoints.at(-1);
      publish(g, "goal_done", {
        by: "user",
        turns: g.turns,
        ...(last ? { summary: last.summary, evidence: last.evidence } : {}),
      });
      return json(g);
    },

    checkpoint(sessionId, input) {
      const g = requireOpen(sessionId, "record a checkpoint");
      const cwd = service.getSession(sessionId).cwd;
      if (!input.summary.trim()) throw bad("summary must not be empty");
      const evidence = input.evidence ?? [];
      for (const p of evidence) evidencePath(cwd, p);
      addCheckpoint(g, { summary: input.summary, evidence, by: "user", at: iso(now()) });
      return json(g);
    },

    close() {
      if (closed) return;
      closed = true;
      unsubscribe();
      unsubscribeCancel();
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
      // The clock stops while no server runs the goal.
      for (
        const r of activeRows()
      ) {
        const g = toRow(r);
        stopClock(g);
        save(g);
      }
    },
  };
}
