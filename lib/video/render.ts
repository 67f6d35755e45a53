/**
 * The local video renderer: turns a validated `RenderJob` into a real MP4 with ffmpeg — H.264
 * (yuv420p, faststart) at exactly 24 fps and the requested size and frame count, with an AAC
 * track (a seeded tone bed plus the prompt's quoted dialogue spoken by espeak-ng) only when the
 * job asks for audio. The prompt is drawn on the frames over a moving background, an image, an
 * image-to-image crossfade, or (extension) the input's last frame continued for a new segment
 * that is concatenated after the input.
 *
 * ffmpeg writes to a hidden temp file next to `outPath` that is renamed on success, so a reader
 * never sees half a video; an abort kills ffmpeg and removes that file. A missing ffmpeg is a
 * `RenderError` at once; a failing one is a `RenderError` with the end of its stderr.
 *
 * @example
 * ```ts
 * import { frameSize, renderVideo } from "./render.ts";
 * const { width, height } = frameSize("720p", "16:9");
 * await renderVideo(
 *   { width, height, durationSeconds: 8, fps: 24, audio: true, prompt: 'A fox says "hello"',
 *     outPath: "/tmp/fox.mp4" },
 *   { onProgress: (p) => console.log(`${p}%`), signal: AbortSignal.timeout(60_000) },
 * );
 * ```
 * @module
 */
import { basename, dirname, join } from "node:path";
import { extractDialogue, synthesizeDialogue } from "./dialogue.ts";
import { ffmpegPath, findTool, notInstalledMessage, probeVideo, RenderError } from "./probe.ts";
import {
  buildFilterGraph,
  FPS,
  type GraphPlan,
  layoutText,
  SAMPLE_RATE,
  seedFor,
} from "./render_filters.ts";
import type { ImageInput, Progress, RenderJob } from "./types.ts";

export { RenderError } from "./probe.ts";
export { frameSize } from "./render_filters.ts";

export type RenderOptions = {
  /** ffmpeg executable (name on PATH or a path); default "ffmpeg". */
  ffmpeg?: string;
  /** espeak-ng executable; default "espeak-ng". Missing -> no dialogue, never an error. */
  espeak?: string;
  onProgress?: Progress;
  signal?: AbortSignal;
  /** Notes worth an operator's attention (no font, no espeak-ng); default stderr. */
  log?: (line: string) => void;
};

/** Seconds an extension adds to its input (Veo's fixed extension length). */
export const EXTENSION_SECONDS = 7;

const IMAGE_EXT: Record<string, string> = {
  "image/png": "png",
  "image/jpeg": "jpg",
  "image/jpg": "jpg",
  "image/webp": "webp",
  "image/gif": "gif",
  "image/bmp": "bmp",
};

/** Renders `job` to `job.outPath`; resolves once the finished file is in place. */
export async function renderVideo(job: RenderJob, opts: RenderOptions = {}): Promise<void> {
  checkJob(job);
  opts.signal?.throwIfAborted();
  const ffmpeg = await findTool(opts.ffmpeg ?? "ffmpeg");
  if (!ffmpeg) throw new RenderError(notInstalledMessage("ffmpeg", opts.ffmpeg));
  const outDir = dirname(job.outPath);
  const dirOk = await Deno.stat(outDir).then((s) => s.isDirectory, () => false);
  if (!dirOk) throw new RenderError(`output directory ${outDir} does not exist`);
  const log = opts.log ?? ((line: string) => console.error(line));
  const work = await Deno.makeTempDir({ prefix: "hearth-render-" });
  const partial = join(outDir, `.${basename(job.outPath)}.${crypto.randomUUID()}.partial`);
  try {
    const { args, totalFrames } = await prepare(job, ffmpeg, work, { ...opts, log });
    await runFfmpeg(ffmpeg, [...args, ffmpegPath(partial)], {
      totalFrames,
      onProgress: opts.onProgress,
      signal: opts.signal,
    });
    await Deno.rename(partial, job.outPath);
    opts.onProgress?.(100);
  } catch (e) {
    await Deno.remove(partial).catch(() => {});
    throw e;
  } finally {
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

function checkJob(job: RenderJob): void {
  const even = (n: number) => Number.isInteger(n) && n >= 16 && n <= 8192 && n % 2 === 0;
  if (!even(job.width) || !even(job.height)) {
    throw new RenderError(
      `frame size ${job.width}x${job.height} is not renderable (even sides, 16..8192)`,
    );
  }
  if (!(job.durationSeconds > 0 && job.durationSeconds <= 600)) {
    throw new RenderError(`durationSeconds ${job.durationSeconds} is out of range (0, 600]`);
  }
  if (job.fps !== FPS) throw new RenderError(`only ${FPS} fps is rendered, not ${job.fps}`);
  if (!job.outPath) throw new RenderError("outPath is required");
}

type Prepared = { args: string[]; totalFrames: number };

/** Writes the render's inputs to `work` and assembles ffmpeg's argv (less the output path). */
async function prepare(
  job: RenderJob,
  ffmpeg: string,
  work: string,
  opts: RenderOptions & { log: (line: string) => void },
): Promise<Prepared> {
  const inputs: string[][] = [];
  const addInput = (...args: string[]) => inputs.push(args) - 1;
  const seed = seedFor(job.seed, job.prompt);
  let { width, height } = job;
  let frames = Math.round(job.durationSeconds * FPS);
  let base: GraphPlan["base"] = { kind: "gradient" };
  let prefix: GraphPlan["prefix"];

  if (job.extendPath) {
    if (job.image || job.lastFrame) {
      throw new RenderError(
        "an extension continues its input video: image and lastFrame do not apply",
      );
    }
    const ext = await prepareExtension(job, ffmpeg, work, opts);
    width = ext.width;
    height = ext.height;
    prefix = { input: addInput("-i", ffmpegPath(job.extendPath)), ...ext.prefix };
    frames -= ext.prefix.frames;
    base = { kind: "image", input: addInput("-i", ffmpegPath(ext.lastFrame)) };
  } else if (job.image && job.lastFrame) {
    const first = addInput("-i", ffmpegPath(await writeImage(work, "first", job.image)));
    const last = addInput("-i", ffmpegPath(await writeImage(work, "last", job.lastFrame)));
    base = { kind: "interpolation", first, last };
  } else if (job.image) {
    base = {
      kind: "image",
      input: addInput("-i", ffmpegPath(await writeImage(work, "image", job.image))),
    };
  } else if (job.lastFrame) {
    throw new RenderError("lastFrame needs image (the first frame)");
  }

  const references: number[] = [];
  for (const [i, img] of (job.referenceImages ?? []).entries()) {
    references.push(addInput("-i", ffmpegPath(await writeImage(work, `ref${i}`, img))));
  }

  const seconds = frames / FPS;
  let audio: GraphPlan["audio"];
  if (job.audio) {
    audio = { fadeIn: !prefix };
    const wav = await prepareDialogue(job.prompt, seconds, seed, work, opts);
    if (wav) audio.dialogueInput = addInput("-i", ffmpegPath(wav));
  }

  const placement = base.kind === "gradient" && references.length === 0 ? "center" : "bottom";
  const caption = await prepareCaption(job.prompt, width, height, placement, work, opts.log);

  const graph = buildFilterGraph({
    width,
    height,
    frames,
    seed,
    base,
    references,
    caption,
    audio,
    prefix,
  });
  const args = [
    "-hide_banner",
    "-nostdin",
    "-loglevel",
    "error",
    "-y",
    ...inputs.flat(),
    "-filter_complex",
    graph.graph,
    "-map",
    graph.video,
    ...(graph.audio ? ["-map", graph.audio] : []),
    "-frames:v",
    String(graph.totalFrames),
    // ultrafast already turns off CABAC, deblocking and lookahead, so no -tune adds speed; the
    // synthetic frames are smooth and stay small even so.
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-crf",
    "23",
    "-pix_fmt",
    "yuv420p",
    "-r",
    String(FPS),
    ...(graph.audio ? ["-c:a", "aac", "-b:a", "128k", "-ar", String(SAMPLE_RATE)] : []),
    "-movflags",
    "+faststart",
    "-progress",
    "pipe:1",
    "-nostats",
    "-f",
    "mp4",
  ];
  return { args, totalFrames: graph.totalFrames };
}

async function writeImage(work: string, name: string, img: ImageInput): Promise<string> {
  const mime = img.mimeType.toLowerCase().split(";")[0].trim();
  const ext = IMAGE_EXT[mime];
  if (!ext) {
    throw new RenderError(
      `image type ${JSON.stringify(img.mimeType)} is not supported (use ${
        Object.keys(IMAGE_EXT).join(", ")
      })`,
    );
  }
  if (img.bytes.length === 0) throw new RenderError(`${name} image is empty`);
  const path = join(work, `${name}.${ext}`);
  await Deno.writeFile(path, img.bytes);
  return path;
}

/** Probes the input, checks the output length, and pulls out the input's last frame. */
async function prepareExtension(
  job: RenderJob,
  ffmpeg: string,
  work: string,
  opts: RenderOptions & { log: (line: string) => void },
): Promise<{
  width: number;
  height: number;
  lastFrame: string;
  prefix: { frames: number; hasAudio: boolean };
}> {
  const path = job.extendPath!;
  const exists = await Deno.stat(path).then((s) => s.isFile, () => false);
  if (!exists) throw new RenderError(`the video to extend (${path}) does not exist`);
  const sibling = join(dirname(ffmpeg), "ffprobe");
  const ffprobe = await findTool(sibling) ?? await findTool("ffprobe");
  if (!ffprobe) throw new RenderError(notInstalledMessage("ffprobe"));
  const probe = await probeVideo(path, { ffprobe });
  // The prefix is re-timed to 24 fps, so a clip at another rate counts by its duration.
  const at24 = Math.abs(probe.fps - FPS) < 0.01 && probe.frames !== undefined;
  const inFrames = at24 ? probe.frames! : Math.round(probe.durationSeconds * FPS);
  const total = Math.round(job.durationSeconds * FPS);
  // The lead computes the length from the input; a mismatch means a wiring bug, so say so
  // rather than render a segment of some other length.
  if (Math.abs(total - inFrames - EXTENSION_SECONDS * FPS) > FPS / 4) {
    throw new RenderError(
      `durationSeconds ${job.durationSeconds} must be the extended length: the input is ` +
        `${(inFrames / FPS).toFixed(2)} s, so expected ${
          (inFrames / FPS + EXTENSION_SECONDS).toFixed(2)
        }`,
    );
  }
  if (probe.width !== job.width || probe.height !== job.height) {
    opts.log(
      `video: extension keeps the input's ${probe.width}x${probe.height} ` +
        `(job asked for ${job.width}x${job.height})`,
    );
  }
  if (probe.width % 2 || probe.height % 2 || probe.width < 16 || probe.height < 16) {
    throw new RenderError(
      `the video to extend has an unusable size ${probe.width}x${probe.height}`,
    );
  }
  const lastFrame = join(work, "last.png");
  // -sseof seeks near the end; -update keeps overwriting one image, so the last frame remains.
  await runFfmpeg(ffmpeg, [
    "-hide_banner",
    "-nostdin",
    "-loglevel",
    "error",
    "-y",
    "-sseof",
    "-1",
    "-i",
    ffmpegPath(path),
    "-map",
    "0:v:0",
    "-update",
    "1",
    "-f",
    "image2",
    ffmpegPath(lastFrame),
  ], { signal: opts.signal });
  const ok = await Deno.stat(lastFrame).then((s) => s.size > 0, () => false);
  if (!ok) throw new RenderError(`could not read the last frame of ${path}`);
  return {
    width: probe.width,
    height: probe.height,
    lastFrame,
    prefix: { frames: inFrames, hasAudio: probe.audioCodec !== undefined },
  };
}

/** The espeak-ng WAV of the prompt's quoted dialogue, or undefined (no quotes, no espeak-ng). */
async function prepareDialogue(
  prompt: string,
  seconds: number,
  seed: number,
  work: string,
  opts: RenderOptions & { log: (line: string) => void },
): Promise<string | undefined> {
  const lines = extractDialogue(prompt);
  if (lines.length === 0) return undefined;
  const espeak = await findTool(opts.espeak ?? "espeak-ng");
  if (!espeak) {
    opts.log(`video: ${notInstalledMessage("espeak-ng", opts.espeak)}; dialogue is not spoken`);
    return undefined;
  }
  const wav = join(work, "dialogue.wav");
  const ok = await synthesizeDialogue(lines, wav, {
    espeak,
    seconds,
    seed,
    signal: opts.signal,
    log: opts.log,
  });
  return ok ? wav : undefined;
}

async function prepareCaption(
  prompt: string,
  width: number,
  height: number,
  placement: "center" | "bottom",
  work: string,
  log: (line: string) => void,
): Promise<GraphPlan["caption"]> {
  const layout = layoutText(prompt, width, height, placement === "center" ? "title" : "caption");
  if (layout.lines.length === 0) return undefined;
  const fontFile = await findFont();
  if (!fontFile) {
    log(
      "video: no font found under /usr/share/fonts (apt-get install fonts-dejavu-core); " +
        "the prompt is not drawn",
    );
    return undefined;
  }
  const lineFiles: string[] = [];
  for (const [i, line] of layout.lines.entries()) {
    const file = join(work, `line${i}.txt`);
    await Deno.writeTextFile(file, line);
    lineFiles.push(file);
  }
  return { fontFile, lineFiles, layout, placement };
}

const FONT_DIRS = ["/usr/share/fonts", "/usr/local/share/fonts"];
const PREFERRED_FONTS = [
  "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
  "/usr/share/fonts/TTF/DejaVuSans.ttf",
  "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];
let defaultFont: Promise<string | undefined> | undefined;

/**
 * A TrueType/OpenType font file for drawtext: DejaVu Sans where Debian (or Arch, Fedora) puts
 * it, else the plainest-looking sans face under `dirs`, else any font there.
 */
export function findFont(dirs: string[] = FONT_DIRS): Promise<string | undefined> {
  if (dirs === FONT_DIRS) return defaultFont ??= searchFont(dirs, PREFERRED_FONTS);
  return searchFont(dirs, []);
}

async function searchFont(dirs: string[], preferred: string[]): Promise<string | undefined> {
  for (const p of preferred) {
    if (await Deno.stat(p).then((s) => s.isFile, () => false)) return p;
  }
  const found: string[] = [];
  const walk = async (dir: string, depth: number) => {
    if (depth > 4 || found.length > 2000) return;
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(dir));
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(dir, e.name);
      if (e.isDirectory) await walk(p, depth + 1);
      else if (e.isFile && /\.(ttf|otf)$/i.test(e.name)) found.push(p);
    }
  };
  for (const d of dirs) await walk(d, 0);
  const plain = (p: string) =>
    /sans/i.test(basename(p)) && !/mono|bold|italic|oblique|condensed|light/i.test(basename(p));
  return found.find(plain) ?? found[0];
}

/**
 * Runs ffmpeg to completion: `-progress pipe:1` lines become `onProgress` (0..99; the caller
 * says 100 once the file is in place), an abort kills the process, a failure carries the end
 * of stderr.
 */
async function runFfmpeg(
  ffmpeg: string,
  args: string[],
  opts: { totalFrames?: number; onProgress?: Progress; signal?: AbortSignal },
): Promise<void> {
  const { signal } = opts;
  signal?.throwIfAborted();
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(ffmpeg, {
      args,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new RenderError(notInstalledMessage("ffmpeg", ffmpeg), { cause: e });
    }
    throw new RenderError(`ffmpeg could not start: ${(e as Error).message}`, { cause: e });
  }
  const kill = () => {
    try {
      child.kill("SIGKILL");
    } catch { /* already exited */ }
  };
  signal?.addEventListener("abort", kill, { once: true });
  if (signal?.aborted) kill();
  // A throwing progress callback stops the render, but only after ffmpeg is gone and both
  // pipes are drained, so no process or stream outlives this call.
  let callbackError: { error: unknown } | undefined;
  const report = opts.onProgress &&
    ((pct: number) => {
      if (callbackError) return;
      try {
        opts.onProgress!(pct);
      } catch (error) {
        callbackError = { error };
        kill();
      }
    });
  try {
    const [status, stderr] = await Promise.all([
      child.status,
      readTail(child.stderr, 4000),
      readProgress(child.stdout, opts.totalFrames ?? 0, report),
    ]);
    signal?.throwIfAborted();
    if (callbackError) throw callbackError.error;
    if (!status.success) {
      const why = status.signal ? `killed by ${status.signal}` : `exit ${status.code}`;
      throw new RenderError(`ffmpeg failed (${why}): ${stderr.trim() || "no error output"}`);
    }
  } finally {
    signal?.removeEventListener("abort", kill);
  }
}

async function readTail(stream: ReadableStream<Uint8Array>, keep: number): Promise<string> {
  let text = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    text = (text + chunk).slice(-keep);
  }
  return text;
}

/** Parses ffmpeg's `key=value` progress blocks; reports whole percents, each only once. */
async function readProgress(
  stream: ReadableStream<Uint8Array>,
  totalFrames: number,
  onProgress?: Progress,
): Promise<void> {
  let buf = "";
  let last = -1;
  const totalUs = (totalFrames / FPS) * 1e6;
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    if (!onProgress || totalFrames <= 0) continue;
    buf += chunk;
    const lines = buf.split("\n");
    buf = lines.pop()!;
    let fraction = -1;
    for (const line of lines) {
      const [key, value] = line.trim().split("=", 2);
      if (key === "frame") fraction = Math.max(fraction, Number(value) / totalFrames);
      else if (key === "out_time_us") fraction = Math.max(fraction, Number(value) / totalUs);
    }
    if (!(fraction >= 0)) continue;
    const pct = Math.min(99, Math.floor(fraction * 100));
    if (pct > last) {
      last = pct;
      onProgress(pct);
    }
  }
}
