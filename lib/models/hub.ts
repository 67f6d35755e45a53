/**
 * GGUF downloads from a Hugging Face-compatible hub, kept in the standard Hugging Face hub cache
 * so files fetched by `huggingface_hub`, `hf`, llama.cpp or any other tool that uses that cache
 * are reused here, and ours are reused by them.
 *
 * Cache root: `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`), else `$HF_HOME/hub`, else
 * `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`, all read from an `env`
 * object rather than `Deno.env` so callers and tests can run several hubs and caches side by
 * side (an `env` with none of them, not even `HOME`, uses `{dataDir}/huggingface/hub`). Inside
 * it, as `huggingface_hub` lays it out:
 *
 * ```
 * models--{owner}--{repo}/blobs/{etag}          bytes, named by the hub's ETag (sha256 for LFS)
 * models--{owner}--{repo}/snapshots/{commit}/{file} -> ../../blobs/{etag}  (relative symlink)
 * models--{owner}--{repo}/refs/{revision}       the commit hash the revision pointed to
 * .locks/models--{owner}--{repo}/{etag}.lock    flock held while a blob downloads
 * ```
 *
 * Resolution: when `refs/{revision}` names a commit whose snapshot already holds the file and
 * every shard of a split model (without `--model-file`: a GGUF model chosen among those the
 * snapshot holds), that path is returned with no network call at all, so a start works offline
 * and costs nothing; the price is that a newer commit on the hub is not looked for. Otherwise
 * `GET {endpoint}/api/models/{owner}/{repo}/revision/{revision}` gives the commit (`sha`) and the
 * listing (`siblings[].rfilename`); a `HEAD` on `{endpoint}/{owner}/{repo}/resolve/{commit}/{file}`
 * gives the blob's ETag (`X-Linked-Etag` first), size (`X-Linked-Size`) and, for LFS files, a
 * redirect to the CDN, which is fetched without the token. `HF_HUB_OFFLINE=1` forbids the
 * network: the cache is used or the call fails saying what is missing. `refs/{revision}` is
 * written once every file is in place, so a failed download leaves the old commit usable.
 *
 * A blob downloads into `blobs/{etag}.incomplete` under the lock, so two processes fetch it once;
 * an interrupted download resumes with `Range: bytes=N-` on the next start (a `200` answer
 * restarts it). LFS blobs, whose ETag is their sha256, are verified before being renamed into
 * place; a mismatch deletes the partial file.
 *
 * The token comes from `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` or `HUB_TOKEN`, else the token file
 * `hf auth login` writes (`$HF_TOKEN_PATH`, else `$HF_HOME/token`); it is sent only to the hub and
 * never appears in a log line or error.
 *
 * @example
 * ```ts
 * import { downloadHubModel } from "./hub.ts";
 * // ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/{commit}/
 * //   qwen2.5-0.5b-instruct-q4_k_m.gguf
 * const path = await downloadHubModel({
 *   repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
 *   env: Deno.env.toObject(),
 * });
 * ```
 * @module
 */
import { createHash } from "node:crypto";

/** Environment variables as a plain object (`Deno.env.toObject()` by default). */
export type Env = Record<string, string | undefined>;

export const DEFAULT_HUB_ENDPOINT = "https://huggingface.co";

/** Token variables, first set wins. */
export const TOKEN_VARS = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUB_TOKEN"] as const;

/**
 * Quantizations in the order a GGUF is chosen when a repo holds several and no `--model-file` is
 * given: the usual size/quality sweet spot first, then larger-but-better, then the legacy and
 * low-bit types, then the unquantized ones (large, and `--isq` can shrink them). A file whose
 * name carries none of these ranks last.
 */
export const GGUF_PREFERENCE = [
  "Q4_K_M",
  "Q4_K_S",
  "Q5_K_M",
  "Q5_K_S",
  "Q6_K",
  "Q8_0",
  "Q4_0",
  "IQ4_XS",
  "IQ4_NL",
  "Q4_1",
  "Q5_0",
  "Q5_1",
  "Q3_K_L",
  "Q3_K_M",
  "Q3_K_S",
  "Q2_K",
  "F16",
  "BF16",
  "F32",
] as const;

/** A listing answer or response headers slower than this mean a dead hub, not a slow one. */
const HEADERS_TIMEOUT_MS = 60_000;
/** A body that sends nothing for this long is a dead connection: fail so a restart resumes. */
const STALL_TIMEOUT_MS = 60_000;
/** The hub names commits by full sha1. */
const COMMIT = /^[0-9a-f]{40}$/;
const SHA256 = /^[0-9a-f]{64}$/;

/** `HF_ENDPOINT` without a trailing slash, or the public hub. */
export function hubEndpoint(env: Env = Deno.env.toObject()): string {
  const raw = env.HF_ENDPOINT?.trim();
  return (raw ? raw : DEFAULT_HUB_ENDPOINT).replace(/\/+$/, "");
}

function expandHome(path: string, env: Env): string {
  const home = env.HOME ?? env.USERPROFILE;
  return path === "~" || path.startsWith("~/") ? `${home ?? "~"}${path.slice(1)}` : path;
}

function set(v: string | undefined): string | undefined {
  const t = v?.trim();
  return t ? t : undefined;
}

/** `HF_HOME`, defaulting the way `huggingface_hub` does; undefined when no home is known. */
function hfHome(env: Env): string | undefined {
  const home = set(env.HF_HOME);
  if (home) return expandHome(home, env);
  const xdg = set(env.XDG_CACHE_HOME);
  if (xdg) return `${expandHome(xdg, env)}/huggingface`;
  const user = set(env.HOME) ?? set(env.USERPROFILE);
  return user ? `${user}/.cache/huggingface` : undefined;
}

function absolute(path: string): string {
  return path.startsWith("/") ? path : `${Deno.cwd()}/${path}`;
}

/**
 * The hub cache root: `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `$HF_HOME/hub`,
 * `$XDG_CACHE_HOME/huggingface/hub`, `$HOME/.cache/huggingface/hub`, first set wins. An `env`
 * naming none of them (a caller's hand-made one) falls back to `{fallbackDir}/huggingface/hub`.
 */
export function hubCacheRoot(env: Env = Deno.env.toObject(), fallbackDir?: string): string {
  const direct = set(env.HF_HUB_CACHE) ?? set(env.HUGGINGFACE_HUB_CACHE);
  if (direct) return absolute(expandHome(direct, env)).replace(/\/+$/, "");
  const home = hfHome(env);
  if (home) return absolute(`${home.replace(/\/+$/, "")}/hub`);
  if (fallbackDir) return absolute(`${fallbackDir.replace(/\/+$/, "")}/huggingface/hub`);
  throw new Error("no hub cache directory: set HF_HUB_CACHE, HF_HOME or HOME");
}

/** Whether `HF_HUB_OFFLINE` (or the older `TRANSFORMERS_OFFLINE`) forbids network calls. */
export function hubOffline(env: Env = Deno.env.toObject()): boolean {
  const v = set(env.HF_HUB_OFFLINE) ?? set(env.TRANSFORMERS_OFFLINE);
  return v !== undefined && ["1", "ON", "YES", "TRUE"].includes(v.toUpperCase());
}

/** The token and where it came from (a variable name or a file path), never logged itself. */
function tokenSource(env: Env): { token: string; from: string } | undefined {
  for (const name of TOKEN_VARS) {
    const v = set(env[name]);
    if (v) return { token: v, from: name };
  }
  const explicit = set(env.HF_TOKEN_PATH);
  const home = hfHome(env);
  const path = explicit ? expandHome(explicit, env) : home ? `${home}/token` : undefined;
  if (!path) return undefined;
  try {
    const v = Deno.readTextFileSync(path).trim();
    return v ? { token: v, from: path } : undefined;
  } catch {
    return undefined;
  }
}

/** The hub token: the first of {@linkcode TOKEN_VARS} that is set, else the login token file. */
export function hubToken(env: Env = Deno.env.toObject()): string | undefined {
  return tokenSource(env)?.token;
}

// Hub rules: letters, digits, `-`, `_`, `.`; no leading/trailing `-`/`.`, no `--` or `..`
// (which also keeps the `models--{owner}--{repo}` cache name unambiguous), at most 96 characters.
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

/** `models--{owner}--{repo}`: the repo's folder under the cache root. */
export function repoFolderName(repo: string): string {
  const id = parseHubId(repo);
  if (!id) throw new Error(`not a hub id owner/repo: ${repo}`);
  return `models--${id.owner}--${id.repo}`;
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

// llama.cpp finds the other shards from the first one's name, so the first is what gets loaded.
function firstShard(file: string): string {
  const m = SHARD.exec(file);
  return m ? `${file.slice(0, m.index)}-00001-of-${m[2]}.gguf` : file;
}

/** The {@linkcode GGUF_PREFERENCE} tag in a GGUF's path (`model-Q4_K_M.gguf` -> `Q4_K_M`). */
export function ggufQuant(file: string): string | undefined {
  const stem = file.replace(SHARD, "").replace(/\.gguf$/i, "").toUpperCase();
  // Tags are whole name parts: `BF16` must not count as `F16`, nor `Q4_K_S` as `Q4_K`.
  return GGUF_PREFERENCE.find((tag) => new RegExp(`(^|[-._/])${tag}($|[-._/])`).test(stem));
}

/**
 * Picks the GGUF to load among `files` (paths relative to a repo or directory named `where`):
 * `modelFile` when given, else the only model, else the one whose quantization comes first in
 * {@linkcode GGUF_PREFERENCE} (named through `log`). A split model counts once (by its first
 * shard) and `mmproj*` projector files are never picked on their own. When the names do not
 * settle it (no known tag, or two models with the best one) it throws a one-line Error listing
 * the .gguf files rather than guess between different models.
 */
export function pickGguf(
  files: string[],
  modelFile: string | undefined,
  where: string,
  log?: (line: string) => void,
): string {
  const ggufs = files.filter(isGguf).sort();
  const list = ggufs.length ? ggufs.join(", ") : "none";
  if (modelFile !== undefined) {
    const want = modelFile.replace(/^\.\/+/, "");
    if (files.includes(want)) return want;
    throw new Error(`${where} has no file ${modelFile}; its .gguf files: ${list}`);
  }
  if (ggufs.length === 0) {
    throw new Error(`${where} has no .gguf file; Hearth loads GGUF models only`);
  }
  const candidates = ggufs.filter((f) => {
    const m = SHARD.exec(f);
    return (!m || Number(m[1]) === 1) && !baseName(f).toLowerCase().startsWith("mmproj");
  });
  if (candidates.length === 1) return candidates[0];
  if (candidates.length === 0) {
    throw new Error(
      `${where} has only projector .gguf files (${list}); name one with --model-file`,
    );
  }
  const rank = (f: string) => {
    const tag = ggufQuant(f);
    return tag === undefined ? Infinity : GGUF_PREFERENCE.indexOf(tag as never);
  };
  const best = Math.min(...candidates.map(rank));
  const winners = candidates.filter((f) => rank(f) === best);
  if (best === Infinity || winners.length > 1) {
    throw new Error(`${where} has several .gguf files (${list}); pick one with --model-file NAME`);
  }
  log?.(
    `${where}: chose ${winners[0]} (${GGUF_PREFERENCE[best]}) among ${candidates.length} GGUF ` +
      `models, by the preference ${GGUF_PREFERENCE.slice(0, 6).join(" > ")} > ...; ` +
      "--model-file NAME picks another",
  );
  return winners[0];
}

// ---------------------------------------------------------------- talking to the hub

/** Options shared by the hub calls. */
export type HubOptions = {
  /** Branch, tag or commit; default `main`. */
  revision?: string;
  /** Where `HF_ENDPOINT`, the token and cache variables are read; default `Deno.env.toObject()`. */
  env?: Env;
};

function headers(token: string | undefined, extra: Record<string, string> = {}) {
  // identity: a compressed body would not match the size the hub announced, nor its sha256.
  const h: Record<string, string> = {
    "user-agent": "hearth",
    "accept-encoding": "identity",
    ...extra,
  };
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

/**
 * `fetch`, or the reason it failed when the server could not be reached. The timer covers the
 * headers only, so a long download is never cut by it and tests see no leaked timers.
 */
async function tryFetch(url: string, init: RequestInit): Promise<Response | string> {
  const ctl = new AbortController();
  const outer = init.signal;
  outer?.addEventListener("abort", () => ctl.abort(outer.reason), { once: true });
  const timer = setTimeout(() => ctl.abort(), HEADERS_TIMEOUT_MS);
  try {
    return await fetch(url, { ...init, signal: ctl.signal });
  } catch (e) {
    return ctl.signal.aborted && !outer?.aborted
      ? `no answer in ${HEADERS_TIMEOUT_MS / 1000}s`
      : (e as Error).message;
  } finally {
    clearTimeout(timer);
  }
}

/** The call being made, so every error can name the repo, revision and hub. */
type Ctx = {
  repo: string;
  revision: string;
  endpoint: string;
  env: Env;
  /** The repo's listing, once known: a 404 on a file lists its GGUF files. */
  files?: string[];
};

function repoLabel(ctx: Ctx): string {
  return ctx.revision === "main" ? `hub repo ${ctx.repo}` : `hub repo ${ctx.repo}@${ctx.revision}`;
}

function refusal(res: Response, ctx: Ctx, file?: string): Error {
  const what = file === undefined ? repoLabel(ctx) : `${file} in ${repoLabel(ctx)}`;
  const code = res.headers.get("x-error-code") ?? "";
  const source = tokenSource(ctx.env);
  const page = `${ctx.endpoint}/${ctx.repo}`;
  if (res.status === 403 || code === "GatedRepo") {
    const then = source
      ? `with the account whose token is in ${source.from}`
      : "then set HF_TOKEN to a token of that account";
    return new Error(
      `${what} is gated (HTTP ${res.status}): accept its terms at ${page} ${then}`,
    );
  }
  if (res.status === 401) {
    return new Error(
      source
        ? `${what}: the hub refused the token from ${source.from} (HTTP 401): it is invalid or ` +
          "expired, or cannot read this repo; set HF_TOKEN to a valid read token"
        : `${what} needs a token (HTTP 401): the repo is private, gated or does not exist; ` +
          "set HF_TOKEN to a token that can read it",
    );
  }
  if (res.status === 404) {
    if (code === "RevisionNotFound") {
      return new Error(`hub repo ${ctx.repo} has no revision ${ctx.revision} on ${ctx.endpoint}`);
    }
    if (file !== undefined && code !== "RepoNotFound") {
      const ggufs = (ctx.files ?? []).filter(isGguf).sort().join(", ") || "none";
      return new Error(`file ${file} not found in ${repoLabel(ctx)}; its .gguf files: ${ggufs}`);
    }
    return new Error(
      ctx.revision === "main" || code === "RepoNotFound"
        ? `hub repo ${ctx.repo} not found on ${ctx.endpoint}`
        : `hub repo ${ctx.repo} or its revision ${ctx.revision} not found on ${ctx.endpoint}`,
    );
  }
  const later = res.status >= 500 ? "; try again later" : "";
  return new Error(`hub ${ctx.endpoint} answered HTTP ${res.status} for ${what}${later}`);
}

function unreachable(ctx: Ctx, why: string, cacheDir?: string): Error {
  const uncached = cacheDir ? `; ${ctx.repo} is not in the cache at ${cacheDir}` : "";
  return new Error(
    `cannot reach the hub at ${ctx.endpoint}: ${why}${uncached} (check the network or ` +
      "HF_ENDPOINT)",
  );
}

/** The commit a revision points to and the repo's file listing at that commit. */
export type RepoInfo = { commit: string; files: string[] };

async function fetchRepoInfo(ctx: Ctx, cacheDir?: string): Promise<RepoInfo> {
  const url = `${ctx.endpoint}/api/models/${ctx.repo}/revision/${encodeURIComponent(ctx.revision)}`;
  const res = await tryFetch(url, { headers: headers(hubToken(ctx.env)) });
  if (typeof res === "string") throw unreachable(ctx, res, cacheDir);
  if (!res.ok) {
    await res.body?.cancel();
    throw refusal(res, ctx);
  }
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    throw new Error(`hub ${ctx.endpoint} sent a listing of ${ctx.repo} that is not JSON`);
  }
  const { sha, siblings } = (body ?? {}) as { sha?: unknown; siblings?: unknown };
  if (!Array.isArray(siblings)) {
    throw new Error(`hub ${ctx.endpoint} sent a listing of ${ctx.repo} without "siblings"`);
  }
  const files = siblings
    .map((s) => (s as { rfilename?: unknown })?.rfilename)
    .filter((f): f is string => typeof f === "string");
  // A hub that names no commit still works: the revision itself names the snapshot.
  const commit = typeof sha === "string" && COMMIT.test(sha) ? sha : ctx.revision;
  return { commit, files };
}

/**
 * `GET /api/models/{id}/revision/{revision}`: the commit (`sha`) and the files
 * (`siblings[].rfilename`). Always asks the hub, even with `HF_HUB_OFFLINE` set.
 */
export async function repoInfo(id: string, options: HubOptions = {}): Promise<RepoInfo> {
  const env = options.env ?? Deno.env.toObject();
  if (!parseHubId(id)) throw new Error(`not a hub id owner/repo: ${id}`);
  const ctx = { repo: id, revision: options.revision ?? "main", endpoint: hubEndpoint(env), env };
  return await fetchRepoInfo(ctx);
}

/** Lists the files of a hub repo at a revision (see {@linkcode repoInfo}). */
export async function listRepoFiles(id: string, options: HubOptions = {}): Promise<string[]> {
  return (await repoInfo(id, options)).files;
}

/** What the hub says about one file: its blob name, size and where its bytes are. */
type FileMeta = { etag: string; size?: number; url: string; sendToken: boolean };

/** `W/"abc"` -> `abc`: the blob name `huggingface_hub` gives an ETag. */
function normalizeEtag(v: string | null): string | undefined {
  const e = v?.trim().replace(/^W\//, "").replace(/^"|"$/g, "");
  return e ? e : undefined;
}

/**
 * `HEAD` on the resolve URL. Relative redirects are followed (a renamed repo); the first answer
 * that speaks about the file (`X-Repo-Commit` or `X-Linked-Etag`) is the hub's, and a redirect
 * it makes is to the CDN, which gets no token: the URL it gives is already signed.
 */
async function fileMeta(ctx: Ctx, commit: string, file: string): Promise<FileMeta> {
  const token = hubToken(ctx.env);
  const path = file.split("/").map(encodeURIComponent).join("/");
  let url = `${ctx.endpoint}/${ctx.repo}/resolve/${encodeURIComponent(commit)}/${path}`;
  for (let hops = 0; hops < 10; hops++) {
    const res = await tryFetch(url, {
      method: "HEAD",
      headers: headers(token),
      redirect: "manual",
    });
    if (typeof res === "string") {
      throw new Error(
        `cannot reach the hub at ${ctx.endpoint} for ${file} in ${repoLabel(ctx)}: ${res}; ` +
          "start again to retry",
      );
    }
    await res.body?.cancel();
    const location = res.headers.get("location");
    const fromHub = res.headers.has("x-repo-commit") || res.headers.has("x-linked-etag");
    const redirect = res.status >= 300 && res.status < 400 && location !== null;
    // Only a path, as `huggingface_hub` follows: a redirect to another host is the CDN's.
    if (redirect && !fromHub && !/^([a-z][a-z0-9+.-]*:|\/\/)/i.test(location)) {
      url = new URL(location, url).href;
      continue;
    }
    if (!res.ok && !redirect) throw refusal(res, ctx, file);
    const etag = normalizeEtag(res.headers.get("x-linked-etag")) ??
      normalizeEtag(res.headers.get("etag"));
    if (!etag || !/^[A-Za-z0-9._-]+$/.test(etag)) {
      throw new Error(
        `hub ${ctx.endpoint} sent no usable ETag for ${file} in ${repoLabel(ctx)}; ` +
          "is HF_ENDPOINT a Hugging Face hub?",
      );
    }
    const sizeHeader = res.headers.get("x-linked-size") ??
      (redirect ? null : res.headers.get("content-length"));
    const size = sizeHeader !== null && /^\d+$/.test(sizeHeader) ? Number(sizeHeader) : undefined;
    if (!redirect) return { etag, size, url, sendToken: true };
    const target = new URL(location!, url);
    return {
      etag,
      size,
      url: target.href,
      sendToken: target.origin === new URL(url).origin,
    };
  }
  throw new Error(`hub ${ctx.endpoint} redirected ${file} in ${repoLabel(ctx)} too many times`);
}

// ---------------------------------------------------------------- progress

/** Progress of one file; `total` is undefined when the hub sent no size. */
export type DownloadProgress = {
  file: string;
  /** Bytes on disk, including any resumed from an earlier start. */
  done: number;
  total?: number;
  /** Seconds since this download (or resumption) started. */
  seconds: number;
  /** Bytes that were already on disk when this start resumed the download. */
  resumed?: number;
  /** Set on the last report of a file, once it is complete. */
  final?: boolean;
};

function mb(n: number): string {
  return `${(n / 1e6).toFixed(1)} MB`;
}

function rate(p: DownloadProgress): string {
  const fresh = p.done - (p.resumed ?? 0);
  return p.seconds > 0 ? `${mb(fresh / p.seconds)}/s` : "";
}

/**
 * A progress sink: a bar redrawn in place when `terminal`, else plain lines for logs, one per
 * file at most every 5 s or 10%, plus the first and the last.
 */
export function progressReporter(
  out: { terminal: boolean; write: (text: string) => void },
): (p: DownloadProgress) => void {
  const printed = new Map<string, { seconds: number; pct: number }>();
  return (p) => {
    const pct = p.total ? Math.floor((p.done / p.total) * 100) : undefined;
    if (out.terminal) {
      const width = 24;
      const fill = pct === undefined ? 0 : Math.round((Math.min(pct, 100) / 100) * width);
      const bar = pct === undefined
        ? ""
        : ` [${"#".repeat(fill)}${"-".repeat(width - fill)}] ${pct}%`;
      const size = p.total ? `${mb(p.done)} / ${mb(p.total)}` : mb(p.done);
      const line = `hearth: ${p.file}${bar} ${size} ${rate(p)}`.trimEnd();
      out.write(`\r\x1b[2K${line}${p.final ? "\n" : ""}`);
      return;
    }
    const last = printed.get(p.file);
    if (p.final) {
      printed.delete(p.file);
      out.write(`hearth: downloaded ${p.file}: ${mb(p.done)} in ${p.seconds.toFixed(1)}s\n`);
      return;
    }
    const due = last === undefined || p.seconds - last.seconds >= 5 ||
      (pct !== undefined && pct - last.pct >= 10);
    if (!due) return;
    printed.set(p.file, { seconds: p.seconds, pct: pct ?? 0 });
    const of = p.total ? ` of ${mb(p.total)} (${pct}%)` : "";
    const r = rate(p);
    out.write(`hearth: downloading ${p.file}: ${mb(p.done)}${of}${r ? `, ${r}` : ""}\n`);
  };
}

let stderrReporter: ((p: DownloadProgress) => void) | undefined;

/** Progress on stderr: a bar on a terminal, throttled lines when stderr goes to a log. */
export function stderrProgress(p: DownloadProgress): void {
  stderrReporter ??= progressReporter({
    terminal: Deno.stderr.isTerminal(),
    write: (text) => Deno.stderr.writeSync(new TextEncoder().encode(text)),
  });
  stderrReporter(p);
}

function stderrLog(line: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(`hearth: ${line}\n`));
}

// ---------------------------------------------------------------- the cache on disk

export type DownloadOptions = HubOptions & {
  /** Hub id `owner/repo`. */
  repo: string;
  /** File inside the repo; default: chosen by {@linkcode pickGguf}. */
  modelFile?: string;
  /** Only used when `env` names no cache root at all: `{dataDir}/huggingface/hub`. */
  dataDir?: string;
  /**
   * Called at most once a second while downloading, and once at the end of each file; default
   * {@linkcode stderrProgress}.
   */
  onProgress?: (p: DownloadProgress) => void;
  /** Status lines (the file chosen, cache use, resumption); default stderr. */
  log?: (line: string) => void;
};

// Hub file names and revisions come from outside: refuse any that would escape the cache dir.
function safeRelative(file: string): boolean {
  return file.length > 0 && !file.startsWith("/") && !file.includes("\\") &&
    !file.split("/").some((s) => s === "" || s === "." || s === "..");
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) return false;
    throw e;
  }
}

async function readRef(repoDir: string, revision: string): Promise<string | undefined> {
  if (COMMIT.test(revision)) return revision;
  try {
    const v = (await Deno.readTextFile(`${repoDir}/refs/${revision}`)).trim();
    return COMMIT.test(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Writes `path` so that a reader sees the old content or the new, never half of one. */
async function replaceAtomically(path: string, write: (tmp: string) => Promise<void>) {
  await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    await write(tmp);
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
}

/** Every file or link under `dir` that resolves to a file, as paths relative to `dir`. */
async function snapshotFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, prefix: string) => {
    for await (const e of Deno.readDir(d)) {
      const rel = `${prefix}${e.name}`;
      if (e.isDirectory) await walk(`${d}/${e.name}`, `${rel}/`);
      else if (await exists(`${d}/${e.name}`)) out.push(rel);
    }
  };
  await walk(dir, "").catch((e) => {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  });
  return out;
}

/** The file, with every shard of a split model, as named in `snapshot`; undefined if any lacks. */
async function cachedModel(snapshot: string, file: string): Promise<string | undefined> {
  for (const f of [file, ...shardSiblings(file)]) {
    if (!safeRelative(f) || !(await exists(`${snapshot}/${f}`))) return undefined;
  }
  return `${snapshot}/${firstShard(file)}`;
}

function isDiskFull(e: unknown): boolean {
  const err = e as { code?: string; message?: string };
  return err?.code === "ENOSPC" || /os error 28\b|no space left/i.test(err?.message ?? "");
}

async function writeAll(f: Deno.FsFile, chunk: Uint8Array): Promise<void> {
  let off = 0;
  while (off < chunk.length) off += await f.write(chunk.subarray(off));
}

/**
 * Opens `lockPath` and holds its exclusive flock, the same lock `huggingface_hub` takes on that
 * path. The inode check catches a lock file another tool removed between our open and our lock.
 */
async function lockFile(lockPath: string): Promise<Deno.FsFile> {
  await Deno.mkdir(lockPath.slice(0, lockPath.lastIndexOf("/")), { recursive: true });
  for (;;) {
    const f = await Deno.open(lockPath, { read: true, write: true, create: true });
    try {
      await f.lock(true);
      const mine = await f.stat();
      const now = await Deno.stat(lockPath).catch(() => undefined);
      if (now !== undefined && now.ino === mine.ino) return f;
    } catch (e) {
      f.close();
      throw e;
    }
    f.close();
  }
}

type Fetching = {
  ctx: Ctx;
  file: string;
  meta: FileMeta;
  blob: string;
  onProgress?: (p: DownloadProgress) => void;
  log: (line: string) => void;
};

/** Reads the first `length` bytes of `f` into `hash`, for a resumed download's checksum. */
async function hashPrefix(f: Deno.FsFile, length: number, hash: ReturnType<typeof createHash>) {
  await f.seek(0, Deno.SeekMode.Start);
  const buf = new Uint8Array(1 << 20);
  let left = length;
  while (left > 0) {
    const n = await f.read(buf.subarray(0, Math.min(buf.length, left)));
    if (n === null) break;
    hash.update(buf.subarray(0, n));
    left -= n;
  }
}

/** Where a `206` answer starts (`Content-Range: bytes N-...`), 0 for a full `200`. */
function rangeStart(res: Response): number | undefined {
  if (res.status === 200) return 0;
  if (res.status !== 206) return undefined;
  const m = /^bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
  return m ? Number(m[1]) : undefined;
}

/**
 * Downloads into `{blob}.incomplete`, resuming what is there, verifies and renames it to `blob`.
 * The caller holds the blob's lock. A broken connection or a full disk keeps the partial file so
 * the next start resumes; a checksum mismatch deletes it, since resuming would keep the bad bytes.
 */
async function fetchBlob(job: Fetching): Promise<void> {
  const { ctx, file, meta, blob } = job;
  const label = `${ctx.repo}/${file}`;
  const partial = `${blob}.incomplete`;
  const blobsDir = blob.slice(0, blob.lastIndexOf("/"));
  const sha = SHA256.test(meta.etag) ? createHash("sha256") : undefined;
  const f = await Deno.open(partial, { read: true, write: true, create: true });
  try {
    let have = (await f.stat()).size;
    if (meta.size !== undefined && have > meta.size) {
      await f.truncate(0);
      have = 0;
    }
    const ctl = new AbortController();
    const token = meta.sendToken ? hubToken(ctx.env) : undefined;
    const get = (from: number) =>
      tryFetch(meta.url, {
        headers: headers(token, from > 0 ? { range: `bytes=${from}-` } : {}),
        signal: ctl.signal,
      });
    let res: Response | string | undefined;
    if (have > 0 && have === meta.size) {
      // Complete but never verified and renamed (a crash in between): check it, fetch nothing.
      if (sha) await hashPrefix(f, have, sha);
    } else {
      res = await get(have);
      if (have > 0 && typeof res !== "string") {
        let from = rangeStart(res);
        if (res.status === 416 || (res.status === 206 && from !== have)) {
          // Our partial file is not a prefix the server knows: start over.
          await res.body?.cancel();
          res = await get(0);
          from = 0;
        }
        if (typeof res !== "string" && res.ok) {
          if (from === have) {
            job.log(
              `resuming ${label} at ${mb(have)}` + (meta.size ? ` of ${mb(meta.size)}` : ""),
            );
            if (sha) await hashPrefix(f, have, sha);
          } else {
            // A plain 200: the server ignored the range, so the file starts over.
            job.log(`${label}: the server cannot resume; downloading from the start`);
            await f.truncate(0);
            have = 0;
          }
        }
      }
      await f.seek(have, Deno.SeekMode.Start);
    }
    if (typeof res === "string") {
      throw new Error(
        `cannot download ${label}: ${res}; start again to ` +
          (have > 0 ? `resume from ${mb(have)}` : "retry"),
      );
    }
    if (res && !res.ok) {
      await res.body?.cancel();
      if ([401, 403, 404].includes(res.status) && meta.sendToken) throw refusal(res, ctx, file);
      throw new Error(
        `${new URL(meta.url).host} answered HTTP ${res.status} for ${label}; start again to retry`,
      );
    }
    const resumed = have;
    const start = performance.now();
    let last = start;
    let done = have;
    if (res?.body) {
      const reader = res.body.getReader();
      try {
        for (;;) {
          let next: ReadableStreamReadResult<Uint8Array>;
          const stall = setTimeout(() => ctl.abort(), STALL_TIMEOUT_MS);
          try {
            next = await reader.read();
          } catch (e) {
            const why = ctl.signal.aborted
              ? `no data for ${STALL_TIMEOUT_MS / 1000}s`
              : (e as Error).message;
            throw new Error(
              `download of ${label} was interrupted at ${mb(done)}` +
                (meta.size ? ` of ${mb(meta.size)}` : "") +
                ` (${why}); start again to resume it`,
            );
          } finally {
            clearTimeout(stall);
          }
          if (next.done) break;
          try {
            await writeAll(f, next.value);
          } catch (e) {
            if (!isDiskFull(e)) throw e;
            throw new Error(
              `no space left on the disk holding ${blobsDir} while downloading ${label} ` +
                `(${mb(done)} kept in ${partial}); free space and start again to resume`,
            );
          }
          sha?.update(next.value);
          done += next.value.length;
          const now = performance.now();
          if (job.onProgress && now - last >= 1000) {
            last = now;
            job.onProgress({
              file: label,
              done,
              total: meta.size,
              seconds: (now - start) / 1000,
              resumed,
            });
          }
        }
      } catch (e) {
        await reader.cancel().catch(() => {});
        throw e;
      }
    }
    if (meta.size !== undefined && done < meta.size) {
      throw new Error(
        `download of ${label} was interrupted at ${mb(done)} of ${mb(meta.size)} (the ` +
          "connection closed early); start again to resume it",
      );
    }
    if (meta.size !== undefined && done > meta.size) {
      await Deno.remove(partial).catch(() => {});
      throw new Error(
        `download of ${label} is ${done} bytes, more than the ${meta.size} the hub announced; ` +
          "deleted it, start again to retry",
      );
    }
    if (sha) {
      const got = sha.digest("hex");
      if (got !== meta.etag) {
        await Deno.remove(partial).catch(() => {});
        throw new Error(
          `download of ${label} is corrupt: its sha256 ${got} is not the hub's ${meta.etag}; ` +
            "deleted it, start again to retry",
        );
      }
    }
    await f.syncData();
    await Deno.rename(partial, blob);
    job.onProgress?.({
      file: label,
      done,
      total: meta.size,
      seconds: (performance.now() - start) / 1000,
      resumed,
      final: true,
    });
  } finally {
    f.close();
  }
}

/** `snapshots/{commit}/{file}` -> `../../blobs/{etag}`, one more `../` per folder in `file`. */
async function linkSnapshot(repoDir: string, commit: string, file: string, etag: string) {
  const link = `${repoDir}/snapshots/${commit}/${file}`;
  const target = `${"../".repeat(2 + file.split("/").length - 1)}blobs/${etag}`;
  try {
    if ((await Deno.readLink(link)) === target) return;
  } catch {
    // absent or not a link: (re)made below
  }
  // Renamed over the old name so a concurrent reader never finds it missing.
  await replaceAtomically(link, (tmp) => Deno.symlink(target, tmp));
}

/** Puts `file` of `commit` in the snapshot, downloading its blob unless it is already there. */
async function ensureFile(
  ctx: Ctx,
  cache: { root: string; repoDir: string },
  commit: string,
  file: string,
  onProgress: ((p: DownloadProgress) => void) | undefined,
  log: (line: string) => void,
): Promise<void> {
  const snapshotPath = `${cache.repoDir}/snapshots/${commit}/${file}`;
  if (await exists(snapshotPath)) return;
  const meta = await fileMeta(ctx, commit, file);
  const blob = `${cache.repoDir}/blobs/${meta.etag}`;
  if (!(await exists(blob))) {
    await Deno.mkdir(`${cache.repoDir}/blobs`, { recursive: true });
    const folder = cache.repoDir.slice(cache.repoDir.lastIndexOf("/") + 1);
    const lock = await lockFile(`${cache.root}/.locks/${folder}/${meta.etag}.lock`);
    try {
      // Another process may have finished it while we waited for the lock.
      if (!(await exists(blob))) {
        log(
          `downloading ${ctx.repo}/${file}` + (meta.size ? ` (${mb(meta.size)})` : "") +
            ` into ${cache.repoDir}`,
        );
        await fetchBlob({ ctx, file, meta, blob, onProgress, log });
      }
    } finally {
      lock.close();
    }
  }
  await linkSnapshot(cache.repoDir, commit, file, meta.etag);
}

/**
 * Path of the chosen GGUF of hub repo `repo` (the first shard of a split model) under
 * `snapshots/{commit}/`, downloading it and its other shards into the hub cache first if needed.
 * See the module doc for when the network is used.
 */
export async function downloadHubModel(options: DownloadOptions): Promise<string> {
  const env = options.env ?? Deno.env.toObject();
  const revision = options.revision ?? "main";
  const repo = options.repo;
  const log = options.log ?? stderrLog;
  const onProgress = options.onProgress ?? stderrProgress;
  const folder = repoFolderName(repo);
  if (!safeRelative(revision)) throw new Error(`not a usable revision: ${revision}`);
  const root = hubCacheRoot(env, options.dataDir);
  const repoDir = `${root}/${folder}`;
  const ctx: Ctx = { repo, revision, endpoint: hubEndpoint(env), env };
  const where = repoLabel(ctx);
  const offline = hubOffline(env);
  const wanted = options.modelFile?.replace(/^\.\/+/, "");

  const cachedCommit = await readRef(repoDir, revision);
  if (cachedCommit) {
    const snapshot = `${repoDir}/snapshots/${cachedCommit}`;
    let file = wanted;
    if (file === undefined) {
      const present = await snapshotFiles(snapshot);
      const complete = present.filter((f) => shardSiblings(f).every((s) => present.includes(s)));
      try {
        if (complete.some(isGguf)) file = pickGguf(complete, undefined, where, log);
      } catch (e) {
        // The cached files alone do not settle it; the full listing may, or says why not.
        if (offline) throw e;
      }
    }
    const path = file === undefined ? undefined : await cachedModel(snapshot, file);
    if (path) {
      log(
        `${offline ? "HF_HUB_OFFLINE is set: " : ""}using cached ${repo}/${file} ` +
          `(commit ${cachedCommit.slice(0, 12)}, no network): ${path}`,
      );
      return path;
    }
  }
  if (offline) {
    const what = wanted === undefined
      ? `${where} has no GGUF model`
      : `${wanted} of ${where} is not`;
    throw new Error(
      `HF_HUB_OFFLINE is set and ${what} in the cache at ${repoDir}; unset HF_HUB_OFFLINE to ` +
        "download it",
    );
  }

  const info = await fetchRepoInfo(ctx, repoDir);
  ctx.files = info.files;
  const chosen = pickGguf(info.files, wanted, where, log);
  const file = firstShard(chosen);
  const needed = [file, ...shardSiblings(file)];
  for (const f of needed) {
    if (!safeRelative(f)) throw new Error(`${where} lists an unsafe file name: ${f}`);
  }
  const missing = needed.filter((s) => !info.files.includes(s));
  if (missing.length) {
    throw new Error(`${where} lacks shards of split model ${file}: ${missing.join(", ")}`);
  }
  for (const f of needed) {
    await ensureFile(ctx, { root, repoDir }, info.commit, f, onProgress, log);
  }
  // Written last: a failed download leaves the ref on a commit the cache can still serve.
  if (info.commit !== revision) {
    await replaceAtomically(
      `${repoDir}/refs/${revision}`,
      (tmp) => Deno.writeTextFile(tmp, info.commit),
    );
  }
  return `${repoDir}/snapshots/${info.commit}/${file}`;
}
