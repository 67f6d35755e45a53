/**
 * The tests every model family of the agent formats runs against its real template, on a tiny
 * model: a forced call in the family's own syntax, the open-think path, a tool round trip through
 * the template, a call written inside reasoning, and forced calls in all three dialects with the
 * official SDKs. The `tests/formats_*.test.ts` files give their cases and call `familyTests`, or
 * the parts of it they need (`forcedCallTest`, `dialectsTest`).
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
import type { Conversation } from "../../lib/chat/conversation.ts";
import { detectToolFormat, type ToolFamily } from "../../lib/chat/formats/mod.ts";
import {
  type ChatPlan,
  chatReply,
  type CollectedReply,
  collectReply,
  planChat,
} from "../../lib/chat/generation.ts";
import type { CompiledTemplate } from "../../lib/chat/template.ts";
import type { EngineModel } from "../../lib/engine/model.ts";
import { defaultSampling } from "../../lib/engine/sampling/sampling.ts";
import type { GenEvent } from "../../lib/engine/scheduler.ts";
import type { WorkerEngine } from "../../lib/engine/worker_host.ts";
import { dialectsTest } from "./family_dialects.ts";
import {
  assertValidCall,
  conversation,
  FAMILY_MAX_TOKENS,
  replay,
  toolRoundTrip,
} from "./family_tools.ts";

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
  /** `false` leaves out (ignores) the test of the three dialects. */
  dialects?: false;
};

/** What a forced call needs of a case. */
export type ForcedCase = Pick<FamilyCase, "label" | "syntax" | "openThink" | "closedThink">;

export type FamilyContext = {
  model: EngineModel;
  engine: WorkerEngine;
  /** Marker text of the family that must never reach content. */
  markers: RegExp;
  /** Longest forced reply (`FAMILY_MAX_TOKENS` unless given). */
  maxTokens?: number;
};

/** One forced generation: its seed, what it forces, and the template variables it renders with. */
export type ForcedRun = {
  seed: number;
  toolChoice: Conversation["toolChoice"];
  /** The sampler's default unless given. */
  temperature?: number;
  extra?: Record<string, unknown>;
};

export type ForcedCall = { plan: ChatPlan; raw: string; reply: CollectedReply };

/**
 * A forced call generated through `template` on the context's model and read back: the raw text
 * (after any reasoning the prompt opened, which it must close) in the family's own syntax, and
 * one call (`conversation` allows no parallel calls) of the tool asked for, valid, with no text
 * beside it.
 */
export async function forcedCall(
  c: Pick<FamilyCase, "label" | "syntax">,
  template: CompiledTemplate,
  ctx: Pick<FamilyContext, "model" | "engine" | "maxTokens">,
  run: ForcedRun,
): Promise<ForcedCall> {
  const where = `${c.label} seed ${run.seed}`;
  const sampling = { ...defaultSampling(), seed: run.seed };
  if (run.temperature !== undefined) sampling.temperature = run.temperature;
  const plan = planChat(
    ctx.model,
    template,
    conversation(run.toolChoice),
    { sampling, stop: [], ignoreEos: false, maxTokens: ctx.maxTokens ?? FAMILY_MAX_TOKENS },
    { addGenerationPrompt: true, extra: run.extra },
  );
  const events: GenEvent[] = [];
  for await (const ev of ctx.engine.submit(plan.req)) events.push(ev);
  const raw = events.map((e) => (e.type === "text" ? e.text : "")).join("");
  // A reply that starts inside reasoning closes it before the call.
  const end = plan.format.reasoning?.end ?? "";
  if (plan.reasoningOpen) assert.ok(raw.includes(end), `${where}: ${raw}`);
  const call = plan.reasoningOpen ? raw.slice(raw.indexOf(end) + end.length).trim() : raw;
  assert.match(call, c.syntax, `${where}: ${JSON.stringify(raw)}`);
  const again = (async function* () {
    yield* events;
  })();
  const reply = await collectReply(chatReply(again, plan));
  assert.equal(reply.end?.finishReason, "tool_calls", `${where}: ${JSON.stringify(raw)}`);
  assert.equal(reply.text, "", `${where}: no text beside a forced call`);
  assert.equal(reply.calls.length, 1, `${where}: ${JSON.stringify(raw)}`);
  for (const k of reply.calls) assertValidCall(k.name, k.arguments, `${where} raw`);
  if (run.toolChoice.type === "tool") assert.equal(reply.calls[0].name, run.toolChoice.name);
  return { plan, raw, reply };
}

/**
 * Registers the test of two forced calls at once (the scheduler batches them): any tool with the
 * think block closed, then place_order with it open, where the case has variables for either;
 * `more` checks each on top.
 */
export function forcedCallTest(
  c: ForcedCase,
  template: CompiledTemplate,
  ctx: FamilyContext,
  more?: (r: ForcedCall) => void,
): void {
  Deno.test(`${c.label}: a forced call, raw text in the family's own syntax`, async () => {
    const runs: ForcedRun[] = [
      { seed: 1, toolChoice: { type: "required" }, extra: c.closedThink ?? {} },
      { seed: 2, toolChoice: { type: "tool", name: "place_order" }, extra: c.openThink ?? {} },
    ];
    await Promise.all(runs.map(async (run) => {
      const r = await forcedCall(c, template, ctx, { ...run, temperature: 1 });
      more?.(r);
    }));
  });
}

/** Registers the shared tests of one family case. */
export function familyTests(c: FamilyCase, template: CompiledTemplate, ctx: FamilyContext): void {
  const { model, engine } = ctx;
  const MARKERS = ctx.markers;

  forcedCallTest(c, template, ctx);

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
    const plan = planChat(
      model,
      template,
      toolRoundTrip("sunny, 21 C"),
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

  dialectsTest(c, template, ctx);
}
