/**
 * The HTTP thread's side of the worker boundary: starts the engine's Worker
 * (`worker_thread.ts`) and gives the scheduler there the same `Scheduler` interface. The HTTP
 * thread never sits between two decodes: the worker decodes, samples and posts each step's
 * events; this side turns them back into per-request streams, and SSE writes happen while the
 * next step computes. Why not decode on the HTTP thread, between I/O turns: measured on 2 cores
 * (`small` preset, one stream), such a turn costs 1-2 ms a step when it is a timer, and one that
 * costs 0.1 ms (a no-op through the blocking pool) lets Deno's HTTP tasks run too rarely, so
 * tokens left in bursts.
 *
 * Requests are checked here, synchronously, as `createScheduler` checks them, so refusals
 * (`too_long`, `invalid`, `busy`) still throw from `submit`.
 *
 * @example
 * ```ts
 * import { startWorkerEngine } from "./worker_host.ts";
 * const engine = await startWorkerEngine(model, { maxWaiting: 256 });
 * for await (const ev of engine.submit(req)) console.log(ev);
 * ```
 * @module
 */
import { type Channel, newChannel } from "./channel.ts";
import type { FromWorker, ToWorker } from "./worker_thread.ts";
import { type EngineModel, modelHandles } from "./model.ts";
import {
  checkRequest,
  emptyStats,
  type EngineStats,
  type GenEvent,
  type GenRequest,
  refusal,
  type Scheduler,
  type SchedulerOptions,
} from "./scheduler.ts";

export type WorkerEngine = Scheduler & {
  /**
   * The engine thread's stack, as glibc reports it: a web Worker's 4 MiB. A node:worker_threads
   * worker would take a 64 MiB one, but its messages cost the HTTP side 0.25 ms more CPU per
   * token at one stream on the tiny preset (paired runs: 0.626 against 0.376 ms; 0.98x against
   * 1.05x llama-server), which GPU-speed tokens cannot afford; the smoke decode runs on a web
   * Worker too, so a build that needs more stack fails there, not under a request.
   */
  threadStackBytes: number;
  /** Stops the worker (after the model's requests are done); the model stays loaded. */
  close(): void;
};

export async function startWorkerEngine(
  m: EngineModel,
  opts: Omit<SchedulerOptions, "draft" | "onStep" | "onCacheWritten"> = {},
): Promise<WorkerEngine> {
  const worker = new Worker(new URL("./worker_thread.ts", import.meta.url), { type: "module" });
  const control = new SharedArrayBuffer(4);
  const counter = new Int32Array(control);
  const send = (msg: ToWorker) => {
    Atomics.add(counter, 0, 1);
    worker.postMessage(msg);
  };
  const streams = new Map<number, Channel<GenEvent>>();
  const paused = new Map<number, () => void>();
  const synced = new Map<number, () => void>();
  let stats = emptyStats();
  let nextId = 1;
  let threadStack = 0;
  const maxWaiting = opts.maxWaiting ?? 1024;

  const ready = new Promise<void>((resolve, reject) => {
    worker.onerror = (e) => {
      e.preventDefault();
      const why = new Error(`engine worker failed: ${e.message}`);
      reject(why);
      for (const ch of streams.values()) {
        ch.push({ type: "error", message: why.message });
        ch.close();
      }
      streams.clear();
    };
    worker.onmessage = (e: MessageEvent<FromWorker>) => {
      const msg = e.data;
      switch (msg.type) {
        case "ready":
          threadStack = msg.stackBytes;
          stats = msg.stats as EngineStats;
          resolve();
          return;
        case "events":
          if (msg.stats) stats = msg.stats as EngineStats;
          for (const [id, ev] of msg.batch) streams.get(id)?.push(ev);
          for (const id of msg.ended) {
            streams.get(id)?.close();
            streams.delete(id);
          }
          return;
        case "paused":
          // Exclusive work (embeddings, tokenizing) reads stats right after; keep them current.
          stats = msg.stats as EngineStats;
          paused.get(msg.id)?.();
          paused.delete(msg.id);
          return;
        case "stats":
          stats = msg.stats as EngineStats;
          return;
        case "synced":
          stats = msg.stats as EngineStats;
          synced.get(msg.id)?.();
          synced.delete(msg.id);
          return;
      }
    };
  });
  send({ type: "init", handles: modelHandles(m), opts, control });
  await ready;

  function submit(req: GenRequest): AsyncIterable<GenEvent> {
    checkRequest(m, req);
    if (streams.size >= m.maxBatch + maxWaiting) {
      throw refusal("busy", `the queue is full (${streams.size - m.maxBatch} requests waiting)`);
    }
    const id = nextId++;
    const ch = newChannel<GenEvent>(() => send({ type: "cancel", id }));
    streams.set(id, ch);
    const { signal, ...plain } = req;
    signal?.addEventListener("abort", () => send({ type: "cancel", id }), { once: true });
    send({ type: "submit", id, req: plain });
    if (signal?.aborted) send({ type: "cancel", id });
    return ch.iterable;
  }

  async function exclusive<T>(fn: () => Promise<T> | T): Promise<T> {
    const id = nextId++;
    await new Promise<void>((r) => {
      paused.set(id, r);
      send({ type: "pause", id });
    });
    try {
      return await fn();
    } finally {
      send({ type: "resume", id });
    }
  }

  async function idle(): Promise<void> {
    const id = nextId++;
    await new Promise<void>((r) => {
      synced.set(id, r);
      send({ type: "sync", id });
    });
    // Events posted before the worker went idle have all been delivered by now (one port, in
    // order); streams still open belong to requests that arrived meanwhile.
    if (streams.size) return idle();
  }

  function flushCache(): Promise<void> {
    const id = nextId++;
    return new Promise<void>((r) => {
      synced.set(id, r);
      send({ type: "flush", id });
    });
  }

  return {
    model: m,
    submit,
    exclusive,
    stats: () => stats,
    idle,
    flushCache,
    close: () => worker.terminate(),
    get threadStackBytes() {
      return threadStack;
    },
  };
}
