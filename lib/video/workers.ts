/**
 * The render queue: `workers` loops take operation ids in order and run each through `runJob`.
 * Progress is kept in memory for polls and written to the store at most once a second per
 * operation (the record only needs it to survive for a restart's first poll). `close()` aborts the
 * renders in flight and waits for the loops; their operations stay `running` in the store, which
 * is what makes the next start render them again.
 *
 * @example
 * ```ts
 * import { createWorkerPool } from "./workers.ts";
 * declare const store: Parameters<typeof createWorkerPool>[0]["store"];
 * const pool = createWorkerPool({ store, now: Date.now, retentionMs: 172_800_000, workers: 2 });
 * pool.enqueue("abcdefghij12");
 * pool.progress("abcdefghij12"); // 0..100 while it renders, undefined otherwise
 * await pool.close();
 * ```
 * @module
 */
import { runJob } from "./jobs.ts";
import type { VideoStore } from "./store.ts";

/** Progress is written to the store at most this often per operation (polls read memory). */
const PROGRESS_WRITE_MS = 1000;

export type WorkerPool = {
  enqueue(id: string): void;
  /** Live progress of an operation being rendered. */
  progress(id: string): number | undefined;
  close(): Promise<void>;
};

export function createWorkerPool(opts: {
  store: VideoStore;
  now: () => number;
  retentionMs: number;
  workers: number;
  ffmpeg?: string;
}): WorkerPool {
  const { store, now } = opts;
  const queue: string[] = [];
  const idle: (() => void)[] = [];
  const live = new Map<string, number>();
  const abort = new AbortController();
  let closing = false;

  const processOp = async (id: string) => {
    const op = store.getOp(id);
    if (!op || (op.state !== "pending" && op.state !== "running")) return;
    store.updateOp(id, { state: "running", progress: 0, updatedAt: now() });
    live.set(id, 0);
    let lastWrite = performance.now();
    try {
      await runJob({
        store,
        now,
        retentionMs: opts.retentionMs,
        ffmpeg: opts.ffmpeg,
        signal: abort.signal,
        onProgress: (p) => {
          live.set(id, p);
          if (performance.now() - lastWrite >= PROGRESS_WRITE_MS && !closing) {
            lastWrite = performance.now();
            store.updateOp(id, { progress: p, updatedAt: now() });
          }
        },
      }, op);
    } finally {
      live.delete(id);
    }
  };

  const loop = async () => {
    while (!closing) {
      const id = queue.shift();
      if (id === undefined) {
        await new Promise<void>((r) => idle.push(r));
        continue;
      }
      try {
        await processOp(id);
      } catch (e) {
        // The store itself failed (disk full, ...): the record stays running and is retried on
        // the next start; this worker carries on with the queue.
        if (!closing) console.error(`hearth: video operation ${id} could not be processed:`, e);
      }
    }
  };
  const loops = Array.from({ length: Math.max(1, opts.workers || 1) }, () => loop());

  return {
    enqueue(id) {
      queue.push(id);
      idle.shift()?.();
    },
    progress: (id) => live.get(id),
    async close() {
      closing = true;
      abort.abort();
      for (const wake of idle.splice(0)) wake();
      await Promise.all(loops);
    },
  };
}
