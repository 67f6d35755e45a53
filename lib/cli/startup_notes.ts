/**
 * What `serve` says at start-up about settings that would otherwise pass silently: listening on a
 * non-loopback address with no `--api-key` (the inference routes are then open to the network),
 * and the seed's environment variables that have no llama.cpp equivalent. Pure: the caller prints.
 *
 * @example
 * ```ts
 * import { startupNotes } from "./startup_notes.ts";
 * startupNotes({ host: "0.0.0.0" }, { COMM_DEBUG: "1" });
 * // ["listening on 0.0.0.0 with no --api-key: ...", "COMM_DEBUG is set but has no effect ..."]
 * ```
 * @module
 */
import { isLoopback } from "./flags.ts";

/** The seed's variables and why llama.cpp has nothing to map them to. */
export const SEED_ENV_WITHOUT_EFFECT: Readonly<Record<string, string>> = {
  ENGINE_NVFP4_FORCE_LUT:
    "it forced the seed engine's NVFP4 lookup-table kernels; llama.cpp's CUDA backend chooses its FP4 kernels itself and has no such switch",
  SM90_LOWER_PRECISION_GDN_PREFILL:
    "it lowered the precision of the seed engine's gated-delta-net prefill on sm_90; llama.cpp has no such option",
  COMM_SOCKET_IFNAME:
    "it picked the seed's inter-node network interface; Hearth spans machines with llama.cpp's RPC backend, which connects to the --master-addr hosts by address",
  COMM_IB_DISABLE:
    "it turned off the seed's InfiniBand transport; llama.cpp's RPC backend uses TCP only",
  COMM_DEBUG:
    "it enabled the seed's communication-layer debug output; set HEARTH_LLAMA_LOG=1 for llama.cpp's own log (NCCL_* variables are passed through)",
};

export function startupNotes(
  config: { host: string; apiKey?: string },
  env: Record<string, string | undefined>,
): string[] {
  const notes: string[] = [];
  if (!config.apiKey && !isLoopback(config.host)) {
    notes.push(
      `listening on ${config.host} with no --api-key: the inference routes are open to anyone ` +
        "who can reach this port (pass --api-key KEY, or --host 127.0.0.1 to stay local)",
    );
  }
  for (const [name, why] of Object.entries(SEED_ENV_WITHOUT_EFFECT)) {
    if (env[name] !== undefined) {
      notes.push(`${name} is set but has no effect with llama.cpp: ${why}`);
    }
  }
  return notes;
}
