/**
 * The video rule tables as one JSON document for the web UI's video form, so the form offers only
 * what the server will accept without keeping its own copy of the rules: per model, its modes,
 * durations, the durations allowed per resolution and mode (the "8 s only" lines), resolutions with
 * their aspect ratios, personGeneration per mode for this server's `--video-region`, sample count,
 * seed, enhancePrompt and reference images; plus the shared limits.
 *
 * @example
 * ```ts
 * import { videoRulesDocument } from "./rules_document.ts";
 * const doc = videoRulesDocument("global", { keyRequired: true });
 * doc.models["veo-2.0-generate-001"].durations; // [5, 6, 8]
 * ```
 * @module
 */
import {
  DEFAULT_DURATION_SECONDS,
  DEFAULT_RESOLUTION,
  DEFAULT_SAMPLE_COUNT,
  EXTENSION,
  IMAGE_MIME_TYPES,
  MAX_IMAGE_BYTES,
  MAX_PROMPT_TOKENS,
  MODE_FIELDS,
  MODEL_RULES,
  type ModelRules,
  type PersonGenerationByMode,
  PROMPT_REQUIRED_MODES,
  type Region,
  RESTRICTED_REGIONS,
} from "./rule_tables.ts";
import type { Mode, Resolution } from "./types.ts";

/** A model's rules as the form sees them: personGeneration already narrowed to the region. */
export type ModelRulesJson = Omit<ModelRules, "personGeneration"> & {
  /** personGeneration values per mode in this server's region; the first is the default. */
  personGeneration: PersonGenerationByMode;
};

export type VideoRulesDocument = {
  region: Region;
  /** Whether requests need an API key (`x-goog-api-key`). */
  keyRequired: boolean;
  defaults: { durationSeconds: number; resolution: Resolution; sampleCount: number };
  limits: { promptTokens: number; imageBytes: number; imageMimeTypes: readonly string[] };
  /** The instance field whose presence selects each mode. */
  modeFields: Readonly<Record<Mode, string>>;
  promptRequiredModes: readonly Mode[];
  extension: typeof EXTENSION;
  models: Record<string, ModelRulesJson>;
};

export function videoRulesDocument(
  region: Region,
  opts: { keyRequired: boolean },
): VideoRulesDocument {
  const restricted = RESTRICTED_REGIONS.has(region);
  const models: Record<string, ModelRulesJson> = {};
  for (const [code, r] of Object.entries(MODEL_RULES)) {
    models[code] = {
      family: r.family,
      modes: r.modes,
      durations: r.durations,
      eightSecondsOnly: r.eightSecondsOnly,
      resolutionParameter: r.resolutionParameter,
      resolutions: r.resolutions,
      aspectRatios: r.aspectRatios,
      personGeneration: restricted ? r.personGeneration.restricted : r.personGeneration.global,
      maxSampleCount: r.maxSampleCount,
      seed: r.seed,
      enhancePrompt: r.enhancePrompt,
      referenceImages: r.referenceImages,
    };
  }
  return {
    region,
    keyRequired: opts.keyRequired,
    defaults: {
      durationSeconds: DEFAULT_DURATION_SECONDS,
      resolution: DEFAULT_RESOLUTION,
      sampleCount: DEFAULT_SAMPLE_COUNT,
    },
    limits: {
      promptTokens: MAX_PROMPT_TOKENS,
      imageBytes: MAX_IMAGE_BYTES,
      imageMimeTypes: IMAGE_MIME_TYPES,
    },
    modeFields: MODE_FIELDS,
    promptRequiredModes: PROMPT_REQUIRED_MODES,
    extension: EXTENSION,
    models,
  };
}
