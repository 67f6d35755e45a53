/**
 * The corpus of real tool schemas (`tests/fixtures/tools/*.json`): what popular MCP servers answer
 * to `tools/list` and what Claude Code, Codex and opencode put in their requests, each schema
 * exactly as it was sent. Tests that compile or validate tool schemas run over all of it, because
 * hand-written schemas never hold the `$ref`s, `anyOf`s, patterns and formats that agents send.
 * `tools/tool_corpus.ts` regenerates the files.
 *
 * @example
 * ```ts
 * import { loadToolCorpus } from "./tool_corpus.ts";
 * import { jsonSchemaToGbnf } from "../../lib/constrain/mod.ts";
 * for (const set of await loadToolCorpus()) {
 *   for (const tool of set.tools) {
 *     Deno.test(`tool corpus: ${set.file} ${tool.name}`, () => {
 *       jsonSchemaToGbnf(tool.inputSchema);
 *     });
 *   }
 * }
 * ```
 * @module
 */

/** A JSON Schema as sent: any keywords, so tests must not assume a subset. */
export type JsonSchema = Record<string, unknown>;

/** One tool of a set. */
export interface CorpusTool {
  name: string;
  description?: string;
  inputSchema: JsonSchema;
  /**
   * Codex's free-form tools only: the `format` object as sent (a Lark grammar); their
   * `inputSchema` is then a stand-in object with one string `input`.
   */
  custom?: unknown;
}

/** One fixture file: the tools of one server or CLI, at one version. */
export interface CorpusSet {
  /** The fixture's file name, e.g. `github.json` (not in the file: added on load). */
  file: string;
  /** `npm:<package>@<version>` for MCP servers, `cli:<package>@<version>` for agent CLIs. */
  source: string;
  kind: "mcp" | "cli";
  /** How the tools were obtained, in one line. */
  how: string;
  /** The date they were obtained, `YYYY-MM-DD`. */
  recorded: string;
  /** Sorted by name. */
  tools: CorpusTool[];
}

const dir = new URL("../fixtures/tools/", import.meta.url);

/** Every set in `tests/fixtures/tools/`, in file-name order (so test names are stable). */
export async function loadToolCorpus(): Promise<CorpusSet[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isFile && entry.name.endsWith(".json")) names.push(entry.name);
  }
  names.sort();
  return await Promise.all(names.map(async (file) => {
    const set = JSON.parse(await Deno.readTextFile(new URL(file, dir)));
    return { file, ...set } as CorpusSet;
  }));
}
