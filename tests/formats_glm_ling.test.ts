// GLM's format (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`, raw
// string values, `<think>` reasoning) in GLM-4.6, GLM-4.7-Flash and Ling 3.0 / Bailing V3 (GLM's
// calls and `<think>` in `<role>..</role>` turns), each with its REAL template from llama.cpp's
// bundle (models/templates): detection from the whole template (GLM before Hermes); llama.cpp's
// expected parses (tests/test-chat.cpp) however the text is chunked; forced calls on GLM's tiny
// model (`make-model --chat-format glm`, its markers single tokens as in the real vocab) at
// temperature 1 (seeded), raw and in Chat Completions, Responses and Anthropic, streamed and not,
// each validated by ajv, with the raw generated text checked against the family's own syntax and
// no marker text in `content`; a tool round trip with reasoning rendered through each template
// the way it expects; and the call grammar with its lazy trigger.
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

const GLM_CALLS = new RegExp(
  `^(?:<tool_call>${TOOL_NAMES}\\s*(?:<arg_key>\\w+</arg_key>\\s*<arg_value>.*?</arg_value>\\s*)*` +
    `</tool_call>\\s*)+$`,
  "s",
);

const GLM_46: AgentCase & { family: "glm" } = {
  label: "GLM-4.6",
  file: "GLM-4.6.jinja",
  family: "glm",
  model: "glm",
  syntax: GLM_CALLS,
  roundTrip: [
    "<|assistant|>\n<think>Paris first.</think>\n<tool_call>get_weather\n" +
    "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n" +
    "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
    "<|observation|>\n<tool_response>\n18C\n</tool_response><|assistant|>",
  ],
};

const GLM_47_FLASH: AgentCase & { family: "glm" } = {
  label: "GLM-4.7-Flash",
  file: "GLM-4.7-Flash.jinja",
  family: "glm",
  model: "glm",
  syntax: GLM_CALLS,
  roundTrip: [
    "<|assistant|><think>Paris first.</think><tool_call>get_weather" +
    "<arg_key>city</arg_key><arg_value>Paris</arg_value>" +
    "<arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>",
    "<|observation|><tool_response>18C</tool_response><|assistant|><think>",
  ],
  // GLM-4.7-Flash speaks GLM-4.6's calls (run there); its open `<think>` is MiniMax-M2's case,
  // and forced reasoning before a call is slow on a random model (a grammar over the whole vocab
  // for up to 512 characters).
  dialects: false,
};

const LING = "inclusionai-ling-3.0-flash.jinja";
const LING_30: AgentCase = {
  label: "Ling 3.0",
  file: LING,
  family: "glm",
  model: "glm",
  prompt: "<role>ASSISTANT</role>\n<think>",
  opensReasoning: true,
  syntax: new RegExp(
    `^<tool_call>${TOOL_NAMES}\\s*(?:<arg_key>\\w+</arg_key>\\s*<arg_value>.*?</arg_value>\\s*)*` +
      "</tool_call>$",
    "s",
  ),
  markers: /<\/?(?:tool_call|arg_key|arg_value|think|role)>|<\|role_end\|>/,
  roundTrip: [
    "<role>HUMAN</role>Weather in Paris?<|role_end|><role>ASSISTANT</role>\n" +
    "<think>Paris first.</think><tool_call>get_weather\n<arg_key>city</arg_key>\n" +
    "<arg_value>Paris</arg_value><arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n" +
    "</tool_call><|role_end|><role>OBSERVATION</role>\n<tool_response>\n18C\n</tool_response>" +
    "<|role_end|><role>ASSISTANT</role>\n<think>",
  ],
  roundTripEnds: true,
  // As GLM-4.7-Flash: its generation prompt opens `<think>`.
  dialects: false,
};

Deno.test("GLM-4.6, GLM-4.7-Flash and Ling 3.0 are detected as GLM, before Hermes", () => {
  for (const c of [GLM_46, GLM_47_FLASH, LING_30]) {
    assert.equal(detectToolFamily(bundledTemplate(c.file)), "glm", c.label);
  }
  for (
    const f of [
      "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
      "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    ]
  ) {
    assert.equal(detectToolFamily(bundledTemplate(f)), "hermes", f);
  }
  // One marker alone is no family: key/value tags without a GLM or Ling turn stay Hermes.
  assert.equal(detectToolFamily("<tool_call>{{ name }}<arg_key>"), "hermes");
  assert.equal(detectToolFamily("{{ '<role>ASSISTANT</role>' }}"), "generic");
});

Deno.test("llama.cpp's expected parses: GLM-4.6 and GLM-4.7-Flash", async () => {
  await expectParse(
    templateReader(GLM_46),
    "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    { calls: [["special_function", { arg1: 1 }]] },
  );
  const f = templateReader(GLM_47_FLASH); // its generation prompt opens <think>
  assert.ok(f.reasoningOpen);
  await expectParse(f, "I'm\nthinking</think>Hello, world!\nWhat's up?", {
    reasoning: "I'm\nthinking",
    content: "Hello, world!\nWhat's up?",
  });
  const call =
    "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>";
  await expectParse(f, `</think>${call}`, { calls: [["special_function", { arg1: 1 }]] });
  await expectParse(f, `I'm\nthinking</think>${call}`, {
    reasoning: "I'm\nthinking",
    calls: [["special_function", { arg1: 1 }]],
  });
  await expectParse(
    f,
    `</think>${call}<tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1` +
      "</arg_value><arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>",
    {
      calls: [["special_function", { arg1: 1 }], ["special_function_with_opt", {
        arg1: 1,
        arg2: 2,
      }]],
    },
  );
  await expectParse(
    f,
    "Let me read the diff content.</think><tool_call>read_file_diff_md</tool_call>",
    {
      reasoning: "Let me read the diff content.",
      calls: [["read_file_diff_md", {}]],
    },
  );
  // Cut by the token limit inside a call: what was written is the call (a cut raw string too).
  await expectParse(
    f,
    "</think><tool_call>edit<arg_key>replaceAll</arg_key><arg_value>true</arg_value>" +
      "<arg_key>oldString</arg_key><arg_value>a b",
    { calls: [["edit", { replaceAll: true, oldString: "a b" }]] },
  );
  // A string-typed argument stays a string even when it reads as a number.
  await expectParse(
    f,
    "</think><tool_call>edit<arg_key>oldString</arg_key><arg_value>12</arg_value>" +
      "<arg_key>replaceAll</arg_key><arg_value>true</arg_value></tool_call>",
    { calls: [["edit", { oldString: "12", replaceAll: true }]] },
  );
});

/** After Ling's generation prompt, which opens `<think>`. */
const LING_READ: Reader = {
  label: "Ling 3.0",
  family: "glm",
  model: "glm",
  reasoningOpen: true,
  tools: TYPED_PARSE_TOOLS,
};

Deno.test("llama.cpp's expected parses: Ling 3.0", async () => {
  const getTime = "<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n" +
    "</tool_call>";
  const paris: [string, unknown] = ["get_time", { city: "Paris" }];
  // A call before the think block closes is still a call; the text before it is reasoning.
  await expectParse(LING_READ, `I need to check the time first.\n${getTime}`, {
    reasoning: "I need to check the time first.",
    calls: [paris],
  });
  await expectParse(LING_READ, `Let me check the time.\n</think>\nChecking it now.\n${getTime}`, {
    reasoning: "Let me check the time.",
    content: "Checking it now.",
    calls: [paris],
  });
  await expectParse(LING_READ, `</think>\n${getTime}\n${getTime}`, { calls: [paris, paris] });
  // Marker-like text inside a raw string value is the value.
  await expectParse(
    LING_READ,
    "check this\n</think>\n<tool_call>tool_2req_4opt\n<arg_key>req1</arg_key>\n" +
      "<arg_value>contains </think> and <tool_call> strings</arg_value>\n" +
      "<arg_key>req2</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    {
      reasoning: "check this",
      calls: [["tool_2req_4opt", { req1: "contains </think> and <tool_call> strings", req2: 1 }]],
    },
  );
  // No newline after the name (as the template renders history); arguments in any order.
  await expectParse(
    LING_READ,
    "</think>\n<tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
    { calls: [paris] },
  );
  await expectParse(
    LING_READ,
    "</think>\n<tool_call>tool_2req_4opt\n<arg_key>req2</arg_key>\n<arg_value>7</arg_value>\n" +
      "<arg_key>req1</arg_key>\n<arg_value>hello</arg_value>\n</tool_call>",
    { calls: [["tool_2req_4opt", { req2: 7, req1: "hello" }]] },
  );
});

for (const c of [GLM_46, GLM_47_FLASH, LING_30]) await agentFamilyTests(c);

Deno.test("GLM: the call grammar, its lazy trigger inside the opening", () => {
  assertLazyTrigger("glm", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>");
});
