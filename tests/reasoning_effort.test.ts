// The reasoning cap through the chat APIs, in process (issue 33): the cap cuts reasoning that runs
// on without it (the answer follows, the reasoning is the start of the uncapped one), and what each
// dialect's field asks for reaches the engine as the budget docs/chat.md names: Chat Completions'
// `reasoning_effort`, Responses' `reasoning.effort` (none and minimal 0, low 1024, medium 4096,
// high 16384, anything else no cap) and Anthropic's `thinking` (disabled 0, enabled its
// `budget_tokens`, adaptive no cap); and a level's budget is where the reasoning ends.
import assert from "node:assert/strict";
import { compileTemplate } from "../lib/chat/template.ts";
import { EFFORT_BUDGETS } from "../lib/chat/generation.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import type { ReasoningBudget } from "../lib/engine/scheduler.ts";
import { createApp } from "../routes/app.ts";
import { newServerState } from "../routes/state.ts";
import { cachedTinyModel, chatFormatModelPath } from "./support/models.ts";

type Json = Record<string, unknown>;

/** A family's tiny model served in process, with each budget the engine was handed. */
async function served(path: string, maxSeqLen = 1024) {
  const m = await loadEngineModel({ path, maxBatch: 1, maxSeqLen, threads: 1 });
  const engine = inProcessScheduler(m);
  const budgets: (ReasoningBudget | undefined)[] = [];
  const state = newServerState("hearth-tiny");
  state.threads = 1;
  state.engine = {
    ...engine,
    submit(req) {
      budgets.push(req.reasoningBudget);
      return engine.submit(req);
    },
  };
  state.template = compileTemplate(m.info.chatTemplate!);
  const app = createApp(state);
  const post = async (path: string, body: Json): Promise<Json> => {
    const res = await app.request(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const json = await res.json();
    assert.equal(res.status, 200, JSON.stringify(json));
    return json;
  };
  /** The count of `text`'s tokens. */
  const tokens = async (text: string) =>
    (await post("/tokenize", { prompt: text, add_special_tokens: false })).count as number;
  return { post, tokens, budgets };
}

type Block = { type: string; thinking?: string; text?: string };

const harmonyModel = () =>
  cachedTinyModel("agents-harmony", ["make_model_formats.ts", "agent_templates.ts", "presets.ts"], {
    chatFormat: "harmony",
  });

Deno.test({
  name: "reasoning cap: reasoning that runs on without it is cut at the cap and answered after " +
    "(<think>, Harmony's analysis)",
  sanitizeResources: false,
  async fn() {
    for (
      const [family, path, open] of [
        ["hermes", await chatFormatModelPath("hermes"), "<think>"],
        ["harmony", await harmonyModel(), "<|channel|>analysis<|message|>"],
      ] as const
    ) {
      const { post, tokens } = await served(path);
      // The prefilled opening leaves the reply inside reasoning from its first token; greedy, so
      // the runs agree until the cap.
      const reply = async (thinking: Json | undefined, maxTokens: number) => {
        const body = await post("/v1/messages", {
          model: "claude-x",
          max_tokens: maxTokens,
          temperature: 0,
          ...(thinking ? { thinking } : {}),
          messages: [
            { role: "user", content: "think, then answer" },
            { role: "assistant", content: open },
          ],
        });
        const blocks = body.content as Block[];
        return {
          thinking: blocks.find((b) => b.type === "thinking")?.thinking ?? "",
          text: blocks.find((b) => b.type === "text")?.text ?? "",
        };
      };
      // Uncapped, the model reasons to the limit and never answers: what a cap has to cut.
      const free = await reply(undefined, 48);
      assert.equal(free.text, "", `${family}: the model closed its reasoning on its own`);
      assert.ok((await tokens(free.thinking)) >= 40, `${family}: ${free.thinking}`);
      // At 8: reasoning happened, no further than the cap (a token of slack for a marker that
      // merges with it; tokenizing the text again can split a random model's pieces a little
      // finer), was the uncapped reasoning's start, and the model answered after it.
      const capped = await reply({ type: "enabled", budget_tokens: 8 }, 48);
      const used = await tokens(capped.thinking);
      assert.ok(used >= 4 && used <= 12, `${family}: ${used} reasoning tokens`);
      const head = capped.thinking.replace(/\uFFFD+$/, "").trim();
      assert.ok(head.length > 0 && free.thinking.startsWith(head), `${family}: ${head}`);
      assert.ok(capped.text.length > 0, `${family}: no answer after the cap`);
      assert.doesNotMatch(capped.text, /<\/?think>|<\|channel\|>|<\|end\|>/);
      // The cap is not early: with the limit at the cap, nothing is left for an answer.
      const atCap = await reply({ type: "enabled", budget_tokens: 8 }, 8);
      assert.equal(atCap.text, "", `${family}: answered within 8 tokens`);
      // At 0 (and `disabled`): no reasoning at all, an answer at once.
      for (const thinking of [{ type: "enabled", budget_tokens: 0 }, { type: "disabled" }]) {
        const none = await reply(thinking, 16);
        assert.equal(none.thinking.trim(), "", `${family}, ${JSON.stringify(thinking)}`);
        assert.ok(none.text.length > 0, `${family}, ${JSON.stringify(thinking)}: no answer`);
      }
    }
  },
});

/** MiniMax-M2's template opens `<think>` in every generation prompt: each reply starts inside it. */
const minimaxModel = () =>
  cachedTinyModel("agents-minimax-m2", [
    "make_model_formats.ts",
    "agent_templates.ts",
    "presets.ts",
  ], {
    chatFormat: "minimax-m2",
  });

Deno.test({
  name:
    "reasoning budgets: each dialect's effort or thinking field reaches the engine as its budget",
  sanitizeResources: false,
  async fn() {
    const { post, budgets } = await served(await minimaxModel());
    const user = [{ role: "user", content: "think, then answer" }];
    // What each request's budget was: undefined for no cap.
    const budgetOf = async (route: string, body: Json) => {
      budgets.length = 0;
      await post(route, body);
      assert.equal(budgets.length, 1, route);
      const b = budgets[0];
      if (b) {
        // The prompt left the reply inside reasoning: the cap counts from its first token.
        assert.deepEqual([b.open, b.start, b.end], [true, "<think>", "</think>"]);
        assert.ok(b.force.length > 0);
      }
      return b?.tokens;
    };
    const levels: [string | undefined, number | undefined][] = [
      ["none", 0],
      ["minimal", 0],
      ["low", 1024],
      ["medium", 4096],
      ["high", 16384],
      ["xhigh", undefined],
      ["max", undefined],
      [undefined, undefined],
    ];
    for (const [effort, want] of levels) {
      const chat = {
        messages: user,
        max_tokens: 2,
        ...(effort ? { reasoning_effort: effort } : {}),
      };
      assert.equal(
        await budgetOf("/v1/chat/completions", chat),
        want,
        `reasoning_effort ${effort}`,
      );
      const responses = {
        input: user,
        max_output_tokens: 16,
        store: false,
        ...(effort ? { reasoning: { effort } } : {}),
      };
      assert.equal(await budgetOf("/v1/responses", responses), want, `reasoning.effort ${effort}`);
    }
    // The table the levels come from, whole: a level added there is a level tested here.
    assert.deepEqual(
      Object.entries(EFFORT_BUDGETS),
      levels.filter(([, n]) => n !== undefined),
    );
    const thinking: [Json | undefined, number | undefined][] = [
      [{ type: "disabled" }, 0],
      [{ type: "enabled", budget_tokens: 0 }, 0],
      [{ type: "enabled", budget_tokens: 2048 }, 2048],
      // What Claude Code sends.
      [{ type: "enabled", budget_tokens: 31999 }, 31999],
      [{ type: "enabled" }, undefined],
      [{ type: "adaptive" }, undefined],
      [undefined, undefined],
    ];
    for (const [t, want] of thinking) {
      const body = {
        model: "claude-x",
        max_tokens: 2,
        messages: user,
        ...(t ? { thinking: t } : {}),
      };
      assert.equal(await budgetOf("/v1/messages", body), want, `thinking ${JSON.stringify(t)}`);
    }
  },
});

Deno.test({
  name: "reasoning budgets: a level's budget is where the reasoning ends (low: 1024 tokens)",
  sanitizeResources: false,
  async fn() {
    const { post } = await served(await minimaxModel(), 2048);
    const budget = EFFORT_BUDGETS.low;
    // Greedy, and never ended by an end-of-generation token: a reply is its limit long.
    const chat = async (effort: string | undefined, maxTokens: number) => {
      const body = await post("/v1/chat/completions", {
        messages: [{ role: "user", content: "think, then answer" }],
        max_tokens: maxTokens,
        temperature: 0,
        ignore_eos: true,
        ...(effort ? { reasoning_effort: effort } : {}),
      });
      const choice = (body.choices as { message: Json }[])[0];
      assert.equal((body.usage as Json).completion_tokens, maxTokens);
      return {
        reasoning: (choice.message.reasoning_content as string | undefined) ?? "",
        content: (choice.message.content as string | null) ?? "",
      };
    };
    // Uncapped, the model reasons past the budget without closing its reasoning.
    const free = await chat(undefined, budget + 8);
    assert.equal(free.content, "", "the model closed its reasoning on its own");
    // `low`: the budget's tokens of reasoning leave nothing for an answer, 8 more do.
    assert.equal((await chat("low", budget)).content, "", "the reasoning ended before its budget");
    const low = await chat("low", budget + 8);
    assert.ok(low.content.length > 0, "no answer after the budget");
    const head = low.reasoning.replace(/\uFFFD+$/, "").trim();
    assert.ok(
      head.length > 0 && free.reasoning.startsWith(head),
      "not the uncapped reasoning's start",
    );
    // `none`: an answer at once.
    const none = await chat("none", 8);
    assert.equal(none.reasoning.trim(), "");
    assert.ok(none.content.length > 0);
    // Responses' `reasoning.effort` likewise.
    const responses = async (effort: string | undefined, maxTokens: number) => {
      const body = await post("/v1/responses", {
        input: "think, then answer",
        max_output_tokens: maxTokens,
        temperature: 0,
        store: false,
        ...(effort ? { reasoning: { effort } } : {}),
      });
      const output = body.output as { type: string; content?: { text?: string }[] }[];
      return output.filter((o) => o.type === "message")
        .flatMap((o) => o.content ?? []).map((c) => c.text ?? "").join("");
    };
    assert.equal(await responses(undefined, budget + 8), "", "closed its reasoning on its own");
    assert.ok((await responses("low", budget + 8)).length > 0, "no answer after the budget");
    assert.ok((await responses("none", 16)).length > 0, "no answer at once");
  },
});
