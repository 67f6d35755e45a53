/**
 * Runs once before the suite (`deno task test`): fetches the llama.cpp source bundle and writes
 * the tiny test model, so parallel test files find both ready instead of racing to make them.
 *
 * @example
 * ```sh
 * deno run -A tests/support/setup.ts
 * ```
 * @module
 */
import { llamaSourceDir } from "./llama_source.ts";
import { tinyModelPath } from "./models.ts";

if (import.meta.main) {
  const src = await llamaSourceDir();
  const model = await tinyModelPath();
  console.error(`test setup: llama.cpp source at ${src}; tiny model at ${model}`);
}
