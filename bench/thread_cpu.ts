/**
 * Where a server's CPU went during a benchmark phase, per thread, from Linux's
 * `/proc/<pid>/task/<tid>/schedstat` (run time in nanoseconds; the tick-based `stat` fields are
 * too coarse for a thread that runs 0.3 ms every 12 ms). On a host with as many cores as ggml
 * threads, whatever the serving threads (HTTP, event loop, GC) and the benchmark client take is
 * taken from ggml's, so their CPU per token is what a server pays beyond the library's limit.
 *
 * A thread counts as compute when it is one of the `compute` busiest in the phase: at `-t N` ggml
 * runs N threads at full tilt (they spin between graphs), which nothing else in either server
 * comes near. Hearth's engine worker is one of them (ggml's thread 0), as llama-server's main
 * thread is.
 *
 * @example
 * ```ts
 * import { cpuSplit, threadTimes } from "./thread_cpu.ts";
 * const before = threadTimes(pid);
 * // ... run the phase ...
 * const split = cpuSplit(before, threadTimes(pid), 2); // { computeMs, servingMs, threads }
 * ```
 * @module
 */

/** Run time so far of each thread of a process (ms), with its name; undefined without /proc. */
export type ThreadTimes = Map<number, { name: string; ms: number }>;

export function threadTimes(pid: number): ThreadTimes | undefined {
  const out: ThreadTimes = new Map();
  try {
    for (const e of Deno.readDirSync(`/proc/${pid}/task`)) {
      const dir = `/proc/${pid}/task/${e.name}`;
      try {
        const name = Deno.readTextFileSync(`${dir}/comm`).trim();
        const ns = Number(Deno.readTextFileSync(`${dir}/schedstat`).split(" ")[0]);
        if (Number.isFinite(ns)) out.set(Number(e.name), { name, ms: ns / 1e6 });
      } catch { /* the thread ended between the listing and the read */ }
    }
  } catch {
    return undefined;
  }
  return out.size ? out : undefined;
}

export type CpuSplit = {
  /** CPU of the `compute` busiest threads in the phase (ms). */
  computeMs: number;
  /** CPU of every other thread (ms). */
  servingMs: number;
  /** Every thread that ran, busiest first (ms), for a closer look in the JSON. */
  threads: { name: string; ms: number }[];
};

/** CPU per thread between two readings; a thread born in between counts from zero. */
export function cpuSplit(
  before: ThreadTimes | undefined,
  after: ThreadTimes | undefined,
  compute: number,
): CpuSplit | undefined {
  if (!before || !after) return undefined;
  const threads = [...after].map(([tid, t]) => ({
    name: t.name,
    ms: t.ms - (before.get(tid)?.ms ?? 0),
  })).filter((t) => t.ms > 0).sort((x, y) => y.ms - x.ms);
  const sum = (ts: { ms: number }[]) => ts.reduce((s, t) => s + t.ms, 0);
  return {
    computeMs: sum(threads.slice(0, compute)),
    servingMs: sum(threads.slice(compute)),
    threads: threads.map((t) => ({ name: t.name, ms: Math.round(t.ms * 1000) / 1000 })),
  };
}

/**
 * CPU so far of the calling thread (ms): the JavaScript thread, where the benchmark client's
 * requests and stream parsing run. The process's other threads include the library loop's ggml
 * threads, which spin for a while after each of its turns.
 */
export function clientCpuMs(): number | undefined {
  try {
    // "<pid>/task/<tid>": the thread asking, whichever OS thread runs this isolate.
    const self = Deno.readLinkSync("/proc/thread-self");
    return Number(Deno.readTextFileSync(`/proc/${self}/schedstat`).split(" ")[0]) / 1e6;
  } catch {
    return undefined;
  }
}
