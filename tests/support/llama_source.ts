/**
 * Test-side name for the llama.cpp source fetcher, which lives in `lib/build/` because
 * `deno task build:rpc` and `build:cuda` build from the same bundle.
 *
 * @example
 * ```ts
 * import { llamaSourceDir } from "./llama_source.ts";
 * const src = await llamaSourceDir();
 * ```
 * @module
 */
export { llamaSourceDir, NODE_LLAMA_CPP, sourceCacheDir } from "../../lib/source/llama_source.ts";
