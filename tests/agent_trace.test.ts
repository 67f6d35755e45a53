// Agent traces (issue 27): the recording proxy (tools/record_trace.ts) keeps the exact body a real
// SDK sent and never a header, passes streams through, and skips what a replay does not need; the
// trace parser; the per-session prefix and the replay body in every dialect; the steering of
// forced tool calls; and a short replay (bench/agent_trace.ts) of two interleaved sessions against
// a tiny-model server, read back from its JSON.
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import {
  callsSoFar,
  isRecorded,
  recordingProxy,
  steerBody,
  type TraceLine,
} from "../tools/record_trace.ts";
import {
  agentTraceMain,
  parseTrace,
  prefixSession,
  readUsage,
  replayBody,
  replayTrace,
  type TurnResult,
} from "../bench/agent_trace.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const SECRET = "sk-trace-secret-7731";

Deno.test({
  name: "recorder: the SDK's body exactly, no header, streams passed through, only inference",
  sanitizeResources: false,
  fn: async () => {
    await using srv = await startServer([
      "--model",
      await tinyModelPath(),
      "--max-batch",
      "2",
      "--max-seq-len",
      "512",
      "--threads",
      "2",
    ]);
    const lines: TraceLine[] = [];
    let clock = 1000;
    const proxy = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      recordingProxy({ upstream: srv.url, write: (l) => void lines.push(l), now: () => clock }),
    );
    try {
      const client = new Anthropic({
        baseURL: `http://127.0.0.1:${proxy.addr.port}`,
        apiKey: SECRET,
        maxRetries: 0,
      });
      const params = {
        model: "claude-x",
        max_tokens: 4,
        system: [{
          type: "text" as const,
          text: "Be brief.",
          cache_control: { type: "ephemeral" as const },
        }],
        messages: [{ role: "user" as const, content: "Hi ✓ \u00e9" }],
        tools: [{
          name: "get_weather",
          description: "Weather",
          input_schema: { type: "object" as const, properties: { city: { type: "string" } } },
        }],
        temperature: 0,
      };
      const plain = await client.messages.create(params);
      assert.equal(plain.type, "message");
      clock += 2500;
      const events: string[] = [];
      for await (const ev of await client.messages.create({ ...params, stream: true })) {
        events.push(ev.type);
      }
      assert.equal(events[0], "message_start");
      assert.equal(events.at(-1), "message_stop");
      // Neither is an inference request: not in the trace, but forwarded.
      const count = await client.messages.countTokens({
        model: "claude-x",
        messages: params.messages,
      });
      assert.ok(count.input_tokens > 0);
      const models = await fetch(`http://127.0.0.1:${proxy.addr.port}/v1/models`);
      assert.equal(models.status, 200);
      await models.body?.cancel();

      assert.deepEqual(lines.map((l) => [l.t, l.route]), [[0, "/v1/messages"], [
        2.5,
        "/v1/messages",
      ]]);
      assert.deepEqual(lines[0].body, params);
      assert.deepEqual(lines[1].body, { ...params, stream: true });
      assert.ok(!JSON.stringify(lines).includes(SECRET), "no key in the trace");
    } finally {
      await proxy.shutdown();
    }
  },
});

Deno.test("recorder: which requests a trace holds", () => {
  assert.ok(isRecorded("POST", "/v1/messages"));
  assert.ok(isRecorded("POST", "/v1/responses"));
  assert.ok(isRecorded("POST", "/v1/chat/completions"));
  assert.ok(isRecorded("POST", "/v1/completions"));
  assert.ok(!isRecorded("POST", "/v1/messages/count_tokens"));
  assert.ok(!isRecorded("GET", "/v1/models"));
});

Deno.test("steering: the step after the calls so far, forced with const arguments per dialect", () => {
  const step = { tool: "Read", input: { file_path: "/w/a.py" } };
  const fixed = {
    type: "object",
    properties: { file_path: { const: "/w/a.py" } },
    required: ["file_path"],
    additionalProperties: false,
  };
  const anthropic = {
    messages: [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "tool_use", id: "1", name: "Read", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "1", content: "x" }] },
    ],
    tools: [{ name: "Bash", input_schema: {} }, { name: "Read", input_schema: { type: "object" } }],
  };
  assert.equal(callsSoFar("/v1/messages", anthropic), 1);
  const a = steerBody("/v1/messages", anthropic, step)!;
  assert.deepEqual(a.tool_choice, { type: "tool", name: "Read" });
  assert.deepEqual((a.tools as { input_schema: unknown }[])[1].input_schema, fixed);
  assert.deepEqual((a.tools as unknown[])[0], anthropic.tools[0], "other tools untouched");
  assert.equal(steerBody("/v1/messages", { ...anthropic, tools: [] }, step), undefined);

  const chat = {
    messages: [{ role: "assistant", tool_calls: [{ id: "a" }, { id: "b" }] }],
    tools: [{ type: "function", function: { name: "Read", parameters: {} } }],
  };
  assert.equal(callsSoFar("/v1/chat/completions", chat), 2);
  const c = steerBody("/v1/chat/completions", chat, step)!;
  assert.deepEqual(c.tool_choice, { type: "function", function: { name: "Read" } });
  assert.deepEqual(
    (c.tools as { function: { parameters: unknown } }[])[0].function.parameters,
    fixed,
  );

  const responses = {
    input: [
      { type: "message", role: "user", content: "go" },
      { type: "function_call", call_id: "c", name: "Read", arguments: "{}" },
      { type: "function_call_output", call_id: "c", output: "x" },
      { type: "custom_tool_call", call_id: "d", name: "apply_patch", input: "" },
    ],
    tools: [{ type: "function", name: "Read", parameters: {} }],
  };
  assert.equal(callsSoFar("/v1/responses", responses), 2);
  const r = steerBody("/v1/responses", responses, step)!;
  assert.deepEqual(r.tool_choice, { type: "function", name: "Read" });
  assert.deepEqual((r.tools as { parameters: unknown }[])[0].parameters, fixed);
});

Deno.test("trace parser: JSON lines of {t, route, body}; anything else named by line", () => {
  const text = '{"t":0,"route":"/v1/messages","body":{"a":1}}\n\n' +
    '{"t":1.5,"route":"/v1/responses","body":{"input":"x"}}\n';
  assert.deepEqual(parseTrace(text), [
    { t: 0, route: "/v1/messages", body: { a: 1 } },
    { t: 1.5, route: "/v1/responses", body: { input: "x" } },
  ]);
  assert.throws(() => parseTrace("{oops\n"), /trace line 1: not JSON/);
  assert.throws(() => parseTrace('{"t":0,"route":"/v1/messages"}\n'), /trace line 1: expected/);
  assert.throws(() => parseTrace('\n{"t":-1,"route":"/x","body":{}}'), /trace line 2: expected/);
  assert.throws(() => parseTrace('{"t":0,"route":"x","body":{}}'), /trace line 1/);
  assert.throws(() => parseTrace("\n \n"), /no requests/);
});

Deno.test("session prefix: the start of the system prompt in every dialect", () => {
  const s = (text: string) => `session 3\n${text}`;
  // Anthropic: a string, the first text block of a list, or a new system prompt.
  assert.equal(prefixSession("/v1/messages", { system: "Sys" }, 3).system, s("Sys"));
  assert.deepEqual(
    prefixSession("/v1/messages", {
      system: [{ type: "text", text: "A", cache_control: { type: "ephemeral" } }, {
        type: "text",
        text: "B",
      }],
    }, 3).system,
    [{ type: "text", text: s("A"), cache_control: { type: "ephemeral" } }, {
      type: "text",
      text: "B",
    }],
  );
  assert.equal(prefixSession("/v1/messages", { messages: [] }, 3).system, s(""));
  // Responses: the instructions.
  assert.equal(prefixSession("/v1/responses", { instructions: "I" }, 3).instructions, s("I"));
  assert.equal(prefixSession("/v1/responses", { input: "x" }, 3).instructions, s(""));
  // Chat: the first system or developer message, else a new one in front.
  const user = { role: "user", content: "u" };
  assert.deepEqual(
    prefixSession("/v1/chat/completions", { messages: [{ role: "system", content: "S" }, user] }, 3)
      .messages,
    [{ role: "system", content: s("S") }, user],
  );
  assert.deepEqual(
    prefixSession("/v1/chat/completions", {
      messages: [{ role: "developer", content: [{ type: "text", text: "D" }] }, user],
    }, 3).messages,
    [{ role: "developer", content: [{ type: "text", text: s("D") }] }, user],
  );
  assert.deepEqual(
    prefixSession("/v1/chat/completions", { messages: [user] }, 3).messages,
    [{ role: "system", content: s("") }, user],
  );
  assert.equal(prefixSession("/v1/completions", { prompt: "P" }, 3).prompt, s("P"));
  assert.throws(() => prefixSession("/v1/embeddings", {}, 3), /cannot give/);

  // The replay body: streamed, output capped in the dialect's own field, usage asked for.
  const r = replayBody(
    "/v1/responses",
    { input: "x", max_output_tokens: 9000, store: true },
    0,
    16,
  );
  assert.deepEqual(r, {
    input: "x",
    instructions: "session 0\n",
    max_output_tokens: 16,
    store: false,
    stream: true,
  });
  const c = replayBody(
    "/v1/chat/completions",
    { messages: [user], max_completion_tokens: 900 },
    1,
    8,
  );
  assert.equal(c.max_tokens, 8);
  assert.equal("max_completion_tokens" in c, false);
  assert.deepEqual(c.stream_options, { include_usage: true });
  assert.equal(replayBody("/v1/messages", { max_tokens: 32000 }, 1, 8).max_tokens, 8);

  // Usage in each dialect: the prompt whole, and the part served from cache.
  assert.deepEqual(
    readUsage({ input_tokens: 10, cache_read_input_tokens: 90, output_tokens: 2 }),
    { prompt: 100, cached: 90, output: 2 },
  );
  assert.deepEqual(
    readUsage({ input_tokens: 100, input_tokens_details: { cached_tokens: 64 }, output_tokens: 3 }),
    { prompt: 100, cached: 64, output: 3 },
  );
  assert.deepEqual(
    readUsage({
      prompt_tokens: 50,
      completion_tokens: 4,
      prompt_tokens_details: { cached_tokens: 32 },
    }),
    { prompt: 50, cached: 32, output: 4 },
  );
});

/**
 * A three-dialect agent session whose system prompt says its line `lines` times: each turn sends
 * what the one before sent, and more or the same.
 */
function threeDialectTrace(lines = 20): TraceLine[] {
  const system = "You are a careful coding agent. ".repeat(lines);
  const history = [
    { role: "user", content: "Read the file." },
    { role: "assistant", content: "Reading it now." },
    { role: "user", content: "Now fix the bug." },
  ];
  return [
    {
      t: 0,
      route: "/v1/messages",
      body: { model: "m", max_tokens: 8000, system, messages: history.slice(0, 1) },
    },
    {
      t: 2,
      route: "/v1/messages",
      body: { model: "m", max_tokens: 8000, system, messages: history },
    },
    {
      t: 3,
      route: "/v1/chat/completions",
      body: { messages: [{ role: "system", content: system }, ...history] },
    },
    {
      t: 4,
      route: "/v1/responses",
      body: { instructions: system, input: history, max_output_tokens: 5000 },
    },
  ];
}

/**
 * The warm turns the cache did not serve all their session had sent before: the previous turn's
 * prompt, or all but the last token (which is always computed) of a prompt sent again.
 */
function unservedTurns(turns: TurnResult[]): TurnResult[] {
  return turns.filter((t) => {
    if (t.turn === 0) return false;
    const prev = turns.find((p) => p.session === t.session && p.turn === t.turn - 1)!;
    return t.cachedTokens < Math.min(prev.promptTokens, t.promptTokens - 1);
  });
}

Deno.test({
  name: "replay: two interleaved sessions of a three-dialect trace, per-turn figures in the JSON",
  sanitizeResources: false,
  fn: async () => {
    await using srv = await startServer([
      "--model",
      await tinyModelPath(),
      "--max-batch",
      "2",
      "--max-seq-len",
      "4096",
      "--threads",
      "2",
    ]);
    const trace = threeDialectTrace();
    const dir = await Deno.makeTempDir({ prefix: "hearth-trace-" });
    try {
      await Deno.writeTextFile(
        `${dir}/t.jsonl`,
        trace.map((l) => JSON.stringify(l)).join("\n") + "\n",
      );
      await agentTraceMain([
        "--agent-trace",
        `${dir}/t.jsonl`,
        "--url",
        srv.url,
        "--sessions",
        "2",
        "--max-tokens",
        "3",
        "--probe-words",
        "300",
        "--json-out",
        `${dir}/out.json`,
      ]);
      const out = JSON.parse(await Deno.readTextFile(`${dir}/out.json`));
      assert.equal(out.sessions, 2);
      assert.ok(out.prefill.promptTokens > 300, JSON.stringify(out.prefill));
      assert.ok(out.prefill.tokensPerSecond > 0);
      const turns = out.turns as TurnResult[];
      assert.equal(turns.length, 8);
      for (const s of [0, 1]) {
        const mine = turns.filter((t) => t.session === s);
        assert.deepEqual(mine.map((t) => t.turn), [0, 1, 2, 3], "a session's turns in order");
        assert.deepEqual(mine.map((t) => t.route), trace.map((l) => l.route));
      }
      for (const t of turns) {
        const where = JSON.stringify(t);
        assert.equal(t.status, 200, where);
        assert.equal(t.error, undefined, where);
        assert.ok(t.promptTokens > 100, where);
        assert.ok(t.cachedTokens >= 0 && t.cachedTokens <= t.promptTokens, where);
        assert.equal(t.newTokens, t.promptTokens - t.cachedTokens, where);
        assert.ok(t.outputTokens >= 1 && t.outputTokens <= 3, where);
        assert.equal(typeof t.ttftMs, "number", where);
      }
      // Both sessions sent the same trace with a prefix of the same length: the same prompts.
      const prompts = (s: number) =>
        turns.filter((t) => t.session === s).map((t) => t.promptTokens);
      assert.deepEqual(prompts(0), prompts(1));
      // The second turn extends the first: longer.
      assert.ok(prompts(0)[1] > prompts(0)[0]);
      // Every warm turn found its session's earlier prompt in the cache (its slot's, here).
      assert.deepEqual(unservedTurns(turns), []);
      const sum = out.summary;
      assert.equal(sum.warmTurns, 6);
      assert.equal(sum.failedTurns, 0);
      assert.equal(
        sum.warmPromptTokens,
        turns.filter((t) => t.turn > 0).reduce((n, t) => n + t.promptTokens, 0),
      );
      assert.equal(sum.cacheShare, sum.warmCachedTokens / sum.warmPromptTokens);
      assert.ok(sum.cacheShare > 0.9, `cache share ${sum.cacheShare}`);
      assert.ok(sum.warmTtftOverNewPrefill > 0);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "replay: sessions taking turns in one slot are served by the prompt cache, and not without it",
  sanitizeResources: false,
  fn: async () => {
    const model = await tinyModelPath();
    // One slot and one request at a time: each turn finds the other session's cells in the slot,
    // so its own earlier prompt can only come from the prompt cache's memory tier (which keeps
    // prefixes of 256 tokens and more: a longer system prompt than the test above).
    for (const cacheRam of ["1", "0"]) {
      await using srv = await startServer([
        "--model",
        model,
        "--max-batch",
        "1",
        "--max-seq-len",
        "1024",
        "--threads",
        "2",
        "--cache-ram",
        cacheRam,
      ]);
      const turns = await replayTrace({
        url: srv.url,
        trace: threeDialectTrace(60),
        sessions: 2,
        maxTokens: 3,
        serial: true,
      });
      assert.equal(turns.length, 8);
      for (const t of turns) assert.equal(t.status, 200, JSON.stringify(t));
      const unserved = unservedTurns(turns).map((t) => [t.session, t.turn]);
      if (cacheRam === "0") {
        // The check the replay test makes fails here, on every warm turn.
        assert.equal(unserved.length, 6, JSON.stringify(turns));
      } else {
        assert.deepEqual(unserved, [], JSON.stringify(turns));
      }
    }
  },
});
