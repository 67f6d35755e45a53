/**
 * The Veo rule tables (docs/ARCHITECTURE.md, "Video API"): one record per model family, one line per documented
 * rule, so a reviewer can hold each line against Google's "Generate videos with Veo 3.1 in the
 * Gemini API" page (parameter table, "Model features", "Limitations", "Extending Veo videos").
 * Nothing here decides anything: `rules.ts` walks these records. Per-model exceptions (Lite) are
 * a spread of the family record with the differing lines overridden.
 *
 * Where the docs and the seed tables disagree, or the docs contradict themselves, the
 * choice is written next to the line.
 *
 * @example
 * ```ts
 * import { MODEL_RULES } from "./rule_tables.ts";
 * const lite = MODEL_RULES["veo-3.1-lite-generate-preview"];
 * lite.resolutions["4k"]; // undefined: Lite has no 4k
 * lite.modes.includes("extension"); // false
 * ```
 * @module
 */
import type { AspectRatio, Family, Mode, Resolution } from "./types.ts";

/** `--video-region`: the default rules, or the EU/UK/CH/MENA restrictions on personGeneration. */
export type Region = "global" | "eu" | "uk" | "ch" | "mena";

export const REGIONS: readonly Region[] = ["global", "eu", "uk", "ch", "mena"];

/** Regions where "Limitations > Regional limitations" narrows personGeneration. */
export const RESTRICTED_REGIONS: ReadonlySet<Region> = new Set(["eu", "uk", "ch", "mena"]);

/** Allowed personGeneration values per mode. The first value is the default when omitted. */
export type PersonGenerationByMode = Readonly<Partial<Record<Mode, readonly string[]>>>;

export type ModelRules = {
  family: Family;
  /** Generation modes the model accepts (the instance fields that select them: MODE_FIELDS). */
  modes: readonly Mode[];
  /** `durationSeconds` values; the default is DEFAULT_DURATION_SECONDS. */
  durations: readonly number[];
  /** Only 8 s is accepted at these resolutions and in these modes. */
  eightSecondsOnly: { resolutions: readonly Resolution[]; modes: readonly Mode[] };
  /** False where the model refuses the `resolution` parameter itself (it renders 720p). */
  resolutionParameter: boolean;
  /** Output resolutions, each with the aspect ratios it allows. 720p is the default. */
  resolutions: Readonly<Partial<Record<Resolution, readonly AspectRatio[]>>>;
  /** `aspectRatio` values; the first is the default. */
  aspectRatios: readonly AspectRatio[];
  personGeneration: { global: PersonGenerationByMode; restricted: PersonGenerationByMode };
  /** `sampleCount` (alias `numberOfVideos`) is 1..maxSampleCount. */
  maxSampleCount: number;
  /** Whether `seed` is accepted. */
  seed: boolean;
  /** Whether `enhancePrompt` is accepted. */
  enhancePrompt: boolean;
  /** Reference images (mode "reference"): how many, and which referenceType values. */
  referenceImages: { max: number; types: readonly string[] };
};

export const DEFAULT_DURATION_SECONDS = 8;
export const DEFAULT_RESOLUTION: Resolution = "720p";
export const DEFAULT_SAMPLE_COUNT = 1;

/** "Model versions > Limits > Text input: 1,024 tokens". */
export const MAX_PROMPT_TOKENS = 1024;

/** "Image input: Any image resolution and aspect ratio up to 20MB file size". */
export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

/** Vertex reference: "For images, the following mime types are accepted: image/jpeg, image/png". */
export const IMAGE_MIME_TYPES: readonly string[] = ["image/png", "image/jpeg"];

/** referenceType values the API knows; a model accepts the subset in its `referenceImages.types`. */
export const KNOWN_REFERENCE_TYPES: readonly string[] = ["asset", "style"];

/** personGeneration values the API knows at all. */
export const KNOWN_PERSON_GENERATION: readonly string[] = [
  "allow_all",
  "allow_adult",
  "dont_allow",
];

/**
 * Modes whose request must carry a prompt. Vertex reference: "Required for text-to-video.
 * Optional if an input image prompt is provided"; extension takes "an optional text prompt"; the
 * SDK: "If referenceImages is provided, the text prompt field must also be provided".
 */
export const PROMPT_REQUIRED_MODES: readonly Mode[] = ["text", "reference"];

/** The instance field whose presence selects each mode (text mode: none of them). */
export const MODE_FIELDS: Readonly<Record<Mode, string>> = {
  text: "prompt",
  image: "image",
  interpolation: "lastFrame",
  reference: "referenceImages",
  extension: "video",
};

/** "Extending Veo videos": input limits, the 7 s step and the length of the chain. */
export const EXTENSION = {
  /** Each extension appends this many seconds to the input. */
  addedSeconds: 7,
  /** "Veo-generated videos only up to 141 seconds long." */
  maxInputSeconds: 141,
  /** "by 7 seconds and up to 20 times". */
  maxExtensions: 20,
  /** "for up to 148 seconds of video". */
  maxOutputSeconds: 148,
  /** "Resolution: 720p"; the request's own `resolution` must be 720p too ("720p only for extension"). */
  resolutions: ["720p"] as readonly Resolution[],
  /** "Aspect ratio: 9:16 or 16:9". */
  aspectRatios: ["16:9", "9:16"] as readonly AspectRatio[],
  /** Bytes of the input video, where it comes inline rather than as a uri. */
  mimeTypes: ["video/mp4"] as readonly string[],
} as const;

const BOTH: readonly AspectRatio[] = ["16:9", "9:16"];

/** Veo 3.1 and 3.1 Fast: column "Veo 3.1 & Veo 3.1 Fast". */
const VEO_3_1: ModelRules = {
  family: "3.1",
  // Input modalities: text, image (+ lastFrame: "Using first and last frames ... Veo 3.1 models
  // only"), reference images ("Veo 3.1 models only"), video extension ("Veo 3.1 models only").
  modes: ["text", "image", "interpolation", "reference", "extension"],
  durations: [4, 6, 8],
  // "Must be "8" when using extension, reference images or with 1080p and 4k resolutions".
  // (An older revision also required 8 s for interpolation; the current page does not.)
  eightSecondsOnly: { resolutions: ["1080p", "4k"], modes: ["reference", "extension"] },
  resolutionParameter: true,
  // "720p (default), 1080p (only supports 8s duration), 4k (only supports 8s duration)".
  resolutions: { "720p": BOTH, "1080p": BOTH, "4k": BOTH },
  aspectRatios: BOTH,
  personGeneration: {
    // "Text-to-video & Extension: allow_all only; Image-to-video, Interpolation, & Reference
    // images: allow_adult only".
    global: {
      text: ["allow_all"],
      extension: ["allow_all"],
      image: ["allow_adult"],
      interpolation: ["allow_adult"],
      reference: ["allow_adult"],
    },
    // "In EU, UK, CH, MENA locations ... Veo 3: allow_adult only."
    restricted: {
      text: ["allow_adult"],
      extension: ["allow_adult"],
      image: ["allow_adult"],
      interpolation: ["allow_adult"],
      reference: ["allow_adult"],
    },
  },
  // "Videos per Request: 1".
  maxSampleCount: 1,
  // "the seed parameter is also available for Veo 3 models".
  seed: true,
  // Documented for Veo 2 only ("Not configurable for Veo 3, default prompt enhancer is always on").
  enhancePrompt: false,
  // "Up to three images"; "asset" images only: Veo 3.1 does not take "style" references.
  referenceImages: { max: 3, types: ["asset"] },
};

/** Veo 3.1 Lite: 3.1 without 4k, reference images or extension (model card). */
const VEO_3_1_LITE: ModelRules = {
  ...VEO_3_1,
  modes: ["text", "image", "interpolation"],
  resolutions: { "720p": BOTH, "1080p": BOTH },
  referenceImages: { max: 0, types: [] },
};

/** Veo 3 and 3 Fast: column "Veo 3 & Veo 3 Fast". */
const VEO_3: ModelRules = {
  family: "3",
  // "Input Modalities: Text-to-Video, Image-to-Video"; lastFrame, referenceImages and video are
  // 3.1 features.
  modes: ["text", "image"],
  durations: [4, 6, 8],
  eightSecondsOnly: { resolutions: ["1080p"], modes: [] },
  resolutionParameter: true,
  // "Model features > Resolution: 720p & 1080p (16:9 only)". The parameter table's Veo 3 column
  // also lists 4k "and 720p only for extension", a copy of the 3.1 column (Veo 3 has no
  // extension); the Vertex model card for veo-3.0-generate-001 lists 720p and 1080p only.
  resolutions: { "720p": BOTH, "1080p": ["16:9"] },
  aspectRatios: BOTH,
  personGeneration: {
    // "Text-to-video: allow_all only; Image-to-video: allow_adult only".
    global: { text: ["allow_all"], image: ["allow_adult"] },
    restricted: { text: ["allow_adult"], image: ["allow_adult"] },
  },
  maxSampleCount: 1,
  seed: true,
  enhancePrompt: false,
  referenceImages: { max: 0, types: [] },
};

/** Veo 2: column "Veo 2". */
const VEO_2: ModelRules = {
  family: "2",
  modes: ["text", "image"],
  // "5", "6", "8".
  durations: [5, 6, 8],
  eightSecondsOnly: { resolutions: [], modes: [] },
  // "resolution: Unsupported" (renders 720p).
  resolutionParameter: false,
  resolutions: { "720p": BOTH },
  aspectRatios: BOTH,
  personGeneration: {
    // "Text-to-video: allow_all, allow_adult, dont_allow; Image-to-video: allow_adult, dont_allow".
    // No default is documented outside the restricted regions; allow_adult comes first because
    // it is the default Google documents for Veo 2 on Vertex and for Imagen.
    global: {
      text: ["allow_adult", "allow_all", "dont_allow"],
      image: ["allow_adult", "dont_allow"],
    },
    // "Veo 2: dont_allow and allow_adult. Default is dont_allow."
    restricted: {
      text: ["dont_allow", "allow_adult"],
      image: ["dont_allow", "allow_adult"],
    },
  },
  // "Videos per Request: 1 or 2".
  maxSampleCount: 2,
  seed: false,
  enhancePrompt: true,
  referenceImages: { max: 0, types: [] },
};

/** Every model code this server answers for, with its rules. */
export const MODEL_RULES: Readonly<Record<string, ModelRules>> = {
  "veo-3.1-generate-preview": VEO_3_1,
  "veo-3.1-fast-generate-preview": VEO_3_1,
  "veo-3.1-lite-generate-preview": VEO_3_1_LITE,
  "veo-3.0-generate-001": VEO_3,
  "veo-3.0-fast-generate-001": VEO_3,
  "veo-2.0-generate-001": VEO_2,
};
