/**
 * The gateway (`--video-backend upstream --video-upstream URL`): start, poll and download are
 * forwarded to the real service with the caller's own key (`x-goog-api-key`), while a local
 * operation record maps this server's operation id to the upstream operation name. Callers poll the
 * local name, and the video uris they get back point at THIS server, which streams the upstream
 * bytes through (following the upstream's redirect to its signed storage URL, without sending the
 * key there). Upstream errors come back unchanged: same status, same Google envelope.
 *
 * Extension requests that name a video by one of this server's gateway uris are rewritten to the
 * upstream uri before they are forwarded.
 *
 * @example
 * ```ts
 * import { createUpstream } from "./upstream.ts";
 * declare const store: Parameters<typeof createUpstream>[0]["store"];
 * declare const body: unknown, callerKey: string;
 * const up = createUpstream({ url: "https://generativelanguage.googleapis.com", store,
 *   now: Date.now, retentionMs: 172_800_000 });
 * const started = await up.start("veo-3.1-generate-preview", body, callerKey);
 * ```
 * @module
 */
import { Buffer } from "node:buffer";
import { type ApiFailure, googleError, type Result } from "./errors.ts";
import { newVideoId } from "./ids.ts";
import { sha256Hex, type StoredRequest } from "./jobs.ts";
import type { FileRecord, VideoStore } from "./store.ts";
import type { AspectRatio, Family, OperationRecord, Resolution } from "./types.ts";

export type UpstreamConfig = {
  /** Base URL of the real service, e.g. `https://generativelanguage.googleapis.com`. */
  url: string;
  store: VideoStore;
  now: () => number;
  retentionMs: number;
  /** Limit for start and poll calls (downloads stream without one). */
  timeoutMs?: number;
};

export type Upstream = {
  /** Forwards a start and records the local operation that stands for the upstream one. */
  start(model: string, body: unknown, key: string | undefined): Promise<Result<OperationRecord>>;
  /** Polls the upstream operation behind `op` and brings the local record up to date. */
  poll(op: OperationRecord, key: string | undefined): Promise<Result<OperationRecord>>;
  /** Fetches the bytes of a gateway file (Range passed on), redirects followed. */
  download(
    file: FileRecord,
    key: string | undefined,
    req: { method: "GET" | "HEAD"; range?: string },
  ): Promise<Result<Response>>;
};

const MAX_REDIRECTS = 5;

export function createUpstream(cfg: UpstreamConfig): Upstream {
  const base = cfg.url.replace(/\/+$/, "");
  const origin = new URL(base).origin;
  const { store } = cfg;

  const call = async (
    method: string,
    path: string,
    key: string | undefined,
    body?: unknown,
  ): Promise<Result<Record<string, unknown>>> => {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), cfg.timeoutMs ?? 60_000);
    try {
      const headers: Record<string, string> = {};
      if (key) headers["x-goog-api-key"] = key;
      if (body !== undefined) headers["content-type"] = "application/json";
      const res = await fetch(`${base}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: ac.signal,
      });
      const text = await res.text();
      if (!res.ok) return { ok: false, failure: passThrough(res.status, text) };
      try {
        const json = JSON.parse(text);
        if (json && typeof json === "object") return { ok: true, value: json };
      } catch { /* reported below */ }
      return {
        ok: false,
        failure: googleError(502, `The upstream service answered with something not JSON.`, {
          status: "UNAVAILABLE",
        }),
      };
    } catch (e) {
      const why = ac.signal.aborted ? "did not answer in time" : (e as Error).message;
      return {
        ok: false,
        failure: googleError(503, `The upstream service is unreachable: ${why}`),
      };
    } finally {
      clearTimeout(timer);
    }
  };

  /** This server's gateway uri in an extension request -> the upstream uri it stands for. */
  const rewriteVideoUris = (body: unknown): unknown => {
    if (!body || typeof body !== "object") return body;
    const b = body as { instances?: unknown };
    if (!Array.isArray(b.instances)) return body;
    const instances = b.instances.map((inst) => {
      const video = (inst as { video?: { uri?: unknown } })?.video;
      if (!video || typeof video.uri !== "string") return inst;
      const id = lastFileId(video.uri);
      const f = id ? store.getFile(id) : undefined;
      if (!f?.upstreamUri) return inst;
      return { ...(inst as object), video: { ...video, uri: f.upstreamUri } };
    });
    return { ...b, instances };
  };

  const updateFromUpstream = (op: OperationRecord, wire: Record<string, unknown>) => {
    const now = cfg.now();
    const stored = op.request as StoredRequest;
    const patch: Partial<OperationRecord> = { updatedAt: now };
    // Retention starts when the operation ends; later polls do not extend it.
    const finished = op.state === "done" || op.state === "failed" || op.state === "filtered";
    const expiresAt = finished ? op.expiresAt : now + cfg.retentionMs;
    const meta = wire.metadata as { progressPercent?: unknown } | undefined;
    if (typeof meta?.progressPercent === "number") patch.progress = meta.progressPercent;
    if (wire.done !== true) {
      patch.state = "running";
      store.updateOp(op.id, patch);
      return { ...op, ...patch };
    }
    const err = wire.error as { code?: unknown; message?: unknown } | undefined;
    if (err) {
      patch.state = "failed";
      patch.expiresAt = expiresAt;
      patch.error = {
        code: typeof err.code === "number" ? err.code : 2,
        message: typeof err.message === "string" ? err.message : "The upstream operation failed.",
      };
      store.updateOp(op.id, patch);
      return { ...op, ...patch };
    }
    const resp = ((wire.response as Record<string, unknown> | undefined)?.generateVideoResponse ??
      {}) as {
        generatedSamples?: { video?: { uri?: string; encodedVideo?: string; encoding?: string } }[];
        raiMediaFilteredCount?: number;
        raiMediaFilteredReasons?: string[];
      };
    const known = store.filesOfOp(op.id);
    const files: FileRecord[] = [];
    const ids: string[] = [];
    for (const sample of resp.generatedSamples ?? []) {
      const v = sample.video ?? {};
      const existing = v.uri ? known.find((f) => f.upstreamUri === v.uri) : undefined;
      if (existing) {
        ids.push(existing.id);
        continue;
      }
      const f = gatewayFile(op, stored, v, now, expiresAt);
      if (!f) continue;
      files.push(f);
      ids.push(f.id);
    }
    patch.files = ids;
    patch.progress = 100;
    patch.expiresAt = expiresAt;
    if (resp.raiMediaFilteredCount || resp.raiMediaFilteredReasons?.length) {
      patch.filteredReasons = resp.raiMediaFilteredReasons ?? [];
      patch.request = { ...stored, filteredCount: resp.raiMediaFilteredCount ?? 0 };
    }
    patch.state = ids.length === 0 && patch.filteredReasons ? "filtered" : "done";
    for (const f of files) f.expiresAt = expiresAt;
    store.finishOp(op.id, patch, files);
    return { ...op, ...patch };
  };

  const gatewayFile = (
    op: OperationRecord,
    stored: StoredRequest,
    v: { uri?: string; encodedVideo?: string },
    now: number,
    expiresAt: number,
  ): FileRecord | undefined => {
    let path = "";
    let sha256 = "";
    let size = 0;
    const id = newVideoId();
    if (!v.uri) {
      // Inline bytes: keep them here, like a locally rendered video.
      if (typeof v.encodedVideo !== "string") return undefined;
      const bytes = new Uint8Array(Buffer.from(v.encodedVideo, "base64"));
      path = `${store.filesDir}/${id}.mp4`;
      Deno.writeFileSync(path, bytes);
      sha256 = sha256Hex(bytes);
      size = bytes.length;
    }
    return {
      id,
      path,
      opId: op.id,
      model: op.model,
      family: familyOfCode(op.model),
      durationSeconds: stored.durationSeconds ?? 8,
      resolution: (stored.resolution ?? "720p") as Resolution,
      aspectRatio: (stored.aspectRatio ?? "16:9") as AspectRatio,
      extensionCount: 0,
      sha256,
      size,
      expiresAt,
      createdAt: now,
      upstreamUri: v.uri,
    };
  };

  return {
    async start(model, body, key) {
      const r = await call(
        "POST",
        `/v1beta/models/${model}:predictLongRunning`,
        key,
        rewriteVideoUris(body),
      );
      if (!r.ok) return r;
      const name = r.value.name;
      if (typeof name !== "string" || !/^[\w.\/-]+$/.test(name) || name.includes("..")) {
        return {
          ok: false,
          failure: googleError(502, "The upstream service returned no operation name.", {
            status: "UNAVAILABLE",
          }),
        };
      }
      const now = cfg.now();
      const params = (body as { parameters?: Record<string, unknown> })?.parameters ?? {};
      const sampleCount = Number(params.sampleCount ?? params.numberOfVideos ?? 1) || 1;
      const request: StoredRequest = {
        kind: "upstream",
        sampleCount,
        resolution: typeof params.resolution === "string" ? params.resolution : undefined,
        aspectRatio: typeof params.aspectRatio === "string" ? params.aspectRatio : undefined,
        durationSeconds: Number(params.durationSeconds) || undefined,
      };
      const op: OperationRecord = {
        id: newVideoId(),
        model,
        state: "pending",
        createdAt: now,
        updatedAt: now,
        expiresAt: now + cfg.retentionMs,
        progress: 0,
        request,
        files: [],
        upstreamName: name,
      };
      store.insertOp(op);
      return { ok: true, value: op };
    },

    async poll(op, key) {
      const r = await call("GET", `/v1beta/${op.upstreamName}`, key);
      if (!r.ok) return r;
      return { ok: true, value: updateFromUpstream(op, r.value) };
    },

    async download(file, key, req) {
      if (!file.upstreamUri) {
        return { ok: false, failure: googleError(404, `File files/${file.id} not found.`) };
      }
      let url = file.upstreamUri;
      try {
        for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
          const headers: Record<string, string> = {};
          // The key goes to the upstream service only, never to the storage host it redirects to.
          if (key && new URL(url).origin === origin) headers["x-goog-api-key"] = key;
          if (req.range) headers["range"] = req.range;
          const res = await fetch(url, { method: req.method, headers, redirect: "manual" });
          const location = res.headers.get("location");
          if (res.status >= 300 && res.status < 400 && location) {
            await res.body?.cancel();
            url = new URL(location, url).href;
            continue;
          }
          if (!res.ok && res.status !== 416) {
            const text = await res.text();
            return { ok: false, failure: passThrough(res.status, text) };
          }
          return { ok: true, value: res };
        }
      } catch (e) {
        return {
          ok: false,
          failure: googleError(503, `The upstream service is unreachable: ${(e as Error).message}`),
        };
      }
      return {
        ok: false,
        failure: googleError(502, "The upstream service redirected too many times.", {
          status: "UNAVAILABLE",
        }),
      };
    },
  };
}

/** An upstream error, kept as it came when it is Google's envelope, wrapped in one otherwise. */
function passThrough(status: number, text: string): ApiFailure {
  try {
    const json = JSON.parse(text);
    if (json?.error && typeof json.error === "object") return { httpStatus: status, body: json };
  } catch { /* not JSON */ }
  return googleError(status, text.trim().slice(0, 1000) || `upstream status ${status}`);
}

/** The id in the last `files/{id}` of a uri (also in the SDK's mangled http:// form). */
export function lastFileId(uri: string): string | undefined {
  const all = [...uri.matchAll(/files\/([a-z0-9]{12})(?![a-z0-9])/g)];
  return all.at(-1)?.[1];
}

function familyOfCode(model: string): Family {
  if (model.startsWith("veo-2")) return "2";
  if (model.startsWith("veo-3.1")) return "3.1";
  return "3";
}
