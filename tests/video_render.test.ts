// The local video renderer end to end: real ffmpeg renders checked with ffprobe (codec, size,
// 24 fps, frame count, duration, audio present or absent), pixels sampled to show the input
// images really are the picture, extension continuing its input, progress, abort, a missing or
// failing ffmpeg; and the pure parts (dialogue extraction, text layout, filter graphs) as units.
import assert from "node:assert/strict";
import { findFont, frameSize, RenderError, renderVideo } from "../lib/video/render.ts";
import { findTool, parseProbe, parseRate, probeVideo } from "../lib/video/probe.ts";
import { dialogueScript, extractDialogue, speechRate } from "../lib/video/dialogue.ts";
import {
  buildFilterGraph,
  escapeFilterValue,
  layoutText,
  seedFor,
  wrapText,
} from "../lib/video/render_filters.ts";
import type { ImageInput, RenderJob } from "../lib/video/types.ts";

const FFMPEG = "/usr/bin/ffmpeg";

/** A temp dir for one test, removed afterwards. */
async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-video-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function job(outPath: string, over: Partial<RenderJob> = {}): RenderJob {
  return {
    ...frameSize("720p", "16:9"),
    durationSeconds: 4,
    fps: 24,
    audio: true,
    prompt: 'A lighthouse on a cliff at dusk; the keeper says "Storm is coming."',
    seed: 1234,
    outPath,
    ...over,
  };
}

async function ffmpeg(args: string[]): Promise<Uint8Array> {
  const out = await new Deno.Command(FFMPEG, {
    args: ["-hide_banner", "-loglevel", "error", "-nostdin", "-y", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return out.stdout;
}

/** A PNG made by ffmpeg: a solid colour with a test pattern inset, so it is a real picture. */
async function makePng(dir: string, name: string, color: string): Promise<ImageInput> {
  const path = `${dir}/${name}.png`;
  await ffmpeg([
    "-f",
    "lavfi",
    "-i",
    `color=c=${color}:s=640x360`,
    "-f",
    "lavfi",
    "-i",
    "testsrc2=s=120x68",
    "-filter_complex",
    "[0:v][1:v]overlay=8:8",
    "-frames:v",
    "1",
    path,
  ]);
  return { mimeType: "image/png", bytes: await Deno.readFile(path) };
}

/** Average RGB of frame `n` (optionally of a crop `w:h:x:y`), via an area scale to 1x1. */
async function meanRgb(path: string, n: number, crop?: string): Promise<[number, number, number]> {
  const pick = `select='eq(n\\,${n})'`;
  const vf = [pick, ...(crop ? [`crop=${crop}`] : []), "scale=1:1:flags=area"].join(",");
  const px = await ffmpeg([
    "-i",
    path,
    "-vf",
    vf,
    "-frames:v",
    "1",
    "-f",
    "rawvideo",
    "-pix_fmt",
    "rgb24",
    "pipe:1",
  ]);
  assert.equal(px.length, 3, `frame ${n} of ${path} not found`);
  return [px[0], px[1], px[2]];
}

function assertVideo(
  p: Awaited<ReturnType<typeof probeVideo>>,
  want: { width: number; height: number; seconds: number; audio: boolean },
): void {
  assert.equal(p.videoCodec, "h264");
  assert.equal(p.width, want.width);
  assert.equal(p.height, want.height);
  assert.equal(p.fps, 24);
  assert.equal(p.frames, want.seconds * 24);
  assert.ok(
    Math.abs(p.durationSeconds - want.seconds) <= 0.1,
    `duration ${p.durationSeconds} != ${want.seconds}`,
  );
  if (want.audio) assert.equal(p.audioCodec, "aac");
  else assert.equal(p.audioCodec, undefined, "a silent clip must have no audio stream");
}

/** Peak level in dB of the audio between `from` and `to` seconds. */
async function maxVolume(path: string, from = 0, to = 1e6): Promise<number> {
  const out = await new Deno.Command(FFMPEG, {
    args: [
      "-hide_banner",
      "-nostdin",
      "-i",
      path,
      "-af",
      `atrim=${from}:${to},volumedetect`,
      "-f",
      "null",
      "-",
    ],
    stderr: "piped",
    stdout: "null",
  }).output();
  const text = new TextDecoder().decode(out.stderr);
  assert.ok(out.success, text);
  return Number(/max_volume: (-?[\d.]+) dB/.exec(text)?.[1] ?? NaN);
}

async function listDir(dir: string): Promise<string[]> {
  return (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).sort();
}

// --- end to end renders ---

Deno.test("text 720p 16:9 4 s with audio: h264 1280x720 24 fps 96 frames, aac, progress to 100", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/text.mp4`;
    const seen: number[] = [];
    const logs: string[] = [];
    await renderVideo(job(out), {
      ffmpeg: FFMPEG,
      onProgress: (p) => seen.push(p),
      log: (l) => logs.push(l),
    });
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 4, audio: true });
    assert.equal(seen.at(-1), 100);
    assert.ok(seen.length >= 2, `progress only ${JSON.stringify(seen)}`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], "progress rises");
    assert.deepEqual(await listDir(dir), ["text.mp4"], "no temp file left next to the output");
    // The background moves: the first and last frames differ.
    const a = await meanRgb(out, 0, "200:200:0:0");
    const b = await meanRgb(out, 95, "200:200:0:0");
    assert.ok(a.some((v, i) => Math.abs(v - b[i]) > 4), `still picture ${a} ${b}`);
    // Not silent: the bed (and the espeak-ng line when installed) is audible.
    const max = await maxVolume(out);
    assert.ok(max > -40 && max < 0, `max volume ${max} dB`);
  });
});

Deno.test("9:16 1080p without audio has no audio stream", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/tall.mp4`;
    const size = frameSize("1080p", "9:16");
    await renderVideo(job(out, { ...size, audio: false }), { ffmpeg: FFMPEG, log: () => {} });
    assertVideo(await probeVideo(out), { width: 1080, height: 1920, seconds: 4, audio: false });
  });
});

Deno.test("image-to-video starts on the image and animates it", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/i2v.mp4`;
    const image = await makePng(dir, "red", "0xd02020");
    await renderVideo(job(out, { image, audio: false }), { ffmpeg: FFMPEG, log: () => {} });
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 4, audio: false });
    // Frame 0 is the (letterbox-free 16:9) red image: sample above the caption band.
    const [r, g, b] = await meanRgb(out, 0, "600:300:600:100");
    assert.ok(r > 150 && g < 80 && b < 80, `first frame is not the image: ${[r, g, b]}`);
    // The test-pattern inset (top left) drifts as the zoom goes on.
    const a = await meanRgb(out, 0, "160:100:0:0");
    const z = await meanRgb(out, 95, "160:100:0:0");
    assert.ok(a.some((v, i) => Math.abs(v - z[i]) > 4), `no motion ${a} ${z}`);
  });
});

Deno.test("interpolation moves from the first image to the last", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/interp.mp4`;
    const image = await makePng(dir, "red", "0xd02020");
    const lastFrame = await makePng(dir, "blue", "0x2030d0");
    await renderVideo(job(out, { image, lastFrame, audio: false }), {
      ffmpeg: FFMPEG,
      log: () => {},
    });
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 4, audio: false });
    const first = await meanRgb(out, 0, "600:300:600:100");
    const mid = await meanRgb(out, 48, "600:300:600:100");
    const last = await meanRgb(out, 95, "600:300:600:100");
    assert.ok(first[0] > 150 && first[2] < 80, `first ${first}`);
    assert.ok(last[2] > 150 && last[0] < 80, `last ${last}`);
    assert.ok(mid[0] > 60 && mid[2] > 60, `midway is a blend: ${mid}`);
  });
});

Deno.test("reference images appear as thumbnails", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/refs.mp4`;
    const green = await makePng(dir, "green", "0x20c040");
    await renderVideo(
      job(out, { durationSeconds: 2, audio: false, referenceImages: [green] }),
      { ffmpeg: FFMPEG, log: () => {} },
    );
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 2, audio: false });
    // One thumbnail, centred near the top, faded in by the end.
    const [r, g, b] = await meanRgb(out, 47, "200:80:540:90");
    assert.ok(g > 150 && r < 100 && b < 120, `no thumbnail: ${[r, g, b]}`);
  });
});

Deno.test("extension: input + 7 s, same size, continues from the last frame, keeps audio", async () => {
  await withDir(async (dir) => {
    const input = `${dir}/in.mp4`;
    await renderVideo(job(input, { durationSeconds: 2 }), { ffmpeg: FFMPEG, log: () => {} });
    const out = `${dir}/ext.mp4`;
    let last = 0;
    await renderVideo(
      job(out, { durationSeconds: 9, extendPath: input, prompt: "the storm arrives" }),
      { ffmpeg: FFMPEG, onProgress: (p) => last = p, log: () => {} },
    );
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 9, audio: true });
    assert.equal(last, 100);
    // The input's own sound plays first (not silence), then the segment's bed.
    assert.ok(await maxVolume(out, 0.5, 1.5) > -40, "input audio kept");
    assert.ok(await maxVolume(out, 3, 8) > -40, "segment audio");
    // The first frame of the new segment is the input's last frame (its caption fades in).
    const end = await meanRgb(input, 47);
    const seam = await meanRgb(out, 48);
    assert.ok(end.every((v, i) => Math.abs(v - seam[i]) <= 6), `seam ${end} vs ${seam}`);
    // A length that is not input + a segment is refused, not silently changed.
    await assert.rejects(
      renderVideo(job(`${dir}/bad.mp4`, { durationSeconds: 4, extendPath: input }), {
        ffmpeg: FFMPEG,
      }),
      (e) => e instanceof RenderError && /extended length/.test(e.message),
    );
  });
});

Deno.test("without espeak-ng the clip still has its tone bed, and the log says why", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/bed.mp4`;
    const logs: string[] = [];
    await renderVideo(job(out, { durationSeconds: 2 }), {
      ffmpeg: FFMPEG,
      espeak: "/nonexistent/espeak-ng",
      log: (l) => logs.push(l),
    });
    assertVideo(await probeVideo(out), { width: 1280, height: 720, seconds: 2, audio: true });
    assert.ok(logs.some((l) => /espeak-ng is not installed/.test(l)), logs.join("\n"));
  });
});

Deno.test("a missing ffmpeg is a RenderError at once", async () => {
  await withDir(async (dir) => {
    const t0 = performance.now();
    await assert.rejects(
      renderVideo(job(`${dir}/x.mp4`), { ffmpeg: "/nonexistent/ffmpeg" }),
      (e) =>
        e instanceof RenderError &&
        /ffmpeg is not installed.*apt-get install ffmpeg/.test(e.message),
    );
    assert.ok(performance.now() - t0 < 2000);
    assert.deepEqual(await listDir(dir), []);
  });
});

Deno.test("a failing ffmpeg is a RenderError with its stderr, and leaves no file", async () => {
  await withDir(async (dir) => {
    const image = { mimeType: "image/png", bytes: new TextEncoder().encode("not a png at all") };
    await assert.rejects(
      renderVideo(job(`${dir}/x.mp4`, { image }), { ffmpeg: FFMPEG, log: () => {} }),
      (e) => e instanceof RenderError && /ffmpeg failed \(exit \d+\): \S/.test(e.message),
    );
    assert.deepEqual(await listDir(dir), []);
    await assert.rejects(
      renderVideo(job(`${dir}/x.mp4`, { image: { mimeType: "text/plain", bytes: image.bytes } }), {
        ffmpeg: FFMPEG,
      }),
      (e) => e instanceof RenderError && /text\/plain.*not supported/.test(e.message),
    );
  });
});

Deno.test("abort mid-render kills ffmpeg, rejects, and leaves no output", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/long.mp4`;
    const ctl = new AbortController();
    const t0 = performance.now();
    let progressed = 0;
    await assert.rejects(
      renderVideo(job(out, { durationSeconds: 60 }), {
        ffmpeg: FFMPEG,
        signal: ctl.signal,
        onProgress: (p) => {
          progressed = p;
          if (p >= 1) ctl.abort();
        },
        log: () => {},
      }),
      (e) => (e as Error).name === "AbortError",
    );
    assert.ok(progressed >= 1 && progressed < 100, `aborted at ${progressed}%`);
    assert.ok(performance.now() - t0 < 20_000);
    assert.deepEqual(await listDir(dir), [], "no output, no partial file");
    // An already aborted signal never starts ffmpeg.
    await assert.rejects(
      renderVideo(job(out), { ffmpeg: FFMPEG, signal: AbortSignal.abort() }),
      (e) => (e as Error).name === "AbortError",
    );
  });
});

// --- units ---

Deno.test("frameSize: Veo resolutions in both orientations", () => {
  assert.deepEqual(frameSize("720p", "16:9"), { width: 1280, height: 720 });
  assert.deepEqual(frameSize("720p", "9:16"), { width: 720, height: 1280 });
  assert.deepEqual(frameSize("1080p", "16:9"), { width: 1920, height: 1080 });
  assert.deepEqual(frameSize("1080p", "9:16"), { width: 1080, height: 1920 });
  assert.deepEqual(frameSize("4k", "16:9"), { width: 3840, height: 2160 });
  assert.deepEqual(frameSize("4k", "9:16"), { width: 2160, height: 3840 });
  // deno-lint-ignore no-explicit-any
  assert.throws(() => frameSize("8k" as any, "16:9"), RangeError);
});

Deno.test("extractDialogue: straight, curly, German, guillemet and single curly quotes", () => {
  assert.deepEqual(
    extractDialogue('A man says "Hello there." and she replies “Hi!” then „Gut“ and «Salut»'),
    ["Hello there.", "Hi!", "Gut", "Salut"],
  );
  assert.deepEqual(extractDialogue("He whispers ‘I don’t know’ and leaves."), ["I don’t know"]);
  assert.deepEqual(extractDialogue("It’s the dog’s bone, isn’t it"), []);
  assert.deepEqual(extractDialogue('no quotes here, an "" empty pair, a " lone mark'), []);
  assert.deepEqual(extractDialogue('"  spaced\n  out  "'), ["spaced out"]);
  assert.deepEqual(extractDialogue("a cat on a mat"), []);
});

Deno.test("dialogueScript and speechRate: pauses between lines, fast enough to fit", () => {
  assert.equal(dialogueScript(["Hello", "How are you?"]), "Hello. How are you?");
  const long = dialogueScript([("word ".repeat(200)).trim()]);
  assert.ok(long.length <= 401 && long.endsWith("."));
  assert.equal(speechRate("hi", 8), 165);
  const words = "one two three four five six seven eight nine ten eleven twelve";
  assert.ok(speechRate(words, 4) > 165);
  assert.ok(speechRate("w ".repeat(500), 4) <= 320);
});

Deno.test("layoutText: fits the area, shrinks for long prompts, cuts what cannot fit", () => {
  const short = layoutText("a cat", 1280, 720, "title");
  assert.deepEqual(short.lines, ["a cat"]);
  const long = layoutText("lorem ipsum ".repeat(40), 1280, 720, "title");
  assert.ok(long.fontSize < short.fontSize);
  assert.ok(long.lines.length * long.lineHeight <= 720 * 0.8);
  const huge = layoutText("word ".repeat(2000), 1280, 720, "caption");
  assert.ok(huge.lines.length * huge.lineHeight <= 720 * 0.3);
  assert.ok(huge.lines.at(-1)!.endsWith("…"));
  assert.deepEqual(layoutText(" \n\t ", 1280, 720, "title").lines, []);
  assert.deepEqual(wrapText("aaaaaaaaaa bb", 4), ["aaaa", "aaaa", "aa", "bb"]);
});

Deno.test("escapeFilterValue: ffmpeg reads a textfile whose path holds : , ' [ ] ;", async () => {
  assert.equal(escapeFilterValue("/tmp/a.txt"), "/tmp/a.txt");
  assert.equal(escapeFilterValue("C:x"), "C\\\\:x");
  await withDir(async (dir) => {
    const odd = `${dir}/it's:a,[b];c`;
    await Deno.mkdir(odd);
    await Deno.writeTextFile(`${odd}/t.txt`, "50% of 'x': y, z");
    const font = await findFont();
    assert.ok(font, "tests need a font (fonts-dejavu-core)");
    await ffmpeg([
      "-f",
      "lavfi",
      "-i",
      "color=s=64x64",
      "-vf",
      `drawtext=fontfile=${escapeFilterValue(font)}:textfile=${escapeFilterValue(`${odd}/t.txt`)}` +
      ":expansion=none",
      "-frames:v",
      "1",
      "-f",
      "null",
      "-",
    ]);
  });
});

Deno.test("buildFilterGraph: audio only when asked, extension concatenates input and segment", () => {
  const base = {
    width: 1280,
    height: 720,
    frames: 96,
    seed: 5,
    base: { kind: "gradient" as const },
    references: [],
  };
  const silent = buildFilterGraph(base);
  assert.equal(silent.audio, undefined);
  assert.ok(!/sine=|anullsrc|\[a\]/.test(silent.graph));
  assert.equal(silent.totalFrames, 96);
  const sound = buildFilterGraph({ ...base, audio: { fadeIn: true, dialogueInput: 2 } });
  assert.equal(sound.audio, "[a]");
  assert.match(sound.graph, /\[2:a\]aresample=48000/);
  const ext = buildFilterGraph({
    ...base,
    frames: 168,
    base: { kind: "image", input: 1 },
    prefix: { input: 0, frames: 192, hasAudio: false },
    audio: { fadeIn: false },
  });
  assert.equal(ext.totalFrames, 360);
  assert.match(ext.graph, /anullsrc=r=48000:cl=stereo,atrim=end=8,/);
  assert.match(ext.graph, /\[pv\]\[pa\]\[sv\]\[sa\]concat=n=2:v=1:a=1\[v\]\[a\]/);
  assert.match(ext.graph, /zoompan=.*:d=168:s=1280x720:fps=24/);
  // Same seed, same graph; another seed, another look.
  assert.equal(buildFilterGraph(base).graph, silent.graph);
  assert.notEqual(buildFilterGraph({ ...base, seed: 6 }).graph, silent.graph);
  assert.equal(seedFor(undefined, "x"), seedFor(undefined, "x"));
  assert.notEqual(seedFor(undefined, "x"), seedFor(undefined, "y"));
});

Deno.test("findFont: DejaVu Sans here, nothing where there are no fonts", async () => {
  assert.match((await findFont()) ?? "", /DejaVuSans\.ttf$/);
  assert.equal(await findFont(["/nonexistent-fonts"]), undefined);
});

Deno.test("a throwing progress callback stops the render and leaves no file", async () => {
  await withDir(async (dir) => {
    await assert.rejects(
      renderVideo(job(`${dir}/x.mp4`, { durationSeconds: 30, audio: false }), {
        ffmpeg: FFMPEG,
        onProgress: () => {
          throw new Error("listener broke");
        },
        log: () => {},
      }),
      /listener broke/,
    );
    assert.deepEqual(await listDir(dir), []);
  });
});

Deno.test("findTool and probe parsing", async () => {
  assert.equal(await findTool("ffmpeg"), FFMPEG);
  assert.equal(await findTool(FFMPEG), FFMPEG);
  assert.equal(await findTool("hearth-no-such-tool"), undefined);
  assert.equal(await findTool("/nonexistent/ffmpeg"), undefined);
  assert.equal(parseRate("24/1"), 24);
  assert.equal(parseRate("0/0"), 0);
  assert.deepEqual(
    parseProbe({
      streams: [{
        codec_type: "video",
        codec_name: "h264",
        width: 2,
        height: 2,
        avg_frame_rate: "24/1",
        nb_frames: "48",
      }],
      format: { duration: "2.000000" },
    }),
    { videoCodec: "h264", width: 2, height: 2, fps: 24, durationSeconds: 2, frames: 48 },
  );
  assert.throws(() => parseProbe({ streams: [{ codec_type: "audio" }] }), RenderError);
  await assert.rejects(probeVideo("/nonexistent.mp4"), RenderError);
});
