/**
 * The Veo-compatible video API under `/v1beta` (docs/ARCHITECTURE.md, "Video API"), in the shapes the official
 * `@google/genai` SDK reads: start (`models/{code}:predictLongRunning`), poll
 * (`models/{code}/operations/{id}`, also `operations/{id}`), list, file metadata and download.
 *
 * Every request needs an API key (`x-goog-api-key` or `?key=`) except the signed media URL a
 * download redirects to, which serves the MP4 with Range support for a few minutes. Any path under
 * `/v1beta/files/` is routed by its last `files/{id}`, because the SDK turns an `http://` video
 * uri into `/v1beta/files/http://host/v1beta/files/{id}:download`. Every error is Google's
 * envelope `{"error":{"code","message","status"}}`, unknown routes included.
 *
 * @example
 * ```ts
 * import { Hono } from "hono";
 * import { videoRoutes } from "./video.ts";
 * const app = new Hono();
 * app.route("/", videoRoutes(await createVideoService(cfg)));
 * ```
 * @module
 */
import { type Context, Hono, type MiddlewareHandler } from "hono";
import { type ApiFailure, checkApiKey, googleError } from "../lib/video/errors.ts";
import type { VideoService } from "../lib/video/operations.ts";
import { parseRange } from "../lib/video/range.ts";
import type { FileRecord } from "../lib/video/store.ts";
import type { OperationRecord } from "../lib/video/types.ts";
import { lastFileId } from "../lib/video/upstream.ts";
import { mountRoutes, type ParamContext, routesOf, SERVE_ROUTES } from "./table.ts";

const RESPONSE_TYPE =
  "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse";
const METADATA_TYPE =
  "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningMetadata";
/** A request body past this is refused before it is read (5 images of 20 MB, base64). */
const MAX_BODY_BYTES = 160 * 1024 * 1024;
const MODEL_CODE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

function send(f: ApiFailure, headers: Record<string, string> = {}): Response {
  return Response.json(f.body, { status: f.httpStatus, headers });
}

const keyOf = (c: Context) => c.req.header("x-goog-api-key") ?? c.req.query("key") ?? undefined;

/** The origin clients reached this server at (a reverse proxy's forwarded headers win). */
export function publicOrigin(c: Context): string {
  const url = new URL(c.req.url);
  const first = (h: string | undefined) => h?.split(",")[0].trim() || undefined;
  let proto = first(c.req.header("x-forwarded-proto")) ?? url.protocol.slice(0, -1);
  let host = first(c.req.header("x-forwarded-host")) ?? url.host;
  if (proto !== "http" && proto !== "https") proto = url.protocol.slice(0, -1);
  if (!/^[A-Za-z0-9.\-\[\]:]+$/.test(host)) host = url.host;
  return `${proto}://${host}`;
}

const iso = (ms: number) => new Date(ms).toISOString();

function operationJson(
  op: OperationRecord,
  service: VideoService,
  origin: string,
): Record<string, unknown> {
  const out: Record<string, unknown> = { name: `models/${op.model}/operations/${op.id}` };
  if (op.state === "pending" || op.state === "running") {
    out.metadata = {
      "@type": METADATA_TYPE,
      progressPercent: Math.floor(op.progress),
      createTime: iso(op.createdAt),
      updateTime: iso(op.updatedAt),
    };
    return out;
  }
  out.done = true;
  if (op.state === "failed") {
    out.error = op.error ?? { code: 2, message: "The operation failed." };
    return out;
  }
  const response: Record<string, unknown> = {};
  if (op.files.length) {
    response.generatedSamples = op.files.map((id) => ({
      video: { uri: `${origin}/v1beta/files/${id}:download?alt=media` },
    }));
  }
  const filtered = service.filteredCount(op);
  if (filtered || op.filteredReasons?.length) {
    response.raiMediaFilteredCount = filtered;
    response.raiMediaFilteredReasons = op.filteredReasons ?? [];
  }
  out.response = { "@type": RESPONSE_TYPE, generateVideoResponse: response };
  return out;
}

function fileJson(f: FileRecord, origin: string): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: `files/${f.id}`,
    mimeType: "video/mp4",
    createTime: iso(f.createdAt),
    updateTime: iso(f.createdAt),
    expirationTime: iso(f.expiresAt),
    uri: `${origin}/v1beta/files/${f.id}`,
    downloadUri: `${origin}/v1beta/files/${f.id}:download?alt=media`,
    state: "ACTIVE",
    source: "GENERATED",
    videoMetadata: { videoDuration: `${f.durationSeconds}s` },
  };
  if (f.size) out.sizeBytes = String(f.size);
  if (f.sha256) out.sha256Hash = btoa(f.sha256);
  return out;
}

/** A stream of `length` bytes of `path` from `start`; the file closes when done or cancelled. */
async function fileSlice(
  path: string,
  start: number,
  length: number,
): Promise<ReadableStream<Uint8Array>> {
  const f = await Deno.open(path);
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    f.close();
  };
  try {
    await f.seek(start, Deno.SeekMode.Start);
  } catch (e) {
    close();
    throw e;
  }
  let left = length;
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      try {
        const buf = new Uint8Array(Math.min(256 * 1024, left));
        const n = left > 0 ? await f.read(buf) : null;
        if (n === null) {
          close();
          ctrl.close();
          return;
        }
        left -= n;
        ctrl.enqueue(buf.subarray(0, n));
        if (left <= 0) {
          close();
          ctrl.close();
        }
      } catch (e) {
        close();
        ctrl.error(e);
      }
    },
    cancel: close,
  });
}

/** Serves a local MP4 with single-range support (206/416), `HEAD` included. */
async function serveFile(c: Context, f: FileRecord): Promise<Response> {
  const etag = `"${f.sha256}"`;
  const headers: Record<string, string> = {
    "content-type": "video/mp4",
    "accept-ranges": "bytes",
    "etag": etag,
    "cache-control": "private, max-age=300",
  };
  const ifRange = c.req.header("if-range");
  const range = ifRange && ifRange !== etag
    ? { kind: "full" as const }
    : parseRange(c.req.header("range"), f.size);
  if (range.kind === "unsatisfiable") {
    return send(
      googleError(416, `Requested range not satisfiable: the file has ${f.size} bytes.`),
      { "content-range": `bytes */${f.size}` },
    );
  }
  const [start, end, status] = range.kind === "range"
    ? [range.start, range.end, 206]
    : [0, f.size - 1, 200];
  const length = Math.max(0, end - start + 1);
  headers["content-length"] = String(length);
  if (status === 206) headers["content-range"] = `bytes ${start}-${end}/${f.size}`;
  if (c.req.method === "HEAD") return new Response(null, { status, headers });
  let body: ReadableStream<Uint8Array>;
  try {
    body = await fileSlice(f.path, start, length);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      return send(googleError(404, `File files/${f.id} not found.`));
    }
    throw e;
  }
  return new Response(body, { status, headers });
}

const PROXIED_HEADERS = [
  "content-type",
  "content-length",
  "content-range",
  "accept-ranges",
  "etag",
  "last-modified",
];

/**
 * The video routes (routes/table.ts, group `video`) on the service's own app, with its error
 * envelope for failures and unknown paths.
 */
export function videoRoutes(service: VideoService): Hono {
  const app = new Hono();
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return send(googleError(500, `Internal error: ${err.message}`));
  });
  return mountRoutes(app, routesOf(SERVE_ROUTES, "video"), videoHandlers(service));
}

/** The handlers (and the key check) of the `video` rows of routes/table.ts. */
export function videoHandlers(service: VideoService) {
  const videoKeyCheck: MiddlewareHandler = async (c, next) => {
    if (c.req.path.startsWith("/v1beta/media/")) return await next();
    const denied = checkApiKey(service.keys, keyOf(c));
    if (denied) return send(denied);
    await next();
  };

  const startOperation = async (c: ParamContext<"rest">) => {
    const rest = c.req.param("rest");
    const colon = rest.lastIndexOf(":");
    const code = colon > 0 ? rest.slice(0, colon) : rest;
    const method = colon > 0 ? rest.slice(colon + 1) : "";
    if (method !== "predictLongRunning" || !MODEL_CODE.test(code)) {
      return send(googleError(404, `Method ${c.req.path} not found.`));
    }
    if (Number(c.req.header("content-length") ?? 0) > MAX_BODY_BYTES) {
      return send(googleError(413, `Request body larger than ${MAX_BODY_BYTES} bytes.`, {
        status: "INVALID_ARGUMENT",
      }));
    }
    let body: unknown;
    try {
      const text = await c.req.text();
      if (!text.trim()) return send(googleError(400, "Request body is empty."));
      body = JSON.parse(text);
    } catch (e) {
      return send(googleError(400, `Invalid JSON payload received. ${(e as Error).message}`));
    }
    if (!body || typeof body !== "object" || Array.isArray(body)) {
      return send(googleError(400, "Invalid JSON payload received. Expected an object."));
    }
    const r = await service.start(code, body, keyOf(c));
    if (!r.ok) return send(r.failure);
    return c.json({ name: `models/${r.value.model}/operations/${r.value.id}` });
  };

  const poll = async (c: Context, id: string, model?: string) => {
    const r = await service.get(id, { model, key: keyOf(c) });
    if (!r.ok) return send(r.failure);
    return c.json(operationJson(r.value, service, publicOrigin(c)));
  };
  const pollModelOperation = (c: ParamContext<"code" | "id">) =>
    poll(c, c.req.param("id"), c.req.param("code"));
  const pollOperation = (c: ParamContext<"id">) => poll(c, c.req.param("id"));

  const listOperations = (c: ParamContext<"code">) => {
    const sizeParam = c.req.query("pageSize");
    const pageSize = sizeParam === undefined ? undefined : Number(sizeParam);
    if (pageSize !== undefined && (!Number.isInteger(pageSize) || pageSize < 0)) {
      return send(googleError(400, `Invalid value for pageSize: ${JSON.stringify(sizeParam)}.`));
    }
    const r = service.list(c.req.param("code"), { pageSize, pageToken: c.req.query("pageToken") });
    if (!r.ok) return send(r.failure);
    const origin = publicOrigin(c);
    const out: Record<string, unknown> = {
      operations: r.value.operations.map((op) => operationJson(op, service, origin)),
    };
    if (r.value.nextPageToken) out.nextPageToken = r.value.nextPageToken;
    return c.json(out);
  };

  const videoFile = async (c: Context) => {
    const id = lastFileId(c.req.path);
    const found = id ? service.file(id) : undefined;
    if (!found?.ok) return send(found?.failure ?? googleError(404, `No file in ${c.req.path}.`));
    const f = found.value;
    const origin = publicOrigin(c);
    const download = c.req.path.endsWith(":download") || c.req.queries("alt")?.includes("media");
    if (!download) return c.json(fileJson(f, origin));
    if (f.upstreamUri) {
      const r = await service.fetchUpstreamFile(f, keyOf(c), {
        method: c.req.method === "HEAD" ? "HEAD" : "GET",
        range: c.req.header("range"),
      });
      if (!r.ok) return send(r.failure);
      const headers: Record<string, string> = {};
      for (const h of PROXIED_HEADERS) {
        const v = r.value.headers.get(h);
        if (v !== null) headers[h] = v;
      }
      return new Response(c.req.method === "HEAD" ? null : r.value.body, {
        status: r.value.status,
        headers,
      });
    }
    const location = `${origin}${await service.signedMediaPath(f.id)}`;
    return new Response(null, {
      status: 302,
      headers: { location, "cache-control": "no-store" },
    });
  };

  const signedMedia = async (c: ParamContext<"name">) => {
    const m = /^([a-z0-9]{12})\.mp4$/.exec(c.req.param("name"));
    if (!m) return send(googleError(404, `No file at ${c.req.path}.`));
    const check = await service.checkMedia(
      m[1],
      c.req.query("exp") ?? null,
      c.req.query("sig") ?? null,
    );
    if (check === "expired") {
      return send(googleError(403, "The signed URL has expired; download the file again."));
    }
    if (check === "bad") {
      return send(googleError(403, "The signed URL is not valid (signature mismatch)."));
    }
    const found = service.file(m[1]);
    if (!found.ok) return send(found.failure);
    if (!found.value.path) return send(googleError(404, `File files/${m[1]} not found.`));
    return await serveFile(c, found.value);
  };

  const videoNotFound = (c: Context) =>
    send(googleError(404, `Method ${c.req.method} ${c.req.path} not found.`));

  return {
    videoKeyCheck,
    startOperation,
    pollModelOperation,
    pollOperation,
    listOperations,
    videoFile,
    signedMedia,
    videoNotFound,
  };
}
