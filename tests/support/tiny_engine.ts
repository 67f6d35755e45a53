/**
 * One in-process scheduler on the tiny model per test file (loaded on first use): for engine
 * tests that drive the scheduler directly, without HTTP or the worker thread.
 *
 * @example
 * ```ts
 * import { tinyEngine } from "./tiny_engine.ts";
 * const { m, engine } = await tinyEngine();
 * ```
 * @module
 */
import { type EngineModel, loadEngineModel } from "../../lib/engine/model.ts";
import type { GenEvent, Scheduler } from "../../lib/engine/scheduler.ts";
import { inProcessScheduler } from "../../lib/engine/in_process.ts";
import { tinyModelPath } from "./models.ts";

let shared: Promise<{ m: EngineModel; engine: Scheduler }> | undefined;

export function tinyEngine(): Promise<{ m: EngineModel; engine: Scheduler }> {
  shared ??= (async () => {
    const m = await loadEngineModel({
      path: await tinyModelPath(),
      maxBatch: 4,
      maxSeqLen: 512,
      threads: 1,
    });
    return { m, engine: inProcessScheduler(m) };
  })();
  return shared;
}

/** A generation's text; throws on an error event. */
export async function streamText(events: AsyncIterable<GenEvent>): Promise<string> {
  let t = "";
  for await (const ev of events) {
    if (ev.type === "text") t += ev.text;
    if (ev.type === "error") throw new Error(ev.message);
  }
  return t;
}
