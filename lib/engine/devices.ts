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
import { findRpcLibrary } from "../../ffi/rpc_library.ts";
import { rpcBuildDir } from "../source/llama_source.ts";
import { probeRpcServer } from "./rpc_probe.ts";

/** Loads `libggml-rpc.so` unless the library directory's own set already brought it. */
export async function loadRpcBackend(llama: Llama): Promise<void> {
  if (hasBackend(llama, "RPC")) return;
  const lib = await findRpcLibrary([llama.dir, `${rpcBuildDir()}/bin`]);
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

/**
 * Whether the model sits on a GPU or an RPC server, where sampling in the decode graph saves
 * copying every logits row back to the host (or over the network). On a CPU-only host the
 * logits are already in host memory, and the graph's sampler nodes cost more than the CPU chain:
 * 1.5-7% a step at one sequence (`small` preset, 2 cores, same context, alternating runs).
 */
export function onAccelerator(devices: DeviceInfo[]): boolean {
  return devices.some((d) => d.type === "gpu" || d.type === "igpu" || d.backend === "RPC");
}

/** `CPU (AMD EPYC ...), RPC0 (127.0.0.1:50052)`. */
export function describeDevices(devices: DeviceInfo[]): string {
  return devices.map((d) => `${d.name} (${d.description})`).join(", ");
}

/** `--num-ranks`, `--local-num-ranks`, `--rank-offset`. */
export type RankOptions = { numRanks: number; localNumRanks?: number; rankOffset: number };

/**
 * Registry indices of the devices to split the model over, or undefined to let llama.cpp use
 * every device it finds (the flags at their defaults). `numRanks` counts every device the model
 * is split over: `localNumRanks` of this host's GPUs from GPU `rankOffset` on, and the rest
 * from the RPC servers of `--master-addr`. Throws one line when the host cannot honour them.
 */
export function pickRankDevices(devices: DeviceInfo[], o: RankOptions): number[] | undefined {
  if (o.numRanks === 1 && o.localNumRanks === undefined && o.rankOffset === 0) return undefined;
  const gpus = devices.filter((d) => d.type === "gpu" && d.backend !== "RPC");
  const rpc = devices.filter((d) => d.backend === "RPC");
  const local = o.localNumRanks ?? Math.max(0, o.numRanks - rpc.length);
  if (local > o.numRanks) {
    throw new Error(`--local-num-ranks ${local} is more than --num-ranks ${o.numRanks}`);
  }
  if (o.rankOffset + local > gpus.length) {
    const have = gpus.length === 0
      ? "this host has no GPU llama.cpp can use"
      : `this host has ${gpus.length} (${gpus.map((g) => g.name).join(", ")})`;
    throw new Error(
      `--num-ranks ${o.numRanks}: ${local} local GPU${local === 1 ? "" : "s"} from GPU ` +
        `${o.rankOffset} are needed but ${have}`,
    );
  }
  const remote = o.numRanks - local;
  if (remote > rpc.length) {
    throw new Error(
      `--num-ranks ${o.numRanks} with ${local} local GPU${local === 1 ? "" : "s"} needs ` +
        `${remote} device${remote === 1 ? "" : "s"} from --master-addr, which added ${rpc.length}`,
    );
  }
  // RPC devices first, as llama.cpp orders them itself (fewer transfers over the network).
  return [...rpc.slice(0, remote), ...gpus.slice(o.rankOffset, o.rankOffset + local)]
    .map((d) => d.index);
}
