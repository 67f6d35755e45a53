/**
 * The per-provider stdout adapters against recorded transcripts (tests/fixtures/agents/
 * transcripts): what each line means in public events, that text is never shown twice, that every
 * tool step runs then finishes under one stepRef, and that garbage cannot break a parser.
 */

import assert from "node:assert/strict";
import { adapterFor, ADAPTERS } from "../lib/agents/adapters/mod.ts";
import {
  classifyError,
  DETAIL_MAX,
  toolLabel,
  toolTypeFor,
  TRACE_LINE_MAX,
  truncate,
} from "../lib/agents/adapters/common.ts";
import { unwrapShell } from "../lib/agents/adapters/codex.ts";
import { type AgentEmit, type Provider, PROVIDERS } from "../lib/agents/types.ts";

type ToolEmit = Extract<AgentEmit, { kind: "tool" }>;
type FinalEmit = Extract<AgentEmit, { kind: "final" }>;

const dir = new URL("./fixtures/agents/transcripts/", import.meta.url);

const TRANSCRIPTS: Record<string, Provider> = {
  "claude-basic.jsonl": "claude",
  "claude-subagent.jsonl": "claude",
  "claude-error.jsonl": "claude",
  "codex-basic.jsonl": "codex",
  "codex-failed.jsonl": "codex",
  "gemini-basic.jsonl": "gemini",
  "gemini-error.jsonl": "gemini",
  "opencode-basic.jsonl": "opencode",
  "jsonl-basic.jsonl": "jsonl",
};

function transcript(name: string): string[] {
  const text = Deno.readTextFileSync(new URL(name, dir));
  assert.ok(text.endsWith("\n"), `${name} ends with a newline`);
  return text.slice(0, -1).split("\n");
}

function replay(provider: Provider, lines: string[]): AgentEmit[] {
  const parse = adapterFor(provider).createParser();
  return lines.flatMap((line) => {
    const out = parse(line);
    assert.ok(out.length > 0, `every line yields at least one emit: ${line.slice(0, 80)}`);
    return out;
  });
}

const publicOnly = (emits: AgentEmit[]) => emits.filter((e) => e.kind !== "trace");
const outputText = (emits: AgentEmit[]) =>
  emits.flatMap((e) => e.kind === "output" ? [e.text] : []).join("");
const tools = (emits: AgentEmit[]) => emits.filter((e): e is ToolEmit => e.kind === "tool");
const finals = (emits: AgentEmit[]) => emits.filter((e): e is FinalEmit => e.kind === "final");
const traces = (emits: AgentEmit[]) =>
  emits.filter((e): e is Extract<AgentEmit, { kind: "trace" }> => e.kind === "trace");

function onlyFinal(emits: AgentEmit[]): FinalEmit {
  const f = finals(emits);
  assert.equal(f.length, 1, "exactly one final");
  return f[0];
}

/** Public emits as short signatures, consecutive repeats (running updates, deltas) collapsed. */
function signature(emits: AgentEmit[]): string[] {
  const sigs = publicOnly(emits).map((e) => {
    switch (e.kind) {
      case "session":
        return `session ${e.id}`;
      case "output":
        return "output";
      case "tool":
        return `${e.toolType} ${e.stepRef} ${e.status}`;
      case "final":
        return e.error === undefined ? "final" : `final error ${e.errorKind}`;
      case "status":
        return `status ${e.status}`;
    }
  });
  return sigs.filter((s, i) => i === 0 || s !== sigs[i - 1]);
}

/**
 * Every step: first emit `running`, last emit `done|error`, nothing after it, one tool type.
 * Returns the emits of each step.
 */
function assertSteps(emits: AgentEmit[]): Map<string, ToolEmit[]> {
  const byRef = new Map<string, ToolEmit[]>();
  for (const t of tools(emits)) {
    const list = byRef.get(t.stepRef) ?? [];
    list.push(t);
    byRef.set(t.stepRef, list);
  }
  for (const [ref, list] of byRef) {
    assert.equal(list[0].status, "running", `${ref} starts running`);
    const last = list[list.length - 1];
    assert.ok(last.status === "done" || last.status === "error", `${ref} finishes`);
    assert.ok(list.slice(0, -1).every((t) => t.status === "running"), `${ref}: one terminal emit`);
    assert.ok(list.every((t) => t.toolType === list[0].toolType), `${ref}: one tool type`);
    for (const t of list) {
      assert.ok(t.label.length > 0 && t.label.length <= 200, `${ref}: short label`);
      assert.ok((t.detail ?? "").length <= DETAIL_MAX, `${ref}: bounded detail`);
    }
  }
  return byRef;
}

const last = <T>(list: T[]): T => list[list.length - 1];

Deno.test("transcripts: one JSON object per line, every line parsed, steps well formed, one final", () => {
  for (const [name, provider] of Object.entries(TRANSCRIPTS)) {
    const lines = transcript(name);
    for (const line of lines) {
      const v = JSON.parse(line);
      assert.ok(typeof v === "object" && v !== null && !Array.isArray(v), `${name}: object line`);
    }
    const emits = replay(provider, lines);
    assertSteps(emits);
    const pub = publicOnly(emits);
    assert.equal(last(pub).kind, "final", `${name}: the final is the last public emit`);
    onlyFinal(emits);
    assert.equal(pub.filter((e) => e.kind === "session").length, 1, `${name}: one session`);
  }
});

// ---------------------------------------------------------------------------------------- claude

const CLAUDE_SESSION = "9b2f4c1e-6d3a-4f57-8e21-0c7a5d9b3e41";
const CLAUDE_MSG1 = "msg_01HqY7rW3kTz8bN5cVdE2fGa";
const CLAUDE_BASH = "claude:tooluse:toolu_01Bq8XnJ4mR2vK7wYzP3sLdT";
const CLAUDE_READ = "claude:tooluse:toolu_01Xf5GhT2kLp9wQ4rNz7mVcE";
const CLAUDE_TEXT1 = "I'll run the test suite first to see what fails.";
const CLAUDE_FINAL =
  "`reserve` never checks the available quantity, so an overdraw goes negative " +
  'instead of throwing. Add a guard: `if (have < n) throw new RangeError("insufficient stock")` ' +
  "before `stock.set`.";

Deno.test("claude: basic transcript maps to session, thinking, output, Bash and Read steps, final", () => {
  const emits = replay("claude", transcript("claude-basic.jsonl"));
  assert.deepEqual(signature(emits), [
    `session ${CLAUDE_SESSION}`,
    `thinking claude:thinking:${CLAUDE_MSG1}:0 running`,
    `thinking claude:thinking:${CLAUDE_MSG1}:0 done`,
    "output",
    `command ${CLAUDE_BASH} running`,
    `command ${CLAUDE_BASH} error`,
    `tool ${CLAUDE_READ} running`,
    `tool ${CLAUDE_READ} done`,
    "output",
    "final",
  ]);
  // Deltas and the duplicating full messages: every text exactly once, messages apart.
  assert.equal(outputText(emits), `${CLAUDE_TEXT1}\n\n${CLAUDE_FINAL}`);
  assert.deepEqual(onlyFinal(emits), { kind: "final", text: CLAUDE_FINAL });

  const steps = assertSteps(emits);
  const thinking = last(steps.get(`claude:thinking:${CLAUDE_MSG1}:0`)!);
  assert.equal(
    thinking.detail,
    "The user wants to know why the stock test fails. I should run the test suite first and then " +
      "read the failing module.",
  );
  const bash = steps.get(CLAUDE_BASH)!;
  assert.equal(bash[0].label, "Bash"); // the block start, before its input streamed in
  assert.equal(last(bash).label, "Bash: deno test tests/stock_test.ts");
  assert.match(last(bash).detail!, /reserve rejects overdraw \.\.\. FAILED/);
  assert.ok(bash.some((t) => t.detail?.includes('"description":"Run the stock tests"')));
  assert.equal(last(steps.get(CLAUDE_READ)!).label, "Read: /home/dev/inventory-api/src/stock.ts");
  assert.match(last(steps.get(CLAUDE_READ)!).detail!, /stock\.set\(sku, have - n\)/);
});

Deno.test("claude: the same run without partial messages gives the same output and steps", () => {
  const lines = transcript("claude-basic.jsonl");
  const full = replay("claude", lines);
  const plain = replay("claude", lines.filter((l) => JSON.parse(l).type !== "stream_event"));
  assert.equal(outputText(plain), outputText(full));
  assert.deepEqual(finals(plain), finals(full));
  const terminal = (emits: AgentEmit[]) =>
    [...assertSteps(emits)].map(([ref, list]) => [ref, last(list).status, last(list).label]);
  assert.deepEqual(terminal(plain), terminal(full));
});

const se = (event: unknown) =>
  JSON.stringify({ type: "stream_event", event, parent_tool_use_id: null });
const start = (id: string) => se({ type: "message_start", message: { id, content: [] } });
const textStart = (index: number) =>
  se({ type: "content_block_start", index, content_block: { type: "text", text: "" } });
const delta = (index: number, text: string) =>
  se({ type: "content_block_delta", index, delta: { type: "text_delta", text } });
const assistant = (id: string, content: unknown[]) =>
  JSON.stringify({
    type: "assistant",
    message: { id, role: "assistant", content },
    parent_tool_use_id: null,
  });
const text = (t: string) => ({ type: "text", text: t });

Deno.test("claude: a full message only adds the text its deltas did not cover", () => {
  const emits = replay("claude", [
    start("m1"),
    textStart(0),
    delta(0, "Hello"),
    assistant("m1", [text("Hello world")]), // the last delta was lost
    delta(0, " world"), // ...or arrives late: already shown
  ]);
  assert.deepEqual(publicOnly(emits), [
    { kind: "output", text: "Hello" },
    { kind: "output", text: " world" },
  ]);
});

Deno.test("claude: a full message before its deltas is not repeated by them", () => {
  const emits = replay("claude", [
    start("m1"),
    assistant("m1", [text("Hi there")]),
    textStart(0),
    delta(0, "Hi"),
    delta(0, " there"),
    delta(0, "!"),
  ]);
  assert.equal(outputText(emits), "Hi there!");
});

Deno.test("claude: cumulative snapshots, split blocks and separate messages", () => {
  const tool = { type: "tool_use", id: "toolu_1", name: "Glob", input: { pattern: "**/*.ts" } };
  const emits = replay("claude", [
    assistant("m1", [text("First.")]),
    assistant("m1", [text("First."), tool]), // a snapshot repeating the text block
    assistant("m1", [text("Second block.")]), // the next block of the same message
    assistant("m2", [text("Other message.")]),
  ]);
  assert.equal(outputText(emits), "First.\n\nSecond block.\n\nOther message.");
  assert.deepEqual(tools(emits)[0], {
    kind: "tool",
    toolType: "tool",
    label: "Glob: **/*.ts",
    detail: '{"pattern":"**/*.ts"}',
    stepRef: "claude:tooluse:toolu_1",
    status: "running",
  });
});

Deno.test("claude: subagent text goes to the Task step, never to the main output", () => {
  const emits = replay("claude", transcript("claude-subagent.jsonl"));
  const task = "claude:tooluse:toolu_01Pz6KcR3wYv8nXq2TmJ5sHd";
  const grep = "claude:tooluse:toolu_01Hc4NwT8rYz2kVp6XqL3sGb";
  const read = "claude:tooluse:toolu_01Nd7QpV4sXc9wLm3RkT6zYe";
  const finalText = "Sessions are validated in `verifySession` (src/auth/session.ts); the " +
    "`requireAuth` middleware calls it for every protected route.";
  assert.deepEqual(signature(emits), [
    "session 1e7d0b52-3f8a-4c61-a9d4-7b2e5f0c8a13",
    "output",
    `subagent ${task} running`,
    `tool ${grep} running`,
    `tool ${grep} done`,
    `tool ${read} running`,
    `tool ${read} done`,
    `subagent ${task} running`,
    `subagent ${task} done`,
    "output",
    "final",
  ]);
  const output = outputText(emits);
  assert.equal(output, `I'll ask a subagent to find where sessions are validated.\n\n${finalText}`);
  assert.ok(!output.includes("Searching for token checks"));
  assert.ok(!output.includes("verifySession` in src/auth/session.ts, called from"));
  assert.equal(onlyFinal(emits).text, finalText);

  const steps = assertSteps(emits);
  const taskSteps = steps.get(task)!;
  assert.ok(taskSteps.every((t) => t.toolType === "subagent"));
  assert.equal(last(taskSteps).label, "Task: Find session validation");
  const details = taskSteps.map((t) => t.detail);
  assert.ok(details.includes("Searching for token checks."), "subagent text as Task detail");
  assert.match(last(taskSteps).detail!, /^Session tokens are validated by `verifySession`/);
  assert.equal(last(steps.get(grep)!).label, "Grep: verifySession|validateToken");
  assert.ok(traces(emits).some((t) => t.reason === "subagent stream event"));
});

Deno.test("claude: a rate-limited run ends with a rate_limit error and no output", () => {
  const emits = replay("claude", transcript("claude-error.jsonl"));
  assert.deepEqual(signature(emits), [
    "session 5c0e9a77-8b1d-4e2f-b6a3-2d4f7c1e9b08",
    "status running", // each api_retry
    "final error rate_limit",
  ]);
  assert.equal(publicOnly(emits).filter((e) => e.kind === "status").length, 2);
  assert.equal(outputText(emits), "");
  const final = onlyFinal(emits);
  assert.equal(final.text, "");
  assert.equal(final.errorKind, "rate_limit");
  assert.match(final.error!, /^API Error: 429 .*rate_limit_error/);
});

Deno.test("claude: error subtypes, auth errors from the assistant message, unknown tool results", () => {
  const maxTurns = replay("claude", [
    assistant("m1", [text("Working on it.")]),
    JSON.stringify({
      type: "result",
      subtype: "error_max_turns",
      is_error: true,
      session_id: "s1",
      errors: ["Reached maximum number of turns (3)"],
    }),
  ]);
  assert.deepEqual(last(maxTurns), {
    kind: "final",
    text: "Working on it.",
    error: "Reached maximum number of turns (3)",
    errorKind: "agent",
  });
  assert.deepEqual(maxTurns.find((e) => e.kind === "session"), { kind: "session", id: "s1" });

  const bare = replay("claude", [JSON.stringify({ type: "result", result: "done" })]);
  assert.deepEqual(bare, [{ kind: "final", text: "done" }]); // the example of lib/agents/types.ts
  const noFlag = replay("claude", [
    JSON.stringify({ type: "result", subtype: "error_during_execution" }),
  ]);
  assert.equal(onlyFinal(noFlag).error, "error_during_execution");

  const auth = replay("claude", [
    JSON.stringify({
      type: "assistant",
      message: { id: "x", model: "<synthetic>", content: [text("Invalid bearer token")] },
      error: "authentication_failed",
    }),
    JSON.stringify({
      type: "result",
      subtype: "success",
      is_error: true,
      result: "Invalid bearer token",
    }),
  ]);
  assert.equal(outputText(auth), "");
  assert.equal(onlyFinal(auth).errorKind, "auth");

  const orphan = replay("claude", [
    JSON.stringify({
      type: "user",
      message: { content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "ok" }] },
    }),
  ]);
  assertSteps(orphan);
  assert.deepEqual(signature(orphan), [
    "tool claude:tooluse:toolu_x running",
    "tool claude:tooluse:toolu_x done",
  ]);
});

// ----------------------------------------------------------------------------------------- codex

Deno.test("codex: every item type of the basic transcript", () => {
  const emits = replay("codex", transcript("codex-basic.jsonl"));
  const ref = (n: number) => `codex:item:item_${n}`;
  assert.deepEqual(signature(emits), [
    "session 0199a213-81c0-7800-8aa1-bbab2a035a53",
    `thinking ${ref(0)} running`,
    `thinking ${ref(0)} done`,
    "output",
    `command ${ref(2)} running`,
    `command ${ref(2)} error`,
    `tool ${ref(3)} running`,
    `tool ${ref(4)} running`,
    `tool ${ref(4)} done`,
    `search ${ref(5)} running`,
    `search ${ref(5)} done`,
    `tool ${ref(6)} running`,
    `tool ${ref(6)} done`,
    `tool ${ref(3)} running`,
    `command ${ref(7)} running`,
    `command ${ref(7)} done`,
    `tool ${ref(3)} done`,
    "output",
    "final",
  ]);
  const finalText =
    "Fixed `parseDate`: ISO week dates (`2025-W01-1`) now resolve to the Monday of " +
    "that week, counting week 1 as the week with the year's first Thursday. All 12 date tests pass.";
  assert.equal(
    outputText(emits),
    `I'll reproduce the failure before changing anything.\n\n${finalText}`,
  );
  assert.deepEqual(onlyFinal(emits), { kind: "final", text: finalText });

  const steps = assertSteps(emits);
  const at = (n: number) => last(steps.get(ref(n))!);
  assert.equal(at(0).label, "Thinking: Locating the failing test");
  assert.equal(at(2).label, "Shell: npm test -- dates");
  assert.match(at(2).detail!, /Tests {2}1 failed \| 11 passed[\s\S]*\[exit code 1\]$/);
  assert.equal(at(7).status, "done");
  assert.ok(!at(7).detail!.includes("exit code"));
  assert.equal(at(3).label, "Todo (3/3)");
  assert.equal(
    at(3).detail,
    "[x] Reproduce the failing test\n[x] Fix the parser\n[x] Re-run the suite",
  );
  assert.deepEqual(steps.get(ref(3))!.map((t) => t.label), [
    "Todo (0/3)",
    "Todo (1/3)",
    "Todo (2/3)",
    "Todo (3/3)",
  ]);
  assert.equal(at(4).label, "docs.search_docs: ISO 8601 week date format");
  assert.match(at(4).detail!, /^A week date is written YYYY-Www-D/);
  assert.equal(at(5).label, "Search: ISO week date 2025-W01-1 calendar date");
  assert.equal(steps.get(ref(5))![0].label, "Search");
  assert.equal(at(6).label, "Edit: src/dates.ts, test/dates.test.ts");
  assert.equal(at(6).detail, "update src/dates.ts\nupdate test/dates.test.ts");
});

Deno.test("codex: a failed turn ends with the classified error", () => {
  const emits = replay("codex", transcript("codex-failed.jsonl"));
  assert.deepEqual(signature(emits), [
    "session 0199b7f4-2c15-7d31-9e60-4a8f3c2b1d07",
    "thinking codex:item:item_0 running",
    "thinking codex:item:item_0 done",
    "status running",
    "final error rate_limit",
  ]);
  assert.deepEqual(onlyFinal(emits), {
    kind: "final",
    text: "",
    error: "exceeded retry limit, last status: 429 Too Many Requests",
    errorKind: "rate_limit",
  });
});

Deno.test("codex: message updates, declined commands, failed MCP calls, collab agents, plans", () => {
  const item = (type: string, item: Record<string, unknown>) => JSON.stringify({ type, item });
  const emits = replay("codex", [
    item("item.updated", { id: "m", type: "agent_message", text: "Partial" }),
    item("item.completed", { id: "m", type: "agent_message", text: "Partial answer." }),
    item("item.completed", {
      id: "c",
      type: "command_execution",
      command: '/bin/zsh -lc "rm -rf build"',
      aggregated_output: "",
      exit_code: null,
      status: "declined",
    }),
    item("item.started", {
      id: "p",
      type: "mcp_tool_call",
      server: "gh",
      tool: "create_issue",
      arguments: { title: "x" },
      status: "in_progress",
    }),
    item("item.completed", {
      id: "p",
      type: "mcp_tool_call",
      server: "gh",
      tool: "create_issue",
      arguments: { title: "x" },
      error: { message: "401 Bad credentials" },
      status: "failed",
    }),
    item("item.started", {
      id: "a",
      type: "collab_tool_call",
      tool: "spawn_agent",
      prompt: "Write the tests",
      status: "in_progress",
    }),
    item("item.completed", {
      id: "a",
      type: "collab_tool_call",
      tool: "spawn_agent",
      prompt: "Write the tests",
      status: "completed",
    }),
    item("item.completed", { id: "w", type: "error", message: "model rerouted" }),
    item("item.completed", { id: "m", type: "agent_message", text: "Partial answer." }),
    JSON.stringify({
      type: "turn.completed",
      usage: { input_tokens: 1, cached_input_tokens: 0, output_tokens: 1 },
    }),
  ]);
  assert.deepEqual(emits.filter((e) => e.kind === "output"), [
    { kind: "output", text: "Partial" },
    { kind: "output", text: " answer." },
  ]);
  const steps = assertSteps(emits);
  assert.equal(last(steps.get("codex:item:c")!).status, "error");
  assert.equal(last(steps.get("codex:item:c")!).label, "Shell: rm -rf build");
  assert.equal(last(steps.get("codex:item:p")!).detail, "401 Bad credentials");
  assert.equal(last(steps.get("codex:item:p")!).status, "error");
  assert.equal(last(steps.get("codex:item:a")!).toolType, "subagent");
  assert.ok(traces(emits).some((t) => t.reason.startsWith("codex warning")));
  assert.equal(onlyFinal(emits).text, "Partial answer.");

  const planOnly = replay("codex", [
    item("item.completed", { id: "pl", type: "plan", text: "1. Do it" }),
    JSON.stringify({ type: "turn.completed", usage: {} }),
  ]);
  assert.equal(onlyFinal(planOnly).text, "1. Do it");
});

Deno.test("codex: shell wrappers are stripped from labels", () => {
  assert.equal(unwrapShell("bash -lc 'ls -la'"), "ls -la");
  assert.equal(unwrapShell('/bin/bash -lc "git status"'), "git status");
  assert.equal(unwrapShell("sh -c make"), "make");
  assert.equal(unwrapShell("python3 run.py"), "python3 run.py");
});

// ---------------------------------------------------------------------------------------- gemini

Deno.test("gemini: basic transcript, output equals the final text", () => {
  const emits = replay("gemini", transcript("gemini-basic.jsonl"));
  const read = "gemini:toolid:read_file-1761038042500-7c1e2a";
  const shell = "gemini:toolid:run_shell_command-1761038044120-a93f0d";
  const search = "gemini:toolid:google_web_search-1761038047010-5b2c88";
  assert.deepEqual(signature(emits), [
    "session c6b1f3a2-7d4e-4b0a-9f85-31e2d6a7c904",
    "output",
    `tool ${read} running`,
    `tool ${read} done`,
    `command ${shell} running`,
    `command ${shell} done`,
    `search ${search} running`,
    `search ${search} error`,
    "output",
    "final",
  ]);
  const expected = "Let me look at the export code first.\n\nThe loop in `export` stops at " +
    "`len(rows) - 1`, so the last row is never written. Iterate over all rows (or call " +
    "`writer.writerows(rows)`).";
  assert.equal(outputText(emits), expected);
  assert.deepEqual(onlyFinal(emits), { kind: "final", text: expected });
  const steps = assertSteps(emits);
  assert.equal(last(steps.get(read)!).label, "read_file: /home/dev/reports/src/export.py");
  assert.equal(
    last(steps.get(shell)!).label,
    "run_shell_command: python -m pytest tests/test_export.py -q",
  );
  assert.equal(
    last(steps.get(search)!).detail,
    "Web search failed: quota for grounding requests exceeded",
  );
  assert.ok(traces(emits).some((t) => t.reason === "user message"));
});

Deno.test("gemini: a whole assistant message after its deltas is not shown again", () => {
  const msg = (content: string, delta?: boolean) =>
    JSON.stringify({ type: "message", role: "assistant", content, ...(delta ? { delta } : {}) });
  const emits = replay("gemini", [
    msg("Hello", true),
    msg(" there", true),
    msg("Hello there"), // the same text again, whole
    msg("Hello there, friend"), // an extension of it
    JSON.stringify({ type: "result", status: "success", stats: {} }),
  ]);
  assert.equal(outputText(emits), "Hello there, friend");
  assert.equal(onlyFinal(emits).text, "Hello there, friend");
});

Deno.test("gemini: an API failure ends with a connection error, warnings are traced", () => {
  const emits = replay("gemini", transcript("gemini-error.jsonl"));
  assert.deepEqual(signature(emits), [
    "session f02a9c41-5e3b-4d7f-8a16-9b4c2e7d0a58",
    "final error connection",
  ]);
  assert.match(onlyFinal(emits).error!, /read ECONNRESET/);
  assert.ok(traces(emits).some((t) => t.reason.startsWith("gemini warning: Retrying")));
});

// -------------------------------------------------------------------------------------- opencode

Deno.test("opencode: basic transcript, final text from the last step, done after final traced", () => {
  const emits = replay("opencode", transcript("opencode-basic.jsonl"));
  const p = (id: string) => `opencode:part:${id}`;
  const bash = p("prt_a0d62c3e5003O5p6Q7r8S9t0U1");
  const read = p("prt_a0d62c3e5004V2w3X4y5Z6a7B8");
  const edit1 = p("prt_a0d62c3e5005C9d0E1f2G3h4I5");
  const edit2 = p("prt_a0d62e91b002X0y1Z2a3B4c5D6");
  assert.deepEqual(signature(emits), [
    "session ses_5f2a9d3c1ffeK8vQ2mXr7TnWpL",
    "output",
    `command ${bash} running`,
    `command ${bash} done`,
    `tool ${read} running`,
    `tool ${read} done`,
    `tool ${edit1} running`,
    `tool ${edit1} error`,
    `tool ${edit2} running`,
    `tool ${edit2} done`,
    "output",
    "final",
  ]);
  const finalText = "`load` now falls back to port 8080 when `PORT` is unset, which is what the " +
    "failing test expected.";
  assert.equal(outputText(emits), `I'll check the config loader and its test.\n\n${finalText}`);
  assert.deepEqual(onlyFinal(emits), { kind: "final", text: finalText });
  const steps = assertSteps(emits);
  assert.equal(last(steps.get(bash)!).label, "bash: ls src test");
  assert.equal(last(steps.get(read)!).label, "read: /home/dev/svc/src/config.ts");
  assert.match(last(steps.get(edit1)!).detail!, /modified since it was last read/);
  assert.match(last(steps.get(edit2)!).detail!, /^@@ -2 \+2 @@/);
  assert.equal(last(traces(emits)).reason, "after the final event");
});

Deno.test("opencode: without step_finish the done event ends the run; errors end it too", () => {
  const ev = (type: string, rest: Record<string, unknown>) =>
    JSON.stringify({ type, timestamp: 1, sessionID: "ses_1", ...rest });
  const textPart = (id: string, t: string) => ({
    id,
    type: "text",
    text: t,
    time: { start: 0, end: 1 },
  });
  const done = replay("opencode", [
    ev("text", { part: textPart("a", "Answer.") }),
    ev("done", { reason: "idle", rejected: [] }),
  ]);
  assert.deepEqual(publicOnly(done), [
    { kind: "session", id: "ses_1" },
    { kind: "output", text: "Answer." },
    { kind: "final", text: "Answer." },
  ]);

  const failed = replay("opencode", [
    ev("step_start", { part: { id: "s", type: "step-start" } }),
    ev("error", {
      error: {
        name: "ProviderAuthError",
        data: { providerID: "anthropic", message: "Invalid API key" },
      },
    }),
    ev("done", { reason: "idle", rejected: [] }),
  ]);
  const final = onlyFinal(failed);
  assert.equal(final.errorKind, "auth");
  assert.equal(final.error, "Invalid API key");

  const limited = replay("opencode", [
    ev("error", {
      error: {
        name: "APIError",
        data: { message: "Too many tokens", statusCode: 429, isRetryable: true },
      },
    }),
  ]);
  assert.equal(onlyFinal(limited).errorKind, "rate_limit");
});

// ----------------------------------------------------------------------------------------- jsonl

Deno.test("jsonl: basic transcript", () => {
  const emits = replay("jsonl", transcript("jsonl-basic.jsonl"));
  assert.deepEqual(signature(emits), [
    "session run-2025-10-21-7f3a",
    "thinking jsonl:thinking:t1 running",
    "thinking jsonl:thinking:t1 done",
    "output",
    "command jsonl:tool:c1 running",
    "command jsonl:tool:c1 done",
    "search jsonl:tool:w1 running",
    "search jsonl:tool:w1 error",
    "status evaluating",
    "output",
    "final",
  ]);
  const expected =
    "Listing the largest files in the repository.\n\nThe largest file is `data/dump.sql` (48 MB).";
  assert.equal(outputText(emits), expected);
  assert.deepEqual(onlyFinal(emits), { kind: "final", text: expected });
  const c1 = assertSteps(emits).get("jsonl:tool:c1")!;
  assert.ok(c1.every((t) => t.label === "bash: du -ah . | sort -rh | head -3"), "label sticks");
  assert.match(last(c1).detail!, /dump\.sql/);
});

Deno.test("jsonl: explicit tool types, bad fields traced, errors with and without kind", () => {
  const parse = adapterFor("jsonl").createParser();
  assert.deepEqual(
    parse('{"type":"tool","id":"x","name":"fetch","status":"done","toolType":"search"}'),
    [
      {
        kind: "tool",
        toolType: "search",
        label: "fetch",
        stepRef: "jsonl:tool:x",
        status: "running",
      },
      { kind: "tool", toolType: "search", label: "fetch", stepRef: "jsonl:tool:x", status: "done" },
    ],
  );
  for (
    const bad of [
      '{"type":"tool","id":"y","name":"fetch","status":"finished"}',
      '{"type":"tool","name":"fetch","status":"done"}',
      '{"type":"output","text":42}',
      '{"type":"status","status":"sleeping"}',
      '{"type":"session"}',
      '{"type":"telemetry","n":1}',
    ]
  ) {
    const out = parse(bad);
    assert.equal(out.length, 1);
    assert.equal(out[0].kind, "trace", bad);
  }
  assert.deepEqual(parse('{"type":"error","message":"boom","kind":"timeout"}'), [
    { kind: "final", text: "", error: "boom", errorKind: "timeout" },
  ]);
  assert.deepEqual(
    adapterFor("jsonl").createParser()('{"type":"error","message":"HTTP 503 upstream"}'),
    [
      { kind: "final", text: "", error: "HTTP 503 upstream", errorKind: "connection" },
    ],
  );
  assert.deepEqual(adapterFor("jsonl").createParser()('{"type":"result","text":"Done."}'), [
    { kind: "final", text: "Done." },
  ]);
});

// ----------------------------------------------------------------------------------- robustness

Deno.test("every parser: garbage and a 5 MB line become traces and parsing goes on", () => {
  const huge = "x".repeat(5 * 1024 * 1024);
  const garbage = [
    "this is not json",
    '{"type": "output", "text": ',
    "\x01\x02\x7f binary\t junk",
    "[]",
    "42",
    "null",
    "",
    huge,
    `{"type":"unterminated","text":"${huge}`,
  ];
  for (const [name, provider] of Object.entries(TRANSCRIPTS)) {
    const lines = transcript(name);
    const clean = publicOnly(replay(provider, lines));
    const parse = adapterFor(provider).createParser();
    const mixed: AgentEmit[] = [];
    lines.forEach((line, i) => {
      const junk = garbage[i % garbage.length];
      const out = parse(junk);
      assert.equal(out.length, 1, `${name}: one trace per garbage line`);
      assert.equal(out[0].kind, "trace", `${name}: garbage is traced`);
      if (out[0].kind === "trace") assert.ok(out[0].line.length <= TRACE_LINE_MAX);
      mixed.push(...parse(line + "\r")); // CRLF output too
    });
    assert.deepEqual(publicOnly(mixed), clean, `${name}: garbage changes nothing`);
  }
});

Deno.test("every parser: a 5 MB tool result is cut to a bounded detail", () => {
  const big = "y".repeat(5 * 1024 * 1024);
  const cases: [Provider, string[]][] = [
    ["claude", [
      assistant("m", [{ type: "tool_use", id: "t", name: "Bash", input: { command: "cat big" } }]),
      JSON.stringify({
        type: "user",
        message: { content: [{ type: "tool_result", tool_use_id: "t", content: big }] },
      }),
    ]],
    ["codex", [JSON.stringify({
      type: "item.completed",
      item: {
        id: "i",
        type: "command_execution",
        command: "cat big",
        aggregated_output: big,
        exit_code: 0,
        status: "completed",
      },
    })]],
    ["gemini", [
      JSON.stringify({
        type: "tool_use",
        tool_name: "read_file",
        tool_id: "r",
        parameters: { absolute_path: "/big" },
      }),
      JSON.stringify({ type: "tool_result", tool_id: "r", status: "success", output: big }),
    ]],
    ["opencode", [JSON.stringify({
      type: "tool_use",
      sessionID: "s",
      part: {
        id: "p",
        type: "tool",
        tool: "read",
        state: { status: "completed", input: { filePath: "/big" }, output: big },
      },
    })]],
    ["jsonl", [
      JSON.stringify({ type: "tool", id: "j", name: "cat", status: "done", detail: big }),
    ]],
  ];
  for (const [provider, lines] of cases) {
    const steps = assertSteps(replay(provider, lines));
    const finished = last([...steps.values()][0]);
    assert.equal(finished.status, "done", provider);
    assert.equal(finished.detail!.length, DETAIL_MAX, provider);
    assert.ok(finished.detail!.endsWith("…"), provider);
  }
});

Deno.test("every parser: unexpected shapes of known types never throw", () => {
  const odd = [
    '{"type":"assistant","message":{"content":"not a list"}}',
    '{"type":"assistant","message":null}',
    '{"type":"user","message":{"content":[null,1,"x",{"type":"tool_result"}]}}',
    '{"type":"stream_event","event":{"type":"content_block_delta","index":"0","delta":null}}',
    '{"type":"result","subtype":7}',
    '{"type":"item.completed","item":{"type":"command_execution","exit_code":"1"}}',
    '{"type":"item.started","item":null}',
    '{"type":"turn.failed","error":"boom"}',
    '{"type":"tool_use","tool_id":null,"parameters":"x"}',
    '{"type":"message","role":"assistant","content":{"a":1},"delta":true}',
    '{"type":"tool_use","part":{"state":null}}',
    '{"type":"error","error":"flat string"}',
    '{"type":"tool","id":"q","name":"x","status":"done","detail":{"deep":[1,2]}}',
    '{"type":null}',
    "{}",
  ];
  for (const provider of PROVIDERS) {
    const parse = adapterFor(provider).createParser();
    for (const line of odd) {
      const out = parse(line);
      assert.ok(Array.isArray(out) && out.length > 0, `${provider}: ${line}`);
    }
  }
});

// --------------------------------------------------------------------------------------- launch

Deno.test("launch: protocol flags, prompt placement, resume and steering", () => {
  const claude = adapterFor("claude").launch("fix the bug");
  assert.deepEqual(claude.args, [
    "-p",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--input-format",
    "stream-json",
  ]);
  assert.ok(
    claude.stdin!.endsWith("\n") && claude.stdin!.indexOf("\n") === claude.stdin!.length - 1,
  );
  assert.deepEqual(JSON.parse(claude.stdin!), {
    type: "user",
    message: { role: "user", content: [{ type: "text", text: "fix the bug" }] },
  });
  assert.deepEqual(adapterFor("claude").launch("x", { resume: "9b2f" }).args.slice(-2), [
    "--resume",
    "9b2f",
  ]);
  const steer = adapterFor("claude").streamInput!("also add a test\nplease");
  assert.equal(steer.split("\n").length, 2, "one line (newlines escaped) plus its terminator");
  assert.equal(JSON.parse(steer).message.content[0].text, "also add a test\nplease");

  assert.deepEqual(adapterFor("codex").launch("-v looks wrong"), {
    args: ["exec", "--json", "--", "-v looks wrong"],
  });
  assert.deepEqual(adapterFor("codex").launch("go on", { resume: "0199a213" }).args, [
    "exec",
    "--json",
    "resume",
    "0199a213",
    "--",
    "go on",
  ]);

  assert.deepEqual(adapterFor("gemini").launch("explain"), {
    args: ["-o", "stream-json", "-p", "explain"],
  });
  assert.deepEqual(adapterFor("gemini").launch("--help me", { resume: "c6b1" }).args, [
    "-o",
    "stream-json",
    "--resume",
    "c6b1",
    "--prompt=--help me",
  ]);

  assert.deepEqual(adapterFor("opencode").launch("fix it"), {
    args: ["run", "--format", "json", "--", "fix it"],
  });
  assert.deepEqual(adapterFor("opencode").launch("fix it", { resume: "ses_1" }).args, [
    "run",
    "--format",
    "json",
    "--session",
    "ses_1",
    "--",
    "fix it",
  ]);

  assert.deepEqual(adapterFor("jsonl").launch("hello"), { args: ["hello"] });
  assert.deepEqual(adapterFor("jsonl").launch("hello", { resume: "r1" }), {
    args: ["--resume", "r1", "hello"],
  });

  for (const provider of ["codex", "gemini", "opencode", "jsonl"] as const) {
    assert.equal(adapterFor(provider).streamInput, undefined, `${provider} takes no steering`);
    assert.equal(adapterFor(provider).launch("p").stdin, undefined);
    assert.equal(last(adapterFor(provider).launch("the prompt").args), "the prompt");
  }
});

Deno.test("adapters: one per provider, unknown providers rejected", () => {
  assert.deepEqual(Object.keys(ADAPTERS).sort(), [...PROVIDERS].sort());
  for (const p of PROVIDERS) assert.equal(adapterFor(p).provider, p);
  assert.throws(() => adapterFor("aider" as Provider), /unknown agent provider "aider"/);
  assert.throws(() => adapterFor("toString" as Provider), /unknown agent provider/);
});

// ---------------------------------------------------------------------------------------- common

Deno.test("classifyError: rate limits, connection trouble, auth, everything else", () => {
  const cases: [string, string][] = [
    ["429 Too Many Requests", "rate_limit"],
    ["Rate limit reached for gpt-5", "rate_limit"],
    ['{"type":"overloaded_error","message":"Overloaded"}', "rate_limit"],
    ["Quota exceeded for quota metric 'Generate Content API requests'", "rate_limit"],
    ["RESOURCE_EXHAUSTED", "rate_limit"],
    ["Claude AI usage limit reached|1761062400", "rate_limit"],
    ["read ECONNRESET", "connection"],
    ["connect ETIMEDOUT 10.0.0.1:443", "connection"],
    ["Connection error.", "connection"],
    ["network is unreachable", "connection"],
    ["502 Bad Gateway", "connection"],
    ["503 Service Unavailable", "connection"],
    ["upstream returned 504", "connection"],
    ["401 Unauthorized", "auth"],
    ["403 Forbidden", "auth"],
    ["Invalid API key · Please run /login", "auth"],
    ["OPENAI_API_KEY is not set", "auth"],
    ["unauthorized client", "auth"],
    ["Reached maximum number of turns (3)", "agent"],
    ["TypeError: cannot read properties of undefined", "agent"],
    ["", "agent"],
  ];
  for (const [text, kind] of cases) assert.equal(classifyError(text), kind, text);
  for (const p of PROVIDERS) assert.equal(adapterFor(p).classifyError("HTTP 429"), "rate_limit");
});

Deno.test("tool types and labels", () => {
  const types: [string, string][] = [
    ["Bash", "command"],
    ["bash", "command"],
    ["run_shell_command", "command"],
    ["command_execution", "command"],
    ["WebSearch", "search"],
    ["WebFetch", "search"],
    ["web_search", "search"],
    ["google_web_search", "search"],
    ["Task", "subagent"],
    ["Agent", "subagent"],
    ["Read", "tool"],
    ["TodoWrite", "tool"],
  ];
  for (const [name, type] of types) assert.equal(toolTypeFor(name), type, name);
  assert.equal(
    toolLabel("Bash", { command: "ls -la\necho done", description: "List" }),
    "Bash: ls -la",
  );
  assert.equal(toolLabel("Read", { file_path: "src/a.ts" }), "Read: src/a.ts");
  assert.equal(
    toolLabel("WebFetch", { url: "https://deno.com", prompt: "summarize" }),
    "WebFetch: https://deno.com",
  );
  assert.equal(toolLabel("TodoWrite", { todos: [] }), "TodoWrite");
  assert.equal(toolLabel("Bash", { command: "z".repeat(500) }).length, "Bash: ".length + 80);
});

Deno.test("truncate: bounded, marked, never splits a surrogate pair", () => {
  assert.equal(truncate("short", 10), "short");
  assert.equal(truncate("abcdefghij", 5), "abcd…");
  const emoji = "a" + "😀".repeat(10);
  for (let max = 2; max < emoji.length; max++) {
    const t = truncate(emoji, max);
    assert.ok(t.length <= max, `max ${max}`);
    assert.ok(!/[\ud800-\udbff](?![\udc00-\udfff])/.test(t), `no lone high surrogate at ${max}`);
    assert.ok(!/(?<![\ud800-\udbff])[\udc00-\udfff]/.test(t), `no lone low surrogate at ${max}`);
  }
});
