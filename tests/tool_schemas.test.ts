// Tool schemas as real clients send them, against a real server on the tiny hermes model: every
// tool set of the corpus (tests/fixtures/tools/) is served in all three dialects (never a 400),
// what the grammar relaxes is named in x-hearth-relaxed-schema / x-hearth-checked-schema, the
// issue's path schema (a pattern beside maxLength 100000) gets valid forced calls, a required
// call that breaks a checked keyword is drawn again until it validates, and one that cannot be
// made valid is reported as text in each dialect's own shape, never passed on as a call.
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import { chatFormatModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { loadToolCorpus } from "./support/tool_corpus.ts";

const ajv = new Ajv2020({ strict: false });

Deno.test("tool schemas of real agents, served by a real server", async (t) => {
  await using srv = await startServer([
    "--model",
    await chatFormatModelPath("hermes", { replyLength: 40 }),
    "--max-batch",
    "2",
    "--max-seq-len",
    "32768",
    "--threads",
    "2",
    // Dropped requests leave between decode steps: a queue deep enough for them all.
    "--max-queue",
    "256",
  ]);
  const openai = new OpenAI({ apiKey: "x", baseURL: `${srv.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: "x", baseURL: srv.url, maxRetries: 0 });
  const model = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id as string;

  await t.step("every corpus tool set is served in all three dialects", async () => {
    for (const set of await loadToolCorpus()) {
      const post = async (path: string, body: Record<string, unknown>) => {
        // Streamed: the status comes once the turn is planned (its grammar built); the prompt of
        // a large tool set need not be computed for that, so the request is dropped then.
        const stop = new AbortController();
        const r = await fetch(`${srv.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ...body, stream: true }),
          signal: stop.signal,
        });
        const status = r.status;
        const headers = r.headers;
        const text = status === 200 ? "" : await r.text();
        stop.abort();
        assert.equal(status, 200, `${path} ${set.file}: ${text}`);
        return { status, headers };
      };
      const fn = set.tools.map((x) => ({
        name: x.name,
        description: x.description,
        schema: x.inputSchema,
      }));
      const chat = await post("/v1/chat/completions", {
        model,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 1,
        tools: fn.map((f) => ({
          type: "function",
          function: { name: f.name, description: f.description, parameters: f.schema },
        })),
      });
      const messages = await post("/v1/messages", {
        model,
        max_tokens: 1,
        messages: [{ role: "user", content: "hi" }],
        tools: fn.map((f) => ({
          name: f.name,
          description: f.description,
          input_schema: f.schema,
        })),
      });
      await post("/v1/responses", {
        model,
        input: "hi",
        max_output_tokens: 16,
        tools: fn.map((f) => ({ type: "function", name: f.name, parameters: f.schema })),
      });
      if (set.file === "notion.json") {
        // `format: "json"` is no format anyone checks: named, not enforced.
        assert.match(
          chat.headers.get("x-hearth-relaxed-schema") ?? "",
          /\.function\.parameters#\/properties\/(icon|cover)\/format/,
        );
        assert.match(
          messages.headers.get("x-hearth-relaxed-schema") ?? "",
          /\.input_schema#\/properties\/(icon|cover)\/format/,
        );
      }
    }
  });

  await t.step("a path with a pattern and maxLength 100000: forced calls validate", async () => {
    const schema = {
      type: "object",
      properties: { path: { type: "string", pattern: "^(/[^/ ]*)+/?$", maxLength: 100000 } },
      required: ["path"],
      additionalProperties: false,
    };
    const valid = ajv.compile(schema);
    for (const seed of [1, 2]) {
      const r = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Open it." }],
        tools: [{ type: "function", function: { name: "open", parameters: schema } }],
        tool_choice: "required",
        temperature: 1,
        seed,
        max_tokens: 400,
      });
      const call = r.choices[0].message.tool_calls?.[0];
      assert.ok(call?.type === "function", JSON.stringify(r.choices[0]));
      const args = JSON.parse(call.function.arguments);
      assert.ok(valid(args), `${call.function.arguments}: ${ajv.errorsText(valid.errors)}`);
    }
  });

  await t.step("a required call that breaks a checked keyword is drawn again", async () => {
    // oneOf branches that overlap on 3..5: the grammar writes 0..9, the check refuses 3..5.
    const schema = {
      type: "object",
      properties: {
        n: {
          oneOf: [
            { type: "integer", minimum: 0, maximum: 5 },
            { type: "integer", minimum: 3, maximum: 9 },
          ],
        },
      },
      required: ["n"],
      additionalProperties: false,
    };
    const valid = ajv.compile(schema);
    const seen = new Set<number>();
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await fetch(`${srv.url}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({
          model,
          messages: [{ role: "user", content: "Pick." }],
          tools: [{ type: "function", function: { name: "pick", parameters: schema } }],
          tool_choice: "required",
          temperature: 1,
          seed,
          max_tokens: 64,
        }),
      });
      assert.equal(r.status, 200);
      assert.match(
        r.headers.get("x-hearth-checked-schema") ?? "",
        /parameters#\/properties\/n\/oneOf/,
      );
      const body = await r.json();
      const call = body.choices[0].message.tool_calls?.[0];
      assert.ok(call, JSON.stringify(body));
      const args = JSON.parse(call.function.arguments);
      assert.ok(valid(args), call.function.arguments);
      seen.add((args as { n: number }).n);
    }
    assert.ok(seen.size > 1, `the draws differ: ${[...seen]}`);
  });

  await t.step("a call no draw can make valid is reported as text in each dialect", async () => {
    // The grammar can only write ["a", "a"]; uniqueItems (checked after) refuses it every time.
    const schema = {
      type: "object",
      properties: {
        tags: {
          type: "array",
          items: { enum: ["a"] },
          minItems: 2,
          maxItems: 2,
          uniqueItems: true,
        },
      },
      required: ["tags"],
      additionalProperties: false,
    };
    const broken = /not a valid call of tag: \/tags must NOT have duplicate items/;
    const chat = await openai.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Tag it." }],
      tools: [{ type: "function", function: { name: "tag", parameters: schema } }],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_tokens: 400,
    });
    assert.equal(chat.choices[0].message.tool_calls, undefined);
    assert.match(chat.choices[0].message.content ?? "", broken);
    assert.equal(chat.choices[0].finish_reason, "stop");

    const stream = await openai.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Tag it." }],
      tools: [{ type: "function", function: { name: "tag", parameters: schema } }],
      tool_choice: { type: "function", function: { name: "tag" } },
      max_tokens: 400,
      stream: true,
    });
    let content = "";
    let calls = 0;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? "";
      calls += chunk.choices[0]?.delta.tool_calls?.length ?? 0;
    }
    assert.equal(calls, 0);
    assert.match(content, broken);

    const msg = await anthropic.messages.create({
      model,
      max_tokens: 400,
      messages: [{ role: "user", content: "Tag it." }],
      tools: [{ name: "tag", input_schema: schema as Anthropic.Tool.InputSchema }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      thinking: { type: "disabled" },
    });
    assert.equal(msg.stop_reason, "end_turn");
    assert.ok(msg.content.every((b) => b.type !== "tool_use"));
    assert.match(msg.content.map((b) => (b.type === "text" ? b.text : "")).join(""), broken);

    const resp = await openai.responses.create({
      model,
      input: "Tag it.",
      tools: [{ type: "function", name: "tag", parameters: schema, strict: true }],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_output_tokens: 400,
      store: false,
    });
    assert.ok(resp.output.every((o) => o.type !== "function_call"));
    assert.match(resp.output_text, broken);
  });
});
