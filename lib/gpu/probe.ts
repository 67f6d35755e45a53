/**
 * The driver facts the build choice needs, asked of the driver in a child process
 * (`hearth gpu-probe`, which calls `ffi/cuda_driver.ts`): a broken driver or a wedged GPU can
 * abort or hang whoever calls `cuInit`, and that must not be the server. The child inherits
 * `CUDA_VISIBLE_DEVICES`, so its device list is CUDA's own numbering. When the child cannot
 * answer, `nvidia-smi --query-gpu=compute_cap` supplies compute capabilities (no CUDA version).
 *
 * @example
 * ```ts
 * import { probeDriver } from "./probe.ts";
 * const d = await probeDriver();
 * d.cuda; // "13.0", or undefined when the driver could not be asked
 * d.devices; // [{ index: 0, name: "NVIDIA H100 80GB HBM3", compute: "9.0" }]
 * ```
 * @module
 */
import type { CudaDevice } from "../../ffi/cuda_driver.ts";
import { selfCommand } from "../process/self.ts";

export type DriverFacts = {
  cuda?: string;
  devices: CudaDevice[];
  /** Where the facts came from, and what failed on the way. */
  source: "driver" | "nvidia-smi" | "none";
  error?: string;
};

const TIMEOUT_MS = 30_000;

/**
 * Asks `libcuda.so.1` in a child, then nvidia-smi; never throws. `timeoutMs` bounds the child
 * (a wedged driver hangs `cuInit`); tests shorten it.
 */
export async function probeDriver(o: { timeoutMs?: number } = {}): Promise<DriverFacts> {
  let error: string | undefined;
  try {
    const [cmd, ...args] = selfCommand(["gpu-probe"]);
    const out = await new Deno.Command(cmd, {
      args,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(o.timeoutMs ?? TIMEOUT_MS),
    }).output();
    const text = new TextDecoder().decode(out.stdout).trim();
    if (out.success && text) {
      const facts = JSON.parse(text.split("\n").pop()!) as {
        cuda?: string;
        devices?: CudaDevice[];
        error?: string;
      };
      if (facts.cuda && (facts.devices?.length ?? 0) > 0) {
        return { cuda: facts.cuda, devices: facts.devices!, source: "driver" };
      }
      error = facts.error ?? "the driver lists no device";
      if (facts.cuda) return { ...(await smiFacts(error)), cuda: facts.cuda };
    } else {
      error = out.signal
        ? `the driver probe died with ${out.signal}`
        : `the driver probe failed: ${new TextDecoder().decode(out.stderr).trim().slice(-300)}`;
    }
  } catch (e) {
    error = `the driver probe failed: ${(e as Error).message}`;
  }
  return await smiFacts(error);
}

async function smiFacts(error: string | undefined): Promise<DriverFacts> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
      signal: AbortSignal.timeout(5000),
    }).output();
    if (out.success) {
      const devices = parseSmiCompute(new TextDecoder().decode(out.stdout));
      if (devices.length > 0) return { devices, source: "nvidia-smi", error };
    }
  } catch {
    // no nvidia-smi
  }
  return { devices: [], source: "none", error };
}

/** `0, NVIDIA H100 80GB HBM3, 9.0` lines. */
export function parseSmiCompute(csv: string): CudaDevice[] {
  const out: CudaDevice[] = [];
  for (const line of csv.split("\n")) {
    const [index, name, compute] = line.split(",").map((s) => s.trim());
    if (!/^\d+$/.test(index ?? "") || !/^\d+\.\d+$/.test(compute ?? "")) continue;
    out.push({ index: Number(index), name, compute });
  }
  return out;
}
