/**
 * How a goal (goals.ts) follows its session's turns: the goals' state (`GoalsCtx`, passed to every
 * function here), each finished turn read for the agent's `/goal` lines (checkpoints, a `done`
 * that counts only with evidence, the two-step pause gate, cancel), the budget and the failures
 * that pause a goal, and the continuation prompt sent after `delayMs` while it stays active.
 *
 * @example
 * ```ts ignore
 * import { onTurnEnd, sendPrompt } from "./goals_turns.ts";
 * sendPrompt(ctx, g, true); // the first prompt of a new goal
 * const off = ctx.service.onTurnEnd((end) => onTurnEnd(ctx, end));
 * ```
 * @module
 */
import type { EventBus } from "../events/bus.ts";
import { evidencePath, missingEvidence } from "./goal_evidence.ts";
import { type GoalLine, parseGoalLines } from "./goal_lines.ts";
import {
  budgetLeft,
  type Checkpoint,
  type GoalRow,
  type GoalStatus,
  type GoalTable,
  iso,
  minutesUsed,
  spent,
  stopClock,
} from "./goals_store.ts";
import type { AgentService, TurnEnd } from "./sessions.ts";

export const MAX_GOAL_TURNS = 200;
/** Failed turns in a row that pause a goal. */
const MAX_FAILED_TURNS = 3;
const MAX_CHECKPOINTS = 200;

/** The goals' state. */
export type GoalsCtx = {
  service: AgentService;
  bus: EventBus;
  table: GoalTable;
  now: () => number;
  /** Delay before a continuation prompt. */
  delayMs: number;
  /** Continuation prompts waiting for their delay, by goal id. */
  timers: Map<string, ReturnType<typeof setTimeout>>;
  /** Set by `close`: no further prompt goes out. */
  closed: boolean;
};

// No line of the help starts with "/goal": an agent that quotes it back must not trigger it.
const DIRECTIVES_HELP = [
  "Speak to the goal with lines of their own in your answer, each starting with /goal:",
  "- progress, with files under your working directory that show it: " +
  "/goal checkpoint SUMMARY [evidence: PATH, ...]",
  "- the objective is met (counts only after a checkpoint whose evidence files exist): /goal done",
  "- you need a person (asked twice, the goal pauses): /goal pause REASON",
  "- the objective cannot or should not be reached: /goal cancel REASON",
].join("\n");

export const publish = (
  ctx: GoalsCtx,
  g: GoalRow,
  event: string,
  fields: Record<string, unknown> = {},
) => ctx.bus.publish("goal", event, { sessionId: g.sessionId, goalId: g.id, ...fields });

const disarm = (ctx: GoalsCtx, goalId: string) => {
  clearTimeout(ctx.timers.get(goalId));
  ctx.timers.delete(goalId);
};

/** Ends or pauses a goal: the clock stops and no further prompt goes out. */
export const settle = (ctx: GoalsCtx, g: GoalRow, status: GoalStatus, reason: string) => {
  disarm(ctx, g.id);
  stopClock(g, ctx.now);
  g.status = status;
  g.reason = reason;
  g.gate = null;
  if (status === "done" || status === "cancelled") g.finishedAt = ctx.now();
  ctx.table.save(g);
};

const pauseForBudget = (ctx: GoalsCtx, g: GoalRow) => {
  const detail = g.turns >= g.maxTurns
    ? `${g.turns} of ${g.maxTurns} turns used`
    : `${Math.round(minutesUsed(g, ctx.now) * 10) / 10} of ${g.maxMinutes} minutes used`;
  settle(ctx, g, "paused", "budget");
  publish(ctx, g, "goal_paused", { reason: "budget", detail, turns: g.turns });
};

function prompt(ctx: GoalsCtx, g: GoalRow, first: boolean): string {
  const left = budgetLeft(g, ctx.now);
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
export function sendPrompt(ctx: GoalsCtx, g: GoalRow, first: boolean) {
  if (ctx.closed || ctx.service.isBusy(g.sessionId)) return;
  if (!first && spent(g, ctx.now)) return pauseForBudget(ctx, g);
  try {
    ctx.service.sendMessage(g.sessionId, prompt(ctx, g, first), { goalId: g.id });
  } catch (err) {
    settle(ctx, g, "paused", "error");
    publish(ctx, g, "goal_paused", { reason: "error", detail: (err as Error).message });
    return;
  }
  if (!first) {
    const left = budgetLeft(g, ctx.now);
    publish(ctx, g, "goal_continue", {
      turns: g.turns,
      turn: g.turns + 1,
      turnsLeft: left.turns,
      minutesLeft: left.minutes,
    });
  }
}

/** Sends the continuation prompt after the delay, if the goal is still active then. */
export function schedule(ctx: GoalsCtx, goalId: string) {
  disarm(ctx, goalId);
  const t = setTimeout(() => {
    ctx.timers.delete(goalId);
    const g = ctx.table.byId(goalId);
    if (g?.status === "active") sendPrompt(ctx, g, false);
  }, ctx.delayMs);
  ctx.timers.set(goalId, t);
}

export function addCheckpoint(ctx: GoalsCtx, g: GoalRow, c: Checkpoint) {
  g.checkpoints.push(c);
  if (g.checkpoints.length > MAX_CHECKPOINTS) g.checkpoints.splice(0, 1);
  ctx.table.save(g);
  publish(ctx, g, "goal_checkpoint", { summary: c.summary, evidence: c.evidence, by: c.by });
}

/** Applies one finished turn's lines; returns false once the goal is no longer active. */
function applyLines(ctx: GoalsCtx, g: GoalRow, cwd: string, lines: GoalLine[]): boolean {
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
        addCheckpoint(ctx, g, {
          summary: line.summary,
          evidence,
          by: "agent",
          at: iso(ctx.now()),
        });
        break;
      }
      case "done": {
        const why = missingEvidence(cwd, g.checkpoints.at(-1));
        if (why) {
          g.withheld = why;
          ctx.table.save(g);
          publish(ctx, g, "goal_done_withheld", { reason: why });
          break;
        }
        g.withheld = null;
        const last = g.checkpoints.at(-1)!;
        settle(ctx, g, "done", "agent");
        publish(ctx, g, "goal_done", {
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
          settle(ctx, g, "paused", `agent: ${line.reason || "no reason given"}`);
          publish(ctx, g, "goal_pause_detected", { reason: line.reason, turns: g.turns });
          return false;
        }
        g.gate = line.reason;
        ctx.table.save(g);
        publish(ctx, g, "goal_pause_gate_pending", { reason: line.reason });
        // The gate opens on the next turn's answer, not on a repeat within this one.
        return finishTurn(ctx, g, true);
      case "cancel":
        settle(ctx, g, "cancelled", `agent: ${line.reason || "no reason given"}`);
        publish(ctx, g, "goal_cancel", { by: "agent", reason: line.reason });
        return false;
    }
  }
  return finishTurn(ctx, g, paused);
}

function finishTurn(ctx: GoalsCtx, g: GoalRow, paused: boolean): boolean {
  if (!paused && g.gate !== null) {
    g.gate = null;
    ctx.table.save(g);
  }
  return true;
}

/** Counts a finished turn of the session against its active goal and decides what follows. */
export function onTurnEnd(ctx: GoalsCtx, end: TurnEnd) {
  if (ctx.closed) return;
  const g = ctx.table.latest(end.sessionId);
  if (!g || g.status !== "active") return;
  g.turns++;
  const { result } = end;
  if (result.errorKind === "cancelled") {
    settle(ctx, g, "paused", "run_cancelled");
    publish(ctx, g, "goal_paused", { reason: "run_cancelled", turns: g.turns });
    return;
  }
  if (!result.ok) {
    g.failures++;
    ctx.table.save(g);
    if (g.failures >= MAX_FAILED_TURNS) {
      settle(ctx, g, "paused", "errors");
      publish(ctx, g, "goal_paused", {
        reason: "errors",
        detail: `${g.failures} failed turns in a row; last: ${result.error}`,
        turns: g.turns,
      });
      return;
    }
  } else {
    g.failures = 0;
    ctx.table.save(g);
    let cwd: string;
    try {
      cwd = ctx.service.getSession(end.sessionId).cwd;
    } catch {
      return;
    }
    if (!applyLines(ctx, g, cwd, parseGoalLines(result.text))) return;
  }
  if (g.turns >= MAX_GOAL_TURNS || spent(g, ctx.now)) return pauseForBudget(ctx, g);
  schedule(ctx, g.id);
}

/**
 * A cancel of the session between two turns (its continuation still waiting) is a person stepping
 * in too: the goal pauses. True when it did.
 */
export function onCancelBetweenTurns(ctx: GoalsCtx, sessionId: string): boolean {
  const g = ctx.table.latest(sessionId);
  if (!g || g.status !== "active" || !ctx.timers.has(g.id) || ctx.service.isBusy(sessionId)) {
    return false;
  }
  settle(ctx, g, "paused", "run_cancelled");
  publish(ctx, g, "goal_paused", { reason: "run_cancelled", turns: g.turns });
  return true;
}
