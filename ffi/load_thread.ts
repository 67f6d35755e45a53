/**
 * The thread `llama_model_load_from_file` runs on: a `node:worker_threads` worker with a 64 MiB
 * stack, created for the one call and gone after it. Deno runs `nonblocking` FFI calls on its
 * blocking pool, whose threads have 2 MiB stacks; llama-server and llama.cpp's own tools load on
 * a process main thread (8 MiB), and a CUDA load (driver, runtime and cuBLAS set-up on the
 * calling thread) is the stack-hungry path that crashed Hearth on an H100 while the same build
 * ran in llama.cpp's tools. A thread whose stack Hearth chooses removes that difference, and the
 * event loop stays free (`/health` answers 503 while loading). The model pointer is
 * process-global, so it outlives the worker.
 *
 * This file is both sides: `loadOnBigStack` runs on the caller's thread, and the worker runs this
 * module with `workerData` set.
 *
 * @example
 * ```ts
 * import { loadOnBigStack } from "./load_thread.ts";
 * const model = await loadOnBigStack("/path/to/llama/libs", "model.gguf", paramsBytes);
 * ```
 * @module
 */
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { threadStackBytes } from "./thread_stack.ts";

/** The loader thread's stack: eight times a main thread's, 32 times the blocking pool's. */
export const LOAD_STACK_MB = 64;

type Job = { dir: string; llama: string; path: string; params: Uint8Array };

let lastStack = 0;
/** The stack size of the thread the last model was loaded on (for `/props`). */
export function lastLoadStackBytes(): number {
  return lastStack;
}

/** Loads `path` with `params` (a `llama_model_params` struct) on a fresh 64 MiB-stack thread. */
export function loadOnBigStack(
  dir: string,
  llamaFile: string,
  path: string,
  params: Uint8Array,
  paramsFfi: { struct: Deno.NativeType[] },
): Promise<Deno.PointerValue> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), {
      workerData: { dir, llama: llamaFile, path, params, ffi: paramsFfi },
      resourceLimits: { stackSizeMb: LOAD_STACK_MB },
    });
    let settled = false;
    worker.once("message", (m: { model: bigint; stack: number } | { error: string }) => {
      settled = true;
      if ("error" in m) reject(new Error(m.error));
      else {
        lastStack = m.stack;
        resolve(m.model === 0n ? null : Deno.UnsafePointer.create(m.model));
      }
      void worker.terminate();
    });
    worker.once("error", (e) => {
      settled = true;
      reject(e);
    });
    worker.once("exit", (code) => {
      if (!settled) reject(new Error(`the model loader thread exited (${code}) without an answer`));
    });
  });
}

if (!isMainThread && workerData && (workerData as Job).path && parentPort) {
  const job = workerData as Job & { ffi: { struct: Deno.NativeType[] } };
  try {
    // The libraries are already loaded by the caller: this binds the same copy on this thread.
    const lib = Deno.dlopen(`${job.dir}/${job.llama}`, {
      llama_model_load_from_file: { parameters: ["buffer", job.ffi], result: "pointer" },
    });
    const path = new TextEncoder().encode(`${job.path}\0`);
    const model = lib.symbols.llama_model_load_from_file(path, new Uint8Array(job.params));
    parentPort.postMessage({ model: Deno.UnsafePointer.value(model), stack: threadStackBytes() });
  } catch (e) {
    parentPort.postMessage({ error: (e as Error).message });
  }
}
