/**
 * Host facts that decide which llama.cpp build to load: the NVIDIA GPUs present, the ones
 * `CUDA_VISIBLE_DEVICES` leaves visible, the driver version, and whether the CUDA 13 runtime the
 * prebuilt CUDA build links against can be loaded. Everything is read from `/proc`, `/sys` and
 * `/dev` under an injectable root, and the library probe is injectable, so tests can fake any
 * host; `nvidia-smi` is only a fallback for hosts without `/proc/driver/nvidia` (WSL).
 *
 * @example
 * ```ts
 * import { detectHost } from "./detect.ts";
 * const facts = await detectHost();
 * facts.visible; // [{ index: 0, name: "NVIDIA H200", uuid: "GPU-...", busId: "0000:19:00.0" }]
 * facts.runtime; // { probed: true, found: ["libcuda.so.1", ...], missing: [] }
 *
 * // a test host: fake tree, CUDA_VISIBLE_DEVICES hides the GPUs, no real probing
 * await detectHost({ root: "/tmp/fake", env: { CUDA_VISIBLE_DEVICES: "-1" }, probe: () => false });
 * ```
 * @module
 */

/** One NVIDIA GPU as the host shows it. */
export type Gpu = {
  /** Position in PCI bus order, which is what `CUDA_VISIBLE_DEVICES` indices refer to. */
  index: number;
  name: string;
  uuid?: string;
  busId?: string;
};

/** Which CUDA libraries the dynamic loader can find. */
export type RuntimeProbe = {
  /** False when there was no reason to look (no GPU visible, or HEARTH_LLAMA_LIB_DIR set). */
  probed: boolean;
  found: string[];
  missing: string[];
};

export type HostFacts = {
  /** Every NVIDIA GPU found, in PCI bus order. */
  gpus: Gpu[];
  /** The GPUs CUDA will use, in `CUDA_VISIBLE_DEVICES` order (all of `gpus` when it is unset). */
  visible: Gpu[];
  /** Where the GPUs were found. */
  gpuSource: "proc" | "nvidia-smi" | "dev" | "none";
  /** `CUDA_VISIBLE_DEVICES` as set (undefined when unset). */
  cudaVisibleDevices?: string;
  /** Kernel driver version (`580.65.06`), when known. */
  driverVersion?: string;
  runtime: RuntimeProbe;
  /** `HEARTH_LLAMA_LIB_DIR`, when set and not empty. */
  libDir?: string;
};

/** Whether the dynamic loader can load `lib` (a bare soname such as `libcudart.so.13`). */
export type LibraryProbe = (lib: string) => boolean | Promise<boolean>;

export type DetectOptions = {
  /** Prefix for `/proc`, `/sys` and `/dev`; default `/`. */
  root?: string;
  /** Environment to read; default the process's. */
  env?: Record<string, string | undefined>;
  /** Checks the CUDA 13 runtime (`CUDA_RUNTIME_LIBS`) when given; without it, nothing is loaded. */
  probe?: LibraryProbe;
  /** `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader` output, if any. */
  smi?: () => Promise<string | undefined>;
};

/**
 * What the prebuilt CUDA build needs beyond the C/C++ runtime (`readelf -d libggml-cuda.so`):
 * the driver's `libcuda.so.1` and the CUDA 13 runtime and cuBLAS.
 */
export const CUDA_RUNTIME_LIBS = ["libcuda.so.1", "libcudart.so.13", "libcublas.so.13"];

/** Gathers the facts `selectLlamaLibrary` decides on. */
export async function detectHost(opts: DetectOptions = {}): Promise<HostFacts> {
  const root = (opts.root ?? "/").replace(/\/$/, "");
  const env = opts.env ?? processEnv();
  const { gpus, source } = await findGpus(root, opts.smi ?? runNvidiaSmi);
  const cudaVisibleDevices = env.CUDA_VISIBLE_DEVICES;
  const visible = visibleGpus(cudaVisibleDevices, gpus);
  const libDir = env.HEARTH_LLAMA_LIB_DIR || undefined;
  // Loading cuBLAS costs time and address space, so only look when asked: the build choice
  // checks each candidate's own runtime libraries instead (`candidates.ts`).
  const runtime = visible.length > 0 && !libDir && opts.probe
    ? await probeRuntime(opts.probe)
    : { probed: false, found: [], missing: [] };
  return {
    gpus,
    visible,
    gpuSource: source,
    cudaVisibleDevices,
    driverVersion: await driverVersion(root),
    runtime,
    libDir,
  };
}

function processEnv(): Record<string, string | undefined> {
  const get = (name: string) => Deno.env.get(name);
  return {
    CUDA_VISIBLE_DEVICES: get("CUDA_VISIBLE_DEVICES"),
    HEARTH_LLAMA_LIB_DIR: get("HEARTH_LLAMA_LIB_DIR"),
  };
}

async function findGpus(
  root: string,
  smi: () => Promise<string | undefined>,
): Promise<{ gpus: Gpu[]; source: HostFacts["gpuSource"] }> {
  const fromProc = await procGpus(root);
  if (fromProc.length > 0) return { gpus: fromProc, source: "proc" };
  // No /proc/driver/nvidia (WSL, odd containers): nvidia-smi knows names; /dev only counts.
  const fromSmi = parseNvidiaSmi((await smi()) ?? "");
  if (fromSmi.length > 0) return { gpus: fromSmi, source: "nvidia-smi" };
  const fromDev = await devGpus(root);
  if (fromDev.length > 0) return { gpus: fromDev, source: "dev" };
  return { gpus: [], source: "none" };
}

/** `/proc/driver/nvidia/gpus/<bus id>/information`: one directory per GPU the driver owns. */
async function procGpus(root: string): Promise<Gpu[]> {
  const base = `${root}/proc/driver/nvidia/gpus`;
  const busIds = (await listDir(base)).sort();
  const gpus: Gpu[] = [];
  for (const busId of busIds) {
    const info = parseInformation(await readText(`${base}/${busId}/information`) ?? "");
    gpus.push({
      index: gpus.length,
      name: info["Model"] || "NVIDIA GPU",
      uuid: info["GPU UUID"] || undefined,
      busId: info["Bus Location"] || busId,
    });
  }
  return gpus;
}

/** `Key:  value` lines of a driver information file. */
export function parseInformation(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^([^:]+):\s*(.*)$/);
    if (m) out[m[1].trim()] = m[2].trim();
  }
  return out;
}

/** `/dev/nvidia0`, `/dev/nvidia1`, ... (not `nvidiactl`, `nvidia-uvm`). */
async function devGpus(root: string): Promise<Gpu[]> {
  const minors = (await listDir(`${root}/dev`))
    .map((n) => n.match(/^nvidia(\d+)$/)?.[1])
    .filter((m): m is string => m !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
  return minors.map((_, i) => ({ index: i, name: "NVIDIA GPU" }));
}

/** Lines of `index, name, uuid, pci.bus_id`. */
export function parseNvidiaSmi(csv: string): Gpu[] {
  const gpus: Gpu[] = [];
  for (const line of csv.split("\n")) {
    const [index, name, uuid, busId] = line.split(",").map((f) => f.trim());
    if (!/^\d+$/.test(index ?? "") || !name) continue;
    gpus.push({ index: gpus.length, name, uuid: uuid || undefined, busId: busId || undefined });
  }
  return gpus;
}

async function runNvidiaSmi(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=index,name,uuid,pci.bus_id", "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
      // A wedged driver can hang nvidia-smi; start-up must not hang with it.
      signal: AbortSignal.timeout(5000),
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The GPUs CUDA will enumerate under `CUDA_VISIBLE_DEVICES`, following CUDA's rules: unset means
 * all; entries are indices or `GPU-` UUID prefixes; the list ends at the first entry that names
 * no GPU (so empty, `-1` or `none` hides every GPU); an entry naming a GPU twice also ends it.
 * `MIG-` entries are MIG instances, counted as devices of unknown model.
 */
export function visibleGpus(value: string | undefined, gpus: Gpu[]): Gpu[] {
  if (value === undefined) return gpus;
  const out: Gpu[] = [];
  for (const raw of value.split(",")) {
    const token = raw.trim();
    let gpu: Gpu | undefined;
    if (/^\d+$/.test(token)) {
      gpu = gpus[Number(token)];
    } else if (/^GPU-/i.test(token)) {
      const hits = gpus.filter((g) => g.uuid?.toLowerCase().startsWith(token.toLowerCase()));
      gpu = hits.length === 1 ? hits[0] : undefined;
    } else if (/^MIG-/i.test(token) && gpus.length > 0) {
      gpu = { index: -1, name: `MIG instance ${token}` };
    }
    if (!gpu || (gpu.index >= 0 && out.includes(gpu))) break;
    out.push(gpu);
  }
  return out;
}

async function driverVersion(root: string): Promise<string | undefined> {
  const sys = (await readText(`${root}/sys/module/nvidia/version`))?.trim();
  if (sys) return sys;
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build ..."
  const first = (await readText(`${root}/proc/driver/nvidia/version`))?.split("\n")[0] ?? "";
  return first.split(/\s+/).find((w) => /^\d+\.\d+(\.\d+)?$/.test(w));
}

async function probeRuntime(probe: LibraryProbe): Promise<RuntimeProbe> {
  const found: string[] = [];
  const missing: string[] = [];
  for (const lib of CUDA_RUNTIME_LIBS) (await probe(lib) ? found : missing).push(lib);
  return { probed: true, found, missing };
}

/**
 * Asks the dynamic loader itself, so `LD_LIBRARY_PATH`, the ld.so cache and a library's own
 * dependencies (cuBLAS needs cuBLASLt) count exactly as they will when ggml loads the CUDA
 * backend. The handle is kept open on purpose: the CUDA build will load these same libraries
 * moments later, and CUDA libraries are not all safe to unload and reload.
 */
export function dlopenProbe(lib: string): boolean {
  try {
    Deno.dlopen(lib, {});
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) throw e;
    return false;
  }
}

/** Without FFI permission: look in `LD_LIBRARY_PATH`, then the ld.so cache. */
export async function ldconfigProbe(lib: string): Promise<boolean> {
  for (const dir of (Deno.env.get("LD_LIBRARY_PATH") ?? "").split(":").filter(Boolean)) {
    if (await exists(`${dir}/${lib}`)) return true;
  }
  for (const cmd of ["ldconfig", "/sbin/ldconfig"]) {
    try {
      const out = await new Deno.Command(cmd, { args: ["-p"], stdout: "piped", stderr: "null" })
        .output();
      if (!out.success) continue;
      return new TextDecoder().decode(out.stdout).split("\n").some((l) =>
        l.trim().startsWith(`${lib} `)
      );
    } catch {
      // try the next location
    }
  }
  return false;
}

async function listDir(path: string): Promise<string[]> {
  try {
    const names: string[] = [];
    for await (const e of Deno.readDir(path)) names.push(e.name);
    return names;
  } catch {
    return [];
  }
}

/** The file's text, or undefined when it cannot be read. */
async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

/** Whether `path` exists (any kind of file). */
export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}
