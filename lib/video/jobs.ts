/**
 * What a worker does with one operation: turn the stored request back into a `VideoRequest`, render
 * `sampleCount` MP4s (the renderer renames each into place only when complete), hash them, record
 * the files and the finished operation in one transaction. A render that fails leaves no file
 * behind and ends the operation with a `google.rpc` error; a render stopped by shutdown leaves the
 * operation `running`, so the next start renders it again.
 *
 * The stored request is JSON: image bytes travel as base64 so a restart can render the very same
 * request.
 *
 * @example
 * ```ts
 * import { decodeStoredRequest, encodeStoredRequest } from "./jobs.ts";
 * declare const request: Parameters<typeof encodeStoredRequest>[0];
 * const stored = encodeStoredRequest(request, 8);
 * decodeStoredRequest(JSON.parse(JSON.stringify(stored))).request.prompt === request.prompt; // true
 * ```
 * @module
 */
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { RPC_CODE } from "./errors.ts";
import { newVideoId } from "./ids.ts";
import { frameSize, renderVideo } from "./render.ts";
import type { FileRecord, VideoStore } from "./store.ts";
import type { ImageInput, OperationRecord, RenderJob, VideoRequest } from "./types.ts";

/** The `request` column of an operation: everything a restart needs, plus wire-only counts. */
export type StoredRequest = {
  kind: "local" | "upstream";
  sampleCount: number;
  /** Local: the validated request (images as base64) and the length of the output. */
  request?: unknown;
  outputSeconds?: number;
  /** Gateway: what the upstream reported, and the shape of the video asked for. */
  filteredCount?: number;
  resolution?: string;
  aspectRatio?: string;
  durationSeconds?: number;
};

type StoredImage = { mimeType: string; bytesBase64: string };

const encodeImage = (i: ImageInput): StoredImage => ({
  mimeType: i.mimeType,
  bytesBase64: Buffer.from(i.bytes).toString("base64"),
});
const decodeImage = (i: StoredImage): ImageInput => ({
  mimeType: i.mimeType,
  bytes: new Uint8Array(Buffer.from(i.bytesBase64, "base64")),
});

export function encodeStoredRequest(request: VideoRequest, outputSeconds: number): StoredRequest {
  return {
    kind: "local",
    sampleCount: request.sampleCount,
    outputSeconds,
    request: {
      ...request,
      image: request.image && encodeImage(request.image),
      lastFrame: request.lastFrame && encodeImage(request.lastFrame),
      referenceImages: request.referenceImages.map((r) => ({
        referenceType: r.referenceType,
        image: encodeImage(r.image),
      })),
    },
  };
}

export function decodeStoredRequest(
  stored: StoredRequest,
): { request: VideoRequest; outputSeconds: number } {
  const r = stored.request as Record<string, unknown>;
  if (!r || typeof r !== "object") throw new Error("the stored request is missing");
  const refs = (r.referenceImages ?? []) as {
    referenceType: "asset" | "style";
    image: StoredImage;
  }[];
  const request = {
    ...r,
    image: r.image ? decodeImage(r.image as StoredImage) : undefined,
    lastFrame: r.lastFrame ? decodeImage(r.lastFrame as StoredImage) : undefined,
    referenceImages: refs.map((x) => ({
      referenceType: x.referenceType,
      image: decodeImage(x.image),
    })),
  } as VideoRequest;
  return { request, outputSeconds: stored.outputSeconds ?? request.durationSeconds };
}

/** A seed per sample: the request's, or one derived from the operation id (stable on re-render). */
function sampleSeed(request: VideoRequest, opId: string, i: number): number {
  const base = request.seed ?? parseInt(opId.slice(0, 6), 36);
  return (base + i) >>> 0;
}

export type JobContext = {
  store: VideoStore;
  now: () => number;
  retentionMs: number;
  ffmpeg?: string;
  signal: AbortSignal;
  onProgress: (percent: number) => void;
};

/** Why an operation failed, as it is reported to the caller. */
export class JobError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
    this.name = "JobError";
  }
}

/** Renders every sample of `op` and records the result (done, or failed with an error). */
export async function runJob(ctx: JobContext, op: OperationRecord): Promise<void> {
  const { store } = ctx;
  const produced: string[] = [];
  try {
    const { request, outputSeconds } = decodeStoredRequest(op.request as StoredRequest);
    let extendPath: string | undefined;
    let extensionCount = 0;
    if (request.videoFileId) {
      const input = store.getFile(request.videoFileId);
      if (!input || !input.path || !(await exists(input.path))) {
        throw new JobError(
          RPC_CODE.NOT_FOUND,
          `The input video files/${request.videoFileId} no longer exists (videos are kept for 2 ` +
            "days); generate it again to extend it.",
        );
      }
      extendPath = input.path;
      extensionCount = input.extensionCount + 1;
    }
    const { width, height } = frameSize(request.resolution, request.aspectRatio);
    const n = request.sampleCount;
    const files: FileRecord[] = [];
    for (let i = 0; i < n; i++) {
      const id = newVideoId();
      // The renderer writes a hidden partial file and renames it to `path` when complete.
      const path = `${store.filesDir}/${id}.mp4`;
      produced.push(path);
      const job: RenderJob = {
        width,
        height,
        // An extension renders the whole extended video (input + 7 s).
        durationSeconds: outputSeconds,
        fps: 24,
        audio: request.family !== "2",
        prompt: request.prompt,
        seed: sampleSeed(request, op.id, i),
        image: request.image,
        lastFrame: request.lastFrame,
        referenceImages: request.referenceImages.length
          ? request.referenceImages.map((r) => r.image)
          : undefined,
        extendPath,
        outPath: path,
      };
      await renderVideo(job, {
        ffmpeg: ctx.ffmpeg,
        signal: ctx.signal,
        onProgress: (p) => ctx.onProgress(Math.min(99, (i * 100 + clamp(p)) / n)),
      });
      const { sha256, size } = await hashFile(path);
      files.push({
        id,
        path,
        opId: op.id,
        model: request.model,
        family: request.family,
        durationSeconds: outputSeconds,
        resolution: request.resolution,
        aspectRatio: request.aspectRatio,
        extensionCount,
        sha256,
        size,
        expiresAt: 0, // set below, with the operation's
        createdAt: ctx.now(),
      });
    }
    const now = ctx.now();
    const expiresAt = now + ctx.retentionMs;
    for (const f of files) f.expiresAt = expiresAt;
    store.finishOp(op.id, {
      state: "done",
      progress: 100,
      files: files.map((f) => f.id),
      updatedAt: now,
      expiresAt,
    }, files);
  } catch (e) {
    await Promise.all(produced.map((p) => Deno.remove(p).catch(() => {})));
    // Shutdown: leave the record running; the next start renders it again.
    if (ctx.signal.aborted) return;
    const code = e instanceof JobError ? e.code : RPC_CODE.INTERNAL;
    const message = e instanceof JobError
      ? e.message
      : `Video generation failed: ${(e as Error)?.message ?? String(e)}`;
    const now = ctx.now();
    store.updateOp(op.id, {
      state: "failed",
      error: { code, message },
      updatedAt: now,
      expiresAt: now + ctx.retentionMs,
    });
  }
}

const clamp = (p: number) => Math.max(0, Math.min(100, Number.isFinite(p) ? p : 0));

async function exists(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch {
    return false;
  }
}

/** Streams a file through SHA-256. */
export async function hashFile(path: string): Promise<{ sha256: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  // The readable closes the file when it ends or is abandoned.
  const f = await Deno.open(path);
  for await (const chunk of f.readable) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { sha256: hash.digest("hex"), size };
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}
