/**
 * Replies parsed as the tool-call families read them, for llama.cpp's expected parses (its
 * `tests/test-chat.cpp`): through `chatReply`, as the server does (reasoning through a parser of
 * its own, so a call inside it is still a call), cut every way; or through a format's own parser
 * and reasoning splitter, in fixed chunks.
 *
 * @example
 * ```ts ignore
 * import { expectParse, type Reader } from "./family_parse.ts";
 * const glm: Reader = { label: "GLM", family: "glm", model: "glm", reasoningOpen: false, tools };
 * await expectParse(glm, "<tool_call>f</tool_call>", { calls: [["f", {}]] });
 * ```
 * @module
 */
import assert from "node:assert/strict";
import type { ReplyEvent, ToolSpec } from "../../lib/chat/conversation.ts";
import { TOOL_FORMATS, type ToolFamily, type ToolFormat } from "../../lib/chat/formats/mod.ts";
import { chatReply } from "../../lib/chat/generation.ts";
import { newReasoningSplitter } from "../../lib/chat/reasoning.ts";
import { compileTemplate, renderChat } from "../../lib/chat/template.ts";
import type { ChatFormatName } from "../../lib/gguf/make_model_formats.ts";
import { bundledTemplate, familyEngine } from "./family_models.ts";
import { replay } from "./family_tools.ts";

/** A reply as read: reasoning, content, and each call (with its id where the family names it). */
export type Parsed = { reasoning: string; content: string; calls: [string, unknown, string?][] };

/** How a reply is read: the family's format, after a prompt that did or did not open reasoning. */
export type Reader = {
  label: string;
  family: ToolFamily;
  /** The tiny model whose vocab reads it (the family's own, or the one it runs on). */
  model: ChatFormatName;
  reasoningOpen: boolean;
  tools: ToolSpec[];
};

/** `chunks` parsed as `chatReply` does. */
export async function parseReply(r: Reader, chunks: string[]): Promise<Parsed> {
  const plan = {
    format: TOOL_FORMATS[r.family],
    tools: r.tools,
    reasoningOpen: r.reasoningOpen,
    model: (await familyEngine(r.model)).model,
  } as Parameters<typeof chatReply>[1];
  const out: Parsed = { reasoning: "", content: "", calls: [] };
  const names = new Map<number, string>();
  const ids = new Map<number, string>();
  for await (const ev of chatReply(replay(chunks), plan)) {
    if (ev.type === "text") out.content += ev.text;
    if (ev.type === "reasoning") out.reasoning += ev.text;
    if (ev.type === "tool_call_start") names.set(ev.index, ev.name), ids.set(ev.index, ev.id);
    if (ev.type === "tool_call_end") {
      const id = ids.get(ev.index)!;
      // Ids Hearth makes up (`call_…`) differ per run; a family's own (Kimi-K2's) are checked.
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

/** Whole, in fixed chunks of 1, 2, 3 and 7 characters, and cut in two everywhere. */
export function chunkings(text: string): string[][] {
  const out: string[][] = [[text]];
  for (const size of [1, 2, 3, 7]) {
    const cs: string[] = [];
    for (let i = 0; i < text.length; i += size) cs.push(text.slice(i, i + size));
    out.push(cs);
  }
  for (let i = 1; i < text.length; i++) out.push([text.slice(0, i), text.slice(i)]);
  return out;
}

/** `text` reads as `want` (nothing where it says nothing), however it is chunked. */
export async function expectParse(r: Reader, text: string, want: Partial<Parsed>): Promise<void> {
  for (const chunks of chunkings(text)) {
    assert.deepEqual(
      await parseReply(r, chunks),
      { reasoning: "", content: "", calls: [], ...want },
      `${r.label} in chunks ${JSON.stringify(chunks)}`,
    );
  }
}

const anyArgs = (name: string): ToolSpec => ({ name, parameters: { type: "object" } });

/** Tools of llama.cpp's parse tests, their arguments untyped (but `edit`'s). */
export const UNTYPED_PARSE_TOOLS: ToolSpec[] = [
  ...[
    "special_function",
    "special_function_with_opt",
    "empty_args",
    "python",
    "html",
    "read_file_diff_md",
    "execute_command",
  ].map(anyArgs),
  {
    name: "edit",
    parameters: {
      type: "object",
      properties: {
        oldString: { type: "string" },
        newString: { type: "string" },
        replaceAll: { type: "boolean" },
      },
    },
  },
];

const str = { type: "string" };
const num = { type: "number" };
/** Tools of llama.cpp's parse tests with typed parameters: nested objects, arrays, unions. */
export const TYPED_PARSE_TOOLS: ToolSpec[] = [
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

/**
 * How a family reads a reply after its real template's generation prompt, on its own tiny model,
 * with `UNTYPED_PARSE_TOOLS` offered.
 */
export function templateReader(
  c: { label: string; file: string; family: ToolFamily & ChatFormatName },
): Reader {
  return {
    label: c.label,
    family: c.family,
    model: c.family,
    reasoningOpen: promptOpensThink(bundledTemplate(c.file), c.family),
    tools: UNTYPED_PARSE_TOOLS,
  };
}

/** Whether the template's generation prompt (after one user turn) leaves a think block open. */
export function promptOpensThink(source: string, family: ToolFamily): boolean {
  const m = TOOL_FORMATS[family].reasoning;
  if (!m) return false;
  const prompt = renderChat(compileTemplate(source), {
    messages: [{ role: "user", content: "hi" }],
    addGenerationPrompt: true,
  });
  const at = prompt.lastIndexOf(m.start);
  return at >= 0 && !prompt.includes(m.end, at);
}

/** `text` parsed by the format's own parser (and reasoning splitter), fed in chunks of `size`. */
export function parseWithFormat(
  f: ToolFormat,
  tools: ToolSpec[],
  text: string,
  open: boolean,
  size: number,
): Parsed {
  const split = f.reasoning ? newReasoningSplitter({ ...f.reasoning, open }) : undefined;
  const parser = f.newParser(tools);
  const out: Parsed = { reasoning: "", content: "", calls: [] };
  const take = (evs: ReplyEvent[]) => {
    for (const ev of evs) {
      if (ev.type === "text") out.content += ev.text;
      if (ev.type === "reasoning") out.reasoning += ev.text;
      if (ev.type === "tool_call_end") {
        out.calls.push([
          (evs.find((e) => e.type === "tool_call_start" && e.index === ev.index) as {
            name: string;
          }).name,
          JSON.parse(ev.arguments),
        ]);
      }
    }
  };
  const feed = (s: string) => {
    for (const p of split ? split.push(s) : [{ type: "text" as const, text: s }]) {
      if (p.type === "reasoning") out.reasoning += p.text;
      else take(parser.push(p.text));
    }
  };
  for (let i = 0; i < text.length; i += size) feed(text.slice(i, i + size));
  for (const p of split?.end() ?? []) {
    if (p.type === "reasoning") out.reasoning += p.text;
    else take(parser.push(p.text));
  }
  take(parser.end());
  return out;
}

/**
 * `text` reads as `want` through the format's parser, whole and in chunks of 7 and 1 characters
 * (`open`: the generation prompt left reasoning open). Calls are reported whole per chunk here,
 * so a start and its end come in one push.
 */
export function expectFormatParse(
  f: ToolFormat,
  tools: ToolSpec[],
  where: string,
  text: string,
  want: Partial<Parsed>,
  open = false,
): void {
  for (const size of [text.length, 7, 1]) {
    const got = parseWithFormat(f, tools, text, open, size);
    assert.deepEqual(
      { reasoning: got.reasoning, content: got.content, calls: got.calls },
      { reasoning: "", content: "", calls: [], ...want },
      `${where} in chunks of ${size}: ${JSON.stringify(text)}`,
    );
  }
}
