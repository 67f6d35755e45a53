// gpt-oss's Harmony format (calls as `to=functions.NAME` messages on the commentary channel,
// reasoning on the analysis channel) with its REAL template from llama.cpp's bundle
// (models/templates): detection from the whole template; llama.cpp's expected parses
// (tests/test-chat.cpp) however the text is chunked; forced calls on its tiny model
// (`make-model --chat-format`, its markers single tokens as in the real vocab) at temperature 1
// (seeded) in Chat Completions, Responses and Anthropic, streamed and not, each validated by ajv,
// with the raw generated text checked against the family's own syntax and no marker text in
// `content`; a tool round trip with reasoning rendered through the template the way it expects,
// two calls of one turn; and its call grammar with its lazy trigger.
import assert from "node:assert/strict";
import { detectToolFamily, TOOL_FORMATS } from "../lib/chat/formats/mod.ts";
import { chatCompletionsConversation } from "../lib/chat/openai_chat.ts";
import { renderConversation } from "../lib/chat/render.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import {
  type AgentCase,
  agentFamilyTests,
  assertLazyTrigger,
} from "./support/family_agent_cases.ts";
import { bundledTemplate } from "./support/family_models.ts";
import { expectParse, templateReader } from "./support/family_parse.ts";
import { TOOL_NAMES, TOOLS } from "./support/family_tools.ts";

const GPT_OSS: AgentCase & { family: "harmony" } = {
  label: "gpt-oss",
  file: "openai-gpt-oss-120b.jinja",
  family: "harmony",
  model: "harmony",
  syntax: new RegExp(
    `^(?:<\\|channel\\|>commentary to=functions\\.${TOOL_NAMES} <\\|constrain\\|>json` +
      `| to=functions\\.${TOOL_NAMES}<\\|channel\\|>commentary json)<\\|message\\|>\\{.*\\}$`,
    "s",
  ),
  roundTrip: [
    "<|start|>assistant<|channel|>analysis<|message|>Paris first.<|end|>" +
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" +
    '{"city": "Paris", "unit": "celsius"}<|call|>' +
    "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" +
    '"18C"<|end|><|start|>assistant',
  ],
};

Deno.test("gpt-oss is detected from its real template; one Harmony marker is no family", () => {
  assert.equal(detectToolFamily(bundledTemplate(GPT_OSS.file)), "harmony");
  assert.equal(detectToolFamily("{{ '<|channel|>' }}"), "generic");
});

Deno.test("llama.cpp's expected parses: gpt-oss", async () => {
  const g = templateReader(GPT_OSS);
  const hello = "Hello, world!\nWhat's up?";
  await expectParse(g, `<|channel|>final<|message|>${hello}`, { content: hello });
  await expectParse(g, `<|channel|>commentary<|message|>${hello}`, { content: hello });
  const thoughts = { reasoning: "I'm\nthinking", content: hello };
  await expectParse(
    g,
    `<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>${hello}`,
    thoughts,
  );
  // As Hearth's engine prints a vocab where `<|end|>` stays a control token: no `<|end|>`.
  await expectParse(
    g,
    `<|channel|>analysis<|message|>I'm\nthinking<|start|>assistant<|channel|>final<|message|>${hello}`,
    thoughts,
  );
  await expectParse(g, "<|channel|>analysis<|message|>I'm\nthinking", {
    reasoning: "I'm\nthinking",
  });
  const call = { calls: [["special_function", { arg1: 1 }]] as [string, unknown][] };
  await expectParse(
    g,
    ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
    call,
  );
  await expectParse(
    g,
    '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
    call,
  );
  await expectParse(
    g,
    ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
    call,
  );
  await expectParse(
    g,
    '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
    call,
  );
  await expectParse(
    g,
    "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function" +
      '<|channel|>analysis<|message|>{"arg1": 1}',
    { reasoning: "I'm\nthinking", ...call },
  );
  await expectParse(
    g,
    "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary " +
      'to=functions.edit <|constrain|>json<|message|>{"oldString": "if (part < railCount - 1) {", ' +
      '"newString": "if (part < 4) {", "replaceAll": false}',
    {
      reasoning: "Thinking about edit...",
      calls: [["edit", {
        oldString: "if (part < railCount - 1) {",
        newString: "if (part < 4) {",
        replaceAll: false,
      }]],
    },
  );
  // Built-in tools (to=python, to=container.exec) are not the client's: nothing comes back.
  await expectParse(
    g,
    "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec" +
      "<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
    { reasoning: "I will execute python to say hello" },
  );
  await expectParse(
    g,
    "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>" +
      'commentary to=python <|constrain|>code<|message|>print("hello")',
    { reasoning: "I will execute python to say hello" },
  );
  await expectParse(
    g,
    "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant" +
      `<|channel|>final<|message|>${hello}`,
    thoughts,
  );
  await expectParse(
    g,
    "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=assistant" +
      `<|channel|>final<|message|>${hello}`,
    thoughts,
  );
  // A call cut off (by the token limit) before its arguments complete is still a call, with what
  // was written closed; never marker text.
  await expectParse(g, '<|channel|>commentary to=functions.special_function<|message|>{"arg1": ', {
    calls: [["special_function", {}]],
  });
  await expectParse(g, '<|channel|>commentary to=functions.edit<|message|>{"oldString": "a', {
    calls: [["edit", { oldString: "a" }]],
  });
});

await agentFamilyTests(GPT_OSS);

Deno.test("gpt-oss: two calls of one turn render as two messages, each with its result", () => {
  const template = compileTemplate(bundledTemplate(GPT_OSS.file));
  const call = (id: string, city: string) => ({
    id,
    type: "function",
    function: { name: "get_weather", arguments: JSON.stringify({ city, unit: "celsius" }) },
  });
  const { conv } = chatCompletionsConversation({
    messages: [
      { role: "user", content: "Paris and Lyon?" },
      {
        role: "assistant",
        content: null,
        reasoning_content: "Two cities.",
        tool_calls: [call("c1", "Paris"), call("c2", "Lyon")],
      },
      { role: "tool", tool_call_id: "c2", content: "20C" },
      { role: "tool", tool_call_id: "c1", content: "18C" },
    ],
    tools: TOOLS.map((t) => ({ type: "function", function: t })),
  } as never);
  const { text } = renderConversation(template, TOOL_FORMATS.harmony, {}, conv, {
    addGenerationPrompt: true,
  });
  const result = (c: string) =>
    `<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"${c}"<|end|>`;
  const sent = (city: string) =>
    `<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>` +
    `{"city": "${city}", "unit": "celsius"}<|call|>`;
  assert.ok(
    text.endsWith(
      "<|start|>assistant<|channel|>analysis<|message|>Two cities.<|end|>" + sent("Paris") +
        result("18C") + sent("Lyon") + result("20C") + "<|start|>assistant",
    ),
    text,
  );
});

Deno.test("gpt-oss: the call grammar, its lazy trigger at the call's channel header", () => {
  const opening =
    "<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>commentary " +
    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "celsius"}';
  const fired = assertLazyTrigger("harmony", opening);
  // The trigger starts at the call's channel header, after the analysis message.
  assert.equal(opening.slice(fired, fired + 11), "<|channel|>");
  assert.ok(fired > opening.indexOf("<|end|>"), `${fired}`);
});
