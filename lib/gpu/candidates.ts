/**
 * The build decision (docs/ARCHITECTURE.md, "GPU hosts"), from facts: for each candidate in order (the
 * prebuilt CUDA 13 build, the prebuilt CUDA 12 fallback, a cached source build, the CPU build)
 * read what GPU code its `libggml-cuda.so` carries (`fatbin.ts`), judge it against every visible
 * GPU and the driver (`verdict.ts`), and check that the runtime libraries it links load. The first
 * usable one is the choice; every other says why not. The effects (fetching a package, listing
 * source builds, asking the loader) come in as dependencies, so the same function answers
 * `hearth gpu-check` for this host, a what-if (`--compute 9.0 --cuda-driver 13.0`), and tests.
 *
 * @example
 * ```ts
 * import { checkBuilds } from "./candidates.ts";
 * declare const deps: Parameters<typeof checkBuilds>[1];
 * const check = await checkBuilds(
 *   { gpus: [{ index: 0, name: "H100", compute: "9.0" }], driverCuda: "13.0", whatIf: true },
 *   deps,
 * );
 * check.candidates[0]; // { build: "prebuilt-cuda13", usable: false, reason: "... ISA 9.1 ..." }
 * check.choice; // "cpu" (until a source build for sm_90 is cached)
 * ```
 * @module
 */
import { type FatbinFacts, type PtxEntry, readFatbin } from "./fatbin.ts";
import { archName, judgeKernels } from "./verdict.ts";
import type { LibraryProbe } from "./detect.ts";

export type BuildName = "prebuilt-cuda13" | "prebuilt-cuda12" | "source" | "cpu";

export type Candidate = {
  build: BuildName;
  usable: boolean;
  reason: string;
  sass: string[];
  ptx: PtxEntry[];
  /** Where the build's libraries are (absent for the CPU build and unread packages). */
  dir?: string;
  /** Not judged (`lazy`: an earlier build is usable, or the caller skipped it). */
  deferred?: boolean;
};

export type CheckGpu = { index: number; name: string; compute?: string };

export type GpuCheck = {
  gpus: CheckGpu[];
  driver: { cuda: string } | null;
  candidates: Candidate[];
  choice: BuildName;
};

export type CheckInput = {
  /** The visible GPUs, in CUDA order; `compute` undefined when it could not be read. */
  gpus: CheckGpu[];
  driverCuda?: string;
  /** A what-if for another host: this host's runtime libraries are not consulted. */
  whatIf: boolean;
  /** Said of every CUDA candidate when `gpus` is empty. */
  noGpuReason?: string;
  /**
   * Stop at the first usable GPU build: later ones are `deferred`, so nothing is fetched for
   * them (`serve`; `gpu-check` judges all).
   */
  lazy?: boolean;
  /** Builds the caller has already rejected: `deferred`, not judged again. */
  skip?: BuildName[];
};

export type CheckDeps = {
  /** The prebuilt CUDA 13 build's directory, fetched when needed; throws when it cannot be had. */
  cuda13Dir: () => Promise<string>;
  cuda12Dir: () => Promise<string>;
  /** Cached source builds (directories holding `libggml-cuda.so`), best first. */
  sourceDirs: () => Promise<string[]>;
  /** Whether the dynamic loader can load a soname. */
  probe: LibraryProbe;
  readFatbin?: (path: string) => Promise<FatbinFacts>;
};

/** Libraries every Linux host has; a build's other `DT_NEEDED` entries are checked. */
const SYSTEM_LIBS = /^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux.*)\.so/;

const BUILD_LABEL: Record<BuildName, string> = {
  "prebuilt-cuda13": "@node-llama-cpp/linux-x64-cuda@3.22.1",
  "prebuilt-cuda12": "@node-llama-cpp/linux-x64-cuda-ext@3.22.1 (CUDA 12 fallback)",
  source: "a source build",
  cpu: "the CPU build",
};

/** Judges every candidate; never throws for a host problem (the reason says it). */
export async function checkBuilds(input: CheckInput, deps: CheckDeps): Promise<GpuCheck> {
  const read = deps.readFatbin ?? readFatbin;
  const candidates: Candidate[] = [];
  const judgeDir = async (build: BuildName, dir: string): Promise<Candidate> => {
    let facts: FatbinFacts;
    try {
      facts = await read(`${dir}/libggml-cuda.so`);
    } catch (e) {
      return { build, usable: false, reason: (e as Error).message, sass: [], ptx: [], dir };
    }
    const base = { build, sass: facts.sass, ptx: facts.ptx, dir };
    const ways: string[] = [];
    for (const gpu of input.gpus) {
      const who = `GPU ${gpu.index} (${gpu.name}${gpu.compute ? `, compute ${gpu.compute}` : ""})`;
      if (!gpu.compute) {
        ways.push(`${who}: compute capability unknown, left to the smoke decode`);
        continue;
      }
      const k = judgeKernels(facts, gpu.compute, input.driverCuda);
      if (!k.usable) return { ...base, usable: false, reason: `${who}: ${k.reason}` };
      ways.push(`${who} through ${k.reason}`);
    }
    const needs = await missingRuntime(facts.needed, dir, input.whatIf, deps.probe);
    if (needs.missing.length > 0) {
      return {
        ...base,
        usable: false,
        reason: `its kernels fit (${ways.join("; ")}) but ${needs.missing.join(", ")} cannot ` +
          `be loaded: ${runtimeHint(needs.missing)}`,
      };
    }
    return { ...base, usable: true, reason: `runs on ${ways.join("; ")}; ${needs.note}` };
  };

  const deferred = (build: BuildName, reason: string): Candidate => ({
    ...unusable(build, reason),
    deferred: true,
  });
  const settled = () => input.lazy && candidates.some((c) => c.usable);
  for (const build of ["prebuilt-cuda13", "prebuilt-cuda12"] as const) {
    if (input.skip?.includes(build)) {
      candidates.push(deferred(build, "already rejected"));
      continue;
    }
    if (settled()) {
      candidates.push(deferred(build, "not judged: an earlier build is usable"));
      continue;
    }
    if (input.gpus.length === 0) {
      candidates.push(unusable(build, input.noGpuReason ?? "no NVIDIA GPU visible"));
      continue;
    }
    let dir: string;
    try {
      dir = await (build === "prebuilt-cuda13" ? deps.cuda13Dir() : deps.cuda12Dir());
    } catch (e) {
      candidates.push(
        unusable(build, `could not read ${BUILD_LABEL[build]}: ${(e as Error).message}`),
      );
      continue;
    }
    candidates.push(await judgeDir(build, dir));
  }

  if (input.skip?.includes("source")) {
    candidates.push(deferred("source", "already rejected"));
  } else if (settled()) {
    candidates.push(deferred("source", "not judged: an earlier build is usable"));
  } else if (input.gpus.length === 0) {
    candidates.push(unusable("source", input.noGpuReason ?? "no NVIDIA GPU visible"));
  } else {
    const dirs = await deps.sourceDirs().catch(() => [] as string[]);
    const judged: Candidate[] = [];
    for (const dir of dirs) judged.push(await judgeDir("source", dir));
    const good = judged.find((c) => c.usable);
    if (good) candidates.push(good);
    else {
      const archs = [...new Set(input.gpus.map((g) => g.compute).filter((c) => c))]
        .map((c) => archName(c!));
      const why = judged.length
        ? `no cached source build runs here (${
          judged.map((c) => `${c.dir}: ${c.reason}`).join("; ")
        })`
        : `no source build is cached for ${archs.join(", ") || "this GPU"}`;
      const hint = `\`hearth build-cuda --arch ${
        archs.map((a) => a.slice(3)).join(",") || "native"
      }\` makes one (needs nvcc and cuBLAS)`;
      candidates.push({ ...(judged[0] ?? unusable("source", "")), reason: `${why}; ${hint}` });
    }
  }

  candidates.push({
    build: "cpu",
    usable: true,
    reason: input.gpus.length ? "always runs, on the CPU (the GPU stays unused)" : "always runs",
    sass: [],
    ptx: [],
  });
  return {
    gpus: input.gpus,
    driver: input.driverCuda ? { cuda: input.driverCuda } : null,
    candidates,
    choice: candidates.find((c) => c.usable)!.build,
  };
}

function unusable(build: BuildName, reason: string): Candidate {
  return { build, usable: false, reason, sass: [], ptx: [] };
}

async function missingRuntime(
  needed: string[],
  dir: string,
  whatIf: boolean,
  probe: LibraryProbe,
): Promise<{ missing: string[]; note: string }> {
  const external: string[] = [];
  for (const lib of needed) {
    if (SYSTEM_LIBS.test(lib)) continue;
    try {
      await Deno.stat(`${dir}/${lib}`);
    } catch {
      external.push(lib);
    }
  }
  if (whatIf) {
    return {
      missing: [],
      note: `needs ${external.join(", ")} on that host (not checked: what-if)`,
    };
  }
  const missing: string[] = [];
  for (const lib of external) if (!await probe(lib)) missing.push(lib);
  return { missing, note: `${external.join(", ")} load` };
}

function runtimeHint(missing: string[]): string {
  if (missing.includes("libcuda.so.1")) {
    return "the NVIDIA driver's user-space library is missing (in a container, start it with " +
      "the NVIDIA runtime, e.g. `docker run --gpus all`)";
  }
  const major = missing.map((l) => l.match(/\.so\.(\d+)$/)?.[1]).find((m) => m);
  return `install the CUDA ${major ?? ""} runtime and cuBLAS (e.g. apt packages ` +
    `cuda-cudart-${major}-0 and libcublas-${major}-0), or add their directory to LD_LIBRARY_PATH`;
}

/** A human-readable table of the decision (what `hearth gpu-check` prints). */
export function formatCheck(check: GpuCheck): string {
  const lines: string[] = [];
  lines.push(
    check.gpus.length
      ? `GPUs: ${
        check.gpus.map((g) => `${g.index}: ${g.name} (compute ${g.compute ?? "unknown"})`).join(
          ", ",
        )
      }`
      : "GPUs: none",
  );
  lines.push(`driver: ${check.driver ? `CUDA ${check.driver.cuda}` : "unknown"}`);
  for (const c of check.candidates) {
    const mark = c.build === check.choice ? "→" : c.usable ? "✓" : "✗";
    lines.push(`${mark} ${c.build.padEnd(16)} ${c.usable ? "usable" : "unusable"}: ${c.reason}`);
    if (c.sass.length || c.ptx.length) {
      lines.push(
        `  ${"".padEnd(16)} SASS ${c.sass.map((s) => archName(s)).join(" ") || "none"}; PTX ${
          c.ptx.map((p) => `${archName(p.arch, "compute")}@${p.isa}`).join(" ") || "none"
        }`,
      );
    }
  }
  lines.push(`choice: ${check.choice}`);
  return lines.join("\n");
}
