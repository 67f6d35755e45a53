// Tool-call formats (lib/chat/formats), the reasoning splitter and the `--chat-format` test
// models: templates render the published structures, detection picks the right family, parsers
// turn recorded outputs into the same events however the text is chunked, every call grammar
// parses in llama.cpp, and a recorded call fed token by token through a LAZY grammar sampler of
// the model of that format is accepted from trigger to end.
//
// Safety of the llama.cpp checks: accepting a token the grammar rejects throws a C++ exception
// through FFI (the process dies), and so does a trigger whose replayed text the grammar rejects.
// So each token is offered alone to `llama_sampler_apply` first, and a trigger is predicted in JS
// (the same regexes, over the same bytes) and its replayed text checked on a plain grammar first:
// a bug shows as a failed assertion, not an abort.
import assert from "node:assert/strict";
import {
  samplers,
  tokenData,
  tokenDataArray,
  tokenize,
  tokenToPiece,
  writeStruct,
} from "../ffi/mod.ts";
import type { ReplyEvent, ToolSpec } from "../lib/chat/conversation.ts";
import { compileTemplate, renderChat } from "../lib/chat/template.ts";
import { endsInsideReasoning, newReasoningSplitter } from "../lib/chat/reasoning.ts";
import {
  detectToolFamily,
  detectToolFormat,
  startsInReasoning,
  TOOL_FORMATS,
  type ToolFamily,
  type ToolFormat,
} from "../lib/chat/formats/mod.ts";
import { newLazyGrammarSampler, triggerTokenIds } from "../lib/engine/grammar/lazy_grammar.ts";
import { VALUE_END } from "../lib/chat/formats/qwen3_coder.ts";
import { textWithout } from "../lib/constrain/text_without.ts";
import { isConstraintError } from "../lib/constrain/error.ts";
import { newGrammar, render } from "../lib/constrain/gbnf.ts";
import { jsonSchemaToGbnf, newSchemaSet } from "../lib/constrain/json_schema.ts";
import { alt } from "../lib/constrain/gbnf.ts";
import { checkGrammar } from "../lib/engine/grammar/constrained.ts";
import { type EngineModel, loadEngineModel } from "../lib/engine/model.ts";
import {
  CHAT_FORMAT_SPECS,
  CHAT_FORMATS,
  type ChatFormatName,
} from "../lib/gguf/make_model_formats.ts";
import { LLAMA3_CHAT_TEMPLATE, makeModel, modelMetadata, PRESETS } from "../lib/gguf/presets.ts";
import { parseMakeModelArgs } from "../lib/cli/make_model_args.ts";
import { tinyModelPath } from "./support/models.ts";

// ---------------------------------------------------------------- models

const dir = await Deno.makeTempDir({ prefix: "hearth-chat-formats-" });
const models = new Map<ChatFormatName | "default", EngineModel>();
for (const f of CHAT_FORMATS) {
  const out = `${dir}/tiny-${f}.gguf`;
  await makeModel({ preset: "tiny", out, chatFormat: f });
  models.set(f, await loadEngineModel({ path: out, maxBatch: 1, maxSeqLen: 256, threads: 2 }));
}
models.set(
  "default",
  await loadEngineModel({ path: await tinyModelPath(), maxBatch: 1, maxSeqLen: 256, threads: 2 }),
);
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));

/**
 * The model whose vocab has the family's markers (generic: the plain tiny model; Kimi-K3 and
 * MiniMax-M3, whose markers no make-model format has, their forebears' models).
 */
function modelFor(family: ToolFamily): EngineModel {
  const forebear: Partial<Record<ToolFamily, ChatFormatName>> = {
    "kimi-k3": "kimi-k2",
    "minimax-m3": "minimax-m2",
  };
  return models.get(
    family === "generic" ? "default" : forebear[family] ?? family as ChatFormatName,
  )!;
}

// ---------------------------------------------------------------- llama.cpp grammar harness

const candidate = new Uint8Array(new ArrayBuffer(tokenData.size));
const candidateView = new DataView(candidate.buffer);
const candidates = new Uint8Array(new ArrayBuffer(tokenDataArray.size));
writeStruct(tokenDataArray, candidates, {
  data: Deno.UnsafePointer.value(Deno.UnsafePointer.of(candidate)),
  size: 1n,
  selected: -1n,
  sorted: false,
});
const LOGIT = tokenData.fields.find((f) => f.name === "logit")!.offset;

function tokenAllowed(m: EngineModel, sampler: Deno.PointerValue, token: number): boolean {
  candidateView.setInt32(0, token, true);
  candidateView.setFloat32(LOGIT, 0, true);
  m.llama.sym.llama_sampler_apply(sampler, candidates);
  return candidateView.getFloat32(LOGIT, true) !== -Infinity;
}

function tokens(m: EngineModel, text: string): number[] {
  return [...tokenize(m.llama, m.vocab, text, false, true)];
}

/** Whether a plain grammar accepts `text` as a prefix (or, `complete`, as a whole output). */
function grammarAccepts(m: EngineModel, gbnf: string, text: string, complete: boolean): boolean {
  const s = samplers(m.llama).grammar(m.vocab, gbnf, "root");
  assert.ok(s, "llama.cpp rejected the grammar");
  try {
    for (const t of tokens(m, text)) {
      if (!tokenAllowed(m, s, t)) return false;
      m.llama.sym.llama_sampler_accept(s, t);
    }
    return complete ? tokenAllowed(m, s, m.vocabInfo.eos) : true;
  } finally {
    m.llama.sym.llama_sampler_free(s);
  }
}

const latin1 = (bytes: Uint8Array) => String.fromCharCode(...bytes);
const fromLatin1 = (s: string) =>
  new TextDecoder().decode(Uint8Array.from(s, (c) => c.charCodeAt(0)));

/** Where llama.cpp would start replaying when `buffer` (raw bytes as latin1) ends here. */
function triggerStart(patterns: string[], buffer: string): number | undefined {
  for (const p of patterns) {
    const m = new RegExp(p, "d").exec(buffer);
    if (!m) continue;
    for (let i = 1; i < m.length; i++) if (m[i]) return m.indices![i]![0];
    return m.index;
  }
  return undefined;
}

/**
 * Feeds `output` token by token through a lazy grammar sampler of `f` and returns whether (and
 * when) it triggered; asserts every constrained token is allowed and the grammar ends complete.
 */
function runLazy(
  m: EngineModel,
  f: ToolFormat,
  tools: ToolSpec[],
  output: string,
  parallel: boolean,
): { triggeredAt: number } {
  const gbnf = f.callGrammar(tools, { parallel });
  const s = newLazyGrammarSampler(m.llama, m.vocab, gbnf, f.triggers);
  assert.ok(s, `llama.cpp rejected the lazy grammar:\n${gbnf}`);
  const triggerIds = triggerTokenIds(m.llama, m.vocab, f.triggers.tokens);
  let awaiting = true;
  let buffer = "";
  let triggeredAt = -1;
  try {
    const toks = tokens(m, output);
    toks.forEach((t, i) => {
      const piece = tokenToPiece(m.llama, m.vocab, t, true);
      if (awaiting) {
        let replay: string | undefined;
        if (triggerIds.includes(t)) replay = fromLatin1(latin1(piece));
        else {
          buffer += latin1(piece);
          const at = triggerStart(f.triggers.patterns, buffer);
          if (at !== undefined) replay = fromLatin1(buffer.slice(at));
        }
        if (replay !== undefined) {
          assert.ok(
            grammarAccepts(m, gbnf, replay, false),
            `trigger replays ${JSON.stringify(replay)}, which the grammar rejects`,
          );
          awaiting = false;
          triggeredAt = i;
        }
      } else {
        assert.ok(
          tokenAllowed(m, s, t),
          `token ${i} ${JSON.stringify(fromLatin1(latin1(piece)))} rejected in ${
            JSON.stringify(output)
          }\n${gbnf}`,
        );
      }
      m.llama.sym.llama_sampler_accept(s, t);
    });
    if (!awaiting) {
      assert.ok(tokenAllowed(m, s, m.vocabInfo.eos), `grammar incomplete at the end of ${output}`);
    }
  } finally {
    m.llama.sym.llama_sampler_free(s);
  }
  return { triggeredAt };
}

// ---------------------------------------------------------------- events

type Norm =
  | { type: "text" | "reasoning"; text: string }
  | { type: "call"; name: string; arguments: string; id?: string };

/** Merges text deltas and folds each call's start/args/end into one record (checking them). */
function normalize(events: ReplyEvent[], keepIds: boolean): Norm[] {
  const out: Norm[] = [];
  const open = new Map<number, { name: string; id: string; args: string }>();
  let next = 0;
  for (const e of events) {
    if (e.type === "text" || e.type === "reasoning") {
      assert.notEqual(e.text, "", "empty text event");
      const last = out[out.length - 1];
      if (last?.type === e.type) last.text += e.text;
      else out.push({ type: e.type, text: e.text });
    } else if (e.type === "tool_call_start") {
      assert.equal(e.index, next++, "call indexes count up from 0");
      open.set(e.index, { name: e.name, id: e.id, args: "" });
    } else if (e.type === "tool_call_args") {
      open.get(e.index)!.args += e.text;
    } else {
      const c = open.get(e.index)!;
      assert.equal(c.args, e.arguments, "argument deltas add up to the final arguments");
      assert.equal(e.arguments, JSON.stringify(JSON.parse(e.arguments)), "compact JSON");
      open.delete(e.index);
      const call: Norm = { type: "call", name: c.name, arguments: e.arguments };
      if (keepIds) call.id = c.id;
      else assert.match(c.id, /^call_[0-9a-f]{24}$/);
      out.push(call);
    }
  }
  assert.equal(open.size, 0, "every started call ended");
  return out;
}

/** Reasoning splitter (when the family has one) then the family's parser, fed `chunks`. */
function runParser(f: ToolFormat, tools: ToolSpec[], chunks: string[], open = false): ReplyEvent[] {
  const split = f.reasoning ? newReasoningSplitter({ ...f.reasoning, open }) : undefined;
  const parser = f.newParser(tools);
  const events: ReplyEvent[] = [];
  const feed = (segs: { type: "text" | "reasoning"; text: string }[]) => {
    for (const s of segs) {
      if (s.type === "reasoning") events.push(s);
      else events.push(...parser.push(s.text));
    }
  };
  for (const c of chunks) feed(split ? split.push(c) : [{ type: "text", text: c }]);
  if (split) feed(split.end());
  events.push(...parser.end());
  return events;
}

function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
  };
}

/** Chunkings of `text` (by code point): whole, fixed 1..3 with every phase, every 2-way split, random 1..3. */
function chunkings(text: string, seed: number): string[][] {
  const cps = [...text];
  const out: string[][] = [[text]];
  const cut = (sizes: () => number, first = 0) => {
    const chunks: string[] = [];
    let i = 0;
    if (first) chunks.push(cps.slice(0, first).join("")), i = first;
    while (i < cps.length) {
      const n = sizes();
      chunks.push(cps.slice(i, i + n).join(""));
      i += n;
    }
    return chunks;
  };
  for (let size = 1; size <= 3; size++) {
    for (let phase = 0; phase < size; phase++) out.push(cut(() => size, phase));
  }
  for (let i = 1; i < cps.length; i++) out.push([cps.slice(0, i).join(""), cps.slice(i).join("")]);
  const r = rng(seed);
  for (let k = 0; k < 100; k++) out.push(cut(() => r.int(1, 3)));
  return out;
}

// ---------------------------------------------------------------- fixtures

type Fixture = {
  tools: ToolSpec[];
  cases: { name: string; output: string; open?: boolean; events: Norm[] }[];
};

const FAMILIES: ToolFamily[] = ["llama3", "hermes", "mistral", "qwen3-coder", "generic"];

async function fixture(family: ToolFamily): Promise<Fixture> {
  const url = new URL(`./fixtures/chat_formats/${family}.json`, import.meta.url);
  return JSON.parse(await Deno.readTextFile(url));
}

// ---------------------------------------------------------------- templates

const HF_TOOLS = (tools: ToolSpec[]) =>
  tools.map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.parameters },
  }));

const WEATHER: ToolSpec = {
  name: "get_weather",
  description: "Current weather",
  parameters: {
    type: "object",
    properties: { city: { type: "string" }, days: { type: "integer" } },
    required: ["city"],
  },
};

const HISTORY = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris and Lyon?" },
  {
    role: "assistant",
    content: null,
    reasoning_content: "Two cities: two calls.",
    tool_calls: [
      {
        id: "abcDEF123",
        type: "function",
        function: { name: "get_weather", arguments: { city: "Paris", days: 2 } },
      },
      {
        id: "xyzXYZ789",
        type: "function",
        function: { name: "get_weather", arguments: { city: "Lyon" } },
      },
    ],
  },
  { role: "tool", content: "18C", tool_call_id: "abcDEF123", name: "get_weather" },
  { role: "tool", content: "20C", tool_call_id: "xyzXYZ789", name: "get_weather" },
];

function renderFormat(
  f: ChatFormatName,
  messages: unknown[],
  extra: Record<string, unknown> = {},
  addGenerationPrompt = true,
): string {
  return renderChat(compileTemplate(CHAT_FORMAT_SPECS[f].template), {
    messages: messages as { role: string; content: string }[],
    addGenerationPrompt,
    bosToken: "<|begin_of_text|>",
    eosToken: "<|end_of_text|>",
    extra: { tools: HF_TOOLS([WEATHER]), ...extra },
  });
}

Deno.test("llama3 template: tools in the first user turn, JSON calls, ipython results", () => {
  const p = renderFormat("llama3", HISTORY);
  assert.ok(p.startsWith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"));
  assert.ok(p.includes("Environment: ipython\n"));
  assert.ok(p.includes("Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"));
  assert.ok(p.includes('"name": "get_weather"') && p.includes('    "function": {'));
  assert.ok(p.includes("Weather in Paris and Lyon?<|eot_id|>"));
  assert.ok(
    p.includes(
      '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": ' +
        '{"city": "Paris", "days": 2}}; {"name": "get_weather", "parameters": {"city": "Lyon"}}' +
        "<|eot_id|>",
    ),
  );
  assert.ok(
    p.endsWith(
      "<|start_header_id|>ipython<|end_header_id|>\n\n18C<|eot_id|>" +
        "<|start_header_id|>ipython<|end_header_id|>\n\n20C<|eot_id|>" +
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
  );
});

Deno.test("hermes template: <tools>, <tool_call> blocks, <tool_response>, <think>, enable_thinking", () => {
  const p = renderFormat("hermes", HISTORY);
  assert.ok(p.startsWith("<|im_start|>system\nBe brief.\n\n# Tools\n"));
  assert.ok(
    p.includes(
      '<tools>\n{"type": "function", "function": {"name": "get_weather", "description": ' +
        '"Current weather", "parameters": {"type": "object", "properties": {"city": {"type": ' +
        '"string"}, "days": {"type": "integer"}}, "required": ["city"]}}}\n</tools>',
    ),
  );
  assert.ok(
    p.includes(
      "<|im_start|>assistant\n<think>\nTwo cities: two calls.\n</think>\n\n" +
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n' +
        '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n' +
        "</tool_call><|im_end|>\n",
    ),
  );
  assert.ok(
    p.includes(
      "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n20C\n" +
        "</tool_response><|im_end|>\n",
    ),
  );
  assert.ok(p.endsWith("<|im_start|>assistant\n"));
  const off = renderFormat("hermes", HISTORY, { enable_thinking: false });
  assert.ok(off.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // Reasoning of turns before the last user query is not shown again.
  const later = renderFormat("hermes", [...HISTORY, { role: "user", content: "Thanks" }]);
  assert.ok(!later.includes("Two cities"));
  assert.equal(startsInReasoning(TOOL_FORMATS.hermes, off), false);
  assert.equal(startsInReasoning(TOOL_FORMATS.hermes, p + "<think>\n"), true);
});

Deno.test("mistral template: [AVAILABLE_TOOLS], [TOOL_CALLS] with ids, [TOOL_RESULTS]", () => {
  const p = renderFormat("mistral", HISTORY);
  assert.equal(
    p,
    '<|begin_of_text|>[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": ' +
      '"get_weather", "description": "Current weather", "parameters": {"type": "object", ' +
      '"properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ' +
      '["city"]}}}][/AVAILABLE_TOOLS][INST] Be brief.\n\nWeather in Paris and Lyon?[/INST]' +
      '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}, "id": ' +
      '"abcDEF123"}, {"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "xyzXYZ789"}]' +
      '<|end_of_text|>[TOOL_RESULTS] {"content": "18C", "call_id": "abcDEF123"}[/TOOL_RESULTS]' +
      '[TOOL_RESULTS] {"content": "20C", "call_id": "xyzXYZ789"}[/TOOL_RESULTS]',
  );
});

Deno.test("qwen3-coder template: <function> tool list, XML calls, raw strings, <tool_response>", () => {
  const p = renderFormat("qwen3-coder", HISTORY);
  assert.ok(p.startsWith("<|im_start|>system\nBe brief.\n\n# Tools\n\n"));
  assert.ok(
    p.includes(
      "<tools>\n<function>\n<name>get_weather</name>\n<description>Current weather</description>" +
        "\n<parameters>\n<parameter>\n<name>city</name>\n<type>string</type>\n</parameter>",
    ),
  );
  assert.ok(
    p.includes(
      "<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n" +
        "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n<tool_call>" +
        "\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n" +
        "</tool_call><|im_end|>\n",
    ),
  );
  assert.ok(
    p.endsWith(
      "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n20C\n" +
        "</tool_response>\n<|im_end|>\n<|im_start|>assistant\n",
    ),
  );
});

Deno.test("detection: each written template, and the plain Llama-3 one is generic", () => {
  for (const f of CHAT_FORMATS) {
    assert.equal(detectToolFamily(CHAT_FORMAT_SPECS[f].template), f);
    assert.equal(detectToolFormat(CHAT_FORMAT_SPECS[f].template).family, f);
  }
  assert.equal(detectToolFamily(LLAMA3_CHAT_TEMPLATE), "generic");
  assert.equal(detectToolFamily("{{ '<|python_tag|>' }}"), "llama3");
  assert.equal(detectToolFamily("<tool_call><function=x><parameter=y>"), "qwen3-coder");
  assert.equal(TOOL_FORMATS.generic.rendersTools, false);
  const prompt = TOOL_FORMATS.generic.toolSystemPrompt([WEATHER]);
  assert.ok(prompt.includes('"name":"get_weather"') && prompt.includes('"required":["city"]'));
  assert.ok(prompt.includes('<tool_call>{"name": "<function name>", "arguments": {'));
});

// ---------------------------------------------------------------- models and vocab

Deno.test("--chat-format models: markers are single tokens, printed without `special`", () => {
  for (const f of CHAT_FORMATS) {
    const m = models.get(f)!;
    for (const { text } of CHAT_FORMAT_SPECS[f].markers) {
      const ids = tokens(m, text);
      assert.equal(ids.length, 1, `${f}: ${text} is ${ids.length} tokens`);
      const plain = new TextDecoder().decode(tokenToPiece(m.llama, m.vocab, ids[0], false));
      // Control tokens (turn delimiters) print nothing without `special`.
      const control = CHAT_FORMAT_SPECS[f].markers.find((x) => x.text === text)?.type === 3;
      assert.equal(plain, control ? "" : text, `${f}: piece of ${text}`);
      if (["<|im_end|>", "<|eom_id|>"].includes(text)) assert.ok(m.eogTokens.includes(ids[0]));
    }
    assert.equal(m.info.nCtxTrain, PRESETS.tiny.contextLength);
    for (const t of CHAT_FORMAT_SPECS[f].markers) {
      if (t.type === 4) assert.ok(!m.eogTokens.includes(tokens(m, t.text)[0]), t.text);
    }
  }
  // The plain model has none of them: `<tool_call>` is several ordinary tokens there.
  assert.ok(tokens(models.get("default")!, "<tool_call>").length > 1);
});

Deno.test("--chat-format: flag parsing, and the default model keeps the Llama-3 template", async () => {
  const ok = parseMakeModelArgs(["--preset", "tiny", "--out", "x", "--chat-format", "hermes"]);
  assert.deepEqual(ok, { ok: true, options: { preset: "tiny", out: "x", chatFormat: "hermes" } });
  const inline = parseMakeModelArgs(["--preset=tiny", "--out=x", "--chat-format=qwen3-coder"]);
  assert.ok(inline.ok && inline.options.chatFormat === "qwen3-coder");
  const bad = parseMakeModelArgs(["--preset", "tiny", "--out", "x", "--chat-format", "nope"]);
  assert.ok(!bad.ok && bad.message.includes("--chat-format must be"));
  assert.ok(!parseMakeModelArgs(["--preset", "tiny", "--out", "x", "--chatFormat", "hermes"]).ok);
  const md = await modelMetadata(PRESETS.tiny);
  assert.equal(md.get("tokenizer.chat_template")?.value, LLAMA3_CHAT_TEMPLATE);
  assert.equal(md.get("general.name")?.value, "hearth-tiny");
  const tokensKv = md.get("tokenizer.ggml.tokens")!.value as ArrayLike<string>;
  assert.equal(tokensKv[128010], "<|reserved_special_token_5|>");
  const hermes = await modelMetadata(PRESETS.tiny, { chatFormat: "hermes" });
  assert.equal(hermes.get("general.name")?.value, "hearth-tiny-hermes");
  assert.equal(hermes.get("tokenizer.chat_template")?.value, CHAT_FORMAT_SPECS.hermes.template);
});

// ---------------------------------------------------------------- reasoning

Deno.test("reasoning splitter: markers split anywhere, open start, layout whitespace", () => {
  const run = (text: string, open: boolean, chunks: string[][]) => {
    const results = chunks.map((cs) => {
      const s = newReasoningSplitter({ start: "<think>", end: "</think>", open });
      const out = [...cs.flatMap((c) => s.push(c)), ...s.end()];
      const merged: { type: string; text: string }[] = [];
      for (const e of out) {
        const last = merged[merged.length - 1];
        if (last?.type === e.type) last.text += e.text;
        else merged.push({ ...e });
      }
      return merged;
    });
    for (const r of results) assert.deepEqual(r, results[0], text);
    return results[0];
  };
  const a = "<think>\nStep 1.\nStep 2.\n</think>\n\nAnswer <thin k>.";
  assert.deepEqual(run(a, false, chunkings(a, 1)), [
    { type: "reasoning", text: "Step 1.\nStep 2." },
    { type: "text", text: "Answer <thin k>." },
  ]);
  const b = "still thinking</think>Done";
  assert.deepEqual(run(b, true, chunkings(b, 2)), [
    { type: "reasoning", text: "still thinking" },
    { type: "text", text: "Done" },
  ]);
  const c = "Plain answer with < and </ in it";
  assert.deepEqual(run(c, false, chunkings(c, 3)), [{ type: "text", text: c }]);
  assert.equal(endsInsideReasoning("x<think>\n", { start: "<think>", end: "</think>" }), true);
  assert.equal(
    endsInsideReasoning("<think>\n\n</think>\n\n", { start: "<think>", end: "</think>" }),
    false,
  );
});

// ---------------------------------------------------------------- parsers

for (const family of FAMILIES) {
  Deno.test(`${family} parser: recorded outputs, whole and in every chunking`, async () => {
    const fx = await fixture(family);
    const f = TOOL_FORMATS[family];
    fx.cases.forEach((c, k) => {
      const keepIds = c.events.some((e) => e.type === "call" && e.id !== undefined);
      for (const chunks of chunkings(c.output, k + 1)) {
        const got = normalize(runParser(f, fx.tools, chunks, c.open), keepIds);
        assert.deepEqual(got, c.events, `${family} / ${c.name} / ${JSON.stringify(chunks)}`);
      }
    });
  });
}

// ---------------------------------------------------------------- grammars

const HARD_TOOLS: ToolSpec[] = [
  WEATHER,
  {
    name: "edit",
    description: "Edit a file",
    parameters: {
      type: "object",
      properties: {
        path: { type: "string" },
        edits: { type: "array", items: { $ref: "#/$defs/edit" }, minItems: 1 },
        dry_run: { type: "boolean" },
      },
      required: ["path", "edits"],
      $defs: {
        edit: {
          type: "object",
          properties: { old: { type: "string" }, new: { type: "string" } },
          required: ["old", "new"],
          additionalProperties: false,
        },
      },
    },
  },
  {
    name: "tag",
    parameters: {
      type: "object",
      properties: {
        label: { type: "string", enum: ["bug", "feature"] },
        code: { type: "string", pattern: "^[A-Z]{3}-[0-9]+$" },
        edit: { $ref: "#/$defs/edit" },
      },
      $defs: { edit: { type: "integer", minimum: 0 } }, // same name as edit's $defs, other schema
    },
  },
  { name: "noop", parameters: {} },
];

Deno.test("every family's call grammar parses in llama.cpp (one and parallel calls)", () => {
  for (const family of FAMILIES) {
    const m = modelFor(family);
    for (const tools of [[WEATHER], HARD_TOOLS]) {
      for (const parallel of [false, true]) {
        const gbnf = TOOL_FORMATS[family].callGrammar(tools, { parallel });
        assert.equal(checkGrammar(m, gbnf), undefined, `${family}:\n${gbnf}`);
      }
    }
    // Patterns end with `$`; `^` only on a short bounded one.
    for (const p of TOOL_FORMATS[family].triggers.patterns) {
      assert.ok(p.endsWith("$"), p);
      assert.ok(!p.startsWith("^") || (p.length < 200 && !p.includes("[\\s\\S]*")), p);
      new RegExp(p);
    }
  }
});

Deno.test("call grammars: an unsupported schema is refused naming the tool", () => {
  const bad: ToolSpec = {
    name: "odd",
    parameters: { type: "object", properties: { n: { type: "number", multipleOf: 3 } } },
  };
  for (const family of FAMILIES) {
    assert.throws(
      () => TOOL_FORMATS[family].callGrammar([WEATHER, bad], { parallel: false }),
      (e: unknown) =>
        isConstraintError(e) && e.message.includes("tools[1] (odd)") &&
        (e as unknown as { tool: string }).tool === "odd",
    );
  }
});

Deno.test("schema set: two schemas' $defs do not collide", () => {
  const m = modelFor("hermes");
  const set = newSchemaSet();
  const a = set.compile({ $ref: "#/$defs/x", $defs: { x: { type: "string" } } }, "a");
  const b = set.compile({ $ref: "#/$defs/x", $defs: { x: { type: "integer" } } }, "b");
  const gbnf = render(set.g, alt(a, b));
  assert.ok(grammarAccepts(m, gbnf, '"hi"', true));
  assert.ok(grammarAccepts(m, gbnf, "42", true));
  assert.ok(!grammarAccepts(m, gbnf, "true", true));
  const sub = set.compile(HARD_TOOLS[1].parameters, "edits", "#/properties/edits");
  const gb = render(set.g, sub);
  assert.ok(grammarAccepts(m, gb, '[{"old": "a", "new": "b"}]', true));
  assert.ok(!grammarAccepts(m, gb, "[]", true));
  // The single-schema compiler is untouched: same grammar as before for the same schema.
  assert.ok(
    grammarAccepts(
      m,
      jsonSchemaToGbnf(HARD_TOOLS[1].parameters),
      '{"path": "p", "edits": [{"old": "a", "new": "b"}]}',
      true,
    ),
  );
});

Deno.test("qwen3-coder raw text grammar: anything but the terminator", () => {
  const m = modelFor("qwen3-coder");
  const g = newGrammar();
  const gbnf = render(g, textWithout(g, VALUE_END, "raw", "\n"));
  for (const ok of ["", "a", "x\ny", "a</parameter>\n", "a</parameter>b", "\n\n</para", "\n"]) {
    assert.ok(grammarAccepts(m, gbnf, ok, true), JSON.stringify(ok));
  }
  // A value may not start with `</parameter>` either: after the newline that opens it, that
  // would be the terminator.
  for (const bad of ["a\n</parameter>", "</parameter>", "</parameter>\n", "x\n</parameter>y"]) {
    assert.ok(!grammarAccepts(m, gbnf, bad, true), JSON.stringify(bad));
  }
});

/** MiniMax-M3's namespace token. */
const NS = "]<]minimax[>[";

/** A valid call output per family (in schema property order, as the grammar writes them). */
const LAZY_CASES: Record<ToolFamily, { output: string; parallel: boolean; trigger: boolean }[]> = {
  llama3: [
    {
      output: '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
      parallel: false,
      trigger: true,
    },
    {
      output: ' \n{"name":"get_weather","parameters":{"city":"Lyon"}}',
      parallel: false,
      trigger: true,
    },
    {
      output:
        'OK.<|python_tag|>{"name": "edit", "parameters": {"path": "a.ts", "edits": [{"old": "x", "new": "y"}]}}; {"name": "noop", "parameters": {}}',
      parallel: true,
      trigger: true,
    },
    { output: 'Sure, {"name": "get_weather"} is how.', parallel: false, trigger: false },
  ],
  hermes: [
    {
      output:
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
      parallel: false,
      trigger: true,
    },
    {
      output:
        '<tool_call>\n{"name": "tag", "arguments": {"label": "bug", "code": "ABC-12", "edit": 3}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "days": 1}}\n</tool_call>',
      parallel: true,
      trigger: true,
    },
  ],
  mistral: [
    {
      output:
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]',
      parallel: false,
      trigger: true,
    },
    {
      output:
        'Sure.[TOOL_CALLS][{"name": "noop", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Lyon"}}]',
      parallel: true,
      trigger: true,
    },
  ],
  "qwen3-coder": [
    {
      output:
        'I will edit it.\n<tool_call>\n<function=edit>\n<parameter=path>\nsrc/a b.ts\n</parameter>\n<parameter=edits>\n[{"old": "x", "new": "</parameter>"}]\n</parameter>\n<parameter=dry_run>\ntrue\n</parameter>\n</function>\n</tool_call>',
      parallel: false,
      trigger: true,
    },
    {
      output:
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork </parameter> x\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=tag>\n<parameter=label>\nbug\n</parameter>\n</function>\n</tool_call>",
      parallel: true,
      trigger: true,
    },
  ],
  "deepseek-v3": [
    {
      output:
        'Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": ' +
        '"Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
      parallel: false,
      trigger: true,
    },
    {
      output: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>noop<｜tool▁sep｜>{}<｜tool▁call▁end｜>" +
        '<｜tool▁call▁begin｜>tag<｜tool▁sep｜>{"label": "bug"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
      parallel: true,
      trigger: true,
    },
  ],
  "deepseek-v3.2": [
    {
      output: 'Let me look.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n' +
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n' +
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n' +
        "</｜DSML｜function_calls>",
      parallel: false,
      trigger: true,
    },
    {
      output: '<｜DSML｜function_calls>\n<｜DSML｜invoke name="noop">\n</｜DSML｜invoke>\n' +
        '<｜DSML｜invoke name="tag">\n<｜DSML｜parameter name="label" string="true">bug' +
        '</｜DSML｜parameter>\n<｜DSML｜parameter name="code" string="true">ABC-12' +
        "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
      parallel: true,
      trigger: true,
    },
    { output: 'I would write <｜DSML｜invoke name="noop"> here.', parallel: false, trigger: false },
  ],
  "deepseek-v4": [
    {
      // A JSON value may hold the closing tag's text in a string.
      output:
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="edit">\n<｜DSML｜parameter name="path" ' +
        'string="true">a b.ts</｜DSML｜parameter>\n<｜DSML｜parameter name="edits" string="false">' +
        '[{"old": "x", "new": "</｜DSML｜parameter>"}]</｜DSML｜parameter>\n</｜DSML｜invoke>\n' +
        "</｜DSML｜tool_calls>",
      parallel: false,
      trigger: true,
    },
    {
      output:
        'OK.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter ' +
        'name="city" string="true">Lyon</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke ' +
        'name="noop">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
      parallel: true,
      trigger: true,
    },
  ],
  gemma4: [
    {
      output: 'Sure.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
      parallel: false,
      trigger: true,
    },
    {
      output: "<|tool_call>call:noop{}<tool_call|>" +
        '<|tool_call>call:tag{code:<|"|>ABC-12<|"|>,edit:3,label:<|"|>bug<|"|>}<tool_call|>',
      parallel: true,
      trigger: true,
    },
  ],
  devstral: [
    {
      output: 'OK.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}',
      parallel: false,
      trigger: true,
    },
    {
      output: '[TOOL_CALLS]noop[ARGS]{}[TOOL_CALLS]tag[ARGS]{"label": "bug"}',
      parallel: true,
      trigger: true,
    },
  ],
  harmony: [
    {
      output: "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>" +
        'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 2}',
      parallel: false,
      trigger: true,
    },
    {
      output: "<|channel|>analysis<|message|>Edit.<|end|><|start|>assistant to=functions.edit" +
        '<|channel|>commentary json<|message|>{"path": "a.ts", "edits": [{"old": "x", "new": "y"}]}',
      parallel: true,
      trigger: true,
    },
    { output: "<|channel|>final<|message|>No call needed.", parallel: false, trigger: false },
  ],
  glm: [
    {
      output: "Let me check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris" +
        "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
      parallel: false,
      trigger: true,
    },
    {
      output: "<tool_call>tag<arg_key>label</arg_key><arg_value>bug</arg_value><arg_key>code" +
        "</arg_key><arg_value>ABC-12</arg_value></tool_call>\n<tool_call>noop</tool_call>",
      parallel: true,
      trigger: true,
    },
  ],
  "kimi-k2": [
    {
      output: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0" +
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
      parallel: false,
      trigger: true,
    },
    {
      output: "<think>Two.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.noop:1" +
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.edit:2" +
        '<|tool_call_argument_begin|>{"path": "p", "edits": [{"old": "a", "new": "b"}]}' +
        "<|tool_call_end|><|tool_calls_section_end|>",
      parallel: true,
      trigger: true,
    },
  ],
  "minimax-m2": [
    {
      output: '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris' +
        '</parameter>\n<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>',
      parallel: false,
      trigger: true,
    },
    {
      output: 'OK.\n<minimax:tool_call>\n<invoke name="noop">\n</invoke>\n<invoke name="tag">\n' +
        '<parameter name="label">bug</parameter>\n</invoke>\n</minimax:tool_call>',
      parallel: true,
      trigger: true,
    },
  ],
  "kimi-k3": [
    {
      output: "<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
        '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"' +
        '<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>2' +
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
      parallel: false,
      trigger: true,
    },
    {
      output: "<|open|>response<|sep|>OK.<|close|>response<|sep|><|open|>tools<|sep|>" +
        '<|open|>call tool="noop" index="1"<|sep|><|close|>call<|sep|><|open|>call tool="tag" ' +
        'index="2"<|sep|><|open|>argument key="label" type="string"<|sep|>bug<|close|>argument' +
        '<|sep|><|open|>argument key="code" type="string"<|sep|>ABC-12<|close|>argument<|sep|>' +
        "<|close|>call<|sep|><|close|>tools<|sep|>",
      parallel: true,
      trigger: true,
    },
    {
      output: "<|open|>response<|sep|>No call.<|close|>response<|sep|>",
      parallel: false,
      trigger: false,
    },
  ],
  "minimax-m3": [
    {
      output: `</mm:think>${NS}<tool_call>\n${NS}<invoke name="get_weather">${NS}<city>Paris` +
        `${NS}</city>${NS}<days>2${NS}</days>${NS}</invoke>\n${NS}</tool_call>`,
      parallel: false,
      trigger: true,
    },
    {
      output: `<mm:think>Two.</mm:think>OK.${NS}<tool_call>\n${NS}<invoke name="noop">` +
        `${NS}</invoke>\n${NS}<invoke name="edit">${NS}<path>a.ts${NS}</path>${NS}<edits>` +
        `${NS}<item>${NS}<old>x${NS}</old>${NS}<new>y${NS}</new>${NS}</item>${NS}</edits>` +
        `${NS}</invoke>\n` +
        `${NS}<invoke name="tag">${NS}<code>ABC-12${NS}</code>${NS}</invoke>\n${NS}</tool_call>`,
      parallel: true,
      trigger: true,
    },
  ],
  generic: [
    {
      output:
        'Calling.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
      parallel: false,
      trigger: true,
    },
    {
      output:
        '<tool_call>\n{"name":"noop","arguments":{}}\n</tool_call>\n<tool_call>{"name": "edit", "arguments": {"path": "p", "edits": [{"old": "", "new": "z"}], "dry_run": false}}</tool_call>',
      parallel: true,
      trigger: true,
    },
  ],
};

const LAZY_FAMILIES: ToolFamily[] = [
  ...FAMILIES,
  "deepseek-v3",
  "deepseek-v3.2",
  "deepseek-v4",
  "gemma4",
  "devstral",
  "harmony",
  "glm",
  "kimi-k2",
  "minimax-m2",
  "kimi-k3",
  "minimax-m3",
];
for (const family of LAZY_FAMILIES) {
  Deno.test(`${family}: recorded calls through a lazy grammar, token by token`, () => {
    const m = modelFor(family);
    const f = TOOL_FORMATS[family];
    for (const c of LAZY_CASES[family]) {
      const { triggeredAt } = runLazy(m, f, HARD_TOOLS, c.output, c.parallel);
      assert.equal(triggeredAt >= 0, c.trigger, `${family}: trigger in ${c.output}`);
      // And the parser reads the same output back as calls.
      const ownIds = family === "mistral" || family === "kimi-k2";
      const events = normalize(runParser(f, HARD_TOOLS, [c.output]), ownIds);
      assert.equal(events.some((e) => e.type === "call"), c.trigger, c.output);
    }
  });
}

Deno.test("markers are single tokens in the model output the lazy grammar sees", () => {
  for (
    const family of [
      "llama3",
      "hermes",
      "mistral",
      "qwen3-coder",
      "deepseek-v3",
      "gemma4",
      "devstral",
      "glm",
      "kimi-k2",
      "minimax-m2",
    ] as const
  ) {
    const m = modelFor(family);
    for (const t of TOOL_FORMATS[family].triggers.tokens) {
      assert.equal(triggerTokenIds(m.llama, m.vocab, [t]).length, 1, `${family}: ${t}`);
    }
  }
});

// ---------------------------------------------------------------- round trip property

type Gen = ReturnType<typeof rng>;
const CHARS = Array.from("abcxyz AZ09-_.,:;é中🦙\"'\\/{}[]<>\n\t=&");

function randString(r: Gen, max = 12): string {
  let s = "";
  const n = r.int(0, max);
  for (let i = 0; i < n; i++) s += r.pick(CHARS);
  return s;
}

/** A random value and a schema it is valid under. */
function randValue(r: Gen, depth: number): { schema: Record<string, unknown>; value: unknown } {
  const kind = r.pick(
    depth > 1
      ? ["string", "integer", "number", "boolean", "null"]
      : ["string", "string", "integer", "number", "boolean", "null", "array", "object"],
  );
  switch (kind) {
    case "string":
      return { schema: { type: "string" }, value: randString(r) };
    case "integer":
      return { schema: { type: "integer" }, value: r.int(-1000, 100000) };
    case "number":
      return { schema: { type: "number" }, value: r.int(-5000, 5000) / 8 };
    case "boolean":
      return { schema: { type: "boolean" }, value: r.next() < 0.5 };
    case "null":
      return { schema: { type: "null" }, value: null };
    case "array": {
      const items = Array.from({ length: r.int(0, 3) }, () => randValue(r, depth + 1).value);
      return { schema: { type: "array" }, value: items };
    }
    default:
      return randObject(r, depth + 1);
  }
}

function randObject(r: Gen, depth: number): { schema: Record<string, unknown>; value: unknown } {
  const properties: Record<string, unknown> = {};
  const value: Record<string, unknown> = {};
  const n = r.int(0, 4);
  for (let i = 0; i < n; i++) {
    const key = r.pick(["a", "path", "content", "n", "x_1", "query", "k" + i]);
    if (key in value) continue;
    const v = randValue(r, depth);
    properties[key] = v.schema;
    value[key] = v.value;
  }
  return { schema: { type: "object", properties }, value };
}

/** The assistant's part of a rendered conversation: what the model would have written. */
function assistantText(f: ChatFormatName, tools: ToolSpec[], calls: unknown[]): string {
  const user = [{ role: "user", content: "Go." }];
  const extra = { tools: HF_TOOLS(tools) };
  const prefix = renderFormat(f, user, extra, true);
  const full = renderFormat(
    f,
    [...user, { role: "assistant", content: null, tool_calls: calls }],
    extra,
    false,
  );
  assert.ok(full.startsWith(prefix), `${f}: prompt prefix`);
  const rest = full.slice(prefix.length);
  const end = ["<|eot_id|>", "<|im_end|>", "<|end_of_text|>"].map((e) => rest.indexOf(e))
    .filter((i) => i >= 0);
  return end.length ? rest.slice(0, Math.min(...end)) : rest;
}

// MiniMax-M2's generation prompt opens <think>, so its calls do not follow the prompt verbatim.
const ROUND_TRIP_FAMILIES: ToolFamily[] = [...FAMILIES, "harmony", "glm", "kimi-k2"];
for (const family of ROUND_TRIP_FAMILIES) {
  Deno.test(`${family}: 200 random argument objects written in the family's syntax parse back`, () => {
    const r = rng(1000 + ROUND_TRIP_FAMILIES.indexOf(family));
    const f = TOOL_FORMATS[family];
    for (let k = 0; k < 200; k++) {
      const nCalls = family === "llama3" || family === "mistral" || r.next() < 0.5
        ? r.int(1, 2)
        : 1;
      const made = Array.from({ length: nCalls }, (_, i) => {
        let o = randObject(r, 1);
        // Qwen3-Coder writes strings raw: a value holding its terminator cannot be written.
        while (
          family === "qwen3-coder" &&
          Object.values(o.value as Record<string, unknown>).some((v) =>
            typeof v === "string" && ("\n" + v).includes(VALUE_END)
          )
        ) o = randObject(r, 1);
        return { name: `tool_${k}_${i}`, ...o };
      });
      const tools: ToolSpec[] = made.map((c) => ({ name: c.name, parameters: c.schema }));
      const ids = made.map((_, i) => `id${String(k).padStart(5, "0")}${i}x`.slice(0, 9));
      const calls = made.map((c, i) => ({
        id: ids[i],
        type: "function",
        function: { name: c.name, arguments: c.value },
      }));
      let text: string;
      if (family === "generic") {
        text = "Here.\n" +
          made.map((c) =>
            `<tool_call>${JSON.stringify({ name: c.name, arguments: c.value })}</tool_call>`
          ).join("\n");
      } else text = assistantText(family as ChatFormatName, tools, calls);
      const chunks = chunkings(text, k).filter((_, i) => i % 37 === 0);
      for (const cs of chunks) {
        const events = normalize(
          runParser(f, tools, cs),
          family === "mistral" || family === "kimi-k2",
        );
        const got = events.filter((e) => e.type === "call") as Extract<Norm, { type: "call" }>[];
        assert.equal(got.length, made.length, `${family}: ${JSON.stringify(text)}`);
        got.forEach((g, i) => {
          assert.equal(g.name, made[i].name);
          assert.deepEqual(JSON.parse(g.arguments), made[i].value, JSON.stringify(text));
          if (family === "mistral") assert.equal(g.id, ids[i]);
        });
      }
    }
  });
}
