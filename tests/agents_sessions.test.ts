/**
 * The session endpoints over a real Deno.serve on loopback, with real agent processes (the fake
 * CLI of tests/fixtures/agents/bin): CRUD and validation, cwd confinement, the queue, steering
 * both ways, cancel, schedules, persistence across a restart (graceful, and a SIGKILLed server),
 * and the done-when: a Claude-style run seen through `/api/events` by an `eventsource`
 * client.
 */
import assert from "node:assert/strict";
import { EventSource } from "eventsource";
import { DatabaseSync } from "node:sqlite";
import { type AgentsFile, loadAgentsConfig } from "../lib/agents/config.ts";
import { processAlive } from "../lib/agents/process.ts";
import { type AgentService, createAgentService } from "../lib/agents/sessions.ts";
import { createBus, type PublicEvent } from "../lib/events/bus.ts";
import { sessionRoutes } from "../routes/sessions.ts";
import { captureEvents, jsonApi, serveWithEvents } from "./support/agents.ts";

const root = new URL("..", import.meta.url).pathname;
const fakeAgent = `${root}tests/fixtures/agents/bin/fake_agent.ts`;
const agentServer = `${root}tests/fixtures/agents/bin/agent_server.ts`;
const basic = `${root}tests/fixtures/agents/runner/basic.jsonl`;
const claudeBasic = `${root}tests/fixtures/agents/transcripts/claude-basic.jsonl`;
const fake = (...args: string[]) => ["run", "-A", fakeAgent, ...args];

// deno-lint-ignore no-explicit-any -- response bodies are checked field by field
type Json = any;
type Agents = Record<string, Record<string, unknown> & { args: string[] }>;

/** A temp tree: `work/` (the root) with `proj/`, `outside/`, and `work/escape -> ../outside`. */
async function withTree(f: (dir: string) => Promise<void>) {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-sessions-" }));
  try {
    await Deno.mkdir(`${dir}/work/proj`, { recursive: true });
    await Deno.mkdir(`${dir}/outside`);
    await Deno.symlink(`${dir}/outside`, `${dir}/work/escape`);
    await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function writeConfig(dir: string, agents: Agents, top: Record<string, unknown> = {}) {
  const full: Record<string, unknown> = {};
  for (const [name, a] of Object.entries(agents)) {
    full[name] = { provider: "jsonl", command: Deno.execPath(), ...a };
  }
  const path = `${dir}/agents.json`;
  await Deno.writeTextFile(path, JSON.stringify({ roots: ["work"], ...top, agents: full }));
  return await loadAgentsConfig(path);
}

type Harness = {
  url: string;
  service: AgentService;
  events: PublicEvent[];
  of(event: string, sessionId?: string): PublicEvent[];
  waitFor(pred: (e: PublicEvent) => boolean, ms?: number): Promise<PublicEvent>;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }>;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
};

/** The service, its routes and the event channel on a loopback port. */
async function serve(config: AgentsFile, dataDir: string): Promise<Harness> {
  const bus = createBus();
  const log = captureEvents(bus, 10_000);
  const events = log.events;
  const service = await createAgentService({ bus, dataDir, config });
  const { url, stop } = serveWithEvents(bus, sessionRoutes(service), () => service.close());
  return {
    url,
    service,
    events,
    of: (event, sessionId) =>
      events.filter((e) => e.event === event && (!sessionId || e.sessionId === sessionId)),
    waitFor: log.waitFor,
    api: jsonApi(url),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

const assistantReply = (h: Harness, sessionId: string, n = 1) =>
  h.waitFor(() => h.of("new_message", sessionId).filter((e) => e.role === "assistant").length >= n);

Deno.test("sessions: create, list, get, activate, delete and input validation", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, { echo: { args: fake("--transcript", basic) } });
    await using h = await serve(config, `${dir}/data`);

    const created = await h.api("POST", "/api/sessions", { agent: "echo" });
    assert.equal(created.status, 201);
    const s = created.json;
    assert.equal(typeof s.id, "string");
    assert.equal(s.agent, "echo");
    assert.equal(s.cwd, `${dir}/work`);
    assert.equal(s.status, "idle");
    assert.deepEqual(s.queue, []);
    assert.equal(s.latestMessage, null);
    assert.ok(!Number.isNaN(Date.parse(s.createdAt)) && !Number.isNaN(Date.parse(s.updatedAt)));
    assert.deepEqual(h.of("session_created")[0].session, s);
    assert.equal((h.of("session_list").at(-1)!.sessions as unknown[]).length, 1);
    assert.equal(h.of("session_created")[0].topic, "session");

    const proj = await h.api("POST", "/api/sessions", { agent: "echo", cwd: "proj" });
    assert.equal(proj.status, 201);
    assert.equal(proj.json.cwd, `${dir}/work/proj`);

    const refusals: [unknown, RegExp][] = [
      [{ agent: "nope" }, /unknown agent "nope"; configured agents: echo/],
      [{ agent: "echo", cwd: `${dir}/outside` }, /outside the configured roots/],
      [{ agent: "echo", cwd: "escape" }, /outside the configured roots/],
      [{ agent: "echo", cwd: "../outside" }, /outside the configured roots/],
      [{ agent: "echo", cwd: "missing" }, /does not exist/],
      [{ agent: "echo", command: "rm -rf /" }, /Unrecognized .*command/],
      [{}, /agent/],
      ["{not json", /not valid JSON/],
    ];
    for (const [body, re] of refusals) {
      const r = await h.api("POST", "/api/sessions", body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error, "BAD_REQUEST");
      assert.match(r.json.message, re);
    }

    const list = await h.api("GET", "/api/sessions");
    assert.deepEqual(list.json.sessions.map((x: { id: string }) => x.id), [s.id, proj.json.id]);
    const one = await h.api("GET", `/api/sessions/${s.id}`);
    assert.equal(one.status, 200);
    assert.deepEqual(one.json.history, []);
    assert.deepEqual((await h.api("GET", "/api/sessions/nope")).json.error, "NOT_FOUND");
    assert.equal((await h.api("GET", "/api/sessions/nope")).status, 404);

    const act = await h.api("POST", `/api/sessions/${proj.json.id}/activate`);
    assert.equal(act.status, 200);
    assert.deepEqual(h.of("session_switched").map((e) => e.sessionId), [proj.json.id]);
    assert.equal((await h.api("GET", "/api/sessions")).json.activeSessionId, proj.json.id);

    const badBodies: [string, unknown][] = [
      ["messages", { text: "" }],
      ["messages", { txt: "x" }],
      ["messages", { text: "a\u0000b" }],
      ["messages", { text: "é".repeat(70_000) }], // 140 000 bytes: over one argv string's cap
      ["steer", {}],
      ["schedule", { delaySeconds: -1, text: "x" }],
      ["schedule", { delaySeconds: 1 }],
      ["cancel", { clearQueue: "yes" }],
    ];
    for (const [path, body] of badBodies) {
      const r = await h.api("POST", `/api/sessions/${s.id}/${path}`, body);
      assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.equal(r.json.error, "BAD_REQUEST");
    }
    const noSession = await h.api("POST", "/api/sessions/nope/messages", { text: "hi" });
    assert.equal(noSession.status, 404);
    const idleCancel = await h.api("POST", `/api/sessions/${s.id}/cancel`);
    assert.equal(idleCancel.status, 409);
    assert.equal(idleCancel.json.error, "NOT_RUNNING");

    assert.deepEqual((await h.api("GET", "/api/messages/latest")).json, {
      sessionId: null,
      message: null,
    });
    assert.equal((await h.api("GET", "/api/messages/latest?sessionId=nope")).status, 404);

    const del = await h.api("DELETE", `/api/sessions/${proj.json.id}`);
    assert.equal(del.status, 204);
    assert.equal((await h.api("GET", `/api/sessions/${proj.json.id}`)).status, 404);
    assert.equal((await h.api("DELETE", `/api/sessions/${proj.json.id}`)).status, 404);
    assert.equal((h.of("session_list").at(-1)!.sessions as unknown[]).length, 1);
    assert.equal((await h.api("GET", "/api/sessions")).json.activeSessionId, null);
  });
});

Deno.test("sessions: messages queue behind a run and start later with fromQueue", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      slow: { args: fake("--transcript", basic, "--hold-ms", "300") },
    });
    await using h = await serve(config, `${dir}/data`);
    const id = (await h.api("POST", "/api/sessions", { agent: "slow" })).json.id;

    const first = await h.api("POST", `/api/sessions/${id}/messages`, { text: "first" });
    assert.equal(first.status, 202);
    assert.deepEqual(first.json, { sessionId: id, queued: false, pending: 0 });
    const second = await h.api("POST", `/api/sessions/${id}/messages`, { text: "second" });
    assert.deepEqual(second.json, { sessionId: id, queued: true, pending: 1 });
    const third = await h.api("POST", `/api/sessions/${id}/messages`, { text: "third" });
    assert.deepEqual(third.json, { sessionId: id, queued: true, pending: 2 });
    const busy = (await h.api("GET", `/api/sessions/${id}`)).json;
    assert.equal(busy.status, "running");
    assert.deepEqual(busy.queue, ["second", "third"]);
    assert.deepEqual(h.of("queue_update", id).map((e) => e.pending), [1, 2]);

    await assistantReply(h, id, 3);
    const msgs = h.of("new_message", id).map((e) => [e.role, e.content, e.fromQueue ?? false]);
    assert.deepEqual(msgs, [
      ["user", "first", false],
      ["assistant", "Hello, first!", false],
      ["user", "second", true],
      ["assistant", "Hello, second!", false],
      ["user", "third", true],
      ["assistant", "Hello, third!", false],
    ]);
    // One run at a time: each run's agent_done comes before the next run's start.
    const seq = h.events.filter((e) =>
      e.sessionId === id && (e.event === "agent_done" || (e.event === "agent_status" &&
        e.status === "running"))
    ).map((e) => e.event);
    assert.deepEqual(seq, [
      "agent_status",
      "agent_done",
      "agent_status",
      "agent_done",
      "agent_status",
      "agent_done",
    ]);
    assert.deepEqual(h.of("queue_update", id).map((e) => e.pending), [1, 2, 1, 0]);

    const detail = (await h.api("GET", `/api/sessions/${id}`)).json;
    assert.equal(detail.status, "idle");
    assert.deepEqual(detail.queue, []);
    assert.deepEqual(
      detail.history.map((m: { role: string; content: string; fromQueue?: boolean }) => [
        m.role,
        m.content,
        m.fromQueue ?? false,
      ]),
      msgs,
    );
    assert.equal(detail.latestMessage.content, "Hello, third!");
    const latest = (await h.api("GET", `/api/messages/latest?sessionId=${id}`)).json;
    assert.equal(latest.sessionId, id);
    assert.equal(latest.message.role, "assistant");
    assert.equal(latest.message.content, "Hello, third!");
    assert.deepEqual((await h.api("GET", "/api/messages/latest")).json, latest);
  });
});

Deno.test("sessions: steer streams into a Claude-style CLI, and queues first otherwise", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      claude: { provider: "claude", args: fake("--mode", "stream", "--hold-ms", "800") },
      slow: { args: fake("--transcript", basic, "--hold-ms", "400") },
    });
    await using h = await serve(config, `${dir}/data`);

    // Streamed input: the steer reaches the running CLI's stdin.
    const c = (await h.api("POST", "/api/sessions", { agent: "claude" })).json.id;
    await h.api("POST", `/api/sessions/${c}/messages`, { text: "first" });
    await h.waitFor((e) => e.event === "agent_output" && e.sessionId === c);
    const steered = await h.api("POST", `/api/sessions/${c}/steer`, { text: "second" });
    assert.equal(steered.status, 202);
    assert.equal(steered.json.steered, true);
    assert.equal(steered.json.queued, false);
    assert.deepEqual(h.of("steer_started", c).map((e) => e.prompt), ["second"]);
    await assistantReply(h, c);
    const done = h.of("agent_done", c)[0];
    assert.equal(done.text, "echo: first\necho: second");
    const history = (await h.api("GET", `/api/sessions/${c}`)).json.history;
    assert.deepEqual(history.map((m: { role: string; content: string }) => [m.role, m.content]), [
      ["user", "first"],
      ["user", "second"],
      ["assistant", "echo: first\necho: second"],
    ]);

    // No streamed input (jsonl): the steer goes first in line.
    const s = (await h.api("POST", "/api/sessions", { agent: "slow" })).json.id;
    await h.api("POST", `/api/sessions/${s}/messages`, { text: "a" });
    await h.api("POST", `/api/sessions/${s}/messages`, { text: "b" });
    const queued = await h.api("POST", `/api/sessions/${s}/steer`, { text: "urgent" });
    assert.deepEqual(queued.json, { sessionId: s, steered: false, queued: true, pending: 2 });
    assert.deepEqual(h.of("queue_update", s).at(-1)!.queue, ["urgent", "b"]);
    await assistantReply(h, s, 3);
    const users = h.of("new_message", s).filter((e) => e.role === "user").map((e) => e.content);
    assert.deepEqual(users, ["a", "urgent", "b"]);

    // Idle: a steer starts at once.
    const idle = await h.api("POST", `/api/sessions/${s}/steer`, { text: "now" });
    assert.deepEqual(idle.json, { sessionId: s, steered: false, queued: true, pending: 0 });
    await assistantReply(h, s, 4);
    assert.equal(h.of("new_message", s).at(-1)!.content, "Hello, now!");
  });
});

Deno.test("sessions: cancel and delete stop the run; partial output and error stay in history", async () => {
  await withTree(async (dir) => {
    const pids = `${dir}/pids`;
    const config = await writeConfig(dir, {
      stuck: { args: fake("--transcript", basic, "--mode", "fork", "--pid-file", pids) },
    });
    await using h = await serve(config, `${dir}/data`);
    const id = (await h.api("POST", "/api/sessions", { agent: "stuck" })).json.id;
    await h.api("POST", `/api/sessions/${id}/messages`, { text: "you" });
    await h.api("POST", `/api/sessions/${id}/messages`, { text: "queued" });
    await h.waitFor((e) => e.event === "agent_output" && e.sessionId === id && e.text === "you!");
    const [grandchild, leader] = (await Deno.readTextFile(pids)).split(" ").map(Number);

    const cancel = await h.api("POST", `/api/sessions/${id}/cancel`, { clearQueue: true });
    assert.equal(cancel.status, 202);
    assert.deepEqual(cancel.json, { sessionId: id, cancelled: true, pending: 0 });
    await assistantReply(h, id);
    const reply = h.of("new_message", id).at(-1)!;
    assert.equal(reply.content, "Hello, you!");
    assert.equal(reply.error, "cancelled by user");
    assert.equal(reply.errorKind, "cancelled");
    assert.equal(reply.partial, true);
    assert.equal(processAlive(grandchild), false);
    assert.equal(processAlive(leader), false);
    const detail = (await h.api("GET", `/api/sessions/${id}`)).json;
    assert.equal(detail.status, "idle");
    assert.deepEqual(detail.queue, []);
    assert.deepEqual(detail.history.at(-1), { ...detail.history.at(-1), partial: true });
    assert.equal(h.of("agent_done", id)[0].errorKind, "cancelled");
    assert.equal((await h.api("POST", `/api/sessions/${id}/cancel`)).status, 409);

    // Deleting a busy session stops its run too.
    await h.api("POST", `/api/sessions/${id}/messages`, { text: "again" });
    await h.waitFor((e) => e.event === "agent_output" && e.sessionId === id && e.text === "again!");
    const [grandchild2] = (await Deno.readTextFile(pids)).split(" ").map(Number);
    assert.ok(processAlive(grandchild2));
    assert.equal((await h.api("DELETE", `/api/sessions/${id}`)).status, 204);
    assert.equal(processAlive(grandchild2), false);
    assert.equal((await h.api("GET", `/api/sessions/${id}`)).status, 404);
  });
});

Deno.test("sessions: scheduled wake-ups fire, survive a restart, and fail visibly", async () => {
  await withTree(async (dir) => {
    const data = `${dir}/data`;
    const agents: Agents = {
      echo: { args: fake("--transcript", basic) },
      gone: { args: fake("--transcript", basic) },
    };
    let config = await writeConfig(dir, agents);
    let h = await serve(config, data);
    try {
      const id = (await h.api("POST", "/api/sessions", { agent: "echo" })).json.id;
      const orphan = (await h.api("POST", "/api/sessions", { agent: "echo" })).json.id;
      const retired = (await h.api("POST", "/api/sessions", { agent: "gone" })).json.id;

      const r = await h.api("POST", `/api/sessions/${id}/schedule`, {
        delaySeconds: 0.2,
        text: "wake",
      });
      assert.equal(r.status, 202);
      assert.equal(r.json.sessionId, id);
      const wake = h.of("schedule_wakeup", id)[0];
      assert.deepEqual([wake.delaySeconds, wake.reason], [0.2, "wake"]);
      await assistantReply(h, id);
      assert.deepEqual(
        h.of("new_message", id).map((e) => [e.role, e.content]),
        [["user", "wake"], ["assistant", "Hello, wake!"]],
      );

      // Scheduled for a session that is then deleted.
      await h.api("POST", `/api/sessions/${orphan}/schedule`, { delaySeconds: 0.1, text: "lost" });
      await h.api("DELETE", `/api/sessions/${orphan}`);
      const failed = await h.waitFor((e) => e.event === "schedule_wakeup_failed");
      assert.equal(failed.sessionId, orphan);
      assert.equal(failed.reason, "lost");
      assert.match(String(failed.error), /no longer exists/);

      // Due while the server is down (overdue at start-up), due after the restart, and one whose
      // agent the new config no longer has.
      await h.api("POST", `/api/sessions/${id}/schedule`, { delaySeconds: 0.3, text: "overdue" });
      await h.api("POST", `/api/sessions/${id}/schedule`, { delaySeconds: 1.2, text: "later" });
      await h.api("POST", `/api/sessions/${retired}/schedule`, { delaySeconds: 0.1, text: "old" });
      await h.stop();
      await new Promise((res) => setTimeout(res, 500));
      config = await writeConfig(dir, { echo: agents.echo });
      h = await serve(config, data);
      await assistantReply(h, id, 2);
      assert.deepEqual(
        h.of("new_message", id).map((e) => [e.role, e.content]),
        [
          ["user", "overdue"],
          ["assistant", "Hello, overdue!"],
          ["user", "later"],
          ["assistant", "Hello, later!"],
        ],
      );
      const retiredFail = await h.waitFor((e) => e.event === "schedule_wakeup_failed");
      assert.equal(retiredFail.sessionId, retired);
      assert.match(String(retiredFail.error), /no longer configured/);
      // A message to that session is refused the same way.
      const refused = await h.api("POST", `/api/sessions/${retired}/messages`, { text: "hi" });
      assert.equal(refused.status, 409);
      assert.equal(refused.json.error, "AGENT_UNAVAILABLE");
    } finally {
      await h.stop();
    }
  });
});

Deno.test("sessions: history and queue persist; a run cut by a restart is marked interrupted", async () => {
  await withTree(async (dir) => {
    const data = `${dir}/data`;
    // The same agent name runs a stuck CLI before the restart and a working one after it.
    let config = await writeConfig(dir, {
      worker: { args: fake("--transcript", basic, "--mode", "fork") },
    });
    let h = await serve(config, data);
    let id: string;
    try {
      id = (await h.api("POST", "/api/sessions", { agent: "worker" })).json.id;
      await h.api("POST", `/api/sessions/${id}/messages`, { text: "one" });
      await h.api("POST", `/api/sessions/${id}/messages`, { text: "two" });
      await h.waitFor((e) => e.event === "agent_output" && e.text === "one!");
    } finally {
      await h.stop();
    }
    config = await writeConfig(dir, { worker: { args: fake("--transcript", basic) } });
    h = await serve(config, data);
    try {
      await assistantReply(h, id, 2);
      const detail = (await h.api("GET", `/api/sessions/${id}`)).json;
      assert.deepEqual(
        detail.history.map((m: Record<string, unknown>) => [
          m.role,
          m.content,
          m.error ?? null,
          m.partial ?? false,
          m.fromQueue ?? false,
        ]),
        [
          ["user", "one", null, false, false],
          ["assistant", "Hello, one!", "interrupted by restart", true, false],
          ["user", "two", null, false, true],
          ["assistant", "Hello, two!", null, false, false],
        ],
      );
      assert.equal(detail.status, "idle");
      assert.equal((await h.api("GET", "/api/sessions")).json.sessions.length, 1);
    } finally {
      await h.stop();
    }
  });
});

Deno.test("sessions: after a SIGKILLed server, the restart marks the run and kills its leftovers", async () => {
  await withTree(async (dir) => {
    const data = `${dir}/data`;
    const pids = `${dir}/pids`;
    await writeConfig(dir, {
      worker: { args: fake("--transcript", basic, "--mode", "fork", "--pid-file", pids) },
    });
    const server = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", agentServer, `${dir}/agents.json`, data],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    let orphans: number[] = [];
    try {
      const reader = server.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let banner = "";
      while (!/listening \d+\n/.test(banner)) {
        const r = await reader.read();
        if (r.done) throw new Error("agent_server exited before listening");
        banner += r.value;
      }
      reader.releaseLock();
      const url = `http://127.0.0.1:${banner.match(/listening (\d+)/)![1]}`;
      const post = async (path: string, body: unknown) => {
        const r = await fetch(url + path, { method: "POST", body: JSON.stringify(body) });
        return await r.json();
      };
      const id = (await post("/api/sessions", { agent: "worker" })).id;
      await post(`/api/sessions/${id}/messages`, { text: "one" });
      await post(`/api/sessions/${id}/messages`, { text: "two" });
      // The fork fixture writes its pids before any output.
      for (let i = 0; i < 100 && !(await Deno.stat(pids).catch(() => null)); i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      orphans = (await Deno.readTextFile(pids)).split(" ").map(Number);
      // Kill the server only once the partial output is on disk (read beside it: WAL mode).
      const db = new DatabaseSync(`${data}/agents/sessions.db`, { readOnly: true });
      try {
        const stored = () =>
          (db.prepare("SELECT output FROM live_runs").get() as { output?: string } | undefined)
            ?.output;
        for (let i = 0; i < 200 && stored() !== "Hello, one!"; i++) {
          await new Promise((r) => setTimeout(r, 25));
        }
        assert.equal(stored(), "Hello, one!");
      } finally {
        db.close();
      }
      server.kill("SIGKILL");
      await server.status;
      await server.stdout.cancel().catch(() => {});
      assert.ok(orphans.every(processAlive), "the CLI outlives its SIGKILLed server");

      await Deno.remove(pids);
      const config = await writeConfig(dir, { worker: { args: fake("--transcript", basic) } });
      await using h = await serve(config, data);
      for (let i = 0; i < 40 && orphans.some(processAlive); i++) {
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.ok(!orphans.some(processAlive), "the restart killed the orphaned process group");
      await assistantReply(h, id, 2);
      const history = (await h.api("GET", `/api/sessions/${id}`)).json.history;
      assert.deepEqual(
        history.map((m: Record<string, unknown>) => [m.role, m.content, m.error ?? null]),
        [
          ["user", "one", null],
          ["assistant", "Hello, one!", "interrupted by restart"],
          ["user", "two", null],
          ["assistant", "Hello, two!", null],
        ],
      );
      assert.equal(history[1].partial, true);
      assert.equal(history[2].fromQueue, true);
    } finally {
      try {
        server.kill("SIGKILL");
      } catch { /* already gone */ }
      await server.status;
      await server.stdout.cancel().catch(() => {});
      for (const pid of orphans) {
        try {
          if (processAlive(pid)) Deno.kill(pid, "SIGKILL");
        } catch { /* gone */ }
      }
    }
  });
});

Deno.test("done-when: a Claude-style run is seen in order by an eventsource client", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      claude: { provider: "claude", args: fake("--transcript", claudeBasic, "--delay-ms", "1") },
    });
    await using h = await serve(config, `${dir}/data`);
    const id = (await h.api("POST", "/api/sessions", { agent: "claude" })).json.id;

    const seen: Record<string, unknown>[] = [];
    const es = new EventSource(`${h.url}/api/events`);
    try {
      const finished = new Promise<void>((resolve, reject) => {
        es.onerror = (e) => reject(new Error(`eventsource error: ${e.message}`));
        es.onmessage = (m) => {
          const data = JSON.parse(m.data);
          if (data.topic === "system") return;
          seen.push(data);
          if (data.event === "new_message" && data.role === "assistant") resolve();
        };
      });
      await new Promise<void>((resolve) => (es.onopen = () => resolve()));
      const r = await h.api("POST", `/api/sessions/${id}/messages`, { text: "why does it fail?" });
      assert.equal(r.status, 202);
      await finished;
    } finally {
      es.close();
    }

    const names = seen.map((e) => e.event);
    const at = (pred: (e: Record<string, unknown>) => boolean) => seen.findIndex(pred);
    const userMsg = at((e) => e.event === "new_message" && e.role === "user");
    const running = at((e) => e.event === "agent_status" && e.status === "running");
    const firstTool = at((e) => e.event === "agent_tool");
    const firstOutput = at((e) => e.event === "agent_output");
    const done = at((e) => e.event === "agent_done");
    const statusDone = at((e) => e.event === "agent_status" && e.status === "done");
    assert.ok(userMsg >= 0 && userMsg < running, names.join(" "));
    assert.ok(running < firstTool && running < firstOutput);
    assert.ok(firstTool < done && firstOutput < done && done < statusDone, names.join(" "));
    for (const e of seen.filter((e) => String(e.event).startsWith("agent_"))) {
      assert.equal(e.topic, "agent");
      assert.equal(e.agentId, id);
      assert.equal(e.sessionId, id);
      assert.equal(e.agent, "claude");
    }

    const tools = seen.filter((e) => e.event === "agent_tool");
    const bash = tools.filter((e) => String(e.stepRef).includes("toolu_01Bq8XnJ4mR2vK7wYzP3sLdT"));
    // The transcript's test run fails: the step ends in error.
    assert.deepEqual(bash.map((e) => e.status).filter((s, i, a) => a.indexOf(s) === i), [
      "running",
      "error",
    ]);
    const read = tools.filter((e) => String(e.stepRef).includes("toolu_01Xf5GhT2kLp9wQ4rNz7mVcE"));
    assert.equal(read.at(-1)!.status, "done");
    assert.match(String(read[0].label), /^Read/);
    assert.equal(bash[0].toolType, "command");
    assert.ok(tools.some((e) => e.toolType === "thinking"));

    const transcriptResult = (await Deno.readTextFile(claudeBasic)).trim().split("\n")
      .map((l) => JSON.parse(l)).find((l) => l.type === "result").result;
    const agentDone = seen[done];
    assert.equal(agentDone.text, transcriptResult);
    assert.equal(agentDone.error, undefined);
    const output = seen.filter((e) => e.event === "agent_output").map((e) => e.text).join("");
    assert.ok(output.endsWith(transcriptResult), output);
    const log = agentDone.toolLog as { stepRef: string; status: string }[];
    assert.ok(
      log.some((t) => t.stepRef.includes("toolu_01Bq8XnJ4mR2vK7wYzP3sLdT") && t.status === "error"),
    );
    assert.ok(
      log.some((t) => t.stepRef.includes("toolu_01Xf5GhT2kLp9wQ4rNz7mVcE") && t.status === "done"),
    );
    // trace never reaches clients.
    assert.ok(!seen.some((e) => e.topic === "trace"));
    const reply = seen.at(-1)!;
    assert.equal(reply.content, transcriptResult);
  });
});
