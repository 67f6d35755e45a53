/**
 * GGUF downloads from a Hugging Face-compatible hub, cached under the data dir.
 *
 * The endpoint comes from `HF_ENDPOINT` (default `https://huggingface.co`) and the token from
 * `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` or `HUB_TOKEN`, read from an `env` object rather than
 * `Deno.env` so callers and tests can run several hubs side by side. A file is cached at
 * `{dataDir}/hub/{owner}--{repo}/{revision}/{file}`; once there it is used without any network
 * call. Downloads stream into `{file}.part` under an exclusive lock and are renamed only when
 * complete, so an interrupted download is never taken for a model and two processes starting
 * at once download a file only once.
 *
 * @example
 * ```ts
 * import { downloadHubModel } from "./hub.ts";
 * const path = await downloadHubModel({
 *   repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
 *   modelFile: "qwen2.5-0.5b-instruct-q8_0.gguf",
 *   dataDir: "/home/me/.cache/hearth",
 * });
 * ```
 * @module
 */

/** Environment variables as a plain object (`Deno.env.toObject()` by default). */
export type Env = Record<string, string | undefined>;

export const DEFAULT_HUB_ENDPOINT = "https://huggingface.co";

/** Token variables, first set wins. */
export const TOKEN_VARS = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUB_TOKEN"] as const;

/** Where the listing of a cached revision is kept, so a cache hit needs no network at all. */
const LISTING_FILE = ".hearth-files.json";

/** A listing answer or response headers slower than this mean a dead hub, not a slow one. */
const HEADERS_TIMEOUT_MS = 60_000;

/** `HF_ENDPOINT` without a trailing slash, or the public hub. */
export function hubEndpoint(env: Env = Deno.env.toObject()): string {
  const raw = env.HF_ENDPOINT?.trim();
  return (raw ? raw : DEFAULT_HUB_ENDPOINT).replace(/\/+$/, "");
}

/** The hub token from the first of {@linkcode TOKEN_VARS} that is set, or undefined. */
export function hubToken(env: Env = Deno.env.toObject()): string | undefined {
  for (const name of TOKEN_VARS) {
    const v = env[name]?.trim();
    if (v) return v;
  }
  return undefined;
}

// Hub rules: letters, digits, `-`, `_`, `.`; no leading/trailing `-`/`.`, no `--` or `..`
// (which also keeps the `{owner}--{repo}` cache name unambiguous), at most 96 characters.
const ID_PART = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$/;

/** Splits `owner/repo`, or returns undefined when `s` is not a hub model id. */
export function parseHubId(s: string): { owner: string; repo: string } | undefined {
  const parts = s.split("/");
  if (parts.length !== 2) return undefined;
  const [owner, repo] = parts;
  for (const p of parts) {
    if (!ID_PART.test(p) || p.includes("--") || p.includes("..")) return undefined;
  }
  return { owner, repo };
}

// ---------------------------------------------------------------- choosing a file

const SHARD = /-(\d{5})-of-(\d{5})\.gguf$/i;

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

function isGguf(name: string): boolean {
  return name.toLowerCase().endsWith(".gguf");
}

/** Other shards of a split model (`x-00001-of-00003.gguf`) that must sit beside `file`. */
export function shardSiblings(file: string): string[] {
  const m = SHARD.exec(file);
  if (!m) return [];
  const total = Number(m[2]);
  const stem = file.slice(0, m.index);
  const out: string[] = [];
  for (let i = 1; i <= total; i++) {
    const name = `${stem}-${String(i).padStart(5, "0")}-of-${m[2]}.gguf`;
    if (name !== file) out.push(name);
  }
  return out;
}

/**
 * Picks the GGUF to load among `files` (paths relative to a repo or directory named `where`):
 * `modelFile` when given, else the only candidate. A split model counts once (by its first
 * shard) and `mmproj*` projector files are never picked on their own, since neither is a choice
 * a user would want to be asked about. Throws a one-line Error listing the .gguf files.
 */
export function pickGguf(files: string[], modelFile: string | undefined, where: string): string {
  const ggufs = files.filter(isGguf).sort();
  const list = ggufs.length ? ggufs.join(", ") : "none";
  if (modelFile !== undefined) {
    const want = modelFile.replace(/^\.\/+/, "");
    if (files.includes(want)) return want;
    throw new Error(`${where} has no file ${modelFile}; its .gguf files: ${list}`);
  }
  const candidates = ggufs.filter((f) => {
    const m = SHARD.exec(f);
    return (!m || Number(m[1]) === 1) && !baseName(f).toLowerCase().startsWith("mmproj");
  });
  if (candidates.length === 1) return candidates[0];
  if (ggufs.length === 0) {
    throw new Error(`${where} has no .gguf file; Hearth loads GGUF models only`);
  }
  throw new Error(`${where} has several .gguf files (${list}); pick one with --model-file NAME`);
}

// ---------------------------------------------------------------- listing

/** Options shared by the hub calls. */
export type HubOptions = {
  /** Branch, tag or commit; default `main`. */
  revision?: string;
  /** Where `HF_ENDPOINT` and the token variables are read; default `Deno.env.toObject()`. */
  env?: Env;
};

function authHeaders(env: Env): Record<string, string> {
  const token = hubToken(env);
  // identity: a compressed body would not match Content-Length, the completeness check.
  const h: Record<string, string> = { "user-agent": "hearth", "accept-encoding": "identity" };
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

// Clears its timer once headers arrive, so a long download is never cut and tests see no
// leaked timers.
async function hubFetch(url: string, env: Env): Promise<Response> {
  const endpoint = hubEndpoint(env);
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), HEADERS_TIMEOUT_MS);
  try {
    return await fetch(url, { headers: authHeaders(env), signal: ctl.signal });
  } catch (e) {
    const why = ctl.signal.aborted
      ? `no answer in ${HEADERS_TIMEOUT_MS / 1000}s`
      : (e as Error).message;
    throw new Error(`cannot reach the hub at ${endpoint}: ${why} (HF_ENDPOINT picks another)`);
  } finally {
    clearTimeout(timer);
  }
}

function refused(status: number, what: string, env: Env): Error {
  const hint = hubToken(env)
    ? "the token in HF_TOKEN was refused or cannot read it"
    : "it may be private or gated: set HF_TOKEN to a token that can read it";
  return new Error(`hub refused access to ${what} (HTTP ${status}): ${hint}`);
}

function revisionPath(revision: string): string {
  return encodeURIComponent(revision);
}

/** Lists the files of a hub repo (`siblings[].rfilename` of `/api/models/{id}`). */
export async function listRepoFiles(id: string, options: HubOptions = {}): Promise<string[]> {
  const env = options.env ?? Deno.env.toObject();
  const revision = options.revision ?? "main";
  const endpoint = hubEndpoint(env);
  const url = revision === "main"
    ? `${endpoint}/api/models/${id}`
    : `${endpoint}/api/models/${id}/revision/${revisionPath(revision)}`;
  const res = await hubFetch(url, env);
  if (!res.ok) {
    await res.body?.cancel();
    if (res.status === 401 || res.status === 403) throw refused(res.status, `repo ${id}`, env);
    if (res.status === 404) {
      throw new Error(
        revision === "main"
          ? `repo ${id} not found on ${endpoint}`
          : `repo ${id} or its revision ${revision} not found on ${endpoint}`,
      );
    }
    throw new Error(`hub ${endpoint} answered HTTP ${res.status} when listing ${id}`);
  }
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    throw new Error(`hub ${endpoint} sent a listing of ${id} that is not JSON`);
  }
  const siblings = (body as { siblings?: unknown })?.siblings;
  if (!Array.isArray(siblings)) {
    throw new Error(`hub ${endpoint} sent a listing of ${id} without "siblings"`);
  }
  return siblings
    .map((s) => (s as { rfilename?: unknown })?.rfilename)
    .filter((f): f is string => typeof f === "string");
}

// ---------------------------------------------------------------- download

/** Progress of one file; `total` is undefined when the hub sent no Content-Length. */
export type DownloadProgress = { file: string; done: number; total?: number; seconds: number };

export type DownloadOptions = HubOptions & {
  /** Hub id `owner/repo`. */
  repo: string;
  /** File inside the repo; default: its only .gguf. */
  modelFile?: string;
  dataDir: string;
  /** Called at most once a second while downloading, and once at the end of each file. */
  onProgress?: (p: DownloadProgress) => void;
};

// Hub file names come from the network: refuse any that would escape the cache dir.
function safeRelative(file: string): boolean {
  return file.length > 0 && !file.startsWith("/") && !file.includes("\\") &&
    !file.split("/").some((s) => s === "" || s === "." || s === "..");
}

function mb(n: number): string {
  return `${(n / 1e6).toFixed(1)} MB`;
}

/** Progress lines on stderr: what a person watching `serve` start wants to see. */
export function stderrProgress(p: DownloadProgress): void {
  const of = p.total ? ` of ${mb(p.total)} (${Math.floor((p.done / p.total) * 100)}%)` : "";
  const rate = p.seconds > 0 ? `, ${mb(p.done / p.seconds)}/s` : "";
  const line = `hearth: downloading ${p.file}: ${mb(p.done)}${of}${rate}\n`;
  Deno.stderr.writeSync(new TextEncoder().encode(line));
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

async function writeAll(f: Deno.FsFile, chunk: Uint8Array): Promise<void> {
  let off = 0;
  while (off < chunk.length) off += await f.write(chunk.subarray(off));
}

/**
 * Opens `{dest}.part` and holds its exclusive lock. Returns undefined when `dest` is already
 * complete (another process finished it while this one waited). The inode check catches a
 * `.part` that was renamed or removed between our open and our lock.
 */
async function lockPart(part: string, dest: string): Promise<Deno.FsFile | undefined> {
  for (;;) {
    const f = await Deno.open(part, { read: true, write: true, create: true });
    try {
      await f.lock(true);
      const mine = await f.stat();
      const now = await Deno.stat(part).catch(() => undefined);
      const current = now !== undefined && now.ino === mine.ino;
      if (await exists(dest)) {
        // A `.part` of our own making is empty; the finished one was renamed away.
        if (current) await Deno.remove(part).catch(() => {});
        f.close();
        return undefined;
      }
      if (current) return f;
    } catch (e) {
      f.close();
      throw e;
    }
    f.close();
  }
}

async function downloadFile(
  url: string,
  dest: string,
  label: string,
  notFound: string,
  env: Env,
  onProgress?: (p: DownloadProgress) => void,
): Promise<void> {
  await Deno.mkdir(dest.slice(0, dest.lastIndexOf("/")), { recursive: true });
  const part = `${dest}.part`;
  const f = await lockPart(part, dest);
  if (!f) return;
  try {
    await f.truncate(0);
    const res = await hubFetch(url, env);
    if (!res.ok || !res.body) {
      await res.body?.cancel();
      if (res.status === 401 || res.status === 403) throw refused(res.status, label, env);
      if (res.status === 404) throw new Error(notFound);
      throw new Error(`hub ${hubEndpoint(env)} answered HTTP ${res.status} for ${label}`);
    }
    const header = res.headers.get("content-length");
    const total = header !== null && /^\d+$/.test(header) && !res.headers.get("content-encoding")
      ? Number(header)
      : undefined;
    const start = performance.now();
    let last = start;
    let done = 0;
    const reader = res.body.getReader();
    try {
      for (;;) {
        let next: ReadableStreamReadResult<Uint8Array>;
        try {
          next = await reader.read();
        } catch (e) {
          const got = total === undefined ? `${done} bytes` : `${done} of ${total} bytes`;
          throw new Error(
            `download of ${label} was interrupted after ${got} (${(e as Error).message}); ` +
              "start again to retry",
          );
        }
        if (next.done) break;
        // A write error (disk full) is reported as itself, not as a network problem.
        await writeAll(f, next.value);
        done += next.value.length;
        const now = performance.now();
        if (onProgress && now - last >= 1000) {
          last = now;
          onProgress({ file: label, done, total, seconds: (now - start) / 1000 });
        }
      }
    } catch (e) {
      await reader.cancel().catch(() => {});
      throw e;
    }
    if (total !== undefined && done !== total) {
      throw new Error(`download of ${label} is incomplete: got ${done} of ${total} bytes`);
    }
    await f.syncData();
    await Deno.rename(part, dest);
    onProgress?.({ file: label, done, total, seconds: (performance.now() - start) / 1000 });
  } catch (e) {
    await Deno.remove(part).catch(() => {});
    throw e;
  } finally {
    f.close();
  }
}

/** `{dataDir}/hub/{owner}--{repo}/{revision}`: where a revision's files are cached. */
export function hubCacheDir(dataDir: string, repo: string, revision = "main"): string {
  const id = parseHubId(repo);
  if (!id) throw new Error(`not a hub id owner/repo: ${repo}`);
  return `${dataDir}/hub/${id.owner}--${id.repo}/${encodeURIComponent(revision)}`;
}

async function readListing(dir: string): Promise<string[] | undefined> {
  try {
    const v = JSON.parse(await Deno.readTextFile(`${dir}/${LISTING_FILE}`));
    return Array.isArray(v) && v.every((s) => typeof s === "string") ? v : undefined;
  } catch {
    return undefined;
  }
}

async function writeListing(dir: string, files: string[]): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  const tmp = `${dir}/${LISTING_FILE}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(files));
  await Deno.rename(tmp, `${dir}/${LISTING_FILE}`);
}

/**
 * Path of the chosen GGUF of hub repo `repo`, downloading it (and the other shards of a split
 * model) into the cache first if needed. A complete cached file is returned without touching
 * the network: the repo's listing is cached beside it so the choice of file is made offline too.
 */
export async function downloadHubModel(options: DownloadOptions): Promise<string> {
  const env = options.env ?? Deno.env.toObject();
  const revision = options.revision ?? "main";
  const repo = options.repo;
  if (!parseHubId(repo)) throw new Error(`not a hub id owner/repo: ${repo}`);
  const dir = hubCacheDir(options.dataDir, repo, revision);
  const where = revision === "main" ? `hub repo ${repo}` : `hub repo ${repo}@${revision}`;

  const allCached = async (file: string) => {
    for (const f of [file, ...shardSiblings(file)]) {
      if (!(await exists(`${dir}/${f}`))) return false;
    }
    return true;
  };

  const cachedListing = await readListing(dir);
  if (options.modelFile !== undefined && safeRelative(options.modelFile)) {
    const file = options.modelFile.replace(/^\.\/+/, "");
    if (await allCached(file)) return `${dir}/${file}`;
  } else if (options.modelFile === undefined && cachedListing) {
    const file = pickGguf(cachedListing, undefined, where);
    if (await allCached(file)) return `${dir}/${file}`;
  }

  const files = await listRepoFiles(repo, { revision, env });
  const file = pickGguf(files, options.modelFile, where);
  if (!safeRelative(file)) throw new Error(`${where} lists an unsafe file name: ${file}`);
  await writeListing(dir, files);
  const endpoint = hubEndpoint(env);
  const shards = shardSiblings(file);
  const missing = shards.filter((s) => !files.includes(s));
  if (missing.length) {
    throw new Error(`${where} lacks shards of split model ${file}: ${missing.join(", ")}`);
  }
  const needed = [file, ...shards];
  for (const f of needed) {
    if (!safeRelative(f)) throw new Error(`${where} lists an unsafe file name: ${f}`);
    const dest = `${dir}/${f}`;
    if (await exists(dest)) continue;
    const path = f.split("/").map(encodeURIComponent).join("/");
    const url = `${endpoint}/${repo}/resolve/${revisionPath(revision)}/${path}`;
    const notFound = `file ${f} not found in ${where} on ${endpoint}`;
    await downloadFile(url, dest, `${repo}/${f}`, notFound, env, options.onProgress);
  }
  return `${dir}/${file}`;
}
