/**
 * The video API end to end with the official `@google/genai` SDK as the client, against a real
 * HTTP server (Deno.serve on a loopback port) around `videoRoutes`: generate, poll, download and
 * probe the MP4 (H.264, 24 fps, size, length, audio for 3.x and none for 2.0), the safety
 * blocklist, API-key errors on every kind of request, Range downloads, signed URL expiry and
 * tampering, listing, the SDK's mangled `http://` download path, and validation errors.
 */
import assert from "node:assert/strict";
import { ApiError, GoogleGenAI } from "@google/genai";
import type { VideoServiceConfig } from "../lib/video/operations.ts";
import { probeVideo } from "../lib/video/probe.ts";
import { startVideoServer as startSupportServer } from "./support/video.ts";

const KEY = "test-key-video-api";
const FAST = "veo-3.1-fast-generate-preview";
const VEO2 = "veo-2.0-generate-001";

const startVideoServer = (cfg: Partial<VideoServiceConfig> = {}) =>
  startSupportServer({ workers: 2, keys: [KEY], ...cfg });

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Op = Awaited<ReturnType<GoogleGenAI["models"]["generateVideos"]>>;

async function waitDone(ai: GoogleGenAI, op: Op, timeoutMs = 60_000): Promise<Op> {
  const deadline = Date.now() + timeoutMs;
  while (!op.done) {
    if (Date.now() > deadline) throw new Error(`operation ${op.name} not done in ${timeoutMs} ms`);
    await delay(150);
    op = await ai.operations.getVideosOperation({ operation: op });
  }
  return op;
}

async function errorOf(
  res: Response,
): Promise<{ code: number; status: string; message: string; details?: unknown[] }> {
  const body = await res.json();
  assert.ok(body.error, `expected an error envelope, got ${JSON.stringify(body)}`);
  assert.equal(body.error.code, res.status);
  return body.error;
}

Deno.test("video API: generate, poll and download with the official SDK (3.1 fast with audio, 2.0 silent)", async () => {
  await using srv = await startVideoServer();
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: srv.url } });

  const fastOp = await ai.models.generateVideos({
    model: FAST,
    source: { prompt: 'A lighthouse at dusk, waves below. The keeper says: "Storm tonight."' },
    config: { durationSeconds: 4, resolution: "720p", aspectRatio: "16:9" },
  });
  const veo2Op = await ai.models.generateVideos({
    model: VEO2,
    source: { prompt: "A paper boat drifting down a rain gutter" },
    config: { durationSeconds: 5, aspectRatio: "9:16" },
  });
  assert.match(fastOp.name!, new RegExp(`^models/${FAST}/operations/[a-z0-9]{12}$`));
  assert.match(veo2Op.name!, new RegExp(`^models/${VEO2}/operations/[a-z0-9]{12}$`));

  const cases = [
    { op: fastOp, width: 1280, height: 720, seconds: 4, audio: true },
    { op: veo2Op, width: 720, height: 1280, seconds: 5, audio: false },
  ];
  for (const c of cases) {
    const done = await waitDone(ai, c.op);
    assert.equal(done.error, undefined, JSON.stringify(done.error));
    const videos = done.response?.generatedVideos ?? [];
    assert.equal(videos.length, 1);
    const uri = videos[0].video!.uri!;
    assert.match(uri, new RegExp(`^${srv.url}/v1beta/files/[a-z0-9]{12}:download\\?alt=media$`));
    const downloadPath = `${srv.dataDir}/download-${c.seconds}.mp4`;
    await ai.files.download({ file: videos[0], downloadPath });
    const p = await probeVideo(downloadPath);
    assert.equal(p.videoCodec, "h264");
    assert.equal(p.width, c.width);
    assert.equal(p.height, c.height);
    assert.equal(p.fps, 24);
    assert.ok(Math.abs(p.durationSeconds - c.seconds) < 0.25, `duration ${p.durationSeconds}`);
    if (c.audio) assert.equal(p.audioCodec, "aac");
    else assert.equal(p.audioCodec, undefined);
  }
});

Deno.test("video API: a blocked prompt is done at once, filtered, with no samples", async () => {
  await using srv = await startVideoServer();
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: srv.url } });
  const op = await ai.models.generateVideos({
    model: VEO2,
    source: { prompt: "A Forbidden   Thing in the garden" },
    config: { numberOfVideos: 2, durationSeconds: 5 },
  });
  const polled = await ai.operations.getVideosOperation({ operation: op });
  assert.equal(polled.done, true);
  assert.equal(polled.error, undefined);
  assert.equal(polled.response?.raiMediaFilteredCount, 2);
  assert.equal(polled.response?.raiMediaFilteredReasons?.length, 1);
  assert.match(polled.response!.raiMediaFilteredReasons![0], /usage guidelines/);
  assert.equal(polled.response?.generatedVideos, undefined);

  // The raw wire shape: done, the PredictLongRunningResponse type, no generatedSamples.
  const raw = await (await fetch(`${srv.url}/v1beta/${op.name}`, {
    headers: { "x-goog-api-key": KEY },
  })).json();
  assert.equal(raw.done, true);
  assert.equal(
    raw.response["@type"],
    "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
  );
  assert.deepEqual(Object.keys(raw.response.generateVideoResponse).sort(), [
    "raiMediaFilteredCount",
    "raiMediaFilteredReasons",
  ]);
});

Deno.test("video API: API keys on start, poll and download; validation errors as ApiError", async () => {
  await using srv = await startVideoServer();
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: srv.url } });
  // A filtered operation is done without rendering: enough to poll, and it has a real name.
  const op = await ai.models.generateVideos({ model: FAST, source: { prompt: "forbidden thing" } });
  const body = JSON.stringify({ instances: [{ prompt: "a cat" }] });
  const requests: [string, RequestInit][] = [
    [`/v1beta/models/${FAST}:predictLongRunning`, { method: "POST", body }],
    [`/v1beta/${op.name}`, {}],
    [`/v1beta/models/${FAST}/operations`, {}],
    [`/v1beta/files/abcdefghij12:download?alt=media`, { redirect: "manual" }],
  ];
  for (const [path, init] of requests) {
    const none = await fetch(`${srv.url}${path}`, init);
    assert.equal(none.status, 403, path);
    const e1 = await errorOf(none);
    assert.equal(e1.status, "PERMISSION_DENIED");
    assert.match(e1.message, /unregistered callers.*API Key/);

    for (const wrong of [{ headers: { "x-goog-api-key": "nope" } }, { query: "key=nope" }]) {
      const sep = path.includes("?") ? "&" : "?";
      const url = `${srv.url}${path}${"query" in wrong ? sep + wrong.query : ""}`;
      const res = await fetch(url, { ...init, headers: "headers" in wrong ? wrong.headers : {} });
      assert.equal(res.status, 400, path);
      const e2 = await errorOf(res);
      assert.equal(e2.status, "INVALID_ARGUMENT");
      assert.equal(e2.message, "API key not valid. Please pass a valid API key.");
      const info = e2.details?.[0] as Record<string, unknown>;
      assert.equal(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
      assert.equal(info.reason, "API_KEY_INVALID");
      assert.equal(info.domain, "googleapis.com");
    }
  }
  // `?key=` works like the header.
  const byQuery = await fetch(`${srv.url}/v1beta/${op.name}?key=${KEY}`);
  assert.equal(byQuery.status, 200);
  assert.equal((await byQuery.json()).done, true);

  // The SDK sees the same errors as ApiError.
  const bad = new GoogleGenAI({ apiKey: "wrong", httpOptions: { baseUrl: srv.url } });
  await assert.rejects(
    () => bad.models.generateVideos({ model: FAST, source: { prompt: "a cat" } }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && /API_KEY_INVALID/.test(e.message),
  );
  await assert.rejects(
    () =>
      ai.models.generateVideos({
        model: FAST,
        source: { prompt: "a cat" },
        config: { durationSeconds: 5 },
      }),
    (e: unknown) =>
      e instanceof ApiError && e.status === 400 && /INVALID_ARGUMENT/.test(e.message) &&
      /durationSeconds/.test(e.message),
  );
  await assert.rejects(
    () => ai.models.generateVideos({ model: "veo-9-imaginary", source: { prompt: "a cat" } }),
    (e: unknown) => e instanceof ApiError && e.status === 404 && /NOT_FOUND/.test(e.message),
  );

  // Malformed JSON, unknown routes and unknown operations: Google's envelope, never a 500.
  const headers = { "x-goog-api-key": KEY };
  const malformed = await fetch(`${srv.url}/v1beta/models/${FAST}:predictLongRunning`, {
    method: "POST",
    headers,
    body: "{not json",
  });
  assert.equal(malformed.status, 400);
  assert.equal((await errorOf(malformed)).status, "INVALID_ARGUMENT");
  for (const path of ["/v1beta/nothing/here", `/v1beta/models/${FAST}:generateContent`]) {
    const res = await fetch(`${srv.url}${path}`, { method: "POST", headers, body: "{}" });
    assert.equal(res.status, 404, path);
    assert.equal((await errorOf(res)).status, "NOT_FOUND");
  }
  const missing = await fetch(`${srv.url}/v1beta/models/${FAST}/operations/zzzzzzzzzzzz`, {
    headers,
  });
  assert.equal(missing.status, 404);
  assert.equal((await errorOf(missing)).status, "NOT_FOUND");
});

Deno.test("video API: Range downloads, signed URLs, the mangled http:// path, metadata and listing", async () => {
  await using srv = await startVideoServer();
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: srv.url } });
  const done = await waitDone(
    ai,
    await ai.models.generateVideos({
      model: FAST,
      source: { prompt: "A slow pan over a mossy forest floor" },
      config: { durationSeconds: 4 },
    }),
  );
  const uri = done.response!.generatedVideos![0].video!.uri!;
  const id = /files\/([a-z0-9]{12}):download/.exec(uri)![1];
  const headers = { "x-goog-api-key": KEY };

  // The download uri redirects to a signed media URL that needs no key.
  const redirect = await fetch(uri, { headers, redirect: "manual" });
  assert.equal(redirect.status, 302);
  await redirect.body?.cancel();
  const location = new URL(redirect.headers.get("location")!);
  assert.equal(location.origin, srv.url);
  assert.match(location.pathname, new RegExp(`^/v1beta/media/${id}\\.mp4$`));
  const full = await fetch(location);
  assert.equal(full.status, 200);
  assert.equal(full.headers.get("content-type"), "video/mp4");
  assert.equal(full.headers.get("accept-ranges"), "bytes");
  const bytes = new Uint8Array(await full.arrayBuffer());
  const size = bytes.length;
  assert.equal(Number(full.headers.get("content-length")), size);
  assert.ok(size > 1000);

  const head = await fetch(location, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(Number(head.headers.get("content-length")), size);
  assert.equal((await head.arrayBuffer()).byteLength, 0);

  const first = await fetch(location, { headers: { range: "bytes=0-99" } });
  assert.equal(first.status, 206);
  assert.equal(first.headers.get("content-range"), `bytes 0-99/${size}`);
  assert.equal(first.headers.get("content-length"), "100");
  assert.deepEqual(new Uint8Array(await first.arrayBuffer()), bytes.subarray(0, 100));

  const suffix = await fetch(location, { headers: { range: "bytes=-100" } });
  assert.equal(suffix.status, 206);
  assert.equal(suffix.headers.get("content-range"), `bytes ${size - 100}-${size - 1}/${size}`);
  assert.deepEqual(new Uint8Array(await suffix.arrayBuffer()), bytes.subarray(size - 100));

  const open = await fetch(location, { headers: { range: `bytes=${size - 10}-` } });
  assert.equal(open.status, 206);
  assert.deepEqual(new Uint8Array(await open.arrayBuffer()), bytes.subarray(size - 10));

  const beyond = await fetch(location, { headers: { range: `bytes=${size}-` } });
  assert.equal(beyond.status, 416);
  assert.equal(beyond.headers.get("content-range"), `bytes */${size}`);
  assert.equal((await errorOf(beyond)).status, "OUT_OF_RANGE");

  // Tampered signature or exp: 403.
  const sig = location.searchParams.get("sig")!;
  const tampered = new URL(location);
  tampered.searchParams.set("sig", (sig[0] === "0" ? "1" : "0") + sig.slice(1));
  const t1 = await fetch(tampered);
  assert.equal(t1.status, 403);
  assert.equal((await errorOf(t1)).status, "PERMISSION_DENIED");
  const later = new URL(location);
  later.searchParams.set("exp", String(Number(location.searchParams.get("exp")) + 3600));
  const t2 = await fetch(later);
  assert.equal(t2.status, 403);
  await t2.body?.cancel();
  // Another file's id under the same signature: 403.
  const other = new URL(location);
  other.pathname = "/v1beta/media/abcdefghij12.mp4";
  const t3 = await fetch(other);
  assert.equal(t3.status, 403);
  await t3.body?.cancel();

  // The SDK's mangling of an http:// uri still reaches the file.
  const mangled = await fetch(
    `${srv.url}/v1beta/files/${srv.url}/v1beta/files/${id}:download?alt=media:download&alt=media`,
    { headers, redirect: "manual" },
  );
  assert.equal(mangled.status, 302);
  await mangled.body?.cancel();
  assert.match(mangled.headers.get("location")!, new RegExp(`/v1beta/media/${id}\\.mp4\\?`));

  // Behind a reverse proxy the uris use the forwarded origin.
  const proxied = await (await fetch(`${srv.url}/v1beta/${done.name}`, {
    headers: { ...headers, "x-forwarded-proto": "https", "x-forwarded-host": "videos.example" },
  })).json();
  assert.equal(
    proxied.response.generateVideoResponse.generatedSamples[0].video.uri,
    `https://videos.example/v1beta/files/${id}:download?alt=media`,
  );

  // File metadata.
  const meta = await (await fetch(`${srv.url}/v1beta/files/${id}`, { headers })).json();
  assert.equal(meta.name, `files/${id}`);
  assert.equal(meta.mimeType, "video/mp4");
  assert.equal(meta.sizeBytes, String(size));

  // Listing (a second, filtered operation makes two pages of one).
  await ai.models.generateVideos({ model: FAST, source: { prompt: "forbidden thing" } });
  const list = await (await fetch(`${srv.url}/v1beta/models/${FAST}/operations`, { headers }))
    .json();
  assert.equal(list.operations.length, 2);
  assert.ok(list.operations.some((o: { name: string }) => o.name === done.name));
  const page1 = await (await fetch(
    `${srv.url}/v1beta/models/${FAST}/operations?pageSize=1`,
    { headers },
  )).json();
  assert.equal(page1.operations.length, 1);
  assert.ok(page1.nextPageToken);
  const page2 = await (await fetch(
    `${srv.url}/v1beta/models/${FAST}/operations?pageSize=1&pageToken=${page1.nextPageToken}`,
    { headers },
  )).json();
  assert.equal(page2.operations.length, 1);
  assert.notEqual(page2.operations[0].name, page1.operations[0].name);
  assert.equal(page2.nextPageToken, undefined);
  const other2 = await (await fetch(`${srv.url}/v1beta/models/${VEO2}/operations`, { headers }))
    .json();
  assert.deepEqual(other2.operations, []);
  const unknown = await fetch(`${srv.url}/v1beta/models/veo-9-nope/operations`, { headers });
  assert.equal(unknown.status, 404);
  assert.equal((await errorOf(unknown)).status, "NOT_FOUND");

  // A signed URL is good for a few minutes only.
  srv.skew.ms = 10 * 60_000;
  const expired = await fetch(location);
  assert.equal(expired.status, 403);
  assert.match((await errorOf(expired)).message, /expired/);
});
