/**
 * The calling thread's stack size, from glibc (`pthread_getattr_np`): the engine and model-load
 * threads report it so `/props` (and a test) can show they run on the stack Hearth asked for.
 *
 * @example
 * ```ts
 * import { threadStackBytes } from "./thread_stack.ts";
 * threadStackBytes(); // 8388608 on a process main thread, 67108864 on Hearth's engine thread
 * ```
 * @module
 */

let libc:
  | Deno.DynamicLibrary<{
    pthread_self: { parameters: []; result: "usize" };
    pthread_getattr_np: { parameters: ["usize", "buffer"]; result: "i32" };
    pthread_attr_getstacksize: { parameters: ["buffer", "buffer"]; result: "i32" };
    pthread_attr_destroy: { parameters: ["buffer"]; result: "i32" };
  }>
  | undefined;

/** Bytes of this thread's stack; 0 when glibc cannot say. */
export function threadStackBytes(): number {
  libc ??= Deno.dlopen("libc.so.6", {
    pthread_self: { parameters: [], result: "usize" },
    pthread_getattr_np: { parameters: ["usize", "buffer"], result: "i32" },
    pthread_attr_getstacksize: { parameters: ["buffer", "buffer"], result: "i32" },
    pthread_attr_destroy: { parameters: ["buffer"], result: "i32" },
  });
  const attr = new Uint8Array(64); // pthread_attr_t is 56 bytes on x86-64 glibc
  const size = new BigUint64Array(1);
  const s = libc.symbols;
  if (s.pthread_getattr_np(s.pthread_self(), attr) !== 0) return 0;
  s.pthread_attr_getstacksize(attr, new Uint8Array(size.buffer));
  s.pthread_attr_destroy(attr);
  return Number(size[0]);
}
