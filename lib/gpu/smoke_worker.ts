/**
 * The thread the smoke decode runs on: a web Worker, like the engine's (`lib/engine/worker_thread.ts`), so a
 * GPU build that needs more stack than the engine thread has fails here, in a child process,
 * rather than under a user's request. Binds the libraries the child already opened.
 *
 * @example
 * ```ts
 * declare const llama: import("../../ffi/mod.ts").Llama;
 * const w = new Worker(new URL("./smoke_worker.ts", import.meta.url), { type: "module" });
 * w.postMessage({ dir: llama.dir, model: "/data/smoke-1layer-v1.gguf" });
 * ```
 * @module
 */
import { attachLlama } from "../../ffi/library.ts";
import { smokeDecodeHere } from "./smoke.ts";

// deno-lint-ignore no-explicit-any
const post = (m: unknown) => (self as any).postMessage(m);

globalThis.addEventListener("message", async (e) => {
  const { dir, model } = (e as MessageEvent<{ dir: string; model: string }>).data;
  try {
    post({ output: await smokeDecodeHere(attachLlama(dir), model) });
  } catch (err) {
    post({ error: (err as Error).message });
  }
});
