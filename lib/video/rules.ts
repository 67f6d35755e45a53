/**
 * The validator of `POST /v1beta/models/{code}:predictLongRunning` bodies (docs/ARCHITECTURE.md, "Video API").
 * It walks the model's record in `rule_tables.ts`: every decision about what a model accepts lives
 * in that table, and this module only reads the wire shapes, picks the mode from the instance
 * fields present, and reports the first rule broken as Google's API does: a 400
 * `INVALID_ARGUMENT` naming the field and the values allowed (or "`X` isn't supported by this
 * model."), and a 404 `NOT_FOUND` for an unknown model code.
 *
 * Media is resolved here too: images are decoded (images.ts), and an extension `video` is traced
 * back to a file this server generated through the caller's `lookupVideo` (by the id in its uri)
 * or `lookupVideoBytes` (by its bytes), so the chain limits can be checked before any work.
 *
 * @example
 * ```ts
 * import { validateVideoRequest } from "./rules.ts";
 * declare const body: unknown;
 * declare const tokenizer: { count(text: string): number };
 * type Lookups = Parameters<typeof validateVideoRequest>[2];
 * declare const store: {
 *   extensionSource: NonNullable<Lookups["lookupVideo"]>;
 *   extensionSourceByHash: NonNullable<Lookups["lookupVideoBytes"]>;
 * };
 * declare function startOperation(request: unknown, seconds: number): void;
 * const r = validateVideoRequest("veo-3.1-generate-preview", body, {
 *   region: "global",
 *   countTokens: (text) => tokenizer.count(text),
 *   lookupVideo: (id) => store.extensionSource(id),
 *   lookupVideoBytes: (bytes) => store.extensionSourceByHash(bytes),
 * });
 * if (r.ok) startOperation(r.request, r.outputSeconds);
 * else console.error(r.error.status, r.error.message);
 * ```
 * @module
 */
import { decodeImage, readInlineBytes } from "./images.ts";
import {
  DEFAULT_DURATION_SECONDS,
  DEFAULT_RESOLUTION,
  DEFAULT_SAMPLE_COUNT,
  EXTENSION,
  KNOWN_PERSON_GENERATION,
  KNOWN_REFERENCE_TYPES,
  MAX_PROMPT_TOKENS,
  MODE_FIELDS,
  MODEL_RULES,
  type ModelRules,
  PROMPT_REQUIRED_MODES,
  type Region,
  REGIONS,
  RESTRICTED_REGIONS,
} from "./rule_tables.ts";
import type { AspectRatio, Family, ImageInput, Mode, Resolution, VideoRequest } from "./types.ts";

export type { Region } from "./rule_tables.ts";

/** A video this server generated, as far as extending it is concerned. */
export type ExtensionSource = {
  fileId: string;
  durationSeconds: number;
  resolution: Resolution;
  aspectRatio: AspectRatio;
  /** How many extensions produced this video (0 for a fresh generation). */
  extensionCount: number;
};

export type RuleContext = {
  region: Region;
  /** Tokens in a prompt, by the served model's tokenizer. */
  countTokens: (text: string) => number;
  /** The generated video with this file id, if it exists. */
  lookupVideo: (fileId: string) => ExtensionSource | undefined;
  /** The generated video with exactly these bytes, if any. */
  lookupVideoBytes: (bytes: Uint8Array) => ExtensionSource | undefined;
};

export type RuleError = {
  status: 400 | 404;
  googleStatus: "INVALID_ARGUMENT" | "NOT_FOUND";
  message: string;
  /** The offending field, as written in the request (`durationSeconds`, `referenceImages[1].image`). */
  field?: string;
};

export type RuleResult =
  | { ok: true; request: VideoRequest; outputSeconds: number }
  | { ok: false; error: RuleError };

/** Every model code with a rule table, in table order. */
export const MODEL_CODES: readonly string[] = Object.keys(MODEL_RULES);

/** `--video-region` value (case-insensitive) to a region; undefined when unknown. */
export function parseRegion(s: string): Region | undefined {
  const r = s.trim().toLowerCase();
  return REGIONS.find((known) => known === r);
}

export function familyOf(code: string): Family | undefined {
  return rulesOf(code)?.family;
}

/** Validates one predictLongRunning body against the rules of `model`. */
export function validateVideoRequest(model: string, body: unknown, ctx: RuleContext): RuleResult {
  const rules = rulesOf(model);
  if (!rules) {
    return {
      ok: false,
      error: {
        status: 404,
        googleStatus: "NOT_FOUND",
        message: `models/${model} is not found for API version v1beta, or is not supported for ` +
          `predictLongRunning.`,
        field: "model",
      },
    };
  }
  try {
    return { ok: true, ...check(model, rules, body, ctx) };
  } catch (e) {
    if (e instanceof RuleViolation) return { ok: false, error: e.error };
    throw e;
  }
}

// --- wire shape -------------------------------------------------------------------------------

const BODY_FIELDS = ["instances", "parameters"];
const INSTANCE_FIELDS = ["prompt", "image", "lastFrame", "referenceImages", "video"];
const PARAMETER_FIELDS = [
  "aspectRatio",
  "durationSeconds",
  "enhancePrompt",
  "negativePrompt",
  "numberOfVideos",
  "personGeneration",
  "resolution",
  "sampleCount",
  "seed",
];
const REFERENCE_FIELDS = ["image", "referenceType"];
const VIDEO_FIELDS = [
  "uri",
  "encodedVideo",
  "encoding",
  "bytesBase64Encoded",
  "mimeType",
  "inlineData",
];
const VIDEO_SHAPES = "{uri} of a video this server generated, or its bytes as " +
  "{encodedVideo, encoding}, {bytesBase64Encoded, mimeType} or {inlineData: {mimeType, data}}";

const MODE_LABELS: Readonly<Record<Mode, string>> = {
  text: "text-to-video",
  image: "image-to-video",
  interpolation: "interpolation (image + lastFrame)",
  reference: "reference images",
  extension: "video extension",
};

/** Thrown inside the walk and turned into the result by `validateVideoRequest`. */
class RuleViolation extends Error {
  constructor(readonly error: RuleError) {
    super(error.message);
  }
}

function invalid(message: string, field?: string): never {
  throw new RuleViolation({ status: 400, googleStatus: "INVALID_ARGUMENT", message, field });
}

/** Google's wording for a field the model refuses, plus which models take it. */
function notSupported(field: string, supports: (rules: ModelRules) => boolean): never {
  const models = MODEL_CODES.filter((code) => supports(MODEL_RULES[code]));
  invalid(
    `\`${field}\` isn't supported by this model. Please remove it or refer to the Gemini API ` +
      `documentation for supported usage. Models that support it: ${models.join(", ")}.`,
    field,
  );
}

function rulesOf(code: string): ModelRules | undefined {
  return Object.hasOwn(MODEL_RULES, code) ? MODEL_RULES[code] : undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A copy without null members: JSON null means "not set", as in Google's JSON mapping. */
function withoutNulls(obj: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== null));
}

function rejectUnknown(obj: Record<string, unknown>, at: string, known: readonly string[]): void {
  const unknown = Object.keys(obj).filter((k) => !known.includes(k));
  if (unknown.length === 0) return;
  const where = at === "" ? "" : ` at '${at}'`;
  const names = unknown.map((k) => JSON.stringify(k)).join(", ");
  invalid(
    `Invalid JSON payload received. Unknown name ${names}${where}: Cannot find field. ` +
      `Known fields: ${known.join(", ")}.`,
    at === "" ? unknown[0] : `${at}.${unknown[0]}`,
  );
}

/** A value as echoed in messages: strings and numbers bare, anything else as short JSON. */
function show(v: unknown): string {
  const text = typeof v === "string" || typeof v === "number"
    ? String(v)
    : JSON.stringify(v) ?? String(v);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function oneOf(values: readonly (string | number)[]): string {
  return values.length === 1 ? String(values[0]) : `one of ${values.join(", ")}`;
}

/** A number, or a string holding one ("8", " 8 "): Google's JSON mapping accepts both. */
function toNumber(v: unknown): number | undefined {
  if (typeof v === "number") return Number.isFinite(v) ? v : undefined;
  if (typeof v === "string" && /^\s*-?\d+(\.\d+)?\s*$/.test(v)) return Number(v);
  return undefined;
}

function toInteger(v: unknown): number | undefined {
  const n = toNumber(v);
  return n !== undefined && Number.isInteger(n) ? n : undefined;
}

type Shape = { instance: Record<string, unknown>; params: Record<string, unknown> };

function readShape(body: unknown): Shape {
  if (!isRecord(body)) {
    invalid(
      `Invalid JSON payload received: the body must be an object ` +
        `{"instances": [{...}], "parameters": {...}} (got ${show(body)})`,
    );
  }
  rejectUnknown(body, "", BODY_FIELDS);
  const instances = body.instances;
  if (!Array.isArray(instances)) {
    invalid(`instances is required: an array with exactly one instance`, "instances");
  }
  if (instances.length !== 1) {
    invalid(`instances must hold exactly one instance (got ${instances.length})`, "instances");
  }
  if (!isRecord(instances[0])) {
    invalid(`instances[0] must be an object with ${INSTANCE_FIELDS.join(", ")}`, "instances[0]");
  }
  const instance = withoutNulls(instances[0]);
  rejectUnknown(instance, "instances[0]", INSTANCE_FIELDS);
  const raw = body.parameters ?? {};
  if (!isRecord(raw)) invalid(`parameters must be an object (got ${show(raw)})`, "parameters");
  const params = withoutNulls(raw);
  rejectUnknown(params, "parameters", PARAMETER_FIELDS);
  return { instance, params };
}

/** The mode the instance fields select, refusing combinations the API refuses. */
function modeOf(instance: Record<string, unknown>): Mode {
  const has = (field: string) => instance[field] !== undefined;
  const exclusive = (field: string, others: string[], why: string) => {
    const clash = others.find(has);
    if (clash) invalid(`\`${field}\` can't be combined with \`${clash}\`: ${why}`, clash);
  };
  if (has("video")) {
    exclusive(
      "video",
      ["image", "lastFrame", "referenceImages"],
      "an extension request carries the video and an optional prompt only",
    );
    return "extension";
  }
  if (has("referenceImages")) {
    exclusive(
      "referenceImages",
      ["image", "lastFrame"],
      "reference images guide a text-to-video generation, without first or last frames",
    );
    return "reference";
  }
  if (has("lastFrame")) {
    if (!has("image")) invalid("`lastFrame` must be used together with `image`", "lastFrame");
    return "interpolation";
  }
  return has("image") ? "image" : "text";
}

// --- the walk ---------------------------------------------------------------------------------

function check(
  model: string,
  rules: ModelRules,
  body: unknown,
  ctx: RuleContext,
): { request: VideoRequest; outputSeconds: number } {
  const { instance, params } = readShape(body);
  const mode = modeOf(instance);
  if (!rules.modes.includes(mode)) notSupported(MODE_FIELDS[mode], (r) => r.modes.includes(mode));
  const source = mode === "extension" ? resolveExtension(instance.video, ctx) : undefined;

  const aspectRatio = readAspectRatio(model, rules, params, source);
  const resolution = readResolution(model, rules, params, mode, aspectRatio);
  const durationSeconds = readDuration(model, rules, params, mode, resolution);
  const sampleCount = readSampleCount(model, rules, params);
  const seed = readSeed(params, rules);
  const personGeneration = readPersonGeneration(model, rules, params, mode, ctx.region);
  const negativePrompt = readNegativePrompt(params);
  const enhancePrompt = readEnhancePrompt(params, rules);
  const prompt = readPrompt(instance, mode, ctx);

  const request: VideoRequest = {
    model,
    family: rules.family,
    mode,
    prompt,
    aspectRatio,
    resolution,
    durationSeconds,
    sampleCount,
    personGeneration,
    referenceImages: mode === "reference" ? readReferenceImages(model, rules, instance) : [],
  };
  if (negativePrompt !== undefined) request.negativePrompt = negativePrompt;
  if (enhancePrompt !== undefined) request.enhancePrompt = enhancePrompt;
  if (seed !== undefined) request.seed = seed;
  if (mode === "image" || mode === "interpolation") request.image = image(instance.image, "image");
  if (mode === "interpolation") request.lastFrame = image(instance.lastFrame, "lastFrame");
  if (source) request.videoFileId = source.fileId;

  const outputSeconds = source ? source.durationSeconds + EXTENSION.addedSeconds : durationSeconds;
  return { request, outputSeconds };
}

function readAspectRatio(
  model: string,
  rules: ModelRules,
  params: Record<string, unknown>,
  source: ExtensionSource | undefined,
): AspectRatio {
  const v = params.aspectRatio;
  if (v === undefined) return source?.aspectRatio ?? rules.aspectRatios[0];
  const ratio = rules.aspectRatios.find((r) => r === v);
  if (!ratio) {
    invalid(
      `aspectRatio must be ${oneOf(rules.aspectRatios)} for ${model} (got ${show(v)})`,
      "aspectRatio",
    );
  }
  if (source && ratio !== source.aspectRatio) {
    invalid(
      `aspectRatio must be ${source.aspectRatio} for video extension: the input video is ` +
        `${source.aspectRatio} (got ${ratio})`,
      "aspectRatio",
    );
  }
  return ratio;
}

function readResolution(
  model: string,
  rules: ModelRules,
  params: Record<string, unknown>,
  mode: Mode,
  aspectRatio: AspectRatio,
): Resolution {
  const v = params.resolution;
  if (v !== undefined && !rules.resolutionParameter) {
    notSupported("resolution", (r) => r.resolutionParameter);
  }
  const allowed = Object.keys(rules.resolutions) as Resolution[];
  let resolution = DEFAULT_RESOLUTION;
  if (v !== undefined) {
    const found = allowed.find((r) => typeof v === "string" && r === v.toLowerCase());
    if (!found) {
      invalid(`resolution must be ${oneOf(allowed)} for ${model} (got ${show(v)})`, "resolution");
    }
    resolution = found;
  }
  if (mode === "extension" && !EXTENSION.resolutions.includes(resolution)) {
    invalid(
      `resolution must be ${oneOf(EXTENSION.resolutions)} for video extension (got ${resolution})`,
      "resolution",
    );
  }
  const ratios = rules.resolutions[resolution] ?? [];
  if (!ratios.includes(aspectRatio)) {
    invalid(
      `aspectRatio must be ${oneOf(ratios)} at resolution ${resolution} for ${model} ` +
        `(got ${aspectRatio})`,
      "aspectRatio",
    );
  }
  return resolution;
}

function readDuration(
  model: string,
  rules: ModelRules,
  params: Record<string, unknown>,
  mode: Mode,
  resolution: Resolution,
): number {
  const v = params.durationSeconds;
  const seconds = v === undefined ? DEFAULT_DURATION_SECONDS : toNumber(v);
  if (seconds === undefined || !rules.durations.includes(seconds)) {
    invalid(
      `durationSeconds must be ${oneOf(rules.durations)} for ${model} (got ${show(v)})`,
      "durationSeconds",
    );
  }
  const only = rules.eightSecondsOnly;
  const why = only.resolutions.includes(resolution)
    ? `at resolution ${resolution}`
    : only.modes.includes(mode)
    ? `for ${MODE_LABELS[mode]}`
    : undefined;
  if (why && seconds !== 8) {
    invalid(`durationSeconds must be 8 ${why} with ${model} (got ${show(v)})`, "durationSeconds");
  }
  return seconds;
}

function readSampleCount(
  model: string,
  rules: ModelRules,
  params: Record<string, unknown>,
): number {
  const { sampleCount: a, numberOfVideos: b } = params;
  if (a !== undefined && b !== undefined && toNumber(a) !== toNumber(b)) {
    invalid(
      `sampleCount (${show(a)}) and numberOfVideos (${show(b)}) name the same setting and ` +
        `differ: send one of them`,
      "numberOfVideos",
    );
  }
  const field = a !== undefined ? "sampleCount" : "numberOfVideos";
  const v = a ?? b;
  if (v === undefined) return DEFAULT_SAMPLE_COUNT;
  const n = toInteger(v);
  const allowed = Array.from({ length: rules.maxSampleCount }, (_, i) => i + 1);
  if (n === undefined || !allowed.includes(n)) {
    invalid(`${field} must be ${oneOf(allowed)} for ${model} (got ${show(v)})`, field);
  }
  return n;
}

const UINT32_MAX = 4294967295;

function readSeed(params: Record<string, unknown>, rules: ModelRules): number | undefined {
  const v = params.seed;
  if (v === undefined) return undefined;
  if (!rules.seed) notSupported("seed", (r) => r.seed);
  const n = toInteger(v);
  if (n === undefined || n < 0 || n > UINT32_MAX) {
    invalid(`seed must be an integer from 0 to ${UINT32_MAX} (got ${show(v)})`, "seed");
  }
  return n;
}

function readPersonGeneration(
  model: string,
  rules: ModelRules,
  params: Record<string, unknown>,
  mode: Mode,
  region: Region,
): string {
  const restricted = RESTRICTED_REGIONS.has(region);
  const table = restricted ? rules.personGeneration.restricted : rules.personGeneration.global;
  const allowed = table[mode] ?? [];
  const v = params.personGeneration;
  if (v === undefined) return allowed[0];
  // The SDK's PersonGeneration enum is upper case (ALLOW_ADULT); the docs write allow_adult.
  const value = typeof v === "string" ? v.toLowerCase() : undefined;
  if (value === undefined || !allowed.includes(value)) {
    const where = restricted ? ` in region ${region.toUpperCase()}` : "";
    const known = value !== undefined && KNOWN_PERSON_GENERATION.includes(value);
    invalid(
      `${known ? `${value} for personGeneration is currently not supported. ` : ""}` +
        `personGeneration must be ${oneOf(allowed)} for ${MODE_LABELS[mode]} with ` +
        `${model}${where} (got ${show(v)})`,
      "personGeneration",
    );
  }
  return value;
}

function readNegativePrompt(params: Record<string, unknown>): string | undefined {
  const v = params.negativePrompt;
  if (v !== undefined && typeof v !== "string") {
    invalid(`negativePrompt must be a string (got ${show(v)})`, "negativePrompt");
  }
  return v;
}

function readEnhancePrompt(
  params: Record<string, unknown>,
  rules: ModelRules,
): boolean | undefined {
  const v = params.enhancePrompt;
  if (v === undefined) return undefined;
  if (!rules.enhancePrompt) notSupported("enhancePrompt", (r) => r.enhancePrompt);
  if (typeof v !== "boolean") {
    invalid(`enhancePrompt must be true or false (got ${show(v)})`, "enhancePrompt");
  }
  return v;
}

function readPrompt(instance: Record<string, unknown>, mode: Mode, ctx: RuleContext): string {
  const v = instance.prompt ?? "";
  if (typeof v !== "string") invalid(`prompt must be a string (got ${show(v)})`, "prompt");
  if (v.trim() === "") {
    if (PROMPT_REQUIRED_MODES.includes(mode)) {
      invalid(`prompt is required for ${MODE_LABELS[mode]}`, "prompt");
    }
    return v;
  }
  const tokens = ctx.countTokens(v);
  if (tokens > MAX_PROMPT_TOKENS) {
    invalid(
      `prompt is ${tokens} tokens long; the maximum is ${MAX_PROMPT_TOKENS} tokens`,
      "prompt",
    );
  }
  return v;
}

function image(wire: unknown, field: string): ImageInput {
  const r = decodeImage(wire, field);
  if (!r.ok) invalid(r.message, r.field);
  return r.value;
}

function readReferenceImages(
  model: string,
  rules: ModelRules,
  instance: Record<string, unknown>,
): VideoRequest["referenceImages"] {
  const v = instance.referenceImages;
  const { max, types } = rules.referenceImages;
  if (!Array.isArray(v)) {
    invalid(
      `referenceImages must be an array of {image, referenceType} (got ${show(v)})`,
      "referenceImages",
    );
  }
  if (v.length < 1 || v.length > max) {
    invalid(
      `referenceImages must hold 1 to ${max} images for ${model} (got ${v.length})`,
      "referenceImages",
    );
  }
  return v.map((item, i) => {
    const at = `referenceImages[${i}]`;
    if (!isRecord(item)) invalid(`${at} must be an object {image, referenceType}`, at);
    const entry = withoutNulls(item);
    rejectUnknown(entry, at, REFERENCE_FIELDS);
    const t = entry.referenceType;
    // The SDK sends its enum (ASSET); the docs write "asset".
    const type = typeof t === "string" ? t.toLowerCase() : undefined;
    if (type === undefined || !KNOWN_REFERENCE_TYPES.includes(type)) {
      invalid(
        `${at}.referenceType must be ${oneOf(types)} (got ${show(t)})`,
        `${at}.referenceType`,
      );
    }
    if (!types.includes(type)) {
      invalid(
        `\`referenceType\` ${type} isn't supported by this model. Allowed values: ${
          types.join(", ")
        }.`,
        `${at}.referenceType`,
      );
    }
    if (entry.image === undefined) invalid(`${at}.image is required`, `${at}.image`);
    return { image: image(entry.image, `${at}.image`), referenceType: "asset" as const };
  });
}

// --- extension --------------------------------------------------------------------------------

/** The last `files/{id}` in a uri: the SDK may wrap our uri inside its own base URL. */
const FILE_ID = /files\/([a-z0-9]{12})(?![a-z0-9])/g;

function resolveExtension(video: unknown, ctx: RuleContext): ExtensionSource {
  if (!isRecord(video)) invalid(`video must be an object: ${VIDEO_SHAPES}`, "video");
  const wire = withoutNulls(video);
  rejectUnknown(wire, "video", VIDEO_FIELDS);
  for (const key of ["encoding", "mimeType"]) {
    const mime = wire[key];
    if (mime !== undefined && (typeof mime !== "string" || !EXTENSION.mimeTypes.includes(mime))) {
      invalid(
        `video.${key} must be ${oneOf(EXTENSION.mimeTypes)} (got ${show(mime)})`,
        `video.${key}`,
      );
    }
  }
  const bytes = readInlineBytes(wire, "video", {
    forms: ["encodedVideo", "bytesBase64Encoded", "inlineData"],
    what: "video",
  });
  let source: ExtensionSource | undefined;
  if (wire.uri !== undefined) {
    if (bytes) invalid("video has both a uri and bytes: send one of them", "video");
    source = sourceFromUri(wire.uri, ctx);
  } else if (bytes) {
    if (!bytes.ok) invalid(bytes.message, bytes.field);
    const mime = bytes.value.mimeType;
    if (mime !== undefined && !EXTENSION.mimeTypes.includes(mime)) {
      invalid(
        `video.inlineData.mimeType must be ${oneOf(EXTENSION.mimeTypes)} (got ${mime})`,
        "video.inlineData.mimeType",
      );
    }
    source = ctx.lookupVideoBytes(bytes.value.bytes);
    if (!source) {
      invalid(
        "video is not a video this server generated: only Veo-generated videos can be extended",
        "video",
      );
    }
  } else {
    invalid(`video has neither a uri nor bytes: send ${VIDEO_SHAPES}`, "video");
  }
  checkChain(source);
  return source;
}

function sourceFromUri(uri: unknown, ctx: RuleContext): ExtensionSource {
  if (typeof uri !== "string") {
    invalid(`video.uri must be a string (got ${show(uri)})`, "video.uri");
  }
  const id = [...uri.matchAll(FILE_ID)].at(-1)?.[1];
  if (!id) {
    invalid(
      `video.uri must be the uri of a video this server generated ` +
        `(.../v1beta/files/{id}:download?alt=media; got ${show(uri)})`,
      "video.uri",
    );
  }
  const source = ctx.lookupVideo(id);
  if (!source) {
    invalid(
      `video.uri names file ${id}, which is not a video this server generated (or it has ` +
        `expired): only Veo-generated videos can be extended`,
      "video.uri",
    );
  }
  return source;
}

/**
 * "Input video limitations" and the 20-extension chain. The 148 s output cap follows from the
 * 141 s input cap plus 7 s (the table test holds them together), so it needs no check of its own.
 */
function checkChain(source: ExtensionSource): void {
  if (!EXTENSION.resolutions.includes(source.resolution)) {
    invalid(
      `video must be ${oneOf(EXTENSION.resolutions)} to be extended (the input is ` +
        `${source.resolution})`,
      "video",
    );
  }
  if (!EXTENSION.aspectRatios.includes(source.aspectRatio)) {
    invalid(
      `video must be ${oneOf(EXTENSION.aspectRatios)} to be extended (the input is ` +
        `${source.aspectRatio})`,
      "video",
    );
  }
  if (source.durationSeconds > EXTENSION.maxInputSeconds) {
    invalid(
      `video must be ${EXTENSION.maxInputSeconds} seconds or shorter to be extended (the input ` +
        `is ${source.durationSeconds} s)`,
      "video",
    );
  }
  if (source.extensionCount >= EXTENSION.maxExtensions) {
    invalid(
      `video has been extended ${source.extensionCount} times already; a video can be extended ` +
        `at most ${EXTENSION.maxExtensions} times`,
      "video",
    );
  }
}
