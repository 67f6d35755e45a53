/**
 * The rule that says whether a CUDA build's kernels can run on a GPU under a driver: machine code
 * (SASS) of the GPU's major arch at a minor no higher than the GPU's (sm_86 SASS runs on 8.6 and
 * 8.9, not on 9.0), or PTX for an arch no higher than the GPU's whose ISA the driver can compile
 * (PTX ISA 9.1 needs a CUDA 13.1 driver). SASS is preferred when both fit: PTX costs a JIT
 * compile at first load. Pure: the facts come from `fatbin.ts` and the host probe.
 *
 * @example
 * ```ts
 * import { judgeKernels } from "./verdict.ts";
 * const k = judgeKernels(
 *   { sass: ["8.6", "8.9", "12.0"], ptx: [{ arch: "9.0", isa: "9.1" }] },
 *   "9.0",
 *   "13.0",
 * );
 * k.usable; // false
 * k.reason; // "no SASS for sm_90 (has sm_86, sm_89, sm_120), and PTX compute_90 is ISA 9.1, which needs a CUDA 13.1 driver (this one is 13.0)"
 * ```
 * @module
 */
import { byCapability, type PtxEntry } from "./fatbin.ts";

export type KernelFacts = { sass: string[]; ptx: PtxEntry[] };

export type KernelVerdict = {
  usable: boolean;
  /** How it runs (`sm_86 SASS`, `compute_90 PTX (ISA 9.1)`), or why it cannot. */
  reason: string;
};

/**
 * PTX ISA version -> the CUDA release that introduced it (NVIDIA's PTX ISA release notes). A
 * driver compiles the ISA of its own CUDA version and older.
 */
const ISA_CUDA: Record<string, string> = {
  "6.0": "9.0",
  "6.1": "9.1",
  "6.2": "9.2",
  "6.3": "10.0",
  "6.4": "10.1",
  "6.5": "10.2",
  "7.0": "11.0",
  "7.1": "11.1",
  "7.2": "11.2",
  "7.3": "11.3",
  "7.4": "11.4",
  "7.5": "11.5",
  "7.6": "11.6",
  "7.7": "11.7",
  "7.8": "11.8",
  "8.0": "12.0",
  "8.1": "12.1",
  "8.2": "12.2",
  "8.3": "12.3",
  "8.4": "12.4",
  "8.5": "12.5",
  "8.6": "12.7",
  "8.7": "12.8",
  "8.8": "12.9",
  "9.0": "13.0",
  "9.1": "13.1",
};

/**
 * The driver CUDA version a PTX ISA needs. An ISA newer than this table is taken to need CUDA
 * `13 + (major - 9)`.`minor` at least, an estimate that errs toward refusing.
 */
export function cudaForIsa(isa: string): string {
  const known = ISA_CUDA[isa];
  if (known) return known;
  const [major, minor] = isa.split(".").map(Number);
  if (major >= 9) return `${13 + major - 9}.${minor}`;
  return "9.0";
}

/** Whether the driver (CUDA `M.m`) can compile PTX of `isa`. */
export function driverCompiles(isa: string, driverCuda: string): boolean {
  return byCapability(driverCuda, cudaForIsa(isa)) >= 0;
}

/** `"9.0"` -> `"sm_90"` (or `compute_90`). */
export function archName(cap: string, prefix = "sm"): string {
  return `${prefix}_${cap.replace(".", "")}`;
}

/**
 * Applies the rule for one GPU. `driverCuda` undefined means the driver's version is unknown:
 * PTX is then not counted on.
 */
export function judgeKernels(
  k: KernelFacts,
  compute: string,
  driverCuda: string | undefined,
): KernelVerdict {
  const [major, minor] = compute.split(".").map(Number);
  const sass = k.sass.filter((s) => {
    const [sm, sn] = s.split(".").map(Number);
    return sm === major && sn <= minor;
  }).sort(byCapability).pop();
  if (sass) return { usable: true, reason: `${archName(sass)} SASS` };
  const ptxFits = k.ptx.filter((p) => byCapability(p.arch, compute) <= 0)
    .sort((a, b) => byCapability(a.arch, b.arch) || byCapability(a.isa, b.isa));
  const compilable = driverCuda ? ptxFits.filter((p) => driverCompiles(p.isa, driverCuda)) : [];
  const best = compilable.pop();
  if (best) {
    return { usable: true, reason: `${archName(best.arch, "compute")} PTX (ISA ${best.isa})` };
  }
  const why: string[] = [
    `no SASS for ${archName(compute)}` +
    (k.sass.length ? ` (has ${k.sass.map((s) => archName(s)).join(", ")})` : " (has none)"),
  ];
  if (ptxFits.length === 0) {
    why.push(
      k.ptx.length
        ? `no PTX for an arch at or below ${compute} (has ${
          k.ptx.map((p) => archName(p.arch, "compute")).join(", ")
        })`
        : "no PTX",
    );
  } else if (!driverCuda) {
    why.push("the driver's CUDA version is unknown, so its PTX cannot be counted on");
  } else {
    const p = ptxFits[ptxFits.length - 1];
    why.push(
      `PTX ${archName(p.arch, "compute")} is ISA ${p.isa}, which needs a CUDA ${
        cudaForIsa(p.isa)
      } driver (this one is ${driverCuda})`,
    );
  }
  return { usable: false, reason: why.join(", and ") };
}
