/**
 * Orchestration (docs/ARCHITECTURE.md, "Goals, orchestration, memory") over a real agent service, its routes on a real Deno.serve and
 * real agent processes: the scripted CLI of tests/fixtures/agents/bin/script_agent.ts, driven by
 * the scripts of tests/fixtures/agents/scripts. Covers a FAIL-then-PASS checker, a worker that
 * crashes and falls back, a restart while a step hangs, cancelling the parent session, runs that
 * fail (no plan, no verdict), bad input, and the bounds of the checker's prompt.
 */
import assert from "node:assert/strict";
import type { AgentsFile } from "../lib/agents/config.ts";
import {
  checkerPrompt,
  type OrchestrationJson,
  type Orchestrator,
  parsePlan,
  parseVerdict,
} from "../lib/agents/orchestrate.ts";
import { processAlive } from "../lib/agents/process.ts";
import { type AgentService, AgentServiceError } from "../lib/agents/sessions.ts";
import type { PublicEvent } from "../lib/events/bus.ts";
import {
  type AgentsHarness,
  scriptedConfig,
  serveAgents,
  withAgentsTree,
} from "./support/agents.ts";

const root = new URL("..", import.meta.url).pathname;
const scripts = `${root}tests/fixtures/agents/scripts`;

// deno-lint-ignore no-explicit-any -- response bodies are checked field by field
type Json = any;
type Agents = Record<string, { script: string; fallback?: string }>;

const withTree = withAgentsTree;

/** Agents of provider jsonl running the scripted CLI on the scripts of the fixtures folder. */
function writeConfig(
  dir: string,
  agents: Agents,
  top: Record<string, unknown> = {},
): Promise<AgentsFile> {
  const files: Record<string, string> = {};
  const extra: Record<string, Record<string, unknown>> = {};
  for (const [name, a] of Object.entries(agents)) {
    files[name] = `${scripts}/${a.script}`;
    if (a.fallback) extra[name] = { fallback: a.fallback };
  }
  return scriptedConfig(dir, files, { extra, top });
}

/** What an agent was given, in order: `{prompt, cwd, rule}` per process. */
async function prompts(dir: string, agent: string): Promise<{ prompt: string; cwd: string }[]> {
  const text = await Deno.readTextFile(`${dir}/state/${agent}/prompts.jsonl`).catch(() => "");
  return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}

type Harness = Omit<AgentsHarness, "of"> & {
  service: AgentService;
  orch: Orchestrator;
  of(event: string, runId?: string): PublicEvent[];
};

/** The whole agents surface and the event channel on a loopback port; `of` filters by run. */
async function serve(config: AgentsFile, dataDir: string): Promise<Harness> {
  const h = await serveAgents(config, dataDir, { watchMemory: false });
  return {
    ...h,
    service: h.agents.service,
    orch: h.agents.orchestrator,
    of: (event, runId) =>
      h.events.filter((e) => e.event === event && (!runId || e.runId === runId)),
  };
}

const finished = (h: Harness, runId: string) =>
  h.waitFor((e) => e.event === "orchestrate_done" && e.runId === runId);

/** Consecutive repeats removed: the states a run went through. */
const phases = (states: unknown[]) => states.filter((s, i) => i === 0 || s !== states[i - 1]);

async function until<T>(
  f: () => Promise<T | undefined> | T | undefined,
  what: string,
  ms = 15_000,
) {
  const end = Date.now() + ms;
  while (true) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function newSession(h: Harness, agent: string): Promise<string> {
  const r = await h.api("POST", "/api/sessions", { agent });
  assert.equal(r.status, 201);
  return r.json.id;
}

/** Waits until the run's round-1 steps all run in their sessions and have printed something. */
async function stepsHanging(h: Harness, runId: string, count: number): Promise<Json[]> {
  const steps = await until(async () => {
    const run = (await h.api("GET", `/api/orchestrations/${runId}`)).json;
    const s = run.steps as Json[];
    return s.length === count && s.every((x) => x.status === "running" && x.sessionId)
      ? s
      : undefined;
  }, "the steps to run");
  for (const s of steps) {
    await h.waitFor((e) => e.event === "agent_output" && e.sessionId === s.sessionId);
  }
  return steps;
}

const livePid = (h: Harness, sessionId: string) =>
  (h.service.db.prepare("SELECT pid FROM live_runs WHERE session_id = ?").get(sessionId) as
    | { pid: number | null }
    | undefined)?.pid ?? null;

Deno.test("orchestrate: a checker's FAIL sends the work back to build, its PASS ends the run", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, { steady: { script: "two_rounds.json" } });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "steady");

    const r = await h.api("POST", `/api/sessions/${parent}/orchestrate`, {
      task: "Create a.txt and b.txt",
      maxRounds: 2,
    });
    assert.equal(r.status, 202);
    const run = r.json;
    assert.equal(typeof run.runId, "string");
    assert.deepEqual(
      [run.sessionId, run.state, run.round, run.maxRounds, run.planner, run.workers, run.checker],
      [parent, "plan", 1, 2, "steady", ["steady"], "steady"],
    );
    assert.deepEqual(run.steps, []);

    const done = await finished(h, run.runId);
    assert.equal(done.topic, "orchestrate");
    assert.equal(done.sessionId, parent);
    assert.equal(done.error, undefined);
    assert.match(String(done.text), /^PASS\nboth files are there/);

    const states = h.of("orc_state", run.runId);
    assert.deepEqual(phases(states.map((e) => e.state)), [
      "plan",
      "build",
      "check",
      "build",
      "check",
      "done",
    ]);
    assert.ok(states.every((e) => e.sessionId === parent && e.topic === "orchestrate"));
    assert.deepEqual(states.map((e) => e.title).filter((t) => !String(t).startsWith("Step")), [
      "Planning",
      "Checking (round 1 of 2)",
      "Checking (round 2 of 2)",
      "Done",
    ]);
    const builds = states.filter((e) => e.state === "build");
    assert.deepEqual(builds.map((e) => [e.step, e.of]).sort(), [[1, 2], [2, 2], [3, 3]]);
    assert.ok(builds.some((e) => e.title === "Step 2 of 2: write b.txt"), JSON.stringify(builds));
    assert.ok(builds.some((e) => e.title === "Step 3 of 3 (round 2 of 2): fix: b.txt is empty"));
    const warnings = h.of("orchestrate_warning", run.runId).map((e) => e.message);
    assert.deepEqual(warnings, ["round 2 of 2 is the last: the budget of rounds is nearly spent"]);

    const got = (await h.api("GET", `/api/orchestrations/${run.runId}`)).json;
    assert.equal(got.state, "done");
    assert.equal(got.round, 2);
    assert.deepEqual(got.verdict, { pass: true });
    assert.match(got.text, /^PASS/);
    assert.equal(got.error, undefined);
    assert.ok(got.finishedAt && Date.parse(got.finishedAt) >= Date.parse(got.createdAt));
    assert.deepEqual(
      got.steps.map((s: Json) => [s.n, s.text, s.agent, s.round, s.status, s.answer]),
      [
        [1, "write a.txt", "steady", 1, "done", "wrote a.txt"],
        [2, "write b.txt", "steady", 1, "done", "wrote b.txt"],
        [3, "fix: b.txt is empty", "steady", 2, "done", "fixed b.txt"],
      ],
    );
    // Planner, checker and each step in a session of its own, none of them the parent.
    const ids = [
      parent,
      got.plannerSessionId,
      got.checkerSessionId,
      ...got.steps.map((s: Json) => s.sessionId),
    ];
    assert.equal(new Set(ids).size, 6, JSON.stringify(ids));
    for (const f of ["a.txt", "b.txt", "fixed.txt"]) {
      assert.ok((await Deno.stat(`${dir}/work/${f}`)).isFile, f);
    }

    // The checker judged while `evaluating` (once per round, in the same session); workers ran.
    const evaluating = h.of("agent_status").filter((e) => e.status === "evaluating");
    assert.deepEqual(evaluating.map((e) => e.sessionId), [
      got.checkerSessionId,
      got.checkerSessionId,
    ]);
    const checker = (await h.api("GET", `/api/sessions/${got.checkerSessionId}`)).json;
    assert.equal(checker.history.length, 4);
    assert.equal(checker.cwd, `${dir}/work`);
    const planner = (await h.api("GET", `/api/sessions/${got.plannerSessionId}`)).json;
    assert.equal(planner.history.length, 2);

    // What each agent was given.
    const given = await prompts(dir, "steady");
    assert.equal(given.length, 6);
    assert.ok(given.every((p) => p.cwd === `${dir}/work`));
    const worker2 = given.find((p) => p.prompt.includes("Your step 2 of 2: write b.txt"))!;
    assert.match(worker2.prompt, /Create a\.txt and b\.txt/);
    assert.match(worker2.prompt, /^1\. write a\.txt\n2\. write b\.txt$/m);
    const fix = given.find((p) => p.prompt.startsWith("You are fixing"))!;
    assert.match(fix.prompt, /round 2 of 2/);
    assert.match(fix.prompt, /b\.txt is empty/);
    assert.match(fix.prompt, /wrote a\.txt/);
    const checks = given.filter((p) => p.prompt.startsWith("You are the checker"));
    assert.equal(checks.length, 2);
    assert.match(checks[0].prompt, /PASS, or FAIL: WHY/);
    assert.match(checks[1].prompt, /fixed b\.txt/);

    const listed = (await h.api("GET", `/api/orchestrations?sessionId=${parent}`)).json;
    assert.deepEqual(listed.orchestrations.map((o: Json) => o.runId), [run.runId]);
    assert.deepEqual(listed.orchestrations[0], got);
    const all = (await h.api("GET", "/api/orchestrations")).json;
    assert.deepEqual(all.orchestrations.map((o: Json) => o.runId), [run.runId]);
  });
});

Deno.test("orchestrate: a worker that crashes falls back to its fallback agent", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      steady: { script: "steady.json" },
      flaky: { script: "crash.json", fallback: "steady" },
    });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "steady");
    const r = await h.api("POST", `/api/sessions/${parent}/orchestrate`, {
      task: "Create a.txt and b.txt",
      workers: "flaky",
    });
    assert.equal(r.status, 202);
    assert.deepEqual(r.json.workers, ["flaky"]);
    const done = await finished(h, r.json.runId);
    assert.equal(done.error, undefined);

    const warnings = h.of("orchestrate_warning", r.json.runId).map((e) => String(e.message)).sort();
    assert.equal(warnings.length, 2, warnings.join("\n"));
    warnings.forEach((w, i) =>
      assert.match(
        w,
        new RegExp(`^step ${i + 1}: worker flaky failed \\(crash: .+\\); falling back to steady$`),
      )
    );
    assert.match(warnings[0], /without a result/);

    const got = (await h.api("GET", `/api/orchestrations/${r.json.runId}`)).json;
    assert.equal(got.state, "done");
    assert.deepEqual(
      got.steps.map((s: Json) => [s.agent, s.status, s.answer]),
      [["steady", "done", "wrote a.txt"], ["steady", "done", "wrote b.txt"]],
    );
    for (const s of got.steps) {
      assert.equal((await h.api("GET", `/api/sessions/${s.sessionId}`)).json.agent, "steady");
    }
    assert.equal((await prompts(dir, "flaky")).length, 2);
    // The crashed sessions of flaky are kept, with the crash in their history.
    const flaky = (await h.api("GET", "/api/sessions")).json.sessions.filter((s: Json) =>
      s.agent === "flaky"
    );
    assert.equal(flaky.length, 2);
    assert.ok(flaky.every((s: Json) => s.latestMessage.errorKind === "crash"));
    assert.ok(h.of("worker_disconnected").length >= 2);
    for (const f of ["a.txt", "b.txt"]) assert.ok((await Deno.stat(`${dir}/work/${f}`)).isFile);
  });
});

Deno.test("orchestrate: a restart while a step hangs re-runs that step in its session", async () => {
  await withTree(async (dir) => {
    const data = `${dir}/data`;
    const config = await writeConfig(dir, { steady: { script: "restart.json" } });
    let h = await serve(config, data);
    let runId: string;
    let hung: string;
    let pid: number | null;
    try {
      const parent = await newSession(h, "steady");
      runId = (await h.api("POST", `/api/sessions/${parent}/orchestrate`, {
        task: "Create a.txt and b.txt",
      }))
        .json.runId;
      const steps = await until(async () => {
        const s = (await h.api("GET", `/api/orchestrations/${runId}`)).json.steps;
        return s.length === 2 && s[0].status === "done" && s[1].status === "running" &&
            s[1].sessionId
          ? s
          : undefined;
      }, "step 1 done and step 2 running");
      hung = steps[1].sessionId;
      await h.waitFor((e) => e.event === "agent_output" && e.sessionId === hung);
      pid = livePid(h, hung);
      assert.ok(pid !== null && processAlive(pid));
    } finally {
      await h.stop();
    }
    assert.equal(h.of("orchestrate_done").length, 0, "a shutdown does not end the run");
    assert.ok(!h.of("orc_state", runId).some((e) => e.state === "failed"));

    h = await serve(config, data);
    try {
      assert.ok(!processAlive(pid!), "the hung CLI is gone");
      const warning = await h.waitFor((e) =>
        e.event === "orchestrate_warning" && e.runId === runId
      );
      assert.equal(
        warning.message,
        "resumed after a restart: running step 2 again (round 1 of 3); step 2 in the same worker session",
      );
      const done = await finished(h, runId);
      assert.equal(done.error, undefined);
      assert.match(String(done.text), /^PASS/);
      assert.deepEqual(phases(h.of("orc_state", runId).map((e) => e.state)), [
        "build",
        "check",
        "done",
      ]);

      const got = (await h.api("GET", `/api/orchestrations/${runId}`)).json;
      assert.equal(got.state, "done");
      assert.equal(got.steps[1].sessionId, hung);
      assert.deepEqual(got.steps.map((s: Json) => [s.status, s.answer]), [
        ["done", "wrote a.txt"],
        ["done", "wrote b.txt"],
      ]);
      const history = (await h.api("GET", `/api/sessions/${hung}`)).json.history;
      assert.deepEqual(
        history.map((m: Json) => [m.role, m.content, m.error ?? null]),
        [
          ["user", history[0].content, null],
          ["assistant", "working ", "interrupted by restart"],
          ["user", history[0].content, null],
          ["assistant", "wrote b.txt", null],
        ],
      );
      assert.match(history[0].content, /^Your step 2 of 2: write b\.txt$/m);
      const given = (await prompts(dir, "steady")).map((p) => p.prompt);
      assert.equal(given.filter((p) => p.includes("Your step 1 of 2")).length, 1);
      assert.equal(given.filter((p) => p.includes("Your step 2 of 2")).length, 2);
      assert.equal(given.filter((p) => p.startsWith("You are the planner")).length, 1);
      for (const f of ["a.txt", "b.txt"]) assert.ok((await Deno.stat(`${dir}/work/${f}`)).isFile);
    } finally {
      await h.stop();
    }
  });
});

Deno.test("orchestrate: cancelling the parent session stops the workers and fails the run", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, { hang: { script: "hang.json" } });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "hang");
    const runId = (await h.api("POST", `/api/sessions/${parent}/orchestrate`, {
      task: "Create a.txt and b.txt",
    }))
      .json.runId;
    const steps = await stepsHanging(h, runId, 2);
    const pids = steps.map((s) => livePid(h, s.sessionId));
    assert.ok(pids.every((p) => p !== null && processAlive(p)), JSON.stringify(pids));

    const cancel = await h.api("POST", `/api/sessions/${parent}/cancel`);
    assert.equal(cancel.status, 202);
    assert.deepEqual(cancel.json, { sessionId: parent, cancelled: true, pending: 0 });
    const done = await finished(h, runId);
    assert.equal(done.error, "cancelled");
    assert.match(String(done.text), /write a\.txt/);
    const last = h.of("orc_state", runId).at(-1)!;
    assert.deepEqual([last.state, last.title], ["failed", "Failed: cancelled"]);

    for (const s of steps) {
      const session = await until(async () => {
        const j = (await h.api("GET", `/api/sessions/${s.sessionId}`)).json;
        return j.status === "idle" ? j : undefined;
      }, "the worker session to be idle");
      assert.equal(session.latestMessage.errorKind, "cancelled");
    }
    await until(
      () => (pids.some((p) => processAlive(p!)) ? undefined : true),
      "workers to exit",
      3000,
    );

    const got = (await h.api("GET", `/api/orchestrations/${runId}`)).json;
    assert.equal(got.state, "failed");
    assert.equal(got.error, "cancelled");
    assert.deepEqual(got.steps.map((s: Json) => [s.status, s.error]), [
      ["failed", "cancelled"],
      ["failed", "cancelled"],
    ]);
    assert.equal(h.of("orchestrate_done", runId).length, 1);
    // Nothing left to cancel; and the session may orchestrate again.
    assert.equal((await h.api("POST", `/api/sessions/${parent}/cancel`)).status, 409);
    const again = await h.api("POST", `/api/sessions/${parent}/orchestrate`, { task: "Again" });
    assert.equal(again.status, 202);
  });
});

Deno.test("orchestrate: bad input is refused with clear messages; a worker cancelled elsewhere ends the run", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      hang: { script: "hang.json" },
      steady: { script: "steady.json" },
    });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "hang");
    const path = `/api/sessions/${parent}/orchestrate`;

    const missing = await h.api("POST", "/api/sessions/nope/orchestrate", { task: "x" });
    assert.deepEqual([missing.status, missing.json.error], [404, "NOT_FOUND"]);
    assert.match(missing.json.message, /no session nope/);
    assert.equal((await h.api("POST", "/api/sessions/nope/orchestrate", "{bad")).status, 404);

    const refusals: [unknown, RegExp][] = [
      [
        { task: "x", workers: ["hang", "nope"] },
        /^unknown agent "nope" for workers; configured agents: hang, steady$/,
      ],
      [
        { task: "x", planner: "nope" },
        /^unknown agent "nope" for planner; configured agents: hang, steady$/,
      ],
      [{ task: "x", checker: "nope" }, /^unknown agent "nope" for checker/],
      [{ task: "x", maxRounds: 0 }, /^maxRounds: must be a whole number from 1 to 10$/],
      [{ task: "x", maxRounds: 11 }, /^maxRounds: must be a whole number from 1 to 10$/],
      [{ task: "x", maxRounds: 2.5 }, /^maxRounds: must be a whole number from 1 to 10$/],
      [{ task: "x", maxRounds: "3" }, /^maxRounds: must be a whole number from 1 to 10$/],
      [{ task: "" }, /^task: must not be empty$/],
      [{ task: "a\u0000b" }, /^task: must not contain NUL characters$/],
      [{ task: "é".repeat(70_000) }, /^task: must be at most \d+ bytes/],
      [{}, /^task: is required$/],
      [{ task: "x", workers: [] }, /^workers: must name at least one agent$/],
      [{ task: "x", workers: 5 }, /^workers: must be an agent name or a non-empty array/],
      [{ task: "x", foo: 1 }, /Unrecognized .*foo/],
      ["{not json", /not valid JSON/],
      ["", /empty/],
      [[], /expected object/],
    ];
    for (const [body, re] of refusals) {
      const r = await h.api("POST", path, body);
      assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(r.json.error, "BAD_REQUEST");
      assert.match(r.json.message, re);
    }
    // The same checks without HTTP.
    assert.throws(
      () => h.orch.start(parent, { task: "x", foo: 1 } as unknown as { task: string }),
      (e: unknown) =>
        e instanceof AgentServiceError && e.status === 400 &&
        /unknown field\(s\): foo/.test(e.message),
    );
    assert.throws(
      () => h.orch.start("nope", { task: "x" }),
      (e: unknown) => e instanceof AgentServiceError && e.status === 404,
    );

    const first = await h.api("POST", path, { task: "Create a.txt and b.txt", workers: ["hang"] });
    assert.equal(first.status, 202);
    const second = await h.api("POST", path, { task: "Something else" });
    assert.deepEqual([second.status, second.json.error], [409, "CONFLICT"]);
    assert.match(
      second.json.message,
      new RegExp(`already has an unfinished orchestration ${first.json.runId}`),
    );

    const unknown = await h.api("GET", "/api/orchestrations/nope");
    assert.deepEqual([unknown.status, unknown.json.error], [404, "NOT_FOUND"]);
    assert.match(unknown.json.message, /no orchestration nope/);
    assert.equal((await h.api("GET", "/api/orchestrations?sessionId=nope")).status, 404);
    assert.equal((await h.api("GET", "/api/orchestrations")).json.orchestrations.length, 1);

    // Someone cancels one worker's session: the run fails and its other worker is stopped too.
    const steps = await stepsHanging(h, first.json.runId, 2);
    assert.equal((await h.api("POST", `/api/sessions/${steps[0].sessionId}/cancel`)).status, 202);
    const done = await finished(h, first.json.runId);
    assert.equal(done.error, "cancelled");
    await until(async () => {
      const j = (await h.api("GET", `/api/sessions/${steps[1].sessionId}`)).json;
      return j.status === "idle" ? j : undefined;
    }, "the other worker to stop");
  });
});

Deno.test("orchestrate: no plan, or no verdict once the rounds are spent, fails the run", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      vague: { script: "vague.json" },
      lax: { script: "lax.json" },
    });
    await using h = await serve(config, `${dir}/data`);
    const p1 = await newSession(h, "vague");
    const p2 = await newSession(h, "lax");
    const noPlan =
      (await h.api("POST", `/api/sessions/${p1}/orchestrate`, { task: "Tidy up" })).json;
    const noVerdict = (await h.api("POST", `/api/sessions/${p2}/orchestrate`, {
      task: "Create a.txt",
      maxRounds: 1,
    })).json;

    const d1 = await finished(h, noPlan.runId);
    assert.match(String(d1.error), /^the planner answered without a numbered list of steps/);
    assert.match(String(d1.error), /I would rather not make a list\./);
    assert.deepEqual(phases(h.of("orc_state", noPlan.runId).map((e) => e.state)), [
      "plan",
      "failed",
    ]);
    const g1 = (await h.api("GET", `/api/orchestrations/${noPlan.runId}`)).json;
    assert.deepEqual([g1.state, g1.steps, g1.text], ["failed", [], "no steps were planned"]);

    const d2 = await finished(h, noVerdict.runId);
    assert.equal(
      d2.error,
      "the checker still found fault after 1 round: the checker gave no verdict",
    );
    assert.deepEqual(h.of("orchestrate_warning", noVerdict.runId).map((e) => e.message), [
      'the checker gave no verdict (its first line: "Looks fine to me."); counted as FAIL',
    ]);
    const g2 = (await h.api("GET", `/api/orchestrations/${noVerdict.runId}`)).json;
    assert.equal(g2.state, "failed");
    assert.deepEqual(g2.verdict, { pass: false, reason: "the checker gave no verdict" });
    assert.equal(g2.text, "1. [done] write a.txt: wrote a.txt");
    assert.deepEqual(
      phases(h.of("orc_state", noVerdict.runId).map((e) => e.state)),
      ["plan", "build", "check", "failed"],
    );
    const listed = (await h.api("GET", `/api/orchestrations?sessionId=${p2}`)).json.orchestrations;
    assert.deepEqual(listed.map((o: Json) => o.runId), [noVerdict.runId]);
  });
});

Deno.test("orchestrate: a worker with no fallback is retried once, then the run fails", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, {
      lax: { script: "lax.json" },
      crashy: { script: "crash.json" },
    });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "lax");
    const run = (await h.api("POST", `/api/sessions/${parent}/orchestrate`, {
      task: "Create a.txt",
      workers: ["crashy"],
    })).json;
    const done = await finished(h, run.runId);
    assert.match(String(done.error), /^step 1 \(write a\.txt\) failed on crashy: crash: /);
    const warnings = h.of("orchestrate_warning", run.runId).map((e) => String(e.message));
    assert.equal(warnings.length, 1);
    assert.match(
      warnings[0],
      /^step 1: worker crashy failed \(crash: .+\); retrying it once on crashy$/,
    );
    assert.equal((await prompts(dir, "crashy")).length, 2);
    const got = (await h.api("GET", `/api/orchestrations/${run.runId}`)).json;
    assert.equal(got.state, "failed");
    assert.deepEqual([got.steps[0].status, got.steps[0].agent], ["failed", "crashy"]);
    assert.match(got.steps[0].error, /^crash: /);
    assert.equal(got.checkerSessionId, undefined, "no checker for a failed build");
  });
});

Deno.test("orchestrate: at most 20 steps, at most maxParallelWorkers at once", async () => {
  await withTree(async (dir) => {
    const config = await writeConfig(dir, { many: { script: "many.json" } }, {
      maxParallelWorkers: 2,
    });
    await using h = await serve(config, `${dir}/data`);
    const parent = await newSession(h, "many");
    const run = (await h.api("POST", `/api/sessions/${parent}/orchestrate`, { task: "Chores" }))
      .json;
    const done = await finished(h, run.runId);
    assert.equal(done.error, undefined);
    assert.deepEqual(h.of("orchestrate_warning", run.runId).map((e) => e.message), [
      "the planner gave 21 steps; only the first 20 are kept",
    ]);
    const got = (await h.api("GET", `/api/orchestrations/${run.runId}`)).json;
    assert.equal(got.steps.length, 20);
    assert.ok(
      got.steps.every((s: Json, i: number) =>
        s.status === "done" && s.answer === `did chore ${i + 1}`
      ),
    );
    const workers = new Set(got.steps.map((s: Json) => s.sessionId));
    let running = 0;
    let most = 0;
    for (const e of h.events) {
      if (!workers.has(e.sessionId)) continue;
      if (e.event === "agent_status" && e.status === "running") most = Math.max(most, ++running);
      if (e.event === "agent_done") running--;
    }
    assert.equal(most, 2);
  });
});

Deno.test("orchestrate: plans and verdicts parse; the checker's prompt stays far below one argv", () => {
  assert.deepEqual(parsePlan("Plan:\n1. write a\n  2) write b\nnot a step\n10. c\n3.nope"), [
    "write a",
    "write b",
    "c",
  ]);
  assert.deepEqual(parsePlan("no list here"), []);
  assert.deepEqual(parseVerdict("\n PASS\nfine"), { pass: true });
  assert.deepEqual(parseVerdict("**PASS**"), { pass: true });
  assert.deepEqual(parseVerdict("FAIL: b.txt is empty\nmore"), {
    pass: false,
    reason: "b.txt is empty",
  });
  assert.deepEqual(parseVerdict("FAIL b.txt is empty"), { pass: false, reason: "b.txt is empty" });
  assert.deepEqual(parseVerdict("FAIL"), { pass: false, reason: "no reason given" });
  assert.equal(parseVerdict("PASSING grade"), null);
  assert.equal(parseVerdict("Looks fine"), null);
  assert.equal(parseVerdict(""), null);

  const run: OrchestrationJson = {
    runId: "r",
    sessionId: "s",
    task: "é".repeat(60_000),
    state: "check",
    round: 3,
    maxRounds: 3,
    planner: "p",
    workers: ["w"],
    checker: "c",
    steps: Array.from({ length: 22 }, (_, i) => ({
      n: i + 1,
      text: "ü".repeat(1000),
      agent: "w",
      round: i < 20 ? 1 : i - 18,
      status: "done" as const,
      answer: "€".repeat(40_000),
    })),
    createdAt: "2025-01-01T00:00:00.000Z",
    updatedAt: "2025-01-01T00:00:00.000Z",
  };
  const prompt = checkerPrompt(run);
  const bytes = new TextEncoder().encode(prompt).length;
  assert.ok(bytes < 96 * 1024, `${bytes} bytes`);
  assert.match(prompt, /^You are the checker .*\(round 3 of 3\)/);
  assert.match(prompt, /Step 22 \(/);
  assert.match(prompt, /PASS, or FAIL: WHY/);
});
