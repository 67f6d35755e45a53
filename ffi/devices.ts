/**
 * ggml's device registry: the devices a model can be placed on (CPU, GPUs, RPC servers), loading
 * a backend module built apart from the prebuilt libraries (`libggml-rpc.so`), adding RPC
 * servers' devices, and serving this host's devices to other hosts. Thin wrappers: which devices
 * to use is decided in `lib/engine/devices.ts`.
 *
 * @example
 * ```ts
 * import { listDevices, loadBackend, rpcAddServer } from "./devices.ts";
 * loadBackend(llama, "/path/libggml-rpc.so");
 * rpcAddServer(llama, "127.0.0.1:50052"); // 1 device added
 * listDevices(llama).map((d) => d.name); // ["CPU", "RPC0"]
 * ```
 * @module
 */
import { cString, type Llama } from "./library.ts";

/** `enum ggml_backend_dev_type`. */
export const DEVICE_TYPES = ["cpu", "gpu", "igpu", "accel", "meta"] as const;
export type DeviceType = typeof DEVICE_TYPES[number] | "unknown";

export type DeviceInfo = {
  /** Index in ggml's registry (`ggml_backend_dev_get`). */
  index: number;
  name: string;
  description: string;
  type: DeviceType;
  /** The backend that owns it (`CPU`, `CUDA`, `RPC`). */
  backend: string;
  memoryFree: number;
  memoryTotal: number;
};

const text = (p: Deno.PointerValue): string => p ? Deno.UnsafePointerView.getCString(p) : "";

/** Every registered device, in registry order. */
export function listDevices(llama: Llama): DeviceInfo[] {
  const g = llama.ggml;
  const out: DeviceInfo[] = [];
  const n = Number(g.ggml_backend_dev_count());
  for (let i = 0; i < n; i++) {
    const dev = g.ggml_backend_dev_get(BigInt(i));
    if (!dev) continue;
    const free = new BigUint64Array(1);
    const total = new BigUint64Array(1);
    g.ggml_backend_dev_memory(dev, new Uint8Array(free.buffer), new Uint8Array(total.buffer));
    out.push({
      index: i,
      name: text(g.ggml_backend_dev_name(dev)),
      description: text(g.ggml_backend_dev_description(dev)),
      type: DEVICE_TYPES[g.ggml_backend_dev_type(dev)] ?? "unknown",
      backend: text(g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev))),
      memoryFree: Number(free[0]),
      memoryTotal: Number(total[0]),
    });
  }
  return out;
}

/** The device handle at a registry index (for `llama_model_params.devices`). */
export function devicePointer(llama: Llama, index: number): Deno.PointerObject {
  const dev = llama.ggml.ggml_backend_dev_get(BigInt(index));
  if (!dev) throw new Error(`ggml has no device ${index}`);
  return dev;
}

/** Whether a backend of that name (`RPC`, `CUDA`) is registered. */
export function hasBackend(llama: Llama, name: string): boolean {
  return llama.ggml.ggml_backend_reg_by_name(cString(name)) !== null;
}

/** Loads and registers a backend module; throws with llama.cpp's reason when it will not load. */
export function loadBackend(llama: Llama, path: string): void {
  llama.recentLog.length = 0;
  const reg = llama.ggml.ggml_backend_load(cString(path));
  if (!reg) {
    const why = llama.recentLog.slice(-2).join("; ");
    throw new Error(`ggml could not load the backend ${path}${why ? `: ${why}` : ""}`);
  }
}

/** A function the RPC backend exports through its registry. */
function rpcProc(llama: Llama, name: string): Deno.PointerObject {
  const g = llama.ggml;
  const reg = g.ggml_backend_reg_by_name(cString("RPC"));
  if (!reg) throw new Error("the RPC backend is not loaded");
  const fn = g.ggml_backend_reg_get_proc_address(reg, cString(name));
  if (!fn) throw new Error(`the RPC backend does not export ${name}`);
  return fn;
}

/**
 * Connects to an RPC server (`host:port`) and registers its devices; returns how many. Throws
 * when the server cannot be reached or speaks another protocol version (it then has 0 devices).
 */
export function rpcAddServer(llama: Llama, endpoint: string): number {
  const def = { parameters: ["buffer"], result: "pointer" } as const;
  const add = new Deno.UnsafeFnPointer(
    rpcProc(llama, "ggml_backend_rpc_add_server") as Deno.PointerObject<typeof def>,
    def,
  );
  const reg = add.call(cString(endpoint));
  if (!reg) {
    throw new Error(
      `RPC server ${endpoint} did not answer with any device (not running, unreachable, ` +
        "or another llama.cpp RPC protocol version)",
    );
  }
  const before = Number(llama.ggml.ggml_backend_dev_count());
  llama.ggml.ggml_backend_register(reg);
  return Number(llama.ggml.ggml_backend_dev_count()) - before;
}

/**
 * Serves `devices` (registry indices) to RPC clients on `endpoint` until the process ends. It
 * runs on a thread of its own, so the event loop stays free for signals; the promise settles
 * only when ggml gives up (it could not listen, or a backend failed to start).
 */
export async function rpcStartServer(
  llama: Llama,
  o: { endpoint: string; cacheDir?: string; threads: number; devices: number[] },
): Promise<void> {
  const def = {
    parameters: ["buffer", "buffer", "usize", "usize", "buffer"],
    result: "void",
    nonblocking: true,
  } as const;
  const start = new Deno.UnsafeFnPointer(
    rpcProc(llama, "ggml_backend_rpc_start_server") as Deno.PointerObject<typeof def>,
    def,
  );
  const list = new BigUint64Array(o.devices.length);
  o.devices.forEach((d, i) => list[i] = BigInt(Deno.UnsafePointer.value(devicePointer(llama, d))));
  const cache = o.cacheDir === undefined ? null : cString(o.cacheDir);
  await start.call(
    cString(o.endpoint),
    cache,
    BigInt(o.threads),
    BigInt(o.devices.length),
    new Uint8Array(list.buffer),
  );
}

/**
 * A NULL-terminated `ggml_backend_dev_t *` for `llama_model_params.devices`; `buffer` must stay
 * referenced until the model is loaded.
 */
export function deviceArray(
  llama: Llama,
  indices: number[],
): { address: bigint; buffer: BigUint64Array } {
  const buffer = new BigUint64Array(indices.length + 1);
  indices.forEach((d, i) => buffer[i] = BigInt(Deno.UnsafePointer.value(devicePointer(llama, d))));
  return { address: BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(buffer))), buffer };
}
