// MiniMax-M2's format (`<minimax:tool_call><invoke name=".."><parameter name="..">V</parameter>`,
// `<think>` reasoning the generation prompt opens) and MiniMax-M3's (every tag namespaced,
// `]<]minimax[>[<invoke name="..">]<]minimax[>[<KEY>V]<]minimax[>[</KEY>`, objects and arrays as
// nested elements, `<mm:think>` reasoning), each with its REAL template from llama.cpp's bundle
// (models/templates): detection from the whole template; llama.cpp's expected parses
// (tests/test-chat.cpp) however the text is chunked; forced calls on MiniMax-M2's tiny model
// (`make-model --chat-format minimax-m2`, its markers single tokens as in the real vocab) at
// temperature 1 (seeded), raw and in Chat Completions, Responses and Anthropic, streamed and not,
// each validated by ajv, with the raw generated text checked against the family's own syntax and
// no marker text in `content`; a tool round trip with reasoning rendered through each template the
// way it expects; and the call grammar with its lazy trigger.
import assert from "node:assert/strict";
import { detectToolFamily } from "../lib/chat/formats/mod.ts";
import {
  type AgentCase,
  agentFamilyTests,
  assertLazyTrigger,
} from "./support/family_agent_cases.ts";
import { bundledTemplate } from "./support/family_models.ts";
import {
  expectParse,
  type Reader,
  templateReader,
  TYPED_PARSE_TOOLS,
} from "./support/family_parse.ts";
import { TOOL_NAMES } from "./support/family_tools.ts";

const M2: AgentCase & { family: "minimax-m2" } = {
  label: "MiniMax-M2",
  file: "MiniMax-M2.jinja",
  family: "minimax-m2",
  model: "minimax-m2",
  syntax: new RegExp(
    `^<minimax:tool_call>\\s*(?:<invoke name="${TOOL_NAMES}">\\s*` +
      `(?:<parameter name="\\w+">.*?</parameter>\\s*)*</invoke>\\s*)+</minimax:tool_call>$`,
    "s",
  ),
  roundTrip: [
    "]~b]ai\n<think>\nParis first.\n</think>\n\n",
    '<minimax:tool_call>\n<invoke name="get_weather">\n' +
    '<parameter name="city">Paris</parameter>\n<parameter name="unit">celsius</parameter>\n' +
    "</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>18C</response>[e~[\n]~b]ai\n<think>\n",
  ],
};

const NS3 = "]<]minimax[>[";
const M3_NS = "\\]<\\]minimax\\[>\\[";
const M3: AgentCase = {
  label: "MiniMax-M3",
  file: "MiniMax-M3.jinja",
  family: "minimax-m3",
  model: "minimax-m2",
  prompt: "]~b]ai\n",
  opensReasoning: false,
  syntax: new RegExp(
    `^(?:</mm:think>)?${M3_NS}<tool_call>\\n${M3_NS}<invoke name="${TOOL_NAMES}">` +
      `(?:${M3_NS}<(\\w+)>.*?${M3_NS}</\\1>)*${M3_NS}</invoke>\\n${M3_NS}</tool_call>$`,
    "s",
  ),
  markers: /\]<\]minimax\[>\[|<\/?mm:think>/,
  roundTrip: [
    "]~b]user\nWeather in Paris?[e~[\n]~b]ai\n<mm:think>Paris first.</mm:think>" +
    `${NS3}<tool_call>\n${NS3}<invoke name="get_weather">${NS3}<city>Paris${NS3}</city>` +
    `${NS3}<unit>celsius${NS3}</unit>${NS3}</invoke>\n${NS3}</tool_call>[e~[\n]~b]tool\n` +
    "<response>18C</response>[e~[\n]~b]ai\n",
  ],
  roundTripEnds: true,
};

Deno.test("MiniMax-M2 and MiniMax-M3 are detected from their real templates, apart", () => {
  assert.equal(detectToolFamily(bundledTemplate(M2.file)), "minimax-m2");
  assert.equal(detectToolFamily(bundledTemplate(M3.file)), "minimax-m3");
  // One marker alone is no family.
  assert.equal(detectToolFamily("{{ '<minimax:tool_call>' }}"), "generic");
  assert.equal(detectToolFamily("{{ ']<]minimax[>[' }}<tool_call>"), "hermes");
});

Deno.test("llama.cpp's expected parses: MiniMax-M2", async () => {
  const m = templateReader(M2); // its generation prompt opens <think>
  assert.ok(m.reasoningOpen);
  const hello = "Hello, world!\nWhat's up?";
  await expectParse(m, `\n</think>\n\n${hello}`, { content: hello });
  await expectParse(m, `I'm\nthinking\n</think>\n\n${hello}`, {
    reasoning: "I'm\nthinking",
    content: hello,
  });
  await expectParse(
    m,
    'Let\'s call a tool:\n</think>\n\n<minimax:tool_call>\n<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>',
    { reasoning: "Let's call a tool:", calls: [["empty_args", {}]] },
  );
  await expectParse(
    m,
    '\n</think>\n\n<minimax:tool_call>\n<invoke name="special_function">\n<parameter name="arg1">1' +
      "</parameter>\n</invoke>\n</minimax:tool_call>",
    { calls: [["special_function", { arg1: 1 }]] },
  );
  // Cut by the token limit: the calls written so far, the cut one with what it has.
  await expectParse(
    m,
    '</think><minimax:tool_call>\n<invoke name="empty_args">\n</invoke>\n<invoke name="edit">\n' +
      '<parameter name="replaceAll">false</parameter>\n<parameter name="oldString">a b',
    { calls: [["empty_args", {}], ["edit", { replaceAll: false, oldString: "a b" }]] },
  );
  // Two invokes in one section; a raw string value may hold `<` and newlines.
  await expectParse(
    m,
    '</think><minimax:tool_call>\n<invoke name="edit">\n<parameter name="oldString">a < b\nc' +
      '</parameter>\n</invoke>\n<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>',
    { calls: [["edit", { oldString: "a < b\nc" }], ["empty_args", {}]] },
  );
});

/**
 * After MiniMax-M3's generation prompt (`]~b]ai\n`: the model opens `<mm:think>` itself, or
 * writes a bare end).
 */
const M3_READ: Reader = {
  label: "MiniMax-M3",
  family: "minimax-m3",
  model: "minimax-m2",
  reasoningOpen: false,
  tools: TYPED_PARSE_TOOLS,
};

Deno.test("llama.cpp's expected parses: MiniMax-M3", async () => {
  const ns = NS3;
  const hello = "Hello, world!\nWhat's up?";
  const el = (k: string, v: string) => `${ns}<${k}>${v}${ns}</${k}>`;
  const invoke = (name: string, ...args: string[]) =>
    `${ns}<invoke name="${name}">${args.join("")}${ns}</invoke>\n`;
  const block = (...invokes: string[]) => `${ns}<tool_call>\n${invokes.join("")}${ns}</tool_call>`;
  await expectParse(M3_READ, `</mm:think>${hello}`, { content: hello });
  await expectParse(M3_READ, `<mm:think>I'm\nthinking</mm:think>${hello}`, {
    reasoning: "I'm\nthinking",
    content: hello,
  });
  await expectParse(
    M3_READ,
    `<mm:think>Let me check the time</mm:think>${block(invoke("get_time", el("city", "Tokyo")))}`,
    { reasoning: "Let me check the time", calls: [["get_time", { city: "Tokyo" }]] },
  );
  const sf = invoke("special_function", el("arg1", "1"));
  await expectParse(M3_READ, `</mm:think>${block(sf)}`, {
    calls: [["special_function", { arg1: 1 }]],
  });
  await expectParse(
    M3_READ,
    `<mm:think>Let's call a tool:</mm:think>${block(invoke("empty_args"))}`,
    { reasoning: "Let's call a tool:", calls: [["empty_args", {}]] },
  );
  await expectParse(
    M3_READ,
    `<mm:think>Calling both</mm:think>` +
      block(invoke("get_time", el("city", "Paris")), invoke("python", el("code", "1 < 2"))),
    {
      reasoning: "Calling both",
      calls: [["get_time", { city: "Paris" }], ["python", { code: "1 < 2" }]],
    },
  );
  await expectParse(M3_READ, `<mm:think>Thinking about it</mm:think>Let me call it.${block(sf)}`, {
    reasoning: "Thinking about it",
    content: "Let me call it.",
    calls: [["special_function", { arg1: 1 }]],
  });
  await expectParse(
    M3_READ,
    `</mm:think>${block(invoke("magic_int", el("ref", "-14"), el("name", "12")))}`,
    { calls: [["magic_int", { ref: -14, name: "12" }]] },
  );
  // Objects and arrays as nested elements; unions as one of their alternatives.
  await expectParse(
    M3_READ,
    `</mm:think>${
      block(invoke("imaginary_number", el("number", el("real", "1.5") + el("imaginary", "-2.5"))))
    }`,
    { calls: [["imaginary_number", { number: { real: 1.5, imaginary: -2.5 } }]] },
  );
  await expectParse(
    M3_READ,
    `</mm:think>${
      block(invoke(
        "nested_args",
        el("tags", el("item", "alpha") + el("item", "beta")),
        el("entries", el("item", el("id", "1") + el("label", "one"))),
      ))
    }`,
    {
      calls: [["nested_args", { tags: ["alpha", "beta"], entries: [{ id: 1, label: "one" }] }]],
    },
  );
  await expectParse(
    M3_READ,
    `</mm:think>${
      block(invoke(
        "union_args",
        el("filter", el("item", "alpha") + el("item", "beta")),
        el("limit", el("max", "10")),
        el("label", el("text", "hi")),
      ))
    }`,
    {
      calls: [["union_args", {
        filter: ["alpha", "beta"],
        limit: { max: 10 },
        label: `${ns}<text>hi${ns}</text>`,
      }]],
    },
  );
  await expectParse(M3_READ, `</mm:think>${block(invoke("union_args", el("limit", "5")))}`, {
    calls: [["union_args", { limit: 5 }]],
  });
});

for (const c of [M2, M3]) await agentFamilyTests(c);

Deno.test("MiniMax-M2: the call grammar, its lazy trigger inside the opening", () => {
  assertLazyTrigger("minimax-m2", '<minimax:tool_call>\n<invoke name="get_weather">');
});
