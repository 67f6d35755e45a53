/**
 * The engine's side of the worker boundary: this module is a web Worker's entry point and runs
 * the scheduler there (`worker_host.ts` is the HTTP thread's side). A thread that serves nothing
 * else can decode every step with synchronous FFI, back to back; the events of each step are
 * posted to the main thread in one message at the top of the next iteration, so the HTTP thread
 * writes them while this thread is already decoding. Messages from the main thread (new
 * requests, cancels, pauses) are announced on a shared counter: the loop takes an event-loop
 * turn to receive them only when the counter moved, so a busy loop never pays for a turn it
 * needs not.
 *
 * @example
 * ```ts
 * const w = new Worker(new URL("./worker_thread.ts", import.meta.url), { type: "module" });
 * w.postMessage({ type: "init", handles, opts, control });
 * ```
 * @module
 */
import { threadStackBytes } from "../../ffi/thread_stack.ts";
import { modelFromHandles, type ModelHandles } from "./model.ts";
import {
  createScheduler,
  type EventSink,
  type GenEvent,
  type GenRequest,
  isRefusal,
  type LocalScheduler,
  type SchedulerOptions,
} from "./scheduler.ts";

/** Main -> worker. */
export type ToWorker =
  | {
    type: "init";
    handles: ModelHandles;
    opts: Omit<SchedulerOptions, "draft" | "onStep" | "onCacheWritten">;
    control: SharedArrayBuffer;
  }
  | { type: "submit"; id: number; req: Omit<GenRequest, "signal"> }
  | { type: "cancel"; id: number }
  | { type: "pause"; id: number }
  | { type: "resume"; id: number }
  | { type: "sync"; id: number }
  /** Answered with `synced` once the prompt cache's disk writes so far are done. */
  | { type: "flush"; id: number };

/** Worker -> main. `stats` rides along so the main thread's `stats()` stays current. */
export type FromWorker =
  | { type: "ready"; stackBytes: number; stats: unknown }
  /** The prompt cache wrote a state to disk while nothing else was posted. */
  | { type: "stats"; stats: unknown }
  | { type: "events"; batch: [number, GenEvent][]; ended: number[]; stats: unknown }
  | { type: "paused"; id: number; stats: unknown }
  | { type: "synced"; id: number; stats: unknown };

// deno-lint-ignore no-explicit-any
const post = (m: FromWorker) => (self as any).postMessage(m);

let engine: LocalScheduler | undefined;
let control: Int32Array | undefined;
let seen = 0;
const aborts = new Map<number, AbortController>();
const resumes = new Map<number, () => void>();
let batch: [number, GenEvent][] = [];
let ended: number[] = [];

let statsAt = 0;
/** A request started streaming: the next post carries stats, so `running` counts it at once. */
let statsDue = false;
/** Stats are copied at most every `STATS_EVERY_MS` while streaming (a copy costs ~0.1 ms). */
const STATS_EVERY_MS = 50;

function flush(): void {
  if (!batch.length && !ended.length) return;
  const now = performance.now();
  const withStats = ended.length > 0 || statsDue || now - statsAt >= STATS_EVERY_MS;
  if (withStats) {
    statsAt = now;
    statsDue = false;
  }
  post({ type: "events", batch, ended, stats: withStats ? engine!.stats() : undefined });
  batch = [];
  ended = [];
}

/** Posts the last step's events, then receives any message the main thread announced. */
async function onStep(): Promise<void> {
  flush();
  while (control && Atomics.load(control, 0) !== seen) {
    await new Promise((r) => setTimeout(r, 0));
  }
}

/**
 * A request's events go straight into the next post: the scheduler pushes them as the step that
 * made them ends, so they leave with the flush at the top of the next iteration. (Iterating the
 * scheduler's channel instead took promise turns that often landed after that flush: a step's
 * tokens then left a step late, and two steps' at once.)
 */
function sinkFor(id: number): EventSink {
  let first = true;
  let closed = false;
  return {
    push(ev) {
      if (closed) return;
      if (first) {
        first = false;
        statsDue = true;
      }
      batch.push([id, ev]);
    },
    close() {
      if (closed) return;
      closed = true;
      ended.push(id);
      aborts.delete(id);
      // A request that ends while the loop is idle (refused, cancelled) still gets its news out.
      queueMicrotask(() => engine!.idle().then(flush));
    },
  };
}

function handle(msg: ToWorker): void {
  switch (msg.type) {
    case "init": {
      control = new Int32Array(msg.control);
      engine = createScheduler(modelFromHandles(msg.handles), {
        ...msg.opts,
        onStep,
        onCacheWritten: () => post({ type: "stats", stats: engine!.stats() }),
      });
      post({ type: "ready", stackBytes: threadStackBytes(), stats: engine.stats() });
      return;
    }
    case "submit": {
      const ac = new AbortController();
      aborts.set(msg.id, ac);
      try {
        engine!.submitTo({ ...msg.req, signal: ac.signal }, sinkFor(msg.id));
      } catch (e) {
        const kind = isRefusal(e) ? e.kind : "invalid";
        batch.push([msg.id, { type: "error", message: `${kind}: ${(e as Error).message}` }]);
        ended.push(msg.id);
        aborts.delete(msg.id);
        flush();
        return;
      }
      return;
    }
    case "cancel":
      aborts.get(msg.id)?.abort();
      return;
    case "pause":
      // Runs between two steps; the loop waits here until the main thread says resume.
      engine!.exclusive(() =>
        new Promise<void>((resolve) => {
          resumes.set(msg.id, resolve);
          flush();
          post({ type: "paused", id: msg.id, stats: engine!.stats() });
        })
      );
      return;
    case "resume":
      resumes.get(msg.id)?.();
      resumes.delete(msg.id);
      return;
    case "flush":
      engine!.flushCache!().then(() =>
        post({ type: "synced", id: msg.id, stats: engine!.stats() })
      );
      return;
    case "sync":
      engine!.idle().then(() => {
        flush();
        post({ type: "synced", id: msg.id, stats: engine!.stats() });
      });
      return;
  }
}

globalThis.addEventListener("message", (e) => {
  seen++;
  handle((e as MessageEvent<ToWorker>).data);
});
