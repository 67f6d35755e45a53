/**
 * Pure builders for the renderer's ffmpeg filter graph: frame sizes, seeded colours and chords,
 * prompt text layout, and one `-filter_complex` string per render plan. Nothing here touches the
 * file system or runs a process, so every choice (what moves, where text goes, how long each
 * part is) can be unit-tested as a string.
 *
 * Speed is the main design force (2-core CI): the moving background is ffmpeg's `gradients`
 * source rendered at 1/8 size and scaled up (smooth colour fields lose nothing); images are
 * scaled once and animated by `zoompan`; reference thumbnails are scaled once and repeated by
 * `loop`; the tone bed is a handful of `sine` sources, much cheaper than `aevalsrc`.
 *
 * @example
 * ```ts
 * import { buildFilterGraph, frameSize } from "./render_filters.ts";
 * const { width, height } = frameSize("720p", "16:9");
 * const g = buildFilterGraph({ width, height, frames: 96, seed: 7, base: { kind: "gradient" },
 *   references: [], audio: { fadeIn: true } });
 * // ffmpeg -filter_complex g.graph -map g.video -map g.audio ...
 * ```
 * @module
 */
import type { AspectRatio, Resolution } from "./types.ts";

export const FPS = 24;
export const SAMPLE_RATE = 48000;

const LANDSCAPE: Record<Resolution, [number, number]> = {
  "720p": [1280, 720],
  "1080p": [1920, 1080],
  "4k": [3840, 2160],
};

/** Pixel size of a Veo resolution and aspect ratio (9:16 swaps the sides). */
export function frameSize(
  resolution: Resolution,
  aspectRatio: AspectRatio,
): { width: number; height: number } {
  const wh = LANDSCAPE[resolution];
  if (!wh) throw new RangeError(`unknown resolution ${JSON.stringify(resolution)}`);
  if (aspectRatio !== "16:9" && aspectRatio !== "9:16") {
    throw new RangeError(`unknown aspect ratio ${JSON.stringify(aspectRatio)}`);
  }
  const [w, h] = wh;
  return aspectRatio === "16:9" ? { width: w, height: h } : { width: h, height: w };
}

/** A stable 32-bit seed: the request's own, or a hash of the prompt (same prompt, same clip). */
export function seedFor(seed: number | undefined, prompt: string): number {
  if (seed !== undefined && Number.isFinite(seed)) return Math.abs(Math.trunc(seed)) >>> 0;
  let h = 2166136261; // FNV-1a
  for (const ch of prompt) {
    h ^= ch.codePointAt(0)!;
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

/** mulberry32: a tiny, good-enough PRNG in [0, 1) for seeded visual and musical choices. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function hslHex(h: number, s: number, l: number): string {
  const k = (n: number) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  const byte = (x: number) => Math.round(x * 255).toString(16).padStart(2, "0");
  return `0x${byte(f(0))}${byte(f(8))}${byte(f(4))}`;
}

/** Three to four seeded colours, dark enough that white text stays readable on all of them. */
export function palette(seed: number): string[] {
  const r = rng(seed ^ 0x9e3779b9);
  const hue = r() * 360;
  const n = 3 + Math.floor(r() * 2);
  return Array.from({ length: n }, (_, i) => {
    const h = (hue + i * (70 + r() * 80)) % 360;
    return hslHex(h, 0.45 + r() * 0.35, 0.22 + r() * 0.2);
  });
}

/**
 * ffmpeg filter-graph escaping for one option value: first for the option parser (`\ ' :`),
 * then for the graph parser (`\ ' [ ] , ;`). Argv carries it, so no shell level is needed.
 */
export function escapeFilterValue(value: string): string {
  const option = value.replace(/[\\':]/g, (c) => `\\${c}`);
  return option.replace(/[\\'[\],;]/g, (c) => `\\${c}`);
}

export type TextLayout = { fontSize: number; lineHeight: number; lines: string[] };

/** Average advance of DejaVu Sans (and most sans faces) in ems, for wrapping without a font. */
const CHAR_EM = 0.56;

/** Greedy word wrap at `maxChars`; a word longer than a line is split. */
export function wrapText(text: string, maxChars: number): string[] {
  const limit = Math.max(1, maxChars);
  const lines: string[] = [];
  let line = "";
  const flush = () => {
    if (line) lines.push(line);
    line = "";
  };
  for (let word of text.split(" ").filter(Boolean)) {
    while (word.length > limit) {
      flush();
      lines.push(word.slice(0, limit));
      word = word.slice(limit);
    }
    if (!word) continue;
    if (line && line.length + 1 + word.length > limit) flush();
    line = line ? `${line} ${word}` : word;
  }
  flush();
  return lines;
}

/**
 * Font size and lines for the prompt: a centred title (text-only clips) or a caption band at
 * the bottom (clips whose picture matters). Shrinks the font until the text fits its area; what
 * still does not fit at the smallest size is cut with an ellipsis.
 */
export function layoutText(
  text: string,
  width: number,
  height: number,
  style: "title" | "caption",
): TextLayout {
  // Control characters would draw as boxes; all whitespace becomes single spaces.
  const clean = text.replace(/[\p{Cc}\p{Cf}]/gu, " ").replace(/\s+/g, " ").trim();
  const short = Math.min(width, height);
  const [maxFs, minFs, areaH] = style === "title"
    ? [Math.round(short / 12), Math.round(short / 30), height * 0.8]
    : [Math.round(short / 20), Math.round(short / 32), height * 0.3];
  const boxW = width * 0.88;
  if (!clean) return { fontSize: maxFs, lineHeight: Math.round(maxFs * 1.35), lines: [] };
  let fs = maxFs;
  for (;;) {
    const lh = Math.round(fs * 1.35);
    const lines = wrapText(clean, Math.floor(boxW / (fs * CHAR_EM)));
    if (lines.length * lh <= areaH) return { fontSize: fs, lineHeight: lh, lines };
    if (fs <= minFs) {
      const keep = Math.max(1, Math.floor(areaH / lh));
      const cut = lines.slice(0, keep);
      const max = Math.floor(boxW / (fs * CHAR_EM));
      cut[keep - 1] = `${cut[keep - 1].slice(0, Math.max(1, max - 1)).trimEnd()}…`;
      return { fontSize: fs, lineHeight: lh, lines: cut };
    }
    fs = Math.max(minFs, Math.floor(fs * 0.9));
  }
}

/** What one render draws. Input numbers are ffmpeg input indexes (`-i` order). */
export type GraphPlan = {
  width: number;
  height: number;
  /** Frames of the newly rendered part (the 7 s segment for an extension). */
  frames: number;
  seed: number;
  base:
    | { kind: "gradient" }
    /** Image-to-video; also the extension segment, from the input's last frame. */
    | { kind: "image"; input: number }
    | { kind: "interpolation"; first: number; last: number };
  /** Reference images, shown as thumbnails. */
  references: number[];
  caption?: {
    fontFile: string;
    /** One text file per line of `layout.lines` (drawtext `textfile=`, so nothing to escape). */
    lineFiles: string[];
    layout: TextLayout;
    placement: "center" | "bottom";
  };
  /** Absent: no audio stream at all. */
  audio?: {
    /** Input holding the espeak-ng WAV, mixed over the bed. */
    dialogueInput?: number;
    /** Fade the bed in (a fresh clip) or start at once (an extension continuing a sound). */
    fadeIn: boolean;
  };
  /** Extension: the input clip, played first and concatenated with the new segment. */
  prefix?: { input: number; frames: number; hasAudio: boolean };
};

export type FilterGraph = { graph: string; video: string; audio?: string; totalFrames: number };

const num = (x: number) => String(Math.round(x * 10000) / 10000);

/** The moving background: a rotating seeded gradient rendered small and scaled up. */
export function gradientChain(plan: GraphPlan, out: string): string {
  const r = rng(plan.seed);
  const colors = palette(plan.seed);
  const lw = Math.max(16, Math.round(plan.width / 16) * 2);
  const lh = Math.max(16, Math.round(plan.height / 16) * 2);
  const type = r() < 0.5 ? "linear" : "radial";
  // About a third to a half of a turn over the clip, whatever its length.
  const speed = num(Math.min(0.05, (1.2 + r() * 1.5) / plan.frames));
  const cs = colors.map((c, i) => `c${i}=${c}`).join(":");
  return `gradients=s=${lw}x${lh}:r=${FPS}:d=${num(plan.frames / FPS)}:n=${colors.length}:${cs}` +
    `:speed=${speed}:type=${type}:seed=${plan.seed},format=yuv420p,` +
    `scale=${plan.width}:${plan.height}:flags=fast_bilinear,setsar=1${out}`;
}

/**
 * One still animated for `frames` frames: scaled and padded to the frame once, then a slow
 * zoom from `z0` to `z1` towards a seeded focal point, so frame 0 shows the whole image.
 */
export function imageMotionChain(
  plan: GraphPlan,
  input: number,
  frames: number,
  z0: number,
  z1: number,
  out: string,
  salt = 0,
): string {
  const r = rng(plan.seed + 101 * (salt + 1));
  const fx = num(0.35 + r() * 0.3);
  const fy = num(0.35 + r() * 0.3);
  const { width: w, height: h } = plan;
  const span = Math.max(1, frames - 1);
  const zoom = `${num(z0)}+(${num(z1 - z0)})*on/${span}`;
  return `[${input}:v]scale=${w}:${h}:force_original_aspect_ratio=decrease,` +
    `pad=${w}:${h}:(ow-iw)/2:(oh-ih)/2:color=black,setsar=1,format=yuv420p,` +
    `zoompan=z='${zoom}':x='(iw-iw/zoom)*${fx}':y='(ih-ih/zoom)*${fy}'` +
    `:d=${frames}:s=${w}x${h}:fps=${FPS},setsar=1${out}`;
}

/**
 * First image to last image: both move the whole time, and the last fades in over the first
 * (alpha fade + overlay, about half the cost of `xfade` here), resting on the last image.
 */
export function interpolationChain(
  plan: GraphPlan,
  first: number,
  last: number,
  out: string,
): string {
  const n = plan.frames;
  const lead = Math.round(n * 0.2);
  const fade = Math.max(1, n - 2 * lead);
  return [
    imageMotionChain(plan, first, n, 1, 1.08, "[ia]", 0),
    // The last image zooms out to rest at exactly the requested last frame.
    imageMotionChain(plan, last, n, 1.08, 1, "[ib]", 1),
    `[ib]format=yuva420p,fade=t=in:st=${num(lead / FPS)}:d=${num(fade / FPS)}:alpha=1[ibf]`,
    `[ia][ibf]overlay=format=yuv420${out}`,
  ].join(";");
}

/** Reference images as framed thumbnails along the top, fading in one after another, bobbing. */
export function referenceChains(plan: GraphPlan, inLabel: string, out: string): string {
  const n = plan.references.length;
  if (n === 0) return `${inLabel}null${out}`;
  const { width: w, height: h, frames } = plan;
  const border = Math.max(2, Math.round(Math.min(w, h) / 180));
  const th = Math.round(h * (w >= h ? 0.26 : 0.16));
  const tw = Math.floor((w * 0.86) / n) - 2 * border;
  const parts: string[] = [];
  let cur = inLabel;
  plan.references.forEach((input, i) => {
    const t = `[ref${i}]`;
    parts.push(
      `[${input}:v]scale=${tw}:${th}:force_original_aspect_ratio=decrease,` +
        `pad=iw+${2 * border}:ih+${2 * border}:${border}:${border}:color=white,` +
        `format=yuva420p,loop=loop=${frames - 1}:size=1,setpts=N/${FPS}/TB,` +
        `fade=t=in:st=${num(0.2 + i * 0.4)}:d=0.6:alpha=1${t}`,
    );
    const next = i === n - 1 ? out : `[refo${i}]`;
    const cx = num(((i + 0.5) / n) * w);
    parts.push(
      `${cur}${t}overlay=x=${cx}-w/2:y='${num(h * 0.05)}+${num(h * 0.012)}*sin(2*PI*t/5+${i})'` +
        `:eval=frame:format=yuv420${next}`,
    );
    cur = next;
  });
  return parts.join(";");
}

/** The prompt drawn line by line on shared baselines, each line boxed, fading in. */
export function captionChain(plan: GraphPlan, inLabel: string, out: string): string {
  const c = plan.caption;
  if (!c || c.layout.lines.length === 0) return `${inLabel}null${out}`;
  const { fontSize: fs, lineHeight: lh } = c.layout;
  const n = c.lineFiles.length;
  const blockH = n * lh;
  const top = c.placement === "center" ? (plan.height - blockH) / 2 : plan.height * 0.94 - blockH;
  const ascent = fs * 0.95; // baseline below the line top, DejaVu's ascender
  const font = escapeFilterValue(c.fontFile);
  const filters = c.lineFiles.map((file, i) =>
    `drawtext=fontfile=${font}:textfile=${escapeFilterValue(file)}:expansion=none` +
    `:fontsize=${fs}:fontcolor=white:x=(w-text_w)/2:y=${Math.round(top + i * lh + ascent)}-ascent` +
    `:box=1:boxcolor=black@0.45:boxborderw=${Math.max(2, Math.round(fs * 0.22))}` +
    `:fix_bounds=1:alpha='min(1,t/0.6)'`
  );
  return `${inLabel}${filters.join(",")}${out}`;
}

/** MIDI-ish semitone offsets of the chord shapes the bed picks from. */
const CHORDS = [[0, 4, 7, 12], [0, 3, 7, 12], [0, 2, 7, 12], [0, 4, 7, 11], [0, 3, 7, 10]];

/** The seeded chord of a clip: frequencies and gains, quiet enough to sit under speech. */
export function chordFor(seed: number): { freq: number; gain: number; tremolo?: number }[] {
  const r = rng(seed ^ 0x5bd1e995);
  const root = 110 * 2 ** (Math.floor(r() * 12) / 12); // A2 .. G#3
  const shape = CHORDS[Math.floor(r() * CHORDS.length)];
  return shape.map((semi, i) => ({
    freq: Math.round(root * 2 ** (semi / 12) * 100) / 100,
    gain: Math.round((0.07 - i * 0.012) * 1000) / 1000,
    ...(i > 0 ? { tremolo: Math.round((0.1 + r() * 0.4) * 100) / 100 } : {}),
  }));
}

/**
 * A soft stereo chord for `seconds`: the right channel is detuned a few cents for width, upper
 * voices swell slowly (tremolo), with a fade-in (fresh clips) and always a fade-out.
 */
export function toneBedChain(plan: GraphPlan, out: string): string {
  const seconds = plan.frames / FPS;
  const chord = chordFor(plan.seed);
  const parts: string[] = [];
  for (const [side, detune] of [["l", 1], ["r", 1.004]] as const) {
    chord.forEach((v, i) => {
      const trem = v.tremolo ? `,tremolo=f=${v.tremolo}:d=0.5` : "";
      parts.push(
        `sine=f=${num(v.freq * detune)}:r=${SAMPLE_RATE}:d=${
          num(seconds)
        },volume=${v.gain}${trem}` +
          `[${side}${i}]`,
      );
    });
    const ins = chord.map((_, i) => `[${side}${i}]`).join("");
    parts.push(`${ins}amix=inputs=${chord.length}:normalize=0[${side}]`);
  }
  const fadeIn = plan.audio?.fadeIn === false ? 0.05 : Math.min(0.8, seconds / 4);
  parts.push(`[l][r]join=inputs=2:channel_layout=stereo,afade=t=in:d=${num(fadeIn)}${out}`);
  return parts.join(";");
}

/** The new part's audio: the bed, with the dialogue (if any) over it, faded out at the end. */
export function audioChain(plan: GraphPlan, out: string): string {
  const seconds = plan.frames / FPS;
  const fadeOut = Math.min(1, seconds / 4);
  const tail = `afade=t=out:st=${num(seconds - fadeOut)}:d=${num(fadeOut)},` +
    `aformat=sample_fmts=fltp:sample_rates=${SAMPLE_RATE}:channel_layouts=stereo${out}`;
  const d = plan.audio?.dialogueInput;
  if (d === undefined) return `${toneBedChain(plan, "[bed]")};[bed]${tail}`;
  return [
    toneBedChain(plan, "[bed]"),
    `[${d}:a]aresample=${SAMPLE_RATE},aformat=sample_fmts=fltp:channel_layouts=stereo,` +
    `adelay=delays=400:all=1,volume=0.8[dlg]`,
    // duration=first: speech longer than the clip is cut where the bed ends.
    `[bed][dlg]amix=inputs=2:duration=first:dropout_transition=0:normalize=0,${tail}`,
  ].join(";");
}

/** The whole `-filter_complex` for a plan, with the labels to `-map` and the frames to expect. */
export function buildFilterGraph(plan: GraphPlan): FilterGraph {
  if (!(plan.frames >= 1)) throw new RangeError("a render needs at least one frame");
  const chains: string[] = [];
  const base = plan.base;
  if (base.kind === "gradient") chains.push(gradientChain(plan, "[base]"));
  else if (base.kind === "image") {
    chains.push(imageMotionChain(plan, base.input, plan.frames, 1, 1.12, "[base]"));
  } else chains.push(interpolationChain(plan, base.first, base.last, "[base]"));
  chains.push(referenceChains(plan, "[base]", "[refd]"));
  const prefix = plan.prefix;
  chains.push(captionChain(plan, "[refd]", prefix ? "[sv]" : "[v]"));
  if (plan.audio) chains.push(audioChain(plan, prefix ? "[sa]" : "[a]"));
  if (prefix) {
    const inSeconds = prefix.frames / FPS;
    chains.push(
      `[${prefix.input}:v]fps=${FPS},scale=${plan.width}:${plan.height},setsar=1,format=yuv420p,` +
        `trim=end_frame=${prefix.frames},setpts=PTS-STARTPTS[pv]`,
    );
    if (plan.audio) {
      chains.push(
        prefix.hasAudio
          // Padded or cut to the video's exact length so the segment's sound stays in sync;
          // the short fade meets the segment's short fade-in instead of a click.
          ? `[${prefix.input}:a]aresample=${SAMPLE_RATE},` +
            `aformat=sample_fmts=fltp:channel_layouts=stereo,apad,atrim=end=${num(inSeconds)},` +
            `afade=t=out:st=${num(Math.max(0, inSeconds - 0.05))}:d=0.05[pa]`
          : `anullsrc=r=${SAMPLE_RATE}:cl=stereo,atrim=end=${num(inSeconds)},` +
            `aformat=sample_fmts=fltp[pa]`,
      );
      chains.push(`[pv][pa][sv][sa]concat=n=2:v=1:a=1[v][a]`);
    } else chains.push(`[pv][sv]concat=n=2:v=1:a=0[v]`);
  }
  return {
    graph: chains.join(";"),
    video: "[v]",
    ...(plan.audio ? { audio: "[a]" } : {}),
    totalFrames: plan.frames + (prefix?.frames ?? 0),
  };
}
