/**
 * The agent runner against real child processes (tests/fixtures/agents/bin/fake_agent.ts run by
 * this same Deno): transcript replay, crash, stall, timeout with SIGKILL escalation, process-tree
 * kill on cancel, garbage and oversized lines, a partial last line, retry with backoff, fallback,
 * and the bounds of agent_done's tool log. Also the config file's validation.
 */
import assert from "node:assert/strict";
import { adapterFor } from "../lib/agents/adapters/mod.ts";
import { type AgentsFile, loadAgentsConfig } from "../lib/agents/config.ts";
import { processAlive, readLines } from "../lib/agents/process.ts";
import {
  type RunOptions,
  startRun,
  TOOL_LOG_MAX_DETAIL_CHARS,
  TOOL_LOG_MAX_ENTRIES,
} from "../lib/agents/run.ts";
import { createBus, type PublicEvent } from "../lib/events/bus.ts";

const root = new URL("..", import.meta.url).pathname;
const fakeAgent = `${root}tests/fixtures/agents/bin/fake_agent.ts`;
const basic = `${root}tests/fixtures/agents/runner/basic.jsonl`;

/** Args that run the fake agent under this Deno. */
const fake = (...args: string[]) => ["run", "-A", fakeAgent, ...args];

type AgentDef = Record<string, unknown> & { args: string[] };

async function withConfig(
  agents: Record<string, AgentDef>,
  top: Record<string, unknown>,
  f: (config: AgentsFile, dir: string) => Promise<void>,
) {
  const dir = await Deno.makeTempDir({ prefix: "hearth-runner-" });
  try {
    const full: Record<string, unknown> = {};
    for (const [name, a] of Object.entries(agents)) {
      full[name] = { provider: "jsonl", command: Deno.execPath(), ...a };
    }
    await Deno.writeTextFile(`${dir}/agents.json`, JSON.stringify({ ...top, agents: full }));
    await f(await loadAgentsConfig(`${dir}/agents.json`), dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function withTemp(f: (dir: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "hearth-runner-" });
  try {
    await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Starts a run and records every event it publishes, traces included. */
function record(config: AgentsFile, agent: string, extra: Partial<RunOptions> = {}) {
  const bus = createBus();
  const events: PublicEvent[] = [];
  const waiters: { pred: (e: PublicEvent) => boolean; resolve: () => void }[] = [];
  const off = bus.subscribe((e) => {
    events.push(e.payload);
    for (const w of [...waiters]) {
      if (w.pred(e.payload)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  }, { internal: true });
  const run = startRun({
    bus,
    config,
    agent,
    prompt: "world",
    cwd: config.roots[0],
    sessionId: "s1",
    adapterFor,
    ...extra,
  });
  const done = run.done.finally(off);
  return {
    run,
    done,
    events,
    /** A failed assertion must not leave the CLI running. */
    async [Symbol.asyncDispose]() {
      run.cancel("test over");
      await done;
    },
    of: (name: string) => events.filter((e) => e.event === name),
    /** Resolves at the first event (past or future) matching `pred`. */
    waitFor(pred: (e: PublicEvent) => boolean, ms = 10_000): Promise<void> {
      if (events.some(pred)) return Promise.resolve();
      let timer: ReturnType<typeof setTimeout>;
      return new Promise<void>((resolve, reject) => {
        const w = { pred, resolve: () => (clearTimeout(timer), resolve()) };
        waiters.push(w);
        timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          reject(new Error(`no matching event within ${ms} ms; saw ${events.map((e) => e.event)}`));
        }, ms);
      });
    },
  };
}

Deno.test("runner: a replayed transcript becomes ordered public events", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--stderr", "warming up") } },
    {},
    async (config) => {
      const sessions: string[] = [];
      await using r = record(config, "a", {
        onCliSession: (agent, id) => sessions.push(`${agent}:${id}`),
      });
      const result = await r.done;
      assert.equal(result.ok, true, result.error ?? "");
      assert.equal(result.text, "Hello, world!");
      assert.deepEqual(sessions, ["a:fake-session-1"]);

      const pub = r.events.filter((e) => e.topic !== "trace");
      assert.deepEqual(pub.map((e) => e.event), [
        "agent_status",
        "agent_tool",
        "agent_tool",
        "agent_tool",
        "agent_tool",
        "agent_output",
        "agent_output",
        "agent_done",
        "agent_status",
      ]);
      for (const e of pub) {
        assert.equal(e.topic, "agent");
        assert.equal(e.agentId, "s1");
        assert.equal(e.sessionId, "s1");
        assert.equal(e.agent, "a");
      }
      assert.equal(pub[0].status, "running");
      assert.equal(pub.at(-1)!.status, "done");
      const bash = r.of("agent_tool").filter((e) => e.stepRef === "jsonl:tool:t1");
      assert.deepEqual(bash.map((e) => e.status), ["running", "done"]);
      assert.equal(bash[0].toolType, "command");
      assert.equal(r.of("agent_output").map((e) => e.text).join(""), "Hello, world!");
      const done = r.of("agent_done")[0];
      assert.equal(done.text, "Hello, world!");
      assert.equal(done.error, undefined);
      const log = done.toolLog as { stepRef: string; status: string; detail?: string }[];
      assert.deepEqual(log.map((t) => t.stepRef), ["jsonl:thinking:0", "jsonl:tool:t1"]);
      assert.equal(log[1].status, "done");
      assert.equal(log[1].detail, "a.txt\nb.txt");
      // stderr goes to the internal trace topic only.
      const stderr = r.events.filter((e) => e.topic === "trace" && e.stream === "stderr");
      assert.deepEqual(stderr.map((e) => e.line), ["warming up"]);
    },
  );
});

Deno.test("runner: a crash mid-run keeps the partial output and reports the disconnect", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--mode", "crash") } },
    {},
    async (config) => {
      await using r = record(config, "a");
      const result = await r.done;
      assert.equal(result.ok, false);
      assert.equal(result.errorKind, "crash");
      assert.match(result.error!, /exited with code 3/);
      assert.match(result.error!, /fatal: the agent crashed \(simulated\)/);
      assert.equal(result.text, "Hello, world!");
      assert.equal(result.partial, true);
      const disc = r.of("worker_disconnected");
      assert.equal(disc.length, 1);
      assert.equal(disc[0].exitCode, 3);
      assert.equal(disc[0].signal, null);
      const done = r.of("agent_done")[0];
      assert.equal(done.errorKind, "crash");
      assert.equal(done.text, "Hello, world!");
      assert.equal(r.events.at(-1)!.status, "error");
      assert.equal(r.of("agent_retry").length, 0, "a crash is not transient");
    },
  );
});

Deno.test("runner: silence is reported once per silence, then cancel kills the hung CLI", async () => {
  await withConfig(
    { a: { args: fake("--mode", "hang"), stallSeconds: 0.25 } },
    {},
    async (config) => {
      await using r = record(config, "a");
      await r.waitFor((e) => e.event === "worker_stalled");
      // Still silent: no second report for the same silence.
      await new Promise((res) => setTimeout(res, 600));
      assert.equal(r.of("worker_stalled").length, 1);
      assert.ok((r.of("worker_stalled")[0].silentSeconds as number) >= 0.25);
      r.run.cancel("stop it");
      const result = await r.done;
      assert.equal(result.errorKind, "cancelled");
      assert.equal(result.error, "stop it");
      assert.equal(r.of("worker_disconnected").length, 0);
    },
  );
});

Deno.test("runner: output resets the stall watch", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--hold-ms", "700"), stallSeconds: 0.35 } },
    {},
    async (config) => {
      await using r = record(config, "a");
      const result = await r.done;
      assert.equal(result.ok, true);
      const stalls = r.events.flatMap((e, i) => (e.event === "worker_stalled" ? [i] : []));
      assert.ok(stalls.length >= 1, "the 700 ms hold is a silence");
      // Between two reports there is always some activity.
      for (let k = 1; k < stalls.length; k++) assert.ok(stalls[k] > stalls[k - 1] + 1);
      // The hold comes right before the result: a stall report precedes agent_done.
      const doneAt = r.events.findIndex((e) => e.event === "agent_done");
      assert.ok(stalls.at(-1)! < doneAt);
      assert.ok(stalls.at(-1)! > r.events.findIndex((e) => e.event === "agent_output"));
    },
  );
});

Deno.test("runner: a run over its timeout is killed, with SIGKILL when SIGTERM is ignored", async () => {
  await withConfig(
    { a: { args: fake("--mode", "hang", "--ignore-term"), timeoutSeconds: 0.6 } },
    { killGraceSeconds: 0.4 },
    async (config) => {
      const t0 = performance.now();
      await using r = record(config, "a");
      const result = await r.done;
      const elapsed = performance.now() - t0;
      assert.equal(result.errorKind, "timeout");
      assert.match(result.error!, /timed out after 0.6 s/);
      assert.equal(r.of("worker_timeout").length, 1);
      assert.equal(r.of("worker_timeout")[0].timeoutSeconds, 0.6);
      assert.ok(elapsed >= 1000, `TERM was ignored, so KILL came after the grace (${elapsed} ms)`);
      assert.equal(r.of("agent_done")[0].errorKind, "timeout");
    },
  );
});

Deno.test("runner: cancel kills the whole process tree, grandchild included", async () => {
  await withTemp(async (dir) => {
    const pidFile = `${dir}/grandchild.pid`;
    await withConfig(
      { a: { args: fake("--transcript", basic, "--mode", "fork", "--pid-file", pidFile) } },
      {},
      async (config) => {
        let leader = 0;
        await using r = record(config, "a", { onProcess: (p) => p && (leader = p.pid) });
        await r.waitFor((e) => e.event === "agent_output");
        const grandchild = Number((await Deno.readTextFile(pidFile)).split(" ")[0]);
        assert.ok(grandchild > 0 && processAlive(grandchild), "the grandchild runs");
        assert.ok(processAlive(leader));
        r.run.cancel();
        const result = await r.done;
        assert.equal(result.errorKind, "cancelled");
        assert.equal(processAlive(grandchild), false, "the grandchild died with the group");
        assert.equal(processAlive(leader), false);
      },
    );
  });
});

Deno.test("runner: garbage lines are traced and parsing goes on", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--mode", "garbage") } },
    {},
    async (config) => {
      await using r = record(config, "a");
      const result = await r.done;
      assert.equal(result.ok, true, result.error ?? "");
      assert.equal(result.text, "Hello, world!");
      const traced = r.events.filter((e) => e.topic === "trace" && e.stream === "stdout");
      assert.ok(traced.length >= 7, `one trace per garbage line (${traced.length})`);
      assert.ok(traced.some((e) => e.line === "this is not json"));
    },
  );
});

Deno.test("runner: a 5 MB line is cut and traced, never parsed or buffered whole", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--mode", "huge") } },
    {},
    async (config) => {
      await using r = record(config, "a");
      const result = await r.done;
      assert.equal(result.ok, true, result.error ?? "");
      assert.equal(result.text, "Hello, world!");
      const cut = r.events.filter((e) => e.topic === "trace" && /exceeds/.test(String(e.reason)));
      assert.equal(cut.length, 1);
      assert.match(String(cut[0].reason), /line of 5242880 bytes/);
      assert.ok(String(cut[0].line).length <= 2001);
    },
  );
});

Deno.test("runner: the partial last line at EOF is read", async () => {
  await withConfig(
    { a: { args: fake("--transcript", basic, "--mode", "partial") } },
    {},
    async (config) => {
      await using r = record(config, "a");
      const result = await r.done;
      assert.equal(result.ok, true, result.error ?? "");
      assert.equal(result.text, "Hello, world!");
      assert.equal(r.of("worker_disconnected").length, 0);
    },
  );
});

Deno.test("runner: transient failures are retried with exponential backoff, then succeed", async () => {
  await withTemp(async (dir) => {
    const counter = `${dir}/count`;
    await withConfig(
      {
        a: {
          args: fake(
            "--transcript",
            basic,
            "--mode",
            "transient",
            "--counter",
            counter,
            "--fail-times",
            "2",
          ),
          maxRetries: 2,
        },
      },
      { retryBaseMs: 30 },
      async (config) => {
        await using r = record(config, "a");
        const result = await r.done;
        assert.equal(result.ok, true, result.error ?? "");
        assert.equal(result.text, "Hello, world!");
        const retries = r.of("agent_retry");
        assert.deepEqual(retries.map((e) => [e.attempt, e.maxRetries, e.delay]), [[1, 2, 30], [
          2,
          2,
          60,
        ]]);
        assert.match(String(retries[0].reason), /429 Too Many Requests/);
        assert.equal(r.of("worker_disconnected").length, 2);
        assert.equal(await Deno.readTextFile(counter), "3");
        assert.equal(r.of("agent_done").length, 1);
      },
    );
  });
});

Deno.test("runner: after maxRetries the fallback agent takes over", async () => {
  await withTemp(async (dir) => {
    const counter = `${dir}/count`;
    const flaky = fake("--mode", "transient", "--counter", counter, "--fail-times", "99");
    await withConfig(
      {
        primary: { args: flaky, maxRetries: 1, fallback: "backup" },
        backup: { args: fake("--transcript", basic) },
        lonely: { args: flaky, maxRetries: 0 },
      },
      { retryBaseMs: 10 },
      async (config) => {
        await using r = record(config, "primary");
        const result = await r.done;
        assert.equal(result.ok, true, result.error ?? "");
        assert.equal(result.agent, "backup");
        assert.equal(r.of("agent_retry").length, 1);
        const fb = r.of("agent_fallback");
        assert.equal(fb.length, 1);
        assert.deepEqual([fb[0].agentId, fb[0].from, fb[0].to], ["s1", "primary", "backup"]);
        assert.match(String(fb[0].reason), /rate limit/);
        assert.equal(r.of("agent_done")[0].agent, "backup");

        // No fallback configured: the transient error ends the run.
        await using r2 = record(config, "lonely");
        const failed = await r2.done;
        assert.equal(failed.ok, false);
        assert.equal(failed.errorKind, "rate_limit");
        assert.equal(r2.of("agent_retry").length, 0);
        assert.equal(r2.of("agent_fallback").length, 0);
        assert.equal(r2.of("agent_done")[0].errorKind, "rate_limit");
      },
    );
  });
});

Deno.test("runner: the CLI's own error result is classified and retried as transient", async () => {
  const claudeError = `${root}tests/fixtures/agents/transcripts/claude-error.jsonl`;
  await withConfig(
    {
      c: {
        provider: "claude",
        args: fake("--transcript", claudeError, "--exit-code", "1", "--delay-ms", "1"),
        maxRetries: 1,
      },
    },
    { retryBaseMs: 10 },
    async (config) => {
      await using r = record(config, "c");
      const result = await r.done;
      assert.equal(result.ok, false);
      assert.equal(result.errorKind, "rate_limit");
      assert.match(result.error!, /exceed the rate limit/);
      assert.equal(r.of("agent_retry").length, 1);
      assert.deepEqual(r.of("worker_disconnected").map((e) => e.exitCode), [1, 1]);
      assert.equal(r.of("agent_done")[0].errorKind, "rate_limit");
    },
  );
});

Deno.test("runner: agent_done's tool log keeps the newest 160 steps and 24000 detail chars", async () => {
  await withTemp(async (dir) => {
    const lines: string[] = [];
    for (let i = 0; i < 200; i++) {
      lines.push(JSON.stringify({ type: "tool", id: `t${i}`, name: "read", status: "running" }));
      lines.push(
        JSON.stringify({
          type: "tool",
          id: `t${i}`,
          name: "read",
          status: "done",
          detail: "d".repeat(1000),
        }),
      );
    }
    lines.push(JSON.stringify({ type: "result", text: "read everything" }));
    await Deno.writeTextFile(`${dir}/many.jsonl`, lines.join("\n") + "\n");
    await withConfig(
      { a: { args: fake("--transcript", `${dir}/many.jsonl`, "--delay-ms", "0") } },
      {},
      async (config) => {
        await using r = record(config, "a");
        const result = await r.done;
        assert.equal(result.ok, true, result.error ?? "");
        const log = r.of("agent_done")[0].toolLog as {
          stepRef: string;
          status: string;
          detail?: string;
        }[];
        assert.equal(log.length, TOOL_LOG_MAX_ENTRIES);
        assert.equal(log[0].stepRef, "jsonl:tool:t40");
        assert.equal(log.at(-1)!.stepRef, "jsonl:tool:t199");
        assert.ok(log.every((t) => t.status === "done"));
        const chars = log.reduce((n, t) => n + (t.detail?.length ?? 0), 0);
        assert.equal(chars, TOOL_LOG_MAX_DETAIL_CHARS);
        assert.equal(r.of("agent_tool").length, 400);
      },
    );
  });
});

Deno.test("runner: a command that cannot start ends the run with errorKind spawn", async () => {
  await withConfig({ a: { args: [], command: "/nonexistent/agent-cli" } }, {}, async (config) => {
    await using r = record(config, "a");
    const result = await r.done;
    assert.equal(result.errorKind, "spawn");
    assert.match(result.error!, /cannot start agent a \(\/nonexistent\/agent-cli\)/);
    assert.equal(r.of("agent_done").length, 1);
  });
});

Deno.test("readLines: CRLF, empty lines, a partial last line and a cut line", async () => {
  const chunks = ["one\r\ntw", "o\n\nthr", "x".repeat(50), "\nfour"];
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
      c.close();
    },
  });
  const lines: string[] = [];
  const cut: [string, number][] = [];
  await readLines(stream, (l) => lines.push(l), {
    maxLineBytes: 40,
    onOverlong: (head, n) => cut.push([head, n]),
  });
  assert.deepEqual(lines, ["one", "two", "", "four"]);
  assert.deepEqual(cut, [["thr" + "x".repeat(50), 53]]);
});

Deno.test("agents config: defaults, relative roots and one-line errors", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-agents-config-" });
  try {
    await Deno.mkdir(`${dir}/work`);
    const write = (v: unknown) => Deno.writeTextFile(`${dir}/a.json`, JSON.stringify(v));
    await write({ roots: ["work"], agents: { x: { provider: "codex", command: "codex" } } });
    const c = await loadAgentsConfig(`${dir}/a.json`);
    assert.deepEqual(c.roots, [await Deno.realPath(`${dir}/work`)]);
    assert.equal(c.agents.x.maxRetries, 2);
    assert.deepEqual(c.agents.x.args, []);
    assert.equal(c.agents.x.name, "x");

    await write({
      agents: { x: { provider: "jsonl", command: "./bin/agent", stallSeconds: 0.5 } },
    });
    const d = await loadAgentsConfig(`${dir}/a.json`);
    assert.deepEqual(d.roots, [await Deno.realPath(dir)]);
    assert.equal(d.agents.x.command, `${dir}/bin/agent`);
    assert.equal(d.agents.x.stallSeconds, 0.5);

    const bad: [unknown, RegExp][] = [
      [
        { agents: { x: { provider: "jsonl", command: "a", fallback: "y" } } },
        /fallback: unknown agent "y"/,
      ],
      [{ agents: { x: { provider: "bogus", command: "a" } } }, /agents\.x\.provider/],
      [
        { agents: { x: { provider: "jsonl", command: "a", shell: true } } },
        /unknown field\(s\) shell/,
      ],
      [{ agents: {} }, /at least one agent/],
      [
        { roots: ["nope"], agents: { x: { provider: "jsonl", command: "a" } } },
        /root nope .* does not exist/,
      ],
    ];
    for (const [cfg, re] of bad) {
      await write(cfg);
      await assert.rejects(loadAgentsConfig(`${dir}/a.json`), (e: Error) => {
        assert.match(e.message, re);
        assert.ok(!e.message.includes("\n"), e.message);
        return true;
      });
    }
    await Deno.writeTextFile(`${dir}/a.json`, "{not json");
    await assert.rejects(loadAgentsConfig(`${dir}/a.json`), /not valid JSON/);
    await assert.rejects(loadAgentsConfig(`${dir}/missing.json`), /cannot read/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
