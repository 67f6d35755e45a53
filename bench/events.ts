/**
 * The agent event channel under load: `--listeners` SSE clients (raw fetch readers) on one
 * server publishing `--rate` events a second for `--seconds`. The server runs in a child process
 * (`bench/events_server.ts`) so it has its own event loop; this process only reads. Every listener
 * must receive every event exactly once and in order; delivery latency is the wall time a chunk
 * is read here minus the send time `t` the server stamped into the event (both processes read the
 * same clock). Prints a table and writes JSON to `bench/results/events-<ISO time>.json`.
 *
 * Caveat: client and server share the machine, and 256 readers parsing 1000 events a second each
 * is real work for this process, so on few cores the latency includes the client's own queueing.
 *
 * @example
 * ```sh
 * deno run -A bench/events.ts --listeners 256 --rate 1000 --seconds 10
 * ```
 * ```ts
 * import { formatEventsBench, runEventsBench } from "./events.ts";
 * console.log(formatEventsBench(await runEventsBench({ listeners: 8, rate: 100, seconds: 2 })));
 * ```
 * @module
 */
import { freePort, superviseServer } from "../tools/server_process.ts";

export type EventsBenchOptions = {
  listeners: number;
  /** Events published per second. */
  rate: number;
  seconds: number;
  /** Length of each event's `text` field (default 64 characters). */
  textBytes?: number;
  /** Server `bufferLimit` per listener (default: HEARTH_SSE_BUFFER_SIZE, else 1 MiB). */
  bufferLimit?: number;
  /** Server SSE write coalescing window (default: the event routes' default, 10 ms). */
  coalesceMs?: number;
  /** Reader worker threads the listeners are spread over (default: cores, at most 4). */
  workers?: number;
};

export type EventsBenchResult = {
  date: string;
  args: Required<Omit<EventsBenchOptions, "bufferLimit" | "coalesceMs" | "workers">> & {
    workers: number;
    bufferLimit?: number;
    coalesceMs?: number;
  };
  cpuModel?: string;
  cores: number;
  loadavgAtStart?: number[];
  events: number;
  /** listeners × events. */
  expectedDeliveries: number;
  deliveries: number;
  missing: number;
  duplicates: number;
  outOfOrder: number;
  /** Listeners that received every event exactly once and in order. */
  completeListeners: number;
  droppedListeners: number;
  /** Publisher: first to last event, and how far it ran behind its schedule at worst. */
  publishSeconds: number;
  publishedPerSecond: number;
  publisherMaxBehindMs: number;
  /** First event sent to last event received by the last listener. */
  deliverySeconds: number;
  deliveriesPerSecond: number;
  /** Deliveries per chunk read, averaged over listeners. */
  eventsPerRead: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
  /** CPU used from start to the end of delivery, in seconds and in cores (seconds / wall). */
  cpu: {
    serverSeconds: number;
    clientSeconds: number;
    wallSeconds: number;
    serverCores: number;
    clientCores: number;
  };
  server: {
    idleRssBytes: number;
    peakRssBytes: number;
    peakHeapUsedBytes: number;
    endRssBytes: number;
    endHeapUsedBytes: number;
  };
};

type ServerStats = {
  publishing: {
    total: number;
    published: number;
    startedAt: number;
    finishedAt?: number;
    maxBehindMs: number;
  } | null;
  fanout: { listeners: number; dropped: number; rejected: number };
  mem: { rss: number; heapUsed: number; peakRss: number; peakHeapUsed: number };
  idle: { rss: number };
};

const nowMs = () => performance.timeOrigin + performance.now();

/** Per-listener counters in `Shared.counters`, `FIELDS` to a listener. */
const F = { connected: 0, received: 1, duplicates: 2, outOfOrder: 3, reads: 4, ended: 5 };
const FIELDS = 6;

/**
 * Everything the readers record, in shared memory so reader workers write it and the coordinator
 * reads it: `seen`/`latency` at `listener * total + seq - 1`, `lastAt` the receive time of each
 * listener's latest event.
 */
type Shared = {
  seen: Uint8Array;
  latency: Float64Array;
  counters: Int32Array;
  lastAt: Float64Array;
};

type SharedBuffers = {
  seen: SharedArrayBuffer;
  latency: SharedArrayBuffer;
  counters: SharedArrayBuffer;
  lastAt: SharedArrayBuffer;
};

function sharedBuffers(n: number, total: number): SharedBuffers {
  return {
    seen: new SharedArrayBuffer(n * total),
    latency: new SharedArrayBuffer(n * total * 8),
    counters: new SharedArrayBuffer(n * FIELDS * 4),
    lastAt: new SharedArrayBuffer(n * 8),
  };
}

function sharedView(b: SharedBuffers): Shared {
  return {
    seen: new Uint8Array(b.seen),
    latency: new Float64Array(b.latency),
    counters: new Int32Array(b.counters),
    lastAt: new Float64Array(b.lastAt),
  };
}

const count = (sh: Shared, i: number, f: number) => Atomics.load(sh.counters, i * FIELDS + f);
const bump = (sh: Shared, i: number, f: number) => Atomics.add(sh.counters, i * FIELDS + f, 1);

/** Reads listener `i`'s SSE body, checking order and recording each event's latency. */
function readListener(
  body: ReadableStream<Uint8Array>,
  sh: Shared,
  i: number,
  total: number,
): { done: Promise<void>; cancel: () => Promise<void> } {
  const reader = body.getReader();
  const dec = new TextDecoder();
  const base = i * total;
  let buf = "";
  let lastId = 0;
  const done = (async () => {
    try {
      while (true) {
        const r = await reader.read();
        if (r.done) break;
        const at = nowMs();
        buf += dec.decode(r.value, { stream: true });
        let start = 0;
        let cut;
        while ((cut = buf.indexOf("\n\n", start)) >= 0) {
          const block = buf.slice(start, cut);
          start = cut + 2;
          if (block === ": connected") Atomics.store(sh.counters, i * FIELDS + F.connected, 1);
          if (!block.startsWith("id: ")) continue;
          const nl = block.indexOf("\n");
          const id = Number(block.slice(4, nl));
          // The two numbers by position rather than JSON.parse: 256 readers parsing 1000
          // events a second each is the client's main cost, and it shares the cores.
          const seq = numberAfter(block, '"seq":', nl);
          const t = numberAfter(block, '"t":', nl);
          if (id !== lastId + 1 || seq !== id) bump(sh, i, F.outOfOrder);
          lastId = id;
          if (!(seq >= 1 && seq <= total) || sh.seen[base + seq - 1]) {
            bump(sh, i, F.duplicates);
            continue;
          }
          sh.seen[base + seq - 1] = 1;
          sh.latency[base + seq - 1] = at - t;
          sh.lastAt[i] = at;
          bump(sh, i, F.received);
        }
        buf = buf.slice(start);
        bump(sh, i, F.reads);
      }
    } catch { /* cancelled at the end, or the server dropped this listener */ }
    Atomics.store(sh.counters, i * FIELDS + F.ended, 1);
  })();
  return {
    done,
    cancel: async () => {
      await reader.cancel().catch(() => {});
      await done;
    },
  };
}

/** A worker's share of the listeners. */
type WorkerJob = {
  url: string;
  first: number;
  count: number;
  total: number;
  buffers: SharedBuffers;
};

/** Opens listeners `first .. first+count-1`; resolves once every response is 200. */
async function openListeners(job: WorkerJob) {
  const sh = sharedView(job.buffers);
  const responses = await Promise.all(
    Array.from({ length: job.count }, () => fetch(`${job.url}/api/events`)),
  );
  const readers: ReturnType<typeof readListener>[] = [];
  let failure: string | undefined;
  for (const [k, res] of responses.entries()) {
    if (res.status !== 200) {
      failure ??= `listener ${job.first + k}: HTTP ${res.status} ${await res.text()}`;
      continue;
    }
    readers.push(readListener(res.body!, sh, job.first + k, job.total));
  }
  const stop = async () => {
    for (const r of readers) await r.cancel();
  };
  if (failure) {
    await stop();
    throw new Error(failure);
  }
  return stop;
}

/** The worker side: `{job}` opens its listeners and answers `opened`; `stop` cancels them. */
function serveAsWorker() {
  const scope = globalThis as unknown as {
    onmessage: ((e: MessageEvent) => void) | null;
    postMessage(m: unknown): void;
  };
  let stop: (() => Promise<void>) | undefined;
  scope.onmessage = async (e: MessageEvent) => {
    try {
      if (e.data.job) {
        stop = await openListeners(e.data.job as WorkerJob);
        scope.postMessage({ opened: true });
      } else if (e.data.stop) {
        await stop?.();
        scope.postMessage({ stopped: true });
      }
    } catch (err) {
      scope.postMessage({ error: (err as Error).message });
    }
  };
}

/** Sends one message to a worker and waits for its answer; an `error` answer throws. */
function ask(w: Worker, msg: unknown): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    w.onmessage = (e) => e.data.error ? reject(new Error(e.data.error)) : resolve(e.data);
    w.onerror = (e) => {
      e.preventDefault();
      reject(new Error(`reader worker failed: ${e.message}`));
    };
    w.postMessage(msg);
  });
}

/** Digits, '.', '-', '+' and 'e': the characters of a JSON number. */
const isNumberChar = (c: number) =>
  (c >= 48 && c <= 57) || c === 46 || c === 45 || c === 43 || c === 101;

/** The JSON number following `key` in `s` (searching from `from`), NaN when absent. */
function numberAfter(s: string, key: string, from: number): number {
  const i = s.indexOf(key, from);
  if (i < 0) return NaN;
  const start = i + key.length;
  let end = start;
  while (isNumberChar(s.charCodeAt(end))) end++;
  return Number(s.slice(start, end));
}

/** User + system CPU seconds of a process so far (Linux), NaN elsewhere. */
function cpuSeconds(pid: number | "self"): number {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in USER_HZ (100 on Linux)
  } catch {
    return NaN;
  }
}

/** Nearest-rank percentile of an ascending array. */
function rank(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

async function getJson<T>(url: string, init?: RequestInit): Promise<T> {
  const r = await fetch(url, init);
  const body = await r.json();
  if (!r.ok) {
    throw new Error(`${init?.method ?? "GET"} ${url}: ${r.status} ${JSON.stringify(body)}`);
  }
  return body as T;
}

const serverScript = new URL("./events_server.ts", import.meta.url).pathname;
/** This module again, loaded as a reader worker (the query tells the two apart). */
const workerUrl = new URL("./events.ts?reader-worker", import.meta.url);
const isWorker = new URL(import.meta.url).search === "?reader-worker";

export async function runEventsBench(opts: EventsBenchOptions): Promise<EventsBenchResult> {
  const { listeners: n, rate, seconds } = opts;
  const workers = opts.workers ?? Math.min(4, navigator.hardwareConcurrency);
  const textBytes = opts.textBytes ?? 64;
  const total = Math.round(rate * seconds);
  const loadavgAtStart = readLoadavg();
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const cmd = [
    Deno.execPath(),
    "run",
    "-A",
    serverScript,
    String(port),
    "--max-listeners",
    String(n),
  ];
  if (opts.bufferLimit !== undefined) cmd.push("--buffer-limit", String(opts.bufferLimit));
  if (opts.coalesceMs !== undefined) cmd.push("--coalesce-ms", String(opts.coalesceMs));
  const srv = await superviseServer({ cmd, url, name: "events bench server", keepStderr: 8000 });

  const buffers = sharedBuffers(n, total);
  const sh = sharedView(buffers);
  sh.latency.fill(NaN);
  const listeners = Array.from({ length: n }, (_, i) => i);
  const all = (f: number, atLeast = 1) => listeners.every((i) => count(sh, i, f) >= atLeast);
  const sum = (f: number) => listeners.reduce((s, i) => s + count(sh, i, f), 0);
  // Polled, not woken per chunk: checking 256 listeners on every read would cost more than
  // the reading itself.
  const waitUntil = async (check: () => boolean, ms: number, what: string) => {
    const deadline = Date.now() + ms;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`events bench: timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  // Readers run in workers, so reading uses every core the server leaves free.
  const nWorkers = Math.min(workers, n);
  const pool: Worker[] = [];
  try {
    const jobs: Promise<unknown>[] = [];
    for (let w = 0; w < nWorkers; w++) {
      const first = Math.floor((w * n) / nWorkers);
      const job: WorkerJob = {
        url,
        first,
        count: Math.floor(((w + 1) * n) / nWorkers) - first,
        total,
        buffers,
      };
      const worker = new Worker(workerUrl, { type: "module" });
      pool.push(worker);
      jobs.push(ask(worker, { job }));
    }
    await Promise.all(jobs);
    await waitUntil(() => all(F.connected), 10_000, "every listener's `: connected`");
    const before = await getJson<ServerStats>(`${url}/stats`);
    if (before.fanout.listeners !== n) {
      throw new Error(`server counts ${before.fanout.listeners} listeners, expected ${n}`);
    }

    const cpu0 = { server: cpuSeconds(srv.child.pid), client: cpuSeconds("self") };
    await getJson(`${url}/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ rate, seconds, textBytes }),
    });
    const settled = () =>
      listeners.every((i) =>
        count(sh, i, F.received) + count(sh, i, F.duplicates) >= total || count(sh, i, F.ended)
      );
    await waitUntil(settled, seconds * 1000 + 20_000, "every listener to get every event")
      .catch((e) => console.error((e as Error).message));
    // A short grace period shows duplicates or stray events after the last one.
    await new Promise((r) => setTimeout(r, 200));
    const stats = await getJson<ServerStats>(`${url}/stats`);
    const pub = stats.publishing!;
    const cpuUsed = {
      serverSeconds: cpuSeconds(srv.child.pid) - cpu0.server,
      clientSeconds: cpuSeconds("self") - cpu0.client,
    };
    await Promise.all(pool.map((w) => ask(w, { stop: true })));

    const valid = sh.latency.filter((x) => !Number.isNaN(x)).sort();
    let latencySum = 0;
    for (const x of valid) latencySum += x;
    const deliveries = sum(F.received);
    const lastAt = Math.max(...sh.lastAt);
    const publishSeconds = ((pub.finishedAt ?? nowMs()) - pub.startedAt) / 1000;
    const deliverySeconds = (lastAt - pub.startedAt) / 1000;
    const cpu = cpuModel();
    const wall = Math.max(deliverySeconds, publishSeconds);
    return {
      date: new Date().toISOString(),
      args: {
        listeners: n,
        rate,
        seconds,
        textBytes,
        workers: nWorkers,
        bufferLimit: opts.bufferLimit,
        coalesceMs: opts.coalesceMs,
      },
      cpuModel: cpu,
      cores: navigator.hardwareConcurrency,
      loadavgAtStart,
      events: pub.published,
      expectedDeliveries: n * total,
      deliveries,
      missing: n * total - deliveries,
      duplicates: sum(F.duplicates),
      outOfOrder: sum(F.outOfOrder),
      completeListeners: listeners.filter((i) =>
        count(sh, i, F.received) === total && count(sh, i, F.duplicates) === 0 &&
        count(sh, i, F.outOfOrder) === 0
      ).length,
      droppedListeners: stats.fanout.dropped,
      publishSeconds,
      publishedPerSecond: pub.published / Math.max(publishSeconds, 1e-9),
      publisherMaxBehindMs: pub.maxBehindMs,
      deliverySeconds,
      deliveriesPerSecond: deliveries / Math.max(deliverySeconds, 1e-9),
      eventsPerRead: deliveries / Math.max(1, sum(F.reads)),
      latencyMs: {
        p50: rank(valid, 50),
        p90: rank(valid, 90),
        p99: rank(valid, 99),
        p999: rank(valid, 99.9),
        max: valid.length ? valid[valid.length - 1] : NaN,
        mean: valid.length ? latencySum / valid.length : NaN,
      },
      cpu: {
        ...cpuUsed,
        wallSeconds: wall,
        serverCores: cpuUsed.serverSeconds / wall,
        clientCores: cpuUsed.clientSeconds / wall,
      },
      server: {
        idleRssBytes: stats.idle.rss,
        peakRssBytes: stats.mem.peakRss,
        peakHeapUsedBytes: stats.mem.peakHeapUsed,
        endRssBytes: stats.mem.rss,
        endHeapUsedBytes: stats.mem.heapUsed,
      },
    };
  } finally {
    for (const w of pool) w.terminate();
    await srv.stop();
  }
}

function table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((s, i) => (i === 0 ? s.padEnd(w[i]) : s.padStart(w[i])));
  return [
    line(head).join(" | "),
    w.map((x) => "-".repeat(x)).join("-|-"),
    ...rows.map((r) => line(r).join(" | ")),
  ].join("\n");
}

const f1 = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(1));
const f2 = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(2));
const mib = (b: number) => (b / 1048576).toFixed(1);

/** The result as two small tables: delivery and the server's memory. */
export function formatEventsBench(r: EventsBenchResult): string {
  const a = r.args;
  const ok = r.missing === 0 && r.duplicates === 0 && r.outOfOrder === 0 &&
    r.completeListeners === a.listeners;
  const lat = r.latencyMs;
  return [
    `event channel: ${a.listeners} SSE listeners, ${a.rate} events/s for ${a.seconds} s ` +
    `(${r.events} events, ${a.textBytes}-char text) on ${r.cores} cores`,
    "",
    table(
      [
        "published/s",
        "deliveries",
        "missing",
        "dup",
        "out of order",
        "dropped",
        "every event once",
        "events/read",
      ],
      [[
        f1(r.publishedPerSecond),
        `${r.deliveries}/${r.expectedDeliveries}`,
        String(r.missing),
        String(r.duplicates),
        String(r.outOfOrder),
        String(r.droppedListeners),
        ok
          ? `yes (${r.completeListeners}/${a.listeners})`
          : `NO (${r.completeListeners}/${a.listeners})`,
        f1(r.eventsPerRead),
      ]],
    ),
    "",
    table(
      ["latency ms", "p50", "p90", "p99", "p99.9", "max", "mean"],
      [[
        "send -> read",
        f2(lat.p50),
        f2(lat.p90),
        f2(lat.p99),
        f2(lat.p999),
        f2(lat.max),
        f2(lat.mean),
      ]],
    ),
    "",
    table(
      [
        "server",
        "idle RSS MiB",
        "peak RSS MiB",
        "end RSS MiB",
        "peak heap MiB",
        "publisher max lag ms",
        "server CPU cores",
        "client CPU cores",
      ],
      [[
        "",
        mib(r.server.idleRssBytes),
        mib(r.server.peakRssBytes),
        mib(r.server.endRssBytes),
        mib(r.server.peakHeapUsedBytes),
        f1(r.publisherMaxBehindMs),
        f2(r.cpu.serverCores),
        f2(r.cpu.clientCores),
      ]],
    ),
  ].join("\n");
}

/** Writes the result to `bench/results/events-<ISO time>.json`; returns the path. */
export async function writeEventsBench(r: EventsBenchResult): Promise<string> {
  const dir = new URL("./results/", import.meta.url).pathname;
  await Deno.mkdir(dir, { recursive: true });
  const file = `${dir}events-${r.date.replace(/[:.]/g, "-")}.json`;
  await Deno.writeTextFile(file, JSON.stringify(r, null, 2) + "\n");
  return file;
}

function readLoadavg(): number[] | undefined {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).map(Number);
  } catch {
    return undefined;
  }
}

function cpuModel(): string | undefined {
  try {
    return Deno.readTextFileSync("/proc/cpuinfo").match(/^model name\s*:\s*(.*)$/m)?.[1];
  } catch {
    return undefined;
  }
}

const USAGE = `usage: deno run -A bench/events.ts [options]
  --listeners N      SSE listeners (default 256)
  --rate N           events published per second (default 1000)
  --seconds N        publishing time (default 10)
  --text-bytes N     length of each event's text field (default 64)
  --buffer-limit N   server bytes per listener before a drop (default HEARTH_SSE_BUFFER_SIZE or 1 MiB)
  --coalesce-ms N    server SSE write coalescing window (default 10; 0 = a write per event)
  --workers N        reader threads the listeners are spread over (default: cores, at most 4)`;

export function parseEventsBenchArgs(argv: string[]): EventsBenchOptions {
  const o: EventsBenchOptions = { listeners: 256, rate: 1000, seconds: 10 };
  const bad = (msg: string): never => {
    console.error(`bench/events: ${msg}\n${USAGE}`);
    Deno.exit(2);
  };
  const num = (flag: string, v: string | undefined, min: number, integer = true): number => {
    const x = Number(v);
    if (v === undefined || !Number.isFinite(x) || x < min || (integer && !Number.isInteger(x))) {
      bad(`${flag} needs ${integer ? "an integer" : "a number"} >= ${min}, got ${v}`);
    }
    return x;
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, v] = [argv[i], argv[i + 1]];
    if (flag === "--listeners") o.listeners = num(flag, v, 1);
    else if (flag === "--rate") o.rate = num(flag, v, 1);
    else if (flag === "--seconds") o.seconds = num(flag, v, 0.1, false);
    else if (flag === "--text-bytes") o.textBytes = num(flag, v, 0);
    else if (flag === "--buffer-limit") o.bufferLimit = num(flag, v, 1024);
    else if (flag === "--coalesce-ms") o.coalesceMs = num(flag, v, 0);
    else if (flag === "--workers") o.workers = num(flag, v, 1);
    else if (flag === "--help" || flag === "-h") {
      console.log(USAGE);
      Deno.exit(0);
    } else bad(`unknown flag ${flag}`);
  }
  return o;
}

if (isWorker) serveAsWorker();
else if (import.meta.main) {
  const opts = parseEventsBenchArgs(Deno.args);
  const r = await runEventsBench(opts);
  console.log(formatEventsBench(r));
  console.log(`\nwrote ${await writeEventsBench(r)}`);
  const ok = r.missing === 0 && r.duplicates === 0 && r.outOfOrder === 0;
  if (!ok) Deno.exit(1);
}
