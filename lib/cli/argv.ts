/**
 * The argv walker behind every subcommand's flags: `--flag value` and `--flag=value`, booleans,
 * each flag at most once, values checked by the flag's Zod schema. It never exits; it returns a
 * one-line message for the command to print before exiting with status 2.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 * import { parseFlags } from "./argv.ts";
 * const r = parseFlags(["--port=9"], [{ key: "port", names: ["--port"], schema: z.coerce.number() }],
 *   { port: 8000 }, "--help");
 * if (r.ok) r.values.port; // 9
 * ```
 * @module
 */
import type { z } from "zod";

/** One flag: its names and value schema (absent for booleans); `meta` names the value in errors. */
export type FlagSpec<K extends string = string> = {
  key: K;
  names: string[];
  schema?: z.ZodType;
  meta?: string;
};

export type FlagsResult =
  | { ok: true; values: Record<string, unknown> }
  | { ok: false; message: string };

/** Walks `argv` against `flags`, starting from `defaults`; `helpHint` ends unknown-flag errors. */
export function parseFlags(
  argv: string[],
  flags: readonly FlagSpec[],
  defaults: Record<string, unknown>,
  helpHint: string,
): FlagsResult {
  const values: Record<string, unknown> = { ...defaults };
  const seen = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const spec = flags.find((f) => f.names.includes(name));
    if (!spec) {
      return {
        ok: false,
        message: arg.startsWith("-")
          ? `unknown flag ${name} (see ${helpHint})`
          : `unexpected argument ${JSON.stringify(arg)} (see ${helpHint})`,
      };
    }
    if (seen.has(spec.key)) return { ok: false, message: `${name} given twice` };
    seen.add(spec.key);
    if (!spec.schema) {
      if (eq > 0) return { ok: false, message: `${name} takes no value` };
      values[spec.key] = true;
      continue;
    }
    let raw: string | undefined;
    if (eq > 0) raw = arg.slice(eq + 1);
    else {
      raw = argv[i + 1];
      if (raw === undefined || (raw.startsWith("--") && raw.length > 2)) {
        return { ok: false, message: `${name} needs a value (${spec.meta ?? "VALUE"})` };
      }
      i++;
    }
    const parsed = spec.schema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const why = issue.code === "invalid_value" ? `must be one of ${spec.meta}` : issue.message;
      return { ok: false, message: `${name} ${JSON.stringify(raw)}: ${why}` };
    }
    values[spec.key] = parsed.data;
  }
  return { ok: true, values };
}
