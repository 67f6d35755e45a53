import assert from "node:assert/strict";
import { clientCpuMs, cpuSplit, threadTimes } from "../bench/thread_cpu.ts";

Deno.test("thread CPU: the busiest threads count as compute, a thread born mid-phase from zero", () => {
  const before = new Map([
    [1, { name: "main", ms: 100 }],
    [2, { name: "ggml-a", ms: 1000 }],
    [3, { name: "ggml-b", ms: 900 }],
    [4, { name: "idle", ms: 50 }],
  ]);
  const after = new Map([
    [1, { name: "main", ms: 130 }],
    [2, { name: "ggml-a", ms: 2000 }],
    [3, { name: "ggml-b", ms: 1890 }],
    [4, { name: "idle", ms: 50 }],
    [5, { name: "gc", ms: 7 }],
  ]);
  const s = cpuSplit(before, after, 2)!;
  assert.equal(s.computeMs, 1000 + 990);
  assert.equal(s.servingMs, 30 + 7);
  assert.deepEqual(s.threads.map((t) => t.name), ["ggml-a", "ggml-b", "main", "gc"]);
  assert.equal(cpuSplit(undefined, after, 2), undefined);
});

Deno.test("thread CPU: this thread's run time from /proc grows with the work it does", () => {
  const tid = Number(Deno.readLinkSync("/proc/thread-self").split("/").at(-1));
  assert.ok(threadTimes(Deno.pid)?.has(tid), "the calling thread is listed");
  const c0 = clientCpuMs()!;
  const end = performance.now() + 40;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  assert.ok(x > 0);
  const spent = clientCpuMs()! - c0;
  // Busy for 40 ms of wall time: at least half of it on a CPU even on a loaded host.
  assert.ok(spent >= 20 && spent < 1000, `this thread ran ${spent} ms`);
});
