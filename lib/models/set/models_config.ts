/**
 * `--models-config FILE`: models by id, each with what `--model`/`--model-file` would name, its
 * aliases, and its own serve flags by their long names. Each per-model value is checked by the
 * very schema `serve`'s flag has (`lib/cli/flags.ts` `FLAGS`), so a value the command line
 * refuses is refused here too; an unknown key or a bad value is a one-line Error naming the model
 * and the key.
 *
 * @example
 * ```ts ignore
 * // models.json:
 * // {"models": {
 * //   "qwen3-0.6b": {"model": "Qwen/Qwen3-0.6B-GGUF", "aliases": ["claude-haiku-*"],
 * //                  "max-seq-len": 8192},
 * //   "coder": {"model": "./coder.gguf", "kvcache-dtype": "q8_0", "graph-batch": [1, 2, 4]}}}
 * import { readModelsConfig } from "./models_config.ts";
 * const models = await readModelsConfig("models.json");
 * models[0].flags.maxSeqLen; // 8192
 * ```
 * @module
 */
import { FLAGS, type ServeConfig } from "../../cli/flags.ts";

/** The serve flags a model of the set may set for itself, by long name. */
export const PER_MODEL_FLAGS = [
  "max-seq-len",
  "max-batch",
  "kvcache-dtype",
  "chat-template",
  "isq",
  "dtype",
  "mtp",
  "graph-batch",
] as const;

/** The serve settings each model may have of its own (the command line's are the default). */
export type ModelFlags = Pick<
  ServeConfig,
  | "maxSeqLen"
  | "maxBatch"
  | "kvcacheDtype"
  | "chatTemplate"
  | "isq"
  | "dtype"
  | "mtp"
  | "graphBatch"
>;

/** One model of the file. */
export type ConfigModel = {
  id: string;
  model: string;
  modelFile?: string;
  aliases: string[];
  flags: Partial<ModelFlags>;
};

const KNOWN_KEYS = ["model", "model-file", "aliases", ...PER_MODEL_FLAGS];

type Flag = (typeof FLAGS)[number];

/** The `FLAGS` entry of `--{name}`: its schema is the one a per-model value must pass. */
function flagOf(name: string): Flag {
  const flag = FLAGS.find((f) => f.names.includes(`--${name}`));
  if (!flag?.schema) throw new Error(`no serve flag --${name} with a value`);
  return flag;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * The value as the command line would spell it: JSON numbers as digits and a list of numbers
 * (`graph-batch`) comma-joined; undefined for anything else.
 */
function asFlagText(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" && Number.isFinite(v)) return String(v);
  if (Array.isArray(v) && v.every((x) => typeof x === "number" && Number.isFinite(x))) {
    return v.join(",");
  }
  return undefined;
}

function nonEmptyString(v: unknown): v is string {
  return typeof v === "string" && v !== "";
}

/**
 * Checks a parsed models file; `where` (`--models-config FILE`) starts every message. Paths are
 * kept as written ({@linkcode readModelsConfig} places relative ones).
 */
export function parseModelsConfig(doc: unknown, where: string): ConfigModel[] {
  if (!isRecord(doc) || !isRecord(doc.models)) {
    throw new Error(`${where}: needs {"models": {"ID": {"model": ...}, ...}}`);
  }
  const extra = Object.keys(doc).filter((k) => k !== "models");
  if (extra.length) {
    throw new Error(`${where}: unknown key ${JSON.stringify(extra[0])} (the file holds "models")`);
  }
  const out: ConfigModel[] = [];
  for (const [id, body] of Object.entries(doc.models)) {
    const at = `${where}: model ${JSON.stringify(id)}`;
    if (id.trim() === "") throw new Error(`${where}: a model id must not be empty`);
    if (!isRecord(body)) throw new Error(`${at}: must be an object {"model": ...}`);
    const unknown = Object.keys(body).find((k) => !KNOWN_KEYS.includes(k));
    if (unknown !== undefined) {
      throw new Error(
        `${at}: unknown key ${JSON.stringify(unknown)} (known: ${KNOWN_KEYS.join(", ")})`,
      );
    }
    if (!nonEmptyString(body.model)) {
      throw new Error(`${at}: "model" must be a hub id owner/repo, a directory or a .gguf path`);
    }
    if (body["model-file"] !== undefined && !nonEmptyString(body["model-file"])) {
      throw new Error(`${at}: "model-file" must be a GGUF file name`);
    }
    const aliases = body.aliases ?? [];
    if (!Array.isArray(aliases) || !aliases.every(nonEmptyString)) {
      throw new Error(`${at}: "aliases" must be a list of model names (* globs)`);
    }
    out.push({
      id,
      model: body.model,
      modelFile: body["model-file"] as string | undefined,
      aliases: [...new Set(aliases)],
      flags: modelFlags(body, at),
    });
  }
  if (out.length === 0) throw new Error(`${where}: "models" names no model`);
  return out;
}

function modelFlags(body: Record<string, unknown>, at: string): Partial<ModelFlags> {
  const flags: Record<string, unknown> = {};
  for (const name of PER_MODEL_FLAGS) {
    const value = body[name];
    if (value === undefined) continue;
    const flag = flagOf(name);
    const text = asFlagText(value);
    const parsed = text === undefined ? undefined : flag.schema!.safeParse(text);
    if (!parsed?.success) {
      const issue = parsed?.error.issues[0];
      const why = !issue
        ? "must be a string or a number"
        : issue.code === "invalid_value"
        ? `must be one of ${flag.meta}`
        : issue.message;
      throw new Error(`${at}: ${JSON.stringify(name)} ${JSON.stringify(value)}: ${why}`);
    }
    flags[flag.key] = parsed.data;
  }
  return flags as Partial<ModelFlags>;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads and checks `path`. A relative `model` or `chat-template` that names something beside the
 * file is read from there (a models file travels with its models); otherwise it is kept as
 * written, as `--model` takes it (relative to the working directory, or a hub id).
 */
export async function readModelsConfig(path: string): Promise<ConfigModel[]> {
  const where = `--models-config ${path}`;
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`${where}: not valid JSON: ${(e as Error).message}`);
  }
  const models = parseModelsConfig(doc, where);
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) || "/" : ".";
  const beside = async (p: string) =>
    !p.startsWith("/") && dir !== "." && await exists(`${dir}/${p}`) ? `${dir}/${p}` : p;
  for (const m of models) {
    m.model = await beside(m.model);
    if (m.flags.chatTemplate) m.flags.chatTemplate = await beside(m.flags.chatTemplate);
  }
  return models;
}
