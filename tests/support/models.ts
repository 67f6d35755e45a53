/**
 * Test models shared by the suites: the tiny preset, written once per machine into a cache dir
 * (the same code path as the demo model), so parallel test files do not each write 33 MB.
 *
 * @example
 * ```ts
 * import { tinyModelPath } from "./models.ts";
 * const gguf = await tinyModelPath();
 * ```
 * @module
 */
import { ensureDemoModel } from "../../lib/models/demo.ts";
import { sourceCacheDir } from "./llama_source.ts";

export function testDataDir(): string {
  return `${sourceCacheDir()}/test-data`;
}

export function tinyModelPath(): Promise<string> {
  return ensureDemoModel(testDataDir());
}
