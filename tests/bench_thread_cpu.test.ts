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
  // Busy until /proc says this thread ran 20 ms (a loaded host may give it less than half of the
  // wall time), within 5 s of wall time; then the counter must not have run ahead of the wall.
  const t0 = performance.now();
  let x = 0;
  let spent = 0;
  while (performance.now() - t0 < 5000 && spent < 20) {
    for (let i = 0; i < 100_000; i++) x += Math.sqrt(x + 1);
    spent = clientCpuMs()! - c0;
  }
  assert.ok(x > 0);
  const wall = performance.now() - t0;
  assert.ok(spent >= 20, `this thread ran ${spent} ms in ${wall} ms`);
  assert.ok(spent <= wall + 5, `this thread ran ${spent} ms in only ${wall} ms of wall time`);
});
