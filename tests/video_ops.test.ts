/**
 * Video operations beyond the happy path: durability across a SIGKILL of a real `hearth serve`
 * process, retention with an injected clock (expiry, the sweeper, an extension input's timer
 * reset, extension by uri and by bytes), a missing ffmpeg, and the gateway to an upstream service
 * (a second instance of this one) with the caller's key. Plus the small pure pieces: ids, the
 * blocklist matcher, Range parsing, URL signing and the key check.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { ApiError, GoogleGenAI } from "@google/genai";
import { compileBlocklist, readBlocklist } from "../lib/video/blocklist.ts";
import { checkApiKey } from "../lib/video/errors.ts";
import { isVideoId, newVideoId } from "../lib/video/ids.ts";
import { DEFAULT_RETENTION_MS, type VideoServiceConfig } from "../lib/video/operations.ts";
import { encodeStoredRequest } from "../lib/video/jobs.ts";
import { probeVideo } from "../lib/video/probe.ts";
import { parseRange } from "../lib/video/range.ts";
import { loadSigningKey, mediaPath, verifyMedia } from "../lib/video/signing.ts";
import { openVideoStore } from "../lib/video/store.ts";
import type { VideoRequest } from "../lib/video/types.ts";
import { startVideoServer as startSupportServer } from "./support/video.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const KEY = "test-key-video-ops";
const FAST = "veo-3.1-fast-generate-preview";
const DAY = 24 * 3600_000;

const startVideoServer = (cfg: Partial<VideoServiceConfig> = {}) =>
  startSupportServer({ keys: [KEY], ...cfg });

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Wire = {
  name: string;
  done?: boolean;
  metadata?: { progressPercent?: number };
  error?: { code: number; message: string };
  response?: { generateVideoResponse: { generatedSamples?: { video: { uri: string } }[] } };
};

async function startOp(
  url: string,
  model: string,
  body: unknown,
  key = KEY,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${url}/v1beta/models/${model}:predictLongRunning`, {
    method: "POST",
    headers: { "x-goog-api-key": key, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function poll(url: string, name: string, key = KEY): Promise<{ status: number; op: Wire }> {
  const res = await fetch(`${url}/v1beta/${name}`, { headers: { "x-goog-api-key": key } });
  return { status: res.status, op: await res.json() };
}

async function pollDone(url: string, name: string, timeoutMs = 60_000): Promise<Wire> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    const { status, op } = await poll(url, name);
    assert.equal(status, 200, JSON.stringify(op));
    if (op.done) return op;
    if (Date.now() > deadline) throw new Error(`${name} not done after ${timeoutMs} ms`);
    await delay(150);
  }
}

const sampleUri = (op: Wire) => op.response!.generateVideoResponse.generatedSamples![0].video.uri;
const fileIdOf = (uri: string) => /files\/([a-z0-9]{12}):download/.exec(uri)![1];

async function mp4sIn(dataDir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(`${dataDir}/video/files`)) names.push(e.name);
  return names.sort();
}

Deno.test("video ops: ids, blocklist, ranges, signed URLs and the key check", async () => {
  const ids = new Set(Array.from({ length: 2000 }, () => newVideoId()));
  assert.equal(ids.size, 2000);
  for (const id of ids) assert.ok(isVideoId(id), id);
  assert.equal(isVideoId("ABCDEFGHIJ12"), false);
  assert.equal(isVideoId("abc"), false);

  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/block.txt`,
      "# weapons\ngun   # inline comment\n\n  red   panda \nc++\n",
    );
    const terms = await readBlocklist(`${dir}/block.txt`);
    assert.deepEqual(terms, ["gun", "red panda", "c++"]);
    const match = compileBlocklist(terms);
    assert.equal(match("A GUN fight"), "gun");
    assert.equal(match("it had begun"), undefined);
    assert.equal(match("guns"), undefined);
    assert.equal(match("a Red\n Panda eats"), "red panda");
    assert.equal(match("a redpanda"), undefined);
    assert.equal(match("learning c++ today"), "c++");
    assert.equal(compileBlocklist([])("anything"), undefined);
    await assert.rejects(() => readBlocklist(`${dir}/missing.txt`), /blocklist .*missing\.txt/);

    const key = await loadSigningKey(dir);
    const again = await loadSigningKey(dir); // same secret from the file
    const path = await mediaPath(key, "abcdefghij12", 10_000_000);
    const u = new URL(path, "http://x");
    const [exp, sig] = [u.searchParams.get("exp"), u.searchParams.get("sig")];
    assert.equal(await verifyMedia(again, "abcdefghij12", exp, sig, 9_000_000), "ok");
    assert.equal(await verifyMedia(key, "abcdefghij12", exp, sig, 10_001_000), "expired");
    assert.equal(await verifyMedia(key, "bbcdefghij12", exp, sig, 9_000_000), "bad");
    assert.equal(await verifyMedia(key, "abcdefghij12", "99999", sig, 9_000_000), "bad");
    assert.equal(await verifyMedia(key, "abcdefghij12", exp, null, 9_000_000), "bad");
    assert.equal((await Deno.stat(`${dir}/signing.key`)).mode! & 0o777, 0o600);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }

  assert.deepEqual(parseRange("bytes=0-99", 1000), { kind: "range", start: 0, end: 99 });
  assert.deepEqual(parseRange("bytes=990-2000", 1000), { kind: "range", start: 990, end: 999 });
  assert.deepEqual(parseRange("bytes=-100", 1000), { kind: "range", start: 900, end: 999 });
  assert.deepEqual(parseRange("bytes=-5000", 1000), { kind: "range", start: 0, end: 999 });
  assert.deepEqual(parseRange("bytes=1000-", 1000), { kind: "unsatisfiable" });
  assert.deepEqual(parseRange("bytes=-0", 1000), { kind: "unsatisfiable" });
  for (const ignored of [undefined, "", "bytes=5-1", "bytes=0-1,5-9", "items=0-1", "bytes=-"]) {
    assert.deepEqual(parseRange(ignored, 1000), { kind: "full" }, String(ignored));
  }

  assert.equal(checkApiKey([], undefined), undefined);
  assert.equal(checkApiKey(["a", "b"], "b"), undefined);
  assert.equal(checkApiKey(["a"], undefined)?.httpStatus, 403);
  assert.equal(checkApiKey(["a"], "ab")?.body.error.status, "INVALID_ARGUMENT");
});

Deno.test("video ops: an operation running when the server is SIGKILLed finishes after restart", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-video-restart-" });
  const args = ["--model", await tinyModelPath(), "--data-dir", dataDir, "--video-workers", "1"];
  const env = { HEARTH_VIDEO_API_KEYS: `other,${KEY}` };
  try {
    let name: string;
    {
      await using first = await startServer(args, { env });
      const started = await startOp(first.url, FAST, {
        instances: [{ prompt: "Rain on a tin roof, slow zoom" }],
        parameters: { durationSeconds: 4 },
      });
      assert.equal(started.status, 200, JSON.stringify(started.json));
      name = started.json.name as string;
      // Kill while it renders (or at the latest while queued): never after it finished.
      const deadline = Date.now() + 3000;
      while (Date.now() < deadline) {
        const { op } = await poll(first.url, name);
        assert.equal(op.done, undefined, "rendered before the kill; the test proves nothing");
        assert.equal(
          (op.metadata as Record<string, unknown>)["@type"],
          "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningMetadata",
        );
        if ((op.metadata?.progressPercent ?? 0) > 0) break;
        await delay(30);
      }
      first.child.kill("SIGKILL");
      const status = await first.child.status;
      assert.equal(status.signal, "SIGKILL");
    }
    await using second = await startServer(args, { env });
    const done = await pollDone(second.url, name);
    assert.equal(done.error, undefined, JSON.stringify(done.error));
    const id = fileIdOf(sampleUri(done));
    const p = await probeVideo(`${dataDir}/video/files/${id}.mp4`);
    assert.equal(p.videoCodec, "h264");
    assert.equal(p.fps, 24);
    assert.ok(Math.abs(p.durationSeconds - 4) < 0.25);
    // The killed render's partial output was cleaned up: one finished file, nothing else.
    assert.deepEqual(await mp4sIn(dataDir), [`${id}.mp4`]);
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("video ops: an unfinished extension whose input is gone ends with NOT_FOUND on restart", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-video-gone-" });
  try {
    // What a killed process leaves behind: a running extension of a video that has since gone.
    const store = openVideoStore(dataDir);
    const request: VideoRequest = {
      model: FAST,
      family: "3.1",
      mode: "extension",
      prompt: "The kite dives",
      aspectRatio: "16:9",
      resolution: "720p",
      durationSeconds: 8,
      sampleCount: 1,
      referenceImages: [],
      videoFileId: "zzzzzzzzzzzz",
    };
    const t = Date.now();
    store.insertOp({
      id: "abcdefabcdef",
      model: FAST,
      state: "running",
      createdAt: t,
      updatedAt: t,
      expiresAt: t + DAY,
      progress: 40,
      request: encodeStoredRequest(request, 15),
      files: [],
    });
    store.close();
    await using srv = await startVideoServer({ dataDir });
    const done = await pollDone(srv.url, `models/${FAST}/operations/abcdefabcdef`, 10_000);
    assert.equal(done.error?.code, 5);
    assert.match(done.error!.message, /files\/zzzzzzzzzzzz no longer exists/);
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("video ops: retention expires operations and files; an extension input's timer restarts", async () => {
  await using srv = await startVideoServer();
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: srv.url } });
  const headers = { "x-goog-api-key": KEY };

  // A: a 4 s video. B: blocked at once (no file), same age.
  let a = await ai.models.generateVideos({
    model: FAST,
    source: { prompt: "A kite over the dunes" },
    config: { durationSeconds: 4 },
  });
  while (!a.done) {
    await delay(150);
    a = await ai.operations.getVideosOperation({ operation: a });
  }
  const aVideo = a.response!.generatedVideos![0];
  const aId = fileIdOf(aVideo.video!.uri!);
  const aPath = `${srv.dataDir}/video/files/${aId}.mp4`;
  const b = (await startOp(srv.url, FAST, { instances: [{ prompt: "forbidden thing" }] })).json
    .name as string;

  // A day later, A's video is extended twice: by uri (through the SDK) and by its bytes.
  srv.skew.ms = DAY;
  let c = await ai.models.generateVideos({
    model: FAST,
    source: { prompt: "The kite dives", video: aVideo.video },
    config: { durationSeconds: 8 },
  });
  const bytes = await Deno.readFile(aPath);
  const d = await startOp(srv.url, FAST, {
    instances: [{
      prompt: "The kite climbs",
      video: { bytesBase64Encoded: Buffer.from(bytes).toString("base64"), mimeType: "video/mp4" },
    }],
    parameters: { durationSeconds: 8 },
  });
  assert.equal(d.status, 200, JSON.stringify(d.json));
  while (!c.done) {
    await delay(150);
    c = await ai.operations.getVideosOperation({ operation: c });
  }
  assert.equal(c.error, undefined, JSON.stringify(c.error));
  const dDone = await pollDone(srv.url, d.json.name as string);
  for (const uri of [c.response!.generatedVideos![0].video!.uri!, sampleUri(dDone)]) {
    const p = await probeVideo(`${srv.dataDir}/video/files/${fileIdOf(uri)}.mp4`);
    assert.ok(Math.abs(p.durationSeconds - 11) < 0.3, `extension lasts ${p.durationSeconds} s`);
    const meta = await (await fetch(`${srv.url}/v1beta/files/${fileIdOf(uri)}`, { headers }))
      .json();
    assert.equal(meta.videoMetadata.videoDuration, "11s");
  }

  // Two days and an hour after the start: B has expired (404 before any sweep), A has not.
  srv.skew.ms = 2 * DAY + 3600_000;
  assert.equal((await poll(srv.url, b)).status, 404);
  assert.equal((await poll(srv.url, a.name!)).status, 200);
  const swept = await srv.sweep();
  assert.equal(swept.ops, 1);
  assert.equal(swept.files, 0);
  const stillThere = await fetch(aVideo.video!.uri!, { headers, redirect: "manual" });
  assert.equal(stillThere.status, 302);
  await stillThere.body?.cancel();
  await Deno.stat(aPath);

  // Three days and an hour: A's restarted timer has run out too.
  srv.skew.ms = 3 * DAY + 3600_000;
  const gone = await poll(srv.url, a.name!);
  assert.equal(gone.status, 404);
  assert.equal((gone.op as unknown as { error: { status: string } }).error.status, "NOT_FOUND");
  const download = await fetch(aVideo.video!.uri!, { headers, redirect: "manual" });
  assert.equal(download.status, 404);
  await download.body?.cancel();
  const sweptAll = await srv.sweep();
  assert.equal(sweptAll.ops, 3);
  assert.equal(sweptAll.files, 3);
  await assert.rejects(() => Deno.stat(aPath), Deno.errors.NotFound);
  assert.deepEqual(await mp4sIn(srv.dataDir), []);
  assert.equal(DEFAULT_RETENTION_MS, 2 * DAY);
});

Deno.test("video ops: without ffmpeg an operation ends with a clear error instead of hanging", async () => {
  await using srv = await startVideoServer({ ffmpeg: "/nonexistent/ffmpeg" });
  const started = await startOp(srv.url, FAST, {
    instances: [{ prompt: "A quiet harbour" }],
    parameters: { durationSeconds: 4 },
  });
  assert.equal(started.status, 200);
  const done = await pollDone(srv.url, started.json.name as string, 10_000);
  assert.equal(done.error?.code, 13);
  assert.match(done.error!.message, /ffmpeg is not installed/);
  assert.equal(done.response, undefined);
});

Deno.test("video ops: the gateway forwards start, poll and download with the caller's key", async () => {
  const UPSTREAM_KEY = "upstream-only-key";
  await using upstream = await startVideoServer({ keys: [UPSTREAM_KEY], blocklist: [] });
  await using gateway = await startVideoServer({
    backend: "upstream",
    upstreamUrl: upstream.url,
    keys: [],
  });
  const ai = new GoogleGenAI({ apiKey: UPSTREAM_KEY, httpOptions: { baseUrl: gateway.url } });
  let op = await ai.models.generateVideos({
    model: FAST,
    source: { prompt: "Fog rolling over a bridge" },
    config: { durationSeconds: 4, aspectRatio: "9:16" },
  });
  assert.match(op.name!, new RegExp(`^models/${FAST}/operations/[a-z0-9]{12}$`));
  // The local name is not the upstream one.
  const upstreamList = await (await fetch(`${upstream.url}/v1beta/models/${FAST}/operations`, {
    headers: { "x-goog-api-key": UPSTREAM_KEY },
  })).json();
  assert.equal(upstreamList.operations.length, 1);
  assert.notEqual(upstreamList.operations[0].name, op.name);

  while (!op.done) {
    await delay(150);
    op = await ai.operations.getVideosOperation({ operation: op });
  }
  assert.equal(op.error, undefined, JSON.stringify(op.error));
  const video = op.response!.generatedVideos![0];
  assert.ok(video.video!.uri!.startsWith(`${gateway.url}/v1beta/files/`), video.video!.uri!);
  const downloadPath = `${gateway.dataDir}/through-gateway.mp4`;
  await ai.files.download({ file: video, downloadPath });
  const p = await probeVideo(downloadPath);
  assert.deepEqual([p.videoCodec, p.width, p.height, p.fps], ["h264", 720, 1280, 24]);
  const whole = await Deno.readFile(downloadPath);

  // Range requests pass through.
  const part = await fetch(video.video!.uri!, {
    headers: { "x-goog-api-key": UPSTREAM_KEY, range: "bytes=0-99" },
  });
  assert.equal(part.status, 206);
  assert.equal(part.headers.get("content-range"), `bytes 0-99/${whole.length}`);
  assert.deepEqual(new Uint8Array(await part.arrayBuffer()), whole.subarray(0, 100));

  // The upstream's auth errors come back as they were.
  const bad = new GoogleGenAI({ apiKey: "wrong", httpOptions: { baseUrl: gateway.url } });
  await assert.rejects(
    () => bad.models.generateVideos({ model: FAST, source: { prompt: "a cat" } }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && /API_KEY_INVALID/.test(e.message),
  );
  await assert.rejects(
    () => bad.operations.getVideosOperation({ operation: op }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && /API_KEY_INVALID/.test(e.message),
  );
  const noKey = await fetch(video.video!.uri!);
  assert.equal(noKey.status, 403);
  assert.equal((await noKey.json()).error.status, "PERMISSION_DENIED");
  // Validation happens upstream, and its 400 is passed through.
  const invalid = await startOp(gateway.url, FAST, {
    instances: [{ prompt: "a cat" }],
    parameters: { durationSeconds: 5 },
  }, UPSTREAM_KEY);
  assert.equal(invalid.status, 400);
  assert.match(JSON.stringify(invalid.json), /durationSeconds/);
});
