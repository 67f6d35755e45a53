/**
 * Scheduled wake-ups of the agent service (sessions.ts): a text sent to a session after a delay,
 * durable in the store with its due time, so a restart re-arms it (an overdue one fires at once).
 * Announced on topic `session` as `schedule_wakeup` when set and `schedule_wakeup_failed` when the
 * text could not be sent at its time.
 *
 * A delay longer than setTimeout's longest (about 24.8 days) re-arms when that timer ends.
 *
 * @example
 * ```ts ignore
 * import { armAll, scheduleWakeup } from "./sessions_wakeups.ts";
 * armAll(ctx); // at start-up: every stored wake-up keeps its due time
 * scheduleWakeup(ctx, sessionId, 3600, "check the nightly build");
 * ```
 * @module
 */
import { bad, checkText, iso, MAX_SCHEDULE_SECONDS } from "./sessions_api.ts";
import { publish, requireSession, send, type SessionsCtx } from "./sessions_runs.ts";

/** setTimeout's longest delay; longer wake-ups re-arm. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function arm(ctx: SessionsCtx, scheduleId: number, dueAt: number) {
  const wait = Math.max(0, dueAt - ctx.now());
  const t = setTimeout(() => {
    ctx.timers.delete(scheduleId);
    if (wait > MAX_TIMER_MS) arm(ctx, scheduleId, dueAt);
    else fire(ctx, scheduleId);
  }, Math.min(wait, MAX_TIMER_MS));
  ctx.timers.set(scheduleId, t);
}

function fire(ctx: SessionsCtx, scheduleId: number) {
  const { store } = ctx;
  if (ctx.closing) return;
  const row = store.schedules().find((s) => s.id === scheduleId);
  if (!row) return;
  store.removeSchedule(scheduleId);
  const failed = (error: string) =>
    publish(ctx, "schedule_wakeup_failed", { sessionId: row.sessionId, reason: row.text, error });
  try {
    const session = store.getSession(row.sessionId);
    if (!session || ctx.deleting.has(row.sessionId)) {
      return failed(`session ${row.sessionId} no longer exists`);
    }
    send(ctx, row.sessionId, row.text, {});
  } catch (err) {
    failed((err as Error).message);
  }
}

/** Arms every stored wake-up (at start-up). */
export function armAll(ctx: SessionsCtx) {
  for (const s of ctx.store.schedules()) arm(ctx, s.id, s.dueAt);
}

/** Records and arms a wake-up of the session in `delaySeconds` (0 to MAX_SCHEDULE_SECONDS). */
export function scheduleWakeup(
  ctx: SessionsCtx,
  id: string,
  delaySeconds: number,
  text: string,
): { sessionId: string; scheduleId: number; dueAt: string } {
  checkText(text);
  requireSession(ctx, id);
  if (!(delaySeconds >= 0 && delaySeconds <= MAX_SCHEDULE_SECONDS)) {
    throw bad(`delaySeconds must be between 0 and ${MAX_SCHEDULE_SECONDS}`);
  }
  const createdAt = ctx.now();
  const dueAt = createdAt + Math.round(delaySeconds * 1000);
  const scheduleId = ctx.store.addSchedule({ sessionId: id, text, delaySeconds, dueAt, createdAt });
  arm(ctx, scheduleId, dueAt);
  publish(ctx, "schedule_wakeup", {
    sessionId: id,
    delaySeconds,
    reason: text,
    scheduleId,
    dueAt: iso(dueAt),
  });
  return { sessionId: id, scheduleId, dueAt: iso(dueAt) };
}

/** Clears every armed timer (at close; the wake-ups stay in the store). */
export function disarmAll(ctx: SessionsCtx) {
  for (const t of ctx.timers.values()) clearTimeout(t);
  ctx.timers.clear();
}
