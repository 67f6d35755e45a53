/**
 * Runs once before the suite (`deno task test`): fetches the llama.cpp source bundle, writes the
 * tiny test model and builds the RPC backend, so parallel test files find them ready instead of
 * racing to make them.
 *
 * @example
 * ```sh
 * deno run -A tests/support/setup.ts
 * ```
 * @module
 */
import { llamaSourceDir } from "./llama_source.ts";
import { tinyModelPath } from "./models.ts";
import { buildRpc } from "../../lib/build/rpc.ts";

if (import.meta.main) {
  const src = await llamaSourceDir();
  const model = await tinyModelPath();
  // ggml's RPC backend for the several-machines tests (about 15 s once, then cached).
  const rpc = await buildRpc();
  console.error(
    `test setup: llama.cpp source at ${src}; tiny model at ${model}; RPC at ${rpc.lib}`,
  );
}
