/**
 * Which devices a model runs on: the RPC backend loaded on demand, the RPC servers named by
 * `--master-addr` added to ggml's registry (llama.cpp then places layers on them, RPC devices
 * first, as `llama-server --rpc` does), and a one-line summary for the start-up log.
 *
 * @example
 * ```ts
 * import { attachRpcServers, describeDevices } from "./devices.ts";
 * await attachRpcServers(llama, ["127.0.0.1:50052", "127.0.0.1:50053"]);
 * console.error(describeDevices(listDevices(llama))); // "CPU (...), RPC0 (127.0.0.1:50052), ..."
 * ```
 * @module
 */
import {
  type DeviceInfo,
  hasBackend,
  type Llama,
  loadBackend,
  rpcAddServer,
} from "../../ffi/mod.ts";
import { findRpcLibrary } from "../build/rpc.ts";
import { probeRpcServer } from "./rpc_probe.ts";

/** Loads `libggml-rpc.so` unless the library directory's own set already brought it. */
export async function loadRpcBackend(llama: Llama): Promise<void> {
  if (hasBackend(llama, "RPC")) return;
  const lib = await findRpcLibrary(llama.dir);
  if (!lib) {
    throw new Error(
      "the RPC backend is not built: run `deno task build:rpc` (it builds libggml-rpc.so from " +
        "the llama.cpp source of this release, about 15 seconds)",
    );
  }
  loadBackend(llama, lib);
}

/** Adds every server's devices; throws naming the first server that does not answer. */
export async function attachRpcServers(llama: Llama, endpoints: string[]): Promise<number> {
  if (endpoints.length === 0) return 0;
  await loadRpcBackend(llama);
  // All probed first: a server that is down is named before any other is connected.
  for (const e of endpoints) await probeRpcServer(e);
  let added = 0;
  for (const e of endpoints) added += rpcAddServer(llama, e);
  return added;
}

/** `CPU (AMD EPYC ...), RPC0 (127.0.0.1:50052)`. */
export function describeDevices(devices: DeviceInfo[]): string {
  return devices.map((d) => `${d.name} (${d.description})`).join(", ");
}
