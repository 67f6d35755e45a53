// Tool-call and reasoning formats of DeepSeek V3.2 and V4 (DSML markup: a `function_calls` block in
// V3.2, `tool_calls` in V4 and V4-Flash), each with its REAL template from llama.cpp's bundle
// (models/templates): detection from the whole template (V3.1 stays V3.1); llama.cpp's expected
// parses (tests/test-chat.cpp) however the text is chunked; forced calls on the tiny model at
// temperature 1 (seeded) in Chat Completions, Responses and Anthropic, streamed and not, each
// validated by ajv, with the raw generated text checked against the family's own syntax and no
// marker text in `content`; the open `<think>` of a generation prompt (the call still comes
// back); a call written inside reasoning; a tool round trip rendered through the template, and
// the reasoning of a call turn handed back when thinking is on.
import assert from "node:assert/strict";
import type { ReplyEvent, ToolSpec } from "../lib/chat/conversation.ts";
import { detectToolFamily, detectToolFormat } from "../lib/chat/formats/mod.ts";
import { planChat } from "../lib/chat/generation.ts";
import { compileTemplate, renderChat } from "../lib/chat/template.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { tokenizeText } from "../lib/engine/tokens.ts";
import { compileTriggerPatterns } from "../lib/engine/grammar/triggers.ts";
import { type FamilyCase, familyTests, forcedCall } from "./support/family_harness.ts";
import { bundledTemplate, tinyWorkerEngine, withFormatModel } from "./support/family_models.ts";
import { expectFormatParse, type Parsed } from "./support/family_parse.ts";
import { TOOL_NAMES, toolRoundTrip } from "./support/family_tools.ts";

/** A family case, and what it renders of a call turn with thinking on: reasoning, then call. */
type Case = FamilyCase & { renderedThinking: string };

const D = "｜DSML｜";
/** A DSML block named `block` as the templates write it. */
const dsmlSyntax = (block: string) =>
  new RegExp(
    `^<${D}${block}>\\s*(?:<${D}invoke name="${TOOL_NAMES}">\\s*` +
      `(?:<${D}parameter name="\\w+" string="(?:true|false)">.*?</${D}parameter>\\s*)*` +
      `</${D}invoke>\\s*)+</${D}${block}>$`,
    "s",
  );
const dsmlCall = (block: string) =>
  `<${D}${block}>\n<${D}invoke name="get_weather">\n` +
  `<${D}parameter name="city" string="true">Paris</${D}parameter>\n` +
  `<${D}parameter name="unit" string="true">celsius</${D}parameter>\n` +
  `</${D}invoke>\n</${D}${block}>`;

const V4_CASE = (label: string, file: string): Case => ({
  label,
  file,
  family: "deepseek-v4",
  syntax: dsmlSyntax("tool_calls"),
  openThink: { thinking: true },
  call: dsmlCall("tool_calls"),
  rendered: [
    `<｜Assistant｜></think>\n\n${dsmlCall("tool_calls")}<｜end▁of▁sentence｜>`,
    "<｜User｜><tool_result>sunny, 21 C</tool_result><｜Assistant｜></think>",
  ],
  keepsReasoning: false,
  renderedThinking: `<｜Assistant｜><think>checked the map</think>\n\n${dsmlCall("tool_calls")}`,
});

const CASES: Case[] = [
  {
    label: "DeepSeek V3.2",
    file: "deepseek-ai-DeepSeek-V3.2.jinja",
    family: "deepseek-v3.2",
    syntax: dsmlSyntax("function_calls"),
    openThink: { thinking: true },
    call: dsmlCall("function_calls"),
    rendered: [
      `<｜Assistant｜></think>\n\n${dsmlCall("function_calls")}<｜end▁of▁sentence｜>`,
      "\n\n<function_results>\n<result>sunny, 21 C</result>\n</function_results>\n\n<think></think>",
    ],
    keepsReasoning: false,
    renderedThinking: `<｜Assistant｜><think>checked the map</think>\n\n${
      dsmlCall("function_calls")
    }`,
  },
  V4_CASE("DeepSeek V4", "deepseek-ai-DeepSeek-V4.jinja"),
  V4_CASE("DeepSeek V4-Flash", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"),
];

// ---------------------------------------------------------------- detection

Deno.test("DeepSeek generations are detected from the real templates", () => {
  for (const c of CASES) assert.equal(detectToolFamily(bundledTemplate(c.file)), c.family, c.label);
  // V3.1 keeps its own format; R1 and the MiniMax `<invoke name=` templates are no DSML.
  assert.equal(detectToolFamily(bundledTemplate("deepseek-ai-DeepSeek-V3.1.jinja")), "deepseek-v3");
  assert.equal(detectToolFamily(bundledTemplate("MiniMax-M2.jinja")), "minimax-m2");
  for (const file of ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "MiniMax-M2.jinja"]) {
    assert.ok(!detectToolFamily(bundledTemplate(file)).startsWith("deepseek-v"), file);
  }
  // One marker substring alone is no family.
  assert.equal(detectToolFamily("{{ '<｜DSML｜function_calls>' }}"), "generic");
});

Deno.test("DSML triggers: the block tag arms the grammar where it is no token, as bytes", () => {
  const latin1 = (t: string) => String.fromCharCode(...new TextEncoder().encode(t));
  for (const [f, block] of [["deepseek-v3.2", "function_calls"], ["deepseek-v4", "tool_calls"]]) {
    const format = detectToolFormat(bundledTemplate(CASES.find((c) => c.family === f)!.file));
    assert.deepEqual(format.triggers.tokens, [`<${D}${block}>`]);
    const [re] = compileTriggerPatterns(format.triggers.patterns);
    const text = `Sure.\n\n<${D}${block}>\n<${D}invoke name="get_weather">`;
    const at = latin1("Sure.\n\n").length;
    // Fires once the tag is whole, and on every later prefix of the opening; never before.
    for (let end = 0; end <= text.length; end++) {
      const m = re.exec(latin1(text.slice(0, end)));
      const whole = end >= `Sure.\n\n<${D}${block}>`.length;
      const inOpening = end <= `Sure.\n\n<${D}${block}>\n<${D}invoke name="`.length;
      assert.equal(m !== null, whole && inOpening, `${f} at ${end}`);
      if (m) assert.equal(m.indices![1]![0], at);
    }
  }
});

// ---------------------------------------------------------------- llama.cpp's expected parses

const anyTool = (name: string): ToolSpec => ({ name, parameters: { type: "object" } });
const TEST_TOOLS = [
  "get_time",
  "get_weather",
  "special_function",
  "magic_int",
  "amount",
  "toggle",
  "todo_list",
  "set_config",
].map(anyTool);

/** `text` reads as `want` through the format of the template in `file`. */
function expectParse(file: string, text: string, want: Partial<Parsed>, open = false): void {
  expectFormatParse(detectToolFormat(bundledTemplate(file)), TEST_TOOLS, file, text, want, open);
}

/** A DSML block of `block` holding one invoke per `[name, [key, string attr, value][]]`. */
function dsml(block: string, calls: [string, [string, boolean, string][]][]): string {
  const invokes = calls.map(([name, params]) =>
    `<${D}invoke name="${name}">\n` +
    params.map(([k, s, v]) => `<${D}parameter name="${k}" string="${s}">${v}</${D}parameter>\n`)
      .join("") +
    `</${D}invoke>\n`
  );
  return `<${D}${block}>\n${invokes.join("")}</${D}${block}>`;
}

Deno.test("llama.cpp's expected parses (test-chat.cpp, DeepSeek V3.2 and V4)", () => {
  for (
    const [file, block] of [
      ["deepseek-ai-DeepSeek-V3.2.jinja", "function_calls"],
      ["deepseek-ai-DeepSeek-V4.jinja", "tool_calls"],
      ["deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "tool_calls"],
    ]
  ) {
    const call = (calls: [string, [string, boolean, string][]][]) => dsml(block, calls);
    expectParse(file, "Hello, world!\nWhat's up?", { content: "Hello, world!\nWhat's up?" });
    expectParse(file, "I'm\nthinking</think>Hello, world!\nWhat's up?", {
      reasoning: "I'm\nthinking",
      content: "Hello, world!\nWhat's up?",
    }, true);
    expectParse(
      file,
      "Let me check the time</think>\n\n" + call([["get_time", [["city", true, "Tokyo"]]]]),
      { reasoning: "Let me check the time", calls: [["get_time", { city: "Tokyo" }]] },
      true,
    );
    expectParse(file, call([["special_function", [["arg1", false, "1"]]]]), {
      calls: [["special_function", { arg1: 1 }]],
    });
    expectParse(
      file,
      "Calling both</think>\n\n" +
        call([["get_time", [["city", true, "Paris"]]], ["get_weather", [["city", true, "Paris"]]]]),
      {
        reasoning: "Calling both",
        calls: [["get_time", { city: "Paris" }], ["get_weather", { city: "Paris" }]],
      },
      true,
    );
    expectParse(
      file,
      "Thinking about it</think>Let me call the function.\n\n" +
        call([["special_function", [["arg1", false, "1"]]]]),
      {
        reasoning: "Thinking about it",
        content: "Let me call the function.",
        calls: [["special_function", { arg1: 1 }]],
      },
      true,
    );
    const one = (name: string, k: string, v: string, want: unknown, why: string) =>
      expectParse(file, why + "</think>\n\n" + call([[name, [[k, false, v]]]]), {
        reasoning: why,
        calls: [[name, { [k]: want }]],
      }, true);
    one("magic_int", "ref", "-14", -14, "Test negative");
    one("amount", "orig", "3.14", 3.14, "Test decimal");
    one("toggle", "enabled", "true", true, "Test boolean");
    one("todo_list", "todos", '["buy milk","walk dog"]', ["buy milk", "walk dog"], "Test array");
    one("set_config", "config", '{"theme":"dark","level":2}', { theme: "dark", level: 2 }, "Obj");
    expectParse(file, "</think>\n\n" + call([["get_time", [["city", true, "XYZCITY"]]]]), {
      calls: [["get_time", { city: "XYZCITY" }]],
    }, true);
    expectParse(
      file,
      "Multi-arg call</think>\n\n" +
        call([["magic_int", [["ref", false, "42"], ["name", true, "foo bar"]]]]),
      { reasoning: "Multi-arg call", calls: [["magic_int", { ref: 42, name: "foo bar" }]] },
      true,
    );
    // A string="true" value stays text even when it reads as JSON; an unknown tool is no call.
    expectParse(file, call([["get_time", [["city", true, "42"]]]]), {
      calls: [["get_time", { city: "42" }]],
    });
    const unknown = call([["nope", [["city", true, "x"]]]]);
    expectParse(file, unknown, { content: unknown });
  }
});

// ---------------------------------------------------------------- round trip property

/** A seeded generator (mulberry32). */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  return { next, int, pick: <T>(xs: T[]): T => xs[int(0, xs.length - 1)] };
}
const CHARS = Array.from("abcxyz AZ09-_.,:;é中🦙\"'\\/{}[]<>\n\t=&");

function randValue(r: ReturnType<typeof rng>, depth: number): unknown {
  const kinds = ["string", "string", "integer", "number", "boolean", "null", "array", "object"];
  switch (r.pick(depth > 1 ? kinds.slice(0, 6) : kinds)) {
    case "string":
      return Array.from({ length: r.int(0, 12) }, () => r.pick(CHARS)).join("");
    case "integer":
      return r.int(-1000, 100000);
    case "number":
      return r.int(-5000, 5000) / 8;
    case "boolean":
      return r.next() < 0.5;
    case "null":
      return null;
    case "array":
      return Array.from({ length: r.int(0, 3) }, () => randValue(r, depth + 1));
    default:
      return randArgs(r, depth + 1);
  }
}

function randArgs(r: ReturnType<typeof rng>, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (let i = r.int(0, 4); i > 0; i--) {
    out[r.pick(["a", "path", "content", "n", "x_1", "query", "k" + i])] = randValue(r, depth);
  }
  return out;
}

for (const c of CASES) {
  Deno.test(`${c.label}: 200 random argument objects the real template writes parse back`, () => {
    const template = compileTemplate(bundledTemplate(c.file));
    const f = detectToolFormat(template.source);
    const block = c.family === "deepseek-v3.2" ? "function_calls" : "tool_calls";
    const r = rng(77);
    for (let k = 0; k < 200; k++) {
      const made = Array.from({ length: r.int(1, 2) }, (_, i) => ({
        name: `tool_${k}_${i}`,
        args: randArgs(r, 1),
      }));
      const text = renderChat(template, {
        messages: [
          { role: "user", content: "Go." },
          {
            role: "assistant",
            content: null,
            tool_calls: made.map((m, i) => ({
              id: `call_${i}`,
              type: "function",
              function: { name: m.name, arguments: m.args },
            })),
          },
        ],
        addGenerationPrompt: false,
      });
      const from = text.indexOf(`<${D}${block}>`);
      const to = text.indexOf(`</${D}${block}>`) + `</${D}${block}>`.length;
      assert.ok(from >= 0 && to > from, text);
      const written = text.slice(from, to);
      const size = r.int(1, 40);
      const parser = f.newParser(
        made.map((m) => ({ name: m.name, parameters: { type: "object" } })),
      );
      const events: ReplyEvent[] = [];
      for (let i = 0; i < written.length; i += size) {
        events.push(...parser.push(written.slice(i, i + size)));
      }
      events.push(...parser.end());
      const calls = events.flatMap((e) => e.type === "tool_call_end" ? [e.arguments] : []);
      assert.deepEqual(calls.map((a) => JSON.parse(a)), made.map((m) => m.args), written);
      assert.ok(!events.some((e) => e.type === "text"), written);
    }
  });
}

// ---------------------------------------------------------------- a call inside reasoning
/** Marker text of every family that must never reach `content`. */
const MARKERS = /<｜|｜DSML｜|<\/?think>|<function_results>|<tool_result>/;

const engine = await tinyWorkerEngine();
const model = engine.model;

for (const c of CASES) {
  const template = compileTemplate(bundledTemplate(c.file));
  familyTests(c, template, { model, engine, markers: MARKERS });
  Deno.test(`${c.label}: with thinking on, the reasoning of a call turn is handed back`, () => {
    const plan = planChat(
      model,
      template,
      toolRoundTrip("sunny, 21 C"),
      { sampling: defaultSampling(), stop: [], ignoreEos: false },
      { addGenerationPrompt: true, extra: c.openThink },
    );
    assert.ok(plan.text.includes(c.renderedThinking), `${c.label}: ${JSON.stringify(plan.text)}`);
    // The next reply starts inside a fresh think block.
    assert.ok(plan.reasoningOpen, c.label);
  });
}

// ---------------------------------------------------------------- make-model --chat-format

for (
  const [f, block] of [["deepseek-v3.2", "function_calls"], ["deepseek-v4", "tool_calls"]] as const
) {
  Deno.test(`make-model --chat-format ${f}: block tags are tokens, a forced call in its syntax`, async () => {
    await withFormatModel(f, async (m, own) => {
      const template = compileTemplate(m.info.chatTemplate!);
      assert.equal(detectToolFamily(template.source), f);
      for (const t of [`<${D}${block}>`, `</${D}invoke>`, "</think>"]) {
        assert.equal(tokenizeText(m, t, false).length, 1, `${f}: ${t} is one token`);
      }
      const c = CASES.find((x) => x.family === f)!;
      const { plan } = await forcedCall(
        { label: `${f} make-model`, syntax: c.syntax },
        template,
        { model: m, engine: own },
        { seed: 6, toolChoice: { type: "required" } },
      );
      assert.ok(plan.text.includes("place_order"), "the template lists the tools");
      // No reasoning is open: the raw text is the call alone.
      assert.ok(!plan.reasoningOpen, f);
      // The call comes back into the history in the same markup, its reasoning handed back.
      const next = planChat(
        m,
        template,
        toolRoundTrip("sunny"),
        { sampling: defaultSampling(), stop: [], ignoreEos: false },
        { addGenerationPrompt: true, extra: { thinking: true } },
      );
      assert.ok(next.text.includes(c.renderedThinking), JSON.stringify(next.text));
      assert.ok(next.reasoningOpen);
    });
  });
}
