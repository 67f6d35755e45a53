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
import { HERMES_TOOLS_TEMPLATE } from "../lib/gguf/make_model_formats.ts";
import { CODEX_KEY_ENV, codexLocalOverrides } from "../lib/agents/local.ts";
import { agentCliBin, isolatedCliEnv } from "./support/agent_clis.ts";
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

// ---------------------------------------------------------------- the real Codex CLI

/**
 * A Codex model catalog entry for the served model (the fields Codex 0.169 requires, from its
 * bundled catalog): `apply_patch_tool_type: "freeform"` makes Codex send apply_patch as the
 * `custom` tool with its Lark grammar, as it does for its own models; short base instructions
 * keep the prompt small.
 */
function codexCatalog(slug: string): Json {
  return {
    models: [{
      slug,
      display_name: slug,
      description: "a Hearth model",
      base_instructions: "You are Codex, a coding agent. Edit files with apply_patch.",
      apply_patch_tool_type: "freeform",
      shell_type: "shell_command",
      supports_search_tool: false,
      supports_parallel_tool_calls: false,
      context_window: 32768,
      max_context_window: 32768,
      auto_compact_token_limit: null,
      truncation_policy: { mode: "tokens", limit: 10000 },
      input_modalities: ["text"],
      priority: 1,
      visibility: "list",
      supported_in_api: true,
      support_verbosity: false,
      default_verbosity: null,
      web_search_tool_type: "text",
      supports_image_detail_original: false,
      tool_mode: null,
      multi_agent_version: null,
      multi_agent_reasoning_effort: null,
      use_responses_lite: false,
      supports_reasoning_effort_updates: false,
      include_skills_usage_instructions: false,
      include_apps_usage_instructions: false,
      include_plugin_usage_instructions: false,
      node_repl_auto_review_required: false,
      node_repl_disabled: false,
      requires_sandboxed_review: false,
      comp_hash: "2911",
      default_reasoning_summary: "none",
      default_reasoning_level: "low",
      supported_reasoning_levels: [{ effort: "low", description: "low" }],
      experimental_supported_tools: [],
      supports_experimental_context: false,
      default_service_tier: null,
      supports_reasoning_summary_parameter: false,
      supports_reasoning_summaries: false,
    }],
  };
}

Deno.test({
  name: "codex exec edits a file through apply_patch on Hearth",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const bin = await agentCliBin();
    await using srv = await startServer([
      "--model",
      await chatFormatModelPath("hermes", { replyLength: 40 }),
      "--max-seq-len",
      "32768",
      "--max-batch",
      "1",
      "--threads",
      "2",
    ]);
    const modelId = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id as string;
    // Codex always sends `tool_choice: "auto"` (no setting changes it), and a random-weight
    // model never decides to call a tool, nor ends a line of apply_patch's unbounded grammar.
    // So this proxy stands in for the model's decision on Codex's first request: it forces
    // apply_patch and narrows its grammar to a bounded part of the same language. Everything
    // else is real: Hearth constrains and shapes the call, Codex parses and applies it.
    const replies: string[] = [];
    let forced = 0;
    let sentBack = 0;
    const proxy = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
      const url = new URL(req.url);
      let body = req.method === "POST" ? await req.text() : undefined;
      if (url.pathname === "/v1/responses" && body) {
        const b = JSON.parse(body);
        const patch = (b.tools as Json[] | undefined)?.find((t) => t.name === "apply_patch");
        const answered = (b.input as Json[]).some((i) => i.type === "custom_tool_call_output");
        if (answered) sentBack++;
        if (patch && !answered) {
          assert.equal(patch.type, "custom");
          assert.equal((patch.format as Json).definition, LARK, "Codex sends the grammar recorded");
          patch.format = { ...patch.format as Json, definition: BOUNDED_PATCH };
          b.tool_choice = { type: "custom", name: "apply_patch" };
          b.parallel_tool_calls = false;
          forced++;
        }
        body = JSON.stringify(b);
      }
      const headers = new Headers(req.headers);
      headers.delete("content-length");
      headers.delete("host");
      const r = await fetch(srv.url + url.pathname + url.search, {
        method: req.method,
        headers,
        body,
      });
      const text = await r.text();
      if (url.pathname === "/v1/responses") replies.push(text);
      const back = new Headers(r.headers);
      back.delete("content-length");
      back.delete("content-encoding");
      return new Response(text, { status: r.status, headers: back });
    });
    try {
      const dir = await Deno.makeTempDir({ prefix: "hearth-codex-" });
      const work = `${dir}/work`;
      const home = `${dir}/home`;
      await Deno.mkdir(work);
      await Deno.mkdir(`${home}/.codex`, { recursive: true });
      await new Deno.Command("git", { args: ["init", "-q", work] }).output();
      await Deno.writeTextFile(`${dir}/catalog.json`, JSON.stringify(codexCatalog(modelId)));
      const base = `http://127.0.0.1:${proxy.addr.port}`;
      const out = await new Deno.Command(`${bin}/codex`, {
        args: [
          ...codexLocalOverrides({ baseUrl: base, modelId, contextWindow: 32768 }),
          "-c",
          `model_catalog_json=${JSON.stringify(`${dir}/catalog.json`)}`,
          // Only apply_patch (and request_user_input, which no setting removes) is offered.
          ...["unified_exec", "shell_tool", "view_image", "goals", "multi_agent"].flatMap((f) => [
            "-c",
            `features.${f}=false`,
          ]),
          "-s",
          "workspace-write",
          "exec",
          "--json",
          "--skip-git-repo-check",
          "--",
          "Add a small text file.",
        ],
        cwd: work,
        env: { ...isolatedCliEnv(home), CODEX_HOME: `${home}/.codex`, [CODEX_KEY_ENV]: "k" },
        clearEnv: true,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout);
      const why = `${stdout}\n${new TextDecoder().decode(out.stderr).slice(-2000)}`;
      assert.equal(out.code, 0, why);
      assert.equal(forced, 1, why);
      // Hearth's reply to the forced request: one custom_tool_call, as Codex received it.
      const call = sseEvents(replies[0]).find((e) =>
        e.type === "response.output_item.done" && (e.item as Json).type === "custom_tool_call"
      )?.item as Json;
      assert.ok(call, replies[0].slice(-3000));
      const input = call.input as string;
      assert.ok(grammarAccepts(larkToGbnf(LARK), input), JSON.stringify(input));
      const m = /^\*\*\* Add File: ([a-z]+\.txt)\n\+([a-z ]*)\n/m.exec(input)!;
      console.log(`codex applied ${JSON.stringify(input)}`);
      // Codex applied it: a file_change item, and the file in the workspace.
      const events = stdout.trim().split("\n").map((l) => JSON.parse(l));
      const change = events.find((e) =>
        e.type === "item.completed" && e.item?.type === "file_change"
      );
      assert.ok(change, why);
      assert.equal(change.item.status, "completed", why);
      assert.equal(await Deno.readTextFile(`${work}/${m[1]}`), `${m[2]}\n`);
      // Its output went back to the model as a custom_tool_call_output.
      assert.ok(sentBack >= 1, why);
      await Deno.remove(dir, { recursive: true });
    } finally {
      await proxy.shutdown();
    }
  },
});
