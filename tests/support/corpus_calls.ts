/**
 * Forced calls of every tool of the real corpus (`tests/fixtures/tools/`) in one family: for each
 * tool, the family's call grammar (relaxation on, as the server builds it), seeded texts drawn
 * from it (`gbnf_walk.ts`) and checked against llama.cpp's own grammar matcher, each read back by
 * the family's parser as the server streams it (in random chunks), and the call validated against
 * the tool's whole schema by ajv (draft-07 or 2020-12, as the schema declares, with ajv-formats).
 * Then the call goes through the family's real template as history: the template must write the
 * same call, in the syntax the grammar made the model write (`FamilySyntax`).
 *
 * @example
 * ```ts
 * import { corpusCallTests } from "./corpus_calls.ts";
 * corpusCallTests({ label: "Hermes 3", file: "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja" });
 * ```
 * @module
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";
import { loadModel, modelVocab, openLlama, samplers, tokenize, vocabInfo } from "../../ffi/mod.ts";
import type { Conversation, ToolSpec } from "../../lib/chat/conversation.ts";
import { detectToolFormat, type ToolFormat } from "../../lib/chat/formats/mod.ts";
import { isRawArg } from "../../lib/chat/formats/tagged_args.ts";
import { chatReply, collectReply } from "../../lib/chat/generation.ts";
import { renderConversation } from "../../lib/chat/render.ts";
import { compileTemplate } from "../../lib/chat/template.ts";
import { callGrammarFor, toolChecks } from "../../lib/chat/tool_checks.ts";
import type { EngineModel } from "../../lib/engine/model.ts";
import type { GenEvent } from "../../lib/engine/scheduler.ts";
import { gbnfWalker } from "./gbnf_walk.ts";
import { llamaSourceDir } from "./llama_source.ts";
import { type CorpusTool, loadToolCorpus } from "./tool_corpus.ts";
import { tokenData, tokenDataArray, writeStruct } from "../../ffi/mod.ts";

/** One template of the bundle and what its syntax must show. */
export type FamilySyntax = {
  label: string;
  /** A template of llama.cpp's bundle (`models/templates/`). */
  file: string;
  /**
   * How the template writes a raw (string) argument `key` = `value` in a call, for the families
   * that write strings unquoted: the raw text must hold exactly that.
   */
  rawArg?: (key: string, value: string) => string;
  /** The raw text must equal what the template renders (numbers compared by value). */
  exact?: boolean;
  /** The template renders no calls (the generic family): no round trip to check. */
  noRender?: boolean;
};

/** Seeds per tool: each a different walk through the call grammar. */
export const SEEDS = [1, 2, 3];

// ---------------------------------------------------------------- llama.cpp's matcher

const llama = openLlama();
const vocabModel = await loadModel(
  llama,
  new URL("../../lib/gguf/assets/llama-bpe.vocab.gguf", import.meta.url).pathname,
  { vocab_only: true },
);
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

function allowed(sampler: Deno.PointerValue, token: number): boolean {
  candidateView.setInt32(0, token, true);
  candidateView.setFloat32(LOGIT, 0, true);
  llama.sym.llama_sampler_apply(sampler, candidates);
  return candidateView.getFloat32(LOGIT, true) !== -Infinity;
}

/** Whether llama.cpp's grammar takes `text` whole (the sampler is reset first). */
function matcherAccepts(sampler: Deno.PointerValue, text: string): string | undefined {
  llama.sym.llama_sampler_reset(sampler);
  const ids = tokenize(llama, vocab, text, false, false);
  for (const [i, t] of ids.entries()) {
    if (!allowed(sampler, t)) return `token ${i} of ${ids.length} rejected`;
    llama.sym.llama_sampler_accept(sampler, t);
  }
  return allowed(sampler, EOS) ? undefined : "the grammar is not complete at the end";
}

// ---------------------------------------------------------------- the judge

const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ??
  addFormatsModule) as (ajv: unknown) => void;

const judges = new WeakMap<object, (value: unknown) => string | undefined>();

/** ajv for the schema's own draft (what a client's validator would use), compiled once. */
function judge(schema: Record<string, unknown>) {
  let j = judges.get(schema);
  if (!j) judges.set(schema, j = newJudge(schema));
  return j;
}

function newJudge(schema: Record<string, unknown>) {
  const draft07 = typeof schema.$schema === "string" && /draft-0[4-7]/.test(schema.$schema);
  const opts = { strict: false, allErrors: true, logger: false } as const;
  const ajv = draft07 ? new Ajv(opts) : new Ajv2020(opts);
  addFormats(ajv);
  const { $schema: _, ...rest } = schema;
  const v = ajv.compile(rest);
  return (value: unknown) => (v(value) ? undefined : ajv.errorsText(v.errors));
}

// ---------------------------------------------------------------- one family

function spec(t: CorpusTool): ToolSpec {
  return { name: t.name, description: t.description ?? "", parameters: t.inputSchema };
}

async function* replay(text: string, seed: number): AsyncGenerator<GenEvent> {
  // Chunks of 1..8 characters, as a model's tokens arrive (seed 0: the whole text at once).
  let s = seed;
  if (seed === 0) yield { type: "text", text };
  for (let i = seed === 0 ? text.length : 0; i < text.length;) {
    s = (s * 1103515245 + 12345) >>> 0;
    const n = 1 + (s >>> 16) % 8;
    yield { type: "text", text: text.slice(i, i + n) };
    i += n;
  }
  yield {
    type: "done",
    finishReason: "stop",
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
  };
}

/** JSON with every object's keys sorted: the same value, whatever order it was written in. */
function canonical(v: unknown): string {
  return JSON.stringify(
    v,
    (_k, x) =>
      x && typeof x === "object" && !Array.isArray(x)
        ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
        : x,
  );
}

/** Numbers in `text` written the one way JavaScript prints them (`1.50` → `1.5`). */
function numbersByValue(text: string): string {
  return text.replace(/-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?/g, (n) => String(Number(n)));
}

function conversationWith(tool: ToolSpec, call?: { name: string; arguments: string }) {
  const conv: Conversation = {
    turns: [{ role: "user", parts: [{ type: "text", text: "Go." }] }],
    tools: [tool],
    toolChoice: { type: "tool", name: tool.name },
    parallelToolCalls: false,
  };
  if (call) {
    conv.turns.push({
      role: "assistant",
      // Nine letters and digits: Mistral's templates refuse other ids.
      parts: [{ type: "tool_call", id: "abcDEF123", ...call }],
    });
  }
  return conv;
}

/** Calls the family's parser reads in `text`. */
async function callsIn(format: ToolFormat, tool: ToolSpec, text: string) {
  // The vocabulary alone serves to count reasoning tokens.
  const model = { llama, vocab } as unknown as EngineModel;
  const plan = { format, tools: [tool], reasoningOpen: false, model } as Parameters<
    typeof chatReply
  >[1];
  const reply = await collectReply(chatReply(replay(text, 7), plan));
  return reply.calls.map((c) => ({ name: c.name, args: JSON.parse(c.arguments) }));
}

/**
 * Registers one test per corpus file for a family: every tool of the file, every seed. Failures
 * are collected and reported together, so one run shows every tool that breaks.
 */
export async function corpusCallTests(syntax: FamilySyntax): Promise<void> {
  const source = Deno.readTextFileSync(`${await llamaSourceDir()}/models/templates/${syntax.file}`);
  const template = compileTemplate(source);
  const format = detectToolFormat(source);
  for (const set of await loadToolCorpus()) {
    Deno.test(`${syntax.label} (${format.family}): forced calls of ${set.file}`, async () => {
      const problems: string[] = [];
      for (const t of set.tools) {
        const tool = spec(t);
        const where = `${syntax.label} ${set.file} ${t.name}`;
        const built = callGrammarFor(format, [tool], { parallel: false });
        const checks = toolChecks([tool], built.relaxed, (i) => `tools[${i}]`, "parameters");
        const valid = judge(t.inputSchema);
        const sampler = samplers(llama).grammar(vocab, built.gbnf, "root");
        if (!sampler) {
          problems.push(`${where}: llama.cpp refused the grammar`);
          continue;
        }
        try {
          const walker = gbnfWalker(built.gbnf);
          for (const seed of SEEDS) {
            const text = walker.sample(seed);
            const refused = matcherAccepts(sampler, text);
            if (refused) {
              problems.push(
                `${where} seed ${seed}: llama.cpp: ${refused} in ${text.slice(0, 300)}`,
              );
              continue;
            }
            const plan = { format, tools: [tool], reasoningOpen: false, checks, forced: true };
            const reply = await collectReply(
              chatReply(replay(text, seed), plan as Parameters<typeof chatReply>[1]),
            );
            if (reply.calls.length !== 1 || reply.calls[0].name !== t.name || reply.text !== "") {
              problems.push(
                `${where} seed ${seed}: ${reply.calls.length} calls, text ${
                  JSON.stringify(reply.text.slice(0, 200))
                } from ${JSON.stringify(text.slice(0, 300))}`,
              );
              continue;
            }
            const args = JSON.parse(reply.calls[0].arguments);
            const why = valid(args);
            if (why) {
              problems.push(
                `${where} seed ${seed}: ${why}: ${reply.calls[0].arguments.slice(0, 300)}`,
              );
              continue;
            }
            if (seed === SEEDS[0]) {
              const { name, arguments: args0 } = reply.calls[0];
              const p = templateProblem(syntax, format, template, tool, text, {
                name,
                arguments: args0,
              });
              const m = await p;
              if (m) problems.push(`${where}: ${m}`);
            }
          }
        } finally {
          llama.sym.llama_sampler_free(sampler);
        }
      }
      assert.deepEqual(problems, [], problems.join("\n"));
    });
  }
}

/**
 * `tool_choice: auto`: a model's call of each corpus tool, written after some text, comes back as
 * that call whether the reply streams (chunks) or not (one piece); a call that breaks its schema
 * (drawn from the grammar of the schema without one required property, so it parses but misses
 * it) is not passed on as a call: it comes back as text saying why.
 */
export async function corpusAutoTests(syntax: FamilySyntax): Promise<void> {
  const source = Deno.readTextFileSync(`${await llamaSourceDir()}/models/templates/${syntax.file}`);
  const format = detectToolFormat(source);
  Deno.test(`${syntax.label} (${format.family}): auto calls of every corpus tool`, async () => {
    const problems: string[] = [];
    for (const set of await loadToolCorpus()) {
      const tools = set.tools.map(spec);
      const built = callGrammarFor(format, tools, { parallel: false });
      const checks = toolChecks(tools, built.relaxed, (i) => `tools[${i}]`, "parameters");
      const plan = {
        format,
        tools,
        reasoningOpen: false,
        checks,
        forced: false,
        model: { llama, vocab } as unknown as EngineModel,
      } as Parameters<typeof chatReply>[1];
      for (const [i, t] of set.tools.entries()) {
        const where = `${syntax.label} ${set.file} ${t.name}`;
        const good = gbnfWalker(callGrammarFor(format, [tools[i]], { parallel: false }).gbnf)
          .sample(11);
        // gpt-oss writes a call as its own message (a recipient right after `<|start|>assistant`).
        const lead = format.family === "harmony" ? "" : "Let me look.";
        const text = `${lead}${lead ? "\n" : ""}${good}`;
        for (const [how, chunks] of [["streamed", 5], ["whole", 0]] as const) {
          const reply = await collectReply(chatReply(replay(text, chunks), plan));
          const why = reply.calls.length === 1
            ? judge(t.inputSchema)(JSON.parse(reply.calls[0].arguments))
            : "no call";
          if (why || reply.calls[0].name !== t.name || reply.text !== lead) {
            problems.push(
              `${where} (${how}): ${why ?? ""} ${JSON.stringify(reply.text.slice(0, 200))}`,
            );
          }
        }
        const broken = withoutRequired(t.inputSchema);
        if (!broken) continue;
        const bad = gbnfWalker(
          callGrammarFor(format, [{ ...tools[i], parameters: broken }], { parallel: false }).gbnf,
        ).sample(12);
        const reply = await collectReply(chatReply(replay(`${lead}${bad}`, 3), plan));
        if (reply.calls.length || !reply.text.includes(`not a valid call of ${t.name}`)) {
          problems.push(
            `${where}: a call missing a required property came back as ${
              JSON.stringify(reply.calls)
            } / ${JSON.stringify(reply.text.slice(0, 200))}`,
          );
        }
      }
    }
    assert.deepEqual(problems, [], problems.join("\n"));
  });
}

/** The schema without its first required (listed) property, or undefined when it has none. */
function withoutRequired(schema: Record<string, unknown>): Record<string, unknown> | undefined {
  const required = Array.isArray(schema.required) ? schema.required as string[] : [];
  const props = (schema.properties ?? {}) as Record<string, unknown>;
  const gone = required.find((r) => Object.hasOwn(props, r));
  if (!gone) return undefined;
  const { [gone]: _, ...rest } = props;
  return { ...schema, properties: rest, required: required.filter((r) => r !== gone) };
}

/** What the template writes of the call differs from what the grammar had the model write. */
async function templateProblem(
  syntax: FamilySyntax,
  format: ToolFormat,
  template: ReturnType<typeof compileTemplate>,
  tool: ToolSpec,
  raw: string,
  call: { name: string; arguments: string },
): Promise<string | undefined> {
  if (syntax.noRender) return undefined;
  // The assistant's part of the rendering: what follows the prompt that asked for it (the whole
  // text where the template does not render history as a prefix of it).
  const render = (call: { name: string; arguments: string } | undefined) =>
    renderConversation(template, format, {}, conversationWith(tool, call), {
      addGenerationPrompt: call === undefined,
    }).text;
  const whole = render(call);
  const before = render(undefined);
  const rendered = whole.startsWith(before) ? whole.slice(before.length) : whole;
  // The call reads back the same from the template's text (the history the model sees next).
  const again = await callsIn(format, tool, rendered);
  const want = { name: call.name, args: JSON.parse(call.arguments) };
  if (!again.some((c) => canonical(c) === canonical(want))) {
    return `the template's rendering ${JSON.stringify(rendered.slice(0, 300))} reads back as ${
      JSON.stringify(again)
    }, not ${JSON.stringify(want)}`;
  }
  if (syntax.exact && !numbersByValue(rendered).includes(numbersByValue(raw))) {
    return `the model wrote ${JSON.stringify(raw)}, the template writes it otherwise`;
  }
  if (syntax.rawArg) {
    for (const [k, v] of Object.entries(want.args)) {
      if (typeof v !== "string" || !isRawArg(tool, k)) continue;
      const piece = syntax.rawArg(k, v);
      if (!raw.includes(piece)) {
        return `a raw argument is not written raw: ${JSON.stringify(piece)}`;
      }
      if (!rendered.includes(piece)) return `the template writes ${k} otherwise`;
    }
  }
  if (
    format.family === "devstral" &&
    raw.includes("[CALL_ID]") !== source(template).includes("[CALL_ID]")
  ) {
    return "a call id where the template renders none (or the other way round)";
  }
  return undefined;
}

function source(t: ReturnType<typeof compileTemplate>): string {
  return t.source;
}
