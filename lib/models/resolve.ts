/**
 * Turns `--model`/`--model-file`/`--isq`/`--dtype` into the one GGUF path to load.
 *
 * `--model` is tried, in order, as: absent (the built-in demo model), an existing file, an
 * existing directory, then a hub id `owner/repo`. Local paths win over hub ids so a directory
 * named like `owner/repo` in the working dir is never shadowed by a download. Every failure is
 * an Error with one line, which `main.ts` prints before exiting with status 2.
 *
 * @example
 * ```ts
 * import { resolveModel } from "./resolve.ts";
 * const m = await resolveModel({ model: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", dtype: "auto",
 *   dataDir: "/home/me/.cache/hearth" });
 * // ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/{commit}/
 * m.path; //   qwen2.5-0.5b-instruct-q4_k_m.gguf (Q4_K_M is preferred among the repo's GGUFs)
 * m.id; // "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
 * ```
 * @module
 */
import type { ServeConfig } from "../cli/flags.ts";
import { ensureDemoModel } from "./demo.ts";
import {
  downloadHubModel,
  type DownloadProgress,
  type Env,
  parseHubId,
  pickGguf,
  stderrProgress,
} from "./hub.ts";
import { applyIsq, weightTarget } from "./isq.ts";

/** The model id a server reports for the built-in demo model. */
export const DEMO_MODEL_ID = "hearth-demo";

export type ResolvedModel = {
  /** The GGUF to load (the converted copy under `--isq`/`--dtype`). */
  path: string;
  /** The model id clients use: `hearth-demo`, a file stem, a directory name, or `owner/repo`. */
  id: string;
  source: "demo" | "file" | "dir" | "hub";
};

export type ResolveConfig = Pick<ServeConfig, "model" | "modelFile" | "isq" | "dtype" | "dataDir">;

export type ResolveOptions = {
  /** Hub endpoint, token and cache variables; default `Deno.env.toObject()`. */
  env?: Env;
  /** Download progress; default a bar on a terminal stderr, else lines every 5 s or 10%. */
  onProgress?: (p: DownloadProgress) => void;
  /** Status lines (hub file chosen, cache use, conversion); default stderr. */
  log?: (line: string) => void;
  /** llama.cpp threads for `--isq`/`--dtype` conversion; default all cores. */
  threads?: number;
};

function baseName(path: string): string {
  return path.replace(/\/+$/, "").split("/").pop() ?? path;
}

async function statOrUndefined(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.stat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
      return undefined;
    }
    throw new Error(`cannot read --model ${path}: ${(e as Error).message}`);
  }
}

// A file without the .gguf extension is accepted when its magic says GGUF, since downloaded
// blobs are often stored under hash names.
async function hasGgufMagic(path: string): Promise<boolean> {
  const f = await Deno.open(path, { read: true });
  try {
    const buf = new Uint8Array(4);
    const n = await f.read(buf);
    return n === 4 && new TextDecoder().decode(buf) === "GGUF";
  } finally {
    f.close();
  }
}

async function ggufFilesIn(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if ((e.isFile || e.isSymlink) && e.name.toLowerCase().endsWith(".gguf")) out.push(e.name);
  }
  return out;
}

async function locate(config: ResolveConfig, options: ResolveOptions): Promise<ResolvedModel> {
  const model = config.model;
  if (model === undefined) {
    if (config.modelFile !== undefined) {
      throw new Error("--model-file needs --model (a hub id owner/repo or a directory)");
    }
    return { path: await ensureDemoModel(config.dataDir), id: DEMO_MODEL_ID, source: "demo" };
  }
  const st = await statOrUndefined(model);
  if (st?.isFile) {
    if (config.modelFile !== undefined) {
      throw new Error(`--model-file picks a file in a directory or hub repo; ${model} is a file`);
    }
    if (!/\.gguf$/i.test(model) && !(await hasGgufMagic(model))) {
      throw new Error(`--model ${model} is not a GGUF file`);
    }
    return { path: model, id: baseName(model).replace(/\.gguf$/i, ""), source: "file" };
  }
  if (st?.isDirectory) {
    const where = `directory ${model}`;
    let file: string;
    if (config.modelFile !== undefined) {
      file = config.modelFile;
      const inner = await statOrUndefined(`${model}/${file}`);
      if (!inner?.isFile) {
        const list = (await ggufFilesIn(model)).sort().join(", ") || "none";
        throw new Error(`${where} has no file ${file}; its .gguf files: ${list}`);
      }
    } else {
      file = pickGguf(await ggufFilesIn(model), undefined, where, options.log);
    }
    return { path: `${model.replace(/\/+$/, "")}/${file}`, id: baseName(model), source: "dir" };
  }
  if (st) throw new Error(`--model ${model} is neither a file nor a directory`);
  if (!parseHubId(model)) {
    throw new Error(`--model ${model}: no such file or directory, and not a hub id owner/repo`);
  }
  const path = await downloadHubModel({
    repo: model,
    modelFile: config.modelFile,
    dataDir: config.dataDir,
    env: options.env,
    onProgress: options.onProgress ?? stderrProgress,
    log: options.log,
  });
  return { path, id: model, source: "hub" };
}

/**
 * Finds (or downloads) the model that `config` names and applies `--isq`/`--dtype`. The demo
 * model's weights are random, so the caller should say that its output is noise.
 */
export async function resolveModel(
  config: ResolveConfig,
  options: ResolveOptions = {},
): Promise<ResolvedModel> {
  // Refuse a bad --isq/--dtype pair before a download that could take an hour.
  weightTarget(config.isq, config.dtype);
  const found = await locate(config, options);
  const path = await applyIsq(found.path, {
    isq: config.isq,
    dtype: config.dtype,
    dataDir: config.dataDir,
    threads: options.threads,
    log: options.log,
  });
  return { ...found, path };
}
