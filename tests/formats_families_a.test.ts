// Tool-call and reasoning formats of gpt-oss (Harmony), GLM-4.6 / GLM-4.7-Flash, Kimi-K2 and
// MiniMax-M2, each with its REAL template from llama.cpp's bundle (models/templates): detection
// from the whole template (GLM before Hermes); llama.cpp's expected parses (tests/test-chat.cpp)
// however the text is chunked; forced calls on the family's tiny model (`make-model
// --chat-format`, its markers single tokens as in the real vocab) at temperature 1 (seeded) in
// Chat Completions, Responses and Anthropic, streamed and not, each validated by ajv, with the
// raw generated text checked against the family's own syntax and no marker text in `content`;
// a tool round trip with reasoning rendered through the template the way it expects; and the
// Python Jinja2 behaviours the real templates need (Kimi-K2's list methods, Hermes 3's lookups).
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Conversation, ToolSpec } from "../lib/chat/conversation.ts";
import { detectToolFamily, TOOL_FORMATS, type ToolFamily } from "../lib/chat/formats/mod.ts";
import { chatReply, collectReply, planChat } from "../lib/chat/generation.ts";
import { anthropicConversation } from "../lib/chat/anthropic.ts";
import { chatCompletionsConversation } from "../lib/chat/openai_chat.ts";
import { responsesConversation } from "../lib/chat/responses.ts";
import { renderConversation } from "../lib/chat/render.ts";
import { type CompiledTemplate, compileTemplate, renderChat } from "../lib/chat/template.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling.ts";
import type { GenEvent } from "../lib/engine/scheduler.ts";
import { startWorkerEngine, type WorkerEngine } from "../lib/engine/worker_host.ts";
import type { ChatFormatName } from "../lib/gguf/chat_formats.ts";
import { createApp } from "../routes/app.ts";
import { newServerState } from "../routes/state.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { cachedTinyModel } from "./support/models.ts";

const TEMPLATES = `${await llamaSourceDir()}/models/templates`;
const source = (file: string) => Deno.readTextFileSync(`${TEMPLATES}/${file}`);

type Case = {
  label: string;
  file: string;
  family: ToolFamily & ChatFormatName;
  /** The raw text of a forced reply (after any reasoning) in the family's own syntax. */
  syntax: RegExp;
  /** What the template writes for an assistant turn with reasoning and a call, then its result. */
  roundTrip: string[];
  /**
   * Whether to run the three dialects on it too. GLM-4.7-Flash speaks GLM-4.6's calls (run
   * there); its open `<think>` is MiniMax-M2's case, and forced reasoning before a call is slow
   * on a random model (a grammar over the whole vocab for up to 512 characters).
   */
  dialects?: false;
};

const NAMES = "(?:get_weather|place_order)";
const CASES: Case[] = [
  {
    label: "gpt-oss",
    file: "openai-gpt-oss-120b.jinja",
    family: "harmony",
    syntax: new RegExp(
      `^(?:<\\|channel\\|>commentary to=functions\\.${NAMES} <\\|constrain\\|>json` +
        `| to=functions\\.${NAMES}<\\|channel\\|>commentary json)<\\|message\\|>\\{.*\\}$`,
      "s",
    ),
    roundTrip: [
      "<|start|>assistant<|channel|>analysis<|message|>Paris first.<|end|>" +
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" +
      '{"city": "Paris", "unit": "celsius"}<|call|>' +
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" +
      '"18C"<|end|><|start|>assistant',
    ],
  },
  {
    label: "GLM-4.6",
    file: "GLM-4.6.jinja",
    family: "glm",
    syntax: new RegExp(
      `^(?:<tool_call>${NAMES}\\s*(?:<arg_key>\\w+</arg_key>\\s*<arg_value>.*?</arg_value>\\s*)*` +
        `</tool_call>\\s*)+$`,
      "s",
    ),
    roundTrip: [
      "<|assistant|>\n<think>Paris first.</think>\n<tool_call>get_weather\n" +
      "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n" +
      "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
      "<|observation|>\n<tool_response>\n18C\n</tool_response><|assistant|>",
    ],
  },
  {
    label: "GLM-4.7-Flash",
    file: "GLM-4.7-Flash.jinja",
    family: "glm",
    syntax: new RegExp(
      `^(?:<tool_call>${NAMES}\\s*(?:<arg_key>\\w+</arg_key>\\s*<arg_value>.*?</arg_value>\\s*)*` +
        `</tool_call>\\s*)+$`,
      "s",
    ),
    roundTrip: [
      "<|assistant|><think>Paris first.</think><tool_call>get_weather" +
      "<arg_key>city</arg_key><arg_value>Paris</arg_value>" +
      "<arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>",
      "<|observation|><tool_response>18C</tool_response><|assistant|><think>",
    ],
    dialects: false,
  },
  {
    label: "Kimi-K2-Thinking",
    file: "Kimi-K2-Thinking.jinja",
    family: "kimi-k2",
    syntax: new RegExp(
      `^<\\|tool_calls_section_begin\\|>(?:<\\|tool_call_begin\\|>functions\\.${NAMES}:\\d+` +
        `<\\|tool_call_argument_begin\\|>\\{.*?\\}<\\|tool_call_end\\|>\\s*)+` +
        `<\\|tool_calls_section_end\\|>$`,
      "s",
    ),
    roundTrip: [
      "<think>Paris first.</think><|tool_calls_section_begin|><|tool_call_begin|>" +
      "functions.get_weather:0<|tool_call_argument_begin|>" +
      '{"city": "Paris", "unit": "celsius"}<|tool_call_end|><|tool_calls_section_end|>',
      "## Return of functions.get_weather:0\n18C<|im_end|>",
    ],
  },
  {
    label: "MiniMax-M2",
    file: "MiniMax-M2.jinja",
    family: "minimax-m2",
    syntax: new RegExp(
      `^<minimax:tool_call>\\s*(?:<invoke name="${NAMES}">\\s*` +
        `(?:<parameter name="\\w+">.*?</parameter>\\s*)*</invoke>\\s*)+</minimax:tool_call>$`,
      "s",
    ),
    roundTrip: [
      "]~b]ai\n<think>\nParis first.\n</think>\n\n",
      '<minimax:tool_call>\n<invoke name="get_weather">\n' +
      '<parameter name="city">Paris</parameter>\n<parameter name="unit">celsius</parameter>\n' +
      "</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>18C</response>[e~[\n]~b]ai\n<think>\n",
    ],
  },
];

// ---------------------------------------------------------------- detection

Deno.test("families are detected from the real templates (GLM before Hermes)", () => {
  for (const c of CASES) assert.equal(detectToolFamily(source(c.file)), c.family, c.label);
  for (const f of ["Kimi-K2-Instruct.jinja", "moonshotai-Kimi-K2.jinja"]) {
    assert.equal(detectToolFamily(source(f)), "kimi-k2", f);
  }
  for (
    const f of [
      "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
      "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    ]
  ) {
    assert.equal(detectToolFamily(source(f)), "hermes", f);
  }
  // MiniMax-M3's namespaced syntax and Kimi-K3's are other formats.
  assert.notEqual(detectToolFamily(source("MiniMax-M3.jinja")), "minimax-m2");
  assert.notEqual(detectToolFamily(source("Kimi-K3.jinja")), "kimi-k2");
  // One marker alone is not a family.
  assert.equal(detectToolFamily("{{ '<|channel|>' }}"), "generic");
  assert.equal(detectToolFamily("<tool_call>{{ name }}<arg_key>"), "hermes");
  assert.equal(detectToolFamily("{{ '<minimax:tool_call>' }}"), "generic");
});

// ---------------------------------------------------------------- llama.cpp's expected parses

const anyTool = (name: string): ToolSpec => ({ name, parameters: { type: "object" } });
const TEST_TOOLS = [
  "special_function",
  "special_function_with_opt",
  "empty_args",
  "python",
  "html",
  "read_file_diff_md",
  "execute_command",
].map(anyTool);
TEST_TOOLS.push({
  name: "edit",
  parameters: {
    type: "object",
    properties: {
      oldString: { type: "string" },
      newString: { type: "string" },
      replaceAll: { type: "boolean" },
    },
  },
});

type Parsed = { reasoning: string; content: string; calls: [string, unknown, string?][] };

/**
 * The reply `text` parsed as `chatReply` does (reasoning through a parser of its own, so a call
 * inside it is still a call), fed in `chunks`.
 */
async function parse(c: Case, chunks: string[]): Promise<Parsed> {
  const f = TOOL_FORMATS[c.family];
  async function* events(): AsyncGenerator<GenEvent> {
    for (const t of chunks) yield { type: "text", text: t };
    yield {
      type: "done",
      finishReason: "stop",
      promptTokens: 0,
      cachedTokens: 0,
      completionTokens: 0,
    };
  }
  const plan = {
    format: f,
    tools: TEST_TOOLS,
    reasoningOpen: f.reasoning ? openThink(c) : false,
    model: (await engineFor(c.family)).model,
  } as Parameters<typeof chatReply>[1];
  const out: Parsed = { reasoning: "", content: "", calls: [] };
  const names = new Map<number, string>();
  const ids = new Map<number, string>();
  for await (const ev of chatReply(events(), plan)) {
    if (ev.type === "text") out.content += ev.text;
    if (ev.type === "reasoning") out.reasoning += ev.text;
    if (ev.type === "tool_call_start") names.set(ev.index, ev.name), ids.set(ev.index, ev.id);
    if (ev.type === "tool_call_end") {
      const id = ids.get(ev.index)!;
      out.calls.push(
        [
          names.get(ev.index)!,
          JSON.parse(ev.arguments),
          ...(id.startsWith("call_") ? [] : [id]),
        ] as [string, unknown, string?],
      );
    }
  }
  return out;
}

const opens = new Map<Case, boolean>();

/** Whether the real template's generation prompt leaves a think block open. */
function openThink(c: Case): boolean {
  const known = opens.get(c);
  if (known !== undefined) return known;
  const prompt = renderChat(compileTemplate(source(c.file)), {
    messages: [{ role: "user", content: "hi" }],
    addGenerationPrompt: true,
  });
  const m = TOOL_FORMATS[c.family].reasoning!;
  const at = prompt.lastIndexOf(m.start);
  opens.set(c, at >= 0 && !prompt.includes(m.end, at));
  return opens.get(c)!;
}

const byLabel = (label: string) => CASES.find((c) => c.label === label)!;

/** Every way of cutting `text` in two, and fixed chunks of 1, 2, 3 and 7 characters. */
function chunkings(text: string): string[][] {
  const out: string[][] = [[text]];
  for (const size of [1, 2, 3, 7]) {
    const cs: string[] = [];
    for (let i = 0; i < text.length; i += size) cs.push(text.slice(i, i + size));
    out.push(cs);
  }
  for (let i = 1; i < text.length; i++) out.push([text.slice(0, i), text.slice(i)]);
  return out;
}

async function expectParse(label: string, text: string, want: Partial<Parsed>): Promise<void> {
  for (const chunks of chunkings(text)) {
    const got = await parse(byLabel(label), chunks);
    assert.deepEqual(
      got,
      { reasoning: "", content: "", calls: [], ...want },
      `${label} in chunks ${JSON.stringify(chunks)}`,
    );
  }
}

Deno.test("llama.cpp's expected parses: gpt-oss", async () => {
  const g = "gpt-oss";
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

Deno.test("llama.cpp's expected parses: GLM-4.6 and GLM-4.7-Flash", async () => {
  await expectParse(
    "GLM-4.6",
    "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    { calls: [["special_function", { arg1: 1 }]] },
  );
  const f = "GLM-4.7-Flash"; // its generation prompt opens <think>
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

Deno.test("llama.cpp's expected parses: Kimi-K2", async () => {
  const k = "Kimi-K2-Thinking";
  const hello = "Hello, world!\nWhat's up?";
  const sf = (i: number, args = '{"arg1": 1}') =>
    `<|tool_call_begin|>functions.special_function:${i}<|tool_call_argument_begin|>${args}<|tool_call_end|>`;
  const section = (...calls: string[]) =>
    `<|tool_calls_section_begin|>${calls.join("")}<|tool_calls_section_end|>`;
  const one: [string, unknown, string][] = [[
    "special_function",
    { arg1: 1 },
    "functions.special_function:0",
  ]];
  await expectParse(k, hello, { content: hello });
  await expectParse(k, section(sf(0)), { calls: one });
  await expectParse(k, `<think>I'm thinking about this</think>${section(sf(0))}`, {
    reasoning: "I'm thinking about this",
    calls: one,
  });
  await expectParse(k, hello + section(sf(0)), { content: hello, calls: one });
  const py =
    '<|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>{"code": "print(\'hey\')"}<|tool_call_end|>';
  const two: [string, unknown, string][] = [
    ...one,
    ["python", { code: "print('hey')" }, "functions.python:1"],
  ];
  await expectParse(k, `<think>I need to call two functions</think>${section(sf(0), py)}`, {
    reasoning: "I need to call two functions",
    calls: two,
  });
  await expectParse(
    k,
    section(
      sf(0),
      '<|tool_call_begin|>functions.html:2<|tool_call_argument_begin|>{"markup": "<p>test</p>"}<|tool_call_end|>',
    ),
    { calls: [...one, ["html", { markup: "<p>test</p>" }, "functions.html:2"]] },
  );
  await expectParse(
    k,
    section(
      "<|tool_call_begin|>functions.empty_args:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
    ),
    { calls: [["empty_args", {}, "functions.empty_args:0"]] },
  );
  // The singular spelling of the section markers (vLLM's and llama.cpp's parsers read it too).
  await expectParse(
    k,
    `<|tool_call_section_begin|>${sf(0)}<|tool_call_section_end|>`,
    { calls: one },
  );
  // Calls inside the thinking block, with and without the section and end markers.
  await expectParse(k, `<think>I need to call two functions${section(sf(0), py)}`, {
    reasoning: "I need to call two functions",
    calls: two,
  });
  await expectParse(
    k,
    '<think>I need to call two functions<|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin|>{"arg1": 1}' +
      '<|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>{"code": "print(\'hey\')"}',
    { reasoning: "I need to call two functions", calls: two },
  );
  await expectParse(
    k,
    '<|tool_call_begin|>functions.execute_command:0<|tool_call_argument_begin|>{"command": "ls -lah", ' +
      '"cwd": "/home/user/development/exllamav3", "timeout": 10}',
    {
      calls: [[
        "execute_command",
        { command: "ls -lah", cwd: "/home/user/development/exllamav3", timeout: 10 },
        "functions.execute_command:0",
      ]],
    },
  );
});

Deno.test("llama.cpp's expected parses: MiniMax-M2", async () => {
  const m = "MiniMax-M2"; // its generation prompt opens <think>
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

// ---------------------------------------------------------------- templates under @huggingface/jinja

const HISTORY = [
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

Deno.test("Jinja2 and llama.cpp Jinja behaviours: list methods, undefined keys and `+`, filters", () => {
  const r = (src: string, extra: Record<string, unknown> = {}) =>
    renderChat(compileTemplate(src), { messages: [], addGenerationPrompt: false, extra });
  assert.equal(
    r(
      "{% set ns = namespace(q=[]) %}{% set _ = ns.q.append('a') %}{% set _ = ns.q.append('b') %}" +
        "{{ ns.q.pop(0) }}{{ ns.q | length }}{{ ns.q.pop() }}{{ ns.q | length }}",
    ),
    "a1b0",
  );
  assert.equal(
    r("{% set l = [3] %}{% set _ = l.extend([4, 5]) %}{% set _ = l.insert(0, 2) %}{{ l | join(',') }}"),
    "2,3,4,5",
  );
  assert.equal(r("{% set l = ['x', 'y', 'x'] %}{{ l.index('y') }}{{ l.count('x') }}"), "12");
  assert.equal(
    r("{% set d = {'a': 1, 'b': 2} %}{{ d.pop('a') }}{{ d | length }}{{ d.pop('z', 9) }}"),
    "119",
  );
  // A key that is undefined reads as undefined (Jinja2), not an error.
  assert.equal(
    r("{% set m = {'string': 'str'} %}{{ 'yes' if m[x.type] is defined else 'no' }}", { x: {} }),
    "no",
  );
  assert.equal(r("[{{ x.description | trim }}]", { x: {} }), "[]");
  // As llama.cpp's Jinja: none or undefined beside a string in `+` is "".
  assert.equal(r("{{ '// ' + x.description + '.' }}{{ n + 'b' }}", { x: {}, n: null }), "// .b");
  assert.equal(r("{{ 1 + 2 }}{{ [1] + [2] }}"), "3[1, 2]");
  assert.throws(() => r("{% set l = [] %}{{ l.pop() }}"), /out of range/);
});

Deno.test("real templates render tools and round trips (Kimi-K2 queue, Hermes 3 parameters)", () => {
  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string" }, // no description
          tags: { type: "array", items: { type: "string" } },
          where: { type: "object", properties: { lat: { type: "number" } } },
          unit: { enum: ["celsius", "fahrenheit"], description: "unit" },
        },
        required: ["city"],
      },
    },
  }];
  const render = (file: string) =>
    renderChat(compileTemplate(source(file)), {
      messages: HISTORY as never,
      addGenerationPrompt: true,
      bosToken: "<s>",
      extra: { tools },
    });
  const hermes3 = render("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja");
  assert.ok(
    hermes3.includes("get_weather(city: str, tags: list[Any], where: dict, unit: Any)"),
    hermes3,
  );
  assert.ok(hermes3.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"'));
  for (const f of ["Kimi-K2-Thinking.jinja", "Kimi-K2-Instruct.jinja"]) {
    const out = render(f);
    assert.ok(out.includes("## Return of functions.get_weather:0\n18C"), `${f}: ${out}`);
  }
  assert.ok(render("moonshotai-Kimi-K2.jinja").includes("## Return of call_1\\n18C"));
});

// ---------------------------------------------------------------- the tiny model, real templates

const weather = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
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
const SCHEMAS: Record<string, Record<string, unknown>> = {
  get_weather: weather,
  place_order: order,
};
const TOOLS: ToolSpec[] = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  name,
  description: `The ${name} tool`,
  parameters,
}));
const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]));

function assertValidCall(name: string, args: string, where: string): void {
  const v = validators[name];
  assert.ok(v, `${where}: unknown tool ${name}`);
  const parsed = JSON.parse(args);
  assert.ok(v(parsed), `${where}: ${args} fails the schema: ${ajv.errorsText(v.errors)}`);
}

/** Marker text of these families that must never reach `content`. */
const MARKERS =
  /<\|(?:channel|message|start|end|constrain|call|return)\|>|<\/?(?:tool_call|arg_key|arg_value|think)>|<\|tool_call|<\/?minimax:|<invoke |<parameter /;

const MAX_TOKENS = 600;

const engines = new Map<ChatFormatName, WorkerEngine>();
async function engineFor(family: ChatFormatName): Promise<WorkerEngine> {
  let e = engines.get(family);
  if (!e) {
    const path = await cachedTinyModel(
      `agents-${family}`,
      ["chat_formats.ts", "agent_templates.ts", "presets.ts"],
      { chatFormat: family },
    );
    e = await startWorkerEngine(
      await loadEngineModel({ path, maxBatch: 4, maxSeqLen: 4096, threads: 1 }),
    );
    engines.set(family, e);
  }
  return e;
}
globalThis.addEventListener("unload", () => {
  for (const e of engines.values()) e.close();
});

function appFor(engine: WorkerEngine, template: CompiledTemplate) {
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

function conversation(toolChoice: Conversation["toolChoice"]): Conversation {
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

for (const c of CASES) {
  const template = compileTemplate(source(c.file));

  Deno.test(`${c.label}: forced calls, raw text in the family's own syntax`, async () => {
    const engine = await engineFor(c.family);
    await Promise.all([1, 2].map(async (seed) => {
      const plan = planChat(
        engine.model,
        template,
        conversation(seed === 1 ? { type: "required" } : { type: "tool", name: "place_order" }),
        {
          sampling: { ...defaultSampling(), temperature: 1, seed },
          stop: [],
          ignoreEos: false,
          maxTokens: MAX_TOKENS,
        },
        { addGenerationPrompt: true },
      );
      const events: GenEvent[] = [];
      for await (const ev of engine.submit(plan.req)) events.push(ev);
      const raw = events.map((e) => (e.type === "text" ? e.text : "")).join("");
      // A reply that starts inside reasoning closes it before the call.
      const end = plan.format.reasoning?.end ?? "";
      const call = plan.reasoningOpen ? raw.slice(raw.indexOf(end) + end.length).trim() : raw;
      if (plan.reasoningOpen) assert.ok(raw.includes(end), `${c.label}: ${raw}`);
      assert.match(call, c.syntax, `${c.label} seed ${seed}: ${JSON.stringify(raw)}`);
      async function* again() {
        yield* events;
      }
      const reply = await collectReply(chatReply(again(), plan));
      assert.equal(reply.end?.finishReason, "tool_calls", `${c.label}: ${JSON.stringify(raw)}`);
      assert.equal(reply.text, "", `${c.label}: no text beside a forced call`);
      assert.equal(reply.calls.length, 1, JSON.stringify(raw));
      for (const k of reply.calls) assertValidCall(k.name, k.arguments, `${c.label} raw`);
      if (seed === 2) assert.equal(reply.calls[0].name, "place_order");
    }));
  });

  Deno.test({
    name: `${c.label}: forced calls validate in all three dialects, streamed and not`,
    ignore: c.dialects === false,
  }, async () => {
    const { openai, anthropic } = appFor(await engineFor(c.family), template);
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
    // Six requests at once: the scheduler batches them.
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
          max_tokens: MAX_TOKENS,
        });
        const choice = chat.choices[0];
        assert.equal(choice.finish_reason, "tool_calls", `${c.label} chat`);
        checkContent(choice.message.content, `${c.label} chat`);
        assert.equal(choice.message.tool_calls?.length, 1);
        for (const k of choice.message.tool_calls ?? []) {
          if (k.type === "function") {
            assertValidCall(k.function.name, k.function.arguments, `${c.label} chat`);
          }
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
        });
        assert.equal(msg.stop_reason, "tool_use", `${c.label} anthropic`);
        assert.equal(msg.content.filter((b) => b.type === "tool_use").length, 1);
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

  Deno.test(`${c.label}: a tool round trip renders, reasoning handed back as the template reads it`, async () => {
    const engine = await engineFor(c.family);
    const { conv } = chatCompletionsConversation(
      { messages: HISTORY, tools: TOOLS.map((t) => ({ type: "function", function: t })) } as never,
    );
    const plan = planChat(
      engine.model,
      template,
      conv,
      { sampling: defaultSampling(), stop: [], ignoreEos: false, maxTokens: 4 },
      { addGenerationPrompt: true },
    );
    for (const piece of c.roundTrip) {
      assert.ok(plan.text.includes(piece), `${c.label}:\n${plan.text}`);
    }
    // And served: the same history answered in each dialect.
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
}

Deno.test("the round trip in Anthropic and Responses shapes renders as in Chat Completions", () => {
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
  for (const c of CASES) {
    const template = compileTemplate(source(c.file));
    for (const [dialect, conv] of [["anthropic", anthropic], ["responses", responses]] as const) {
      const { text } = renderConversation(template, TOOL_FORMATS[c.family], {}, conv, {
        addGenerationPrompt: true,
      });
      for (const piece of c.roundTrip) {
        assert.ok(text.includes(piece), `${c.label} (${dialect}):\n${text}`);
      }
    }
  }
});

Deno.test("gpt-oss: two calls of one turn render as two messages, each with its result", () => {
  const template = compileTemplate(source("openai-gpt-oss-120b.jinja"));
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

Deno.test("each family's call grammar and its lazy triggers", () => {
  // The lazy patterns fire inside the opening the grammar starts with, wherever the tokens split.
  const openings: Record<string, string> = {
    harmony:
      '<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "celsius"}',
    glm: "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>",
    "kimi-k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0",
    "minimax-m2": '<minimax:tool_call>\n<invoke name="get_weather">',
  };
  for (const [family, text] of Object.entries(openings)) {
    const f = TOOL_FORMATS[family as ToolFamily];
    let fired = -1;
    for (let i = 1; i <= text.length && fired < 0; i++) {
      for (const p of f.triggers.patterns) {
        const m = new RegExp(p, "d").exec(text.slice(0, i));
        if (m) fired = m.indices![1]![0];
      }
    }
    assert.ok(fired >= 0 || f.triggers.tokens.some((t) => text.includes(t)), family);
    // Harmony's trigger starts at the call's channel header, after the analysis message.
    if (family === "harmony") assert.equal(text.slice(fired, fired + 11), "<|channel|>");
    f.callGrammar(TOOLS, { parallel: true });
  }
});
