// Tool-call and reasoning formats of DeepSeek V3.1, Gemma 4, Devstral (the `[TOOL_CALLS]NAME[ARGS]`
// Mistral syntax), Nemotron 3 and Qwen3.5, each with its REAL template from llama.cpp's bundle
// (models/templates): detection from the whole template; llama.cpp's expected parses
// (tests/test-chat.cpp) however the text is chunked; forced calls on the tiny model at
// temperature 1 (seeded) in Chat Completions, Responses and Anthropic, streamed and not, each
// validated by ajv, with the raw generated text checked against the family's own syntax and no
// marker text in `content`; the open `<think>` of a generation prompt (the call still comes
// back); a call written inside reasoning; and a tool round trip rendered through the template.
import assert from "node:assert/strict";
import type { ToolSpec } from "../lib/chat/conversation.ts";
import { detectToolFamily, detectToolFormat } from "../lib/chat/formats/mod.ts";
import { chatReply, planChat } from "../lib/chat/generation.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { tokenizeText } from "../lib/engine/tokens.ts";
import { type FamilyCase, familyTests, forcedCall } from "./support/family_harness.ts";
import { bundledTemplate, tinyWorkerEngine, withFormatModel } from "./support/family_models.ts";
import { expectFormatParse, type Parsed } from "./support/family_parse.ts";
import { conversation, replay, TOOL_NAMES } from "./support/family_tools.ts";

const XML_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" +
  "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>";

const CASES: FamilyCase[] = [
  {
    label: "DeepSeek V3.1",
    file: "deepseek-ai-DeepSeek-V3.1.jinja",
    family: "deepseek-v3",
    syntax: new RegExp(
      `^<｜tool▁calls▁begin｜>(?:<｜tool▁call▁begin｜>${TOOL_NAMES}<｜tool▁sep｜>\\{.*?\\}` +
        `<｜tool▁call▁end｜>)+\\s*<｜tool▁calls▁end｜>$`,
      "s",
    ),
    openThink: { thinking: true },
    call: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", ' +
      '"unit": "celsius"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    rendered: [
      '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "unit": "celsius"}',
      "<｜tool▁output▁begin｜>sunny, 21 C<｜tool▁output▁end｜>",
    ],
    keepsReasoning: false,
  },
  {
    label: "Gemma 4",
    file: "google-gemma-4-31B-it.jinja",
    family: "gemma4",
    call: '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>',
    rendered: [
      "<|channel>thought\nchecked the map\n<channel|>" +
      '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>',
      '<|tool_response>response:get_weather{value:<|"|>sunny, 21 C<|"|>}<tool_response|>',
    ],
    keepsReasoning: true,
    syntax: new RegExp(`^(?:<\\|tool_call>call:${TOOL_NAMES}\\{.*?\\}<tool_call\\|>)+$`, "s"),
  },
  {
    label: "Devstral",
    file: "unsloth-mistral-Devstral-Small-2507.jinja",
    family: "devstral",
    call: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}',
    rendered: [
      '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}',
      "[TOOL_RESULTS]sunny, 21 C[/TOOL_RESULTS]",
    ],
    keepsReasoning: false,
    syntax: new RegExp(
      `^(?:\\[TOOL_CALLS\\]${TOOL_NAMES}(?:\\[CALL_ID\\][A-Za-z0-9]{9})?\\[ARGS\\]\\{.*?\\}\\s*)+$`,
      "s",
    ),
  },
  {
    label: "Nemotron 3",
    call: XML_CALL,
    rendered: ["<think>\nchecked the map\n</think>\n" + XML_CALL, "<tool_response>\nsunny, 21 C\n"],
    keepsReasoning: true,
    file: "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    family: "qwen3-coder",
    syntax: new RegExp(
      `^(?:<tool_call>\\s*<function=${TOOL_NAMES}>\\s*(?:<parameter=\\w+>\\n.*?\\n</parameter>\\s*)*` +
        `</function>\\s*</tool_call>\\s*)+$`,
      "s",
    ),
    openThink: {},
    closedThink: { enable_thinking: false },
  },
  {
    label: "Qwen3.5",
    call: XML_CALL,
    rendered: [
      "<think>\nchecked the map\n</think>\n\n" + XML_CALL,
      "<tool_response>\nsunny, 21 C\n",
    ],
    keepsReasoning: true,
    file: "Qwen3.5-4B.jinja",
    family: "qwen3-coder",
    syntax: new RegExp(
      `^(?:<tool_call>\\s*<function=${TOOL_NAMES}>\\s*(?:<parameter=\\w+>\\n.*?\\n</parameter>\\s*)*` +
        `</function>\\s*</tool_call>\\s*)+$`,
      "s",
    ),
    openThink: {},
    closedThink: { enable_thinking: false },
  },
];

// ---------------------------------------------------------------- detection

Deno.test("families are detected from the real templates", () => {
  for (const c of CASES) assert.equal(detectToolFamily(bundledTemplate(c.file)), c.family, c.label);
  // Mistral Small 3.2 writes [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]; Nemo the older JSON array.
  assert.equal(
    detectToolFamily(bundledTemplate("Mistral-Small-3.2-24B-Instruct-2506.jinja")),
    "devstral",
  );
  assert.equal(
    detectToolFamily(bundledTemplate("mistralai-Mistral-Nemo-Instruct-2407.jinja")),
    "mistral",
  );
  assert.equal(
    detectToolFamily(bundledTemplate("google-gemma-4-31B-it-interleaved.jinja")),
    "gemma4",
  );
  // R1's templates share DeepSeek's markers but fence JSON after `function<｜tool▁sep｜>NAME`.
  assert.notEqual(
    detectToolFamily(bundledTemplate("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")),
    "deepseek-v3",
  );
  // `<function=` alone (functionary) is not Qwen3-Coder XML.
  assert.notEqual(
    detectToolFamily(bundledTemplate("meetkai-functionary-medium-v3.1.jinja")),
    "qwen3-coder",
  );
});

// ---------------------------------------------------------------- llama.cpp's expected parses

const anyTool = (name: string): ToolSpec => ({ name, parameters: { type: "object" } });
const TEST_TOOLS = ["get_time", "get_weather", "special_function", "empty_args", "amount", "toggle"]
  .map(anyTool);

/** `text` reads as `want` through the format of the template in `file`. */
function expectParse(file: string, text: string, want: Partial<Parsed>, open = false): void {
  expectFormatParse(detectToolFormat(bundledTemplate(file)), TEST_TOOLS, file, text, want, open);
}

Deno.test("llama.cpp's expected parses (test-chat.cpp)", () => {
  const ds = "deepseek-ai-DeepSeek-V3.1.jinja";
  expectParse(
    ds,
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "XYZCITY"}' +
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    { calls: [["get_time", { city: "XYZCITY" }]] },
  );
  expectParse(
    ds,
    'REASONING</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": ' +
      '"Tokyo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    { reasoning: "REASONING", calls: [["get_time", { city: "Tokyo" }]] },
    true,
  );
  expectParse(
    ds,
    'REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": ' +
      '"Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": ' +
      '"Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    {
      reasoning: "REASONING",
      content: "CONTENT",
      calls: [["get_time", { city: "Paris" }], ["get_weather", { city: "Paris" }]],
    },
    true,
  );
  // llama.cpp keeps the reasoning's trailing newline ("REASONING\n"); Hearth drops layout
  // around think markers.
  expectParse(
    ds,
    "REASONING</think>\nCONTENT",
    { reasoning: "REASONING", content: "CONTENT" },
    true,
  );
  expectParse(ds, "CONTENT", { content: "CONTENT" });

  const gemma = "google-gemma-4-31B-it.jinja";
  expectParse(gemma, "Hello, world!", { content: "Hello, world!" });
  expectParse(gemma, "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?", {
    reasoning: "I'm\nthinking",
    content: "Hello, world!\nWhat's up?",
  });
  expectParse(gemma, "<|channel>thought<channel|>Hello, world!\nWhat's up?", {
    content: "Hello, world!\nWhat's up?",
  });
  const gemmaCall = (args: string) => `<|tool_call>call:${args}<tool_call|>`;
  expectParse(gemma, gemmaCall('get_time{city:<|"|>London<|"|>}'), {
    calls: [["get_time", { city: "London" }]],
  });
  expectParse(gemma, gemmaCall('get_time{city:<|"|>San Francisco<|"|>}'), {
    calls: [["get_time", { city: "San Francisco" }]],
  });
  expectParse(gemma, gemmaCall("empty_args{}"), { calls: [["empty_args", {}]] });
  expectParse(gemma, "Hello, world!\nWhat's up?" + gemmaCall('get_time{city:<|"|>Paris<|"|>}'), {
    content: "Hello, world!\nWhat's up?",
    calls: [["get_time", { city: "Paris" }]],
  });
  expectParse(
    gemma,
    "<|channel>thought\nI'm\nthinking<channel|>" + gemmaCall('get_time{city:<|"|>Paris<|"|>}'),
    { reasoning: "I'm\nthinking", calls: [["get_time", { city: "Paris" }]] },
  );
  expectParse(
    gemma,
    gemmaCall('get_time{city:<|"|>London<|"|>}') + gemmaCall('get_weather{city:<|"|>Paris<|"|>}'),
    { calls: [["get_time", { city: "London" }], ["get_weather", { city: "Paris" }]] },
  );
  expectParse(gemma, gemmaCall("special_function{arg1:42}"), {
    calls: [["special_function", { arg1: 42 }]],
  });
  expectParse(gemma, gemmaCall("special_function{arg1:-7}"), {
    calls: [["special_function", { arg1: -7 }]],
  });
  expectParse(gemma, gemmaCall("amount{orig:3.14}"), { calls: [["amount", { orig: 3.14 }]] });
  expectParse(gemma, gemmaCall("toggle{enabled:true}"), { calls: [["toggle", { enabled: true }]] });
  expectParse(gemma, gemmaCall("toggle{enabled:false}"), {
    calls: [["toggle", { enabled: false }]],
  });
  expectParse(gemma, gemmaCall('amount{list:[<|"|>a<|"|>,2],m:{k:null}}'), {
    calls: [["amount", { list: ["a", 2], m: { k: null } }]],
  });

  const dev = "unsloth-mistral-Devstral-Small-2507.jinja";
  expectParse(dev, "Hello, world!\nWhat's up?", { content: "Hello, world!\nWhat's up?" });
  expectParse(dev, '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', {
    calls: [["special_function", { arg1: 1 }]],
  });
  expectParse(dev, 'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', {
    content: "Hello, world!\nWhat's up?",
    calls: [["special_function", { arg1: 1 }]],
  });
  expectParse(dev, '[TOOL_CALLS]get_time[CALL_ID]abcDEF123[ARGS]{"city": "Paris"}', {
    calls: [["get_time", { city: "Paris" }]],
  });
  // Not a call: the marker stays text.
  expectParse(dev, "[TOOL_CALLS] maybe later", { content: "[TOOL_CALLS] maybe later" });

  const xmlCall = "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n" +
    "</function>\n</tool_call>";
  for (const file of ["NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "Qwen3.5-4B.jinja"]) {
    expectParse(file, "Hello, world!\nWhat's up?", { content: "Hello, world!\nWhat's up?" });
    expectParse(file, "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?", {
      reasoning: "I'm\nthinking",
      content: "Hello, world!\nWhat's up?",
    }, true);
    expectParse(file, xmlCall + "\n", { calls: [["special_function", { arg1: 1 }]] });
    expectParse(file, "I'm\nthinking\n</think>\n\n" + xmlCall, {
      reasoning: "I'm\nthinking",
      calls: [["special_function", { arg1: 1 }]],
    }, true);
  }
});

// ---------------------------------------------------------------- a call inside reasoning
/** Marker text of every family that must never reach `content`. */
const MARKERS =
  /<\|?tool_call|tool_call\|>|\[TOOL_CALLS\]|\[ARGS\]|<｜|<\/?think>|<function=|<\|channel>|<channel\|>/;

const engine = await tinyWorkerEngine();
const model = engine.model;
for (const c of CASES) {
  const template = compileTemplate(bundledTemplate(c.file));
  familyTests(c, template, { model, engine, markers: MARKERS });
}

// ---------------------------------------------------------------- make-model --chat-format

for (const f of ["deepseek-v3", "gemma4", "devstral"] as const) {
  Deno.test(`make-model --chat-format ${f}: markers are tokens, a forced call in its syntax`, async () => {
    await withFormatModel(f, async (m, own) => {
      const template = compileTemplate(m.info.chatTemplate!);
      assert.equal(detectToolFamily(template.source), f);
      for (const t of detectToolFormat(template.source).triggers.tokens) {
        assert.equal(tokenizeText(m, t, false).length, 1, `${f}: ${t} is one token`);
      }
      const c = CASES.find((x) => x.family === f)!;
      const { plan } = await forcedCall(
        { label: `${f} make-model`, syntax: c.syntax },
        template,
        { model: m, engine: own },
        { seed: 6, toolChoice: { type: "required" } },
      );
      // No reasoning is open: the raw text is the call alone.
      assert.ok(!plan.reasoningOpen, f);
    });
  });
}

Deno.test("reasoning that ends in a possible marker comes before the answer", async () => {
  const template = compileTemplate(bundledTemplate("Qwen3.5-4B.jinja"));
  const plan = planChat(
    model,
    template,
    conversation({ type: "auto" }),
    { sampling: defaultSampling(), stop: [], ignoreEos: false },
    { addGenerationPrompt: true },
  );
  assert.ok(plan.reasoningOpen);
  const events = [];
  for await (const ev of chatReply(replay(["a <", "b <tool_", "</think>", "\n\nHi"]), plan)) {
    if (ev.type === "reasoning" || ev.type === "text") events.push(ev);
  }
  const kinds = events.map((e) => e.type);
  assert.deepEqual(kinds.slice(kinds.indexOf("text")), ["text"], JSON.stringify(events));
  assert.equal(
    events.filter((e) => e.type === "reasoning").map((e) => e.text).join(""),
    "a <b <tool_",
  );
});
