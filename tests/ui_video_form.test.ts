// The video page's form logic (ui/assets/video_form.js) against the server's own rules document
// and validator: the options each control offers for a model and mode, and proof by exhaustion
// that the form offers exactly what `validateVideoRequest` accepts, and that every request it
// builds passes.
import assert from "node:assert/strict";
import { videoRulesDocument } from "../lib/video/rules_document.ts";
import { type RuleContext, validateVideoRequest } from "../lib/video/rules.ts";
import {
  buildRequest,
  formOptions,
  isKeyError,
  modelLabel,
  readOperation,
  type RulesDocument,
  type Selections,
  withKey,
} from "../ui/assets/video_form.js";

const doc = videoRulesDocument("global", { keyRequired: false }) as unknown as RulesDocument;
const codes = Object.keys(doc.models);
const V31 = "veo-3.1-generate-preview";
const LITE = "veo-3.1-lite-generate-preview";
const V3 = "veo-3.0-generate-001";
const V2 = "veo-2.0-generate-001";

const png = {
  bytesBase64Encoded: btoa(String.fromCharCode(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0)),
  mimeType: "image/png",
};
const SOURCE_ID = "abcdefghij12";
const sourceUri = `http://127.0.0.1:8000/v1beta/files/${SOURCE_ID}:download?alt=media`;

function ctx(region: RuleContext["region"] = "global"): RuleContext {
  return {
    region,
    countTokens: (t) => t.split(/\s+/).filter(Boolean).length,
    lookupVideo: (id) =>
      id === SOURCE_ID
        ? {
          fileId: id,
          durationSeconds: 8,
          resolution: "720p",
          aspectRatio: "16:9",
          extensionCount: 0,
        }
        : undefined,
    lookupVideoBytes: () => undefined,
  };
}

/** The image inputs that select each mode. */
const MODE_INPUTS: Record<string, Partial<Selections>> = {
  text: {},
  image: { image: png },
  interpolation: { image: png, lastFrame: png },
  reference: { referenceImages: [{ image: png, referenceType: "asset" }] },
  extension: { video: { uri: sourceUri, aspectRatio: "16:9" } },
};

/** The same inputs as the wire instance the server reads. */
function wireInstance(mode: string): Record<string, unknown> {
  const inputs = MODE_INPUTS[mode];
  const out: Record<string, unknown> = { prompt: "A kite over a beach" };
  if (inputs.image) out.image = png;
  if (inputs.lastFrame) out.lastFrame = png;
  if (inputs.referenceImages) out.referenceImages = [{ image: png, referenceType: "asset" }];
  if (inputs.video) out.video = { uri: sourceUri };
  return out;
}

function accepted(model: string, body: unknown, region: RuleContext["region"] = "global") {
  const r = validateVideoRequest(model, body, ctx(region));
  return r;
}

Deno.test("video form: model names and the default model", () => {
  assert.equal(modelLabel(V31), "Veo 3.1");
  assert.equal(modelLabel("veo-3.1-fast-generate-preview"), "Veo 3.1 Fast");
  assert.equal(modelLabel(LITE), "Veo 3.1 Lite");
  assert.equal(modelLabel(V3), "Veo 3");
  assert.equal(modelLabel("veo-3.0-fast-generate-001"), "Veo 3 Fast");
  assert.equal(modelLabel(V2), "Veo 2");
  assert.equal(modelLabel("something-else"), "something-else");
  const o = formOptions(doc, {});
  assert.equal(o.model, codes[0]);
  assert.deepEqual(o.models.map((m) => m.value), codes);
  assert.equal(formOptions(doc, { model: "no-such-model" }).model, codes[0]);
});

Deno.test("video form: Veo 3.1 Lite offers no 4k; Veo 3.1 does", () => {
  assert.deepEqual(formOptions(doc, { model: LITE }).resolutions, ["720p", "1080p"]);
  assert.deepEqual(formOptions(doc, { model: V31 }).resolutions, ["720p", "1080p", "4k"]);
  // A 4k choice carried over from another model falls back to the default.
  assert.equal(formOptions(doc, { model: LITE, resolution: "4k" }).resolution, "720p");
  // Lite has no reference images or extension: those inputs are not offered.
  const inputs = formOptions(doc, { model: LITE }).inputs;
  assert.equal(inputs.referenceImages.shown, false);
  assert.equal(inputs.extension.shown, false);
  assert.equal(inputs.image.shown, true);
  assert.equal(inputs.lastFrame.shown, true);
});

Deno.test("video form: Veo 2 offers 5, 6, 8 s, a fixed 720p, two samples, enhancePrompt, no seed", () => {
  const o = formOptions(doc, { model: V2 });
  assert.deepEqual(o.durations, [5, 6, 8]);
  assert.deepEqual(o.resolutions, ["720p"]);
  assert.equal(o.resolutionFixed, true);
  assert.deepEqual(o.sampleCounts, [1, 2]);
  assert.equal(o.enhancePrompt, true);
  assert.equal(o.seed, false);
  assert.equal(o.inputs.lastFrame.shown, false);
  assert.equal(o.inputs.referenceImages.shown, false);
  const { body } = buildRequest(doc, {
    model: V2,
    prompt: "Waves",
    durationSeconds: 5,
    resolution: "1080p",
    seed: 7,
    sampleCount: 2,
  });
  const params = body.parameters as Record<string, unknown>;
  assert.equal(params.resolution, undefined, "Veo 2 refuses the resolution parameter");
  assert.equal(params.seed, undefined, "Veo 2 refuses seed");
  assert.equal(params.durationSeconds, 5);
  assert.equal(params.sampleCount, 2);
  assert.equal(params.enhancePrompt, true);
  assert.ok(accepted(V2, body).ok);
});

Deno.test("video form: 1080p and 4k on Veo 3.1 offer only 8 s; so do reference images", () => {
  assert.deepEqual(formOptions(doc, { model: V31 }).durations, [4, 6, 8]);
  assert.deepEqual(formOptions(doc, { model: V31, resolution: "1080p" }).durations, [8]);
  assert.deepEqual(formOptions(doc, { model: V31, resolution: "4k" }).durations, [8]);
  const chosen = formOptions(doc, { model: V31, durationSeconds: 4, resolution: "1080p" });
  assert.equal(chosen.durationSeconds, 8, "4 s gives way to the only duration left");
  assert.deepEqual(
    formOptions(doc, { model: V31, ...MODE_INPUTS.reference }).durations,
    [8],
  );
  assert.deepEqual(formOptions(doc, { model: V31, ...MODE_INPUTS.image }).durations, [4, 6, 8]);
  // Veo 3: 1080p is 16:9 only, and 8 s only.
  const v3 = formOptions(doc, { model: V3, resolution: "1080p", aspectRatio: "9:16" });
  assert.deepEqual(v3.aspectRatios, ["16:9"]);
  assert.equal(v3.aspectRatio, "16:9");
  assert.deepEqual(v3.durations, [8]);
});

Deno.test("video form: person generation per mode and region", () => {
  const pg = (model: string, mode: string, d = doc) =>
    formOptions(d, { model, ...MODE_INPUTS[mode] }).personGenerations;
  assert.deepEqual(pg(V31, "text"), ["allow_all"]);
  assert.deepEqual(pg(V31, "image"), ["allow_adult"]);
  assert.deepEqual(pg(V31, "interpolation"), ["allow_adult"]);
  assert.deepEqual(pg(V31, "reference"), ["allow_adult"]);
  assert.deepEqual(pg(V31, "extension"), ["allow_all"]);
  assert.deepEqual(pg(V2, "text"), ["allow_adult", "allow_all", "dont_allow"]);
  assert.deepEqual(pg(V2, "image"), ["allow_adult", "dont_allow"]);
  const eu = videoRulesDocument("eu", { keyRequired: false }) as unknown as RulesDocument;
  assert.deepEqual(pg(V31, "text", eu), ["allow_adult"]);
  assert.deepEqual(pg(V2, "text", eu), ["dont_allow", "allow_adult"]);
  // A choice the new mode does not allow falls back to the mode's default.
  const o = formOptions(doc, { model: V2, personGeneration: "allow_all", image: png });
  assert.equal(o.personGeneration, "allow_adult");
});

Deno.test("video form: inputs exclude each other as the API does", () => {
  const refs = formOptions(doc, { model: V31, ...MODE_INPUTS.reference });
  assert.equal(refs.mode, "reference");
  assert.equal(refs.inputs.image.enabled, false);
  assert.equal(refs.inputs.lastFrame.enabled, false);
  const image = formOptions(doc, { model: V31, image: png });
  assert.equal(image.inputs.referenceImages.enabled, false);
  assert.equal(image.inputs.lastFrame.enabled, true);
  assert.equal(formOptions(doc, { model: V31 }).inputs.lastFrame.enabled, false);
  // Inputs a model does not take are left out of its request (kept for a model that does).
  const sel: Selections = { model: V3, prompt: "p", image: png, lastFrame: png };
  assert.equal(formOptions(doc, sel).mode, "image");
  const instance = buildRequest(doc, sel).body.instances[0] as Record<string, unknown>;
  assert.equal(instance.lastFrame, undefined);
  assert.ok(instance.image);
  assert.ok(accepted(V3, buildRequest(doc, sel).body).ok);
  // Extension: 720p, the source's aspect ratio, 8 s; no images.
  const ext = formOptions(doc, { model: V31, resolution: "1080p", ...MODE_INPUTS.extension });
  assert.equal(ext.mode, "extension");
  assert.deepEqual(ext.resolutions, ["720p"]);
  assert.deepEqual(ext.aspectRatios, ["16:9"]);
  assert.deepEqual(ext.durations, [8]);
  assert.equal(ext.extensionAddsSeconds, 7);
  assert.equal(ext.inputs.image.enabled, false);
});

Deno.test("video form: every model's default form passes the server's validation", () => {
  for (const model of codes) {
    const { body, path } = buildRequest(doc, { model, prompt: "A red kite over a beach" });
    assert.equal(path, `/v1beta/models/${model}:predictLongRunning`);
    const r = accepted(model, body);
    assert.ok(r.ok, `${model}: ${JSON.stringify(!r.ok && r.error)}`);
    if (r.ok) {
      assert.equal(r.request.durationSeconds, doc.defaults.durationSeconds);
      assert.equal(r.request.resolution, doc.defaults.resolution);
    }
    // With every optional control filled as the form offers it.
    const o = formOptions(doc, { model });
    const full = buildRequest(doc, {
      model,
      prompt: "A red kite over a beach",
      negativePrompt: "rain",
      seed: "42",
      sampleCount: o.sampleCounts.at(-1),
      enhancePrompt: false,
    });
    const rf = accepted(model, full.body);
    assert.ok(rf.ok, `${model} (all controls): ${JSON.stringify(!rf.ok && rf.error)}`);
  }
});

Deno.test("video form: the form offers exactly what the server accepts (every model, mode, value)", () => {
  for (const region of ["global", "eu"] as const) {
    const d = videoRulesDocument(region, { keyRequired: false }) as unknown as RulesDocument;
    let offered = 0;
    for (const model of codes) {
      const rules = d.models[model];
      for (const mode of Object.keys(MODE_INPUTS)) {
        for (const resolution of ["720p", "1080p", "4k"]) {
          // A model without the parameter renders 720p and is asked nothing.
          if (!rules.resolutionParameter && resolution !== "720p") continue;
          for (const aspectRatio of ["16:9", "9:16"]) {
            for (const durationSeconds of [4, 5, 6, 8]) {
              for (const personGeneration of ["allow_all", "allow_adult", "dont_allow"]) {
                const parameters: Record<string, unknown> = {
                  aspectRatio,
                  durationSeconds,
                  personGeneration,
                };
                if (rules.resolutionParameter) parameters.resolution = resolution;
                const body = { instances: [wireInstance(mode)], parameters };
                const server = accepted(model, body, region).ok;
                const sel: Selections = {
                  model,
                  prompt: "A kite over a beach",
                  resolution,
                  aspectRatio,
                  durationSeconds,
                  personGeneration,
                  ...MODE_INPUTS[mode],
                };
                const o = formOptions(d, sel);
                const form = o.mode === mode && o.resolution === resolution &&
                  o.aspectRatio === aspectRatio && o.durationSeconds === durationSeconds &&
                  o.personGeneration === personGeneration;
                const what = `${region} ${model} ${mode} ${resolution} ${aspectRatio} ` +
                  `${durationSeconds}s ${personGeneration}`;
                assert.equal(
                  form,
                  server,
                  `${what}: form offers ${form}, server accepts ${server}`,
                );
                // Whatever the form falls back to, what it sends is accepted.
                const built = accepted(model, buildRequest(d, sel).body, region);
                assert.ok(built.ok, `${what}: built ${JSON.stringify(!built.ok && built.error)}`);
                if (form) offered++;
              }
            }
          }
        }
      }
    }
    assert.ok(offered > 50, `${region}: ${offered} combinations offered`);
  }
});

Deno.test("video form: operations, keys on video uris, key errors", () => {
  assert.deepEqual(readOperation({ name: "x", metadata: { progressPercent: 40 } }), {
    done: false,
    progress: 40,
    uris: [],
    error: undefined,
    filtered: [],
  });
  const done = readOperation({
    name: "x",
    done: true,
    response: {
      generateVideoResponse: { generatedSamples: [{ video: { uri: "http://h/v1beta/files/a" } }] },
    },
  });
  assert.deepEqual(done.uris, ["http://h/v1beta/files/a"]);
  assert.equal(done.error, undefined);
  const blocked = readOperation({
    done: true,
    response: {
      generateVideoResponse: { raiMediaFilteredCount: 1, raiMediaFilteredReasons: ["no"] },
    },
  });
  assert.deepEqual([blocked.uris, blocked.filtered], [[], ["no"]]);
  assert.equal(readOperation({ done: true, error: { code: 13, message: "boom" } }).error, "boom");

  const uri = "http://127.0.0.1:8000/v1beta/files/abc:download?alt=media";
  assert.equal(withKey(uri, ""), uri);
  assert.equal(
    withKey(uri, "k y"),
    "http://127.0.0.1:8000/v1beta/files/abc:download?alt=media&key=k+y",
  );
  assert.equal(withKey("/v1beta/files/abc?alt=media", "k"), "/v1beta/files/abc?alt=media&key=k");

  assert.equal(isKeyError(403, { error: { code: 403, status: "PERMISSION_DENIED" } }), true);
  assert.equal(
    isKeyError(400, {
      error: { code: 400, status: "INVALID_ARGUMENT", details: [{ reason: "API_KEY_INVALID" }] },
    }),
    true,
  );
  assert.equal(isKeyError(400, { error: { code: 400, status: "INVALID_ARGUMENT" } }), false);
});
