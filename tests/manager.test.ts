// The manager: its event-stream parser and reconnecting SSE client (against scripted loopback
// servers), its flags, and the whole manager against real Hearth worker processes.
import assert from "node:assert/strict";
import { createSseParser, runSseClient, type SseMessage } from "../lib/manager/sse_client.ts";
import { parseManagerArgs, startManager } from "../lib/manager/main.ts";
import { managerRoutes } from "../routes/manager.ts";
import type { InstanceSnapshot } from "../lib/manager/instances.ts";
import { startWorker, type WorkerProcess, writeFakeAgents } from "./support/workers.ts";
import { freePort, mainTs, runCommand, superviseServer } from "./support/server.ts";

function parseAll(
  chunks: string[],
): { messages: SseMessage[]; retries: number[]; comments: string[]; lastId: string } {
  const messages: SseMessage[] = [];
  const retries: number[] = [];
  const comments: string[] = [];
  const p = createSseParser({
    onMessage: (m) => messages.push(m),
    onRetry: (ms) => retries.push(ms),
    onComment: (c) => comments.push(c),
  });
  for (const c of chunks) p.push(c);
  return { messages, retries, comments, lastId: p.lastEventId() };
}

Deno.test("sse parser: every line ending, split anywhere, gives the same messages", () => {
  const stream = "\uFEFF: connected\r\n\r\nretry: 3000\n\n" +
    'id: 1\ndata: {"a":1}\n\n' +
    "data: two\r\ndata:  lines\rid: 2\r\r" + // CR-only ends; one leading space stripped only
    "event: custom\ndata\n\n" + // a field name alone: empty data
    "id: 3\n\n" + // id only: moves the cursor, dispatches nothing
    "unknown: x\ndata: last\n\n" +
    ": ping\n\ndata: never dispatched"; // no blank line: dropped
  const expected: SseMessage[] = [
    { data: '{"a":1}', event: "message", id: "1" },
    { data: "two\n lines", event: "message", id: "2" },
    { data: "", event: "custom" },
    { data: "last", event: "message" },
  ];
  const whole = parseAll([stream]);
  assert.deepEqual(whole.messages, expected);
  assert.deepEqual(whole.retries, [3000]);
  assert.deepEqual(whole.comments, ["connected", "ping"]);
  assert.equal(whole.lastId, "3");
  for (let i = 1; i < stream.length; i++) {
    const split = parseAll([stream.slice(0, i), stream.slice(i)]);
    assert.deepEqual(split.messages, expected, `split at ${i}`);
    assert.equal(split.lastId, "3");
  }
  assert.deepEqual(parseAll([...stream]).messages, expected, "one character at a time");
  // CRLF split between chunks is one line end, not two (which would dispatch early).
  assert.deepEqual(parseAll(["data: a\r", "\ndata: b\r", "\n\r", "\n"]).messages, [
    { data: "a\nb", event: "message" },
  ]);
});

Deno.test("sse parser: an oversized message is dropped without buffering it, the next one kept", () => {
  const messages: SseMessage[] = [];
  const oversize: number[] = [];
  const p = createSseParser(
    { onMessage: (m) => messages.push(m), onOversize: (n) => oversize.push(n) },
    { maxMessageChars: 100 },
  );
  p.push("id: 5\ndata: ");
  for (let i = 0; i < 10; i++) p.push("x".repeat(60));
  p.push("\n\nid: 6\ndata: ");
  p.push("y".repeat(50) + "\ndata: " + "y".repeat(60) + "\n\n"); // too large over two lines
  p.push("id: 7\ndata: ok\n\n");
  assert.deepEqual(messages, [{ data: "ok", event: "message", id: "7" }]);
  assert.equal(oversize.length, 2);
  assert.ok(oversize[0] >= 600, `first drop counted ${oversize[0]} chars`);
  assert.equal(p.lastEventId(), "7");
});

Deno.test("manager flags: defaults, validation, one-line errors", () => {
  const ok = parseManagerArgs(["--workers", "http://127.0.0.1:8000/, https://w2.example:9000/x/"]);
  assert.ok(ok.ok);
  assert.deepEqual(ok.config, {
    workers: ["http://127.0.0.1:8000", "https://w2.example:9000/x"],
    port: 8002,
    host: "127.0.0.1",
    pollMs: 5000,
    help: false,
  });
  const full = parseManagerArgs([
    "--workers=http://a:1",
    "--port=9100",
    "--host",
    "0.0.0.0",
    "--poll-ms",
    "250",
    "--worker-key",
    "wk",
    "--api-key",
    "mk",
  ]);
  assert.ok(full.ok);
  assert.equal(full.config.port, 9100);
  assert.equal(full.config.pollMs, 250);
  assert.equal(full.config.workerKey, "wk");
  assert.equal(full.config.apiKey, "mk");
  assert.ok(parseManagerArgs(["--help"]).ok, "--help needs no --workers");

  const bad: [string[], RegExp][] = [
    [[], /^--workers is required/],
    [["--workers", "ftp://x"], /^--workers "ftp:\/\/x": ftp:\/\/x is not an http\(s\) URL$/],
    [["--workers", "nonsense"], /is not a URL/],
    [["--workers", "http://a:1,http://a:1/"], /names a worker twice/],
    [["--workers", "http://a:1,,http://b:2"], /empty entry/],
    [["--workers", "http://u:p@a:1"], /credentials/],
    [["--workers", "http://a:1?x=1"], /query or fragment/],
    [["--workers", "http://a:1", "--port", "0"], /^--port "0": must be at least 1$/],
    [
      ["--workers", "http://a:1", "--poll-ms", "fast"],
      /^--poll-ms "fast": must be a whole number$/,
    ],
    [["--workers", "http://a:1", "--poll-ms", "10"], /at least 100/],
    [["--workers", "http://a:1", "--frobnicate"], /^unknown flag --frobnicate/],
    [["--workers", "http://a:1", "stray"], /^unexpected argument "stray"/],
    [["--workers", "http://a:1", "--workers", "http://b:1"], /given twice/],
    [["--workers"], /needs a value/],
    [["--help=yes"], /takes no value/],
  ];
  for (const [argv, re] of bad) {
    const r = parseManagerArgs(argv);
    assert.ok(!r.ok, `${argv.join(" ")} must fail`);
    assert.match(r.message, re, argv.join(" "));
    assert.ok(!r.message.includes("\n"), "one line");
  }
});

Deno.test("manager command: --help, a bad flag or a taken port exit with one line", async () => {
  const manager = (...args: string[]) =>
    runCommand([Deno.execPath(), "run", "-A", mainTs, "manager", ...args]);
  const help = await manager("--help");
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^Usage: hearth manager --workers URL,URL/);
  const bad = await manager("--workers", "ftp://x");
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim(), 'hearth: --workers "ftp://x": ftp://x is not an http(s) URL');
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = String((taken.addr as Deno.NetAddr).port);
  const busy = await manager("--workers", "http://127.0.0.1:1", "--port", port);
  assert.equal(busy.code, 2);
  assert.match(
    busy.stderr.trim(),
    new RegExp(`^hearth: cannot listen on 127\\.0\\.0\\.1:${port}: .+$`),
  );
});

/** A loopback server answering each request with `script[n]` (the last one repeats). */
function scriptedServer(
  script: ((req: Request, attempt: number) => Response | Promise<Response>)[],
) {
  const seen: { at: number; lastEventId: string | null }[] = [];
  const port = freePort();
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, (req) => {
    seen.push({ at: performance.now(), lastEventId: req.headers.get("last-event-id") });
    const n = seen.length - 1;
    return script[Math.min(n, script.length - 1)](req, n);
  });
  return { url: `http://127.0.0.1:${port}/api/events`, seen, server };
}

const capacity = () => Response.json({ error: "SSE_CAPACITY" }, { status: 503 });
const streamOf = (text: string, keepOpen = false, signal?: AbortSignal) =>
  new Response(
    new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode(text));
        if (!keepOpen) c.close();
        else {
          signal?.addEventListener("abort", () => {
            try {
              c.close();
            } catch { /* the client already went away */ }
          });
        }
      },
    }),
    { headers: { "content-type": "text/event-stream; charset=utf-8" } },
  );

Deno.test("sse client: 503 and errors back off doubling to the cap, reset after data, resume by id", async () => {
  const release = new AbortController();
  const events: { payload: unknown; id?: string }[] = [];
  const states: { state: string; delayMs?: number; error?: string }[] = [];
  const opened = Promise.withResolvers<void>();
  const { url, seen, server } = scriptedServer([
    () => capacity(),
    () => capacity(),
    () => streamOf(': connected\n\nretry: 3000\n\nid: 7\ndata: {"event":"a"}\n\n'),
    () => new Response("boom", { status: 500 }),
    () => capacity(),
    () => capacity(),
    () => {
      opened.resolve();
      return streamOf(
        'data: {"event":"ping"}\n\nid: 8\ndata: {"event":"b"}\n\n',
        true,
        release.signal,
      );
    },
  ]);
  const stop = new AbortController();
  const done = runSseClient({
    url,
    signal: stop.signal,
    minBackoffMs: 40,
    maxBackoffMs: 100,
    onEvent: (payload, id) => events.push({ payload, id }),
    onState: (state, d) => states.push({ state, delayMs: d.delayMs, error: d.error }),
  });
  try {
    await opened.promise;
    while (events.length < 3) await new Promise((r) => setTimeout(r, 10));
  } finally {
    stop.abort();
    await done;
    release.abort();
    await server.shutdown();
  }
  assert.deepEqual(events, [
    { payload: { event: "a" }, id: "7" },
    { payload: { event: "ping" }, id: undefined },
    { payload: { event: "b" }, id: "8" },
  ]);
  const backoffs = states.filter((s) => s.state === "backoff");
  assert.deepEqual(backoffs.map((s) => s.delayMs), [40, 80, 40, 80, 100, 100]);
  assert.deepEqual(backoffs.map((s) => s.error), [
    "HTTP 503 SSE_CAPACITY",
    "HTTP 503 SSE_CAPACITY",
    "stream ended",
    "HTTP 500: boom",
    "HTTP 503 SSE_CAPACITY",
    "HTTP 503 SSE_CAPACITY",
  ]);
  assert.deepEqual(
    states.map((s) => s.state).slice(0, 6),
    ["connecting", "backoff", "connecting", "backoff", "connecting", "open"],
  );
  // The waits really happened, each at least its delay (timers never fire early).
  const gaps = seen.slice(1).map((s, i) => s.at - seen[i].at);
  backoffs.forEach((b, i) => assert.ok(gaps[i] >= b.delayMs! - 2, `gap ${i}: ${gaps[i]} ms`));
  // The cursor from the stream that ended is sent on every later attempt.
  assert.deepEqual(seen.map((s) => s.lastEventId), [null, null, null, "7", "7", "7", "7"]);
});

Deno.test("sse client: a silent stream is reconnected after the idle timeout; abort stops at once", async () => {
  const release = new AbortController();
  const { url, seen, server } = scriptedServer([
    () => streamOf(": connected\n\n", true, release.signal),
  ]);
  const stop = new AbortController();
  const errors: string[] = [];
  const done = runSseClient({
    url,
    signal: stop.signal,
    minBackoffMs: 20,
    idleTimeoutMs: 150,
    onEvent: () => {},
    onState: (state, d) => {
      if (state === "backoff") errors.push(d.error!);
      if (errors.length === 2) stop.abort();
    },
  });
  const t0 = performance.now();
  await done;
  release.abort();
  await server.shutdown();
  assert.deepEqual(errors, ["no data for 150 ms", "no data for 150 ms"]);
  assert.ok(performance.now() - t0 >= 280, "two idle periods");
  assert.equal(seen.length, 2, "stopped during the backoff: no third attempt");
});

// ---- the manager against two workers ----

const WORKER_KEY = "worker-key";
const MANAGER_KEY = "manager-key";

async function workerApi(w: WorkerProcess, method: string, path: string, body?: unknown) {
  const r = await fetch(`${w.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${WORKER_KEY}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await r.json();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

async function waitFor<T>(
  label: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (true) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out waiting for ${label}${last ? `: ${last}` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Sends a message and waits until the worker has the agent's answer. */
async function runMessage(w: WorkerProcess, sessionId: string, text: string) {
  await workerApi(w, "POST", `/api/sessions/${sessionId}/messages`, { text });
  await waitFor(`answer to ${text}`, async () => {
    const r = await workerApi(w, "GET", `/api/messages/latest?sessionId=${sessionId}`);
    return r.message?.role === "assistant" && r.message.content === `echo: ${text}` ? r : undefined;
  });
}

async function instances(managerUrl: string, key = MANAGER_KEY): Promise<InstanceSnapshot[]> {
  const r = await fetch(`${managerUrl}/api/manager/instances`, {
    headers: { authorization: `Bearer ${key}` },
  });
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return json.instances;
}

async function waitInstance(
  managerUrl: string,
  url: string,
  label: string,
  ok: (i: InstanceSnapshot) => boolean,
  timeoutMs = 10_000,
): Promise<InstanceSnapshot> {
  let seen: InstanceSnapshot | undefined;
  try {
    return await waitFor(label, async () => {
      seen = (await instances(managerUrl)).find((x) => x.url === url)!;
      return ok(seen) ? seen : undefined;
    }, timeoutMs);
  } catch (e) {
    throw new Error(`${(e as Error).message}; last seen: ${JSON.stringify(seen)}`);
  }
}

/** Opens event streams on `w` until it answers 503; returns them to close later. */
async function fillListeners(w: WorkerProcess) {
  const open: Response[] = [];
  for (let i = 0; i < 300; i++) {
    const r = await fetch(`${w.url}/api/events`, {
      headers: { authorization: `Bearer ${WORKER_KEY}` },
    });
    if (r.status === 503) {
      assert.deepEqual(await r.json(), { error: "SSE_CAPACITY" });
      return {
        count: open.length,
        async release() {
          await Promise.all(open.map((x) => x.body?.cancel()));
        },
      };
    }
    assert.equal(r.status, 200);
    open.push(r);
  }
  await Promise.all(open.map((x) => x.body?.cancel()));
  throw new Error("the worker never answered 503 SSE_CAPACITY");
}

Deno.test("manager: two workers, live latest messages, worker down and back, 503 backoff", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-manager-" });
  const agents = await writeFakeAgents(dir);
  const started = await Promise.allSettled(
    ["w1", "w2"].map((name) =>
      startWorker({ agentsConfig: agents.path, dataDir: `${dir}/${name}`, apiKey: WORKER_KEY })
    ),
  );
  const workers = started.flatMap((r) => r.status === "fulfilled" ? [r.value] : []);
  const logs: string[] = [];
  try {
    for (const r of started) if (r.status === "rejected") throw r.reason;
    const [w1, w2] = workers;
    const [s1, s2] = await Promise.all([
      workerApi(w1, "POST", "/api/sessions", { agent: "fake" }).then((s) => s.id as string),
      workerApi(w2, "POST", "/api/sessions", { agent: "fake" }).then((s) => s.id as string),
    ]);
    await Promise.all([runMessage(w1, s1, "hello one"), runMessage(w2, s2, "hello two")]);

    const m = startManager({
      routes: managerRoutes,
      workers: [w1.url, w2.url],
      port: freePort(),
      host: "127.0.0.1",
      // Far beyond the test: every update below must come through the event streams.
      pollMs: 600_000,
      workerKey: WORKER_KEY,
      apiKey: MANAGER_KEY,
      minBackoffMs: 100,
      maxBackoffMs: 400,
      log: (line) => logs.push(line),
    });
    try {
      await t.step("both workers up with their latest messages", async () => {
        for (const [w, sid, text] of [[w1, s1, "hello one"], [w2, s2, "hello two"]] as const) {
          const i = await waitInstance(
            m.url,
            w.url,
            `${w.url} up`,
            (i) => i.status === "up" && i.latestMessage !== null,
          );
          assert.equal(i.stream, "open");
          assert.equal(i.latestMessage!.sessionId, sid);
          assert.equal(i.latestMessage!.role, "assistant");
          assert.equal(i.latestMessage!.content, `echo: ${text}`);
          assert.deepEqual(i.sessions.map((s) => s.id), [sid]);
          assert.equal(i.lastError, undefined);
          assert.equal(i.reconnects, 0);
          assert.ok(i.lastSeen && Date.now() - Date.parse(i.lastSeen) < 10_000);
        }
        const health = await fetch(`${m.url}/health`);
        assert.equal(health.status, 200, "health needs no key");
        await health.body?.cancel();
        const denied = await fetch(`${m.url}/api/manager/instances`);
        assert.equal(denied.status, 401);
        assert.deepEqual(await denied.json(), {
          error: "UNAUTHORIZED",
          message: "Missing API key.",
        });
        const wrong = await fetch(`${m.url}/api/manager/instances`, {
          headers: { "x-api-key": "nope" },
        });
        assert.equal(wrong.status, 401);
        await wrong.body?.cancel();
      });

      await t.step(
        "a message on worker 1 reaches the manager through the event stream",
        async () => {
          const before = (await instances(m.url)).find((i) => i.url === w1.url)!;
          const t0 = Date.now();
          await workerApi(w1, "POST", `/api/sessions/${s1}/messages`, { text: "second" });
          const i = await waitInstance(
            m.url,
            w1.url,
            "the new answer on the manager",
            (i) => i.latestMessage?.content === "echo: second",
            5000,
          );
          assert.ok(Date.now() - t0 < 5000);
          assert.ok(i.events > before.events, "counted as events");
          assert.notEqual(i.lastEventId, before.lastEventId, "the cursor moved");
        },
      );

      let s3 = "";
      await t.step(
        "worker 2 killed in the middle of a run: down, reconnects with backoff",
        async () => {
          s3 = (await workerApi(w2, "POST", "/api/sessions", { agent: "hang" })).id;
          await workerApi(w2, "POST", `/api/sessions/${s3}/messages`, { text: "hang on" });
          const busy = await waitInstance(
            m.url,
            w2.url,
            "w2's run on the manager",
            (i) => i.latestMessage?.content === "hang on" && i.sessions.length === 2,
            5000,
          );
          assert.equal(busy.latestMessage!.role, "user");
          assert.equal(busy.latestMessage!.sessionId, s3);
          assert.ok(busy.lastEventId !== null);
          await w2.kill();
          const down = await waitInstance(m.url, w2.url, "w2 down", (i) => i.status === "down");
          assert.match(down.lastError ?? "", /^event stream: /);
          const later = await waitInstance(
            m.url,
            w2.url,
            "more reconnect attempts",
            (i) => i.reconnects >= down.reconnects + 2 && i.stream === "backoff",
          );
          assert.equal(later.status, "down");
          assert.ok(
            later.retryInMs! >= 100 && later.retryInMs! <= 400,
            `retry in ${later.retryInMs}`,
          );
          assert.deepEqual(later.latestMessage, busy.latestMessage, "the last known message stays");
          const one = (await instances(m.url)).find((i) => i.url === w1.url)!;
          assert.equal(one.status, "up", "worker 1 is untouched");
        },
      );

      await t.step("worker 2 restarted: up again, replay gap, latest refreshed", async () => {
        await w2.restart();
        const up = await waitInstance(
          m.url,
          w2.url,
          "w2 up after restart",
          (i) => i.status === "up" && i.replayGaps >= 1 && i.latestMessage?.role === "assistant",
        );
        assert.equal(up.lastError, undefined);
        // The run the kill interrupted ended while the manager was away: only the refresh after
        // the gap can know its outcome.
        const truth = await workerApi(w2, "GET", "/api/messages/latest");
        assert.equal(truth.sessionId, s3);
        assert.ok(truth.message.error, "the worker marked the interrupted run");
        assert.deepEqual(up.latestMessage, { ...truth.message, sessionId: s3 });
        assert.deepEqual(up.sessions.map((s) => s.id).sort(), [s2, s3].sort(), "sessions persist");
        await workerApi(w2, "POST", `/api/sessions/${s2}/messages`, { text: "after restart" });
        await waitInstance(
          m.url,
          w2.url,
          "w2's new answer",
          (i) => i.latestMessage?.content === "echo: after restart",
          5000,
        );
        // The operator's log tells the story in one line per change.
        const story = logs.filter((l) => l.startsWith(`worker ${w2.url}`));
        assert.equal(story[0], `worker ${w2.url} up`, story.join("\n"));
        assert.match(story[1], / down \(event stream: .+; retry in 100 ms\)$/);
        assert.ok(story.slice(2).includes(`worker ${w2.url} up`), story.join("\n"));
        assert.ok(story.some((l) => l.includes("replay gap")), story.join("\n"));
      });

      await t.step(
        "the manager command: a worker at its listener cap is retried until a place frees",
        async () => {
          const full = await fillListeners(w1);
          let released = false;
          const port = freePort();
          const cli = await superviseServer({
            name: "manager",
            cmd: [
              Deno.execPath(),
              "run",
              "-A",
              mainTs,
              "manager",
              "--workers",
              `${w1.url},${w2.url}`,
              "--port",
              String(port),
              "--worker-key",
              WORKER_KEY,
              "--api-key",
              MANAGER_KEY,
              "--poll-ms",
              "600000",
            ],
            url: `http://127.0.0.1:${port}`,
          });
          try {
            const refused = await waitInstance(
              cli.url,
              w1.url,
              "w1 refused with 503 and retried",
              (i) => i.status === "down" && i.reconnects >= 1,
            );
            assert.match(refused.lastError ?? "", /HTTP 503 SSE_CAPACITY/);
            assert.equal(refused.retryInMs ?? 2000, 2000, "1 s, then 2 s");
            // Polling still works: the worker is reachable, only its event stream is full.
            assert.equal(refused.latestMessage?.content, "echo: second");
            const two = (await instances(cli.url)).find((i) => i.url === w2.url)!;
            assert.equal(two.status, "up");
            assert.equal(two.latestMessage?.content, "echo: after restart");
            await full.release();
            released = true;
            const up = await waitInstance(
              cli.url,
              w1.url,
              "w1 up once a place is free",
              (i) => i.status === "up",
            );
            assert.equal(up.lastError, undefined);
          } finally {
            if (!released) await full.release();
            await cli.stop();
          }
          assert.equal((await cli.child.status).code, 0, "SIGTERM stops the manager cleanly");
          assert.match(
            cli.stderr(),
            /manager listening on http:\/\/127\.0\.0\.1:\d+, watching 2 worker/,
          );
          assert.match(cli.stderr(), /SSE_CAPACITY/);
        },
      );
    } finally {
      await m.stop();
    }
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await killLeftover(agents.hangPidFile);
    await Deno.remove(dir, { recursive: true });
  }
});

/**
 * The `hang` agent of the killed worker is normally stopped by the worker's restart; should it still
 * run (the restart failed), it is stopped here, after checking the pid is still that fixture.
 */
async function killLeftover(pidFile: string) {
  let pid: number;
  try {
    pid = Number(await Deno.readTextFile(pidFile));
    const cmdline = await Deno.readTextFile(`/proc/${pid}/cmdline`);
    if (!cmdline.includes("fake_agent.ts")) return;
  } catch {
    return; // never started, or already gone
  }
  try {
    Deno.kill(pid, "SIGKILL");
  } catch { /* exited meanwhile */ }
}
