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
 * The parts: the record and its table (goals_store.ts), the evidence rules (goal_evidence.ts), how
 * a goal follows its session's turns (goals_turns.ts); this module holds the routes' operations.
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
import type { EventBus } from "../events/bus.ts";
import {
  type GoalJson,
  goalJson,
  type GoalRow,
  iso,
  minutesUsed,
  openGoalTable,
  spent,
  stopClock,
} from "./goals_store.ts";
import { evidencePath } from "./goal_evidence.ts";
import {
  addCheckpoint,
  type GoalsCtx,
  MAX_GOAL_TURNS,
  onCancelBetweenTurns,
  onTurnEnd,
  publish,
  schedule,
  sendPrompt,
  settle,
} from "./goals_turns.ts";
import { type AgentService, AgentServiceError } from "./sessions.ts";

export { evidencePath, missingEvidence } from "./goal_evidence.ts";
export type { Checkpoint, GoalJson, GoalStatus } from "./goals_store.ts";
export { MAX_GOAL_TURNS } from "./goals_turns.ts";

export const MAX_GOAL_MINUTES = 7 * 24 * 60;
export const DEFAULT_GOAL_TURNS = 20;
export const DEFAULT_GOAL_MINUTES = 120;
export const MAX_OBJECTIVE_CHARS = 8000;

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

const bad = (message: string) => new AgentServiceError("BAD_REQUEST", 400, message);
const conflict = (message: string) => new AgentServiceError("CONFLICT", 409, message);

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

/** Active goals go on where they stopped: the clock restarts now, the next prompt follows. */
function resumeActive(ctx: GoalsCtx) {
  for (const g of ctx.table.active()) {
    let exists = true;
    try {
      ctx.service.getSession(g.sessionId);
    } catch {
      exists = false;
    }
    if (!exists) {
      settle(ctx, g, "cancelled", "session deleted");
      continue;
    }
    g.activeSince = ctx.now();
    ctx.table.save(g);
    schedule(ctx, g.id);
  }
}

/** Opens the goals table, resumes active goals and follows the service's turns. */
export function createGoals(opts: GoalsOptions): Goals {
  const { service } = opts;
  const now = opts.now ?? Date.now;
  const table = openGoalTable(service.db, now);
  const ctx: GoalsCtx = {
    service,
    bus: opts.bus,
    table,
    now,
    delayMs: opts.delayMs ?? service.config.goalDelaySeconds * 1000,
    timers: new Map(),
    closed: false,
  };
  const json = (g: GoalRow) => goalJson(g, now);

  const requireGoal = (sessionId: string): GoalRow => {
    service.getSession(sessionId); // 404 for an unknown session
    const g = table.latest(sessionId);
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

  const unsubscribe = service.onTurnEnd((end) => onTurnEnd(ctx, end));
  // A cancel between two turns (the continuation still waiting) is a person stepping in too.
  const unsubscribeCancel = service.onCancel((sessionId) => onCancelBetweenTurns(ctx, sessionId));

  resumeActive(ctx);

  return {
    create(sessionId, input) {
      service.getSession(sessionId);
      checkObjective(input.objective);
      checkBudget(input);
      const open = table.latest(sessionId);
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
      table.save(g);
      publish(ctx, g, "goal_started", {
        objective: g.objective,
        maxTurns: g.maxTurns,
        maxMinutes: g.maxMinutes,
      });
      sendPrompt(ctx, g, true);
      return json(g);
    },

    get: (sessionId) => json(requireGoal(sessionId)),

    pause(sessionId) {
      const g = requireOpen(sessionId, "pause");
      if (g.status !== "active") throw conflict(`the goal of session ${sessionId} is not active`);
      settle(ctx, g, "paused", "user");
      publish(ctx, g, "goal_paused", { reason: "user", turns: g.turns });
      return json(g);
    },

    resume(sessionId, budget = {}) {
      const g = requireOpen(sessionId, "resume");
      if (g.status !== "paused") throw conflict(`the goal of session ${sessionId} is not paused`);
      checkBudget(budget);
      if (budget.maxTurns !== undefined) g.maxTurns = budget.maxTurns;
      if (budget.maxMinutes !== undefined) g.maxMinutes = budget.maxMinutes;
      if (spent(g, now)) {
        throw conflict(
          `the goal's budget is spent (${g.turns}/${g.maxTurns} turns, ` +
            `${
              Math.round(minutesUsed(g, now) * 10) / 10
            }/${g.maxMinutes} minutes); resume with a ` +
            "larger maxTurns or maxMinutes",
        );
      }
      g.status = "active";
      g.reason = null;
      g.gate = null;
      g.failures = 0;
      g.activeSince = now();
      table.save(g);
      publish(ctx, g, "goal_resumed", { maxTurns: g.maxTurns, maxMinutes: g.maxMinutes });
      sendPrompt(ctx, g, false);
      return json(g);
    },

    cancel(sessionId, reason) {
      const g = requireOpen(sessionId, "cancel");
      settle(ctx, g, "cancelled", reason ? `user: ${reason}` : "user");
      publish(ctx, g, "goal_cancel", { by: "user", reason: reason ?? "" });
      return json(g);
    },

    done(sessionId) {
      const g = requireOpen(sessionId, "mark done");
      settle(ctx, g, "done", "user");
      const last = g.checkpoints.at(-1);
      publish(ctx, g, "goal_done", {
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
      addCheckpoint(ctx, g, { summary: input.summary, evidence, by: "user", at: iso(now()) });
      return json(g);
    },

    close() {
      if (ctx.closed) return;
      ctx.closed = true;
      unsubscribe();
      unsubscribeCancel();
      for (const t of ctx.timers.values()) clearTimeout(t);
      ctx.timers.clear();
      // The clock stops while no server runs the goal.
      for (const g of table.active()) {
        stopClock(g, now);
        table.save(g);
      }
    },
  };
}
