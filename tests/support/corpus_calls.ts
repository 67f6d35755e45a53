/**
 * Calls of every tool of the real corpus (`tests/fixtures/tools/`) in one family: for each tool,
 * the family's call grammar (relaxation on, as the server builds it), seeded texts drawn from it
 * (`gbnf_walk.ts`) and checked against llama.cpp's own grammar matcher, each read back by the
 * family's parser as the server streams it (in random chunks), and the call validated against the
 * tool's whole schema by ajv (draft-07 or 2020-12, as the schema declares, with ajv-formats). The
 * call then goes through the family's real template as history: the template must write the same
 * call, in the syntax the grammar made the model write (`FamilySyntax`); and it is read again as a
 * free (`auto`) call among the whole tool set, beside one call that breaks its schema.
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
 * Registers one test per corpus file for a family: every tool of the file, forced (every seed),
 * then the first seed's call again as a model writes it under `tool_choice: auto` (after some
 * text, streamed in chunks and whole, with the file's whole tool set offered), and one call that
 * breaks its schema (drawn from the grammar of the schema without a required property, so it
 * parses but misses it), which must come back as text saying why, not as a call. Failures are
 * collected and reported together, so one run shows every tool that breaks.
 */
export async function corpusCallTests(syntax: FamilySyntax): Promise<void> {
  const source = Deno.readTextFileSync(`${await llamaSourceDir()}/models/templates/${syntax.file}`);
  const template = compileTemplate(source);
  const format = detectToolFormat(source);
  const model = { llama, vocab } as unknown as EngineModel;
  // gpt-oss writes a call as its own message (a recipient right after `<|start|>assistant`), and
  // Llama 3.x's bare JSON call is one only at the start of the reply.
  const lead = format.family === "harmony" || format.family === "llama3" ? "" : "Let me look.";
  for (const set of await loadToolCorpus()) {
    Deno.test(`${syntax.label} (${format.family}): forced and auto calls of ${set.file}`, async () => {
      const problems: string[] = [];
      const tools = set.tools.map(spec);
      const all = callGrammarFor(format, tools, { parallel: false });
      const autoPlan = {
        format,
        tools,
        reasoningOpen: false,
        checks: toolChecks(tools, all.relaxed, (i) => `tools[${i}]`, "parameters"),
        forced: false,
        model,
      } as Parameters<typeof chatReply>[1];
      let brokenShown = false;
      for (const [i, t] of set.tools.entries()) {
        const tool = tools[i];
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
            if (seed !== SEEDS[0]) continue;
            const { name, arguments: args0 } = reply.calls[0];
            const m = await templateProblem(syntax, format, template, tool, text, {
              name,
              arguments: args0,
            });
            if (m) problems.push(`${where}: ${m}`);
            // The same call under `auto`, among the whole tool set.
            const free = `${lead}${lead ? "\n" : ""}${text}`;
            for (const [how, chunks] of [["streamed", 5], ["whole", 0]] as const) {
              const r = await collectReply(chatReply(replay(free, chunks), autoPlan));
              const bad = r.calls.length === 1
                ? valid(JSON.parse(r.calls[0].arguments))
                : "no call";
              if (bad || r.calls[0].name !== t.name || r.text !== lead) {
                problems.push(
                  `${where} (auto, ${how}): ${bad ?? ""} ${JSON.stringify(r.text.slice(0, 200))}`,
                );
              }
            }
          }
        } finally {
          llama.sym.llama_sampler_free(sampler);
        }
        // One broken call per file (a grammar of its own to build): reported as text.
        const broken = brokenShown ? undefined : withoutRequired(t.inputSchema);
        if (!broken) continue;
        brokenShown = true;
        const bad = gbnfWalker(
          callGrammarFor(format, [{ ...tool, parameters: broken }], { parallel: false }).gbnf,
        ).sample(12);
        const r = await collectReply(chatReply(replay(`${lead}${bad}`, 3), autoPlan));
        if (r.calls.length || !r.text.includes(`not a valid call of ${t.name}`)) {
          problems.push(
            `${where}: a call missing a required property came back as ${
              JSON.stringify(r.calls)
            } / ${JSON.stringify(r.text.slice(0, 200))}`,
          );
        }
      }
      assert.deepEqual(problems, [], problems.join("\n"));
    });
  }
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
