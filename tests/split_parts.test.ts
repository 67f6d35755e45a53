/**
 * The pure parts lifted out of the agents' and MCP closures (issue 33), each on its own: the words
 * and the `<memory>` block of memory search, the names MCP tools are offered under, the goal's
 * clock and budget, and the orchestration record as stored and as shown.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { budgetLeft, goalJson, type GoalRow, spent, stopClock } from "../lib/agents/goals_store.ts";
import { matchQuery, queryWords, relevantBlock, snippetOf } from "../lib/agents/memory_text.ts";
import { openRunTable, type Rec, toJson } from "../lib/agents/orchestrate_store.ts";
import { exposeTools } from "../lib/mcp/tool_names.ts";

Deno.test("memory words: a prompt drops filler, a search keeps every word, quoted for FTS5", () => {
  assert.deepEqual(queryWords("How do I deploy the site?", true), ["deploy", "site"]);
  assert.deepEqual(queryWords("How do I deploy", false), ["how", "do", "i", "deploy"]);
  assert.equal(matchQuery(['a"b', "c"]), '"a"b" OR "c"');
  assert.equal(
    snippetOf("Run make deploy from the repo root.", ["deploy"]),
    "Run make deploy from the repo root.",
  );
});

Deno.test("memory block: whole notes while they fit, then a cut one, bodies read only when reached", () => {
  const read: string[] = [];
  const note = (name: string, body: string) => ({
    name,
    body: () => {
      read.push(name);
      return body;
    },
  });
  const block = relevantBlock(
    [note("a", "x".repeat(100)), note("b", "y ".repeat(400)), note("c", "z")],
    400,
  );
  assert.match(block, /^<memory>\n/);
  assert.match(block, /## a\nx{100}\n\n## b\ny /);
  assert.ok(block.endsWith("…\n</memory>\n\n"));
  assert.ok(block.length <= 400, `${block.length} chars`);
  assert.deepEqual(read, ["a", "b"]);
  assert.equal(relevantBlock([note("d", "w".repeat(1000))], 100), "");
});

Deno.test("MCP tool names: another server's names are taken, schemas become object schemas", () => {
  const taken = new Set(["calc_add"]);
  const tools = exposeTools("calc", [
    { name: "add", inputSchema: { properties: { a: {} } } },
    { name: "" },
    { name: "add" },
    { name: "mul", description: "times", inputSchema: null },
  ], taken);
  assert.deepEqual(tools.map((t) => t.name), ["calc_add_2", "calc_add_3", "calc_mul"]);
  assert.deepEqual(tools[0].inputSchema, { properties: { a: {} }, type: "object" });
  assert.deepEqual(tools[2], {
    server: "calc",
    name: "calc_mul",
    toolName: "mul",
    description: "times",
    inputSchema: { type: "object" },
  });
  assert.ok(taken.has("calc_mul"));
});

Deno.test("goal clock: only active time counts, and either budget spends the goal", () => {
  let t = 1_000_000;
  const now = () => t;
  const g: GoalRow = {
    id: "g",
    sessionId: "s",
    objective: "o",
    status: "active",
    reason: null,
    maxTurns: 3,
    maxMinutes: 2,
    turns: 1,
    activeMs: 30_000,
    activeSince: t,
    gate: null,
    withheld: null,
    failures: 0,
    checkpoints: [],
    createdAt: t,
    updatedAt: t,
    finishedAt: null,
  };
  t += 30_000;
  assert.deepEqual(budgetLeft(g, now), { turns: 2, minutes: 1 });
  assert.equal(goalJson(g, now).minutesUsed, 1);
  stopClock(g, now);
  t += 10 * 60_000; // paused: the clock does not run
  assert.equal(goalJson(g, now).minutesUsed, 1);
  assert.equal(spent(g, now), false);
  g.turns = 3;
  assert.equal(spent(g, now), true);
  assert.equal(goalJson(g, now).pauseGatePending, false);
});

Deno.test("orchestration record: stored with what a resume needs, shown without it", () => {
  const db = new DatabaseSync(":memory:");
  const table = openRunTable(db);
  const rec: Rec = {
    runId: "r1",
    sessionId: "s1",
    task: "t",
    state: "build",
    round: 1,
    maxRounds: 3,
    planner: "a",
    workers: ["a"],
    checker: "a",
    steps: [{
      n: 1,
      text: "x",
      agent: "a",
      round: 1,
      status: "pending",
      tried: ["b"],
      retried: true,
    }],
    createdAt: new Date(0).toISOString(),
    updatedAt: new Date(0).toISOString(),
    cwd: "/tmp",
  };
  table.write(rec);
  assert.deepEqual(table.one("r1"), rec);
  assert.deepEqual([...table.unfinished()].map((r) => r.runId), ["r1"]);
  assert.deepEqual(table.bySession("s2"), []);
  const shown = toJson(rec);
  assert.equal("cwd" in shown, false);
  assert.deepEqual(shown.steps[0], { n: 1, text: "x", agent: "a", round: 1, status: "pending" });
  table.write({ ...rec, state: "done" });
  assert.deepEqual([...table.unfinished()], []);
  db.close();
});
