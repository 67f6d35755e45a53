/**
 * Shapes shared by the video modules: the validated request the rules table produces, what the
 * renderer is asked to draw, and the operation record the store keeps. Routes turn wire JSON into
 * a `VideoRequest` (rules.ts) and operations into wire JSON; nothing here knows HTTP.
 *
 * @example
 * ```ts
 * import type { RenderJob } from "./types.ts";
 * const job: RenderJob = { width: 1280, height: 720, durationSeconds: 8, fps: 24, audio: true,
 *   prompt: "a cat", outPath: "/tmp/v.mp4" };
 * ```
 * @module
 */

export type Family = "2" | "3" | "3.1";
export type Mode = "text" | "image" | "interpolation" | "reference" | "extension";
export type Resolution = "720p" | "1080p" | "4k";
export type AspectRatio = "16:9" | "9:16";

/** Raw image bytes from a request (either wire form). */
export type ImageInput = { mimeType: string; bytes: Uint8Array };

/** A request that passed every rule of its model's family. */
export type VideoRequest = {
  model: string;
  family: Family;
  mode: Mode;
  prompt: string;
  negativePrompt?: string;
  aspectRatio: AspectRatio;
  resolution: Resolution;
  durationSeconds: number;
  sampleCount: number;
  seed?: number;
  personGeneration?: string;
  enhancePrompt?: boolean;
  image?: ImageInput;
  lastFrame?: ImageInput;
  referenceImages: { image: ImageInput; referenceType: "asset" | "style" }[];
  /** Extension input: the id of a file this server generated. */
  videoFileId?: string;
};

export type RenderJob = {
  width: number;
  height: number;
  durationSeconds: number;
  fps: 24;
  /** AAC tone bed (+ espeak-ng dialogue) when true; no audio stream when false. */
  audio: boolean;
  prompt: string;
  seed?: number;
  image?: ImageInput;
  lastFrame?: ImageInput;
  referenceImages?: ImageInput[];
  /** Extension: the input MP4 to continue; the output is input + a 7 s segment. */
  extendPath?: string;
  outPath: string;
};

/** Rendering progress callback: 0..100. */
export type Progress = (percent: number) => void;

export type OperationState = "pending" | "running" | "done" | "failed" | "filtered";

export type OperationRecord = {
  id: string;
  model: string;
  state: OperationState;
  createdAt: number;
  updatedAt: number;
  expiresAt: number;
  progress: number;
  request: unknown;
  /** File ids of the generated samples (done). */
  files: string[];
  error?: { code: number; message: string };
  filteredReasons?: string[];
  /** Gateway: the upstream operation name. */
  upstreamName?: string;
};
