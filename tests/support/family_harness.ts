/**
 * The tests every model family of the agent formats runs against its real template, on the tiny
 * model: a forced call in the family's own syntax, the open-think path, a tool round trip through
 * the template, a call written inside reasoning, and forced calls in all three dialects with the
 * official SDKs. `tests/formats_families_*.test.ts` give their cases and call `familyTests`.
 *
 * @example
 * ```ts
 * import { familyTests } from "./family_harness.ts";
 * declare const c: import("./family_harness.ts").FamilyCase;
 * declare const ctx: import("./family_harness.ts").FamilyContext;
 * declare const template: import("../../lib/chat/template.ts").CompiledTemplate;
 * familyTests(c, template, ctx);
 * ```
 * @module
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Conversation, ToolSpec } from "../../lib/chat/conversation.ts";
import { detectToolFormat, type ToolFamily } from "../../lib/chat/formats/mod.ts";
import { chatReply, collectReply, planChat } from "../../lib/chat/generation.ts";
import type { CompiledTemplate } from "../../lib/chat/template.ts";
import type { EngineModel } from "../../lib/engine/model.ts";
import { defaultSampling } from "../../lib/engine/sampling.ts";
import type { GenEvent } from "../../lib/engine/scheduler.ts";
import type { WorkerEngine } from "../../lib/engine/worker_host.ts";
import { createApp } from "../../routes/app.ts";
import { newServerState } from "../../routes/state.ts";

export type FamilyCase = {
  label: string;
  file: string;
  family: ToolFamily;
  /** The raw text of a forced reply (after any reasoning) in the family's own syntax. */
  syntax: RegExp;
  /** Template variables that make the generation prompt end inside an open think block. */
  openThink?: Record<string, unknown>;
  /** Template variables that close it (or leave it out). */
  closedThink?: Record<string, unknown>;
  /** A get_weather call (Paris, celsius) as the model writes it. */
  call: string;
  /** What the template renders of a tool round trip (the call, then its result). */
  rendered: string[];
  /** Whether the template passes reasoning back on a turn with tool calls. */
  keepsReasoning: boolean;
};

/** Engine events replaying `chunks` (what the model wrote), then the end of generation. */
export async function* replay(chunks: string[]): AsyncGenerator<GenEvent> {
  for (const text of chunks) yield { type: "text", text };
  yield {
    type: "done",
    finishReason: "stop",
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
  };
}

// ---------------------------------------------------------------- the tiny model, real templates

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
          sku: { enum: ["ABC-12", "XYZ-99"] },
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
export const SCHEMAS: Record<string, Record<string, unknown>> = {
  get_weather: weather,
  place_order: order,
};
export const TOOLS: ToolSpec[] = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  name,
  description: `The ${name} tool`,
  parameters,
}));
const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(
  Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]),
);

export function assertValidCall(name: string, args: string, where: string): void {
  const v = validators[name];
  assert.ok(v, `${where}: unknown tool ${name}`);
  const parsed = JSON.parse(args);
  assert.ok(v(parsed), `${where}: ${args} fails the schema: ${ajv.errorsText(v.errors)}`);
}

export function appFor(engine: WorkerEngine, template: CompiledTemplate) {
  const state = newServerState("hearth-tiny");
  state.threads = 1;
  state.engine = engine;
  state.template = template;
  const app = createApp(state);
  const fetch = (input: string | URL | Request, init?: RequestInit) =>
    Promise.resolve(app.fetch(new Request(input, init)));
  return {
    openai: new OpenAI({ apiKey: "x", baseURL: "http://hearth.test/v1", maxRetries: 0, fetch }),
    anthropic: new Anthropic({ apiKey: "x", baseURL: "http://hearth.test", maxRetries: 0, fetch }),
  };
}

/**
 * `chat_template_kwargs` (a llama.cpp / vLLM extension) closing the think block, so only the
 * Responses calls below, which cannot send it, take the open-think path over HTTP.
 */
export function thinkOff(c: { closedThink?: Record<string, unknown> }): object {
  return c.closedThink ? { chat_template_kwargs: c.closedThink } : {};
}

export function conversation(toolChoice: Conversation["toolChoice"]): Conversation {
  return {
    turns: [
      { role: "system", parts: [{ type: "text", text: "You are terse." }] },
      { role: "user", parts: [{ type: "text", text: "Weather in Paris? Order two apples." }] },
    ],
    tools: TOOLS,
    toolChoice,
    parallelToolCalls: false,
  };
}

/** Longest reply a forced call may take on the random model. */
export const FAMILY_MAX_TOKENS = 900;

export type FamilyContext = { model: EngineModel; engine: WorkerEngine; markers: RegExp };

/** Registers the shared tests of one family case. */
export function familyTests(c: FamilyCase, template: CompiledTemplate, ctx: FamilyContext): void {
  const { model, engine } = ctx;
  const MARKERS = ctx.markers;
  const MAX_TOKENS = FAMILY_MAX_TOKENS;
  const appForTemplate = (t: CompiledTemplate) => appFor(engine, t);

  Deno.test(`${c.label}: a forced call, raw text in the family's own syntax`, async () => {
    for (const [seed, extra] of [[1, c.closedThink ?? {}], [2, c.openThink ?? {}]] as const) {
      const plan = planChat(
        model,
        template,
        conversation(seed === 1 ? { type: "required" } : { type: "tool", name: "place_order" }),
        {
          sampling: { ...defaultSampling(), temperature: 1, seed },
          stop: [],
          ignoreEos: false,
          maxTokens: MAX_TOKENS,
        },
        { addGenerationPrompt: true, extra },
      );
      const events: GenEvent[] = [];
      for await (const ev of engine.submit(plan.req)) events.push(ev);
      const raw = events.map((e) => (e.type === "text" ? e.text : "")).join("");
      // A reply that starts inside reasoning closes it before the call.
      const end = plan.format.reasoning?.end ?? "";
      const call = plan.reasoningOpen ? raw.slice(raw.indexOf(end) + end.length).trim() : raw;
      if (plan.reasoningOpen) assert.ok(raw.includes(end), `${c.label}: ${raw}`);
      assert.match(call, c.syntax, `${c.label} seed ${seed}: ${JSON.stringify(raw)}`);
      const again = (async function* () {
        yield* events;
      })();
      const reply = await collectReply(chatReply(again, plan));
      assert.equal(reply.end?.finishReason, "tool_calls", `${c.label}: ${JSON.stringify(raw)}`);
      assert.equal(reply.text, "", `${c.label}: no text beside a forced call`);
      assert.ok(reply.calls.length >= 1);
      for (const k of reply.calls) assertValidCall(k.name, k.arguments, `${c.label} raw`);
      if (seed === 2) assert.equal(reply.calls[0].name, "place_order");
    }
  });

  if (c.openThink) {
    Deno.test(`${c.label}: the generation prompt opens <think>, the forced call comes back`, () => {
      const plan = planChat(
        model,
        template,
        conversation({ type: "required" }),
        { sampling: defaultSampling(), stop: [], ignoreEos: false },
        { addGenerationPrompt: true, extra: c.openThink },
      );
      assert.ok(plan.reasoningOpen, `${c.label}: ${JSON.stringify(plan.text.slice(-40))}`);
      // The grammar lets the model close its reasoning before the call.
      assert.match(plan.req.grammar!, /^root ::= reasoning-before-call "<\/think>"/);
    });
  }

  Deno.test(`${c.label}: a tool round trip renders through the real template`, async () => {
    const conv: Conversation = {
      ...conversation({ type: "auto" }),
      turns: [
        ...conversation({ type: "auto" }).turns,
        {
          role: "assistant",
          parts: [
            { type: "reasoning", text: "checked the map" },
            {
              type: "tool_call",
              id: "call_1",
              name: "get_weather",
              arguments: '{"city":"Paris","unit":"celsius"}',
            },
          ],
        },
        {
          role: "tool",
          parts: [{ type: "tool_result", callId: "call_1", content: "sunny, 21 C" }],
        },
      ],
    };
    const plan = planChat(
      model,
      template,
      conv,
      { sampling: { ...defaultSampling(), seed: 5 }, stop: [], ignoreEos: false, maxTokens: 40 },
      { addGenerationPrompt: true, extra: c.closedThink },
    );
    let at = 0;
    for (const piece of c.rendered) {
      const i = plan.text.indexOf(piece, at);
      assert.ok(i >= 0, `${c.label}: ${JSON.stringify(piece)} in ${JSON.stringify(plan.text)}`);
      at = i + piece.length;
    }
    assert.equal(plan.text.includes("checked the map"), c.keepsReasoning, c.label);
    // The offered tools reach the prompt, rendered by the template or by Hearth for it.
    assert.ok(plan.text.includes("place_order"), c.label);
    const reply = await collectReply(chatReply(engine.submit(plan.req), plan));
    assert.equal(reply.error, undefined);
    assert.ok(reply.end, c.label);
    assert.ok(!MARKERS.test(reply.text), `${c.label}: ${reply.text}`);
  });

  Deno.test(`${c.label}: a call written inside the reasoning is still a call`, async () => {
    const f = detectToolFormat(template.source);
    if (!f.reasoning) return;
    const plan = planChat(
      model,
      template,
      conversation({ type: "auto" }),
      { sampling: defaultSampling(), stop: [], ignoreEos: false },
      { addGenerationPrompt: true, extra: c.openThink ?? c.closedThink },
    );
    const text = (plan.reasoningOpen ? "" : f.reasoning.start) + "\nI should look. " + c.call +
      " Then answer." + f.reasoning.end + "Done.";
    for (const size of [text.length, 5]) {
      const chunks = [];
      for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
      const reply = await collectReply(chatReply(replay(chunks), plan));
      assert.equal(reply.end?.finishReason, "tool_calls", `${c.label} chunks of ${size}`);
      assert.deepEqual(
        reply.calls.map((k) => [k.name, JSON.parse(k.arguments)]),
        [["get_weather", { city: "Paris", unit: "celsius" }]],
      );
      // Layout around a call is dropped, in reasoning as in text.
      assert.equal(reply.reasoning, "I should look.Then answer.", c.label);
      assert.equal(reply.text, "Done.");
    }
  });

  Deno.test(`${c.label}: forced calls validate in all three dialects`, async () => {
    const { openai, anthropic } = appForTemplate(template);
    const user = "What is the weather in Paris, and order two apples?";
    const openaiTools = TOOLS.map((t) => ({
      type: "function" as const,
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
    const checkContent = (text: string | null | undefined, where: string) =>
      assert.ok(!MARKERS.test(text ?? ""), `${where}: marker text in content: ${text}`);

    const anthropicTools = TOOLS.map((t) => ({
      name: t.name,
      description: t.description,
      input_schema: t.parameters as Anthropic.Tool.InputSchema,
    }));
    const responsesTools = TOOLS.map((t) => ({
      type: "function" as const,
      name: t.name,
      description: t.description,
      parameters: t.parameters,
      strict: true,
    }));
    await Promise.all([
      async () => {
        const chat = await openai.chat.completions.create({
          model: "hearth-tiny",
          messages: [{ role: "user", content: user }],
          tools: openaiTools,
          tool_choice: "required",
          parallel_tool_calls: false,
          temperature: 1,
          seed: 3,
          ...thinkOff(c),
          max_tokens: MAX_TOKENS,
        });
        const choice = chat.choices[0];
        assert.equal(choice.finish_reason, "tool_calls", `${c.label} chat`);
        checkContent(choice.message.content, `${c.label} chat`);
        for (const k of choice.message.tool_calls ?? []) {
          if (k.type !== "function") continue;
          assertValidCall(k.function.name, k.function.arguments, `${c.label} chat`);
        }
        assert.ok(choice.message.tool_calls?.length);
      },
      async () => {
        const stream = await openai.chat.completions.create({
          model: "hearth-tiny",
          messages: [{ role: "user", content: user }],
          tools: openaiTools,
          tool_choice: { type: "function", function: { name: "get_weather" } },
          temperature: 1,
          seed: 4,
          ...thinkOff(c),
          max_tokens: MAX_TOKENS,
          stream: true,
        });
        const args = new Map<number, { name: string; args: string }>();
        let finish: string | null = null;
        let content = "";
        for await (const chunk of stream) {
          const ch = chunk.choices[0];
          if (!ch) continue;
          content += ch.delta.content ?? "";
          for (const d of ch.delta.tool_calls ?? []) {
            const have = args.get(d.index) ?? { name: d.function?.name ?? "", args: "" };
            have.args += d.function?.arguments ?? "";
            args.set(d.index, have);
          }
          finish = ch.finish_reason ?? finish;
        }
        assert.equal(finish, "tool_calls", `${c.label} chat stream`);
        assert.equal(content, "", `${c.label} chat stream: no text beside a forced call`);
        assert.equal(args.size, 1);
        for (const k of args.values()) {
          assert.equal(k.name, "get_weather");
          assertValidCall(k.name, k.args, `${c.label} chat stream`);
        }
      },
      async () => {
        const msg = await anthropic.messages.create({
          model: "hearth-tiny",
          max_tokens: MAX_TOKENS,
          messages: [{ role: "user", content: user }],
          tools: anthropicTools,
          tool_choice: { type: "any", disable_parallel_tool_use: true },
          ...(c.closedThink ? { thinking: { type: "disabled" as const } } : {}),
        });
        assert.equal(msg.stop_reason, "tool_use", `${c.label} anthropic`);
        for (const b of msg.content) {
          if (b.type === "text") checkContent(b.text, `${c.label} anthropic`);
          if (b.type === "tool_use") {
            assertValidCall(b.name, JSON.stringify(b.input), `${c.label} anthropic`);
          }
        }
      },
      async () => {
        const astream = anthropic.messages.stream({
          model: "hearth-tiny",
          max_tokens: MAX_TOKENS,
          messages: [{ role: "user", content: user }],
          tools: anthropicTools,
          tool_choice: { type: "tool", name: "place_order" },
          ...(c.closedThink ? { thinking: { type: "disabled" as const } } : {}),
        });
        let partial = "";
        astream.on("inputJson", (delta) => (partial += delta));
        const final = await astream.finalMessage();
        assert.equal(final.stop_reason, "tool_use", `${c.label} anthropic stream`);
        assertValidCall("place_order", partial, `${c.label} anthropic stream`);
      },
      async () => {
        const resp = await openai.responses.create({
          model: "hearth-tiny",
          input: user,
          tools: responsesTools,
          tool_choice: "required",
          parallel_tool_calls: false,
          temperature: 1,
          max_output_tokens: MAX_TOKENS,
          store: false,
        });
        const fcs = resp.output.filter((o) => o.type === "function_call");
        assert.ok(fcs.length >= 1, `${c.label} responses`);
        for (const o of resp.output) {
          if (o.type === "function_call") {
            assertValidCall(o.name, o.arguments, `${c.label} responses`);
          }
          if (o.type === "message") {
            for (const p of o.content) if (p.type === "output_text") checkContent(p.text, c.label);
          }
        }
      },
      async () => {
        const rstream = await openai.responses.create({
          model: "hearth-tiny",
          input: user,
          tools: responsesTools,
          tool_choice: { type: "function", name: "get_weather" },
          temperature: 1,
          max_output_tokens: MAX_TOKENS,
          stream: true,
          store: false,
        });
        let rargs = "";
        let done: OpenAI.Responses.Response | undefined;
        for await (const ev of rstream) {
          if (ev.type === "response.function_call_arguments.delta") rargs += ev.delta;
          if (ev.type === "response.output_text.delta") checkContent(ev.delta, c.label);
          if (ev.type === "response.completed") done = ev.response;
        }
        const fc = done?.output.find((o) => o.type === "function_call");
        assert.ok(fc && fc.type === "function_call", `${c.label} responses stream`);
        assert.equal(fc.arguments, rargs);
        assertValidCall(fc.name, rargs, `${c.label} responses stream`);
      },
    ].map((f) => f()));
  });
}
