/**
 * The renderer's view of its tools: where an executable is (a PATH lookup, no shell), what
 * ffprobe says a video is, and the one error type every tool failure becomes (`RenderError`,
 * re-exported by render.ts). A missing tool is reported at once with how to install it, never
 * discovered as a hang or a bare "No such file".
 *
 * @example
 * ```ts
 * import { findTool, probeVideo } from "./probe.ts";
 * const ffprobe = await findTool("ffprobe"); // "/usr/bin/ffprobe" or undefined
 * const p = await probeVideo("/tmp/v.mp4", { ffprobe });
 * console.log(p.videoCodec, p.width, p.height, p.fps, p.durationSeconds, p.audioCodec);
 * ```
 * @module
 */
import { resolve } from "node:path";

/** A render (or probe) that could not be done: a missing tool, a failing tool, bad input. */
export class RenderError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "RenderError";
  }
}

export type ProbeResult = {
  videoCodec: string;
  width: number;
  height: number;
  fps: number;
  durationSeconds: number;
  /** Frame count as the container states it (absent when it does not say). */
  frames?: number;
  /** Present only when the file has an audio stream. */
  audioCodec?: string;
};

/** How to get the Debian package that provides a tool, for error messages. */
const PACKAGES: Record<string, string> = {
  ffmpeg: "ffmpeg",
  ffprobe: "ffmpeg",
  "espeak-ng": "espeak-ng",
};

/** "ffmpeg is not installed: install it (Debian: apt-get install ffmpeg)". */
export function notInstalledMessage(name: string, tried?: string): string {
  const where = tried && tried !== name ? ` (${tried} not found)` : "";
  return `${name} is not installed${where}: install it (Debian: apt-get install ${
    PACKAGES[name] ?? name
  })`;
}

/**
 * The absolute path of an executable: `name` itself when it contains a slash, else the first
 * match on PATH. Undefined when there is none (or it is not executable).
 */
export async function findTool(name: string): Promise<string | undefined> {
  if (!name) return undefined;
  if (name.includes("/")) return await isExecutable(name) ? name : undefined;
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    const candidate = `${dir.replace(/\/+$/, "")}/${name}`;
    if (await isExecutable(candidate)) return candidate;
  }
  return undefined;
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    const st = await Deno.stat(path);
    return st.isFile && (st.mode === null || (st.mode & 0o111) !== 0);
  } catch {
    return false;
  }
}

type FfprobeJson = {
  streams?: {
    codec_type?: string;
    codec_name?: string;
    width?: number;
    height?: number;
    avg_frame_rate?: string;
    r_frame_rate?: string;
    nb_frames?: string;
    duration?: string;
  }[];
  format?: { duration?: string };
};

/**
 * A path as ffmpeg/ffprobe must see it: absolute, behind the `file:` protocol, so a name that
 * starts with "-" or holds a ":" is never taken for an option or another protocol.
 */
export function ffmpegPath(path: string): string {
  return `file:${resolve(path)}`;
}

/** Parses "24/1" or "30000/1001"; 0 for "0/0" or garbage. */
export function parseRate(rate: string | undefined): number {
  if (!rate) return 0;
  const [n, d] = rate.split("/").map(Number);
  if (d === undefined) return Number.isFinite(n) ? n : 0;
  return d > 0 && Number.isFinite(n) ? n / d : 0;
}

/** ffprobe's JSON for one file, reduced to what the renderer and its tests check. */
export function parseProbe(json: FfprobeJson, path = "input"): ProbeResult {
  const streams = json.streams ?? [];
  const video = streams.find((s) => s.codec_type === "video");
  if (!video) throw new RenderError(`${path} has no video stream`);
  const audio = streams.find((s) => s.codec_type === "audio");
  const fps = parseRate(video.avg_frame_rate) || parseRate(video.r_frame_rate);
  const duration = Number(json.format?.duration ?? video.duration);
  const frames = Number(video.nb_frames);
  return {
    videoCodec: video.codec_name ?? "unknown",
    width: video.width ?? 0,
    height: video.height ?? 0,
    fps,
    durationSeconds: Number.isFinite(duration) ? duration : 0,
    ...(Number.isInteger(frames) && frames > 0 ? { frames } : {}),
    ...(audio ? { audioCodec: audio.codec_name ?? "unknown" } : {}),
  };
}

/** Codecs, size, frame rate, duration and frame count of a media file, by ffprobe. */
export async function probeVideo(
  path: string,
  opts: { ffprobe?: string } = {},
): Promise<ProbeResult> {
  const wanted = opts.ffprobe ?? "ffprobe";
  const ffprobe = await findTool(wanted);
  if (!ffprobe) throw new RenderError(notInstalledMessage("ffprobe", wanted));
  const out = await new Deno.Command(ffprobe, {
    args: [
      "-v",
      "error",
      "-show_entries",
      "stream=codec_type,codec_name,width,height,avg_frame_rate,r_frame_rate,nb_frames,duration" +
      ":format=duration",
      "-of",
      "json",
      "-i",
      ffmpegPath(path),
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr).trim().slice(-2000);
    throw new RenderError(`ffprobe could not read ${path}: ${err || `exit ${out.code}`}`);
  }
  let json: FfprobeJson;
  try {
    json = JSON.parse(new TextDecoder().decode(out.stdout));
  } catch {
    throw new RenderError(`ffprobe printed no JSON for ${path}`);
  }
  return parseProbe(json, path);
}
