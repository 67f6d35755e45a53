/**
 * The tests of a family case that runs on a tiny model with the family's markers as single tokens
 * (`familyEngine`, as in the real vocab): forced calls through the real template, raw and in the
 * three dialects, and a history with reasoning, a call and its result rendered through it (in the
 * shape of each dialect) and served.
 *
 * @example
 * ```ts ignore
 * import { agentFamilyTests } from "./family_agent_cases.ts";
 * await agentFamilyTests(
 *   { label: "GLM-4.6", file: "GLM-4.6.jinja", family: "glm", model: "glm", syntax, roundTrip },
 * );
 * ```
 * @module
 */
import assert from "node:assert/strict";
import { anthropicConversation } from "../../lib/chat/anthropic.ts";
import type { Conversation } from "../../lib/chat/conversation.ts";
import { TOOL_FORMATS, type ToolFamily } from "../../lib/chat/formats/mod.ts";
import { planChat } from "../../lib/chat/generation.ts";
import { chatCompletionsConversation } from "../../lib/chat/openai_chat.ts";
import { renderConversation } from "../../lib/chat/render.ts";
import { responsesConversation } from "../../lib/chat/responses.ts";
import { compileTemplate } from "../../lib/chat/template.ts";
import { defaultSampling } from "../../lib/engine/sampling/sampling.ts";
import type { ChatFormatName } from "../../lib/gguf/make_model_formats.ts";
import { appFor, dialectsTest } from "./family_dialects.ts";
import { type FamilyContext, forcedCallTest, type ForcedCase } from "./family_harness.ts";
import { bundledTemplate, familyEngine } from "./family_models.ts";
import { TOOLS } from "./family_tools.ts";

/** Longest reply a forced call may take on these models. */
export const AGENT_MAX_TOKENS = 600;

/** Marker text of the Harmony, GLM, Kimi-K2 and MiniMax-M2 families, never in content. */
export const AGENT_MARKERS =
  /<\|(?:channel|message|start|end|constrain|call|return)\|>|<\/?(?:tool_call|arg_key|arg_value|think)>|<\|tool_call|<\/?minimax:|<invoke |<parameter /;

export type AgentCase = ForcedCase & {
  file: string;
  family: ToolFamily;
  /** The tiny model it runs on: the family's own, or the one whose markup it descends from. */
  model: ChatFormatName;
  /** What the template writes of `HISTORY`: these pieces in order, or (`roundTripEnds`) its end. */
  roundTrip: string[];
  roundTripEnds?: boolean;
  /** The end of the generation prompt, and whether it opens reasoning. */
  prompt?: string;
  opensReasoning?: boolean;
  /** The case's own markers, never in content nor reasoning (else `AGENT_MARKERS`, in content). */
  markers?: RegExp;
  /** `false` ignores the three dialects (a forced think block is slow on a random model). */
  dialects?: false;
};

/** A history with reasoning, a call and its result, as Chat Completions messages. */
export const HISTORY = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Weather in Paris?" },
  {
    role: "assistant",
    content: null,
    reasoning_content: "Paris first.",
    tool_calls: [{
      id: "call_1",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' },
    }],
  },
  { role: "tool", tool_call_id: "call_1", content: "18C" },
];

/** `HISTORY` with `TOOLS` offered, read from Chat Completions. */
export function historyConversation(): Conversation {
  return chatCompletionsConversation(
    { messages: HISTORY, tools: TOOLS.map((t) => ({ type: "function", function: t })) } as never,
  ).conv;
}

/** `HISTORY` as the Anthropic and Responses requests write it, read from each. */
export function historyInDialects(): [string, Conversation][] {
  const anthropic = anthropicConversation({
    model: "m",
    max_tokens: 8,
    system: "You are terse.",
    tools: TOOLS.map((t) => ({ name: t.name, input_schema: t.parameters })),
    messages: [
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "Paris first.", signature: "x" },
          {
            type: "tool_use",
            id: "toolu_1",
            name: "get_weather",
            input: { city: "Paris", unit: "celsius" },
          },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18C" }] },
    ],
  } as never).conv;
  const responses = responsesConversation({
    model: "m",
    instructions: "You are terse.",
    tools: TOOLS.map((t) => ({ type: "function", name: t.name, parameters: t.parameters })),
    input: [
      { role: "user", content: "Weather in Paris?" },
      {
        type: "reasoning",
        id: "rs_1",
        summary: [],
        content: [{ type: "reasoning_text", text: "Paris first." }],
      },
      {
        type: "function_call",
        call_id: "call_1",
        name: "get_weather",
        arguments: '{"city":"Paris","unit":"celsius"}',
      },
      { type: "function_call_output", call_id: "call_1", output: "18C" },
    ],
  } as never).conv;
  return [["anthropic", anthropic], ["responses", responses]];
}

/** `text` holds the case's round trip: its pieces in order, or ends with them. */
export function assertRoundTrip(c: AgentCase, text: string, where: string): void {
  if (c.roundTripEnds) {
    assert.ok(text.endsWith(c.roundTrip.join("")), `${where}:\n${text}`);
    return;
  }
  let at = 0;
  for (const piece of c.roundTrip) {
    const i = text.indexOf(piece, at);
    assert.ok(i >= 0, `${where}: ${JSON.stringify(piece)} in\n${text}`);
    at = i + piece.length;
  }
}

/** Registers a case's tests, on its model (started once per file). */
export async function agentFamilyTests(c: AgentCase): Promise<void> {
  const engine = await familyEngine(c.model);
  const ctx: FamilyContext = {
    model: engine.model,
    engine,
    markers: c.markers ?? AGENT_MARKERS,
    maxTokens: AGENT_MAX_TOKENS,
  };
  const template = compileTemplate(bundledTemplate(c.file));

  forcedCallTest(c, template, ctx, ({ plan, reply }) => {
    assert.equal(plan.format.family, c.family, c.label);
    if (c.prompt !== undefined) assert.ok(plan.text.endsWith(c.prompt), plan.text);
    if (c.opensReasoning !== undefined) {
      assert.ok(plan.format.reasoning, c.label);
      assert.equal(plan.reasoningOpen, c.opensReasoning, c.label);
    }
    if (c.markers) {
      assert.ok(!c.markers.test(reply.reasoning ?? ""), `markers in reasoning: ${reply.reasoning}`);
    }
  });

  dialectsTest(c, template, ctx);

  Deno.test(`${c.label}: a tool round trip renders, reasoning handed back as the template reads it`, async () => {
    const plan = planChat(
      ctx.model,
      template,
      historyConversation(),
      { sampling: defaultSampling(), stop: [], ignoreEos: false, maxTokens: 4 },
      { addGenerationPrompt: true },
    );
    assertRoundTrip(c, plan.text, c.label);
    assert.ok(plan.text.includes("get_weather") && plan.text.includes("place_order"), "tools");
    // And served: the same history answered.
    const { openai } = appFor(engine, template);
    const r = await openai.chat.completions.create({
      model: "hearth-tiny",
      messages: HISTORY as never,
      tools: TOOLS.map((t) => ({ type: "function" as const, function: t as never })),
      max_tokens: 4,
      seed: 1,
    });
    assert.ok(r.usage!.prompt_tokens > 40);
  });

  Deno.test(`${c.label}: the round trip in Anthropic and Responses shapes renders as in Chat Completions`, () => {
    for (const [dialect, conv] of historyInDialects()) {
      const { text } = renderConversation(template, TOOL_FORMATS[c.family], {}, conv, {
        addGenerationPrompt: true,
      });
      assertRoundTrip(c, text, `${c.label} (${dialect})`);
    }
  });
}

/**
 * The family's call grammar builds, and its lazy trigger fires inside `opening` (the text its
 * grammar starts with) wherever the tokens split; where it first fires, or -1 for a trigger token.
 */
export function assertLazyTrigger(family: ToolFamily, opening: string): number {
  const f = TOOL_FORMATS[family];
  let fired = -1;
  for (let i = 1; i <= opening.length && fired < 0; i++) {
    for (const p of f.triggers.patterns) {
      const m = new RegExp(p, "d").exec(opening.slice(0, i));
      if (m) fired = m.indices![1]![0];
    }
  }
  assert.ok(fired >= 0 || f.triggers.tokens.some((t) => opening.includes(t)), family);
  f.callGrammar(TOOLS, { parallel: true });
  return fired;
}
