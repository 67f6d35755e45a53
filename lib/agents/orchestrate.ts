/**
 * Orchestration (docs/ARCHITECTURE.md, "Goals, orchestration, memory"): one task split across agents. A planner agent answers with a
 * numbered list, workers run the steps (a session each, in parallel up to `maxParallelWorkers`),
 * a checker judges the result (`PASS` or `FAIL: WHY` on its first line) and a `FAIL` sends the
 * work back to build as one fix step, for at most `maxRounds` rounds. Every agent turn goes
 * through `service.runTurn`, so each one is supervised (stall, timeout, retry, transient fallback)
 * like any other session run.
 *
 * Durable in the agents store (table `orchestrations`, one JSON record per run, rewritten on
 * every change): a run cut by a restart goes on where it stopped — planning again, running the
 * steps that were not done (a step that was running re-runs in its own worker session), or
 * checking again — and says so with an `orchestrate_warning`.
 *
 * Events (topic `orchestrate`, each with `{sessionId, runId}` where sessionId is the parent
 * session): `orc_state {state, title, step?, of?}` on every change of state and when each step
 * starts, `orchestrate_warning {message}` for what does not stop the run (a worker fell back, a
 * step retried, no verdict, the last round, a resume), `orchestrate_done {text, error?}` once.
 *
 * Rules worth knowing:
 * - A step whose worker fails (not cancelled) moves to the first agent along its `fallback` chain
 *   not yet tried for that step, in a new session; with none left it is retried once on the same
 *   agent; then the run fails.
 * - Cancelling the parent session (`service.cancel`) stops the run and its workers; a worker turn
 *   cancelled by anyone else fails the run too. Turns stopped by a shutdown (`INTERRUPTED_ERROR`)
 *   never fail anything: the next start resumes.
 *
 * @example
 * ```ts
 * import { createOrchestrator } from "./orchestrate.ts";
 * const orch = createOrchestrator({ service, bus });
 * const run = orch.start(sessionId, { task: "add a README and a LICENSE", workers: ["a", "b"] });
 * orch.get(run.runId).state; // "plan" | "build" | "check" | "done" | "failed"
 * await orch.close(); // before service.close()
 * ```
 * @module
 */
import type { SQLInputValue } from "node:sqlite";
import { z } from "zod";
import type { EventBus } from "../events/bus.ts";
import type { RunResult } from "./run.ts";
import {
  type AgentService,
  AgentServiceError,
  INTERRUPTED_ERROR,
  MAX_TEXT_BYTES,
  MAX_TEXT_CHARS,
  type TurnMeta,
} from "./sessions.ts";

export const MAX_STEPS = 20;
export const MAX_ROUNDS = 10;
export const DEFAULT_MAX_ROUNDS = 3;
/** What a run keeps of a worker's or the checker's answer. */
export const ANSWER_CHARS = 4000;
const STEP_TEXT_CHARS = 1000;
const TITLE_CHARS = 160;
const DEFAULT_PARALLEL = 3;

// Prompt budgets in UTF-8 bytes. A prompt may travel as one argv string (MAX_TEXT_BYTES), and
// the service may put memory notes before it, so every prompt but the planner's stays far below.
const PLANNER_TASK_BYTES = MAX_TEXT_BYTES - 4096;
const TASK_BYTES = 24 * 1024;
const PLAN_BYTES = 12 * 1024;
const ANSWERS_BYTES = 32 * 1024;
const REASON_BYTES = 2048;
const STEP_LABEL_BYTES = 200;

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

export type OrchestrateInput = {
  task: string;
  planner?: string;
  workers?: string | string[];
  checker?: string;
  maxRounds?: number;
};

export type Orchestrator = {
  /** Validates (AgentServiceError 400/404/409), records the run and drives it in the background. */
  start(sessionId: string, input: OrchestrateInput): OrchestrationJson;
  /** AgentServiceError 404 for an unknown run. */
  get(runId: string): OrchestrationJson;
  /** Oldest first; only the parent session's runs when `sessionId` is given. */
  list(sessionId?: string): OrchestrationJson[];
  /**
   * Stops driving runs without marking them failed: the service's close interrupts their agent
   * turns and the next start resumes them. Call before `service.close()`.
   */
  close(): Promise<void>;
};

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The same rules as a message's text: the task reaches the planner as (most of) one prompt. */
const taskText = z.string({
  error: (issue) => (issue.input === undefined ? "is required" : "must be a string"),
}).min(1, "must not be empty")
  .max(MAX_TEXT_CHARS, `must be at most ${MAX_TEXT_CHARS} characters`)
  .refine((t) => !t.includes("\0"), "must not contain NUL characters")
  .refine(
    (t) => encoder.encode(t).length <= MAX_TEXT_BYTES,
    `must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`,
  );
const agentName = z.string({ error: "must be an agent name" }).min(1, "must not be empty");
const roundsError = `must be a whole number from 1 to ${MAX_ROUNDS}`;

/** The body of `POST /api/sessions/:id/orchestrate` (agent names are checked by `start`). */
export const orchestrateInputSchema = z.strictObject({
  task: taskText,
  planner: agentName.optional(),
  workers: z.union([
    agentName,
    z.array(agentName, { error: "must be an agent name or an array of agent names" })
      .min(1, "must name at least one agent"),
  ], { error: "must be an agent name or a non-empty array of agent names" }).optional(),
  checker: agentName.optional(),
  maxRounds: z.number({ error: roundsError }).int(roundsError).min(1, roundsError)
    .max(MAX_ROUNDS, roundsError).optional(),
});

type StepRec = OrchestrationStep & {
  /** Agents this step already failed on, so a fallback chain is walked once. */
  tried: string[];
  /** The one same-agent retry is spent. */
  retried: boolean;
};

/** What is stored: the public record plus what a resume needs. */
type Rec = Omit<OrchestrationJson, "steps"> & { steps: StepRec[]; cwd: string };

type Live = {
  rec: Rec;
  /** Set once the run ended (or was cancelled): results still coming back are ignored. */
  stopped: boolean;
  /** Child sessions with a turn of this run in flight. */
  active: Set<string>;
};

/** Thrown to unwind a driver that must stop without recording anything more. */
const HALT = new Error("orchestration halted");

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

const FINISHED: ReadonlySet<OrchestrationState> = new Set(["done", "failed"]);

const cut = (s: string, n: number) => (s.length > n ? s.slice(0, n) + "…" : s);

/** Cuts `s` to at most `max` UTF-8 bytes (plus a marker), at a character boundary. */
function cutBytes(s: string, max: number): string {
  const bytes = encoder.encode(s);
  if (bytes.length <= max) return s;
  let end = max;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return `${decoder.decode(bytes.subarray(0, end))}… [cut: ${bytes.length - end} more bytes]`;
}

const firstLine = (s: string) => s.split("\n").map((l) => l.trim()).find((l) => l) ?? "";

/** The steps of a planner's answer: lines like `1. do this` or `2) do that`, renumbered. */
export function parsePlan(answer: string): string[] {
  const steps: string[] = [];
  for (const line of answer.split("\n")) {
    const m = /^\s*(\d+)[.)]\s+(.+)$/.exec(line);
    const text = m?.[2].trim();
    if (text) steps.push(cut(text, STEP_TEXT_CHARS));
  }
  return steps;
}

/**
 * The checker's verdict from its first non-empty line: `PASS`, or `FAIL: WHY` / `FAIL WHY`
 * (markdown emphasis around it is tolerated); null when that line is neither.
 */
export function parseVerdict(answer: string): { pass: boolean; reason?: string } | null {
  const line = firstLine(answer).replace(/^[#>*_`\s]+/, "").replace(/(\*\*|__|`)+$/, "").trim();
  if (/^PASS\b/i.test(line)) return { pass: true };
  const m = /^FAIL\b\**\s*[:\-–—]?\s*(.*)$/i.exec(line);
  if (!m) return null;
  const reason = m[1].replace(/^\**\s*/, "").trim();
  return { pass: false, reason: cut(reason || "no reason given", REASON_BYTES) };
}

const planText = (r: OrchestrationJson) =>
  cutBytes(
    r.steps.filter((s) => s.round === 1).map((s) => `${s.n}. ${s.text}`).join("\n"),
    PLAN_BYTES,
  );

/** Each step's answer, the whole bounded by `budget` bytes however many steps there are. */
function answersText(steps: OrchestrationStep[], budget: number): string {
  const each = Math.max(200, Math.floor(budget / Math.max(1, steps.length)) - STEP_LABEL_BYTES);
  return steps.map((s) => {
    const label = cutBytes(s.text, STEP_LABEL_BYTES);
    const how = s.status === "done" ? "" : `, ${s.status}${s.error ? `: ${s.error}` : ""}`;
    const answer = s.answer?.trim() ? s.answer : "(no answer)";
    return cutBytes(`Step ${s.n} (${label}; by ${s.agent}${how}):\n${answer}`, each);
  }).join("\n\n");
}

function plannerPrompt(task: string): string {
  return [
    "You are the planner of a task that other agents will carry out, each step in a session of " +
    "its own and possibly at the same time as the others.",
    "",
    "Task:",
    cutBytes(task, PLANNER_TASK_BYTES),
    "",
    `Split the task into at most ${MAX_STEPS} steps that can be done independently. Answer with ` +
    'a numbered list, one step a line (like "1. write the parser"), and nothing else.',
  ].join("\n");
}

function workerPrompt(r: OrchestrationJson, s: OrchestrationStep): string {
  const of = r.steps.filter((x) => x.round === 1).length;
  return [
    "You are a worker on a task shared between several agents; other workers do the other steps.",
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    `Your step ${s.n} of ${of}: ${s.text}`,
    "",
    "Do this step only, in the current directory, then answer with a short summary of what you did.",
  ].join("\n");
}

function fixPrompt(r: OrchestrationJson, s: OrchestrationStep): string {
  const earlier = r.steps.filter((x) => x.round < s.round);
  return [
    `You are fixing the work on a task (round ${s.round} of ${r.maxRounds}): a checker found ` +
    "fault with what the workers did.",
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    "The checker said:",
    cutBytes(r.verdict?.reason ?? s.text, REASON_BYTES),
    "",
    "What the workers answered before:",
    answersText(earlier, ANSWERS_BYTES),
    "",
    "Fix what the checker found, in the current directory, then answer with a short summary of " +
    "what you did.",
  ].join("\n");
}

/** The checker's prompt: task, plan and every step's answer, far below one argv string. */
export function checkerPrompt(r: OrchestrationJson): string {
  return [
    `You are the checker of a task that other agents worked on (round ${r.round} of ` +
    `${r.maxRounds}).`,
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    "What the workers answered:",
    answersText(r.steps, ANSWERS_BYTES),
    "",
    "Judge whether the task is done, looking at the files in the current directory. Answer PASS, " +
    "or FAIL: WHY (what is missing or wrong), on your first line; details may follow on the next " +
    "lines.",
  ].join("\n");
}

/** A short account of the steps, for `orchestrate_done` when there is no checker's answer. */
function summary(r: Rec): string {
  if (r.steps.length === 0) return "no steps were planned";
  return cut(
    r.steps.map((s) => {
      const said = s.answer ? `: ${cut(firstLine(s.answer), 200)}` : "";
      const err = s.error ? ` (${cut(s.error, 200)})` : "";
      return `${s.n}. [${s.status}] ${cut(s.text, 200)}${said}${err}`;
    }).join("\n"),
    ANSWER_CHARS,
  );
}

function toJson(r: Rec): OrchestrationJson {
  const { cwd: _cwd, steps, ...rest } = r;
  return structuredClone({
    ...rest,
    steps: steps.map(({ tried: _t, retried: _r, ...s }) => s),
  });
}

const isShutdown = (err: unknown) =>
  err instanceof AgentServiceError && err.code === "SHUTTING_DOWN";

/** Opens the `orchestrations` table, resumes unfinished runs and serves new ones. */
export function createOrchestrator(
  opts: { service: AgentService; bus: EventBus; now?: () => number },
): Orchestrator {
  const { service, bus } = opts;
  const config = service.config;
  const now = opts.now ?? Date.now;
  const iso = () => new Date(now()).toISOString();
  const db = service.db;
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
  const parse = (row: unknown): Rec => {
    const rec = JSON.parse((row as Record<string, SQLInputValue>).data as string) as Rec;
    for (const s of rec.steps) {
      s.tried ??= [];
      s.retried ??= false;
    }
    return rec;
  };

  /** Unfinished runs being driven, by run id. */
  const live = new Map<string, Live>();
  let closing = false;

  const halted = (l: Live) => closing || l.stopped;

  function save(l: Live) {
    // Once closing, the store is about to close: what is not saved yet is redone at resume.
    if (closing) return;
    const r = l.rec;
    r.updatedAt = iso();
    upsert.run(
      r.runId,
      r.sessionId,
      r.state,
      JSON.stringify(r),
      Date.parse(r.createdAt),
      Date.parse(r.updatedAt),
    );
  }

  const publish = (l: Live, event: string, fields: Record<string, unknown>) =>
    bus.publish("orchestrate", event, {
      sessionId: l.rec.sessionId,
      runId: l.rec.runId,
      ...fields,
    });
  const stateEvent = (l: Live, title: string, extra: { step?: number; of?: number } = {}) =>
    publish(l, "orc_state", { state: l.rec.state, title: cut(title, TITLE_CHARS), ...extra });
  const warn = (l: Live, message: string) => publish(l, "orchestrate_warning", { message });

  const roundOf = (r: Rec) => `round ${r.round} of ${r.maxRounds}`;
  const stateTitle = (r: Rec) =>
    r.state === "plan"
      ? "Planning"
      : r.state === "build"
      ? `Building (${roundOf(r)})`
      : r.state === "check"
      ? `Checking (${roundOf(r)})`
      : r.state === "done"
      ? "Done"
      : `Failed: ${r.error ?? "unknown error"}`;

  /** Ends the run as failed (once): stops its child turns, records and announces it. */
  function fail(l: Live, error: string) {
    const r = l.rec;
    if (FINISHED.has(r.state) || closing) return;
    l.stopped = true;
    live.delete(r.runId);
    for (const sid of [...l.active]) {
      try {
        service.cancel(sid, { clearQueue: true });
      } catch (err) {
        if (!(err instanceof AgentServiceError)) {
          console.error(`hearth: cancelling session ${sid} of orchestration ${r.runId}:`, err);
        }
      }
    }
    for (const s of r.steps) {
      if (s.status === "running") {
        s.status = "failed";
        s.error = error === "cancelled" ? "cancelled" : "stopped: the run failed";
      }
    }
    r.state = "failed";
    r.error = error;
    r.text = summary(r);
    r.finishedAt = iso();
    try {
      save(l);
    } catch (err) {
      console.error(`hearth: recording the failure of orchestration ${r.runId}:`, err);
    }
    stateEvent(l, stateTitle(r));
    publish(l, "orchestrate_done", { text: r.text, error });
  }

  function finishDone(l: Live, text: string) {
    const r = l.rec;
    r.state = "done";
    r.text = text;
    r.finishedAt = iso();
    save(l);
    l.stopped = true;
    live.delete(r.runId);
    stateEvent(l, "Done");
    publish(l, "orchestrate_done", { text });
  }

  function sessionExists(id: string): boolean {
    try {
      service.getSession(id);
      return true;
    } catch (err) {
      if (err instanceof AgentServiceError && err.code === "NOT_FOUND") return false;
      throw err;
    }
  }

  /** The given session if it still exists, else a new one of `agent` in the run's cwd. */
  async function ensureSession(
    l: Live,
    current: string | undefined,
    agent: string,
    keep: (id: string) => void,
  ): Promise<string> {
    if (current && sessionExists(current)) return current;
    let id: string;
    try {
      id = (await service.createSession({ agent, cwd: l.rec.cwd })).id;
    } catch (err) {
      if (halted(l) || isShutdown(err)) throw HALT;
      throw err;
    }
    if (halted(l)) throw HALT;
    keep(id);
    save(l);
    return id;
  }

  /**
   * One agent turn of the run. Throws HALT when the run must stop here: it was stopped, the
   * server is shutting down (nothing is marked: the next start resumes), or the turn was cancelled
   * by someone else (the run fails first).
   */
  async function turn(l: Live, sid: string, prompt: string, meta: TurnMeta = {}) {
    if (halted(l)) throw HALT;
    l.active.add(sid);
    let res: RunResult;
    try {
      res = await service.runTurn(sid, prompt, meta);
    } catch (err) {
      if (halted(l) || isShutdown(err)) throw HALT;
      throw err;
    } finally {
      l.active.delete(sid);
    }
    if (halted(l) || res.error === INTERRUPTED_ERROR) throw HALT;
    if (!res.ok && res.errorKind === "cancelled") {
      fail(l, "cancelled");
      throw HALT;
    }
    return res;
  }

  const why = (res: RunResult) =>
    cut(`${res.errorKind ?? "error"}: ${res.error ?? "no detail"}`, 400);

  async function plan(l: Live) {
    const r = l.rec;
    const sid = await ensureSession(l, r.plannerSessionId, r.planner, (id) => {
      r.plannerSessionId = id;
    });
    const res = await turn(l, sid, plannerPrompt(r.task));
    if (!res.ok) return fail(l, `the planner (${res.agent}) failed: ${why(res)}`);
    const steps = parsePlan(res.text);
    if (steps.length === 0) {
      return fail(
        l,
        'the planner answered without a numbered list of steps (one a line, like "1. do this"); ' +
          `it said: ${JSON.stringify(cut(res.text.trim(), 300))}`,
      );
    }
    if (steps.length > MAX_STEPS) {
      warn(l, `the planner gave ${steps.length} steps; only the first ${MAX_STEPS} are kept`);
    }
    r.steps = steps.slice(0, MAX_STEPS).map((text, i) => ({
      n: i + 1,
      text,
      agent: r.workers[i % r.workers.length],
      round: 1,
      status: "pending",
      tried: [],
      retried: false,
    }));
    r.state = "build";
    save(l);
  }

  /** The first agent along `agent`'s fallback chain not tried yet for this step. */
  function untriedFallback(agent: string, tried: Set<string>): string | undefined {
    const seen = new Set<string>();
    let next = config.agents[agent]?.fallback;
    while (next && tried.has(next) && !seen.has(next)) {
      seen.add(next);
      next = config.agents[next]?.fallback;
    }
    return next && !tried.has(next) && next in config.agents ? next : undefined;
  }

  async function runStep(l: Live, s: StepRec, of: number) {
    const r = l.rec;
    while (true) {
      const sid = await ensureSession(l, s.sessionId, s.agent, (id) => {
        s.sessionId = id;
      });
      s.status = "running";
      delete s.error;
      save(l);
      const where = s.round === 1 ? "" : ` (round ${s.round} of ${r.maxRounds})`;
      stateEvent(l, `Step ${s.n} of ${of}${where}: ${s.text}`, { step: s.n, of });
      const prompt = s.round === 1 ? workerPrompt(r, s) : fixPrompt(r, s);
      const res = await turn(l, sid, prompt);
      if (res.ok) {
        s.status = "done";
        s.answer = cut(res.text, ANSWER_CHARS);
        save(l);
        return;
      }
      const tried = new Set([...s.tried, s.agent, res.agent]);
      s.tried = [...tried];
      const failed = `step ${s.n}: worker ${res.agent} failed (${why(res)})`;
      const next = untriedFallback(s.agent, tried);
      if (next) {
        warn(l, `${failed}; falling back to ${next}`);
        s.agent = next;
        delete s.sessionId;
        save(l);
        continue;
      }
      if (!s.retried) {
        s.retried = true;
        warn(l, `${failed}; retrying it once on ${s.agent}`);
        save(l);
        continue;
      }
      s.status = "failed";
      s.error = why(res);
      save(l);
      fail(l, `step ${s.n} (${cut(s.text, 200)}) failed on ${res.agent}: ${why(res)}`);
      throw HALT;
    }
  }

  async function build(l: Live) {
    const r = l.rec;
    const todo = r.steps.filter((s) => s.round === r.round && s.status !== "done");
    const of = r.round === 1 ? r.steps.filter((s) => s.round === 1).length : r.steps.length;
    const lanes = Math.max(
      1,
      Math.min(config.maxParallelWorkers || DEFAULT_PARALLEL, todo.length),
    );
    let next = 0;
    const lane = async () => {
      while (!halted(l) && next < todo.length) {
        const s = todo[next++];
        try {
          await runStep(l, s, of);
        } catch (err) {
          if (err === HALT || halted(l)) return;
          console.error(`hearth: orchestration ${r.runId}, step ${s.n}:`, err);
          fail(l, `step ${s.n}: ${(err as Error)?.message ?? String(err)}`);
          return;
        }
      }
    };
    await Promise.all(Array.from({ length: lanes }, lane));
    if (halted(l)) throw HALT;
    r.state = "check";
    save(l);
    stateEvent(l, stateTitle(r));
  }

  async function check(l: Live) {
    const r = l.rec;
    const sid = await ensureSession(l, r.checkerSessionId, r.checker, (id) => {
      r.checkerSessionId = id;
    });
    const res = await turn(l, sid, checkerPrompt(r), { status: "evaluating" });
    if (!res.ok) return fail(l, `the checker (${res.agent}) failed: ${why(res)}`);
    let verdict = parseVerdict(res.text);
    if (!verdict) {
      warn(
        l,
        `the checker gave no verdict (its first line: ${
          JSON.stringify(cut(firstLine(res.text), 200))
        }); counted as FAIL`,
      );
      verdict = { pass: false, reason: "the checker gave no verdict" };
    }
    r.verdict = verdict;
    if (verdict.pass) return finishDone(l, cut(res.text, ANSWER_CHARS));
    const reason = verdict.reason ?? "no reason given";
    if (r.round >= r.maxRounds) {
      return fail(
        l,
        `the checker still found fault after ${r.maxRounds} round${
          r.maxRounds === 1 ? "" : "s"
        }: ${reason}`,
      );
    }
    r.round++;
    r.steps.push({
      n: r.steps.length + 1,
      text: cut(`fix: ${reason}`, STEP_TEXT_CHARS),
      agent: r.workers[0],
      round: r.round,
      status: "pending",
      tried: [],
      retried: false,
    });
    r.state = "build";
    save(l);
    if (r.round === r.maxRounds) {
      warn(l, `${roundOf(r)} is the last: the budget of rounds is nearly spent`);
    }
  }

  /** Drives a run to its end; never throws (an unexpected error fails the run). */
  async function drive(l: Live) {
    try {
      while (!halted(l)) {
        const state = l.rec.state;
        if (state === "plan") await plan(l);
        else if (state === "build") await build(l);
        else if (state === "check") await check(l);
        else return;
      }
    } catch (err) {
      if (err === HALT || halted(l) || isShutdown(err)) return;
      console.error(`hearth: orchestration ${l.rec.runId} failed:`, err);
      try {
        fail(l, (err as Error)?.message ?? String(err));
      } catch (err2) {
        console.error(`hearth: failing orchestration ${l.rec.runId}:`, err2);
      }
    }
  }

  const offCancel = service.onCancel((sessionId) => {
    if (closing) return false;
    let handled = false;
    for (const l of [...live.values()]) {
      if (l.rec.sessionId !== sessionId) continue;
      fail(l, "cancelled");
      handled = true;
    }
    return handled;
  });

  // Runs a restart cut short go on where they stopped.
  for (const row of selectUnfinished.all()) {
    const rec = parse(row);
    const l: Live = { rec, stopped: false, active: new Set() };
    live.set(rec.runId, l);
    let what: string;
    if (rec.state === "plan") what = "planning again";
    else if (rec.state === "check") what = `checking again (${roundOf(rec)})`;
    else {
      const todo = rec.steps.filter((s) => s.round === rec.round && s.status !== "done");
      const same = todo.filter((s) => s.status === "running" && s.sessionId).map((s) => s.n);
      what = todo.length === 0
        ? `every step of ${roundOf(rec)} is done; checking next`
        : `running step${todo.length === 1 ? "" : "s"} ${todo.map((s) => s.n).join(", ")} again (${
          roundOf(rec)
        })` +
          (same.length
            ? `; step${same.length === 1 ? "" : "s"} ${same.join(", ")} ` +
              "in the same worker session" + (same.length === 1 ? "" : "s")
            : "");
    }
    warn(l, `resumed after a restart: ${what}`);
    stateEvent(l, stateTitle(rec));
    void drive(l);
  }

  const notFound = (runId: string) =>
    new AgentServiceError("NOT_FOUND", 404, `no orchestration ${runId}`);

  return {
    start(sessionId, input) {
      if (closing) {
        throw new AgentServiceError("SHUTTING_DOWN", 503, "the orchestrator is stopping");
      }
      const parent = service.getSession(sessionId);
      const parsed = orchestrateInputSchema.safeParse(input);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const path = issue.path.map(String).join(".");
        const message = issue.code === "unrecognized_keys"
          ? `unknown field(s): ${issue.keys.join(", ")}`
          : path
          ? `${path}: ${issue.message}`
          : issue.message;
        throw new AgentServiceError("BAD_REQUEST", 400, message);
      }
      const data = parsed.data;
      const configured = Object.keys(config.agents);
      const pick = (role: string, name: string | undefined) => {
        if (name === undefined) {
          if (!(parent.agent in config.agents)) {
            throw new AgentServiceError(
              "AGENT_UNAVAILABLE",
              409,
              `session ${sessionId} uses agent "${parent.agent}", which is no longer configured; ` +
                `name the ${role} (configured agents: ${configured.join(", ")})`,
            );
          }
          return parent.agent;
        }
        if (!(name in config.agents)) {
          throw new AgentServiceError(
            "BAD_REQUEST",
            400,
            `unknown agent "${name}" for ${role}; configured agents: ${configured.join(", ")}`,
          );
        }
        return name;
      };
      const planner = pick("planner", data.planner);
      const workers = data.workers === undefined
        ? [pick("workers", undefined)]
        : (typeof data.workers === "string" ? [data.workers] : data.workers).map((w) =>
          pick("workers", w)
        );
      const checker = pick("checker", data.checker);
      for (const l of live.values()) {
        if (l.rec.sessionId === sessionId) {
          throw new AgentServiceError(
            "CONFLICT",
            409,
            `session ${sessionId} already has an unfinished orchestration ${l.rec.runId} ` +
              `(state ${l.rec.state}); cancel the session or wait for it to end`,
          );
        }
      }
      const at = iso();
      const rec: Rec = {
        runId: crypto.randomUUID(),
        sessionId,
        task: data.task,
        state: "plan",
        round: 1,
        maxRounds: data.maxRounds ?? DEFAULT_MAX_ROUNDS,
        planner,
        workers,
        checker,
        steps: [],
        createdAt: at,
        updatedAt: at,
        cwd: parent.cwd,
      };
      const l: Live = { rec, stopped: false, active: new Set() };
      save(l);
      live.set(rec.runId, l);
      stateEvent(l, "Planning");
      void drive(l);
      return toJson(rec);
    },

    get(runId) {
      const l = live.get(runId);
      if (l) return toJson(l.rec);
      const row = selectOne.get(runId);
      if (!row) throw notFound(runId);
      return toJson(parse(row));
    },

    list(sessionId) {
      const rows = sessionId === undefined ? selectAll.all() : selectBySession.all(sessionId);
      return rows.map((row) => {
        const rec = parse(row);
        return toJson(live.get(rec.runId)?.rec ?? rec);
      });
    },

    close() {
      if (!closing) {
        closing = true;
        offCancel();
      }
      // Nothing to wait for: each driver awaits a turn that the service's close interrupts, and
      // stops there without writing.
      return Promise.resolve();
    },
  };
}
