/**
 * The scheduler as the engine's worker thread runs it (synchronous decode, the thread's turns
 * taken in `onStep`), with its consumers on the same thread: for tests and benches that drive
 * it without HTTP or the worker. The worker takes a turn only when the HTTP thread announced a
 * message; here any consumer may act after any step (cancel, send its next request, read the
 * stats), and a turn between every two steps is the only way it gets to. `setImmediate` rather
 * than a zero timer: the timer is clamped to 1 ms and costs about 2 ms a step, the immediate
 * 0.01 ms (it polls I/O rarely, which nothing here waits on).
 *
 * @example
 * ```ts
 * import { inProcessScheduler } from "./in_process.ts";
 * declare const model: import("./model.ts").EngineModel;
 * declare const req: import("./scheduler.ts").GenRequest;
 * const engine = inProcessScheduler(model, { draftTokens: 3 });
 * for await (const ev of engine.submit(req)) if (ev.type === "text") console.log(ev.text);
 * ```
 * @module
 */
import { setImmediate } from "node:timers";
import type { EngineModel } from "./model.ts";
import { createScheduler, type LocalScheduler, type SchedulerOptions } from "./scheduler.ts";

/** One event-loop turn: every microtask queued so far (a consumer's `for await`) runs first. */
export function nextTurn(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

export function inProcessScheduler(
  m: EngineModel,
  opts: Omit<SchedulerOptions, "onStep"> = {},
): LocalScheduler {
  return createScheduler(m, { ...opts, onStep: nextTurn });
}
