/**
 * The `serve` flags of several models (issue 34, DESIGN 4f), their part of `ServeConfig`, and the
 * walk that lets a flag repeat (`--model`, `--model-alias`): `lib/cli/argv.ts` takes each flag at
 * most once, so each occurrence of a repeatable one is taken out first and checked on its own by
 * that same walker, with the same messages. What the flags mean is `lib/models/model_set.ts`'s.
 *
 * @example
 * ```ts
 * import { MODEL_SET_FLAGS, takeRepeated } from "./model_set_flags.ts";
 * const r = takeRepeated(["--model-alias", "claude-*=qwen", "--port", "1"], MODEL_SET_FLAGS, "-h");
 * if (r.ok) r.values.modelAlias; // [{ pattern: "claude-*", id: "qwen" }]; r.rest: ["--port", "1"]
 * ```
 * @module
 */
import { z } from "zod";
import { type FlagSpec, parseFlags } from "./argv.ts";

/** `--model-alias PATTERN=ID`: requests naming a model that matches `pattern` go to model `id`. */
export type ModelAliasFlag = { pattern: string; id: string };

/** The part of `ServeConfig` these flags fill. */
export type ModelSetFlags = {
  /** `--models-dir`: every `.gguf` (split files once) and model folder in it is a model. */
  modelsDir?: string;
  /** `--models-config`: a JSON file of models by id. */
  modelsConfig?: string;
  modelAlias: ModelAliasFlag[];
  defaultModel?: string;
  modelsMax?: number;
  /** Seconds a loaded model may sit idle before it is unloaded; 0 or undefined: never. */
  modelsIdle?: number;
  modelsPreload?: string[];
};

/**
 * A flag with its help line. A `repeatable` one may be given several times; its values are
 * collected, in order, into an array under `key`.
 */
export type RepeatableFlag<K extends string = string> = FlagSpec<K> & {
  help: string;
  repeatable?: true;
};

const text = z.string().min(1, "must not be empty");
const count = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z.string().regex(/^-?\d+$/, "must be an integer").transform(Number).pipe(
    z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`),
  );
/** `PATTERN=ID`, both non-empty. */
const aliasRule = z.string().regex(/^[^=]+=[^=]+$/, "must be PATTERN=ID").transform(
  (s): ModelAliasFlag => ({ pattern: s.slice(0, s.indexOf("=")), id: s.slice(s.indexOf("=") + 1) }),
);
/** `a,b,c`: model ids, none empty. */
const idList = z.string().transform((s) => s.split(",").map((id) => id.trim())).refine(
  (ids) => ids.every((id) => id !== ""),
  "must be a comma-separated list of model ids",
);

export const MODEL_SET_FLAGS: RepeatableFlag<keyof ModelSetFlags>[] = [
  {
    key: "modelsDir",
    names: ["--models-dir"],
    schema: text,
    meta: "DIR",
    help:
      "serve the .gguf (split files as one) or model folder in DIR; id = file stem (one model for now: several exit 2)",
  },
  {
    key: "modelsConfig",
    names: ["--models-config"],
    schema: text,
    meta: "FILE",
    help:
      'a model by id with its own flags (JSON {"models": {ID: {"model", ...}}}; one for now: several exit 2)',
  },
  {
    key: "modelAlias",
    names: ["--model-alias"],
    schema: aliasRule,
    meta: "PATTERN=ID",
    repeatable: true,
    help:
      "requests for a model matching PATTERN (* globs) go to model ID; repeatable (not built yet: exits 2)",
  },
  {
    key: "defaultModel",
    names: ["--default-model"],
    schema: text,
    meta: "ID",
    help: "model for requests that name none (the first model)",
  },
  {
    key: "modelsMax",
    names: ["--models-max"],
    schema: count(1, 1024),
    meta: "N",
    help: "models loaded at once (not built yet: exits 2)",
  },
  {
    key: "modelsIdle",
    names: ["--models-idle"],
    schema: count(0),
    meta: "SECONDS",
    help: "unload a model idle this long; 0 = never (not built yet: exits 2)",
  },
  {
    key: "modelsPreload",
    names: ["--models-preload"],
    schema: idList,
    meta: "ID,...",
    help: "models to load at start (not built yet: exits 2)",
  },
];

/**
 * Takes every occurrence of a repeatable flag of `flags` out of `argv`, each checked on its own.
 * No flag value may start with `--`, so a repeatable flag's name is never another flag's value.
 */
export function takeRepeated(
  argv: string[],
  flags: readonly RepeatableFlag[],
  helpHint: string,
):
  | { ok: true; rest: string[]; values: Record<string, unknown[]> }
  | { ok: false; message: string } {
  const rest: string[] = [];
  const values: Record<string, unknown[]> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const spec = flags.find((f) => f.repeatable && f.names.includes(name));
    if (!spec) {
      rest.push(arg);
      continue;
    }
    const next = argv[i + 1];
    const takesNext = eq < 0 && next !== undefined && !(next.startsWith("--") && next.length > 2);
    const r = parseFlags(takesNext ? [arg, next] : [arg], [spec], {}, helpHint);
    if (!r.ok) return r;
    if (takesNext) i++;
    (values[spec.key] ??= []).push(r.values[spec.key]);
  }
  return { ok: true, rest, values };
}
