// Kimi-K3 (its own XTML: `<|open|>call tool=".." index=".."<|sep|>` with typed
// `<|open|>argument key=".." type=".."<|sep|>V<|close|>argument<|sep|>`, reasoning in `think`,
// content in `response`) and Ling 3.0 / Bailing V3 (GLM's calls and `<think>` in
// `<role>..</role>` turns) and MiniMax-M3 (every tag namespaced, `]<]minimax[>[<invoke
// name="..">]<]minimax[>[<KEY>V]<]minimax[>[</KEY>`, objects and arrays as nested elements,
// `<mm:think>` reasoning), detected from their REAL templates in llama.cpp's bundle. Checked
// here: detection (the neighbours keep their families); llama.cpp's expected parses
// (tests/test-chat.cpp) however the text is chunked; forced calls through the real templates on
// the K2, GLM and M2 tiny models at temperature 1 (seeded), validated by ajv, the raw text in
// the family's syntax and no marker in content; tool round trips rendered through the real
// templates, reasoning handed back.
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Conversation, ToolSpec } from "../lib/chat/conversation.ts";
import { detectToolFamily, TOOL_FORMATS, type ToolFamily } from "../lib/chat/formats/mod.ts";
import { chatReply, collectReply, planChat } from "../lib/chat/generation.ts";
import { chatCompletionsConversation } from "../lib/chat/openai_chat.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import type { ChatFormatName } from "../lib/gguf/chat_formats.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling.ts";
import type { GenEvent } from "../lib/engine/scheduler.ts";
import { startWorkerEngine, type WorkerEngine } from "../lib/engine/worker_host.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { cachedTinyModel } from "./support/models.ts";

const TEMPLATES = `${await llamaSourceDir()}/models/templates`;
const source = (file: string) => Deno.readTextFileSync(`${TEMPLATES}/${file}`);
const LING = "inclusionai-ling-3.0-flash.jinja";
const K3 = "Kimi-K3.jinja";

// ---------------------------------------------------------------- detection

Deno.test("Kimi-K3, MiniMax-M3 and Ling 3.0 are detected; their neighbours keep theirs", () => {
  const want: [string, string][] = [
    [K3, "kimi-k3"],
    [LING, "glm"],
    ["GLM-4.6.jinja", "glm"],
    ["GLM-4.7-Flash.jinja", "glm"],
    ["Kimi-K2-Thinking.jinja", "kimi-k2"],
    ["Kimi-K2-Instruct.jinja", "kimi-k2"],
    ["MiniMax-M2.jinja", "minimax-m2"],
    ["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"],
    ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"],
    ["MiniMax-M3.jinja", "minimax-m3"],
  ];
  for (const [file, family] of want) assert.equal(detectToolFamily(source(file)), family, file);
  // One marker alone is no family: key/value tags without a GLM or Ling turn stay Hermes.
  assert.equal(detectToolFamily("<tool_call>{{ name }}<arg_key>"), "hermes");
  assert.equal(detectToolFamily("{{ '<role>ASSISTANT</role>' }}"), "generic");
  assert.equal(detectToolFamily("{{ ']<]minimax[>[' }}<tool_call>"), "hermes");
  assert.equal(detectToolFamily("{{ '<|open|>' + t + '<|sep|>' }}"), "generic");
});

// ---------------------------------------------------------------- the tiny models

const engines = new Map<ChatFormatName, Promise<WorkerEngine>>();
/** The family's tiny model (one cache entry with formats_families_a's). */
function engineFor(family: ChatFormatName): Promise<WorkerEngine> {
  let e = engines.get(family);
  if (!e) {
    e = cachedTinyModel(
      `agents-${family}`,
      ["chat_formats.ts", "agent_templates.ts", "presets.ts"],
      { chatFormat: family },
    ).then(async (path) => {
      const m = await loadEngineModel({ path, maxBatch: 4, maxSeqLen: 4096, threads: 1 });
      const started1 = await startWorkerEngine(m);
      started.push(started1);
      return started1;
    });
    engines.set(family, e);
  }
  return e;
}
const started: WorkerEngine[] = [];
globalThis.addEventListener("unload", () => started.forEach((e) => e.close()));

// ---------------------------------------------------------------- llama.cpp's expected parses

const str = { type: "string" };
const num = { type: "number" };
const PARSE_TOOLS: ToolSpec[] = [
  { name: "get_time", parameters: { type: "object", properties: { city: str } } },
  {
    name: "tool_2req_4opt",
    parameters: {
      type: "object",
      properties: { req1: str, req2: { type: "integer" } },
      required: ["req1", "req2"],
    },
  },
  { name: "special_function", parameters: { type: "object", properties: { arg1: num } } },
  {
    name: "special_function_with_opt",
    parameters: { type: "object", properties: { arg1: num, arg2: num } },
  },
  { name: "python", parameters: { type: "object", properties: { code: str } } },
  { name: "edit", parameters: { type: "object" } },
  { name: "empty_args", parameters: { type: "object", properties: {} } },
  {
    name: "magic_int",
    parameters: { type: "object", properties: { ref: { type: "integer" }, name: str } },
  },
  {
    name: "imaginary_number",
    parameters: {
      type: "object",
      properties: {
        number: { type: "object", properties: { real: num, imaginary: num } },
      },
    },
  },
  {
    name: "nested_args",
    parameters: {
      type: "object",
      properties: {
        tags: { type: "array", items: str },
        entries: {
          type: "array",
          items: { type: "object", properties: { id: { type: "integer" }, label: str } },
        },
      },
    },
  },
  {
    name: "union_args",
    parameters: {
      type: "object",
      properties: {
        filter: { anyOf: [{ type: "array", items: str }, { type: "null" }] },
        limit: {
          oneOf: [{ type: "integer" }, {
            type: "object",
            properties: { max: { type: "integer" } },
          }],
        },
        label: { anyOf: [str, { type: "object", properties: { text: str } }] },
      },
    },
  },
];

type Parsed = { reasoning: string; content: string; calls: [string, unknown][] };
type Reader = { family: ToolFamily; model: ChatFormatName; reasoningOpen: boolean };
/** After Ling's generation prompt, which opens `<think>`. */
const LING_READ: Reader = { family: "glm", model: "glm", reasoningOpen: true };
/** After Kimi-K3's, which opens `think` (thinking on) or `response` (thinking off). */
const K3_THINK: Reader = { family: "kimi-k3", model: "kimi-k2", reasoningOpen: true };
const K3_NO_THINK: Reader = { ...K3_THINK, reasoningOpen: false };
/** After MiniMax-M3's (`]~b]ai\n`: the model opens `<mm:think>` itself, or writes a bare end). */
const M3_READ: Reader = { family: "minimax-m3", model: "minimax-m2", reasoningOpen: false };

/** `text` parsed as `chatReply` does. */
async function parse(r: Reader, chunks: string[]): Promise<Parsed> {
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
    format: TOOL_FORMATS[r.family],
    tools: PARSE_TOOLS,
    reasoningOpen: r.reasoningOpen,
    model: (await engineFor(r.model)).model,
  } as Parameters<typeof chatReply>[1];
  const out: Parsed = { reasoning: "", content: "", calls: [] };
  const names = new Map<number, string>();
  for await (const ev of chatReply(events(), plan)) {
    if (ev.type === "text") out.content += ev.text;
    if (ev.type === "reasoning") out.reasoning += ev.text;
    if (ev.type === "tool_call_start") names.set(ev.index, ev.name);
    if (ev.type === "tool_call_end") {
      out.calls.push([names.get(ev.index)!, JSON.parse(ev.arguments)]);
    }
  }
  return out;
}

/** Whole, in fixed chunks of 1, 3 and 7 characters, and cut in two everywhere. */
function chunkings(text: string): string[][] {
  const out: string[][] = [[text]];
  for (const size of [1, 3, 7]) {
    const cs: string[] = [];
    for (let i = 0; i < text.length; i += size) cs.push(text.slice(i, i + size));
    out.push(cs);
  }
  for (let i = 1; i < text.length; i++) out.push([text.slice(0, i), text.slice(i)]);
  return out;
}

async function expectParse(r: Reader, text: string, want: Partial<Parsed>): Promise<void> {
  for (const chunks of chunkings(text)) {
    assert.deepEqual(
      await parse(r, chunks),
      { reasoning: "", content: "", calls: [], ...want },
      `${r.family} in chunks ${JSON.stringify(chunks)}`,
    );
  }
}

Deno.test("llama.cpp's expected parses: Kimi-K3", async () => {
  const hello = "Hello, world!\nWhat's up?";
  const end = "<|close|>message<|sep|>";
  const response = (text: string) => `<|open|>response<|sep|>${text}<|close|>response<|sep|>`;
  const arg = (key: string, type: string, v: string) =>
    `<|open|>argument key="${key}" type="${type}"<|sep|>${v}<|close|>argument<|sep|>`;
  const call = (name: string, i: number, ...args: string[]) =>
    `<|open|>call tool="${name}" index="${i}"<|sep|>${args.join("")}<|close|>call<|sep|>`;
  const tools = (...calls: string[]) =>
    `<|open|>tools<|sep|>${calls.join("")}<|close|>tools<|sep|>`;
  const sf = call("special_function", 1, arg("arg1", "number", "1"));
  const sfo = (i: number) =>
    call("special_function_with_opt", i, arg("arg1", "number", "1"), arg("arg2", "number", "2"));
  // Content only (the prompt opened `response`, thinking off): the section tags are markup.
  await expectParse(K3_NO_THINK, response(hello) + end, { content: hello });
  await expectParse(
    K3_NO_THINK,
    response("Use the response tag, then message the handler.") + end + "<|end_of_msg|>",
    { content: "Use the response tag, then message the handler." },
  );
  await expectParse(
    K3_THINK,
    `I'm thinking about this<|close|>think<|sep|>${response(hello)}${end}`,
    {
      reasoning: "I'm thinking about this",
      content: hello,
    },
  );
  // Cut by the budget mid-reasoning: the reasoning stays.
  await expectParse(K3_THINK, "I was still thinking when the budget ran out", {
    reasoning: "I was still thinking when the budget ran out",
  });
  const one: [string, unknown][] = [["special_function", { arg1: 1 }]];
  await expectParse(K3_NO_THINK, response("") + tools(sf) + end, { calls: one });
  await expectParse(
    K3_THINK,
    `I should call it<|close|>think<|sep|>${response("On it.")}${tools(sf)}${end}`,
    { reasoning: "I should call it", content: "On it.", calls: one },
  );
  // Typed arguments come back as JSON numbers; parallel calls share one section.
  await expectParse(K3_NO_THINK, response("") + tools(sfo(1)) + end, {
    calls: [["special_function_with_opt", { arg1: 1, arg2: 2 }]],
  });
  await expectParse(K3_NO_THINK, response("") + tools(sf, sfo(2)) + end, {
    calls: [...one, ["special_function_with_opt", { arg1: 1, arg2: 2 }]],
  });
  // A string argument keeps its literal text, even one that reads as a number.
  await expectParse(
    K3_NO_THINK,
    response("") + tools(call("python", 1, arg("code", "string", "print('hey')"))) + end,
    {
      calls: [["python", { code: "print('hey')" }]],
    },
  );
  await expectParse(
    K3_NO_THINK,
    response("") + tools(call("python", 1, arg("code", "string", "12"))),
    {
      calls: [["python", { code: "12" }]],
    },
  );
  // Escaped attribute values; a JSON-typed value under an unlisted key; a call cut by the token
  // limit is what it has written (a cut string too).
  await expectParse(
    K3_NO_THINK,
    response("") + tools(call("edit", 1, arg("a&amp;&quot;b", "object", '{"x": [1]}'))),
    { calls: [["edit", { 'a&"b': { x: [1] } }]] },
  );
  await expectParse(
    K3_NO_THINK,
    response("") + "<|open|>tools<|sep|>" + sf +
      '<|open|>call tool="edit" index="2"<|sep|><|open|>argument key="n" type="number"<|sep|>3' +
      '<|close|>argument<|sep|><|open|>argument key="s" type="string"<|sep|>a b',
    { calls: [...one, ["edit", { n: 3, s: "a b" }]] },
  );
});

Deno.test("llama.cpp's expected parses: MiniMax-M3", async () => {
  const ns = "]<]minimax[>[";
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

// ---------------------------------------------------------------- forced calls, round trip

const SCHEMAS: Record<string, Record<string, unknown>> = {
  get_weather: {
    type: "object",
    properties: {
      city: { type: "string", maxLength: 12 },
      unit: { enum: ["celsius", "fahrenheit"] },
    },
    required: ["city", "unit"],
    additionalProperties: false,
  },
  place_order: {
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
  },
};
const TOOLS: ToolSpec[] = Object.entries(SCHEMAS).map(([name, parameters]) => ({
  name,
  description: `The ${name} tool`,
  parameters,
}));
const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]));
type Case = {
  label: string;
  file: string;
  family: ToolFamily;
  model: ChatFormatName;
  /** The end of the generation prompt, and whether it opens reasoning. */
  prompt: string;
  opensReasoning: boolean;
  /** The raw text of a forced reply after its reasoning, in the family's own syntax. */
  syntax: RegExp;
  /** Marker text that must never reach content or reasoning. */
  markers: RegExp;
  /** How the template ends the round trip: the call with its reasoning, the result, the prompt. */
  roundTrip: string;
};

const NAMES = "(?:get_weather|place_order)";
const NS3 = "]<]minimax[>[";
const M3_NS = "\\]<\\]minimax\\[>\\[";
/** Kimi-K3's markers as regular expressions. */
const [O, C, S] = ["<\\|open\\|>", "<\\|close\\|>", "<\\|sep\\|>"];
const K3_TYPES = "(?:string|number|boolean|object|array|null)";
const CASES: Case[] = [
  {
    label: "Kimi-K3",
    file: K3,
    family: "kimi-k3",
    model: "kimi-k2",
    prompt: '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
    opensReasoning: true,
    syntax: new RegExp(
      `^(?:${O}response${S}${C}response${S})?${O}tools${S}${O}call tool="${NAMES}" index="1"${S}` +
        `(?:${O}argument key="\\w+" type="${K3_TYPES}"${S}.*?${C}argument${S})*` +
        `${C}call${S}${C}tools${S}$`,
      "s",
    ),
    markers: /<\|(?:open|close|sep|end_of_msg)\|>/,
    roundTrip: '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>Paris first.' +
      "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
      '<|open|>call tool="get_weather" index="1"<|sep|>' +
      '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>' +
      '<|open|>argument key="unit" type="string"<|sep|>celsius<|close|>argument<|sep|>' +
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>" +
      '<|open|>message role="tool" tool="get_weather" index="1"<|sep|>18C<|close|>message<|sep|>' +
      '<|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
  },
  {
    label: "MiniMax-M3",
    file: "MiniMax-M3.jinja",
    family: "minimax-m3",
    model: "minimax-m2",
    prompt: "]~b]ai\n",
    opensReasoning: false,
    syntax: new RegExp(
      `^(?:</mm:think>)?${M3_NS}<tool_call>\\n${M3_NS}<invoke name="${NAMES}">` +
        `(?:${M3_NS}<(\\w+)>.*?${M3_NS}</\\1>)*${M3_NS}</invoke>\\n${M3_NS}</tool_call>$`,
      "s",
    ),
    markers: /\]<\]minimax\[>\[|<\/?mm:think>/,
    roundTrip: "]~b]user\nWeather in Paris?[e~[\n]~b]ai\n<mm:think>Paris first.</mm:think>" +
      `${NS3}<tool_call>\n${NS3}<invoke name="get_weather">${NS3}<city>Paris${NS3}</city>` +
      `${NS3}<unit>celsius${NS3}</unit>${NS3}</invoke>\n${NS3}</tool_call>[e~[\n]~b]tool\n` +
      "<response>18C</response>[e~[\n]~b]ai\n",
  },
  {
    label: "Ling 3.0",
    file: LING,
    family: "glm",
    model: "glm",
    prompt: "<role>ASSISTANT</role>\n<think>",
    opensReasoning: true,
    syntax: new RegExp(
      `^<tool_call>${NAMES}\\s*(?:<arg_key>\\w+</arg_key>\\s*<arg_value>.*?</arg_value>\\s*)*` +
        "</tool_call>$",
      "s",
    ),
    markers: /<\/?(?:tool_call|arg_key|arg_value|think|role)>|<\|role_end\|>/,
    roundTrip: "<role>HUMAN</role>Weather in Paris?<|role_end|><role>ASSISTANT</role>\n" +
      "<think>Paris first.</think><tool_call>get_weather\n<arg_key>city</arg_key>\n" +
      "<arg_value>Paris</arg_value><arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n" +
      "</tool_call><|role_end|><role>OBSERVATION</role>\n<tool_response>\n18C\n</tool_response>" +
      "<|role_end|><role>ASSISTANT</role>\n<think>",
  },
];

for (const c of CASES) {
  Deno.test(`${c.label}: forced calls through the real template, in its own syntax`, async () => {
    const e = await engineFor(c.model);
    const template = compileTemplate(source(c.file));
    await Promise.all([1, 2].map(async (seed) => {
      const conv: Conversation = {
        turns: [
          { role: "system", parts: [{ type: "text", text: "You are terse." }] },
          { role: "user", parts: [{ type: "text", text: "Weather in Paris? Order two apples." }] },
        ],
        tools: TOOLS,
        toolChoice: seed === 1 ? { type: "required" } : { type: "tool", name: "place_order" },
        parallelToolCalls: false,
      };
      const plan = planChat(
        e.model,
        template,
        conv,
        {
          sampling: { ...defaultSampling(), temperature: 1, seed },
          stop: [],
          ignoreEos: false,
          maxTokens: 600,
        },
        { addGenerationPrompt: true },
      );
      assert.equal(plan.format.family, c.family);
      assert.ok(plan.text.endsWith(c.prompt), plan.text);
      assert.equal(plan.reasoningOpen, c.opensReasoning);
      const events: GenEvent[] = [];
      for await (const ev of e.submit(plan.req)) events.push(ev);
      const raw = events.map((ev) => (ev.type === "text" ? ev.text : "")).join("");
      const end = plan.format.reasoning!.end;
      if (c.opensReasoning) assert.ok(raw.includes(end), raw);
      const call = c.opensReasoning ? raw.slice(raw.indexOf(end) + end.length).trim() : raw;
      assert.match(call, c.syntax, `${c.label} seed ${seed}: ${JSON.stringify(raw)}`);
      async function* again() {
        yield* events;
      }
      const reply = await collectReply(chatReply(again(), plan));
      assert.equal(reply.end?.finishReason, "tool_calls", JSON.stringify(raw));
      assert.equal(reply.text, "", "no text beside a forced call");
      assert.ok(!c.markers.test(reply.reasoning ?? ""), `markers in reasoning: ${reply.reasoning}`);
      assert.equal(reply.calls.length, 1, JSON.stringify(raw));
      const [k] = reply.calls;
      const v = validators[k.name];
      assert.ok(v(JSON.parse(k.arguments)), `${k.arguments}: ${ajv.errorsText(v.errors)}`);
      if (seed === 2) assert.equal(k.name, "place_order");
    }));
  });

  Deno.test(`${c.label}: a tool round trip renders through the real template`, async () => {
    const e = await engineFor(c.model);
    const { conv } = chatCompletionsConversation({
      messages: [
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
      ],
      tools: TOOLS.map((t) => ({ type: "function", function: t })),
    } as never);
    const plan = planChat(
      e.model,
      compileTemplate(source(c.file)),
      conv,
      { sampling: defaultSampling(), stop: [], ignoreEos: false, maxTokens: 4 },
      { addGenerationPrompt: true },
    );
    assert.ok(plan.text.endsWith(c.roundTrip), plan.text);
    assert.ok(
      plan.text.includes("get_weather") && plan.text.includes("place_order"),
      "tools listed",
    );
  });
}
