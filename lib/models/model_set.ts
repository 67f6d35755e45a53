/**
 * Which models a server has (issue 34, DESIGN 4f): every `--model`, the models of
 * `--models-config` and of `--models-dir`, their aliases (`--model-alias PATTERN=ID` and the
 * config's `"aliases"`, `*` globs) and the default model. {@linkcode resolveModelId} answers which
 * model a request's `model` field names. Building the set reads the file system (the ids of
 * `--model` paths, the folder, the config file) but loads and downloads nothing; every mistake is
 * a one-line Error naming the flag, the model and the key, which `serve` prints before exiting 2.
 *
 * @example
 * ```ts ignore
 * import { buildModelSet, modelConfig, resolveModelId } from "./model_set.ts";
 * const set = await buildModelSet(config); // --models-dir /m --model-alias 'claude-haiku-*=qwen3'
 * const hit = resolveModelId(set, "claude-haiku-4-5");
 * if (hit.ok) await resolveModel(modelConfig(config, hit.model)); // qwen3's path and flags
 * else hit.ids; // the ids a 404 lists
 * ```
 * @module
 */
import type { ServeConfig } from "../cli/flags.ts";
import { parseHubId } from "./hub.ts";
import { DEMO_MODEL_ID } from "./resolve.ts";
import { type ModelFlags, readModelsConfig } from "./set/models_config.ts";
import { scanModelsDir } from "./set/models_dir.ts";

export type { ModelFlags } from "./set/models_config.ts";
export { PER_MODEL_FLAGS } from "./set/models_config.ts";

/** One model of the set. */
export type ModelEntry = {
  /** The id clients name it by (and `/v1/models` lists). */
  id: string;
  /** What `--model` would take (hub id, directory or GGUF path); undefined: the demo model. */
  model?: string;
  modelFile?: string;
  /** The names and `*` globs that also reach it, in match order. */
  aliases: string[];
  /** Its own serve flags from `--models-config`; the command line's apply to the rest. */
  flags: Partial<ModelFlags>;
  /** Which flag named it. */
  source: "model" | "models-config" | "models-dir" | "demo";
};

/** An alias: a request naming `pattern` (exact, or with `*` globs) goes to model `id`. */
export type AliasRule = { pattern: string; id: string };

export type ModelSet = {
  /** In order: each `--model`, then the config's models, then the folder's (by id). */
  models: ModelEntry[];
  /** `--model-alias` rules in the order given, then each config model's `"aliases"`. */
  aliases: AliasRule[];
  /** `--default-model`, else the first model. */
  defaultId: string;
  /** `--models-preload`'s ids, once each. */
  preload: string[];
};

/** How a request's model was found; `only` is the one-model rule (any id reaches it). */
export type ModelLookup =
  | { ok: true; model: ModelEntry; by: "default" | "id" | "alias" | "glob" | "only" }
  | { ok: false; requested: string; ids: string[] };

/** `*` matches any run of characters (`/` included); everything else matches itself. */
export function globMatches(pattern: string, id: string): boolean {
  const parts = pattern.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`^${parts.join(".*")}$`, "s").test(id);
}

/**
 * The model a request names. No name: the default model. Else an id, then an exact alias, then
 * the first glob alias that matches, in the order given. A server of one model and no alias
 * answers any name with that model, as a single-model Hearth always has (routes that 404 other
 * names, as the OpenAI ones do, tell `by: "only"` from a real match).
 */
export function resolveModelId(set: ModelSet, requested: string | undefined): ModelLookup {
  const byId = (id: string) => set.models.find((m) => m.id === id);
  if (requested === undefined) return { ok: true, model: byId(set.defaultId)!, by: "default" };
  const direct = byId(requested);
  if (direct) return { ok: true, model: direct, by: "id" };
  const exact = set.aliases.find((a) => !a.pattern.includes("*") && a.pattern === requested);
  if (exact) return { ok: true, model: byId(exact.id)!, by: "alias" };
  const glob = set.aliases.find((a) =>
    a.pattern.includes("*") && globMatches(a.pattern, requested)
  );
  if (glob) return { ok: true, model: byId(glob.id)!, by: "glob" };
  if (set.models.length === 1 && set.aliases.length === 0) {
    return { ok: true, model: set.models[0], by: "only" };
  }
  return { ok: false, requested, ids: set.models.map((m) => m.id) };
}

/** A not-found lookup's message, listing the ids there are. */
export function modelNotFoundMessage(lookup: { requested: string; ids: string[] }): string {
  return `The model \`${lookup.requested}\` does not exist; this server has ${
    lookup.ids.map((id) => `\`${id}\``).join(", ")
  }.`;
}

/** The serve config that loads `entry`: the command line's flags under the model's own. */
export function modelConfig(config: ServeConfig, entry: ModelEntry): ServeConfig {
  return {
    ...config,
    model: entry.model,
    models: entry.model === undefined ? [] : [entry.model],
    modelFile: entry.modelFile,
    ...entry.flags,
  };
}

/**
 * The id today's single-model resolution gives `--model`: a file's stem, a directory's name, or
 * the hub id (or the text as written, whose error `resolveModel` reports when it loads).
 */
async function modelIdOf(model: string): Promise<string> {
  const base = model.replace(/\/+$/, "").split("/").pop() || model;
  try {
    const st = await Deno.stat(model);
    if (st.isFile) return base.replace(/\.gguf$/i, "");
    if (st.isDirectory) return base;
  } catch {
    // Not here: a hub id, or a mistake `resolveModel` names when it loads.
  }
  return model;
}

/** Where a path leads, for telling a folder's model from the same one named explicitly. */
async function realOrSelf(path: string): Promise<string> {
  return await Deno.realPath(path).catch(() => path);
}

type Named = { entries: [ModelEntry, string][]; configAliases: AliasRule[] };

/** The explicit models (each `--model`, then the config's) with the config's aliases. */
async function namedModels(config: ServeConfig): Promise<Named> {
  // `--model-file` belongs to the one `--model`; with none, it stays `resolveModel`'s error.
  const elsewhere = config.modelsDir !== undefined || config.modelsConfig !== undefined;
  const n = config.models.length;
  if (config.modelFile !== undefined && (n > 1 || (n === 0 && elsewhere))) {
    throw new Error(
      config.models.length > 1
        ? `--model-file picks the file of one --model, and ${config.models.length} are given; ` +
          'name each model\'s file in --models-config ("model-file")'
        : '--model-file needs --model; in --models-config a model names its file ("model-file")',
    );
  }
  const out: [ModelEntry, string][] = [];
  const configAliases: AliasRule[] = [];
  for (const model of config.models) {
    const id = await modelIdOf(model);
    const modelFile = config.modelFile;
    out.push([
      { id, model, modelFile, aliases: [], flags: {}, source: "model" },
      `--model ${model}`,
    ]);
  }
  if (config.modelsConfig) {
    for (const m of await readModelsConfig(config.modelsConfig)) {
      const entry: ModelEntry = {
        id: m.id,
        model: m.model,
        modelFile: m.modelFile,
        aliases: [],
        flags: m.flags,
        source: "models-config",
      };
      out.push([entry, `--models-config ${config.modelsConfig}`]);
      configAliases.push(...m.aliases.map((pattern) => ({ pattern, id: m.id })));
    }
  }
  return { entries: out, configAliases };
}

/** The folder's models that no explicit entry already names (the config renames a file). */
async function folderModels(dir: string, named: ModelEntry[]): Promise<[ModelEntry, string][]> {
  const taken = new Set<string>();
  for (const e of named) {
    if (e.model === undefined || parseHubId(e.model)) continue;
    taken.add(await realOrSelf(e.model));
    if (e.modelFile) taken.add(await realOrSelf(`${e.model}/${e.modelFile}`));
  }
  const out: [ModelEntry, string][] = [];
  for (const m of await scanModelsDir(dir)) {
    const file = m.modelFile ? await realOrSelf(`${m.model}/${m.modelFile}`) : undefined;
    if (taken.has(await realOrSelf(m.model)) || (file && taken.has(file))) continue;
    const entry: ModelEntry = { ...m, aliases: [], flags: {}, source: "models-dir" };
    out.push([entry, `--models-dir ${dir}`]);
  }
  return out;
}

function noModel(flag: string, id: string, ids: string[]): Error {
  return new Error(`${flag}: no model ${JSON.stringify(id)} (models: ${ids.join(", ")})`);
}

/** The rules in match order, each checked against the ids; attached to their models. */
function aliasRules(
  config: ServeConfig,
  configAliases: AliasRule[],
  models: ModelEntry[],
): AliasRule[] {
  const ids = models.map((m) => m.id);
  const rules: AliasRule[] = [];
  const exactTarget = new Map<string, string>();
  const given = [
    ...config.modelAlias.map((r) => ({ ...r, from: `--model-alias ${r.pattern}=${r.id}` })),
    ...configAliases.map((r) => ({
      ...r,
      from: `--models-config ${config.modelsConfig}: model ${JSON.stringify(r.id)}, "aliases"`,
    })),
  ];
  for (const { pattern, id, from } of given) {
    if (!ids.includes(id)) throw noModel(from, id, ids);
    if (!pattern.includes("*")) {
      if (ids.includes(pattern) && pattern !== id) {
        throw new Error(`${from}: ${JSON.stringify(pattern)} is already the id of a model`);
      }
      const before = exactTarget.get(pattern);
      if (before !== undefined && before !== id) {
        throw new Error(
          `${from}: ${JSON.stringify(pattern)} is already an alias of ${JSON.stringify(before)}`,
        );
      }
      exactTarget.set(pattern, id);
    }
    if (rules.some((r) => r.pattern === pattern && r.id === id)) continue;
    rules.push({ pattern, id });
    models.find((m) => m.id === id)!.aliases.push(pattern);
  }
  return rules;
}

/**
 * The server's models from its flags. With no `--model`, `--models-dir` or `--models-config` it is
 * the built-in demo model alone, as `serve` has always done.
 */
export async function buildModelSet(config: ServeConfig): Promise<ModelSet> {
  const named = await namedModels(config);
  const explicit = named.entries.map(([e]) => e);
  const listed = [
    ...named.entries,
    ...(config.modelsDir ? await folderModels(config.modelsDir, explicit) : []),
  ];
  const seen = new Map<string, string>();
  for (const [entry, from] of listed) {
    const before = seen.get(entry.id);
    if (before !== undefined) {
      throw new Error(
        `model id ${JSON.stringify(entry.id)} is given twice (by ${before} and by ${from}); ` +
          "name them apart in --models-config",
      );
    }
    seen.set(entry.id, from);
  }
  const models = listed.map(([e]) => e);
  if (models.length === 0) {
    models.push({
      id: DEMO_MODEL_ID,
      modelFile: config.modelFile,
      aliases: [],
      flags: {},
      source: "demo",
    });
  }
  const aliases = aliasRules(config, named.configAliases, models);
  const ids = models.map((m) => m.id);
  const defaultId = config.defaultModel ?? ids[0];
  if (!ids.includes(defaultId)) throw noModel("--default-model", defaultId, ids);
  for (const id of config.modelsPreload ?? []) {
    if (!ids.includes(id)) throw noModel("--models-preload", id, ids);
  }
  return { models, aliases, defaultId, preload: [...new Set(config.modelsPreload ?? [])] };
}

/** What `serve` runs while it serves one model per process: that model's config, or why not. */
export type OneModel =
  | { ok: true; config: ServeConfig; id?: string; set: ModelSet }
  | { ok: false; message: string };

/**
 * The one model `serve` loads, until several are served at once (issue 34, part 1 of 7): a set
 * of more than one, an alias, or a `--models-*` bound is refused with one line rather than
 * ignored. A plain `--model` (or none) keeps `config` as it is; a model from `--models-dir` or
 * `--models-config` comes with its config and the id it is served under.
 */
export async function oneModelToServe(config: ServeConfig): Promise<OneModel> {
  let set: ModelSet;
  try {
    set = await buildModelSet(config);
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
  const why = severalModelsWanted(set, config);
  if (why) {
    return { ok: false, message: `serving several models is not built yet (issue 34): ${why}` };
  }
  const only = set.models[0];
  if (only.source === "model" || only.source === "demo") return { ok: true, config, set };
  return { ok: true, config: modelConfig(config, only), id: only.id, set };
}

function severalModelsWanted(set: ModelSet, config: ServeConfig): string | undefined {
  if (set.models.length > 1) {
    return `${set.models.length} models (${set.models.map((m) => m.id).join(", ")}); ` +
      "serve one model per process for now";
  }
  const flags = [
    config.modelsMax !== undefined ? "--models-max" : "",
    config.modelsIdle !== undefined ? "--models-idle" : "",
    config.modelsPreload !== undefined ? "--models-preload" : "",
  ].filter((f) => f);
  if (flags.length) {
    return `${flags.join(", ")} ${flags.length > 1 ? "need" : "needs"} it; ` +
      `leave ${flags.length > 1 ? "them" : "it"} out with one model`;
  }
  if (set.aliases.length) {
    return `aliases (--model-alias, "aliases" in --models-config) need it; ` +
      `a single model answers only its own id (${set.models[0].id}) on the OpenAI routes`;
  }
  return undefined;
}
