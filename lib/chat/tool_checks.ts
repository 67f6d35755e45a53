/**
 * What a turn's tool-call grammar holds of each tool's schema, and what is checked after it. The
 * call grammar is compiled with relaxation on (a schema is never refused for being hard to
 * compile) and cached per family and tool set, so an agent's warm turn does no grammar work; the
 * keywords it could not hold come back as relaxations. Those validated on the finished call
 * (`checked`) are enforced by {@link ToolChecks.validate}; the others (an unknown `format`, a
 * `$ref` outside the schema) are named in `x-hearth-relaxed-schema` and the log.
 *
 * @example
 * ```ts
 * import { callGrammarFor, toolChecks } from "./tool_checks.ts";
 * import { hermesFormat } from "./formats/hermes.ts";
 * const tools = [{ name: "tag", parameters: { type: "object", properties: {
 *   tags: { type: "array", items: { type: "string" }, uniqueItems: true } } } }];
 * const built = callGrammarFor(hermesFormat, tools, { parallel: false });
 * const checks = toolChecks(tools, built.relaxed, (i) => `tools[${i}]`, "parameters");
 * checks.checked; // ["tools[0].parameters#/properties/tags/uniqueItems"]
 * checks.validate("tag", '{"tags":["a","a"]}'); // "/tags must NOT have duplicate items ..."
 * ```
 * @module
 */
import type { Relaxation } from "../constrain/json_schema.ts";
import { schemaCheck } from "../constrain/schema_check.ts";
import type { ToolSpec } from "./conversation.ts";
import { argumentsSchema } from "./formats/grammar.ts";
import type { ToolFormat } from "./formats/types.ts";

/** A call grammar and what it relaxed, by index in the tools it was built for. */
export type CallGrammar = { gbnf: string; relaxed: Map<number, Relaxation[]> };

const CACHE_SIZE = 32;
const grammars = new WeakMap<ToolFormat, Map<string, CallGrammar | { error: unknown }>>();

/**
 * The family's grammar for `tools` with relaxation on, cached by the tools' names and schemas (an
 * agent resends the same tool set every turn). A schema error that is not relaxable (a malformed
 * Lark grammar) is cached and thrown again.
 */
export function callGrammarFor(
  format: ToolFormat,
  tools: ToolSpec[],
  opts: { parallel: boolean },
): CallGrammar {
  let cache = grammars.get(format);
  if (!cache) grammars.set(format, cache = new Map());
  const key = JSON.stringify([opts.parallel, tools.map((t) => [t.name, t.parameters])]);
  let hit = cache.get(key);
  if (hit) cache.delete(key);
  else {
    const relaxed = new Map<number, Relaxation[]>();
    try {
      const gbnf = format.callGrammar(tools, {
        parallel: opts.parallel,
        relax: (i, r) => void relaxed.set(i, [...(relaxed.get(i) ?? []), r]),
      });
      hit = { gbnf, relaxed };
    } catch (e) {
      hit = { error: e };
    }
  }
  cache.set(key, hit);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
  if ("error" in hit) throw hit.error;
  return hit;
}

/** What the grammar did not hold, by wire name, and the check of finished calls. */
export type ToolChecks = {
  /** Keywords enforced by nothing (`tools[3].parameters#/properties/x/format`). */
  relaxed: string[];
  /** Keywords enforced by validating the finished call instead of by the grammar. */
  checked: string[];
  /** Why a finished call breaks its tool's schema (undefined: it does not, or no check exists). */
  validate(name: string, args: string): string | undefined;
  /** Whether a call of `name` may break its schema even when the grammar wrote it. */
  needsCheck(name: string): boolean;
};

/**
 * The checks of a turn's tools. `relaxed` is keyed by index in `tools`; `param(i)` and
 * `schemaKey` spell a tool's schema on the wire (`tools[2].function` + `parameters`).
 */
export function toolChecks(
  tools: ToolSpec[],
  relaxed: Map<number, Relaxation[]>,
  param: (i: number) => string,
  schemaKey: string,
): ToolChecks {
  const out: ToolChecks = { relaxed: [], checked: [], validate: () => undefined, needsCheck };
  const byName = new Map<string, { tool: ToolSpec; unenforced: string[]; checked: boolean }>();
  tools.forEach((tool, i) => {
    const rs = relaxed.get(i) ?? [];
    const unenforced = rs.filter((r) => !r.checked).map((r) => r.pointer);
    // A validator is compiled up front only where the grammar relaxed something (else at the
    // first call that is checked).
    const check = rs.length ? schemaCheck(argumentsSchema(tool), unenforced) : { ok: true };
    const wire = (r: Relaxation) => `${param(i)}.${schemaKey}${r.pointer}`;
    for (const r of rs) {
      // Without a validator for the schema, nothing it relaxed is enforced.
      if (r.checked && check.ok) out.checked.push(wire(r));
      else out.relaxed.push(wire(r));
    }
    if (!check.ok) out.relaxed.push(`${param(i)}.${schemaKey}#`);
    byName.set(tool.name, { tool, unenforced, checked: rs.some((r) => r.checked) && check.ok });
  });
  function needsCheck(name: string): boolean {
    return byName.get(name)?.checked ?? false;
  }
  out.validate = (name, args) => {
    const t = byName.get(name);
    if (!t) return undefined;
    let value: unknown;
    try {
      value = JSON.parse(args);
    } catch {
      return "the arguments are not JSON";
    }
    const check = schemaCheck(argumentsSchema(t.tool), t.unenforced);
    return check.ok ? check.check(value) : undefined;
  };
  return out;
}
