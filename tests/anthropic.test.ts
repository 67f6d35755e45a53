// The Anthropic Messages API: the reply mapping over scripted engine events (stop reasons, stop
// sequences split across chunks, cancellation), then the routes over the tiny model in this
// process, driven by the official `@anthropic-ai/sdk` and by raw fetches (exact SSE framing,
// every bad input a 4xx in Anthropic's error shape, a disconnect freeing its sequence).
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import {
  anthropicConversation,
  anthropicStopReason,
  newBlockStream,
  stripBillingLine,
} from "../lib/chat/anthropic.ts";
import { type ChatEvent, type ChatPlan, chatReply } from "../lib/chat/generation.ts";
import { TOOL_FORMATS } from "../lib/chat/formats/mod.ts";
import { renderConversation, toTemplateMessages } from "../lib/chat/render.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import { type GenEvent, refusal } from "../lib/engine/scheduler.ts";
import { newServerState } from "../routes/state.ts";
import { specialSpellings } from "../lib/engine/tokens.ts";
import { anthropicRoutes } from "../routes/anthropic.ts";
import { createApp } from "../routes/app.ts";
import { inProcessState } from "./support/app.ts";

/** Scripted engine events; `closed()` tells whether the consumer closed the iterator. */
function script(events: GenEvent[]): { events: AsyncIterable<GenEvent>; closed: () => boolean } {
  let closed = false;
  async function* gen() {
    try {
      for (const ev of events) yield ev;
    } finally {
      closed = true;
    }
  }
  return { events: gen(), closed: () => closed };
}

// A plan without tools or reasoning: chatReply only reads its format and tools.
const plainPlan = {
  format: TOOL_FORMATS.generic,
  tools: [],
  reasoningOpen: false,
} as unknown as ChatPlan;

async function replyOf(events: AsyncIterable<GenEvent>): Promise<ChatEvent[]> {
  const out: ChatEvent[] = [];
  for await (const ev of chatReply(events, plainPlan)) out.push(ev);
  return out;
}

const done = (
  finishReason: "stop" | "length",
  completionTokens: number,
  stopString?: string,
): GenEvent => ({
  type: "done",
  finishReason,
  promptTokens: 10,
  cachedTokens: 4,
  completionTokens,
  ...(stopString !== undefined ? { stopString } : {}),
});

const end = (ev: ChatEvent | undefined) => {
  assert.equal(ev?.type, "end");
  return ev as Extract<ChatEvent, { type: "end" }>;
};

Deno.test("reply: end-of-generation is end_turn, length is max_tokens, with engine counts", async () => {
  const evs = await replyOf(script([{ type: "text", text: "Hi" }, done("stop", 3)]).events);
  assert.deepEqual(evs[0], { type: "text", text: "Hi" });
  const e = end(evs.at(-1));
  assert.equal(anthropicStopReason(e), "end_turn");
  assert.equal(e.completionTokens, 3);
  assert.equal(e.cachedTokens, 4);
  const long = await replyOf(script([{ type: "text", text: "a" }, done("length", 1)]).events);
  assert.equal(anthropicStopReason(end(long.at(-1))), "max_tokens");
});

Deno.test("reply: the engine's stop string becomes stop_sequence with exact counts", async () => {
  const s = script([{ type: "text", text: "abc " }, done("stop", 2, "END")]);
  const evs = await replyOf(s.events);
  const e = end(evs.at(-1));
  assert.equal(anthropicStopReason(e), "stop_sequence");
  assert.equal(e.stopString, "END");
  assert.equal(e.completionTokens, 2);
  assert.ok(s.closed(), "the engine iterator was closed");
});

Deno.test("reply: engine errors pass through", async () => {
  const failed = await replyOf(
    script([{ type: "text", text: "a" }, { type: "error", message: "boom" }]).events,
  );
  assert.deepEqual(failed.at(-1), { type: "error", message: "boom" });
});

Deno.test("conversation: system first, same-role turns merged, trailing assistant prefills", () => {
  const { conv } = anthropicConversation({
    system: [{ type: "text", text: "Be brief." }, { type: "text", text: "Be kind." }],
    messages: [
      { role: "user", content: "Hi" },
      { role: "user", content: [{ type: "text", text: "there" }] },
      { role: "system", content: "Mid-conversation note." },
      { role: "user", content: "More" },
      { role: "assistant", content: "The answer is " },
    ],
  });
  assert.deepEqual(toTemplateMessages(conv), [
    { role: "system", content: "Be brief.\nBe kind." },
    { role: "user", content: "Hi\n\nthere\n\nMid-conversation note.\n\nMore" },
    { role: "assistant", content: "The answer is " },
  ]);
  const t = compileTemplate(
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}" +
      "{% if add_generation_prompt %}[assistant]{% endif %}",
  );
  const r = renderConversation(t, TOOL_FORMATS.generic, {}, conv, {
    addGenerationPrompt: true,
    prefill: true,
  });
  assert.equal(r.prefill, "The answer is");
  assert.ok(r.text.endsWith("[assistant]The answer is"));
  // An image to a text-only model is a placeholder, never a refusal (it would break every later
  // turn of a session that resends its history).
  const withImage = anthropicConversation({
    messages: [{
      role: "user",
      content: [{ type: "text", text: "look:" }, { type: "image", source: {} }],
    }],
  }).conv;
  assert.deepEqual(withImage.turns[0].parts[1], {
    type: "image",
    source: "messages[0].content[1]",
  });
  assert.equal(
    toTemplateMessages(withImage)[0].content,
    "look:\n[image omitted: this model reads text only]",
  );
});

Deno.test("conversation: Claude Code's billing line is dropped from the system prompt", () => {
  assert.equal(
    stripBillingLine("x-anthropic-billing-header: cc_version=2.1.330.440; cch=abc;\nYou are"),
    "You are",
  );
  const { conv } = anthropicConversation({
    system: [
      { type: "text", text: "x-anthropic-billing-header: cc_version=1; cch=9;" },
      { type: "text", text: "Be brief." },
    ],
    messages: [{ role: "user", content: "Hi" }],
  });
  assert.deepEqual(conv.turns[0], { role: "system", parts: [{ type: "text", text: "Be brief." }] });
});

Deno.test("stream blocks: thinking (with signature), text, tool_use with input_json_delta", () => {
  const b = newBlockStream();
  const frames = [
    ...b.push({ type: "reasoning", text: "hmm" }),
    ...b.push({ type: "text", text: "Hi" }),
    ...b.push({ type: "tool_call_start", index: 0, id: "call_abc", name: "f" }),
    ...b.push({ type: "tool_call_args", index: 0, text: '{"a":' }),
    ...b.push({ type: "tool_call_args", index: 0, text: "1}" }),
    ...b.push({ type: "tool_call_end", index: 0, arguments: '{"a":1}' }),
    ...b.close(),
  ];
  const kinds = frames.map((f) =>
    f.event === "content_block_delta"
      ? `delta:${(f.data.delta as { type: string }).type}`
      : f.event === "content_block_start"
      ? `start:${(f.data.content_block as { type: string }).type}`
      : f.event
  );
  assert.deepEqual(kinds, [
    "start:thinking",
    "delta:thinking_delta",
    "delta:signature_delta",
    "content_block_stop",
    "start:text",
    "delta:text_delta",
    "content_block_stop",
    "start:tool_use",
    "delta:input_json_delta",
    "delta:input_json_delta",
    "content_block_stop",
  ]);
  assert.deepEqual(frames.map((f) => f.data.index).filter((i) => i !== undefined), [
    0,
    0,
    0,
    0,
    1,
    1,
    1,
    2,
    2,
    2,
    2,
  ]);
  const start = frames.find((f) => f.event === "content_block_start" && f.data.index === 2)!;
  assert.match((start.data.content_block as { id: string }).id, /^toolu_abc/);
});

// ---------------------------------------------------------------------------------------------
// Routes over the tiny model.

type Frame = { event: string; data: Record<string, unknown> };

function parseFrames(text: string): Frame[] {
  return text.split("\n\n").filter((b) => b.trim()).map((b) => {
    const m = b.match(/^event: ([a-z_]+)\ndata: (.*)$/s);
    assert.ok(m, `every frame is an event line then a data line: ${JSON.stringify(b)}`);
    const data = JSON.parse(m[2]);
    assert.equal(data.type, m[1], "the data's type names the event");
    return { event: m[1], data };
  });
}

function assertAnthropicError(
  res: { status: number; json: unknown },
  status: number,
  type: string,
  re: RegExp,
) {
  assert.equal(res.status, status, JSON.stringify(res.json));
  const body = res.json as { type: string; error: { type: string; message: string } };
  assert.equal(body.type, "error");
  assert.equal(body.error.type, type);
  assert.match(body.error.message, re);
}

Deno.test("anthropic routes with the official SDK and raw fetch", async (t) => {
  const state = await inProcessState();
  const engine = state.engine!;
  const app = createApp(state);
  // Until routes/app.ts mounts them itself.
  if (!app.routes.some((r) => r.path === "/v1/messages")) app.route("/", anthropicRoutes(state));
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
  const base = `http://127.0.0.1:${server.addr.port}`;
  const client = new Anthropic({ apiKey: "x", baseURL: base, maxRetries: 0 });
  // `temperature` is a real API field that this SDK version's types no longer list.
  const greedy = { temperature: 0 } as Record<string, unknown>;
  const hello = [{ role: "user" as const, content: "Hello there" }];

  const post = async (path: string, body: unknown, raw = false) => {
    const r = await fetch(`${base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: raw ? (body as string) : JSON.stringify(body),
    });
    const text = await r.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: r.status, json, text, headers: r.headers };
  };

  try {
    let greedyText = "";
    await t.step("messages.create: text, max_tokens, usage, model echoed", async () => {
      const msg = await client.messages.create({
        model: "claude-test-model",
        max_tokens: 12,
        messages: hello,
        ...greedy,
      });
      assert.match(msg.id, /^msg_[0-9a-f]{32}$/);
      assert.equal(msg.type, "message");
      assert.equal(msg.role, "assistant");
      assert.equal(msg.model, "claude-test-model");
      assert.equal(msg.content.length, 1);
      const block = msg.content[0];
      assert.equal(block.type, "text");
      greedyText = block.type === "text" ? block.text : "";
      assert.ok(greedyText.length > 0);
      assert.equal(msg.stop_reason, "max_tokens");
      assert.equal(msg.stop_sequence, null);
      assert.equal(msg.usage.output_tokens, 12);
      assert.equal(msg.usage.cache_creation_input_tokens, 0);
      const count = await client.messages.countTokens({ model: "any", messages: hello });
      assert.ok(count.input_tokens > 0);
      assert.equal(
        msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0),
        count.input_tokens,
      );
    });

    await t.step(
      "a repeated (cached) prompt counts as a cache read; the sum equals count_tokens",
      async () => {
        const msg = await client.messages.create({
          model: "m",
          max_tokens: 1,
          messages: hello,
          ...greedy,
        });
        const { input_tokens } = await client.messages.countTokens({ model: "m", messages: hello });
        assert.equal(
          msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0),
          input_tokens,
        );
        assert.ok(
          (msg.usage.cache_read_input_tokens ?? 0) > 0,
          "the earlier request's prefix is reused",
        );
      },
    );

    await t.step("stop_sequences: stops before the sequence and names it", async () => {
      // Greedy decoding gives the earlier reply again, so a piece of it is sure to come up.
      const stop = greedyText.slice(Math.floor(greedyText.length / 2)).slice(0, 3);
      const msg = await client.messages.create({
        model: "m",
        max_tokens: 12,
        messages: hello,
        stop_sequences: ["never-in-this-output-\u0000", stop],
        ...greedy,
      });
      const text = msg.content[0].type === "text" ? msg.content[0].text : "";
      assert.equal(msg.stop_reason, "stop_sequence");
      assert.equal(msg.stop_sequence, stop);
      assert.equal(text, greedyText.slice(0, greedyText.indexOf(stop)));
      assert.ok(msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 12);
    });

    await t.step("system as a string and as text blocks is the same prompt", async () => {
      const asString = await client.messages.countTokens({
        model: "m",
        system: "You are terse.",
        messages: hello,
      });
      const asBlocks = await client.messages.countTokens({
        model: "m",
        system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }],
        messages: hello,
      });
      const none = await client.messages.countTokens({ model: "m", messages: hello });
      assert.equal(asString.input_tokens, asBlocks.input_tokens);
      assert.ok(asString.input_tokens > none.input_tokens);
      const msg = await client.messages.create({
        model: "m",
        max_tokens: 2,
        system: [{ type: "text", text: "You are terse." }],
        messages: hello,
      });
      assert.equal(msg.usage.output_tokens, 2);
    });

    await t.step("a trailing assistant turn is continued, not followed", async () => {
      const conv = {
        messages: [...hello, { role: "assistant" as const, content: "The answer is" }],
      };
      const { text } = renderConversation(
        state.template!,
        TOOL_FORMATS.generic,
        specialSpellings(engine.model),
        anthropicConversation(conv).conv,
        { addGenerationPrompt: true, prefill: true },
      );
      assert.ok(
        text.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\nThe answer is"),
        JSON.stringify(text.slice(-80)),
      );
      const plain = await client.messages.countTokens({ model: "m", messages: hello });
      const prefilled = await client.messages.countTokens({ model: "m", ...conv });
      assert.ok(prefilled.input_tokens > plain.input_tokens);
      const msg = await client.messages.create({ model: "m", max_tokens: 3, ...conv });
      assert.equal(
        msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0),
        prefilled.input_tokens,
      );
      assert.equal(msg.stop_reason, "max_tokens");
    });

    await t.step("stream: true over raw SSE has the exact event order", async () => {
      const r = await fetch(`${base}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "claude-x",
          max_tokens: 12,
          messages: hello,
          stream: true,
          temperature: 0,
        }),
      });
      assert.equal(r.status, 200);
      assert.match(r.headers.get("content-type") ?? "", /^text\/event-stream/);
      const frames = parseFrames(await r.text());
      const names = frames.map((f) => f.event);
      const deltas = names.filter((n) => n === "content_block_delta").length;
      assert.ok(deltas > 0);
      assert.deepEqual(names, [
        "message_start",
        "ping",
        "content_block_start",
        ...Array(deltas).fill("content_block_delta"),
        "content_block_stop",
        "message_delta",
        "message_stop",
      ]);
      const start = frames[0].data.message as Record<string, unknown>;
      assert.equal(start.model, "claude-x");
      assert.deepEqual(start.content, []);
      assert.equal(start.stop_reason, null);
      assert.equal((start.usage as { output_tokens: number }).output_tokens, 0);
      assert.deepEqual(frames[2].data, {
        type: "content_block_start",
        index: 0,
        content_block: { type: "text", text: "" },
      });
      const text = frames.filter((f) => f.event === "content_block_delta").map((f) => {
        const d = f.data.delta as { type: string; text: string };
        assert.equal(d.type, "text_delta");
        assert.equal(f.data.index, 0);
        return d.text;
      }).join("");
      assert.equal(text, greedyText, "streamed and whole replies agree under greedy decoding");
      const delta = frames.at(-2)!.data;
      assert.deepEqual(delta.delta, { stop_reason: "max_tokens", stop_sequence: null });
      assert.equal((delta.usage as { output_tokens: number }).output_tokens, 12);
    });

    await t.step("messages.stream(...).finalMessage() and create({stream: true})", async () => {
      const seen: string[] = [];
      const stream = client.messages.stream({
        model: "m",
        max_tokens: 12,
        messages: hello,
        ...greedy,
      });
      stream.on("text", (t) => seen.push(t));
      const msg = await stream.finalMessage();
      const text = msg.content[0].type === "text" ? msg.content[0].text : "";
      assert.equal(text, greedyText);
      assert.equal(seen.join(""), greedyText);
      assert.equal(msg.stop_reason, "max_tokens");
      assert.equal(msg.usage.output_tokens, 12);
      const count = await client.messages.countTokens({ model: "m", messages: hello });
      assert.equal(
        msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0),
        count.input_tokens,
      );

      const events = await client.messages.create({
        model: "m",
        max_tokens: 4,
        messages: hello,
        stream: true,
        stop_sequences: [greedyText.slice(2, 5)],
        ...greedy,
      });
      const types: string[] = [];
      let stopReason: string | null = null;
      for await (const ev of events) {
        types.push(ev.type);
        if (ev.type === "message_delta") stopReason = ev.delta.stop_reason;
      }
      assert.equal(types[0], "message_start");
      assert.equal(types.at(-1), "message_stop");
      assert.equal(stopReason, "stop_sequence");
    });

    await t.step("bad requests are 4xx in Anthropic's error shape", async () => {
      const ok = { model: "m", max_tokens: 4, messages: hello };
      const cases: [unknown, RegExp][] = [
        [{ model: "m", messages: hello }, /max_tokens: is required/],
        [{ ...ok, max_tokens: 0 }, /max_tokens/],
        [{ ...ok, messages: [{ role: "robot", content: "x" }] }, /messages\[0\]\.role/],
        [{ ...ok, messages: [] }, /messages/],
        [
          { ...ok, messages: [{ role: "user", content: [{ type: "tool_result", x: 1 }] }] },
          /tool_use_id/,
        ],
        [{ ...ok, temperature: 2 }, /temperature/],
        [{ ...ok, tools: [{ name: "f" }] }, /tools\[0\]\.input_schema/],
        [{ ...ok, tool_choice: { type: "tool", name: "nope" } }, /tool_choice/],
        [{ ...ok, thinking: { type: "enabled", budget_tokens: -1 } }, /thinking/],
        [{ ...ok, system: [{ type: "image" }] }, /system\[0\]/],
        [{ ...ok, stop_sequences: [""] }, /stop_sequences/],
        [
          { ...ok, messages: [{ role: "user", content: "hello ".repeat(2100) }] },
          /^prompt is too long: \d+ tokens > 2048 maximum$/,
        ],
      ];
      for (const [body, re] of cases) {
        assertAnthropicError(await post("/v1/messages", body), 400, "invalid_request_error", re);
      }
      assertAnthropicError(
        await post("/v1/messages", "{not json", true),
        400,
        "invalid_request_error",
        /not valid JSON/,
      );
      // A field count_tokens does not use is accepted and named, never refused.
      const extra = await app.request("/v1/messages/count_tokens", {
        method: "POST",
        body: JSON.stringify({ model: "m", messages: hello, max_tokens: 3 }),
      });
      assert.equal(extra.status, 200);
      assert.equal(extra.headers.get("x-hearth-ignored-fields"), "max_tokens");
      await extra.body?.cancel();
      // The no-op forms of not-yet-supported features pass.
      const noop = await post("/v1/messages", {
        ...ok,
        tools: [],
        tool_choice: { type: "auto" },
        thinking: { type: "disabled" },
        metadata: { user_id: "u1" },
        service_tier: "auto",
      });
      assert.equal(noop.status, 200, noop.text);
      // And through the SDK, a 400 is its BadRequestError carrying the shape.
      await assert.rejects(
        client.messages.create({ model: "m", max_tokens: 4, messages: [] }),
        (e: unknown) => {
          assert.ok(e instanceof Anthropic.BadRequestError);
          assert.equal(e.status, 400);
          assert.equal(
            (e.error as { error: { type: string } }).error.type,
            "invalid_request_error",
          );
          return true;
        },
      );
    });

    await t.step("oversized body is 413, a loading model is 529", async () => {
      const big = await app.request("/v1/messages", {
        method: "POST",
        body: new ReadableStream({
          start(c) {
            const chunk = new Uint8Array(1024 * 1024).fill(32);
            for (let i = 0; i < 33; i++) c.enqueue(chunk);
            c.close();
          },
        }),
      });
      assertAnthropicError(
        { status: big.status, json: await big.json() },
        413,
        "request_too_large",
        /larger than/,
      );
      const loading = anthropicRoutes(newServerState("later"));
      const bodies: [string, unknown][] = [
        ["/v1/messages", { model: "m", max_tokens: 4, messages: hello }],
        ["/v1/messages/count_tokens", { model: "m", messages: hello }],
      ];
      for (const [path, body] of bodies) {
        const r = await loading.request(path, { method: "POST", body: JSON.stringify(body) });
        const res = { status: r.status, json: await r.json() };
        assertAnthropicError(res, 529, "overloaded_error", /loading/);
      }
    });

    await t.step("scripted engine: end_turn, errors mid-stream and not, busy", async () => {
      let script_: GenEvent[] | "busy" = [];
      const fake = newServerState("fake");
      fake.template = state.template;
      fake.engine = {
        ...engine,
        submit: () => {
          if (script_ === "busy") throw refusal("busy", "the queue is full (9 requests waiting)");
          return script(script_).events;
        },
      };
      const routes = anthropicRoutes(fake);
      const call = async (body: Record<string, unknown>) => {
        const r = await routes.request("/v1/messages", {
          method: "POST",
          body: JSON.stringify({ model: "m", max_tokens: 8, messages: hello, ...body }),
        });
        return { status: r.status, text: await r.text(), headers: r.headers };
      };
      script_ = [{ type: "text", text: "Done." }, done("stop", 2)];
      const whole = await call({});
      assert.equal(whole.status, 200);
      const msg = JSON.parse(whole.text);
      assert.equal(msg.stop_reason, "end_turn");
      assert.deepEqual(msg.content, [{ type: "text", text: "Done." }]);
      const counted = await routes.request("/v1/messages/count_tokens", {
        method: "POST",
        body: JSON.stringify({ model: "m", messages: hello }),
      });
      const { input_tokens } = await counted.json();
      // The scripted engine reports 10 prompt tokens, 4 of them reused: Anthropic counts the
      // computed part as input and the reused part as a cache read.
      assert.ok(input_tokens > 0);
      assert.deepEqual(msg.usage, {
        input_tokens: 6,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 4,
        output_tokens: 2,
      });
      script_ = [{ type: "text", text: "par" }, { type: "error", message: "no room left" }];
      const failed = await call({});
      assertAnthropicError(
        { status: failed.status, json: JSON.parse(failed.text) },
        500,
        "api_error",
        /generation failed: no room left/,
      );
      const streamed = parseFrames((await call({ stream: true })).text);
      assert.deepEqual(streamed.map((f) => f.event), [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "error",
      ]);
      assert.deepEqual(streamed.at(-1)!.data, {
        type: "error",
        error: { type: "api_error", message: "generation failed: no room left" },
      });
      script_ = "busy";
      const busy = await call({});
      assertAnthropicError(
        { status: busy.status, json: JSON.parse(busy.text) },
        529,
        "overloaded_error",
        /queue is full/,
      );
      assert.equal(busy.headers.get("retry-after"), "1");
    });

    await t.step("a client that disconnects mid-stream frees its sequence", async () => {
      const ac = new AbortController();
      const r = await fetch(`${base}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        // Greedy: a sampled reply could end (EOS) before the check below sees it running.
        body: JSON.stringify({
          model: "m",
          max_tokens: 1500,
          messages: hello,
          stream: true,
          temperature: 0,
        }),
        signal: ac.signal,
      });
      const reader = r.body!.getReader();
      let got = "";
      const dec = new TextDecoder();
      while (!got.includes("content_block_delta")) {
        got += dec.decode((await reader.read()).value, { stream: true });
      }
      assert.equal(engine.stats().running, 1);
      ac.abort();
      await reader.cancel().catch(() => {});
      await engine.idle();
      assert.equal(engine.stats().running, 0);
      assert.equal(engine.stats().waiting, 0);
    });

    await t.step("the server still answers afterwards", async () => {
      const msg = await client.messages.create({ model: "m", max_tokens: 2, messages: hello });
      assert.equal(msg.usage.output_tokens, 2);
    });
  } finally {
    await server.shutdown();
  }
});
