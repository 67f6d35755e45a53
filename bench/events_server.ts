/**
 * The server half of `bench/events.ts`, run as a child process so the listeners' client work
 * never shares an event loop with the publisher: a bus and `eventRoutes` on a loopback port,
 * plus `POST /start {rate, seconds, textBytes}` (publish `rate` events a second for `seconds`,
 * each carrying its send time `t` in epoch ms), `GET /stats` (publishing progress, listener
 * counters, current and peak RSS and heap, sampled every 100 ms) and `GET /health`.
 *
 * @example
 * ```sh
 * deno run -A bench/events_server.ts 8123 --max-listeners 256
 * curl -X POST localhost:8123/start -d '{"rate":1000,"seconds":10}'
 * curl localhost:8123/stats
 * ```
 * @module
 */
import { Hono } from "hono";
import { createBus } from "../lib/events/bus.ts";
import { createFanout } from "../lib/events/fanout.ts";
import { eventRoutes } from "../routes/events.ts";
import { sseBufferLimitFromEnv } from "../routes/sse.ts";

const USAGE = `usage: deno run -A bench/events_server.ts PORT [options]
  --max-listeners N    listener cap (default 256)
  --buffer-limit B     bytes per listener before a drop (default HEARTH_SSE_BUFFER_SIZE, else 1 MiB)
  --coalesce-ms MS     SSE write coalescing window (default: the event routes' default)`;

function fail(msg: string): never {
  console.error(`events_server: ${msg}\n${USAGE}`);
  Deno.exit(2);
}

function int(name: string, v: string | undefined, min = 1): number {
  const n = Number(v);
  if (v === undefined || !Number.isSafeInteger(n) || n < min) {
    fail(`${name} needs an integer >= ${min}, got ${v}`);
  }
  return n;
}

type Publishing = {
  rate: number;
  seconds: number;
  total: number;
  published: number;
  startedAt: number;
  finishedAt?: number;
  /** Most ms the publisher ran behind its schedule (timer granularity, a busy loop). */
  maxBehindMs: number;
};

function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

if (import.meta.main) {
  const args = [...Deno.args];
  const port = int("PORT", args.shift());
  let maxListeners = 256;
  let bufferLimit: number | undefined;
  let coalesceMs: number | undefined;
  try {
    bufferLimit = sseBufferLimitFromEnv(Deno.env.toObject());
  } catch (e) {
    fail((e as Error).message);
  }
  for (let i = 0; i < args.length; i += 2) {
    if (args[i] === "--max-listeners") maxListeners = int(args[i], args[i + 1]);
    else if (args[i] === "--buffer-limit") bufferLimit = int(args[i], args[i + 1]);
    else if (args[i] === "--coalesce-ms") coalesceMs = int(args[i], args[i + 1], 0);
    else fail(`unknown argument ${args[i]}`);
  }

  const bus = createBus();
  const fanout = createFanout(bus, { maxListeners, bufferLimit });
  const mem = { rss: 0, heapUsed: 0, heapTotal: 0, peakRss: 0, peakHeapUsed: 0 };
  const sample = () => {
    const m = Deno.memoryUsage();
    mem.rss = m.rss;
    mem.heapUsed = m.heapUsed;
    mem.heapTotal = m.heapTotal;
    mem.peakRss = Math.max(mem.peakRss, m.rss);
    mem.peakHeapUsed = Math.max(mem.peakHeapUsed, m.heapUsed);
  };
  sample();
  const idle = { ...mem };
  setInterval(sample, 100);

  let run: Publishing | undefined;
  const start = (rate: number, seconds: number, textBytes: number) => {
    const p: Publishing = {
      rate,
      seconds,
      total: Math.round(rate * seconds),
      published: 0,
      startedAt: nowMs(),
      maxBehindMs: 0,
    };
    run = p;
    const text = "x".repeat(textBytes);
    const t0 = performance.now();
    // Catch up to the schedule on every tick: pacing holds on average even when timers are late.
    const tick = () => {
      const elapsed = performance.now() - t0;
      const due = Math.min(p.total, Math.floor((elapsed * rate) / 1000) + 1);
      if (due > p.published) {
        p.maxBehindMs = Math.max(p.maxBehindMs, elapsed - (p.published * 1000) / rate);
      }
      while (p.published < due) {
        bus.publish("agent", "agent_output", {
          agentId: "bench",
          seq: ++p.published,
          t: nowMs(),
          text,
        });
      }
      if (p.published < p.total) setTimeout(tick, 1);
      else p.finishedAt = nowMs();
    };
    tick();
  };

  const app = new Hono();
  app.get("/health", (c) => c.json({ status: "ok" }));
  app.post("/start", async (c) => {
    if (run && run.finishedAt === undefined) return c.json({ error: "already publishing" }, 409);
    let body: { rate?: unknown; seconds?: unknown; textBytes?: unknown };
    try {
      body = await c.req.json();
    } catch {
      return c.json({ error: "body must be JSON {rate, seconds, textBytes?}" }, 400);
    }
    const { rate, seconds, textBytes = 64 } = body;
    const ok = (v: unknown) => typeof v === "number" && Number.isFinite(v) && v > 0;
    if (!ok(rate) || !ok(seconds) || !(typeof textBytes === "number" && textBytes >= 0)) {
      return c.json({ error: "rate and seconds must be positive numbers" }, 400);
    }
    start(rate as number, seconds as number, textBytes);
    return c.json({ total: run!.total, startedAt: run!.startedAt });
  });
  app.get("/stats", (c) => c.json({ publishing: run ?? null, fanout: fanout.stats, mem, idle }));
  app.route("/", eventRoutes(bus, { fanout, coalesceMs }));

  const ac = new AbortController();
  Deno.addSignalListener("SIGTERM", () => {
    fanout.closeAll();
    ac.abort();
    Deno.exit(0);
  });
  Deno.serve({ hostname: "127.0.0.1", port, signal: ac.signal, onListen() {} }, app.fetch);
}
