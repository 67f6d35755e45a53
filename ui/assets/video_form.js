/**
 * The video form's logic, as pure functions over the server's rules document
 * (`./video-rules.json`, built by lib/video/rules_document.ts from the same tables the server
 * validates with): which options each control offers for the chosen model and inputs, and the
 * `predictLongRunning` request those selections make. Nothing here touches the DOM, so it runs (and
 * is tested) in Deno as well as in the page; no rule is copied here: every list comes from the
 * document.
 *
 * The controls depend on each other in one direction: model -> mode (which image inputs are
 * filled) -> resolution -> aspect ratio and duration (e.g. 1080p on Veo 3.1 leaves only 8 s) ->
 * person generation (per mode). A selection the new options no longer hold falls back to the
 * server's default when offered, else the first option.
 *
 * @example
 * ```js
 * import { buildRequest, formOptions } from "./video_form.js";
 * const doc = await (await fetch("./video-rules.json")).json();
 * const sel = { model: "veo-3.1-generate-preview", prompt: "A cat", resolution: "1080p" };
 * formOptions(doc, sel).durations; // [8]
 * const { path, body } = buildRequest(doc, sel);
 * await fetch(path, { method: "POST", body: JSON.stringify(body) });
 * ```
 * @module
 */

/**
 * @typedef {{ bytesBase64Encoded: string, mimeType: string }} WireImage
 * @typedef {{ image: WireImage, referenceType: string }} ReferenceImage
 * @typedef {{ uri: string, aspectRatio?: string }} SourceVideo
 * @typedef {{
 *   model?: string,
 *   prompt?: string,
 *   negativePrompt?: string,
 *   durationSeconds?: number | string,
 *   resolution?: string,
 *   aspectRatio?: string,
 *   personGeneration?: string,
 *   sampleCount?: number | string,
 *   seed?: number | string,
 *   enhancePrompt?: boolean,
 *   image?: WireImage | null,
 *   lastFrame?: WireImage | null,
 *   referenceImages?: ReferenceImage[],
 *   video?: SourceVideo | null,
 * }} Selections
 * @typedef {{
 *   family: string,
 *   modes: string[],
 *   durations: number[],
 *   eightSecondsOnly: { resolutions: string[], modes: string[] },
 *   resolutionParameter: boolean,
 *   resolutions: Record<string, string[]>,
 *   aspectRatios: string[],
 *   personGeneration: Record<string, string[]>,
 *   maxSampleCount: number,
 *   seed: boolean,
 *   enhancePrompt: boolean,
 *   referenceImages: { max: number, types: string[] },
 * }} ModelRules
 * @typedef {{
 *   region: string,
 *   keyRequired: boolean,
 *   defaults: { durationSeconds: number, resolution: string, sampleCount: number },
 *   limits: { promptTokens: number, imageBytes: number, imageMimeTypes: string[] },
 *   modeFields: Record<string, string>,
 *   promptRequiredModes: string[],
 *   extension: { addedSeconds: number, resolutions: string[], aspectRatios: string[] },
 *   models: Record<string, ModelRules>,
 * }} RulesDocument
 */

/**
 * A person's name for a model code: `veo-3.1-lite-generate-preview` -> "Veo 3.1 Lite",
 * `veo-3.0-fast-generate-001` -> "Veo 3 Fast", `veo-2.0-generate-001` -> "Veo 2". A code of
 * another shape is shown as it is.
 * @param {string} code
 */
export function modelLabel(code) {
  const m = /^veo-(\d+)\.(\d+)((?:-[a-z]+)*?)-generate(?:-.*)?$/.exec(code);
  if (!m) return code;
  const version = m[2] === "0" ? m[1] : `${m[1]}.${m[2]}`;
  const variants = m[3].split("-").filter(Boolean).map((w) => w[0].toUpperCase() + w.slice(1));
  return ["Veo", version, ...variants].join(" ");
}

/** What each mode is called on the page. */
export const MODE_LABELS = {
  text: "Text to video",
  image: "Image to video (first frame)",
  interpolation: "First and last frame",
  reference: "Reference images",
  extension: "Extend a video",
};

/**
 * The model a selection names, or the document's first model when it names none it knows.
 * @param {RulesDocument} doc
 * @param {string | undefined} model
 */
export function resolveModel(doc, model) {
  const codes = Object.keys(doc.models);
  return model !== undefined && codes.includes(model) ? model : codes[0];
}

/**
 * The media inputs the model can take, given what is filled. Inputs exclude each other as the API
 * does: an extension video carries no images; reference images go without first or last frame;
 * a last frame needs a first frame.
 * @param {ModelRules} rules
 * @param {Selections} sel
 */
export function inputAvailability(rules, sel) {
  const refs = sel.referenceImages ?? [];
  const hasVideo = !!sel.video && rules.modes.includes("extension");
  const hasRefs = refs.length > 0 && rules.modes.includes("reference") && !hasVideo;
  const hasImage = !!sel.image && rules.modes.includes("image") && !hasVideo && !hasRefs;
  return {
    /** First frame (`image`): shown where the model has image-to-video. */
    image: { shown: rules.modes.includes("image"), enabled: !hasVideo && !hasRefs },
    /** Last frame (`lastFrame`): shown where the model interpolates; needs a first frame. */
    lastFrame: {
      shown: rules.modes.includes("interpolation"),
      enabled: !hasVideo && !hasRefs && hasImage,
    },
    /** Reference images: where the model takes them, up to `max`, of `types`. */
    referenceImages: {
      shown: rules.modes.includes("reference") && rules.referenceImages.max > 0,
      enabled: !hasVideo && !sel.image && !sel.lastFrame,
      max: rules.referenceImages.max,
      types: rules.referenceImages.types,
    },
    /** Extending a generated video. */
    extension: { shown: rules.modes.includes("extension") },
  };
}

/**
 * The inputs that count for this model: those it supports, in the API's order of precedence.
 * @param {ModelRules} rules
 * @param {Selections} sel
 * @returns {{ mode: string, image?: WireImage, lastFrame?: WireImage,
 *   referenceImages?: ReferenceImage[], video?: SourceVideo }}
 */
export function effectiveInputs(rules, sel) {
  const has = (/** @type {string} */ mode) => rules.modes.includes(mode);
  if (sel.video && has("extension")) return { mode: "extension", video: sel.video };
  const refs = (sel.referenceImages ?? []).slice(0, rules.referenceImages.max);
  if (refs.length > 0 && has("reference")) return { mode: "reference", referenceImages: refs };
  if (sel.image && has("image")) {
    if (sel.lastFrame && has("interpolation")) {
      return { mode: "interpolation", image: sel.image, lastFrame: sel.lastFrame };
    }
    return { mode: "image", image: sel.image };
  }
  return { mode: "text" };
}

/**
 * `value` when `options` holds it (compared as strings), else `preferred` when it does, else the
 * first option.
 * @template T
 * @param {readonly T[]} options
 * @param {unknown} value
 * @param {unknown} [preferred]
 * @returns {T}
 */
function pick(options, value, preferred) {
  const find = (/** @type {unknown} */ v) =>
    v === undefined || v === null ? undefined : options.find((o) => String(o) === String(v));
  return find(value) ?? find(preferred) ?? options[0];
}

/**
 * Everything the form shows for these selections: the options of each control, the value each
 * control holds once the options are applied, and which optional controls exist at all.
 * @param {RulesDocument} doc
 * @param {Selections} sel
 */
export function formOptions(doc, sel) {
  const model = resolveModel(doc, sel.model);
  const rules = doc.models[model];
  const inputs = effectiveInputs(rules, sel);
  const mode = inputs.mode;
  const extension = mode === "extension";

  let resolutions = Object.keys(rules.resolutions);
  if (extension) resolutions = resolutions.filter((r) => doc.extension.resolutions.includes(r));
  // A model that refuses the parameter renders its default resolution: show that, fixed.
  if (!rules.resolutionParameter) {
    resolutions = resolutions.includes(doc.defaults.resolution)
      ? [doc.defaults.resolution]
      : resolutions.slice(0, 1);
  }
  const resolution = pick(resolutions, sel.resolution, doc.defaults.resolution);

  const atResolution = rules.resolutions[resolution] ?? [];
  let aspectRatios = rules.aspectRatios.filter((a) => atResolution.includes(a));
  if (extension) {
    const source = inputs.video?.aspectRatio;
    aspectRatios = aspectRatios.filter((a) =>
      source ? a === source : doc.extension.aspectRatios.includes(a)
    );
  }
  const aspectRatio = pick(aspectRatios, sel.aspectRatio);

  const only = rules.eightSecondsOnly;
  const eightOnly = only.resolutions.includes(resolution) || only.modes.includes(mode);
  const durations = eightOnly ? rules.durations.filter((d) => d === 8) : [...rules.durations];
  const durationSeconds = pick(durations, sel.durationSeconds, doc.defaults.durationSeconds);

  const personGenerations = rules.personGeneration[mode] ?? [];
  const personGeneration = pick(personGenerations, sel.personGeneration);

  const sampleCounts = Array.from({ length: rules.maxSampleCount }, (_, i) => i + 1);
  const sampleCount = pick(sampleCounts, sel.sampleCount, doc.defaults.sampleCount);

  return {
    model,
    models: Object.keys(doc.models).map((code) => ({ value: code, label: modelLabel(code) })),
    mode,
    modeLabel: MODE_LABELS[/** @type {keyof typeof MODE_LABELS} */ (mode)] ?? mode,
    inputs: inputAvailability(rules, sel),
    /** Prompt required in this mode (text, reference images); optional with images or a video. */
    promptRequired: doc.promptRequiredModes.includes(mode),
    resolutions,
    /** The model takes no `resolution` parameter: the control shows what it renders, fixed. */
    resolutionFixed: !rules.resolutionParameter,
    resolution,
    aspectRatios,
    /** In extension mode without a known source ratio, the server takes the video's own. */
    aspectRatioFromVideo: extension && !inputs.video?.aspectRatio,
    aspectRatio,
    durations,
    durationSeconds,
    /** Output length: an extension adds its seconds to the input video. */
    extensionAddsSeconds: extension ? doc.extension.addedSeconds : 0,
    personGenerations,
    personGeneration,
    sampleCounts,
    sampleCount,
    seed: rules.seed,
    enhancePrompt: rules.enhancePrompt,
    limits: doc.limits,
  };
}

/**
 * The request these selections make: `POST {path}` with `body` (instances + parameters). Only
 * parameters the model accepts are sent; optional ones (seed, negative prompt) only when filled.
 * Values are not second-guessed beyond the options: the server words any refusal itself.
 * @param {RulesDocument} doc
 * @param {Selections} sel
 */
export function buildRequest(doc, sel) {
  const o = formOptions(doc, sel);
  const rules = doc.models[o.model];
  const inputs = effectiveInputs(rules, sel);
  /** @type {Record<string, unknown>} */
  const instance = { prompt: sel.prompt ?? "" };
  if (inputs.video) instance.video = { uri: inputs.video.uri };
  if (inputs.referenceImages) {
    instance.referenceImages = inputs.referenceImages.map((r) => ({
      image: copyImage(r.image),
      referenceType: r.referenceType || rules.referenceImages.types[0],
    }));
  }
  if (inputs.image) instance.image = copyImage(inputs.image);
  if (inputs.lastFrame) instance.lastFrame = copyImage(inputs.lastFrame);

  /** @type {Record<string, unknown>} */
  const parameters = {};
  if (!o.aspectRatioFromVideo) parameters.aspectRatio = o.aspectRatio;
  parameters.durationSeconds = o.durationSeconds;
  if (rules.resolutionParameter) parameters.resolution = o.resolution;
  if (o.personGeneration !== undefined) parameters.personGeneration = o.personGeneration;
  if (o.sampleCounts.length > 1) parameters.sampleCount = o.sampleCount;
  const seed = String(sel.seed ?? "").trim();
  if (o.seed && seed !== "") parameters.seed = /^\d+$/.test(seed) ? Number(seed) : seed;
  const negative = (sel.negativePrompt ?? "").trim();
  if (negative) parameters.negativePrompt = negative;
  if (o.enhancePrompt) parameters.enhancePrompt = sel.enhancePrompt ?? true;

  return {
    model: o.model,
    path: `/v1beta/models/${encodeURIComponent(o.model)}:predictLongRunning`,
    body: { instances: [instance], parameters },
  };
}

/**
 * The two wire fields of an image (a caller's object may carry more, which the API would refuse).
 * @param {WireImage} img
 * @returns {WireImage}
 */
function copyImage(img) {
  return { bytesBase64Encoded: img.bytesBase64Encoded, mimeType: img.mimeType };
}

/**
 * A file's bytes as the API's image shape.
 * @param {Uint8Array} bytes
 * @param {string} mimeType
 * @returns {WireImage}
 */
export function wireImage(bytes, mimeType) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return { bytesBase64Encoded: btoa(binary), mimeType };
}

/**
 * What a finished (or failed) operation holds, from the polling answer.
 * @param {any} op
 * @returns {{ done: boolean, progress: number | undefined, uris: string[],
 *   error: string | undefined, filtered: string[] }}
 */
export function readOperation(op) {
  const progress = typeof op?.metadata?.progressPercent === "number"
    ? op.metadata.progressPercent
    : undefined;
  if (!op?.done) return { done: false, progress, uris: [], error: undefined, filtered: [] };
  const gen = op.response?.generateVideoResponse ?? {};
  const uris = (gen.generatedSamples ?? [])
    .map((/** @type {any} */ s) => s?.video?.uri)
    .filter((/** @type {unknown} */ u) => typeof u === "string");
  const filtered = Array.isArray(gen.raiMediaFilteredReasons)
    ? gen.raiMediaFilteredReasons.map(String)
    : [];
  const error = typeof op.error?.message === "string" ? op.error.message : undefined;
  return { done: true, progress: 100, uris, error, filtered };
}

/**
 * A video uri with the API key as `key=` (a `<video>` element cannot send headers); the uri as it
 * is when there is no key.
 * @param {string} uri
 * @param {string} key
 */
export function withKey(uri, key) {
  if (!key) return uri;
  const u = new URL(uri, "http://placeholder.invalid");
  u.searchParams.set("key", key);
  return /^[a-z]+:/i.test(uri) ? u.href : `${u.pathname}${u.search}`;
}

/**
 * Whether an API error is about the key (403 PERMISSION_DENIED without one, 400 with
 * `API_KEY_INVALID` for a wrong one): the page then shows its "API key" textbox.
 * @param {number} status
 * @param {any} body
 */
export function isKeyError(status, body) {
  const e = body?.error;
  if (status === 403 && e?.status === "PERMISSION_DENIED") return true;
  if (status === 401) return true;
  const details = Array.isArray(e?.details) ? e.details : [];
  return details.some((/** @type {any} */ d) => d?.reason === "API_KEY_INVALID");
}
