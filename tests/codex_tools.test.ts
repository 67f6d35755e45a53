// Codex's whole tool surface on /v1/responses, from the tool definitions the real Codex 0.169
// sends (tests/fixtures/clients/codex-responses-tools.json: recorded from `codex exec` with a
// model catalog entry whose `apply_patch_tool_type` is "freeform" and one MCP server, so the
// request carries the `custom` apply_patch tool with its Lark grammar and two `namespace` tools).
//
// - Lark → GBNF on the recorded apply_patch grammar, checked by llama.cpp's own grammar matcher:
//   real patches accepted, malformed ones rejected; the same grammar inside a JSON string.
// - The recorded request served on a tiny model: a forced custom call comes back as a
//   `custom_tool_call` whose input the recorded grammar accepts, streamed (input deltas) and not;
//   a forced namespace call comes back under Codex's name (`{name, namespace}`); a history with
//   `custom_tool_call` / `custom_tool_call_output` and a namespaced call renders.
import assert from "node:assert/strict";
import {
  loadModel,
  modelVocab,
  openLlama,
  samplers,
  tokenData,
  tokenDataArray,
  tokenize,
  vocabInfo,
  writeStruct,
} from "../ffi/mod.ts";
import { compileConstraint, isConstraintError, larkToGbnf } from "../lib/constrain/mod.ts";
import { LARK_KEYWORD } from "../lib/constrain/lark.ts";
import { customInputPrefix, responsesConversation } from "../lib/chat/responses.ts";
import { toTemplateMessages } from "../lib/chat/render.ts";
import { compileTemplate, renderChat } from "../lib/chat/template.ts";
import { templateTools } from "../lib/chat/render.ts";
import { HERMES_TOOLS_TEMPLATE } from "../lib/gguf/chat_formats.ts";
import { chatFormatModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

type Json = Record<string, unknown>;

const RECORDED = JSON.parse(
  await Deno.readTextFile(
    new URL("./fixtures/clients/codex-responses-tools.json", import.meta.url),
  ),
) as { body: Json & { tools: Json[] } };
const APPLY_PATCH = RECORDED.body.tools.find((t) =>
  t.type === "custom" && t.name === "apply_patch"
)!;
const LARK = (APPLY_PATCH.format as { definition: string }).definition;

// ---------------------------------------------------------------- llama.cpp grammar harness
// As in constrain_compile.test.ts: each token is offered alone to the grammar sampler (a rejected
// one gets -INFINITY), only allowed tokens are accepted, and EOS is allowed only when complete.

const VOCAB = new URL("../lib/gguf/assets/llama-bpe.vocab.gguf", import.meta.url).pathname;
const llama = openLlama();
const vocabModel = await loadModel(llama, VOCAB, { vocab_only: true });
const vocab = modelVocab(llama, vocabModel);
const EOS = vocabInfo(llama, vocab).eos;
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

function tokenAllowed(sampler: Deno.PointerValue, token: number): boolean {
  candidateView.setInt32(0, token, true);
  candidateView.setFloat32(LOGIT, 0, true);
  llama.sym.llama_sampler_apply(sampler, candidates);
  return candidateView.getFloat32(LOGIT, true) !== -Infinity;
}

function grammarAccepts(gbnf: string, text: string): boolean {
  const s = samplers(llama).grammar(vocab, gbnf, "root");
  if (!s) throw new Error(`llama.cpp rejected the grammar:\n${gbnf}`);
  try {
    for (const t of tokenize(llama, vocab, text, false, false)) {
      if (!tokenAllowed(s, t)) return false;
      llama.sym.llama_sampler_accept(s, t);
    }
    return tokenAllowed(s, EOS);
  } finally {
    llama.sym.llama_sampler_free(s);
  }
}

const PATCHES = {
  add: "*** Begin Patch\n*** Add File: hello.txt\n+hello\n+\n*** End Patch\n",
  update: "*** Begin Patch\n*** Update File: src/a.py\n@@ def f():\n-    pass\n+    return 1\n" +
    " ctx\n*** End of File\n*** End Patch",
  moveAndDelete: "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n@@\n-x\n+y\n" +
    "*** Delete File: old.txt\n*** End Patch\n",
  unicode:
    '*** Begin Patch\n*** Add File: notes/ü "q".md\n+tab\there \\ and émoji 🚀\n*** End Patch\n',
};
const MALFORMED = {
  noEnd: "*** Begin Patch\n*** Add File: a.txt\n+x\n",
  noHunk: "*** Begin Patch\n*** End Patch\n",
  unprefixedLine: "*** Begin Patch\n*** Add File: a.txt\nx\n*** End Patch\n",
  emptyFilename: "*** Begin Patch\n*** Add File: \n+x\n*** End Patch\n",
  noLines: "*** Begin Patch\n*** Add File: a.txt\n*** End Patch\n",
  jsonWrapped: '{"input": "*** Begin Patch\\n*** Delete File: a\\n*** End Patch\\n"}',
};

Deno.test("lark: the recorded apply_patch grammar as GBNF, checked by llama.cpp", async (t) => {
  const gbnf = larkToGbnf(LARK);
  await t.step("real patches are accepted", () => {
    for (const [k, p] of Object.entries(PATCHES)) {
      assert.ok(grammarAccepts(gbnf, p), `${k}: ${JSON.stringify(p)}\n${gbnf}`);
    }
  });
  await t.step("malformed patches are rejected", () => {
    for (const [k, p] of Object.entries(MALFORMED)) {
      assert.ok(!grammarAccepts(gbnf, p), `${k}: ${JSON.stringify(p)}`);
    }
  });
  await t.step("inside a JSON string: the JSON text of a patch, escapes and all", () => {
    const json = compileConstraint({ json: { type: "string", [LARK_KEYWORD]: LARK } });
    for (const p of Object.values(PATCHES)) {
      assert.ok(grammarAccepts(json, JSON.stringify(p)), JSON.stringify(p));
      // A raw newline is not JSON.
      assert.ok(!grammarAccepts(json, `"${p}"`));
    }
    for (const p of Object.values(MALFORMED)) assert.ok(!grammarAccepts(json, JSON.stringify(p)));
  });
});

Deno.test("lark: what the front end does not read is refused, naming the construct", () => {
  const cases: [string, string | RegExp][] = [
    ['start: "a" b\n%ignore " "\nb: "b"', "%ignore"],
    ['start: start "a" | "a"', "left recursion"],
    ['start: "a"i', '"..."i'],
    ["start: /a/i", "/.../i"],
    ['start: x\nx.2: "a"', "priority"],
    ['start: ("a"?)*', "*"],
    ["start: missing", "missing"],
    ['start: "a"\n%import common.NUMBER', "common.NUMBER"],
    ["start: /(?<=a)b/", /lookbehind/],
    ['rule: "a"', "start"],
  ];
  for (const [src, kw] of cases) {
    try {
      larkToGbnf(src);
      assert.fail(`accepted ${JSON.stringify(src)}`);
    } catch (e) {
      assert.ok(isConstraintError(e), `${src}: ${e}`);
      if (typeof kw === "string") assert.equal(e.keyword, kw, e.message);
      else assert.match(e.keyword, kw, e.message);
    }
  }
  // Lark's other spellings that the front end does read.
  const g = larkToGbnf(
    '?start: item ~ 2..3 [END]\n!item: "a".."c"\n     | DIGIT+ -> num\nEND: "."\n' +
      "%import common (DIGIT)\n// a comment\n",
  );
  assert.ok(grammarAccepts(g, "a12b."));
  assert.ok(grammarAccepts(g, "abc"));
  assert.ok(!grammarAccepts(g, "a"));
  assert.ok(!grammarAccepts(g, "abcd"));
});

Deno.test("responses: Codex's tools and history on the neutral conversation", () => {
  const { conv, origins, toolParams, ignored } = responsesConversation(
    {
      ...RECORDED.body,
      input: [
        { type: "message", role: "user", content: "edit" },
        { type: "custom_tool_call", call_id: "c1", name: "apply_patch", input: PATCHES.add },
        { type: "custom_tool_call_output", call_id: "c1", output: "Success. Updated: A hello.txt" },
        {
          type: "function_call",
          call_id: "c2",
          name: "echo",
          namespace: "mcp__fx",
          arguments: '{"text":"hi"}',
        },
        { type: "function_call_output", call_id: "c2", output: "hi" },
      ],
    } as Parameters<typeof responsesConversation>[0],
  );
  const names = conv.tools.map((t) => t.name);
  assert.ok(names.includes("apply_patch") && names.includes("mcp__fx__echo"), names.join());
  assert.ok(names.includes("multi_agent_v1__spawn_agent"), names.join());
  assert.deepEqual(origins.get("mcp__fx__echo"), {
    kind: "namespace",
    namespace: "mcp__fx",
    name: "echo",
  });
  assert.deepEqual(origins.get("apply_patch"), { kind: "custom" });
  assert.equal(toolParams[names.indexOf("mcp__fx__echo")].startsWith("tools["), true);
  assert.match(toolParams[names.indexOf("mcp__fx__echo")], /^tools\[\d+\]\.tools\[\d+\]$/);
  assert.deepEqual(ignored, []);
  const patch = conv.tools.find((t) => t.name === "apply_patch")!;
  assert.deepEqual(
    (patch.parameters.properties as Json).input,
    { type: "string", [LARK_KEYWORD]: LARK },
  );
  // The history renders through a real template as calls and results.
  const messages = toTemplateMessages(conv);
  const prompt = renderChat(compileTemplate(HERMES_TOOLS_TEMPLATE), {
    messages,
    addGenerationPrompt: true,
    extra: { tools: templateTools(conv.tools) },
  });
  assert.ok(prompt.includes('"name": "apply_patch"'), prompt.slice(-2000));
  assert.ok(prompt.includes(JSON.stringify(PATCHES.add).slice(1, -1)), prompt.slice(-2000));
  assert.ok(prompt.includes("Success. Updated: A hello.txt"));
  assert.ok(prompt.includes('"name": "mcp__fx__echo"'));
  // Streaming decodes the input as it is written, never an escape cut in half.
  assert.equal(customInputPrefix('{"input": "a\\nb\\'), "a\nb");
  assert.equal(customInputPrefix('{"input": "a\\u00e9\\u00'), "aé");
  assert.equal(customInputPrefix('{"input": "x"}'), "x");
});

// ---------------------------------------------------------------- served

/**
 * A patch shape inside apply_patch's language with bounded parts, so a random-weight model must
 * finish it quickly: one Add File hunk (valid for Codex whatever the content) of one short line.
 */
const BOUNDED_PATCH = 'start: "*** Begin Patch" LF "*** Add File: " NAME ".txt" LF "+" WORD LF ' +
  '"*** End Patch" LF\nNAME: /[a-z]{1,8}/\nWORD: /[a-z ]{0,12}/\n%import common.LF\n';

function servedBody(overrides: Json): Json {
  const body = structuredClone(RECORDED.body);
  body.tools = body.tools.map((t) =>
    t.name === "apply_patch"
      ? { ...t, format: { ...t.format as Json, definition: BOUNDED_PATCH } }
      : t
  );
  return {
    ...body,
    model: undefined,
    store: false,
    temperature: 0,
    max_output_tokens: 200,
    ...overrides,
  };
}

type SseEvent = { type: string; [k: string]: unknown };

function sseEvents(text: string): SseEvent[] {
  return text.split("\n\n").filter((f) => f.includes("data: ")).map((f) =>
    JSON.parse(f.slice(f.indexOf("data: ") + 6))
  );
}

Deno.test({
  name: "responses: the recorded Codex request served, custom and namespace calls back in its form",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    await using srv = await startServer([
      "--model",
      await chatFormatModelPath("hermes"),
      "--max-seq-len",
      "32768",
      "--max-batch",
      "1",
      "--threads",
      "2",
    ]);
    const post = (body: Json) =>
      fetch(`${srv.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const fullGbnf = larkToGbnf(LARK);

    await t.step("forced apply_patch, not streamed: a custom_tool_call with a patch", async () => {
      const r = await post(servedBody({
        stream: false,
        tool_choice: { type: "custom", name: "apply_patch" },
      }));
      assert.equal(r.status, 200, await r.clone().text());
      assert.doesNotMatch(r.headers.get("x-hearth-ignored-fields") ?? "", /custom|namespace/);
      const out = (await r.json()).output as Json[];
      const call = out.find((i) => i.type === "custom_tool_call")!;
      assert.ok(call, JSON.stringify(out));
      assert.equal(call.name, "apply_patch");
      assert.match(call.call_id as string, /\S/);
      assert.equal(call.status, "completed");
      assert.ok(grammarAccepts(fullGbnf, call.input as string), JSON.stringify(call.input));
      assert.match(call.input as string, /^\*\*\* Begin Patch\n\*\*\* Add File: [a-z]+\.txt\n/);
    });

    await t.step("forced apply_patch, streamed: input deltas add up to the item", async () => {
      const r = await post(servedBody({
        stream: true,
        tool_choice: { type: "custom", name: "apply_patch" },
      }));
      assert.equal(r.status, 200);
      const evs = sseEvents(await r.text());
      const added = evs.find((e) =>
        e.type === "response.output_item.added" && (e.item as Json).type === "custom_tool_call"
      )!;
      assert.ok(added, evs.map((e) => e.type).join());
      const id = (added.item as Json).id;
      const deltas = evs.filter((e) => e.type === "response.custom_tool_call_input.delta");
      // Families that parse a call section whole send its input in one delta.
      assert.ok(deltas.length >= 1, evs.map((e) => e.type).join());
      assert.ok(deltas.every((e) => e.item_id === id));
      const done = evs.find((e) => e.type === "response.custom_tool_call_input.done")!;
      assert.equal(deltas.map((e) => e.delta).join(""), done.input);
      const item = evs.find((e) =>
        e.type === "response.output_item.done" && (e.item as Json).type === "custom_tool_call"
      )!.item as Json;
      assert.equal(item.input, done.input);
      assert.ok(grammarAccepts(fullGbnf, item.input as string), JSON.stringify(item.input));
      assert.ok(!evs.some((e) => e.type.startsWith("response.function_call_arguments")));
      const completed = evs.at(-1)!;
      assert.equal(completed.type, "response.completed");
      const final = (completed.response as Json).output as Json[];
      assert.deepEqual(final.find((i) => i.type === "custom_tool_call"), item);
    });

    await t.step("forced namespace tool: a function_call under Codex's name", async () => {
      for (const stream of [false, true]) {
        const r = await post(servedBody({
          stream,
          tool_choice: { type: "function", name: "fail", namespace: "mcp__fx" },
        }));
        assert.equal(r.status, 200);
        let call: Json | undefined;
        if (stream) {
          const evs = sseEvents(await r.text());
          call = evs.find((e) =>
            e.type === "response.output_item.done" && (e.item as Json).type === "function_call"
          )?.item as Json;
          const done = evs.find((e) => e.type === "response.function_call_arguments.done")!;
          assert.equal(done.name, "fail");
        } else {
          call = ((await r.json()).output as Json[]).find((i) => i.type === "function_call");
        }
        assert.ok(call, `stream ${stream}`);
        assert.equal(call.name, "fail");
        assert.equal(call.namespace, "mcp__fx");
        assert.deepEqual(JSON.parse(call.arguments as string), {});
      }
    });

    await t.step("a history with custom and namespaced calls and their outputs", async () => {
      const input = [
        ...(RECORDED.body.input as Json[]),
        { type: "custom_tool_call", call_id: "c1", name: "apply_patch", input: PATCHES.add },
        { type: "custom_tool_call_output", call_id: "c1", output: "Success. Updated: A hello.txt" },
        {
          type: "function_call",
          call_id: "c2",
          name: "fail",
          namespace: "mcp__fx",
          arguments: "{}",
        },
        { type: "function_call_output", call_id: "c2", output: "failed" },
      ];
      const base = await (await post(servedBody({ stream: false, max_output_tokens: 4 }))).json();
      const r = await post(servedBody({ stream: false, max_output_tokens: 4, input }));
      assert.equal(r.status, 200);
      assert.doesNotMatch(r.headers.get("x-hearth-ignored-fields") ?? "", /custom_tool_call/);
      const res = await r.json();
      assert.ok(res.usage.input_tokens > base.usage.input_tokens + 20, JSON.stringify(res.usage));
    });
  },
});
