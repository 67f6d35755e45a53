/**
 * What the tool-call family tests run on: the real chat templates of llama.cpp's bundle, and the
 * tiny models that generate through them, each started once per test file and closed when it ends.
 *
 * @example
 * ```ts ignore
 * import { bundledTemplate, familyEngine } from "./family_models.ts";
 * const source = bundledTemplate("GLM-4.6.jinja");
 * const engine = await familyEngine("glm"); // markers as single tokens, as in GLM's vocab
 * ```
 * @module
 */
import { type EngineModel, loadEngineModel } from "../../lib/engine/model.ts";
import { startWorkerEngine, type WorkerEngine } from "../../lib/engine/worker_host.ts";
import type { ChatFormatName } from "../../lib/gguf/make_model_formats.ts";
import { llamaSourceDir } from "./llama_source.ts";
import { cachedTinyModel, tinyModelPath } from "./models.ts";

const TEMPLATES = `${await llamaSourceDir()}/models/templates`;

/** The text of a template of llama.cpp's bundle (`models/templates`). */
export function bundledTemplate(file: string): string {
  return Deno.readTextFileSync(`${TEMPLATES}/${file}`);
}

const started: WorkerEngine[] = [];
globalThis.addEventListener("unload", () => started.forEach((e) => e.close()));

const engines = new Map<string, Promise<WorkerEngine>>();

/** One engine per model and test file: the parses and the generations of a family share it. */
function engineOnce(key: string, path: () => Promise<string>): Promise<WorkerEngine> {
  let e = engines.get(key);
  if (!e) {
    e = path().then(async (p) => {
      const m = await loadEngineModel({ path: p, maxBatch: 4, maxSeqLen: 4096, threads: 1 });
      const engine = await startWorkerEngine(m);
      started.push(engine);
      return engine;
    });
    engines.set(key, e);
  }
  return e;
}

/**
 * The tiny model with the agent template of `format` and its markers single tokens, as in the
 * real vocab (`make-model --chat-format`): one cache entry per family, shared by every file.
 */
export function familyEngine(format: ChatFormatName): Promise<WorkerEngine> {
  return engineOnce(
    `agents-${format}`,
    () =>
      cachedTinyModel(`agents-${format}`, [
        "make_model_formats.ts",
        "agent_templates.ts",
        "presets.ts",
      ], {
        chatFormat: format,
      }),
  );
}

/** The plain tiny model: a family's markers reach it as ordinary text, spelled in pieces. */
export function tinyWorkerEngine(): Promise<WorkerEngine> {
  return engineOnce("tiny", tinyModelPath);
}

/**
 * Runs `fn` on `make-model --chat-format format` (the family's own template, its markers single
 * tokens), started for it alone and closed after.
 */
export async function withFormatModel<T>(
  format: ChatFormatName,
  fn: (m: EngineModel, engine: WorkerEngine) => Promise<T>,
): Promise<T> {
  const path = await cachedTinyModel(
    format,
    ["make_model_formats.ts", "family_templates.ts", "presets.ts"],
    { chatFormat: format },
  );
  const m = await loadEngineModel({ path, maxBatch: 1, maxSeqLen: 2048, threads: 1 });
  const engine = await startWorkerEngine(m);
  try {
    return await fn(m, engine);
  } finally {
    engine.close();
  }
}
