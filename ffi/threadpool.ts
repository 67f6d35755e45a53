/**
 * ggml's CPU threadpool, created once and attached to a context. Without one, ggml builds a
 * disposable pool for every graph it computes: its worker threads are started and joined on
 * every `llama_decode`, which on a 2-core host costs a step more than the work itself at one
 * sequence. `llama-server` attaches a pool the same way (`common_threadpools::init`).
 *
 * `ggml_threadpool_new` lives in the CPU backend (a library chosen at run time for the host's
 * instruction set), so it is reached through the backend registry, as llama.cpp's common code does.
 *
 * @example
 * ```ts
 * import { attachThreadpool, createThreadpool } from "./threadpool.ts";
 * const pool = createThreadpool(llama, { threads: 2, poll: 50 });
 * if (pool) attachThreadpool(llama, ctx, pool);
 * // ... decode, then free the context(s) first ...
 * pool?.free();
 * ```
 * @module
 */
import { cString, type Llama } from "./library.ts";
import type { ContextPtr } from "./llama.ts";

/** `sizeof(struct ggml_threadpool_params)`: cpumask[512], n_threads, prio, poll, 2 bools. */
const PARAMS_SIZE = 528;
const OFF_THREADS = 512;
const OFF_POLL = 520;
const OFF_PAUSED = 525;
const GGML_BACKEND_DEVICE_TYPE_CPU = 0;

export type ThreadpoolOptions = {
  threads: number;
  /** 0: workers sleep between graphs at once; 100: they spin longest (ggml's default 50). */
  poll?: number;
};

/** A pool may serve several contexts, one graph at a time; free it after them. */
export type Threadpool = { pointer: Deno.PointerObject; free(): void };

/** Creates a pool; undefined when the build has no CPU backend to make one. */
export function createThreadpool(llama: Llama, o: ThreadpoolOptions): Threadpool | undefined {
  const g = llama.ggml;
  const dev = g.ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) return undefined;
  const reg = g.ggml_backend_dev_backend_reg(dev);
  if (!reg) return undefined;
  const newFn = g.ggml_backend_reg_get_proc_address(reg, cString("ggml_threadpool_new"));
  const freeFn = g.ggml_backend_reg_get_proc_address(reg, cString("ggml_threadpool_free"));
  if (!newFn || !freeFn) return undefined;
  const params = new Uint8Array(PARAMS_SIZE);
  g.ggml_threadpool_params_init(params, o.threads);
  const view = new DataView(params.buffer);
  if (view.getInt32(OFF_THREADS, true) !== o.threads) {
    throw new Error("ggml_threadpool_params does not have the layout this build expects");
  }
  view.setUint32(OFF_POLL, o.poll ?? 50, true);
  view.setUint8(OFF_PAUSED, 0);
  const newDef = { parameters: ["buffer"], result: "pointer" } as const;
  const freeDef = { parameters: ["pointer"], result: "void" } as const;
  const create = new Deno.UnsafeFnPointer(newFn as Deno.PointerObject<typeof newDef>, newDef);
  const destroy = new Deno.UnsafeFnPointer(freeFn as Deno.PointerObject<typeof freeDef>, freeDef);
  const pool = create.call(params);
  if (!pool) return undefined;
  let freed = false;
  return {
    pointer: pool,
    free() {
      if (freed) return;
      freed = true;
      destroy.call(pool);
    },
  };
}

/** Makes `ctx` compute on `pool` (for both one-token and batch graphs). */
export function attachThreadpool(llama: Llama, ctx: ContextPtr, pool: Threadpool): void {
  llama.sym.llama_attach_threadpool(ctx, pool.pointer, null);
}
