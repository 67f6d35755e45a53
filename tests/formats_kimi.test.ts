// Kimi-K2's format (a `<|tool_calls_section_begin|>` of `functions.NAME:IDX` calls with JSON
// arguments, `<think>` reasoning) and Kimi-K3's XTML (`<|open|>call tool=".." index=".."<|sep|>`
// with typed `<|open|>argument key=".." type=".."<|sep|>V<|close|>argument<|sep|>`, reasoning in
// `think`, content in `response`), each with its REAL template from llama.cpp's bundle
// (models/templates): detection from the whole template; llama.cpp's expected parses
// (tests/test-chat.cpp) however the text is chunked; forced calls on Kimi-K2's tiny model
// (`make-model --chat-format kimi-k2`, its markers single tokens as in the real vocab) at
// temperature 1 (seeded), raw and (K2) in Chat Completions, Responses and Anthropic, streamed and
// not, each validated by ajv, with the raw generated text checked against the family's own syntax
// and no marker text in `content`; a tool round trip with reasoning rendered through each template
// the way it expects; the call grammar with its lazy trigger; and the Python Jinja2 behaviours the
// real templates need (Kimi-K2's list methods, Hermes 3's lookups).
import assert from "node:assert/strict";
import { detectToolFamily } from "../lib/chat/formats/mod.ts";
import { compileTemplate, renderChat } from "../lib/chat/template.ts";
import {
  type AgentCase,
  agentFamilyTests,
  assertLazyTrigger,
  HISTORY,
} from "./support/family_agent_cases.ts";
import { bundledTemplate } from "./support/family_models.ts";
import {
  expectParse,
  type Reader,
  templateReader,
  TYPED_PARSE_TOOLS,
} from "./support/family_parse.ts";
import { TOOL_NAMES } from "./support/family_tools.ts";

const K2: AgentCase & { family: "kimi-k2" } = {
  label: "Kimi-K2-Thinking",
  file: "Kimi-K2-Thinking.jinja",
  family: "kimi-k2",
  model: "kimi-k2",
  syntax: new RegExp(
    `^<\\|tool_calls_section_begin\\|>(?:<\\|tool_call_begin\\|>functions\\.${TOOL_NAMES}:\\d+` +
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
};

/** Kimi-K3's markers as regular expressions. */
const [O, C, S] = ["<\\|open\\|>", "<\\|close\\|>", "<\\|sep\\|>"];
const K3_TYPES = "(?:string|number|boolean|object|array|null)";
const K3: AgentCase = {
  label: "Kimi-K3",
  file: "Kimi-K3.jinja",
  family: "kimi-k3",
  model: "kimi-k2",
  prompt: '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
  opensReasoning: true,
  syntax: new RegExp(
    `^(?:${O}response${S}${C}response${S})?${O}tools${S}${O}call tool="${TOOL_NAMES}" index="1"${S}` +
      `(?:${O}argument key="\\w+" type="${K3_TYPES}"${S}.*?${C}argument${S})*` +
      `${C}call${S}${C}tools${S}$`,
    "s",
  ),
  markers: /<\|(?:open|close|sep|end_of_msg)\|>/,
  roundTrip: [
    '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>Paris first.' +
    "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
    '<|open|>call tool="get_weather" index="1"<|sep|>' +
    '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>' +
    '<|open|>argument key="unit" type="string"<|sep|>celsius<|close|>argument<|sep|>' +
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>" +
    '<|open|>message role="tool" tool="get_weather" index="1"<|sep|>18C<|close|>message<|sep|>' +
    '<|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
  ],
  roundTripEnds: true,
  // Its generation prompt opens `think`: forced reasoning before a call is slow on a random model.
  dialects: false,
};

Deno.test("Kimi-K2 and Kimi-K3 are detected from their real templates, apart", () => {
  for (const f of [K2.file, "Kimi-K2-Instruct.jinja", "moonshotai-Kimi-K2.jinja"]) {
    assert.equal(detectToolFamily(bundledTemplate(f)), "kimi-k2", f);
  }
  assert.equal(detectToolFamily(bundledTemplate(K3.file)), "kimi-k3");
  // One marker alone is no family.
  assert.equal(detectToolFamily("{{ '<|open|>' + t + '<|sep|>' }}"), "generic");
});

Deno.test("llama.cpp's expected parses: Kimi-K2", async () => {
  const k = templateReader(K2);
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

/** After Kimi-K3's generation prompt, which opens `think` (thinking on). */
const K3_THINK: Reader = {
  label: "Kimi-K3",
  family: "kimi-k3",
  model: "kimi-k2",
  reasoningOpen: true,
  tools: TYPED_PARSE_TOOLS,
};
/** After the one that opens `response` (thinking off). */
const K3_NO_THINK: Reader = { ...K3_THINK, reasoningOpen: false };

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

// ---------------------------------------------------------------- templates under @huggingface/jinja

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
    renderChat(compileTemplate(bundledTemplate(file)), {
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

for (const c of [K2, K3]) await agentFamilyTests(c);

Deno.test("Kimi-K2: the call grammar, its lazy trigger inside the opening", () => {
  assertLazyTrigger(
    "kimi-k2",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0",
  );
});
