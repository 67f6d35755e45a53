/**
 * The video operations service behind `/v1beta` (docs/ARCHITECTURE.md, "Video API"): start (validate with the
 * rules table, apply the blocklist, persist, enqueue), a pool of `workers` renderers, polling,
 * listing, file lookup for downloads, restart recovery and retention.
 *
 * - Durable: every operation is a row in the store before its name is returned. On start, rows
 *   left pending or running by a previous process are queued again and rendered from scratch
 *   (partial output is discarded; an extension whose input has expired ends with NOT_FOUND).
 * - Retention: an operation and its videos share one timer that starts when the operation ends
 *   (default 2 days). Using a video as an extension input restarts that timer. Expired records
 *   read as missing at once and are deleted, bytes and all, by a sweeper every `sweepIntervalMs`.
 * - `backend: "upstream"` hands start, poll and download to `upstream.ts` (the gateway); the
 *   blocklist still applies before anything is forwarded.
 *
 * @example
 * ```ts
 * import { createVideoService } from "./operations.ts";
 * const video = await createVideoService({ dataDir: "/data", region: "global", backend: "local",
 *   workers: 1, keys: ["secret"], countTokens: (t) => t.split(/\s+/).length });
 * const r = await video.start("veo-3.1-fast-generate-preview",
 *   { instances: [{ prompt: "a red kite" }], parameters: { durationSeconds: 4 } });
 * if (r.ok) console.log(`models/${r.value.model}/operations/${r.value.id}`);
 * await video.close();
 * ```
 * @module
 */
import { BLOCKED_REASON, compileBlocklist } from "./blocklist.ts";
import { fail, googleError, type Result } from "./errors.ts";
import { isVideoId, newVideoId } from "./ids.ts";
import { encodeStoredRequest, sha256Hex, type StoredRequest } from "./jobs.ts";
import {
  type ExtensionSource,
  familyOf,
  type Region,
  type RuleContext,
  validateVideoRequest,
} from "./rules.ts";
import {
  loadSigningKey,
  MEDIA_URL_TTL_MS,
  type MediaCheck,
  mediaPath,
  verifyMedia,
} from "./signing.ts";
import { type FileRecord, openVideoStore } from "./store.ts";
import type { OperationRecord } from "./types.ts";
import { createUpstream } from "./upstream.ts";
import { createWorkerPool } from "./workers.ts";

export { readBlocklist } from "./blocklist.ts";

export const DEFAULT_RETENTION_MS = 2 * 24 * 3600_000;
const DEFAULT_SWEEP_INTERVAL_MS = 10 * 60_000;
const MAX_PAGE_SIZE = 100;
const DEFAULT_PAGE_SIZE = 50;

export type VideoServiceConfig = {
  dataDir: string;
  region: Region;
  /** Blocked terms, already read (see `readBlocklist`). */
  blocklist?: string[];
  backend: "local" | "upstream";
  upstreamUrl?: string;
  /** Videos rendered at once (default 1). */
  workers: number;
  /** Accepted API keys; empty means no check (loopback only: the caller enforces that). */
  keys: string[];
  countTokens: (text: string) => number;
  now?: () => number;
  /** ffmpeg binary (default: found on PATH by the renderer). */
  ffmpeg?: string;
  sweepIntervalMs?: number;
  retentionMs?: number;
};

export type OperationPage = { operations: OperationRecord[]; nextPageToken?: string };

export type VideoService = {
  readonly backend: "local" | "upstream";
  readonly keys: readonly string[];
  /** Validates and starts an operation; `key` is forwarded by the gateway. */
  start(model: string, body: unknown, key?: string): Promise<Result<OperationRecord>>;
  /** The current record of an operation (`model` must match when given). */
  get(id: string, opts?: { model?: string; key?: string }): Promise<Result<OperationRecord>>;
  list(model: string, opts?: { pageSize?: number; pageToken?: string }): Result<OperationPage>;
  /** A file that has not expired. */
  file(id: string): Result<FileRecord>;
  /** Path and query of a signed URL for a local file, valid for a few minutes. */
  signedMediaPath(id: string): Promise<string>;
  checkMedia(id: string, exp: string | null, sig: string | null): Promise<MediaCheck>;
  /** Gateway files: the upstream bytes. */
  fetchUpstreamFile(
    file: FileRecord,
    key: string | undefined,
    req: { method: "GET" | "HEAD"; range?: string },
  ): Promise<Result<Response>>;
  /** How many samples the safety filter removed (for `raiMediaFilteredCount`). */
  filteredCount(op: OperationRecord): number;
  /** Deletes expired operations and files now; the sweeper calls this on its interval. */
  sweep(): Promise<{ ops: number; files: number }>;
  /** Stops the workers (their operations stay running and resume on the next start). */
  close(): Promise<void>;
};

const FINISHED = new Set(["done", "failed", "filtered"]);

export async function createVideoService(cfg: VideoServiceConfig): Promise<VideoService> {
  if (cfg.backend === "upstream" && !cfg.upstreamUrl) {
    throw new Error("video backend upstream needs an upstream URL");
  }
  const now = cfg.now ?? Date.now;
  const retentionMs = cfg.retentionMs ?? DEFAULT_RETENTION_MS;
  const store = openVideoStore(cfg.dataDir);
  // Retention: expired records go at once, their bytes right after.
  const sweep = async () => {
    const { ops, files } = store.deleteExpired(now());
    await Promise.all(
      files.filter((f) => f.path).map((f) => Deno.remove(f.path).catch(() => {})),
    );
    return { ops: ops.length, files: files.length };
  };
  let signingKey: CryptoKey;
  try {
    signingKey = await loadSigningKey(store.dir);
    await removeOrphans(store.filesDir, store.knownPaths());
    await sweep();
  } catch (e) {
    store.close();
    throw e;
  }
  const blocked = compileBlocklist(cfg.blocklist ?? []);
  const upstream = cfg.backend === "upstream"
    ? createUpstream({ url: cfg.upstreamUrl!, store, now, retentionMs })
    : undefined;

  const expired = (r: { expiresAt: number; state?: string }) =>
    r.expiresAt <= now() && (r.state === undefined || FINISHED.has(r.state));

  const liveFile = (id: string): FileRecord | undefined => {
    const f = store.getFile(id);
    return f && !expired(f) ? f : undefined;
  };
  const extensionSource = (f: FileRecord | undefined): ExtensionSource | undefined =>
    f && f.path
      ? {
        fileId: f.id,
        durationSeconds: f.durationSeconds,
        resolution: f.resolution,
        aspectRatio: f.aspectRatio,
        extensionCount: f.extensionCount,
      }
      : undefined;
  const ruleContext: RuleContext = {
    region: cfg.region,
    countTokens: cfg.countTokens,
    lookupVideo: (id) => extensionSource(isVideoId(id) ? liveFile(id) : undefined),
    lookupVideoBytes: (bytes) => {
      const f = store.fileBySha256(sha256Hex(bytes));
      return extensionSource(f && !expired(f) ? f : undefined);
    },
  };

  // ---- rendering ---------------------------------------------------------------------------
  const pool = upstream ? undefined : createWorkerPool({
    store,
    now,
    retentionMs,
    workers: cfg.workers,
    ffmpeg: cfg.ffmpeg,
  });
  // Operations a previous process left unfinished, oldest first.
  for (const op of pool ? store.unfinishedOps() : []) {
    store.updateOp(op.id, { state: "pending", progress: 0 });
    pool!.enqueue(op.id);
  }
  let closing = false;
  let sweeping: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    sweeping = sweep().catch((e) => console.error("hearth: video retention sweep failed:", e));
  }, cfg.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS);

  const notFound = (id: string, model?: string) =>
    fail<never>(404, `Operation models/${model ?? "*"}/operations/${id} not found.`);

  return {
    backend: cfg.backend,
    keys: cfg.keys,

    async start(model, body, key) {
      if (closing) return fail(503, "The video service is shutting down.");
      const t = now();
      const prompt = promptOf(body);
      const term = prompt === undefined ? undefined : blocked(prompt);
      if (upstream && term === undefined) return await upstream.start(model, body, key);

      let stored: StoredRequest;
      let extensionInput: string | undefined;
      if (upstream) {
        stored = { kind: "upstream", sampleCount: sampleCountOf(body) };
      } else {
        const v = validateVideoRequest(model, body, ruleContext);
        if (!v.ok) {
          return fail(v.error.status, v.error.message, { status: v.error.googleStatus });
        }
        stored = encodeStoredRequest(v.request, v.outputSeconds);
        extensionInput = v.request.videoFileId;
      }
      const op: OperationRecord = {
        id: newVideoId(),
        model,
        state: term === undefined ? "pending" : "filtered",
        createdAt: t,
        updatedAt: t,
        expiresAt: t + retentionMs,
        progress: term === undefined ? 0 : 100,
        request: term === undefined
          ? stored
          : { kind: stored.kind, sampleCount: stored.sampleCount },
        files: [],
      };
      if (term !== undefined) {
        op.filteredReasons = [BLOCKED_REASON];
        console.error(`hearth: video operation ${op.id} blocked (term "${term}")`);
      }
      store.insertOp(op);
      if (term === undefined) {
        if (extensionInput) {
          const input = store.getFile(extensionInput);
          if (input) store.setExpiry(input.opId, t + retentionMs);
        }
        pool!.enqueue(op.id);
      }
      return { ok: true, value: op };
    },

    async get(id, opts = {}) {
      if (!isVideoId(id)) return notFound(id, opts.model);
      const op = store.getOp(id);
      if (!op || expired(op) || (opts.model && op.model !== opts.model)) {
        return notFound(id, opts.model);
      }
      if (op.upstreamName && upstream) return await upstream.poll(op, opts.key);
      const p = pool?.progress(id);
      return { ok: true, value: p === undefined ? op : { ...op, progress: p } };
    },

    list(model, opts = {}) {
      if (cfg.backend === "local" && !familyOf(model)) {
        return fail(
          404,
          `models/${model} is not found for API version v1beta, or is not supported for predictLongRunning.`,
          { status: "NOT_FOUND" },
        );
      }
      const size = Math.min(MAX_PAGE_SIZE, Math.max(1, opts.pageSize || DEFAULT_PAGE_SIZE));
      let after: { createdAt: number; id: string } | undefined;
      if (opts.pageToken) {
        after = decodePageToken(opts.pageToken);
        if (!after) return fail(400, "Invalid page token.");
      }
      const rows = store.listOps(model, { limit: size + 1, after });
      const page = rows.slice(0, size);
      const last = page.at(-1);
      return {
        ok: true,
        value: {
          operations: page.filter((op) => !expired(op)).map((op) => {
            const p = pool?.progress(op.id);
            return p === undefined ? op : { ...op, progress: p };
          }),
          nextPageToken: rows.length > size && last
            ? encodePageToken(last.createdAt, last.id)
            : undefined,
        },
      };
    },

    file(id) {
      const f = isVideoId(id) ? liveFile(id) : undefined;
      return f ? { ok: true, value: f } : fail(404, `File files/${id} not found.`);
    },

    signedMediaPath(id) {
      return mediaPath(signingKey, id, now() + MEDIA_URL_TTL_MS);
    },

    checkMedia(id, exp, sig) {
      return verifyMedia(signingKey, id, exp, sig, now());
    },

    fetchUpstreamFile(file, key, req) {
      if (!upstream) {
        return Promise.resolve({
          ok: false,
          failure: googleError(404, `File files/${file.id} not found.`),
        });
      }
      return upstream.download(file, key, req);
    },

    filteredCount(op) {
      const r = op.request as StoredRequest | undefined;
      if (op.state === "filtered" && r?.kind === "local") return r.sampleCount;
      return r?.filteredCount ?? (op.state === "filtered" ? r?.sampleCount ?? 1 : 0);
    },

    sweep,

    async close() {
      if (closing) return;
      closing = true;
      clearInterval(timer);
      await pool?.close();
      await sweeping;
      store.close();
    },
  };
}

function promptOf(body: unknown): string | undefined {
  const inst = (body as { instances?: unknown })?.instances;
  const p = Array.isArray(inst) ? (inst[0] as { prompt?: unknown })?.prompt : undefined;
  return typeof p === "string" ? p : undefined;
}

function sampleCountOf(body: unknown): number {
  const params = (body as { parameters?: Record<string, unknown> })?.parameters ?? {};
  return Number(params.sampleCount ?? params.numberOfVideos ?? 1) || 1;
}

function encodePageToken(createdAt: number, id: string): string {
  return btoa(`${createdAt}:${id}`).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
}

function decodePageToken(token: string): { createdAt: number; id: string } | undefined {
  try {
    const text = atob(token.replace(/-/g, "+").replace(/_/g, "/"));
    const m = /^(\d+):([a-z0-9]{12})$/.exec(text);
    return m ? { createdAt: Number(m[1]), id: m[2] } : undefined;
  } catch {
    return undefined;
  }
}

/** Deletes unfinished renders and MP4s no record points at (a crash between rename and commit). */
async function removeOrphans(filesDir: string, known: Set<string>): Promise<void> {
  for await (const e of Deno.readDir(filesDir)) {
    if (!e.isFile) continue;
    const path = `${filesDir}/${e.name}`;
    // `.partial`: the renderer's unfinished output; an `.mp4` without a record: finished after
    // the last commit.
    if (e.name.endsWith(".partial") || (e.name.endsWith(".mp4") && !known.has(path))) {
      await Deno.remove(path).catch(() => {});
    }
  }
}
