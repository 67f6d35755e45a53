// The agent event channel's transport end to end: a real Deno.serve on loopback mounting
// eventRoutes over a real bus, read by raw fetch streams, WebSockets (the built-in client and a
// raw TCP one that never reads) and the npm `eventsource` client. Covers the wire format, resume
// and replay gaps, the shared listener cap, heartbeats, the slow-client drop and reconnection.
import assert from "node:assert/strict";
import { EventSource } from "eventsource";
import { Hono } from "hono";
import { type BusEvent, createBus, type EventBus } from "../lib/events/bus.ts";
import { createFanout, type Fanout, type FanoutOptions } from "../lib/events/fanout.ts";
import { eventRoutes } from "../routes/events.ts";
import { freePort } from "./support/server.ts";

// ---------------------------------------------------------------------------------------------
// Harness

type Channel = {
  bus: EventBus;
  fanout: Fanout;
  url: string;
  port: number;
  [Symbol.asyncDispose]: () => Promise<void>;
};

function startChannel(
  o: FanoutOptions & { ringSize?: number; retryMs?: number; coalesceMs?: number } = {},
): Channel {
  const bus = createBus({ ringSize: o.ringSize });
  const fanout = createFanout(bus, {
    pingMs: o.pingMs ?? 60_000,
    maxListeners: o.maxListeners,
    bufferLimit: o.bufferLimit,
  });
  const app = new Hono();
  app.route("/", eventRoutes(bus, { fanout, retryMs: o.retryMs, coalesceMs: o.coalesceMs }));
  const port = freePort();
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, app.fetch);
  return {
    bus,
    fanout,
    port,
    url: `http://127.0.0.1:${port}`,
    [Symbol.asyncDispose]: async () => {
      fanout.closeAll();
      await server.shutdown();
    },
  };
}

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: ReturnType<typeof setTimeout> | undefined;
  const expire = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, expire]).finally(() => clearTimeout(t));
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function eventually(check: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await delay(5);
  }
}

/** A change signal: `wait()` resolves at the next `fire()`. */
function signal() {
  let fire!: () => void;
  let p = new Promise<void>((r) => fire = r);
  return {
    wait: () => p,
    fire: () => {
      const f = fire;
      p = new Promise<void>((r) => fire = r);
      f();
    },
  };
}

type Block = {
  raw: string;
  /** performance.now() when the chunk holding it was read. */
  at: number;
  id?: string;
  data?: string;
  retry?: string;
  comments: string[];
  fields: string[];
};

function parseBlock(raw: string, at: number): Block {
  const b: Block = { raw, at, comments: [], fields: [] };
  for (const line of raw.split("\n")) {
    if (line.startsWith(":")) {
      b.comments.push(line.slice(1).trim());
      continue;
    }
    const i = line.indexOf(":");
    const name = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    b.fields.push(name);
    if (name === "id") b.id = value;
    else if (name === "data") b.data = b.data === undefined ? value : `${b.data}\n${value}`;
    else if (name === "retry") b.retry = value;
  }
  return b;
}

/** A raw fetch reader of an SSE stream, pumping in the background into `blocks`. */
type SseConn = {
  res: Response;
  blocks: Block[];
  /** Bus events only (blocks with an id), in arrival order. */
  events: () => { id: number; payload: Record<string, unknown> }[];
  until: (check: () => boolean, what: string, ms?: number) => Promise<void>;
  ended: () => boolean;
  close: () => Promise<void>;
};

async function openSse(url: string, headers: Record<string, string> = {}): Promise<SseConn> {
  const res = await fetch(url, { headers });
  assert.equal(res.status, 200, `SSE open failed: ${res.status}`);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const blocks: Block[] = [];
  const changed = signal();
  let done = false;
  let buf = "";
  const pump = (async () => {
    try {
      while (true) {
        const r = await reader.read();
        if (r.done) break;
        const at = performance.now();
        buf += r.value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          blocks.push(parseBlock(buf.slice(0, cut), at));
          buf = buf.slice(cut + 2);
        }
        changed.fire();
      }
    } catch { /* dropped or cancelled: `ended()` tells */ }
    done = true;
    changed.fire();
  })();
  const until = async (check: () => boolean, what: string, ms = 4000) => {
    const deadline = Date.now() + ms;
    while (!check()) {
      if (done) throw new Error(`stream ended while waiting for ${what}`);
      await timeout(changed.wait(), Math.max(1, deadline - Date.now()), what);
    }
  };
  return {
    res,
    blocks,
    events: () =>
      blocks.filter((b) => b.id !== undefined).map((b) => ({
        id: Number(b.id),
        payload: JSON.parse(b.data!),
      })),
    until,
    ended: () => done,
    close: async () => {
      await reader.cancel().catch(() => {});
      await pump;
    },
  };
}

/** The built-in WebSocket client, collecting parsed text frames. */
type WsConn = {
  frames: Record<string, unknown>[];
  until: (check: () => boolean, what: string, ms?: number) => Promise<void>;
  socket: WebSocket;
  closed: Promise<CloseEvent>;
  close: () => Promise<void>;
};

async function openWs(url: string): Promise<WsConn> {
  const socket = new WebSocket(url);
  const frames: Record<string, unknown>[] = [];
  const changed = signal();
  socket.onmessage = (e) => {
    frames.push(JSON.parse(e.data as string));
    changed.fire();
  };
  const closed = new Promise<CloseEvent>((r) => socket.addEventListener("close", r));
  await timeout(
    new Promise<void>((resolve, reject) => {
      socket.onopen = () => resolve();
      socket.onerror = () => reject(new Error("WebSocket failed to open"));
    }),
    3000,
    "WebSocket open",
  );
  return {
    frames,
    socket,
    closed,
    until: async (check, what, ms = 4000) => {
      const deadline = Date.now() + ms;
      while (!check()) {
        await timeout(Promise.race([changed.wait(), closed]), deadline - Date.now(), what);
        if (!check() && socket.readyState === WebSocket.CLOSED) {
          throw new Error(`socket closed while waiting for ${what}`);
        }
      }
    },
    close: async () => {
      if (socket.readyState !== WebSocket.CLOSED) socket.close();
      await closed;
    },
  };
}

/** A raw TCP WebSocket handshake; returns the response head (and body when not 101). */
async function rawUpgrade(port: number, path: string) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(new TextEncoder().encode(
    `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\n` +
      `Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n` +
      `Sec-WebSocket-Version: 13\r\n\r\n`,
  ));
  const dec = new TextDecoder();
  let text = "";
  const buf = new Uint8Array(4096);
  while (!text.includes("\r\n\r\n")) {
    const n = await conn.read(buf);
    if (n === null) break;
    text += dec.decode(buf.subarray(0, n));
  }
  const [head, rest = ""] = text.split("\r\n\r\n");
  let body = rest;
  const len = Number(head.match(/content-length:\s*(\d+)/i)?.[1] ?? 0);
  while (!head.startsWith("HTTP/1.1 101") && body.length < len) {
    const n = await conn.read(buf);
    if (n === null) break;
    body += dec.decode(buf.subarray(0, n));
  }
  return { conn, status: Number(head.split(" ")[1]), body };
}

const ids = (events: { id: number }[]) => events.map((e) => e.id);
const range = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

// ---------------------------------------------------------------------------------------------
// SSE wire format

Deno.test("SSE: connected + retry first, id on every event, data-only, trace never sent", async () => {
  await using ch = startChannel({ retryMs: 1234 });
  const c = await openSse(`${ch.url}/api/events`, { "accept-encoding": "gzip, br" });
  try {
    assert.equal(c.res.headers.get("content-type"), "text/event-stream; charset=utf-8");
    assert.equal(c.res.headers.get("cache-control"), "no-cache, no-transform");
    assert.equal(c.res.headers.get("x-accel-buffering"), "no");
    assert.equal(c.res.headers.get("connection"), "keep-alive");
    assert.equal(c.res.headers.get("content-encoding"), null, "never compressed");
    await c.until(() => c.blocks.length >= 2, "hello");
    assert.deepEqual(c.blocks[0].raw, ": connected");
    assert.deepEqual(c.blocks[1].raw, "retry: 1234");
    assert.equal(ch.fanout.stats.listeners, 1);

    const sent: BusEvent[] = [];
    sent.push(ch.bus.publish("agent", "agent_output", { agentId: "a1", text: "line1\nline2" }));
    const trace = ch.bus.publish("trace", "llm_call", { secret: "internal" });
    assert.equal(trace.id, undefined);
    sent.push(ch.bus.publish("agent", "agent_status", { agentId: "a1", status: "done" }));
    ch.bus.publish("trace", "llm_call", { secret: "internal" });
    sent.push(ch.bus.publish("queue_update", "queue_update", { sessionId: "s", pending: 2 }));
    await c.until(() => c.blocks.length >= 5, "three events");
    await delay(50);
    const rest = c.blocks.slice(2);
    assert.equal(rest.length, 3, "exactly the three public events, no trace");
    for (const [i, b] of rest.entries()) {
      assert.deepEqual(b.fields, ["id", "data"], `data-only with an id: ${b.raw}`);
      assert.equal(b.raw, `id: ${sent[i].id}\ndata: ${sent[i].data}`);
      assert.deepEqual(JSON.parse(b.data!), sent[i].payload);
    }
    assert.ok(!c.blocks.some((b) => b.raw.includes("internal")));
  } finally {
    await c.close();
  }
  await eventually(() => ch.fanout.stats.listeners === 0, "the place to be released");
});

Deno.test("SSE: heartbeat is a comment plus an id-less data ping, every pingMs", async () => {
  await using ch = startChannel({ pingMs: 120 });
  const t0 = performance.now();
  const c = await openSse(`${ch.url}/api/events`);
  try {
    const pings = () => c.blocks.filter((b) => b.comments.includes("ping"));
    await c.until(() => pings().length >= 2, "two heartbeats", 4000);
    // Driven by the interval, not sent on connect: the first comes one interval after opening.
    const first = pings()[0].at - t0;
    assert.ok(first >= 120 && first < 3000, `first heartbeat after ${first} ms`);
    const i = c.blocks.findIndex((b) => b.comments.includes("ping"));
    assert.equal(c.blocks[i].raw, ": ping");
    await c.until(() => c.blocks.length > i + 1, "the data ping");
    const dataPing = c.blocks[i + 1];
    assert.deepEqual(dataPing.fields, ["data"], "the data ping has no id");
    assert.deepEqual(JSON.parse(dataPing.data!), { topic: "system", event: "ping" });
  } finally {
    await c.close();
  }
});

Deno.test("SSE: resume by Last-Event-ID header and ?lastEventId=, header first", async () => {
  await using ch = startChannel();
  for (let i = 0; i < 5; i++) {
    ch.bus.publish("agent", "agent_output", { agentId: "a", text: `${i}` });
  }
  const conns: SseConn[] = [];
  try {
    const byHeader = await openSse(`${ch.url}/api/events`, { "last-event-id": "2" });
    const byQuery = await openSse(`${ch.url}/api/events?lastEventId=3`);
    const both = await openSse(`${ch.url}/api/events?lastEventId=1`, { "last-event-id": "4" });
    const fromZero = await openSse(`${ch.url}/api/events?lastEventId=0`);
    const bad = await openSse(`${ch.url}/api/events?lastEventId=abc`);
    const badHeader = await openSse(`${ch.url}/api/events`, { "last-event-id": "-3" });
    const fresh = await openSse(`${ch.url}/api/events`);
    conns.push(byHeader, byQuery, both, fromZero, bad, badHeader, fresh);
    await eventually(() => ch.fanout.stats.listeners === 7, "seven listeners");
    ch.bus.publish("agent", "agent_output", { agentId: "a", text: "live" });
    const want: [SseConn, number[]][] = [
      [byHeader, [3, 4, 5, 6]],
      [byQuery, [4, 5, 6]],
      [both, [5, 6]],
      [fromZero, [1, 2, 3, 4, 5, 6]],
      [bad, [6]],
      [badHeader, [6]],
      [fresh, [6]],
    ];
    for (const [c, expect] of want) {
      await c.until(() => c.events().some((e) => e.id === 6), "the live event");
      assert.deepEqual(ids(c.events()), expect);
      assert.ok(!c.blocks.some((b) => b.data?.includes("replay_gap")), "no gap inside the ring");
    }
    assert.equal(byHeader.events()[0].payload.text, "2");
  } finally {
    for (const c of conns) await c.close();
  }
});

Deno.test("SSE: replay_gap when the cursor is older than the ring or ahead of it", async () => {
  await using ch = startChannel({ ringSize: 10 });
  for (let i = 1; i <= 25; i++) ch.bus.publish("agent", "agent_output", { agentId: "a", n: i });
  const cases: [string, number, boolean][] = [["3", 3, true], ["100", 100, true], [
    "15",
    15,
    false,
  ]];
  for (const [cursor, n, gap] of cases) {
    const c = await openSse(`${ch.url}/api/events`, { "last-event-id": cursor });
    try {
      await c.until(() => c.events().length >= 10, `the ring after cursor ${cursor}`);
      const body = c.blocks.slice(2);
      if (gap) {
        assert.deepEqual(body[0].fields, ["data"], "the gap notice has no id");
        assert.deepEqual(JSON.parse(body[0].data!), {
          topic: "system",
          event: "replay_gap",
          lastEventId: n,
          serverLastId: 25,
        });
        assert.equal(body.filter((b) => b.data?.includes("replay_gap")).length, 1);
      } else assert.ok(!body.some((b) => b.data?.includes("replay_gap")));
      assert.deepEqual(ids(c.events()), range(16, 25));
      assert.deepEqual(c.events().map((e) => e.payload.n), range(16, 25));
    } finally {
      await c.close();
    }
  }
});

Deno.test("SSE: replay and live splice without loss or duplicate while publishing", async () => {
  await using ch = startChannel();
  let stop = false;
  const publisher = (async () => {
    while (!stop) {
      ch.bus.publish("agent", "agent_output", { agentId: "a", text: "x" });
      await delay(1);
    }
  })();
  const conns: SseConn[] = [];
  try {
    await eventually(() => ch.bus.lastId() >= 20, "some history");
    for (let i = 0; i < 4; i++) {
      const cursor = ch.bus.lastId() - 5;
      const c = await openSse(`${ch.url}/api/events?lastEventId=${cursor}`);
      conns.push(c);
      await c.until(() => c.events().length >= 40, "forty events");
      const got = ids(c.events()).slice(0, 40);
      assert.deepEqual(got, range(cursor + 1, cursor + 40), `contiguous after cursor ${cursor}`);
    }
  } finally {
    stop = true;
    await publisher;
    for (const c of conns) await c.close();
  }
});

Deno.test("SSE: an event after a quiet spell goes at once; a busy stream batches per window", async () => {
  await using ch = startChannel({ coalesceMs: 300 });
  const c = await openSse(`${ch.url}/api/events`);
  try {
    await c.until(() => c.blocks.length >= 2, "hello");
    await delay(350); // a full window since the hello went out
    const t0 = performance.now();
    ch.bus.publish("agent", "agent_output", { agentId: "a", text: "first" });
    await c.until(() => c.events().length >= 1, "the first event");
    const first = c.blocks.find((b) => b.id === "1")!;
    assert.ok(first.at - t0 < 250, `a lone event waited ${first.at - t0} ms`);
    ch.bus.publish("agent", "agent_output", { agentId: "a", text: "second" });
    await delay(20);
    ch.bus.publish("agent", "agent_output", { agentId: "a", text: "third" });
    await c.until(() => c.events().length >= 3, "the batched events");
    const [second, third] = [
      c.blocks.find((b) => b.id === "2")!,
      c.blocks.find((b) => b.id === "3")!,
    ];
    assert.equal(second.at, third.at, "both went out in one chunk");
    assert.ok(second.at - first.at >= 250, `the batch left ${second.at - first.at} ms after`);
  } finally {
    await c.close();
  }
});

// ---------------------------------------------------------------------------------------------
// Capacity and slow clients

Deno.test("cap: SSE and WS share maxListeners; the next gets 503 SSE_CAPACITY; close frees", async () => {
  await using ch = startChannel({ maxListeners: 2 });
  const a = await openSse(`${ch.url}/api/events`);
  const b = await openWs(`ws://127.0.0.1:${ch.port}/ws`);
  let c: SseConn | undefined;
  try {
    assert.equal(ch.fanout.stats.listeners, 2);
    const refused = await fetch(`${ch.url}/api/events`);
    assert.equal(refused.status, 503);
    assert.deepEqual(await refused.json(), { error: "SSE_CAPACITY" });
    const wsRefused = await rawUpgrade(ch.port, "/ws");
    wsRefused.conn.close();
    assert.equal(wsRefused.status, 503, "refused before upgrading");
    assert.deepEqual(JSON.parse(wsRefused.body), { error: "SSE_CAPACITY" });
    assert.equal(ch.fanout.stats.rejected, 2);

    await b.close();
    await eventually(() => ch.fanout.stats.listeners === 1, "the WS place to be released");
    c = await openSse(`${ch.url}/api/events`);
    assert.equal(ch.fanout.stats.listeners, 2);
    await a.close();
    await eventually(() => ch.fanout.stats.listeners === 1, "the SSE place to be released");
    const d = await openWs(`ws://127.0.0.1:${ch.port}/ws`);
    assert.equal(ch.fanout.stats.listeners, 2);
    ch.bus.publish("agent", "agent_status", { agentId: "a", status: "running" });
    await d.until(() => d.frames.length >= 1, "a frame on the freed place");
    await c.until(() => c!.events().length >= 1, "an event on the freed place");
    await d.close();
    assert.equal(ch.fanout.stats.peak, 2);
  } finally {
    await a.close();
    await b.close();
    await c?.close();
  }
});

/** Publishes ~64 KiB events, each once `fast` has the one before, until `slowDropped()`. */
async function outrunSlowClient(
  ch: Channel,
  fast: SseConn,
  slowDropped: () => boolean,
): Promise<number> {
  const text = "x".repeat(64 * 1024);
  let n = 0;
  while (!slowDropped()) {
    if (n >= 400) throw new Error(`slow client not dropped after ${n} events (25 MiB)`);
    const e = ch.bus.publish("agent", "agent_output", { agentId: "fast", text, n });
    n++;
    await fast.until(() => fast.events().at(-1)?.id === e.id, `event ${e.id} at the fast client`);
  }
  return n;
}

Deno.test("slow SSE client is dropped past bufferLimit; a fast one keeps every event", async () => {
  await using ch = startChannel({ bufferLimit: 256 * 1024 });
  const slow = await fetch(`${ch.url}/api/events`); // its body is never read
  const fast = await openSse(`${ch.url}/api/events`);
  try {
    await eventually(() => ch.fanout.stats.listeners === 2, "two listeners");
    const sent = await outrunSlowClient(ch, fast, () => ch.fanout.stats.dropped === 1);
    assert.equal(ch.fanout.stats.listeners, 1, "the dropped client's place is released");
    for (let i = 0; i < 5; i++) ch.bus.publish("agent", "agent_output", { agentId: "after" });
    await fast.until(() => fast.events().length === sent + 5, "the events after the drop");
    assert.deepEqual(ids(fast.events()), range(1, sent + 5), "in order, none lost or repeated");
    // The slow client gets what was in flight, then its stream fails (it was not ended cleanly).
    await assert.rejects(async () => {
      for await (const _ of slow.body!) { /* drain */ }
    });
  } finally {
    await slow.body?.cancel().catch(() => {});
    await fast.close();
  }
});

Deno.test("a resume bigger than bufferLimit is delivered, not mistaken for a slow client", async () => {
  await using ch = startChannel({ bufferLimit: 16 * 1024 });
  const text = "y".repeat(4096);
  for (let i = 1; i <= 50; i++) ch.bus.publish("agent", "agent_output", { agentId: "a", text, i });
  const sse = await openSse(`${ch.url}/api/events?lastEventId=0`);
  const ws = await openWs(`ws://127.0.0.1:${ch.port}/ws?lastEventId=0`);
  try {
    await sse.until(() => sse.events().length >= 50, "the 200 KiB replay over SSE");
    await ws.until(() => ws.frames.length >= 50, "the 200 KiB replay over WS");
    ch.bus.publish("agent", "agent_status", { agentId: "a", status: "done" });
    await sse.until(() => sse.events().length >= 51, "a live event after the replay");
    await ws.until(() => ws.frames.length >= 51, "a live WS frame after the replay");
    assert.deepEqual(ids(sse.events()), range(1, 51));
    assert.deepEqual(ws.frames.map((f) => f.id), range(1, 51));
    assert.equal(ch.fanout.stats.dropped, 0);
    assert.equal(ch.fanout.stats.listeners, 2);
  } finally {
    await sse.close();
    await ws.close();
  }
});

// ---------------------------------------------------------------------------------------------
// WebSocket

Deno.test("WS: same payloads with the id added, replay by query, gap, trace never sent", async () => {
  await using ch = startChannel({ ringSize: 10, pingMs: 150 });
  const sent: BusEvent[] = [];
  for (let i = 1; i <= 4; i++) {
    sent.push(ch.bus.publish("agent", "agent_output", { agentId: "a", text: `t${i}` }));
  }
  const ws = await openWs(`ws://127.0.0.1:${ch.port}/ws?lastEventId=2`);
  const sse = await openSse(`${ch.url}/api/events?lastEventId=2`);
  const gap = await openWs(`ws://127.0.0.1:${ch.port}/ws?lastEventId=99`);
  try {
    ch.bus.publish("trace", "llm_call", { secret: "internal" });
    sent.push(ch.bus.publish("agent", "agent_status", { agentId: "a", status: "done" }));
    const isEvent = (f: Record<string, unknown>) => f.id !== undefined;
    await ws.until(() => ws.frames.filter(isEvent).length >= 3, "three events");
    await sse.until(() => sse.events().length >= 3, "three SSE events");
    const events = ws.frames.filter(isEvent);
    assert.deepEqual(events, sent.slice(2).map((e) => ({ ...e.payload, id: e.id })));
    assert.deepEqual(
      events.map(({ id: _, ...payload }) => payload),
      sse.events().map((e) => e.payload),
      "WS and SSE carry the same payloads",
    );
    assert.ok(!ws.frames.some((f) => f.topic === "trace"));

    await ws.until(() => ws.frames.some((f) => f.event === "ping"), "a ping frame", 2000);
    assert.deepEqual(ws.frames.find((f) => f.event === "ping"), {
      topic: "system",
      event: "ping",
    });

    await gap.until(() => gap.frames.filter(isEvent).length >= 5, "the ring after a gap");
    assert.deepEqual(gap.frames[0], {
      topic: "system",
      event: "replay_gap",
      lastEventId: 99,
      serverLastId: 4,
    });
    assert.deepEqual(gap.frames.filter(isEvent).map((f) => f.id), [1, 2, 3, 4, 5]);
  } finally {
    await ws.close();
    await sse.close();
    await gap.close();
  }
});

Deno.test("WS: non-upgrade GET is 400; other methods 405; HEAD opens nothing; talking closes", async () => {
  await using ch = startChannel();
  const plain = await fetch(`${ch.url}/ws`);
  assert.equal(plain.status, 400);
  assert.deepEqual(await plain.json(), { error: "WEBSOCKET_UPGRADE_REQUIRED" });
  for (const path of ["/ws", "/api/events"]) {
    const r = await fetch(`${ch.url}${path}`, { method: "POST", body: "{}" });
    assert.equal(r.status, 405);
    assert.deepEqual(await r.json(), { error: "METHOD_NOT_ALLOWED" });
    assert.match(r.headers.get("allow") ?? "", /GET/);
  }
  const head = await fetch(`${ch.url}/api/events`, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.match(head.headers.get("content-type") ?? "", /^text\/event-stream/);
  assert.equal(ch.fanout.stats.opened, 0, "HEAD claims no listener place");

  const ws = await openWs(`ws://127.0.0.1:${ch.port}/ws`);
  ws.socket.send("hello?");
  const closed = await timeout(ws.closed, 3000, "the server to close a talking client");
  assert.equal(closed.code, 1003);
  await eventually(() => ch.fanout.stats.listeners === 0, "the place to be released");
});

Deno.test("slow WS client (never reads) is dropped by bufferedAmount; others unaffected", async () => {
  await using ch = startChannel({ bufferLimit: 256 * 1024 });
  const slow = await rawUpgrade(ch.port, "/ws");
  const fast = await openSse(`${ch.url}/api/events`);
  try {
    assert.equal(slow.status, 101);
    await eventually(() => ch.fanout.stats.listeners === 2, "two listeners");
    const sent = await outrunSlowClient(ch, fast, () => ch.fanout.stats.dropped === 1);
    assert.equal(ch.fanout.stats.listeners, 1);
    assert.deepEqual(ids(fast.events()), range(1, sent));
  } finally {
    slow.conn.close();
    await fast.close();
  }
});

Deno.test("options: bad values and a fanout beside listener options are refused", () => {
  const bus = createBus();
  assert.throws(() => createFanout(bus, { maxListeners: 0 }), /maxListeners must be a positive/);
  assert.throws(() => createFanout(bus, { bufferLimit: 1.5 }), /bufferLimit must be a positive/);
  const fanout = createFanout(bus);
  assert.deepEqual(fanout.options, { maxListeners: 256, bufferLimit: 1024 * 1024, pingMs: 15_000 });
  assert.throws(() => eventRoutes(bus, { fanout, pingMs: 10 }), /pass maxListeners/);
  assert.throws(() => eventRoutes(createBus(), { fanout }), /another bus/);
  assert.throws(() => eventRoutes(bus, { retryMs: -1 }), /retryMs/);
});

// ---------------------------------------------------------------------------------------------
// The npm eventsource client

Deno.test("eventsource: messages carry ids; reconnect after a server close resumes exactly once", async () => {
  await using ch = startChannel({ retryMs: 50 });
  const got: { id: string; payload: Record<string, unknown> }[] = [];
  let opens = 0;
  const changed = signal();
  const es = new EventSource(`${ch.url}/api/events?lastEventId=0`);
  es.onopen = () => {
    opens++;
    changed.fire();
  };
  es.onmessage = (e) => {
    got.push({ id: e.lastEventId, payload: JSON.parse(e.data) });
    changed.fire();
  };
  const until = async (check: () => boolean, what: string) => {
    const deadline = Date.now() + 5000;
    while (!check()) await timeout(changed.wait(), Math.max(1, deadline - Date.now()), what);
  };
  const total = 60;
  let published = 0;
  try {
    await until(() => opens === 1, "open");
    let closedOnce = false;
    while (published < total) {
      ch.bus.publish("agent", "agent_output", { agentId: "a", n: ++published });
      if (published === 20) {
        await until(() => got.length >= 20, "the first 20 events");
        // Server-side end of every stream: the client reconnects with Last-Event-ID: 20.
        ch.fanout.closeAll();
        closedOnce = true;
      }
      await delay(2);
    }
    assert.ok(closedOnce);
    await until(() => got.length >= total, `all ${total} events`);
    await delay(50);
    assert.equal(opens, 2, "exactly one reconnection");
    assert.deepEqual(got.map((g) => Number(g.id)), range(1, total), "every event exactly once");
    assert.deepEqual(got.map((g) => g.payload.n), range(1, total));
    assert.ok(got.every((g) => g.payload.topic === "agent" && g.payload.event === "agent_output"));
  } finally {
    es.close();
  }
  await eventually(() => ch.fanout.stats.listeners === 0, "the place to be released");
});
