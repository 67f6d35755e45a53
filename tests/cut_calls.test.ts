// A forced tool call cut by the token limit, in the Anthropic Messages and the Responses dialects
// (the OpenAI chat one is in agent_day.test.ts): the cut call comes back as a call, its arguments
// so far closed into a JSON object, never as the family's markup in the answer text, and the reply
// says it was cut (`stop_reason: "max_tokens"`, `status: "incomplete"`), streamed or not. Greedy,
// so each limit cuts at the same place every run: 14 tokens end inside the call marker (no call
// yet), 40 and 60 inside the arguments.
import assert from "node:assert/strict";
import { chatFormatModelPath } from "./support/models.ts";
import { type RunningServer, startServer } from "./support/server.ts";

const json = { "content-type": "application/json" };
const PARAMS = {
  type: "object",
  properties: { city: { type: "string", maxLength: 40 } },
  required: ["city"],
};
const LIMITS = [14, 40, 60];
/** Call markup of the hermes family, or the tool's name, anywhere in answer text. */
const MARKUP = /tool_call|get_weather|"arguments"/;

async function hermesServer(): Promise<RunningServer> {
  return await startServer([
    "--model",
    await chatFormatModelPath("hermes"),
    "--max-batch",
    "1",
    "--max-seq-len",
    "512",
    "--threads",
    "2",
  ]);
}

/** The `data:` objects of an SSE body, each with its `event:` name when it had one. */
function sseEvents(text: string): { event?: string; data: Record<string, unknown> }[] {
  const out: { event?: string; data: Record<string, unknown> }[] = [];
  for (const block of text.split(/\n\n+/)) {
    const event = block.match(/^event: (.*)$/m)?.[1];
    const data = block.match(/^data: (.*)$/m)?.[1];
    if (data && data !== "[DONE]") out.push({ event, data: JSON.parse(data) });
  }
  return out;
}

/** A cut call's arguments: a JSON object, with the city written so far when there is one. */
function assertPartialArgs(args: unknown, max: number): void {
  assert.equal(typeof args, "object");
  assert.ok(args !== null && !Array.isArray(args), JSON.stringify(args));
  if (max === 60) {
    const city = (args as { city?: unknown }).city;
    assert.equal(typeof city, "string", "the arguments written before the cut are kept");
  }
}

function messages(url: string, max: number, stream: boolean): Promise<Response> {
  return fetch(`${url}/v1/messages`, {
    method: "POST",
    headers: json,
    body: JSON.stringify({
      model: "hearth",
      max_tokens: max,
      temperature: 0,
      stream,
      tools: [{ name: "get_weather", input_schema: PARAMS }],
      tool_choice: { type: "any" },
      messages: [{ role: "user", content: "weather in Paris?" }],
    }),
  });
}

function responses(url: string, max: number, stream: boolean): Promise<Response> {
  return fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: json,
    body: JSON.stringify({
      max_output_tokens: max,
      temperature: 0,
      stream,
      store: false,
      tools: [{ type: "function", name: "get_weather", parameters: PARAMS }],
      tool_choice: "required",
      input: "weather in Paris?",
    }),
  });
}

Deno.test({
  name:
    "cut calls (Anthropic): a forced call cut by max_tokens is a tool_use block, stop_reason max_tokens",
  sanitizeResources: false,
  fn: async () => {
    await using srv = await hermesServer();
    let cutCalls = 0;
    for (const max of LIMITS) {
      const res = await messages(srv.url, max, false);
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(body.stop_reason, "max_tokens", `max ${max}: ${JSON.stringify(body)}`);
      assert.equal(body.usage.output_tokens, max);
      const blocks = body.content as {
        type: string;
        text?: string;
        name?: string;
        input?: unknown;
      }[];
      for (const b of blocks.filter((b) => b.type === "text")) {
        assert.doesNotMatch(b.text!, MARKUP, `max ${max}: markup as text`);
      }
      const uses = blocks.filter((b) => b.type === "tool_use");
      assert.ok(uses.length <= 1, JSON.stringify(blocks));
      if (max === 14) assert.equal(uses.length, 0, "cut before the tool was named");
      else assert.equal(uses.length, 1, `max ${max}: the cut call is missing`);
      for (const use of uses) {
        assert.equal(use.name, "get_weather");
        assertPartialArgs(use.input, max);
        cutCalls++;
      }

      // Streamed: the same call as a tool_use block, its input as input_json_delta.
      const streamed = await messages(srv.url, max, true);
      assert.equal(streamed.status, 200);
      const events = sseEvents(await streamed.text());
      const delta = events.find((e) => e.event === "message_delta")!.data;
      assert.equal((delta.delta as { stop_reason: string }).stop_reason, "max_tokens");
      const starts = events.filter((e) => e.event === "content_block_start")
        .map((e) => e.data.content_block as { type: string; name?: string });
      const toolStarts = starts.filter((b) => b.type === "tool_use");
      assert.deepEqual(toolStarts.map((b) => b.name), uses.map(() => "get_weather"));
      let text = "", partialJson = "";
      for (const e of events.filter((e) => e.event === "content_block_delta")) {
        const d = e.data.delta as { type: string; text?: string; partial_json?: string };
        if (d.type === "text_delta") text += d.text;
        if (d.type === "input_json_delta") partialJson += d.partial_json;
      }
      assert.doesNotMatch(text, MARKUP, `max ${max}: markup streamed as text`);
      if (uses.length) assert.deepEqual(JSON.parse(partialJson), uses[0].input);
    }
    assert.equal(cutCalls, 2);
  },
});

Deno.test({
  name:
    "cut calls (Responses): a forced call cut by max_output_tokens is a function_call, status incomplete",
  sanitizeResources: false,
  fn: async () => {
    await using srv = await hermesServer();
    let cutCalls = 0;
    for (const max of LIMITS) {
      const res = await responses(srv.url, max, false);
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(body.status, "incomplete", `max ${max}: ${JSON.stringify(body)}`);
      assert.deepEqual(body.incomplete_details, { reason: "max_output_tokens" });
      assert.equal(body.usage.output_tokens, max);
      const items = body.output as {
        type: string;
        name?: string;
        arguments?: string;
        content?: { text: string }[];
      }[];
      for (const m of items.filter((i) => i.type === "message")) {
        for (const c of m.content ?? []) assert.doesNotMatch(c.text, MARKUP, `max ${max}`);
      }
      const calls = items.filter((i) => i.type === "function_call");
      assert.ok(calls.length <= 1, JSON.stringify(items));
      if (max === 14) assert.equal(calls.length, 0, "cut before the tool was named");
      else assert.equal(calls.length, 1, `max ${max}: the cut call is missing`);
      for (const call of calls) {
        assert.equal(call.name, "get_weather");
        assertPartialArgs(JSON.parse(call.arguments!), max);
        cutCalls++;
      }

      // Streamed: the call's item and arguments, then response.incomplete.
      const streamed = await responses(srv.url, max, true);
      assert.equal(streamed.status, 200);
      const events = sseEvents(await streamed.text());
      const last = events[events.length - 1];
      assert.equal(last.data.type, "response.incomplete");
      assert.equal((last.data.response as { status: string }).status, "incomplete");
      const text = events.filter((e) => e.data.type === "response.output_text.delta")
        .map((e) => e.data.delta).join("");
      assert.doesNotMatch(text, MARKUP, `max ${max}: markup streamed as text`);
      const done = events.filter((e) => e.data.type === "response.function_call_arguments.done");
      assert.equal(done.length, calls.length);
      if (calls.length) {
        assert.deepEqual(
          JSON.parse(String(done[0].data.arguments)),
          JSON.parse(calls[0].arguments!),
        );
        const deltas = events.filter((e) =>
          e.data.type === "response.function_call_arguments.delta"
        )
          .map((e) => e.data.delta).join("");
        assert.equal(deltas, done[0].data.arguments, "the deltas add up to the arguments");
      }
    }
    assert.equal(cutCalls, 2);
  },
});
