/**
 * Goals (docs/ARCHITECTURE.md, "Goals, orchestration, memory") end to end: the real session service and routes on a loopback port, the
 * scripted fixture CLI as the agent (its answers carry the `/goal ...` lines), events from the bus.
 * Covered: `/goal done` withheld until a checkpoint's evidence exists, the two-step pause gate,
 * the agent's cancel, the budget, the user's routes, a goal going on after a restart in the middle
 * of a turn, and bad input on every goal route.
 */
import assert from "node:assert/strict";
import { EventSource } from "eventsource";
import { parseGoalLines } from "../lib/agents/goal_lines.ts";
import {
  type AgentsHarness,
  promptsOf,
  scriptedConfig,
  serveAgents,
  withAgentsTree,
} from "./support/agents.ts";

const goalEvents = (h: AgentsHarness, sessionId: string) =>
  h.events.filter((e) => e.topic === "goal" && e.sessionId === sessionId).map((e) => e.event);

async function newSession(h: AgentsHarness, agent = "agent") {
  const r = await h.api("POST", "/api/sessions", { agent });
  assert.equal(r.status, 201);
  return r.json.id as string;
}

Deno.test("goal lines: directives on lines of their own, evidence lists, noise ignored", () => {
  assert.deepEqual(
    parseGoalLines(
      "Done the parser.\n- `/goal checkpoint parser works [evidence: src/p.ts, 'test.log']`\n" +
        "I will say /goal done later, not now.\n  /goal done\n/goal pause need a token\n" +
        "/GOAL cancel wrong repo\n/goal checkpoint no evidence here",
    ),
    [
      { kind: "checkpoint", summary: "parser works", evidence: ["src/p.ts", "test.log"] },
      { kind: "done" },
      { kind: "pause", reason: "need a token" },
      { kind: "cancel", reason: "wrong repo" },
      { kind: "checkpoint", summary: "no evidence here", evidence: [] },
    ],
  );
  assert.deepEqual(parseGoalLines("/goal checkpoint x evidence: a.txt"), [
    { kind: "checkpoint", summary: "x", evidence: ["a.txt"] },
  ]);
  assert.deepEqual(parseGoalLines("/goals done\n/goal finished"), []);
});

Deno.test("goals: /goal done counts only after a checkpoint whose evidence exists", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: {
        rules: [
          {
            match: "was not accepted: evidence",
            replies: [{
              text: "Wrote it.\n/goal checkpoint report written [evidence: report.txt]\n/goal done",
              touch: ["report.txt"],
            }],
          },
          {
            match: "was not accepted: no checkpoint",
            replies: [
              "Started.\n/goal checkpoint outline [evidence: missing.txt, ../../escape.txt]\n/goal done",
            ],
          },
          { match: "^Goal: ", replies: ["All done, I think.\n/goal done"] },
        ],
      },
    });
    await using h = await serveAgents(config, `${dir}/data`);
    const id = await newSession(h);
    const created = await h.api("POST", `/api/sessions/${id}/goal`, {
      objective: "write report.txt",
      maxTurns: 5,
    });
    assert.equal(created.status, 201);
    assert.equal(created.json.status, "active");
    assert.equal(created.json.maxTurns, 5);
    const goalId = created.json.goalId;

    const done = await h.waitFor((e) => e.event === "goal_done" && e.sessionId === id);
    assert.equal(done.goalId, goalId);
    assert.equal(done.by, "agent");
    assert.deepEqual(done.evidence, ["report.txt"]);
    assert.deepEqual(goalEvents(h, id), [
      "goal_started",
      "goal_done_withheld",
      "goal_continue",
      "goal_checkpoint",
      "goal_done_withheld",
      "goal_continue",
      "goal_checkpoint",
      "goal_done",
    ]);
    const withheld = h.of("goal_done_withheld", id).map((e) => e.reason);
    assert.equal(withheld[0], "no checkpoint has been recorded yet");
    assert.match(
      withheld[1] as string,
      /evidence of the last checkpoint does not exist: missing\.txt/,
    );
    // A path leading out of the cwd never enters the record.
    assert.deepEqual(h.of("goal_checkpoint", id)[0].evidence, ["missing.txt"]);
    for (const e of h.events.filter((e) => e.topic === "goal")) assert.equal(e.goalId, goalId);

    const prompts = await promptsOf(dir, "agent");
    assert.equal(prompts.length, 3);
    assert.match(prompts[0], /^Goal: write report\.txt/);
    assert.match(prompts[0], /Budget left: 5 turn\(s\)/);
    assert.match(prompts[1], /Continue working on the goal: write report\.txt/);
    assert.match(prompts[1], /No checkpoint recorded yet/);
    assert.match(prompts[2], /Last checkpoint: outline \(evidence: missing\.txt\)/);
    assert.match(prompts[2], /Budget left: 3 turn\(s\)/);
    // Continuation prompts are marked as the goal's in their new_message.
    const users = h.of("new_message", id).filter((e) => e.role === "user");
    assert.deepEqual(users.map((e) => e.goalId), [goalId, goalId, goalId]);

    const got = await h.api("GET", `/api/sessions/${id}/goal`);
    assert.equal(got.status, 200);
    assert.equal(got.json.status, "done");
    assert.equal(got.json.turns, 3);
    assert.equal(got.json.checkpoints.length, 2);
    assert.equal(got.json.checkpoints[1].summary, "report written");
    assert.equal(got.json.doneWithheld, undefined);
    assert.ok(got.json.finishedAt);
    // Done is final: no further prompt goes out.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await promptsOf(dir, "agent")).length, 3);
  });
});

Deno.test("goals: the pause gate, resume, and the agent's own cancel", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: {
        rules: [
          { match: "You asked to pause", replies: ["/goal pause still no credentials"] },
          { match: "^Goal: ", replies: ["/goal pause need credentials for the registry"] },
          {
            match: "^Continue",
            replies: ["Nothing to do here.\n/goal cancel the registry is gone"],
          },
        ],
      },
    });
    await using h = await serveAgents(config, `${dir}/data`);
    const id = await newSession(h);
    await h.api("POST", `/api/sessions/${id}/goal`, { objective: "publish the package" });
    const detected = await h.waitFor((e) => e.event === "goal_pause_detected");
    assert.equal(detected.reason, "still no credentials");
    const pending = h.of("goal_pause_gate_pending", id);
    assert.equal(pending.length, 1);
    assert.equal(pending[0].reason, "need credentials for the registry");
    let g = (await h.api("GET", `/api/sessions/${id}/goal`)).json;
    assert.equal(g.status, "paused");
    assert.equal(g.reason, "agent: still no credentials");
    assert.equal(g.pauseGatePending, false);
    assert.equal(g.turns, 2);

    const resumed = await h.api("POST", `/api/sessions/${id}/goal/resume`);
    assert.equal(resumed.status, 200);
    assert.equal(resumed.json.status, "active");
    const cancel = await h.waitFor((e) => e.event === "goal_cancel");
    assert.equal(cancel.by, "agent");
    assert.equal(cancel.reason, "the registry is gone");
    g = (await h.api("GET", `/api/sessions/${id}/goal`)).json;
    assert.equal(g.status, "cancelled");
    assert.deepEqual(goalEvents(h, id), [
      "goal_started",
      "goal_pause_gate_pending",
      "goal_continue",
      "goal_pause_detected",
      "goal_resumed",
      "goal_continue",
      "goal_cancel",
    ]);
    const prompts = await promptsOf(dir, "agent");
    assert.match(prompts[1], /You asked to pause \(need credentials for the registry\)/);
    assert.doesNotMatch(prompts[2], /You asked to pause/);
  });
});

Deno.test("goals: the budget pauses, resume raises it, the routes pause, check and cancel", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: { rules: [{ match: "", replies: ["Still working."] }] },
    }, { top: { goalDelaySeconds: 0.3 } });
    await using h = await serveAgents(config, `${dir}/data`);
    const id = await newSession(h);
    await h.api("POST", `/api/sessions/${id}/goal`, { objective: "refactor", maxTurns: 2 });
    const paused = await h.waitFor((e) => e.event === "goal_paused");
    assert.equal(paused.reason, "budget");
    assert.match(paused.detail as string, /2 of 2 turns used/);

    const early = await h.api("POST", `/api/sessions/${id}/goal/resume`);
    assert.equal(early.status, 409);
    assert.equal(early.json.error, "CONFLICT");
    assert.match(early.json.message, /budget is spent .*larger maxTurns or maxMinutes/);
    const more = await h.api("POST", `/api/sessions/${id}/goal/resume`, { maxTurns: 3 });
    assert.equal(more.status, 200);
    await h.waitFor((e) => e.event === "goal_paused" && e !== paused);
    assert.equal((await promptsOf(dir, "agent")).length, 3);

    // The user's checkpoint needs evidence inside the cwd; done by the user needs none.
    await Deno.writeTextFile(`${dir}/work/notes.md`, "x");
    const cp = await h.api("POST", `/api/sessions/${id}/goal/checkpoint`, {
      summary: "halfway",
      evidence: ["notes.md"],
    });
    assert.equal(cp.status, 200);
    assert.equal(cp.json.checkpoints.at(-1).by, "user");

    // Resumed, then paused by the user while the continuation waits: nothing more is sent.
    await h.api("POST", `/api/sessions/${id}/goal/resume`, { maxTurns: 10 });
    await h.waitFor((e) =>
      e.event === "new_message" && e.role === "assistant" &&
      h.of("new_message", id).filter((m) => m.role === "assistant").length >= 4
    );
    const byUser = await h.api("POST", `/api/sessions/${id}/goal/pause`);
    assert.equal(byUser.status, 200);
    assert.equal(byUser.json.reason, "user");
    const sent = (await promptsOf(dir, "agent")).length;
    await new Promise((r) => setTimeout(r, 600));
    assert.equal((await promptsOf(dir, "agent")).length, sent);

    // A session cancel while the next prompt waits pauses the goal too.
    await h.api("POST", `/api/sessions/${id}/goal/resume`);
    await h.waitFor(() =>
      h.of("new_message", id).filter((m) => m.role === "assistant").length >= 5
    );
    const sc = await h.api("POST", `/api/sessions/${id}/cancel`);
    assert.equal(sc.status, 202);
    assert.equal(h.of("goal_paused", id).at(-1)!.reason, "run_cancelled");

    const cancelled = await h.api("POST", `/api/sessions/${id}/goal/cancel`, { reason: "enough" });
    assert.equal(cancelled.status, 200);
    assert.equal(cancelled.json.status, "cancelled");
    assert.equal(h.of("goal_cancel", id)[0].by, "user");
    assert.equal(h.of("goal_cancel", id)[0].reason, "enough");
    const again = await h.api("POST", `/api/sessions/${id}/goal/cancel`);
    assert.equal(again.status, 409);
    assert.match(again.json.message, /already cancelled/);

    // A new goal may start once the last one ended; the user may mark it done.
    const second = await h.api("POST", `/api/sessions/${id}/goal`, { objective: "tidy up" });
    assert.equal(second.status, 201);
    const userDone = await h.api("POST", `/api/sessions/${id}/goal/done`);
    assert.equal(userDone.json.status, "done");
    assert.equal(h.of("goal_done", id).at(-1)!.by, "user");
  });
});

Deno.test("goals: an active goal goes on after a restart in the middle of a turn", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: {
        rules: [
          {
            match: "^Goal: ",
            replies: [{
              text: "Half.\n/goal checkpoint half [evidence: half.txt]",
              touch: ["half.txt"],
            }],
          },
          {
            match: "^Continue",
            replies: [
              { text: "working on the second half", hang: true },
              {
                text: "Finished.\n/goal checkpoint all [evidence: half.txt, all.txt]\n/goal done",
                touch: ["all.txt"],
              },
            ],
          },
        ],
      },
    });
    const data = `${dir}/data`;
    let id: string;
    let goalId: string;
    {
      await using h = await serveAgents(config, data);
      id = await newSession(h);
      goalId = (await h.api("POST", `/api/sessions/${id}/goal`, { objective: "both halves" }))
        .json.goalId;
      await h.waitFor((e) => e.event === "goal_continue");
      await h.waitFor((e) =>
        e.event === "agent_output" && e.sessionId === id && h.of("agent_output", id).length >= 3
      );
    }
    await using h = await serveAgents(config, data);
    const done = await h.waitFor((e) => e.event === "goal_done");
    assert.equal(done.goalId, goalId);
    const g = (await h.api("GET", `/api/sessions/${id}/goal`)).json;
    assert.equal(g.status, "done");
    assert.equal(g.turns, 2, "the interrupted turn is not counted");
    const prompts = await promptsOf(dir, "agent");
    assert.equal(prompts.length, 3);
    assert.match(prompts[2], /Last checkpoint: half \(evidence: half\.txt\)/);
    const history = (await h.api("GET", `/api/sessions/${id}`)).json.history;
    assert.ok(history.some((m: { error?: string }) => m.error === "interrupted by restart"));
  });
});

Deno.test("goals: bad input on every goal route is a 4xx with a clear message", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: { rules: [{ match: "", replies: [{ text: "slow", delayMs: 2000 }] }] },
    });
    await using h = await serveAgents(config, `${dir}/data`);
    const id = await newSession(h);
    const g = `/api/sessions/${id}/goal`;

    for (const path of ["goal", "goal/pause", "goal/resume", "goal/cancel", "goal/done"]) {
      const r = await h.api("POST", `/api/sessions/nope/${path}`, { objective: "x" });
      assert.equal(r.status, 404, path);
      assert.match(r.json.message, /no session nope/);
    }
    const none = await h.api("GET", g);
    assert.equal(none.status, 404);
    assert.match(none.json.message, /has no goal/);
    for (const path of ["pause", "resume", "cancel", "done"]) {
      const r = await h.api("POST", `${g}/${path}`);
      assert.equal(r.status, 404, path);
    }

    const refusals: [unknown, RegExp][] = [
      [{}, /objective/],
      [{ objective: "   " }, /objective: must not be empty/],
      [{ objective: "a\0b" }, /NUL/],
      [{ objective: "x", maxTurns: 0 }, /maxTurns/],
      [{ objective: "x", maxTurns: 1.5 }, /maxTurns/],
      [{ objective: "x", maxTurns: 201 }, /maxTurns/],
      [{ objective: "x", maxMinutes: -1 }, /maxMinutes/],
      [{ objective: "x", budget: 3 }, /budget/],
      ["{not json", /not valid JSON/],
      [[1, 2], /object/],
    ];
    for (const [body, re] of refusals) {
      const r = await h.api("POST", g, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error, "BAD_REQUEST");
      assert.match(r.json.message, re, JSON.stringify(body));
    }

    assert.equal((await h.api("POST", g, { objective: "first" })).status, 201);
    const second = await h.api("POST", g, { objective: "second" });
    assert.equal(second.status, 409);
    assert.match(second.json.message, /already has a goal that is active/);
    const resume = await h.api("POST", `${g}/resume`);
    assert.equal(resume.status, 409);
    assert.match(resume.json.message, /not paused/);

    const cps: [unknown, RegExp][] = [
      [{ summary: "x", evidence: ["../outside.txt"] }, /outside the session's cwd/],
      [{ summary: "x", evidence: ["/etc/passwd"] }, /outside the session's cwd/],
      [{ summary: "" }, /summary: must not be empty/],
      [{ summary: "x", evidence: "a.txt" }, /evidence/],
      [{ summary: "x", extra: 1 }, /extra/],
    ];
    for (const [body, re] of cps) {
      const r = await h.api("POST", `${g}/checkpoint`, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.json.message, re, JSON.stringify(body));
    }
    const badResume = await h.api("POST", `${g}/pause`);
    assert.equal(badResume.status, 200);
    const r = await h.api("POST", `${g}/resume`, { maxTurns: "ten" });
    assert.equal(r.status, 400);
    assert.match(r.json.message, /maxTurns/);
    const pauseAgain = await h.api("POST", `${g}/pause`);
    assert.equal(pauseAgain.status, 409);
    assert.match(pauseAgain.json.message, /not active/);
    assert.equal((await h.api("POST", `${g}/cancel`, { reason: 5 })).status, 400);
  });
});

Deno.test("goals: an agent that quotes the prompt back triggers no directive", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: { rules: [{ match: "([\\s\\S]*)", replies: ["You said:\n$1"] }] },
    });
    await using h = await serveAgents(config, `${dir}/data`);
    const id = await newSession(h);
    await h.api("POST", `/api/sessions/${id}/goal`, { objective: "echo", maxTurns: 2 });
    const paused = await h.waitFor((e) => e.event === "goal_paused");
    assert.equal(paused.reason, "budget");
    assert.deepEqual(goalEvents(h, id), ["goal_started", "goal_continue", "goal_paused"]);
  });
});

Deno.test("goals, orchestration and memory events reach an eventsource client", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: {
        rules: [
          { match: "numbered list", replies: ["1. write a.txt"] },
          { match: "Answer PASS", replies: ["PASS"] },
          { match: "Your step", replies: [{ text: "wrote a.txt", touch: ["a.txt"] }] },
          {
            match: "^Goal: ",
            replies: [{
              text: "/goal checkpoint a [evidence: a.txt]\n/goal done",
              touch: ["a.txt"],
            }],
          },
        ],
      },
    });
    await using h = await serveAgents(config, `${dir}/data`, { watchMemory: false });
    const seen: Record<string, unknown>[] = [];
    const es = new EventSource(`${h.url}/api/events`);
    try {
      const want = ["goal_done", "orchestrate_done", "memory_status"];
      const all = new Promise<void>((resolve, reject) => {
        es.onerror = (e) => reject(new Error(`eventsource error: ${e.message}`));
        es.onmessage = (m) => {
          const data = JSON.parse(m.data);
          if (data.topic === "system") return;
          seen.push(data);
          if (want.every((w) => seen.some((e) => e.event === w))) resolve();
        };
      });
      await new Promise<void>((resolve) => (es.onopen = () => resolve()));
      const goalSession = await newSession(h);
      assert.equal(
        (await h.api("POST", `/api/sessions/${goalSession}/goal`, { objective: "a" })).status,
        201,
      );
      const parent = await newSession(h);
      assert.equal(
        (await h.api("POST", `/api/sessions/${parent}/orchestrate`, { task: "a", maxRounds: 1 }))
          .status,
        202,
      );
      assert.equal((await h.api("PUT", "/api/memory/a", { text: "a" })).status, 201);
      await all;
    } finally {
      es.close();
    }
    const names = seen.map((e) => e.event);
    for (
      const e of ["goal_started", "goal_checkpoint", "goal_done", "orc_state", "orchestrate_done"]
    ) {
      assert.ok(names.includes(e), `${e} in ${names.join(" ")}`);
    }
    assert.ok(seen.some((e) => e.event === "agent_status" && e.status === "evaluating"));
    assert.deepEqual(
      seen.filter((e) => e.event === "orc_state").map((e) => e.state)
        .filter((s, i, a) => i === 0 || s !== a[i - 1]),
      ["plan", "build", "check", "done"],
    );
    const mem = seen.find((e) => e.event === "memory_status")!;
    assert.deepEqual([mem.topic, mem.reason, mem.files, mem.indexed], ["memory", "saved", 1, 1]);
  });
});
