/**
 * A live orchestration run (orchestrate.ts): what the orchestrator holds for each run it drives
 * (`OrchestratorCtx`, passed to every function here), recording it, its events on the bus
 * (`orc_state`, `orchestrate_warning`, `orchestrate_done`), how it ends (`fail`, `finishDone`),
 * and its agent turns, each one through `service.runTurn` in a session of the run's own.
 *
 * A driver that must stop without recording anything more (the run was stopped, the server is
 * shutting down, or a turn was cancelled by someone else) unwinds by throwing `HALT`.
 *
 * @example
 * ```ts ignore
 * import { fail, turn } from "./orchestrate_live.ts";
 * const res = await turn(ctx, l, sessionId, "1. write the parser"); // throws HALT when stopping
 * if (!res.ok) fail(ctx, l, `the planner failed: ${why(res)}`);
 * ```
 * @module
 */
import type { EventBus } from "../events/bus.ts";
import type { AgentsFile } from "./config.ts";
import { cut, summary } from "./orchestrate_prompts.ts";
import { FINISHED, type Rec, type RunTable } from "./orchestrate_store.ts";
import type { RunResult } from "./run.ts";
import {
  type AgentService,
  AgentServiceError,
  INTERRUPTED_ERROR,
  type TurnMeta,
} from "./sessions.ts";

const TITLE_CHARS = 160;

export type Live = {
  rec: Rec;
  /** Set once the run ended (or was cancelled): results still coming back are ignored. */
  stopped: boolean;
  /** Child sessions with a turn of this run in flight. */
  active: Set<string>;
};

/** The orchestrator's state, shared by every run it drives. */
export type OrchestratorCtx = {
  service: AgentService;
  config: AgentsFile;
  bus: EventBus;
  table: RunTable;
  /** The clock, as an ISO timestamp. */
  iso: () => string;
  /** Unfinished runs being driven, by run id. */
  live: Map<string, Live>;
  /** Set by `close`: nothing more is recorded or driven. */
  closing: boolean;
};

/** Thrown to unwind a driver that must stop without recording anything more. */
export const HALT = new Error("orchestration halted");

export const isShutdown = (err: unknown) =>
  err instanceof AgentServiceError && err.code === "SHUTTING_DOWN";

export const halted = (ctx: OrchestratorCtx, l: Live) => ctx.closing || l.stopped;

export function save(ctx: OrchestratorCtx, l: Live) {
  // Once closing, the store is about to close: what is not saved yet is redone at resume.
  if (ctx.closing) return;
  l.rec.updatedAt = ctx.iso();
  ctx.table.write(l.rec);
}

const publish = (
  ctx: OrchestratorCtx,
  l: Live,
  event: string,
  fields: Record<string, unknown>,
) =>
  ctx.bus.publish("orchestrate", event, {
    sessionId: l.rec.sessionId,
    runId: l.rec.runId,
    ...fields,
  });

export const stateEvent = (
  ctx: OrchestratorCtx,
  l: Live,
  title: string,
  extra: { step?: number; of?: number } = {},
) => publish(ctx, l, "orc_state", { state: l.rec.state, title: cut(title, TITLE_CHARS), ...extra });

export const warn = (ctx: OrchestratorCtx, l: Live, message: string) =>
  publish(ctx, l, "orchestrate_warning", { message });

export const roundOf = (r: Rec) => `round ${r.round} of ${r.maxRounds}`;

export const stateTitle = (r: Rec) =>
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
export function fail(ctx: OrchestratorCtx, l: Live, error: string) {
  const r = l.rec;
  if (FINISHED.has(r.state) || ctx.closing) return;
  l.stopped = true;
  ctx.live.delete(r.runId);
  for (const sid of [...l.active]) {
    try {
      ctx.service.cancel(sid, { clearQueue: true });
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
  r.finishedAt = ctx.iso();
  try {
    save(ctx, l);
  } catch (err) {
    console.error(`hearth: recording the failure of orchestration ${r.runId}:`, err);
  }
  stateEvent(ctx, l, stateTitle(r));
  publish(ctx, l, "orchestrate_done", { text: r.text, error });
}

export function finishDone(ctx: OrchestratorCtx, l: Live, text: string) {
  const r = l.rec;
  r.state = "done";
  r.text = text;
  r.finishedAt = ctx.iso();
  save(ctx, l);
  l.stopped = true;
  ctx.live.delete(r.runId);
  stateEvent(ctx, l, "Done");
  publish(ctx, l, "orchestrate_done", { text });
}

function sessionExists(ctx: OrchestratorCtx, id: string): boolean {
  try {
    ctx.service.getSession(id);
    return true;
  } catch (err) {
    if (err instanceof AgentServiceError && err.code === "NOT_FOUND") return false;
    throw err;
  }
}

/** The given session if it still exists, else a new one of `agent` in the run's cwd. */
export async function ensureSession(
  ctx: OrchestratorCtx,
  l: Live,
  current: string | undefined,
  agent: string,
  keep: (id: string) => void,
): Promise<string> {
  if (current && sessionExists(ctx, current)) return current;
  let id: string;
  try {
    id = (await ctx.service.createSession({ agent, cwd: l.rec.cwd })).id;
  } catch (err) {
    if (halted(ctx, l) || isShutdown(err)) throw HALT;
    throw err;
  }
  if (halted(ctx, l)) throw HALT;
  keep(id);
  save(ctx, l);
  return id;
}

/**
 * One agent turn of the run. Throws HALT when the run must stop here: it was stopped, the
 * server is shutting down (nothing is marked: the next start resumes), or the turn was cancelled
 * by someone else (the run fails first).
 */
export async function turn(
  ctx: OrchestratorCtx,
  l: Live,
  sid: string,
  prompt: string,
  meta: TurnMeta = {},
) {
  if (halted(ctx, l)) throw HALT;
  l.active.add(sid);
  let res: RunResult;
  try {
    res = await ctx.service.runTurn(sid, prompt, meta);
  } catch (err) {
    if (halted(ctx, l) || isShutdown(err)) throw HALT;
    throw err;
  } finally {
    l.active.delete(sid);
  }
  if (halted(ctx, l) || res.error === INTERRUPTED_ERROR) throw HALT;
  if (!res.ok && res.errorKind === "cancelled") {
    fail(ctx, l, "cancelled");
    throw HALT;
  }
  return res;
}

/** A failed turn in one phrase, for warnings and errors. */
export const why = (res: RunResult) =>
  cut(`${res.errorKind ?? "error"}: ${res.error ?? "no detail"}`, 400);
