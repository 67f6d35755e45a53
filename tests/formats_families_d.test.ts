// Ling 3.0 (Bailing V3) speaks GLM's calls (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V
// </arg_value></tool_call>`, `<think>` reasoning) in `<role>..</role>` turns, and is detected
// as GLM from its REAL template in llama.cpp's bundle; MiniMax-M3's namespaced calls
// (`]<]minimax[>[<invoke name=..>`) and Kimi-K3's XTML (`<|open|>call tool=..<|sep|>`) are
// neither Hermes nor their M2/K2 forebears. Checked here: detection of the real templates (the
// neighbours keep their families); llama.cpp's expected parses for Ling (tests/test-chat.cpp)
// however the text is chunked; forced calls through the real Ling template on the GLM tiny model
// at temperature 1 (seeded), validated by ajv, the raw text in GLM's syntax and no marker in
// content; a tool round trip rendered through the real template, reasoning handed back.
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Conversation, ToolSpec } from "../lib/chat/conversation.ts";
import { detectToolFamily, TOOL_FORMATS } from "../lib/chat/formats/mod.ts";
import { chatReply, collectReply, planChat } from "../lib/chat/generation.ts";
import { chatCompletionsConversation } from "../lib/chat/openai_chat.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling.ts";
import type { GenEvent } from "../lib/engine/scheduler.ts";
import { startWorkerEngine, type WorkerEngine } from "../lib/engine/worker_host.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { cachedTinyModel } from "./support/models.ts";

const TEMPLATES = `${await llamaSourceDir()}/models/templates`;
const source = (file: string) => Deno.readTextFileSync(`${TEMPLATES}/${file}`);
const LING = "inclusionai-ling-3.0-flash.jinja";

// ---------------------------------------------------------------- detection

Deno.test("Ling 3.0 is GLM; MiniMax-M3 and Kimi-K3 are not Hermes, M2 or K2", () => {
  const want: [string, string][] = [
    [LING, "glm"],
    ["GLM-4.6.jinja", "glm"],
    ["GLM-4.7-Flash.jinja", "glm"],
    ["Kimi-K2-Thinking.jinja", "kimi-k2"],
    ["Kimi-K2-Instruct.jinja", "kimi-k2"],
    ["MiniMax-M2.jinja", "minimax-m2"],
    ["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"],
    ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"],
    // Their own syntaxes have no module yet: the generic fallback, not a wrong family's markers.
    ["MiniMax-M3.jinja", "generic"],
    ["Kimi-K3.jinja", "generic"],
  ];
  for (const [file, family] of want) assert.equal(detectToolFamily(source(file)), family, file);
  // One marker alone is no family: key/value tags without a GLM or Ling turn stay Hermes.
  assert.equal(detectToolFamily("<tool_call>{{ name }}<arg_key>"), "hermes");
  assert.equal(detectToolFamily("{{ '<role>ASSISTANT</role>' }}"), "generic");
  assert.equal(detectToolFamily("{{ ']<]minimax[>[' }}<tool_call>"), "hermes");
});

// ---------------------------------------------------------------- the GLM tiny model

let engine: WorkerEngine | undefined;
async function glmEngine(): Promise<WorkerEngine> {
  if (!engine) {
    // The same model as the GLM cases of formats_families_a (one cache entry).
    const path = await cachedTinyModel(
      "agents-glm",
      ["chat_formats.ts", "agent_templates.ts", "presets.ts"],
      { chatFormat: "glm" },
    );
    engine = await startWorkerEngine(
      await loadEngineModel({ path, maxBatch: 4, maxSeqLen: 4096, threads: 1 }),
    );
  }
  return engine;
}
globalThis.addEventListener("unload", () => engine?.close());

// ---------------------------------------------------------------- llama.cpp's expected parses

const str = { type: "string" };
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
];

type Parsed = { reasoning: string; content: string; calls: [string, unknown][] };

/** `text` parsed as `chatReply` does after Ling's generation prompt (which opens `<think>`). */
async function parse(chunks: string[]): Promise<Parsed> {
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
    format: TOOL_FORMATS.glm,
    tools: PARSE_TOOLS,
    reasoningOpen: true,
    model: (await glmEngine()).model,
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

async function expectParse(text: string, want: Partial<Parsed>): Promise<void> {
  for (const chunks of chunkings(text)) {
    assert.deepEqual(
      await parse(chunks),
      { reasoning: "", content: "", calls: [], ...want },
      `chunks ${JSON.stringify(chunks)}`,
    );
  }
}

Deno.test("llama.cpp's expected parses: Ling 3.0", async () => {
  const getTime = "<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n" +
    "</tool_call>";
  const paris: [string, unknown] = ["get_time", { city: "Paris" }];
  // A call before the think block closes is still a call; the text before it is reasoning.
  await expectParse(`I need to check the time first.\n${getTime}`, {
    reasoning: "I need to check the time first.",
    calls: [paris],
  });
  await expectParse(`Let me check the time.\n</think>\nChecking it now.\n${getTime}`, {
    reasoning: "Let me check the time.",
    content: "Checking it now.",
    calls: [paris],
  });
  await expectParse(`</think>\n${getTime}\n${getTime}`, { calls: [paris, paris] });
  // Marker-like text inside a raw string value is the value.
  await expectParse(
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
    "</think>\n<tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
    { calls: [paris] },
  );
  await expectParse(
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
const CALL_SYNTAX =
  /^<tool_call>(?:get_weather|place_order)\s*(?:<arg_key>\w+<\/arg_key>\s*<arg_value>.*?<\/arg_value>\s*)*<\/tool_call>$/s;
const MARKERS = /<\/?(?:tool_call|arg_key|arg_value|think|role)>|<\|role_end\|>/;

Deno.test("Ling 3.0: forced calls through the real template, raw text in GLM's syntax", async () => {
  const e = await glmEngine();
  const template = compileTemplate(source(LING));
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
    assert.equal(plan.format.family, "glm");
    assert.ok(plan.text.endsWith("<role>ASSISTANT</role>\n<think>"), plan.text);
    assert.ok(plan.reasoningOpen, "Ling's generation prompt opens <think>");
    const events: GenEvent[] = [];
    for await (const ev of e.submit(plan.req)) events.push(ev);
    const raw = events.map((ev) => (ev.type === "text" ? ev.text : "")).join("");
    assert.ok(raw.includes("</think>"), raw);
    const call = raw.slice(raw.indexOf("</think>") + "</think>".length).trim();
    assert.match(call, CALL_SYNTAX, `seed ${seed}: ${JSON.stringify(raw)}`);
    async function* again() {
      yield* events;
    }
    const reply = await collectReply(chatReply(again(), plan));
    assert.equal(reply.end?.finishReason, "tool_calls", JSON.stringify(raw));
    assert.equal(reply.text, "", "no text beside a forced call");
    assert.ok(!MARKERS.test(reply.reasoning ?? ""), `markers in reasoning: ${reply.reasoning}`);
    assert.equal(reply.calls.length, 1, JSON.stringify(raw));
    const [k] = reply.calls;
    const v = validators[k.name];
    assert.ok(v(JSON.parse(k.arguments)), `${k.arguments}: ${ajv.errorsText(v.errors)}`);
    if (seed === 2) assert.equal(k.name, "place_order");
  }));
});

Deno.test("Ling 3.0: a tool round trip renders through the real template, reasoning kept", async () => {
  const e = await glmEngine();
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
    compileTemplate(source(LING)),
    conv,
    { sampling: defaultSampling(), stop: [], ignoreEos: false, maxTokens: 4 },
    { addGenerationPrompt: true },
  );
  const want = "<role>HUMAN</role>Weather in Paris?<|role_end|><role>ASSISTANT</role>\n" +
    "<think>Paris first.</think><tool_call>get_weather\n<arg_key>city</arg_key>\n" +
    "<arg_value>Paris</arg_value><arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n" +
    "</tool_call><|role_end|><role>OBSERVATION</role>\n<tool_response>\n18C\n</tool_response>" +
    "<|role_end|><role>ASSISTANT</role>\n<think>";
  assert.ok(plan.text.endsWith(want), plan.text);
  assert.ok(plan.text.includes('"name": "get_weather"'), "the template lists the tools");
});
