/**
 * Forced calls of a tool-call family over HTTP, through the official SDKs: Chat Completions,
 * Anthropic Messages and Responses, streamed and not, six requests at once (the scheduler batches
 * them). Each call is checked by ajv, and no marker text of the family may reach the content.
 *
 * @example
 * ```ts ignore
 * import { appFor, dialectsTest } from "./family_dialects.ts";
 * dialectsTest(c, template, { model, engine, markers: /<tool_call>/ });
 * const { openai } = appFor(engine, template); // the server in process, no socket
 * ```
 * @module
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { CompiledTemplate } from "../../lib/chat/template.ts";
import type { WorkerEngine } from "../../lib/engine/worker_host.ts";
import { createApp } from "../../routes/app.ts";
import { newServerState } from "../../routes/state.ts";
import type { FamilyCase, FamilyContext } from "./family_harness.ts";
import { assertValidCall, FAMILY_MAX_TOKENS, TOOLS } from "./family_tools.ts";

/** The app serving `engine` through `template`, and the SDK clients that reach it. */
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

/** Registers the test of forced calls in the three dialects (ignored if `c.dialects` is false). */
export function dialectsTest(
  c: Pick<FamilyCase, "label" | "closedThink" | "dialects">,
  template: CompiledTemplate,
  ctx: Pick<FamilyContext, "engine" | "markers" | "maxTokens">,
): void {
  const MARKERS = ctx.markers;
  const MAX_TOKENS = ctx.maxTokens ?? FAMILY_MAX_TOKENS;
  Deno.test({
    name: `${c.label}: forced calls validate in all three dialects, streamed and not`,
    ignore: c.dialects === false,
  }, async () => {
    const { openai, anthropic } = appFor(ctx.engine, template);
    const user = "What is the weather in Paris, and order two apples?";
    const checkContent = (text: string | null | undefined, where: string) =>
      assert.ok(!MARKERS.test(text ?? ""), `${where}: marker text in content: ${text}`);
    const openaiTools = TOOLS.map((t) => ({
      type: "function" as const,
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
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
    // Each request allows one call (no parallel calls, or one named tool): exactly one comes back.
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
        assert.equal(choice.message.tool_calls?.length, 1, `${c.label} chat`);
        for (const k of choice.message.tool_calls ?? []) {
          assert.equal(k.type, "function", `${c.label} chat`);
          if (k.type !== "function") continue;
          assertValidCall(k.function.name, k.function.arguments, `${c.label} chat`);
        }
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
        assert.equal(msg.content.filter((b) => b.type === "tool_use").length, 1, c.label);
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
        astream.on("text", (t) => checkContent(t, `${c.label} anthropic stream`));
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
        assert.equal(fcs.length, 1, `${c.label} responses`);
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
    ].map((run) => run()));
  });
}
