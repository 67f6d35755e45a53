/**
 * The web UI's event-channel transport (ui/assets/channel.js) against fakes: a fake `fetch` whose
 * bodies are streams the test writes SSE into (or refuses like a stopped server), a fake
 * WebSocket, and a fake clock. Checked: events in order with pings and repeated ids dropped, the
 * cursor sent on reconnect, `/ws` only while SSE never opened (and never after it worked), quiet
 * reconnects with short backoff, the 8 s "Disconnected" rule, `replay_gap` -> `onGap` (and the
 * restarted server's lower ids taken), a 401 waiting for the key, and `close()` leaving nothing.
 */
import assert from "node:assert/strict";
import { type ChannelStatus, createChannel } from "../ui/assets/channel.js";

type Json = Record<string, unknown>;

/** Timers that run only when the test advances the clock. */
class FakeClock {
  t = 0;
  #next = 1;
  #timers = new Map<number, { at: number; fn: () => void }>();
  setTimeout = (fn: () => void, ms: number) => {
    const id = this.#next++;
    this.#timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  };
  clearTimeout = (id: unknown) => {
    this.#timers.delete(id as number);
  };
  now = () => this.t;
  get pending() {
    return this.#timers.size;
  }
  /** Runs every timer due within `ms`, in order, letting the streams work in between. */
  async advance(ms: number) {
    const end = this.t + ms;
    while (true) {
      await settle();
      let first: [number, { at: number; fn: () => void }] | undefined;
      for (const entry of this.#timers) {
        if (entry[1].at <= end && (!first || entry[1].at < first[1].at)) first = entry;
      }
      if (!first) break;
      this.#timers.delete(first[0]);
      this.t = first[1].at;
      first[1].fn();
    }
    this.t = end;
    await settle();
  }
}

/** Lets promise jobs and stream pipes run (real macrotask turns; the channel's timers are fake). */
async function settle() {
  for (let i = 0; i < 4; i++) await new Promise((r) => setTimeout(r, 0));
}

const encoder = new TextEncoder();

type Stream = { controller: ReadableStreamDefaultController<Uint8Array>; open: boolean };

/** The server side of the fake fetch: up (SSE 200), down (refused), or answering otherwise. */
class FakeServer {
  mode: "sse" | "down" | "html" | "silent" | "unauthorized" = "sse";
  requests: { url: string; headers: Headers; at: number }[] = [];
  streams: Stream[] = [];
  constructor(readonly clock: FakeClock) {}

  fetch = (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    this.requests.push({
      url: String(input),
      headers: new Headers(init.headers),
      at: this.clock.t,
    });
    if (this.mode === "down") return Promise.reject(new TypeError("connection refused"));
    if (this.mode === "html") {
      return Promise.resolve(
        new Response("<html>proxy error</html>", {
          status: 502,
          headers: { "content-type": "text/html" },
        }),
      );
    }
    if (this.mode === "unauthorized") {
      return Promise.resolve(
        Response.json({ error: "UNAUTHORIZED", message: "Missing API key." }, { status: 401 }),
      );
    }
    const silent = this.mode === "silent";
    let stream: Stream;
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        stream = { controller, open: true };
        this.streams.push(stream);
        if (!silent) controller.enqueue(encoder.encode(": connected\n\nretry: 3000\n\n"));
      },
      cancel: () => {
        stream.open = false;
      },
    });
    init.signal?.addEventListener("abort", () => {
      if (!stream.open) return;
      stream.open = false;
      stream.controller.error(new DOMException("aborted", "AbortError"));
    });
    return Promise.resolve(
      new Response(body, { headers: { "content-type": "text/event-stream; charset=utf-8" } }),
    );
  };

  /** Writes raw SSE text to every open stream. */
  write(text: string) {
    for (const s of this.streams) if (s.open) s.controller.enqueue(encoder.encode(text));
  }
  event(id: number, payload: Json) {
    this.write(`id: ${id}\ndata: ${JSON.stringify(payload)}\n\n`);
  }
  ping() {
    this.write(`: ping\n\ndata: {"topic":"system","event":"ping"}\n\n`);
  }
  /** The process dies: open streams break, new requests are refused. */
  stop() {
    this.mode = "down";
    for (const s of this.streams) {
      if (!s.open) continue;
      s.open = false;
      s.controller.error(new TypeError("network error"));
    }
  }
  get open() {
    return this.streams.filter((s) => s.open).length;
  }
}

class FakeWebSocket {
  static instances: FakeWebSocket[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((m: { data: unknown }) => void) | null = null;
  onclose: (() => void) | null = null;
  onerror: (() => void) | null = null;
  closed = false;
  constructor(readonly url: string) {
    FakeWebSocket.instances.push(this);
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    queueMicrotask(() => this.onclose?.());
  }
  // test side
  open() {
    this.onopen?.();
  }
  message(payload: Json) {
    this.onmessage?.({ data: JSON.stringify(payload) });
  }
  fail() {
    this.closed = true;
    this.onerror?.();
    this.onclose?.();
  }
}

function setup(opts: { apiKey?: string } = {}) {
  FakeWebSocket.instances = [];
  const clock = new FakeClock();
  const server = new FakeServer(clock);
  const events: { event: Json; id: number | undefined }[] = [];
  const statuses: ChannelStatus[] = [];
  const gaps: Json[] = [];
  const auth: string[] = [];
  const channel = createChannel({
    fetch: server.fetch as typeof fetch,
    WebSocket: FakeWebSocket as unknown as { new (url: string): WebSocket },
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    now: clock.now,
    base: "http://hearth.test:8001/agents",
    getApiKey: () => opts.apiKey ?? "",
    onEvent: (event: Json, id: number | undefined) => events.push({ event, id }),
    onGap: (notice: Json) => gaps.push(notice),
    onStatus: (s: ChannelStatus) => statuses.push(s),
    onAuth: (message: string) => auth.push(message),
  });
  const noticeShown = () => statuses.at(-1)?.disconnected === true;
  const finish = async () => {
    channel.close();
    await settle();
    assert.equal(clock.pending, 0, "close() leaves no timer");
    assert.equal(server.open, 0, "close() leaves no open stream");
  };
  return { clock, server, events, statuses, gaps, auth, channel, noticeShown, finish };
}

const agentEvent = (n: number) => ({
  topic: "agent",
  event: "agent_output",
  agentId: "s1",
  text: `t${n}`,
});

Deno.test("channel: SSE events in order; pings and ids already seen are dropped", async () => {
  const t = setup({ apiKey: "k-1" });
  t.channel.start();
  await t.clock.advance(0);
  assert.equal(t.server.requests.length, 1);
  const first = t.server.requests[0];
  assert.equal(first.url, "http://hearth.test:8001/api/events");
  assert.equal(first.headers.get("authorization"), "Bearer k-1");
  assert.equal(first.headers.get("last-event-id"), null, "the first connection has no cursor");
  assert.equal(t.statuses.at(-1)?.state, "open");
  assert.equal(t.statuses.at(-1)?.transport, "sse");

  t.server.event(1, agentEvent(1));
  t.server.ping();
  t.server.event(2, agentEvent(2));
  t.server.event(2, agentEvent(2)); // a replay overlapping what was seen
  t.server.event(1, agentEvent(1));
  t.server.ping();
  t.server.event(3, agentEvent(3));
  await t.clock.advance(0);
  assert.deepEqual(t.events.map((e) => e.id), [1, 2, 3]);
  assert.deepEqual(t.events.map((e) => e.event.text), ["t1", "t2", "t3"]);
  assert.ok(!t.events.some((e) => e.event.topic === "system"), "pings never reach the page");
  assert.equal(FakeWebSocket.instances.length, 0);
  await t.finish();
});

Deno.test("channel: after SSE worked, a stopped server means SSE retries with the cursor, never /ws", async () => {
  const t = setup();
  t.channel.start();
  await t.clock.advance(0);
  for (let i = 1; i <= 5; i++) t.server.event(i, agentEvent(i));
  await t.clock.advance(0);
  assert.equal(t.events.length, 5);

  t.server.stop();
  await t.clock.advance(30_000);
  assert.equal(FakeWebSocket.instances.length, 0, "no WebSocket after SSE once opened");
  const retries = t.server.requests.slice(1);
  assert.ok(retries.length >= 12, `kept retrying: ${retries.length} attempts in 30 s`);
  for (const r of retries) {
    assert.equal(r.url, "http://hearth.test:8001/api/events");
    assert.equal(r.headers.get("last-event-id"), "5");
  }
  const gaps = retries.map((r, i) => r.at - (i === 0 ? 0 : retries[i - 1].at)).slice(1);
  assert.ok(Math.max(...gaps) <= 2000, `backoff stays short: ${gaps.join(", ")}`);

  t.server.mode = "sse";
  await t.clock.advance(2000);
  assert.equal(t.statuses.at(-1)?.state, "open");
  assert.equal(t.server.requests.at(-1)?.headers.get("last-event-id"), "5");
  t.server.event(6, agentEvent(6));
  await t.clock.advance(0);
  assert.deepEqual(t.events.map((e) => e.id), [1, 2, 3, 4, 5, 6]);
  assert.equal(FakeWebSocket.instances.length, 0);
  await t.finish();
});

Deno.test("channel: SSE that never opens (proxy error page) falls back to /ws with cursor and key", async () => {
  const t = setup({ apiKey: "k 2" });
  t.server.mode = "html";
  t.channel.start();
  await t.clock.advance(0);
  assert.equal(t.server.requests.length, 1);
  await t.clock.advance(250);
  assert.equal(FakeWebSocket.instances.length, 1, "the next attempt is a WebSocket");
  const ws = FakeWebSocket.instances[0];
  assert.equal(ws.url, "ws://hearth.test:8001/ws?api_key=k+2");
  ws.open();
  assert.equal(t.statuses.at(-1)?.transport, "ws");
  ws.message({ ...agentEvent(7), id: 7 });
  ws.message({ topic: "system", event: "ping" });
  ws.message({ ...agentEvent(7), id: 7 });
  ws.message({ ...agentEvent(8), id: 8 });
  assert.deepEqual(t.events.map((e) => e.id), [7, 8]);

  // The socket drops: WebSocket worked and SSE never did, so it stays on WebSocket.
  ws.fail();
  await t.clock.advance(2000);
  assert.equal(t.server.requests.length, 1, "no SSE attempt after WebSocket worked");
  assert.equal(FakeWebSocket.instances.length, 2);
  assert.equal(
    FakeWebSocket.instances[1].url,
    "ws://hearth.test:8001/ws?lastEventId=8&api_key=k+2",
  );
  await t.finish();
});

Deno.test("channel: a 200 that never says ': connected' times out into the /ws fallback", async () => {
  const t = setup();
  t.server.mode = "silent"; // a buffering proxy: headers, then nothing
  t.channel.start();
  await t.clock.advance(9_000);
  assert.equal(FakeWebSocket.instances.length, 0);
  await t.clock.advance(1_300);
  assert.equal(FakeWebSocket.instances.length, 1);
  assert.equal(FakeWebSocket.instances[0].url, "ws://hearth.test:8001/ws");
  assert.equal(t.server.open, 0, "the silent stream was aborted");
  // The socket fails too: back to SSE (SSE still never opened), which now works.
  t.server.mode = "sse";
  FakeWebSocket.instances[0].fail();
  await t.clock.advance(1000);
  assert.equal(t.statuses.at(-1)?.transport, "sse");
  assert.equal(FakeWebSocket.instances.length, 1);
  await t.finish();
});

Deno.test("channel: down 3 s shows no notice; down 12 s shows it after 8 s and clears on return", async () => {
  const t = setup();
  t.channel.start();
  await t.clock.advance(0);
  assert.equal(t.noticeShown(), false);

  t.server.stop();
  await t.clock.advance(3000);
  t.server.mode = "sse";
  await t.clock.advance(2000);
  assert.equal(t.statuses.at(-1)?.state, "open");
  assert.ok(!t.statuses.some((s) => s.disconnected), "never disconnected for a 3 s outage");

  t.server.stop();
  const downAt = t.clock.t;
  await t.clock.advance(7_900);
  assert.equal(t.noticeShown(), false, "not at 7.9 s");
  await t.clock.advance(200);
  assert.equal(t.noticeShown(), true, "shown after 8 s");
  const shownAt = t.statuses.find((s) => s.disconnected)!;
  assert.equal(shownAt.downSince, downAt);
  await t.clock.advance(12_000 - 8_100);
  assert.equal(t.noticeShown(), true, "still shown while down");
  t.server.mode = "sse";
  await t.clock.advance(2000);
  assert.equal(t.statuses.at(-1)?.state, "open");
  assert.equal(t.noticeShown(), false, "cleared on return");
  assert.equal(FakeWebSocket.instances.length, 0);
  await t.finish();
});

Deno.test("channel: a page that never connects shows the notice after 8 s", async () => {
  const t = setup();
  t.server.mode = "down";
  t.channel.start();
  await t.clock.advance(7_999);
  assert.equal(t.noticeShown(), false);
  await t.clock.advance(2);
  assert.equal(t.noticeShown(), true);
  await t.finish();
});

Deno.test("channel: replay_gap calls onGap and the restarted server's lower ids are taken", async () => {
  const t = setup();
  t.channel.start();
  await t.clock.advance(0);
  for (let i = 40; i <= 42; i++) t.server.event(i, agentEvent(i));
  await t.clock.advance(0);
  t.server.stop();
  await t.clock.advance(1000);
  t.server.mode = "sse";
  await t.clock.advance(1000);
  assert.equal(t.server.requests.at(-1)?.headers.get("last-event-id"), "42");
  // The restarted server cannot continue from 42: a gap notice (no id), then its own ids from 1.
  t.server.write(`data: {"topic":"system","event":"replay_gap","lastEventId":42}\n\n`);
  t.server.event(1, agentEvent(1));
  t.server.event(2, agentEvent(2));
  t.server.event(2, agentEvent(2));
  await t.clock.advance(0);
  assert.equal(t.gaps.length, 1);
  assert.equal(t.gaps[0].event, "replay_gap");
  assert.deepEqual(t.events.map((e) => e.id), [40, 41, 42, 1, 2]);
  // and the next reconnect resumes from the new server's ids
  t.server.stop();
  t.server.mode = "sse";
  await t.clock.advance(1000);
  assert.equal(t.server.requests.at(-1)?.headers.get("last-event-id"), "2");
  await t.finish();
});

Deno.test("channel: a 401 calls onAuth, does not fall back or retry, and reconnect() tries again", async () => {
  const t = setup();
  t.server.mode = "unauthorized";
  t.channel.start();
  await t.clock.advance(10_000);
  assert.deepEqual(t.auth, ["Missing API key."]);
  assert.equal(t.server.requests.length, 1, "no retry loop against a 401");
  assert.equal(FakeWebSocket.instances.length, 0);
  t.server.mode = "sse";
  t.channel.reconnect();
  await t.clock.advance(0);
  assert.equal(t.statuses.at(-1)?.state, "open");
  assert.equal(t.noticeShown(), false, "the notice clears once connected");
  await t.finish();
});

Deno.test("channel: a silent connection (no ping for 45 s) is dropped and reopened", async () => {
  const t = setup();
  t.channel.start();
  await t.clock.advance(0);
  t.server.event(1, agentEvent(1));
  await t.clock.advance(30_000);
  t.server.ping(); // pings keep it alive
  await t.clock.advance(30_000);
  assert.equal(t.server.requests.length, 1);
  await t.clock.advance(16_000);
  assert.equal(t.server.requests.length, 2, "reconnected after 45 s of silence");
  assert.equal(t.server.requests[1].headers.get("last-event-id"), "1");
  assert.equal(t.server.open, 1);
  await t.finish();
});
