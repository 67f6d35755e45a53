/**
 * The phases of an orchestration run (orchestrate.ts), driven one after another until it ends:
 * plan (the planner's numbered list becomes the steps), build (the round's steps on the workers,
 * in parallel up to `maxParallelWorkers`, each walking its agent's fallback chain once and then
 * retried once on the same agent), check (the checker's `PASS` ends the run; a `FAIL` adds one fix
 * step for the next round, within `maxRounds`). `resumeRun` takes up a run a restart cut short.
 *
 * @example
 * ```ts ignore
 * import { drive } from "./orchestrate_drive.ts";
 * ctx.live.set(l.rec.runId, l);
 * void drive(ctx, l); // never throws: an unexpected error fails the run
 * ```
 * @module
 */
import {
  ANSWER_CHARS,
  checkerPrompt,
  cut,
  firstLine,
  fixPrompt,
  MAX_STEPS,
  parsePlan,
  parseVerdict,
  plannerPrompt,
  STEP_TEXT_CHARS,
  workerPrompt,
} from "./orchestrate_prompts.ts";
import {
  ensureSession,
  fail,
  finishDone,
  HALT,
  halted,
  isShutdown,
  type Live,
  type OrchestratorCtx,
  roundOf,
  save,
  stateEvent,
  stateTitle,
  turn,
  warn,
  why,
} from "./orchestrate_live.ts";
import type { StepRec } from "./orchestrate_store.ts";

const DEFAULT_PARALLEL = 3;

async function plan(ctx: OrchestratorCtx, l: Live) {
  const r = l.rec;
  const sid = await ensureSession(ctx, l, r.plannerSessionId, r.planner, (id) => {
    r.plannerSessionId = id;
  });
  const res = await turn(ctx, l, sid, plannerPrompt(r.task));
  if (!res.ok) return fail(ctx, l, `the planner (${res.agent}) failed: ${why(res)}`);
  const steps = parsePlan(res.text);
  if (steps.length === 0) {
    return fail(
      ctx,
      l,
      'the planner answered without a numbered list of steps (one a line, like "1. do this"); ' +
        `it said: ${JSON.stringify(cut(res.text.trim(), 300))}`,
    );
  }
  if (steps.length > MAX_STEPS) {
    warn(ctx, l, `the planner gave ${steps.length} steps; only the first ${MAX_STEPS} are kept`);
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
  save(ctx, l);
}

/** The first agent along `agent`'s fallback chain not tried yet for this step. */
function untriedFallback(
  ctx: OrchestratorCtx,
  agent: string,
  tried: Set<string>,
): string | undefined {
  const { config } = ctx;
  const seen = new Set<string>();
  let next = config.agents[agent]?.fallback;
  while (next && tried.has(next) && !seen.has(next)) {
    seen.add(next);
    next = config.agents[next]?.fallback;
  }
  return next && !tried.has(next) && next in config.agents ? next : undefined;
}

async function runStep(ctx: OrchestratorCtx, l: Live, s: StepRec, of: number) {
  const r = l.rec;
  while (true) {
    const sid = await ensureSession(ctx, l, s.sessionId, s.agent, (id) => {
      s.sessionId = id;
    });
    s.status = "running";
    delete s.error;
    save(ctx, l);
    const where = s.round === 1 ? "" : ` (round ${s.round} of ${r.maxRounds})`;
    stateEvent(ctx, l, `Step ${s.n} of ${of}${where}: ${s.text}`, { step: s.n, of });
    const prompt = s.round === 1 ? workerPrompt(r, s) : fixPrompt(r, s);
    const res = await turn(ctx, l, sid, prompt);
    if (res.ok) {
      s.status = "done";
      s.answer = cut(res.text, ANSWER_CHARS);
      save(ctx, l);
      return;
    }
    const tried = new Set([...s.tried, s.agent, res.agent]);
    s.tried = [...tried];
    const failed = `step ${s.n}: worker ${res.agent} failed (${why(res)})`;
    const next = untriedFallback(ctx, s.agent, tried);
    if (next) {
      warn(ctx, l, `${failed}; falling back to ${next}`);
      s.agent = next;
      delete s.sessionId;
      save(ctx, l);
      continue;
    }
    if (!s.retried) {
      s.retried = true;
      warn(ctx, l, `${failed}; retrying it once on ${s.agent}`);
      save(ctx, l);
      continue;
    }
    s.status = "failed";
    s.error = why(res);
    save(ctx, l);
    fail(ctx, l, `step ${s.n} (${cut(s.text, 200)}) failed on ${res.agent}: ${why(res)}`);
    throw HALT;
  }
}

async function build(ctx: OrchestratorCtx, l: Live) {
  const r = l.rec;
  const todo = r.steps.filter((s) => s.round === r.round && s.status !== "done");
  const of = r.round === 1 ? r.steps.filter((s) => s.round === 1).length : r.steps.length;
  const lanes = Math.max(
    1,
    Math.min(ctx.config.maxParallelWorkers || DEFAULT_PARALLEL, todo.length),
  );
  let next = 0;
  const lane = async () => {
    while (!halted(ctx, l) && next < todo.length) {
      const s = todo[next++];
      try {
        await runStep(ctx, l, s, of);
      } catch (err) {
        if (err === HALT || halted(ctx, l)) return;
        console.error(`hearth: orchestration ${r.runId}, step ${s.n}:`, err);
        fail(ctx, l, `step ${s.n}: ${(err as Error)?.message ?? String(err)}`);
        return;
      }
    }
  };
  await Promise.all(Array.from({ length: lanes }, lane));
  if (halted(ctx, l)) throw HALT;
  r.state = "check";
  save(ctx, l);
  stateEvent(ctx, l, stateTitle(r));
}

async function check(ctx: OrchestratorCtx, l: Live) {
  const r = l.rec;
  const sid = await ensureSession(ctx, l, r.checkerSessionId, r.checker, (id) => {
    r.checkerSessionId = id;
  });
  const res = await turn(ctx, l, sid, checkerPrompt(r), { status: "evaluating" });
  if (!res.ok) return fail(ctx, l, `the checker (${res.agent}) failed: ${why(res)}`);
  let verdict = parseVerdict(res.text);
  if (!verdict) {
    warn(
      ctx,
      l,
      `the checker gave no verdict (its first line: ${
        JSON.stringify(cut(firstLine(res.text), 200))
      }); counted as FAIL`,
    );
    verdict = { pass: false, reason: "the checker gave no verdict" };
  }
  r.verdict = verdict;
  if (verdict.pass) return finishDone(ctx, l, cut(res.text, ANSWER_CHARS));
  const reason = verdict.reason ?? "no reason given";
  if (r.round >= r.maxRounds) {
    return fail(
      ctx,
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
  save(ctx, l);
  if (r.round === r.maxRounds) {
    warn(ctx, l, `${roundOf(r)} is the last: the budget of rounds is nearly spent`);
  }
}

/** Drives a run to its end; never throws (an unexpected error fails the run). */
export async function drive(ctx: OrchestratorCtx, l: Live) {
  try {
    while (!halted(ctx, l)) {
      const state = l.rec.state;
      if (state === "plan") await plan(ctx, l);
      else if (state === "build") await build(ctx, l);
      else if (state === "check") await check(ctx, l);
      else return;
    }
  } catch (err) {
    if (err === HALT || halted(ctx, l) || isShutdown(err)) return;
    console.error(`hearth: orchestration ${l.rec.runId} failed:`, err);
    try {
      fail(ctx, l, (err as Error)?.message ?? String(err));
    } catch (err2) {
      console.error(`hearth: failing orchestration ${l.rec.runId}:`, err2);
    }
  }
}

/** Takes up a run a restart cut short where it stopped, and says so. */
export function resumeRun(ctx: OrchestratorCtx, l: Live) {
  const rec = l.rec;
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
  warn(ctx, l, `resumed after a restart: ${what}`);
  stateEvent(ctx, l, stateTitle(rec));
  void drive(ctx, l);
}
