/**
 * `hearth gpu-check [--compute X.Y] [--cuda-driver M.m] [--smoke] [--json] [--data-dir DIR]`
 * (also `deno task gpu-check`): prints which llama.cpp build `serve` would load on this host and
 * why each other candidate would not, or the same for a GPU and driver given on the command line
 * (a what-if for planning a deployment: with `--compute`, this host's GPUs and runtime libraries
 * are not consulted). It reads the CUDA packages from the data dir or fetches them as `serve`
 * would; offline with nothing cached, the candidate says which package it could not read.
 * `--smoke` also runs the smoke decode of every usable build on this host. Exit 0 when a
 * decision was printed, 2 for a bad flag.
 *
 * @example
 * ```sh
 * hearth gpu-check                                   # this host
 * hearth gpu-check --compute 9.0 --cuda-driver 13.0  # an H100 on a CUDA 13.0 driver
 * hearth gpu-check --json --smoke
 * ```
 * @module
 */
import { type Candidate, checkBuilds, formatCheck, type GpuCheck } from "../gpu/candidates.ts";
import { cuda12LibraryDir, cudaLibraryDir } from "../gpu/cuda_package.ts";
import { detectHost } from "../gpu/detect.ts";
import { probeDriver } from "../gpu/probe.ts";
import { libraryProbe, noGpuReason } from "../gpu/select.ts";
import { runSmokeChild, smokeModel, smokeTest } from "../gpu/smoke.ts";
import { findCudaSourceBuilds } from "../source/cuda_build.ts";
import { z } from "zod";
import { type FlagSpec, parseFlags } from "./argv.ts";

export type GpuCheckOptions = {
  compute?: string;
  cudaDriver?: string;
  smoke: boolean;
  json: boolean;
  dataDir: string;
};

const USAGE = "hearth gpu-check [--compute X.Y] [--cuda-driver M.m] [--smoke] [--json] " +
  "[--data-dir DIR]";

const FLAGS: FlagSpec<keyof GpuCheckOptions>[] = [
  {
    key: "compute",
    names: ["--compute"],
    meta: "X.Y",
    schema: z.string().regex(/^\d{1,2}\.\d$/, "must look like 9.0"),
  },
  {
    key: "cudaDriver",
    names: ["--cuda-driver"],
    meta: "M.m",
    schema: z.string().regex(/^\d{1,2}\.\d{1,2}$/, "must look like 13.0"),
  },
  { key: "smoke", names: ["--smoke"] },
  { key: "json", names: ["--json"] },
  {
    key: "dataDir",
    names: ["--data-dir"],
    meta: "DIR",
    schema: z.string().min(1).transform((d) => d.replace(/\/$/, "")),
  },
];

/** Parses argv; throws a one-line message for a bad flag. */
export function parseGpuCheckArgs(args: string[], defaultDataDir: string): GpuCheckOptions {
  const r = parseFlags(args, FLAGS, { smoke: false, json: false, dataDir: defaultDataDir }, USAGE);
  if (!r.ok) throw new Error(r.message);
  const o = r.values as GpuCheckOptions;
  if (o.smoke && o.compute) {
    throw new Error("--smoke runs builds on this host's GPUs, so it cannot go with --compute");
  }
  return o;
}

/** Builds the decision for `o` (this host or the what-if). */
export async function gpuCheck(o: GpuCheckOptions): Promise<GpuCheck & { whatIf: boolean }> {
  const deps = {
    cuda13Dir: () => cudaLibraryDir({ cacheRoot: o.dataDir }),
    cuda12Dir: () => cuda12LibraryDir({ cacheRoot: o.dataDir }),
    sourceDirs: () => findCudaSourceBuilds(o.dataDir),
    probe: libraryProbe,
  };
  if (o.compute) {
    const gpus = [{ index: 0, name: `compute ${o.compute} (what-if)`, compute: o.compute }];
    const check = await checkBuilds({ gpus, driverCuda: o.cudaDriver, whatIf: true }, deps);
    return { ...check, whatIf: true };
  }
  const facts = await detectHost();
  if (facts.visible.length === 0) {
    const check = await checkBuilds(
      { gpus: [], driverCuda: o.cudaDriver, whatIf: false, noGpuReason: noGpuReason(facts) },
      deps,
    );
    return { ...check, whatIf: false };
  }
  const driver = await probeDriver();
  const gpus = facts.visible.map((g, i) => ({
    index: i,
    name: driver.devices[i]?.name ?? g.name,
    compute: driver.devices[i]?.compute,
  }));
  const check = await checkBuilds(
    { gpus, driverCuda: o.cudaDriver ?? driver.cuda, whatIf: false },
    deps,
  );
  return { ...check, whatIf: false };
}

/** Smoke-tests every usable build; a failure makes it unusable and moves the choice on. */
async function withSmoke(check: GpuCheck, dataDir: string): Promise<GpuCheck> {
  const candidates: (Candidate & { smoke?: string })[] = [];
  for (const c of check.candidates) {
    if (!c.usable) {
      candidates.push(c);
      continue;
    }
    const r = c.dir ? await smokeTest(c.dir, { dataDir }) : await runSmokeChild(
      undefined,
      await smokeModel(dataDir),
    );
    const said = r.ok && !c.dir && r.output
      ? `decoded ${r.output.tokens.length} tokens on ${r.output.devices.join(", ")}`
      : r.reason;
    candidates.push(
      r.ok
        ? { ...c, smoke: said }
        : { ...c, usable: false, reason: `${c.reason}; but ${r.reason}`, smoke: r.reason },
    );
  }
  const choice = candidates.find((c) => c.usable)?.build ?? "cpu";
  return { ...check, candidates, choice };
}

/** The CLI; returns the exit status. */
export async function runGpuCheck(
  args: string[],
  o: { defaultDataDir: string },
): Promise<number> {
  let opts: GpuCheckOptions;
  try {
    opts = parseGpuCheckArgs(args, o.defaultDataDir);
  } catch (e) {
    console.error(`hearth: ${(e as Error).message}`);
    return 2;
  }
  let check: GpuCheck & { whatIf?: boolean } = await gpuCheck(opts);
  if (opts.smoke) check = { ...check, ...(await withSmoke(check, opts.dataDir)) };
  if (opts.json) console.log(JSON.stringify(check, null, 2));
  else {
    if (check.whatIf) console.log("what-if: the GPU and driver given, not this host's");
    console.log(formatCheck(check));
  }
  return 0;
}
