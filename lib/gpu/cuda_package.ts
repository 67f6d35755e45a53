/**
 * The prebuilt CUDA build of llama.cpp, `@node-llama-cpp/linux-x64-cuda@3.22.1` (the same
 * release as the CPU build in `deno.json`). It is not a dependency of the project, so a CPU-only
 * host never downloads its 143 MB: on a GPU host it is taken from `node_modules` when someone
 * installed it there, else from the data dir's cache, else fetched once with `npm pack` (which
 * honours the user's npm registry, proxy and cache settings), checked against the integrity
 * pinned below, and unpacked into the cache with a rename so that concurrent starts never see
 * half a directory.
 *
 * @example
 * ```ts
 * import { cudaLibraryDir } from "./cuda_package.ts";
 * const dir = await cudaLibraryDir({ cacheRoot: "/home/me/.cache/hearth", log: console.error });
 * // dir = /home/me/.cache/hearth/llama-cuda-3.22.1, holding libllama.cuda.v0.5.0.so,
 * //       libggml.cuda.v0.5.0.so, libggml-base.so, libggml-cuda.so and the libggml-cpu-*.so set
 * ```
 * @module
 */
import { createHash } from "node:crypto";
import { exists } from "./detect.ts";

export const CUDA_PACKAGE = "@node-llama-cpp/linux-x64-cuda";
export const CUDA_PACKAGE_VERSION = "3.22.1";
export const CUDA_SPEC = `${CUDA_PACKAGE}@${CUDA_PACKAGE_VERSION}`;
/** `npm view @node-llama-cpp/linux-x64-cuda@3.22.1 dist.integrity` (tarball of 142,898,030 bytes). */
export const CUDA_INTEGRITY =
  "sha512-8rQCjyNNLZJUFit+YpjwlC4hwkKgOMIkB2wuycKBf8NU2O3ySKbiWZQ8aw9ku2nUTXjSnUIrE6KB88itduTBuA==";
/** The package's `bins/` subdirectory that holds the libraries. */
export const CUDA_BINS_SUBDIR = "linux-x64-cuda";
/** The CUDA build names its two front libraries apart from the CPU build's. */
export const CUDA_LLAMA_LIB = "libllama.cuda.v0.5.0.so";
export const CUDA_GGML_LIB = "libggml.cuda.v0.5.0.so";
/** A directory holding either name is a llama.cpp build of this release. */
const LLAMA_MARKERS = [CUDA_LLAMA_LIB, "libllama.v0.5.0.so"];

export type CudaPackageOptions = {
  /** Where `node_modules` is looked for; default this project's root. */
  projectRoot?: string;
  /** Default `$HOME/.cache/hearth` (the default `--data-dir`). */
  cacheRoot?: string;
  /** Expected `sha512-...` of the tarball; default {@link CUDA_INTEGRITY}. Tests only. */
  integrity?: string;
  /** The same for the `-ext` package; default {@link CUDA_EXT_INTEGRITY}. Tests only. */
  extIntegrity?: string;
  /** The npm executable; default `npm` on PATH. */
  npm?: string;
  /** Extra environment for npm (`npm_config_registry`, `npm_config_cache`, ...). */
  env?: Record<string, string>;
  /** Progress lines (a fetch takes a while). */
  log?: (line: string) => void;
};

export function defaultCacheRoot(): string {
  return `${Deno.env.get("HOME") ?? "/tmp"}/.cache/hearth`;
}

/** `<cacheRoot>/llama-cuda-3.22.1`. */
export function cudaCacheDir(cacheRoot = defaultCacheRoot()): string {
  return `${cacheRoot}/llama-cuda-${CUDA_PACKAGE_VERSION}`;
}

function defaultProjectRoot(): string {
  return new URL("../..", import.meta.url).pathname.replace(/\/$/, "");
}

/** The CUDA library directory if it is already on disk; never touches the network. */
export async function findCudaLibraryDir(
  opts: CudaPackageOptions = {},
): Promise<string | undefined> {
  const pkg = `${opts.projectRoot ?? defaultProjectRoot()}/node_modules/${CUDA_PACKAGE}`;
  // Another release's libraries would not match Hearth's symbol table and struct layouts.
  if (await packageVersion(pkg) === CUDA_PACKAGE_VERSION) {
    const dir = await libraryDirUnder(`${pkg}/bins`);
    if (dir) return dir;
  }
  const cached = cudaCacheDir(opts.cacheRoot);
  return await isLibraryDir(cached) ? cached : undefined;
}

/** The CUDA library directory, fetched and unpacked into the cache on first use. */
export async function cudaLibraryDir(opts: CudaPackageOptions = {}): Promise<string> {
  return await findCudaLibraryDir(opts) ?? await fetchCudaPackage(opts);
}

/** Fetches, verifies and unpacks the package into {@link cudaCacheDir}; returns that dir. */
export async function fetchCudaPackage(opts: CudaPackageOptions = {}): Promise<string> {
  return await fetchPackage({
    spec: CUDA_SPEC,
    integrity: opts.integrity ?? CUDA_INTEGRITY,
    megabytes: 143,
    member: "package/bins",
    final: cudaCacheDir(opts.cacheRoot ?? defaultCacheRoot()),
    locate: (work) => libraryDirUnder(`${work}/package/bins`),
    isDone: isLibraryDir,
  }, opts);
}

/**
 * `@node-llama-cpp/linux-x64-cuda-ext@3.22.1`: its only library is a CUDA 12 build of
 * `libggml-cuda.so` (SASS sm_86, PTX ISA 8.4 for compute_50..80) that node-llama-cpp loads in
 * place of the CUDA 13 one where that cannot run. Only that file is unpacked.
 */
export const CUDA_EXT_PACKAGE = "@node-llama-cpp/linux-x64-cuda-ext";
export const CUDA_EXT_SPEC = `${CUDA_EXT_PACKAGE}@${CUDA_PACKAGE_VERSION}`;
/** `npm view @node-llama-cpp/linux-x64-cuda-ext@3.22.1 dist.integrity` (176,664,119 bytes). */
export const CUDA_EXT_INTEGRITY =
  "sha512-4e5ajkiM2aR2WAdB/N/ACk4weEhHvOAIrzxZPsIX0xDFW5+6hhShuy1/vs88SK9NGdgAco9IyE28eYS0H1efpA==";
const CUDA_EXT_MEMBER = `package/bins/${CUDA_BINS_SUBDIR}/fallback/libggml-cuda.so`;

/** `<cacheRoot>/llama-cuda-ext-3.22.1` (holds the fallback `libggml-cuda.so`). */
export function cudaExtCacheDir(cacheRoot = defaultCacheRoot()): string {
  return `${cacheRoot}/llama-cuda-ext-${CUDA_PACKAGE_VERSION}`;
}

/** `<cacheRoot>/llama-cuda12-3.22.1`: the CUDA 13 build's files with the CUDA 12 backend. */
export function cuda12CacheDir(cacheRoot = defaultCacheRoot()): string {
  return `${cacheRoot}/llama-cuda12-${CUDA_PACKAGE_VERSION}`;
}

/** The fallback `libggml-cuda.so`, fetched on first use. */
export async function cudaExtLibrary(opts: CudaPackageOptions = {}): Promise<string> {
  const final = cudaExtCacheDir(opts.cacheRoot ?? defaultCacheRoot());
  const lib = `${final}/libggml-cuda.so`;
  if (await exists(lib)) return lib;
  await fetchPackage({
    spec: CUDA_EXT_SPEC,
    integrity: opts.extIntegrity ?? CUDA_EXT_INTEGRITY,
    megabytes: 177,
    member: CUDA_EXT_MEMBER,
    final,
    locate: async (work) => {
      const dir = `${work}/package/bins/${CUDA_BINS_SUBDIR}/fallback`;
      return await exists(`${dir}/libggml-cuda.so`) ? dir : undefined;
    },
    isDone: (dir) => exists(`${dir}/libggml-cuda.so`),
  }, opts);
  return lib;
}

/**
 * The CUDA 12 fallback as a loadable build: the CUDA 13 package's front libraries (which do not
 * link the CUDA runtime) beside the fallback `libggml-cuda.so`, hard-linked (copied across
 * filesystems) into {@link cuda12CacheDir}. Fetches either package on first use.
 */
export async function cuda12LibraryDir(opts: CudaPackageOptions = {}): Promise<string> {
  const final = cuda12CacheDir(opts.cacheRoot ?? defaultCacheRoot());
  if (await isLibraryDir(final) && await exists(`${final}/libggml-cuda.so`)) return final;
  const base = await cudaLibraryDir(opts);
  const fallback = await cudaExtLibrary(opts);
  const root = final.slice(0, final.lastIndexOf("/"));
  const work = await Deno.makeTempDir({ dir: root, prefix: ".llama-cuda12.tmp-" });
  try {
    for await (const e of Deno.readDir(base)) {
      if (!e.isFile || e.name === "libggml-cuda.so") continue;
      await linkOrCopy(`${base}/${e.name}`, `${work}/${e.name}`);
    }
    await linkOrCopy(fallback, `${work}/libggml-cuda.so`);
    await moveIntoPlace(work, final);
  } finally {
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
  return final;
}

async function linkOrCopy(from: string, to: string): Promise<void> {
  try {
    await Deno.link(from, to);
  } catch {
    await Deno.copyFile(from, to);
  }
}

type PackageFetch = {
  spec: string;
  integrity: string;
  megabytes: number;
  /** The tarball member to unpack. */
  member: string;
  final: string;
  /** The directory under the unpacked work dir to move into place. */
  locate: (work: string) => Promise<string | undefined>;
  isDone: (dir: string) => Promise<boolean>;
};

async function fetchPackage(p: PackageFetch, opts: CudaPackageOptions): Promise<string> {
  const cacheRoot = p.final.slice(0, p.final.lastIndexOf("/"));
  await Deno.mkdir(cacheRoot, { recursive: true });
  const name = p.final.slice(cacheRoot.length + 1);
  const prefix = `.${name}.tmp-`;
  await removeStaleWork(cacheRoot, prefix);
  // Inside the cache root so the final rename stays on one filesystem (and is atomic).
  const work = await Deno.makeTempDir({ dir: cacheRoot, prefix });
  try {
    opts.log?.(`fetching ${p.spec} (about ${p.megabytes} MB) for the GPU ...`);
    const tgz = await npmPack(work, p.spec, opts);
    const actual = await sha512Integrity(tgz);
    if (actual !== p.integrity) {
      throw new Error(
        `integrity mismatch for ${p.spec}: expected ${p.integrity}, got ${actual}; ` +
          "refusing to use it (check the npm registry in use)",
      );
    }
    await run("tar", ["xzf", tgz, "-C", work, p.member], "unpack", p.spec);
    await Deno.remove(tgz);
    const unpacked = await p.locate(work);
    if (!unpacked) throw new Error(`${p.spec} holds no ${p.member}`);
    await moveIntoPlace(unpacked, p.final, p.isDone);
    opts.log?.(`${p.spec} unpacked into ${p.final}`);
    return p.final;
  } finally {
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

/** Renames `from` to `final`, unless a concurrent start already put a good copy there. */
async function moveIntoPlace(
  from: string,
  final: string,
  isDone: (dir: string) => Promise<boolean> = isLibraryDir,
): Promise<void> {
  for (let attempt = 0;; attempt++) {
    try {
      await Deno.rename(from, final);
      return;
    } catch (e) {
      // A concurrent start won the race; its copy passed the same check.
      if (await isDone(final)) return;
      if (attempt > 0) throw new Error(`cannot move ${from} to ${final}: ${message(e)}`);
      // Something that is not a finished copy (emptied by hand): ours replaces it.
      await Deno.remove(final, { recursive: true }).catch(() => {});
    }
  }
}

/** The npm-style `sha512-<base64>` of a file, streamed (the tarball is large). */
export async function sha512Integrity(path: string): Promise<string> {
  const hash = createHash("sha512");
  using file = await Deno.open(path);
  for await (const chunk of file.readable) hash.update(chunk);
  return `sha512-${hash.digest("base64")}`;
}

async function npmPack(work: string, spec: string, opts: CudaPackageOptions): Promise<string> {
  const npm = opts.npm ?? "npm";
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(npm, {
      args: ["pack", spec, "--pack-destination", work, "--loglevel=error"],
      cwd: work,
      env: { npm_config_update_notifier: "false", ...opts.env },
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new Error(
        `cannot fetch ${spec}: \`${npm}\` is not on PATH (install Node.js with npm, or ` +
          "set HEARTH_LLAMA_LIB_DIR to a CUDA build)",
      );
    }
    throw e;
  }
  if (!out.success) throw new Error(npmError(new TextDecoder().decode(out.stderr), spec));
  for await (const e of Deno.readDir(work)) {
    if (e.isFile && e.name.endsWith(".tgz")) return `${work}/${e.name}`;
  }
  throw new Error(`npm pack ${spec} wrote no tarball`);
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ERR_SOCKET_TIMEOUT",
  "ECONNABORTED",
]);

/** One line from npm's multi-line error report. */
export function npmError(stderr: string, spec = CUDA_SPEC): string {
  const code = stderr.match(/npm (?:error|ERR!) code (\S+)/)?.[1] ?? "";
  const request = stderr.match(/request to (\S+) failed, reason: ([^\n]+)/);
  if (NETWORK_CODES.has(code) || (request && !code)) {
    const where = request ? new URL(request[1]).origin : "the npm registry";
    return `cannot fetch ${spec}: registry ${where} unreachable (` +
      `${request?.[2].trim() ?? code})`;
  }
  if (code === "E404" || code === "ETARGET") {
    return `cannot fetch ${spec}: not found on the npm registry (${code})`;
  }
  if (code === "EINTEGRITY") {
    return `integrity mismatch for ${spec}: npm rejected the tarball (EINTEGRITY)`;
  }
  const first = stderr.split("\n").map((l) => l.replace(/^npm (error|ERR!)\s*/, "").trim())
    .find((l) => l && !l.startsWith("code ")) ?? "no output";
  return `cannot fetch ${spec}: npm pack failed${code ? ` (${code})` : ""}: ${first}`;
}

/** The directory under `bins/` holding the libraries: the known name first, else any. */
async function libraryDirUnder(bins: string): Promise<string | undefined> {
  if (await isLibraryDir(`${bins}/${CUDA_BINS_SUBDIR}`)) return `${bins}/${CUDA_BINS_SUBDIR}`;
  try {
    for await (const e of Deno.readDir(bins)) {
      if (e.isDirectory && await isLibraryDir(`${bins}/${e.name}`)) return `${bins}/${e.name}`;
    }
  } catch {
    // no bins/ at all
  }
  return undefined;
}

async function isLibraryDir(dir: string): Promise<boolean> {
  for (const name of LLAMA_MARKERS) {
    try {
      await Deno.stat(`${dir}/${name}`);
      return true;
    } catch {
      // try the other name
    }
  }
  return false;
}

async function packageVersion(pkg: string): Promise<string | undefined> {
  try {
    return JSON.parse(await Deno.readTextFile(`${pkg}/package.json`)).version;
  } catch {
    return undefined;
  }
}

/** Leftovers of a start that died mid-fetch; a day old, so never a live concurrent fetch. */
async function removeStaleWork(root: string, prefix: string): Promise<void> {
  const dayAgo = Date.now() - 24 * 3600_000;
  for await (const e of Deno.readDir(root)) {
    if (!e.isDirectory || !e.name.startsWith(prefix)) continue;
    const path = `${root}/${e.name}`;
    const mtime = (await Deno.stat(path).catch(() => undefined))?.mtime?.getTime() ?? Infinity;
    if (mtime < dayAgo) await Deno.remove(path, { recursive: true }).catch(() => {});
  }
}

async function run(cmd: string, args: string[], what: string, spec: string): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
  } catch (e) {
    throw new Error(`cannot ${what} ${spec}: \`${cmd}\` failed to start (${message(e)})`);
  }
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr).trim().split("\n")[0];
    throw new Error(`cannot ${what} ${spec}: ${cmd} failed: ${err}`);
  }
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
