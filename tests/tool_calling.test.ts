// Tool calling end to end, in all three dialects, with the official clients: forced calls at
// temperature 1 under many seeds on every chat format's tiny model, each argument object
// validated by ajv against its tool's schema, streamed and not; round trips with tool results;
// bad tool definitions as 400s in each dialect's shape; the field policy's header.
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import { chatFormatModelPath, testDataDir, tinyModelPath } from "./support/models.ts";
import { type RunningServer, startServer } from "./support/server.ts";

const FAMILIES = ["llama3", "hermes", "mistral", "qwen3-coder"] as const;
const SEEDS = [1, 2, 3];

const weather = {
  type: "object",
  properties: {
    city: { type: "string", pattern: "^[A-Za-z ]{1,12}$" },
    unit: { enum: ["celsius", "fahrenheit"] },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const order = {
  type: "object",
  properties: {
    items: {
      type: "array",
      items: {
        type: "object",
        properties: {
          sku: { type: "string", pattern: "^[A-Z]{3}-[0-9]{2}$" },
          qty: { type: "integer", minimum: 1, maximum: 9 },
        },
        required: ["sku", "qty"],
        additionalProperties: false,
      },
      minItems: 1,
      maxItems: 2,
    },
    express: { type: "boolean" },
  },
  required: ["items", "express"],
  additionalProperties: false,
};
const SCHEMAS: Record<string, Record<string, unknown>> = {
  get_weather: weather,
  place_order: order,
};

const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(
  Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]),
);

function assertValidCall(name: string, args: string, where: string): void {
  const v = validators[name];
  assert.ok(v, `${where}: unknown tool ${name}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    assert.fail(`${where}: arguments are not JSON: ${args}`);
  }
  assert.ok(v(parsed), `${where}: ${args} fails the schema: ${ajv.errorsText(v.errors)}`);
}

const openaiTools = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  type: "function" as const,
  function: { name, description: `The ${name} tool`, parameters },
}));
const anthropicTools = Object.entries(SCHEMAS).map(([name, input_schema]) => ({
  name,
  description: `The ${name} tool`,
  input_schema: input_schema as Anthropic.Tool.InputSchema,
}));
const responsesTools = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  type: "function" as const,
  name,
  description: `The ${name} tool`,
  parameters,
  strict: true,
}));

async function serve(model: string): Promise<RunningServer> {
  return await startServer([
    "--model",
    model,
    "--max-seq-len",
    "2048",
    "--max-batch",
    "4",
    "--threads",
    "1",
    "--data-dir",
    await Deno.makeTempDir(),
  ]);
}

for (const family of FAMILIES) {
  Deno.test(`forced tool calls validate in all three dialects (${family})`, async () => {
    await using srv = await serve(await chatFormatModelPath(family));
    const openai = new OpenAI({ apiKey: "x", baseURL: `${srv.url}/v1`, maxRetries: 0 });
    const anthropic = new Anthropic({ apiKey: "x", baseURL: srv.url, maxRetries: 0 });
    const model = (await openai.models.list()).data[0].id;
    const user = "What is the weather in Paris, and order two apples?";
    await Promise.all(SEEDS.map(async (seed) => {
      const named = seed % 2 ? "get_weather" : "place_order";
      // OpenAI Chat Completions, whole.
      const chat = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content: user }],
        tools: openaiTools,
        tool_choice: "required",
        // One call each: a random model given room for several keeps writing calls until the
        // limit (parallel calls are covered by the format parser tests).
        parallel_tool_calls: false,
        temperature: 1,
        seed,
        max_tokens: 300,
      });
      const choice = chat.choices[0];
      assert.equal(choice.finish_reason, "tool_calls", `chat seed ${seed}`);
      assert.ok(choice.message.tool_calls?.length, `chat seed ${seed}: no tool_calls`);
      for (const c of choice.message.tool_calls!) {
        assert.equal(c.type, "function");
        // Mistral carries its own 9-character ids; the other families get call_ ids.
        assert.match(c.id, family === "mistral" ? /^(call_|[A-Za-z0-9]{9}$)/ : /^call_/);
        if (c.type === "function") {
          assertValidCall(c.function.name, c.function.arguments, `chat ${family} seed ${seed}`);
        }
      }
      // OpenAI Chat Completions, streamed, one named tool.
      const stream = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content: user }],
        tools: openaiTools,
        tool_choice: { type: "function", function: { name: named } },
        temperature: 1,
        seed,
        max_tokens: 300,
        stream: true,
      });
      const calls = new Map<number, { id: string; name: string; args: string }>();
      let finish: string | null = null;
      for await (const chunk of stream) {
        const ch = chunk.choices[0];
        if (!ch) continue;
        assert.equal(ch.delta.content ?? "", "", `no text leaks beside a forced call`);
        for (const d of ch.delta.tool_calls ?? []) {
          const have = calls.get(d.index);
          if (!have) {
            assert.ok(d.id && d.function?.name, "the first delta of a call has id and name");
            calls.set(d.index, {
              id: d.id!,
              name: d.function!.name!,
              args: d.function?.arguments ?? "",
            });
          } else {
            assert.equal(d.id, undefined, "id only on the first delta");
            have.args += d.function?.arguments ?? "";
          }
        }
        finish = ch.finish_reason ?? finish;
      }
      assert.equal(finish, "tool_calls", `chat stream seed ${seed}`);
      assert.equal(calls.size, 1, "a named tool_choice makes exactly one call");
      for (const c of calls.values()) {
        assert.equal(c.name, named);
        assertValidCall(c.name, c.args, `chat stream ${family} seed ${seed}`);
      }

      // Anthropic, whole (any) and streamed (named tool).
      const msg = await anthropic.messages.create({
        model: "hearth-local",
        max_tokens: 300,
        messages: [{ role: "user", content: user }],
        tools: anthropicTools,
        tool_choice: { type: "any", disable_parallel_tool_use: true },
      });
      assert.equal(msg.stop_reason, "tool_use", `anthropic seed ${seed}`);
      const uses = msg.content.filter((b) => b.type === "tool_use");
      assert.ok(uses.length >= 1);
      for (const u of uses) {
        if (u.type !== "tool_use") continue;
        assert.match(u.id, /^toolu_/);
        assertValidCall(u.name, JSON.stringify(u.input), `anthropic ${family} seed ${seed}`);
      }
      const astream = anthropic.messages.stream({
        model: "hearth-local",
        max_tokens: 300,
        messages: [{ role: "user", content: user }],
        tools: anthropicTools,
        tool_choice: { type: "tool", name: named },
      });
      let partial = "";
      astream.on("inputJson", (delta) => (partial += delta));
      const final = await astream.finalMessage();
      assert.equal(final.stop_reason, "tool_use");
      const use = final.content.find((b) => b.type === "tool_use");
      assert.ok(use && use.type === "tool_use");
      assert.equal(use.name, named);
      assertValidCall(use.name, partial, `anthropic stream ${family} seed ${seed}`);
      assert.deepEqual(JSON.parse(partial), use.input);

      // Responses, whole (required) and streamed (named).
      const resp = await openai.responses.create({
        model,
        input: user,
        tools: responsesTools,
        tool_choice: "required",
        parallel_tool_calls: false,
        temperature: 1,
        max_output_tokens: 300,
        store: false,
      });
      const fcs = resp.output.filter((o) => o.type === "function_call");
      assert.ok(fcs.length >= 1, `responses seed ${seed}`);
      for (const f of fcs) {
        if (f.type === "function_call") {
          assertValidCall(f.name, f.arguments, `responses ${family} seed ${seed}`);
        }
      }
      const rstream = await openai.responses.create({
        model,
        input: user,
        tools: responsesTools,
        tool_choice: { type: "function", name: named },
        temperature: 1,
        max_output_tokens: 300,
        stream: true,
      });
      let args = "";
      let done: OpenAI.Responses.Response | undefined;
      let last = -1;
      for await (const ev of rstream) {
        assert.ok(ev.sequence_number > last, "sequence numbers increase");
        last = ev.sequence_number;
        if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
        if (ev.type === "response.completed") done = ev.response;
      }
      assert.ok(done, "response.completed");
      const fc = done.output.find((o) => o.type === "function_call");
      assert.ok(fc && fc.type === "function_call");
      assert.equal(fc.name, named);
      assert.equal(fc.arguments, args);
      assertValidCall(fc.name, args, `responses stream ${family} seed ${seed}`);
    }));
  });
}

Deno.test("round trips with tool results, and what each dialect refuses", async (t) => {
  await using srv = await serve(await chatFormatModelPath("hermes"));
  const openai = new OpenAI({ apiKey: "x", baseURL: `${srv.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: "x", baseURL: srv.url, maxRetries: 0 });
  const model = (await openai.models.list()).data[0].id;

  await t.step("chat: assistant tool_calls and tool messages in history", async () => {
    const r = await openai.chat.completions.create({
      model,
      messages: [
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' },
          }],
        },
        { role: "tool", tool_call_id: "call_1", content: "18 degrees, sunny" },
      ],
      tools: openaiTools,
      max_tokens: 4,
      seed: 1,
    });
    assert.ok(r.usage!.prompt_tokens > 60);
  });

  await t.step(
    "anthropic: tool_use and tool_result blocks (string and blocks, is_error)",
    async () => {
      const r = await anthropic.messages.create({
        model: "hearth-local",
        max_tokens: 4,
        tools: anthropicTools,
        messages: [
          { role: "user", content: "Weather in Paris and Rome?" },
          {
            role: "assistant",
            content: [
              { type: "text", text: "Checking." },
              {
                type: "tool_use",
                id: "toolu_1",
                name: "get_weather",
                input: { city: "Paris", unit: "celsius" },
              },
              {
                type: "tool_use",
                id: "toolu_2",
                name: "get_weather",
                input: { city: "Rome", unit: "celsius" },
              },
            ],
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "toolu_1", content: "18C" },
              {
                type: "tool_result",
                tool_use_id: "toolu_2",
                content: [{ type: "text", text: "service down" }],
                is_error: true,
              },
              { type: "text", text: "Summarise." },
            ],
          },
        ],
      });
      assert.equal(r.type, "message");
      const count = await anthropic.messages.countTokens({
        model: "hearth-local",
        tools: anthropicTools,
        messages: [{ role: "user", content: "Weather in Paris and Rome?" }],
      });
      assert.ok(count.input_tokens < r.usage.input_tokens + (r.usage.cache_read_input_tokens ?? 0));
    },
  );

  await t.step(
    "responses: function_call and function_call_output items, then previous_response_id",
    async () => {
      const first = await openai.responses.create({
        model,
        input: [
          { role: "user", content: "Weather in Paris?" },
          {
            type: "function_call",
            call_id: "call_9",
            name: "get_weather",
            arguments: '{"city":"Paris","unit":"celsius"}',
          },
          { type: "function_call_output", call_id: "call_9", output: "18C" },
        ],
        tools: responsesTools,
        max_output_tokens: 4,
      });
      assert.equal(first.object, "response");
      const fetched = await openai.responses.retrieve(first.id);
      assert.equal(fetched.id, first.id);
      const second = await openai.responses.create({
        model,
        previous_response_id: first.id,
        input: "And tomorrow?",
        max_output_tokens: 4,
      });
      assert.ok(
        second.usage!.input_tokens_details.cached_tokens > 0,
        "the thread's prefix is reused",
      );
      // The second response's thread holds the first one's input and output, then the new input.
      const items = await (await fetch(`${srv.url}/v1/responses/${second.id}/input_items`)).json();
      const types = items.data.map((i: { type?: string }) => i.type ?? "message");
      assert.deepEqual(types.slice(1, 3), ["function_call", "function_call_output"]);
      assert.ok(items.data.some((i: { id?: string }) => i.id === first.output[0].id));
      assert.equal(items.data.at(-1).content, "And tomorrow?");
      await assert.rejects(
        openai.responses.create({ model, previous_response_id: "resp_doesnotexist", input: "x" }),
        (e: unknown) => e instanceof OpenAI.NotFoundError,
      );
    },
  );

  await t.step("responses: text.format json_schema constrains the answer", async () => {
    const schema = {
      type: "object",
      properties: {
        answer: { enum: ["yes", "no"] },
        score: { type: "integer", minimum: 0, maximum: 9 },
      },
      required: ["answer", "score"],
      additionalProperties: false,
    };
    for (const seed of [1, 2]) {
      const r = await openai.responses.create({
        model,
        input: `Is it raining? (${seed})`,
        text: { format: { type: "json_schema", name: "verdict", schema, strict: true } },
        temperature: 1,
        max_output_tokens: 60,
      });
      assert.equal(r.status, "completed");
      const v = ajv.compile(schema);
      assert.ok(v(JSON.parse(r.output_text)), r.output_text);
    }
    const bad = await fetch(`${srv.url}/v1/responses`, {
      method: "POST",
      body: JSON.stringify({
        input: "x",
        text: {
          format: {
            type: "json_schema",
            name: "n",
            schema: { type: "string", minLength: 5, maxLength: 1 },
          },
        },
      }),
    });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.param, "text.format.schema");
  });

  await t.step("reasoning: a reply inside <think> comes back as thinking blocks", async () => {
    // A prefill that opens the family's think block: the reply continues inside it, so all
    // of it is reasoning (random weights never close it in 8 tokens).
    const req = {
      model: "hearth-local",
      max_tokens: 8,
      messages: [
        { role: "user" as const, content: "Why is the sky blue?" },
        { role: "assistant" as const, content: "<think>\nLet me see" },
      ],
    };
    const whole = await anthropic.messages.create(req);
    assert.equal(whole.content[0].type, "thinking");
    if (whole.content[0].type === "thinking") {
      assert.ok(whole.content[0].thinking.length > 0);
      assert.ok(whole.content[0].signature.length > 0);
    }
    assert.ok(!JSON.stringify(whole.content).includes("<think>"), "no marker leaks");
    const kinds: string[] = [];
    const stream = anthropic.messages.stream(req);
    stream.on("streamEvent", (ev) => {
      if (ev.type === "content_block_delta") kinds.push(ev.delta.type);
    });
    const final = await stream.finalMessage();
    assert.equal(final.content[0].type, "thinking");
    assert.ok(kinds.includes("thinking_delta"));
    assert.equal(kinds.at(-1), "signature_delta");
  });

  await t.step("bad tool definitions are 400s in each dialect's shape", async () => {
    // A schema no value satisfies is still a schema: the request is served, the contradiction
    // named (a call of the tool can never validate, so none is passed on as one).
    const contradictory = {
      type: "object",
      properties: { n: { type: "integer", minimum: 5, maximum: 1 } },
      required: ["n"],
    };
    const chat = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 4,
        tools: [{ type: "function", function: { name: "f", parameters: contradictory } }],
      }),
    });
    assert.equal(chat.status, 200);
    assert.match(
      chat.headers.get("x-hearth-checked-schema") ?? "",
      /^tools\[0\]\.function\.parameters#\/required/,
    );
    await chat.body?.cancel();
    const notSchema = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        tools: [{ type: "function", function: { name: "f", parameters: ["x"] } }],
      }),
    });
    assert.equal(notSchema.status, 400);
    const cj = await notSchema.json();
    assert.equal(cj.error.type, "invalid_request_error");
    assert.match(cj.error.param, /^tools\[0\]\.function/);
    const noName = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        tools: [{ type: "function", function: { parameters: weather } }],
      }),
    });
    assert.equal(noName.status, 400);
    const am = await fetch(`${srv.url}/v1/messages`, {
      method: "POST",
      body: JSON.stringify({
        model: "m",
        max_tokens: 4,
        messages: [{ role: "user", content: "hi" }],
        tools: [{ name: "bad name!", input_schema: weather }],
      }),
    });
    assert.equal(am.status, 400);
    const aj = await am.json();
    assert.equal(aj.type, "error");
    assert.equal(aj.error.type, "invalid_request_error");
    assert.match(aj.error.message, /tools\[0\]\.name/);
    const rs = await fetch(`${srv.url}/v1/responses`, {
      method: "POST",
      body: JSON.stringify({
        input: "hi",
        tools: [{ type: "function", name: "f", parameters: "nope" }],
      }),
    });
    assert.equal(rs.status, 400);
    assert.match((await rs.json()).error.param, /^tools\[0\]/);
    const unknownChoice = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        tools: openaiTools,
        tool_choice: { type: "function", function: { name: "nope" } },
      }),
    });
    assert.equal(unknownChoice.status, 400);
  });

  await t.step("hints, unknown fields and unrunnable tools are accepted and named", async () => {
    const r = await fetch(`${srv.url}/v1/messages?beta=true`, {
      method: "POST",
      headers: {
        "anthropic-beta": "interleaved-thinking-2025-05-14",
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({
        model: "hearth-local",
        max_tokens: 4,
        metadata: { user_id: '{"device":"x"}' },
        context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
        output_config: { effort: "high" },
        some_future_field: 1,
        tools: [
          ...anthropicTools,
          { type: "web_search_20250305", name: "web_search", max_uses: 3 },
        ],
        messages: [{
          role: "user",
          content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }],
        }],
      }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    const header = r.headers.get("x-hearth-ignored-fields") ?? "";
    for (
      const f of [
        "metadata",
        "context_management",
        "output_config",
        "some_future_field",
        "tools[2] (web_search_20250305)",
      ]
    ) {
      assert.ok(header.includes(f), `${f} named in ${header}`);
    }
    await r.body?.cancel();
    const c = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
        store: true,
        metadata: { a: "b" },
        prompt_cache_key: "k",
        tools: [{ type: "web_search" }],
      }),
    });
    assert.equal(c.status, 200);
    assert.match(
      c.headers.get("x-hearth-ignored-fields") ?? "",
      /store.*metadata.*prompt_cache_key.*tools\[0\] \(web_search\)/,
    );
    await c.body?.cancel();
  });
});

Deno.test("what Claude Code and Codex send is served (recorded requests)", async (t) => {
  await using srv = await startServer([
    "--model",
    await tinyModelPath(),
    "--max-seq-len",
    "24576",
    "--max-batch",
    "2",
    "--threads",
    "2",
    "--data-dir",
    testDataDir(),
  ]);
  const fixture = async (name: string) =>
    JSON.parse(await Deno.readTextFile(new URL(`./fixtures/clients/${name}`, import.meta.url)));

  await t.step(
    "Claude Code: 20+ tools, mid-conversation system, thinking; billing line does not defeat reuse",
    async () => {
      const rec = await fixture("claude-code-messages.json");
      const send = async (billing: string) => {
        const body = structuredClone(rec.body);
        body.max_tokens = 8;
        body.stream = false;
        body.system[0].text =
          `x-anthropic-billing-header: cc_version=2.1.330.${billing}; cc_entrypoint=sdk-cli;`;
        const r = await fetch(`${srv.url}${rec.path}`, {
          method: "POST",
          headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
          body: JSON.stringify(body),
        });
        const j = await r.json();
        assert.equal(r.status, 200, JSON.stringify(j));
        return j;
      };
      const a = await send("aaa");
      const b = await send("bbb");
      assert.ok(a.usage.input_tokens > 1000);
      assert.ok(
        b.usage.cache_read_input_tokens > a.usage.input_tokens * 0.9,
        `second request reuses the prefix: ${JSON.stringify(b.usage)}`,
      );
      assert.equal(
        b.usage.input_tokens + b.usage.cache_read_input_tokens,
        a.usage.input_tokens + a.usage.cache_read_input_tokens,
      );
    },
  );

  await t.step(
    "Codex: developer messages, namespace and web_search tools, reasoning, include",
    async () => {
      const rec = await fixture("codex-responses.json");
      const body = structuredClone(rec.body);
      body.model = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id;
      body.max_output_tokens = 8;
      const r = await fetch(`${srv.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
      assert.equal(r.status, 200);
      // The namespace tool is offered (flattened), so no tool is left out.
      assert.doesNotMatch(r.headers.get("x-hearth-ignored-fields") ?? "", /tools\[/);
      const text = await r.text();
      const types = [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
      assert.equal(types[0], "response.created");
      assert.ok(types.includes("response.output_item.done"));
      assert.ok(["response.completed", "response.incomplete"].includes(types.at(-1)!));
    },
  );
});
