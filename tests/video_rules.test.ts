// The Veo rule tables (lib/video/rule_tables.ts) as walked by lib/video/rules.ts, checked against
// an expected table written out here from Google's docs (not read back from the implementation):
// every model, field, mode and region, accepted and rejected, plus the image forms and limits,
// the extension chain and the prompt token limit. Pure functions: no server, no files.
import assert from "node:assert/strict";
import {
  base64DecodedLength,
  decodeBase64,
  decodeImage,
  sniffImageMimeType,
} from "../lib/video/images.ts";
import {
  EXTENSION,
  KNOWN_PERSON_GENERATION,
  MODE_FIELDS,
  MODEL_RULES,
} from "../lib/video/rule_tables.ts";
import {
  type ExtensionSource,
  familyOf,
  MODEL_CODES,
  parseRegion,
  type Region,
  type RuleContext,
  type RuleResult,
  validateVideoRequest,
} from "../lib/video/rules.ts";
import type { Mode, VideoRequest } from "../lib/video/types.ts";

// ---------------------------------------------------------------------------------------------
// Fixtures

/** A real 1x1 PNG. */
const PNG_B64 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/** The start of a JFIF file: SOI, APP0 "JFIF". */
const JPEG_BYTES = new Uint8Array([
  0xff,
  0xd8,
  0xff,
  0xe0,
  0x00,
  0x10,
  0x4a,
  0x46,
  0x49,
  0x46,
  0x00,
  0x01,
  0x01,
  0x00,
  0x00,
  0x01,
]);
const JPEG_B64 = JPEG_BYTES.toBase64();
const PNG = { bytesBase64Encoded: PNG_B64, mimeType: "image/png" };
const JPEG = { inlineData: { mimeType: "image/jpeg", data: JPEG_B64 } };

const V31 = "veo-3.1-generate-preview";
const V31F = "veo-3.1-fast-generate-preview";
const LITE = "veo-3.1-lite-generate-preview";
const V3 = "veo-3.0-generate-001";
const V3F = "veo-3.0-fast-generate-001";
const V2 = "veo-2.0-generate-001";
const ALL = [V31, V31F, LITE, V3, V3F, V2];
const REGIONS: Region[] = ["global", "eu", "uk", "ch", "mena"];

/** Extension inputs this fake "server" generated, by file id. */
const VIDEO_ID = "abcdefghij12";
const VIDEO_BYTES = new TextEncoder().encode("an mp4 this server wrote");
const videos = new Map<string, ExtensionSource>([
  [VIDEO_ID, source(VIDEO_ID, {})],
]);

function source(fileId: string, o: Partial<ExtensionSource>): ExtensionSource {
  return {
    fileId,
    durationSeconds: 8,
    resolution: "720p",
    aspectRatio: "16:9",
    extensionCount: 0,
    ...o,
  };
}

/** countTokens for tests: one token per whitespace-separated word. */
const words = (text: string) => text.split(/\s+/).filter(Boolean).length;

function ctx(o: Partial<RuleContext> = {}): RuleContext {
  return {
    region: "global",
    countTokens: words,
    lookupVideo: (id) => videos.get(id),
    lookupVideoBytes: (bytes) =>
      bytes.length === VIDEO_BYTES.length && bytes.every((b, i) => b === VIDEO_BYTES[i])
        ? videos.get(VIDEO_ID)
        : undefined,
    ...o,
  };
}

const uri = (id: string) => `http://127.0.0.1:8000/v1beta/files/${id}:download?alt=media`;

/** One instance of each mode, as a client would send it. */
const INSTANCES: Record<Mode, Record<string, unknown>> = {
  text: { prompt: "a cat" },
  image: { prompt: "a cat", image: PNG },
  interpolation: { prompt: "a cat", image: PNG, lastFrame: JPEG },
  reference: { prompt: "a cat", referenceImages: [{ image: PNG, referenceType: "asset" }] },
  extension: { prompt: "the cat jumps", video: { uri: uri(VIDEO_ID) } },
};

function body(instance: Record<string, unknown>, parameters?: Record<string, unknown>) {
  return parameters === undefined
    ? { instances: [instance] }
    : { instances: [instance], parameters };
}

function accept(model: string, b: unknown, c: RuleContext = ctx()) {
  const r = validateVideoRequest(model, b, c);
  if (!r.ok) {
    assert.fail(`${model} rejected ${JSON.stringify(b).slice(0, 300)}: ${r.error.message}`);
  }
  return r;
}

/**
 * Asserts a 400 INVALID_ARGUMENT on `field`, whose message names the field (its last segment)
 * and every string in `mentions` (the allowed values).
 */
function reject(
  model: string,
  b: unknown,
  field: string,
  mentions: string[] = [],
  c: RuleContext = ctx(),
): string {
  const r: RuleResult = validateVideoRequest(model, b, c);
  if (r.ok) assert.fail(`${model} accepted ${JSON.stringify(b).slice(0, 300)}`);
  const { error } = r;
  assert.equal(error.status, 400, error.message);
  assert.equal(error.googleStatus, "INVALID_ARGUMENT", error.message);
  assert.equal(error.field, field, error.message);
  const name = field.split(".").at(-1)!.replace(/\[\d+\]$/, "");
  assert.ok(error.message.includes(name), `message does not name ${name}: ${error.message}`);
  for (const m of mentions) {
    assert.ok(error.message.includes(m), `message does not mention ${m}: ${error.message}`);
  }
  return error.message;
}

const NOT_SUPPORTED = "isn't supported by this model.";

// ---------------------------------------------------------------------------------------------
// The expected table, from the docs ("Veo API parameters and specifications", "Model features",
// "Limitations", "Extending Veo videos").

type Expected = {
  family: string;
  modes: Mode[];
  durations: number[];
  /** resolution -> aspect ratios; absent resolution: rejected. null: the parameter is refused. */
  resolutions: Record<string, string[]> | null;
  person: { global: Partial<Record<Mode, string[]>>; restricted: Partial<Record<Mode, string[]>> };
  maxSamples: number;
  seed: boolean;
  enhancePrompt: boolean;
};

const V31_PERSON = {
  global: {
    text: ["allow_all"],
    extension: ["allow_all"],
    image: ["allow_adult"],
    interpolation: ["allow_adult"],
    reference: ["allow_adult"],
  },
  restricted: {
    text: ["allow_adult"],
    extension: ["allow_adult"],
    image: ["allow_adult"],
    interpolation: ["allow_adult"],
    reference: ["allow_adult"],
  },
};
const BOTH = ["16:9", "9:16"];
const EXPECTED_31: Expected = {
  family: "3.1",
  modes: ["text", "image", "interpolation", "reference", "extension"],
  durations: [4, 6, 8],
  resolutions: { "720p": BOTH, "1080p": BOTH, "4k": BOTH },
  person: V31_PERSON,
  maxSamples: 1,
  seed: true,
  enhancePrompt: false,
};
const EXPECTED_3: Expected = {
  family: "3",
  modes: ["text", "image"],
  durations: [4, 6, 8],
  resolutions: { "720p": BOTH, "1080p": ["16:9"] },
  person: {
    global: { text: ["allow_all"], image: ["allow_adult"] },
    restricted: { text: ["allow_adult"], image: ["allow_adult"] },
  },
  maxSamples: 1,
  seed: true,
  enhancePrompt: false,
};
const EXPECTED: Record<string, Expected> = {
  [V31]: EXPECTED_31,
  [V31F]: EXPECTED_31,
  [LITE]: {
    ...EXPECTED_31,
    modes: ["text", "image", "interpolation"],
    resolutions: { "720p": BOTH, "1080p": BOTH },
  },
  [V3]: EXPECTED_3,
  [V3F]: EXPECTED_3,
  [V2]: {
    family: "2",
    modes: ["text", "image"],
    durations: [5, 6, 8],
    resolutions: null,
    person: {
      global: {
        text: ["allow_adult", "allow_all", "dont_allow"],
        image: ["allow_adult", "dont_allow"],
      },
      restricted: { text: ["dont_allow", "allow_adult"], image: ["dont_allow", "allow_adult"] },
    },
    maxSamples: 2,
    seed: false,
    enhancePrompt: true,
  },
};

/** The 8 s-only conditions, for choosing a duration every mode accepts. */
const needsEight = (mode: Mode) => mode === "reference" || mode === "extension";

// ---------------------------------------------------------------------------------------------
// Models, families, regions

Deno.test("model codes and families; an unknown code is a 404 NOT_FOUND", () => {
  assert.deepEqual([...MODEL_CODES].sort(), [...ALL].sort());
  for (const m of ALL) assert.equal(familyOf(m), EXPECTED[m].family);
  assert.equal(familyOf("veo-4.0-generate-001"), undefined);
  assert.equal(familyOf("toString"), undefined);
  for (const m of ["veo-4.0-generate-001", "gemini-2.5-flash", "constructor", ""]) {
    const r = validateVideoRequest(m, body({ prompt: "a cat" }), ctx());
    assert.ok(!r.ok);
    assert.deepEqual(r.error, {
      status: 404,
      googleStatus: "NOT_FOUND",
      message: `models/${m} is not found for API version v1beta, or is not supported for ` +
        `predictLongRunning.`,
      field: "model",
    });
  }
});

Deno.test("parseRegion: the five regions, case-insensitively; anything else is undefined", () => {
  for (const r of REGIONS) {
    assert.equal(parseRegion(r), r);
    assert.equal(parseRegion(r.toUpperCase()), r);
  }
  assert.equal(parseRegion(" Mena "), "mena");
  for (const bad of ["us", "", "europe", "global,eu"]) assert.equal(parseRegion(bad), undefined);
});

Deno.test("the table is complete: personGeneration for every mode of every model, known values", () => {
  for (const [code, rules] of Object.entries(MODEL_RULES)) {
    for (const policy of [rules.personGeneration.global, rules.personGeneration.restricted]) {
      for (const mode of rules.modes) assert.ok(policy[mode], `${code}: ${mode}`);
      for (const values of Object.values(policy)) {
        assert.ok(values.length > 0, code);
        for (const v of values) assert.ok(KNOWN_PERSON_GENERATION.includes(v), `${code}: ${v}`);
      }
    }
    assert.ok(rules.durations.includes(8), code);
    assert.ok(rules.resolutions["720p"], code);
    assert.equal(rules.modes.includes("reference"), rules.referenceImages.max > 0, code);
  }
  assert.equal(EXTENSION.maxInputSeconds + EXTENSION.addedSeconds, EXTENSION.maxOutputSeconds);
});

// ---------------------------------------------------------------------------------------------
// Defaults

Deno.test("defaults: 8 s, 720p, 16:9, one sample, the first allowed personGeneration", () => {
  for (const m of ALL) {
    const r = accept(m, body({ prompt: "a cat" }));
    const expected: VideoRequest = {
      model: m,
      family: EXPECTED[m].family as VideoRequest["family"],
      mode: "text",
      prompt: "a cat",
      aspectRatio: "16:9",
      resolution: "720p",
      durationSeconds: 8,
      sampleCount: 1,
      personGeneration: EXPECTED[m].person.global.text![0],
      referenceImages: [],
    };
    assert.deepEqual(r.request, expected, m);
    assert.equal(r.outputSeconds, 8);
    // An empty parameters object and null members mean the same.
    const r2 = accept(m, {
      instances: [{ prompt: "a cat", image: null }],
      parameters: { seed: null },
    });
    assert.deepEqual(r2.request, expected, m);
  }
});

// ---------------------------------------------------------------------------------------------
// durationSeconds

Deno.test("durationSeconds: each family's values, as number or numeric string", () => {
  for (const m of ALL) {
    const allowed = EXPECTED[m].durations;
    for (const d of [1, 3, 4, 5, 6, 7, 8, 9, 10]) {
      for (const v of [d, String(d)]) {
        const b = body({ prompt: "a cat" }, { durationSeconds: v });
        if (allowed.includes(d)) {
          const r = accept(m, b);
          assert.equal(r.request.durationSeconds, d);
          assert.equal(r.outputSeconds, d);
        } else {
          const msg = reject(m, b, "durationSeconds", [allowed.join(", "), m, `got ${d}`]);
          assert.ok(msg.startsWith("durationSeconds must be one of"), msg);
        }
      }
    }
    for (const bad of ["abc", "", 6.5, "6.5", true, [8], { s: 8 }]) {
      reject(m, body({ prompt: "a cat" }, { durationSeconds: bad }), "durationSeconds", [
        allowed.join(", "),
      ]);
    }
  }
  // The example message, word for word.
  assert.equal(
    reject(V31, body({ prompt: "a cat" }, { durationSeconds: 5 }), "durationSeconds"),
    "durationSeconds must be one of 4, 6, 8 for veo-3.1-generate-preview (got 5)",
  );
});

Deno.test("durationSeconds must be 8 at 1080p and 4k, with reference images and for extension", () => {
  for (const m of ALL) {
    const res = EXPECTED[m].resolutions;
    if (!res) continue;
    for (const r of ["1080p", "4k"].filter((r) => res[r])) {
      accept(m, body({ prompt: "a cat" }, { resolution: r, durationSeconds: 8 }));
      for (const d of [4, 6]) {
        reject(
          m,
          body({ prompt: "a cat" }, { resolution: r, durationSeconds: d }),
          "durationSeconds",
          [
            "must be 8",
            r,
          ],
        );
      }
    }
  }
  for (const m of [V31, V31F]) {
    for (const mode of ["reference", "extension"] as const) {
      accept(m, body(INSTANCES[mode], { durationSeconds: "8" }));
      for (const d of [4, 6]) {
        reject(m, body(INSTANCES[mode], { durationSeconds: d }), "durationSeconds", ["must be 8"]);
      }
    }
    // Interpolation and image-to-video take the shorter lengths (current docs).
    accept(m, body(INSTANCES.interpolation, { durationSeconds: 4 }));
    accept(m, body(INSTANCES.image, { durationSeconds: 6 }));
  }
});

// ---------------------------------------------------------------------------------------------
// resolution x aspectRatio

Deno.test("resolution and aspectRatio: the matrix of every model", () => {
  for (const m of ALL) {
    const res = EXPECTED[m].resolutions;
    for (const r of ["720p", "1080p", "4k"]) {
      for (const ar of BOTH) {
        const b = body({ prompt: "a cat" }, { resolution: r, aspectRatio: ar, durationSeconds: 8 });
        if (res === null) {
          const msg = reject(m, b, "resolution", [NOT_SUPPORTED, V31]);
          assert.ok(msg.startsWith("`resolution` isn't supported by this model."), msg);
        } else if (!res[r]) {
          reject(m, b, "resolution", [Object.keys(res).join(", "), m, `got ${r}`]);
        } else if (!res[r].includes(ar)) {
          reject(m, b, "aspectRatio", [res[r].join(", "), r, `got ${ar}`]);
        } else {
          const ok = accept(m, b);
          assert.equal(ok.request.resolution, r);
          assert.equal(ok.request.aspectRatio, ar);
        }
      }
    }
    // Veo 2 renders 720p in both aspect ratios without the parameter.
    for (const ar of BOTH) {
      assert.equal(
        accept(m, body({ prompt: "a cat" }, { aspectRatio: ar })).request.aspectRatio,
        ar,
      );
    }
    for (const bad of ["4:3", "1:1", "16/9", "", 169, ["16:9"]]) {
      reject(m, body({ prompt: "a cat" }, { aspectRatio: bad }), "aspectRatio", ["16:9, 9:16", m]);
    }
  }
  assert.equal(
    accept(V31, body({ prompt: "a cat" }, { resolution: "4K" })).request.resolution,
    "4k",
    "resolution is compared case-insensitively",
  );
  for (const bad of ["480p", "2k", "", 1080, "720"]) {
    reject(V31, body({ prompt: "a cat" }, { resolution: bad }), "resolution", ["720p, 1080p, 4k"]);
  }
});

// ---------------------------------------------------------------------------------------------
// Modes

Deno.test("modes: each model accepts its own; the rest name the field that selected them", () => {
  for (const m of ALL) {
    for (const mode of Object.keys(INSTANCES) as Mode[]) {
      const b = body(INSTANCES[mode], needsEight(mode) ? { durationSeconds: 8 } : {});
      if (EXPECTED[m].modes.includes(mode)) {
        const r = accept(m, b);
        assert.equal(r.request.mode, mode, `${m} ${mode}`);
      } else {
        const field = MODE_FIELDS[mode];
        const msg = reject(m, b, field, [NOT_SUPPORTED, "Models that support it", V31]);
        assert.ok(msg.startsWith(`\`${field}\` isn't supported by this model.`), msg);
      }
    }
  }
  const i = accept(V31, body(INSTANCES.interpolation)).request;
  assert.equal(i.image?.mimeType, "image/png");
  assert.equal(i.lastFrame?.mimeType, "image/jpeg");
  assert.deepEqual(i.lastFrame?.bytes, JPEG_BYTES);
});

Deno.test("modes: lastFrame needs image; video and referenceImages stand alone", () => {
  reject(V31, body({ prompt: "a cat", lastFrame: PNG }), "lastFrame", ["image"]);
  const clashes: [Record<string, unknown>, string, string][] = [
    [
      { referenceImages: [{ image: PNG, referenceType: "asset" }], image: PNG },
      "image",
      "referenceImages",
    ],
    [
      { referenceImages: [{ image: PNG, referenceType: "asset" }], image: PNG, lastFrame: PNG },
      "image",
      "referenceImages",
    ],
    [{ video: { uri: uri(VIDEO_ID) }, image: PNG }, "image", "video"],
    [{ video: { uri: uri(VIDEO_ID) }, lastFrame: PNG }, "lastFrame", "video"],
    [{ video: { uri: uri(VIDEO_ID) }, referenceImages: [] }, "referenceImages", "video"],
  ];
  for (const [instance, field, other] of clashes) {
    reject(V31, body({ prompt: "a cat", ...instance }, { durationSeconds: 8 }), field, [other]);
  }
});

Deno.test("prompt: required for text and reference modes, optional with image, frames or video", () => {
  for (const m of ALL) {
    for (const p of [undefined, "", "   "]) {
      reject(m, body(p === undefined ? {} : { prompt: p }), "prompt", [
        "required",
        "text-to-video",
      ]);
    }
    assert.equal(accept(m, body({ image: PNG })).request.prompt, "");
  }
  reject(V31, body({ referenceImages: [{ image: PNG, referenceType: "asset" }] }), "prompt", [
    "required",
  ]);
  accept(V31, body({ image: PNG, lastFrame: PNG }));
  assert.equal(accept(V31, body({ video: { uri: uri(VIDEO_ID) } })).request.prompt, "");
  for (const bad of [42, ["a"], { text: "a" }, true]) {
    reject(V31, body({ prompt: bad }), "prompt", ["string"]);
  }
});

Deno.test("prompt: at most 1,024 tokens by the given tokenizer", () => {
  const seen: string[] = [];
  const counting = ctx({ countTokens: (t) => (seen.push(t), words(t)) });
  const prompt = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(" ");
  for (const m of ALL) {
    assert.equal(accept(m, body({ prompt: prompt(1024) }), counting).request.prompt, prompt(1024));
    reject(m, body({ prompt: prompt(1025) }), "prompt", ["1025", "1024"], counting);
    // Counted in tokens, not characters: one long word is one token here.
    accept(m, body({ prompt: "x".repeat(5000) }), counting);
  }
  assert.ok(seen.includes(prompt(1025)), "countTokens saw the prompt");
});

// ---------------------------------------------------------------------------------------------
// personGeneration by model x mode x region

Deno.test("personGeneration: every model, mode and region; the default is the first allowed", () => {
  for (const m of ALL) {
    for (const mode of EXPECTED[m].modes) {
      for (const region of REGIONS) {
        const c = ctx({ region });
        const table = region === "global"
          ? EXPECTED[m].person.global
          : EXPECTED[m].person.restricted;
        const allowed = table[mode]!;
        const base = needsEight(mode) ? { durationSeconds: 8 } : {};
        const dflt = accept(m, body(INSTANCES[mode], base), c);
        assert.equal(dflt.request.personGeneration, allowed[0], `${m} ${mode} ${region} default`);
        for (const value of KNOWN_PERSON_GENERATION) {
          const b = body(INSTANCES[mode], { ...base, personGeneration: value });
          const what = `${m} ${mode} ${region} ${value}`;
          if (allowed.includes(value)) {
            assert.equal(accept(m, b, c).request.personGeneration, value, what);
          } else {
            const msg = reject(m, b, "personGeneration", [...allowed, m], c);
            if (region !== "global") assert.ok(msg.includes(region.toUpperCase()), msg);
          }
        }
      }
    }
  }
  // The SDK's enum spelling.
  assert.equal(
    accept(V31, body({ prompt: "a cat" }, { personGeneration: "ALLOW_ALL" })).request
      .personGeneration,
    "allow_all",
  );
  for (const bad of ["allow_children", "", 1, false]) {
    reject(V31, body({ prompt: "a cat" }, { personGeneration: bad }), "personGeneration", [
      "allow_all",
    ]);
  }
});

// ---------------------------------------------------------------------------------------------
// sampleCount / numberOfVideos, seed, negativePrompt, enhancePrompt

Deno.test("sampleCount and its alias numberOfVideos: 1, or 1 to 2 on Veo 2", () => {
  for (const m of ALL) {
    const max = EXPECTED[m].maxSamples;
    const allowed = Array.from({ length: max }, (_, i) => String(i + 1)).join(", ");
    for (const name of ["sampleCount", "numberOfVideos"]) {
      for (const n of [0, 1, 2, 3, -1]) {
        for (const v of [n, String(n)]) {
          const b = body({ prompt: "a cat" }, { [name]: v });
          if (n >= 1 && n <= max) assert.equal(accept(m, b).request.sampleCount, n);
          else reject(m, b, name, [allowed, m]);
        }
      }
      for (const bad of [1.5, "one", true, [1]]) {
        reject(m, body({ prompt: "a cat" }, { [name]: bad }), name, [allowed]);
      }
    }
    assert.equal(
      accept(m, body({ prompt: "a cat" }, { sampleCount: 1, numberOfVideos: "1" })).request
        .sampleCount,
      1,
    );
    reject(m, body({ prompt: "a cat" }, { sampleCount: 1, numberOfVideos: 2 }), "numberOfVideos", [
      "sampleCount",
      "differ",
    ]);
  }
  assert.equal(
    accept(V2, body({ prompt: "a cat" }, { sampleCount: 2, numberOfVideos: 2 })).request
      .sampleCount,
    2,
  );
});

Deno.test("seed: a uint32 on Veo 3 and 3.1; not supported on Veo 2", () => {
  for (const m of ALL) {
    if (!EXPECTED[m].seed) {
      const msg = reject(m, body({ prompt: "a cat" }, { seed: 1 }), "seed", [NOT_SUPPORTED, V31]);
      assert.ok(msg.startsWith("`seed` isn't supported by this model."), msg);
      continue;
    }
    for (const v of [0, 42, "42", 4294967295]) {
      assert.equal(accept(m, body({ prompt: "a cat" }, { seed: v })).request.seed, Number(v));
    }
    for (const bad of [-1, 4294967296, 1.5, "x", true]) {
      reject(m, body({ prompt: "a cat" }, { seed: bad }), "seed", ["0 to 4294967295"]);
    }
  }
});

Deno.test("negativePrompt is a string; enhancePrompt a boolean on Veo 2 only", () => {
  for (const m of ALL) {
    const r = accept(m, body({ prompt: "a cat" }, { negativePrompt: "dogs" }));
    assert.equal(r.request.negativePrompt, "dogs");
    reject(m, body({ prompt: "a cat" }, { negativePrompt: 3 }), "negativePrompt", ["string"]);
    if (EXPECTED[m].enhancePrompt) {
      for (const v of [true, false]) {
        assert.equal(
          accept(m, body({ prompt: "a cat" }, { enhancePrompt: v })).request.enhancePrompt,
          v,
        );
      }
      reject(m, body({ prompt: "a cat" }, { enhancePrompt: "yes" }), "enhancePrompt", [
        "true or false",
      ]);
    } else {
      reject(m, body({ prompt: "a cat" }, { enhancePrompt: true }), "enhancePrompt", [
        NOT_SUPPORTED,
        V2,
      ]);
    }
  }
});

// ---------------------------------------------------------------------------------------------
// Shape: unknown names, instances

Deno.test("unknown parameter, instance and body fields are 400s that name them", () => {
  const cases: [unknown, string, string[]][] = [
    [body({ prompt: "a cat" }, { fps: 24 }), "parameters.fps", [
      '"fps"',
      "parameters",
      "durationSeconds",
    ]],
    [
      body({ prompt: "a cat" }, { generateAudio: true, storageUri: "gs://x" }),
      "parameters.generateAudio",
      ['"generateAudio"', '"storageUri"', "sampleCount"],
    ],
    [body({ prompt: "a cat", mask: {} }), "instances[0].mask", [
      '"mask"',
      "instances[0]",
      "lastFrame",
    ]],
    [{ ...body({ prompt: "a cat" }), webhookConfig: {} }, "webhookConfig", [
      '"webhookConfig"',
      "instances, parameters",
    ]],
    [
      body({
        prompt: "a cat",
        referenceImages: [{ image: PNG, referenceType: "asset", weight: 1 }],
      }, {
        durationSeconds: 8,
      }),
      "referenceImages[0].weight",
      ['"weight"', "image, referenceType"],
    ],
    [body({ video: { uri: uri(VIDEO_ID), gcsUri: "gs://x" } }), "video.gcsUri", ['"gcsUri"']],
  ];
  for (const [b, field, mentions] of cases) {
    const msg = reject(V31, b, field, mentions);
    assert.ok(msg.startsWith("Invalid JSON payload received. Unknown name"), msg);
  }
});

Deno.test("instances must hold exactly one instance; body and parameters must be objects", () => {
  reject(V31, { instances: [] }, "instances", ["exactly one", "got 0"]);
  reject(V31, { instances: [{ prompt: "a" }, { prompt: "b" }] }, "instances", [
    "exactly one",
    "got 2",
  ]);
  reject(V31, { parameters: {} }, "instances", ["exactly one"]);
  reject(V31, { instances: { prompt: "a" } }, "instances", ["exactly one"]);
  reject(V31, { instances: ["a cat"] }, "instances[0]", ["prompt"]);
  reject(V31, { instances: [{ prompt: "a" }], parameters: [] }, "parameters", ["object"]);
  reject(V31, { instances: [{ prompt: "a" }], parameters: "x" }, "parameters", ["object"]);
  for (const b of [null, [], "x", 3]) {
    const r = validateVideoRequest(V31, b, ctx());
    assert.ok(!r.ok);
    assert.equal(r.error.status, 400);
    assert.equal(r.error.googleStatus, "INVALID_ARGUMENT");
    assert.ok(r.error.message.includes("instances"), r.error.message);
  }
});

// ---------------------------------------------------------------------------------------------
// Reference images

Deno.test("referenceImages: 1 to 3 asset images on 3.1 and 3.1 Fast", () => {
  const ref = (referenceType: unknown, image: unknown = PNG) => ({ image, referenceType });
  for (const m of [V31, V31F]) {
    for (const n of [1, 2, 3]) {
      const r = accept(m, body({ prompt: "a cat", referenceImages: Array(n).fill(ref("asset")) }));
      assert.equal(r.request.referenceImages.length, n);
      assert.equal(r.request.referenceImages[0].referenceType, "asset");
      assert.equal(r.request.personGeneration, "allow_adult");
    }
    for (const n of [0, 4]) {
      reject(
        m,
        body({ prompt: "a cat", referenceImages: Array(n).fill(ref("asset")) }),
        "referenceImages",
        [
          "1 to 3",
          `got ${n}`,
        ],
      );
    }
    reject(m, body({ prompt: "a cat", referenceImages: ref("asset") }), "referenceImages", [
      "array",
    ]);
    // Case-insensitive: the SDK sends its enum, ASSET.
    assert.equal(
      accept(m, body({ prompt: "a cat", referenceImages: [ref("ASSET")] })).request
        .referenceImages[0]
        .referenceType,
      "asset",
    );
    const style = reject(
      m,
      body({ prompt: "a cat", referenceImages: [ref("asset"), ref("STYLE")] }),
      "referenceImages[1].referenceType",
      ["style", NOT_SUPPORTED, "asset"],
    );
    assert.ok(style.startsWith("`referenceType` style isn't supported by this model."), style);
    for (const bad of ["product", "", undefined, 1]) {
      reject(
        m,
        body({ prompt: "a cat", referenceImages: [ref(bad)] }),
        "referenceImages[0].referenceType",
        [
          "asset",
        ],
      );
    }
    reject(
      m,
      body({ prompt: "a cat", referenceImages: [{ referenceType: "asset" }] }),
      "referenceImages[0].image",
      [
        "required",
      ],
    );
    reject(m, body({ prompt: "a cat", referenceImages: ["x"] }), "referenceImages[0]", [
      "image, referenceType",
    ]);
    reject(
      m,
      body({
        prompt: "a cat",
        referenceImages: [ref("asset", { bytesBase64Encoded: "@@", mimeType: "image/png" })],
      }),
      "referenceImages[0].image.bytesBase64Encoded",
      ["base64"],
    );
  }
});

// ---------------------------------------------------------------------------------------------
// Images

Deno.test("images: both wire forms decode to the same bytes; PNG and JPEG", () => {
  const png = new Uint8Array(Uint8Array.fromBase64(PNG_B64));
  for (const wire of [PNG, { inlineData: { mimeType: "image/png", data: PNG_B64 } }]) {
    const r = accept(V31, body({ prompt: "a cat", image: wire })).request.image!;
    assert.deepEqual(r, { mimeType: "image/png", bytes: png });
  }
  for (const wire of [JPEG, { bytesBase64Encoded: JPEG_B64, mimeType: "IMAGE/JPEG" }]) {
    assert.deepEqual(accept(V31, body({ image: wire })).request.image, {
      mimeType: "image/jpeg",
      bytes: JPEG_BYTES,
    });
  }
  // No mimeType: read from the bytes.
  assert.equal(
    accept(V2, body({ image: { bytesBase64Encoded: JPEG_B64 } })).request.image?.mimeType,
    "image/jpeg",
  );
  // URL-safe base64 and missing padding, as Google's JSON mapping allows.
  const urlSafe = JPEG_BYTES.toBase64({ alphabet: "base64url", omitPadding: true });
  assert.ok(urlSafe.includes("_"), urlSafe);
  assert.deepEqual(
    accept(V3, body({ image: { bytesBase64Encoded: urlSafe } })).request.image?.bytes,
    JPEG_BYTES,
  );
});

Deno.test("images: bad mime types, bad base64, bad bytes and bad shapes are 400s", () => {
  const cases: [unknown, string, string[]][] = [
    [{ bytesBase64Encoded: PNG_B64, mimeType: "image/webp" }, "image.mimeType", [
      "image/png, image/jpeg",
      "image/webp",
    ]],
    [{ inlineData: { mimeType: "image/gif", data: PNG_B64 } }, "image.inlineData.mimeType", [
      "image/png, image/jpeg",
    ]],
    [{ bytesBase64Encoded: PNG_B64, mimeType: "image/jpeg" }, "image.mimeType", [
      "image/jpeg",
      "image/png",
    ]],
    [{ bytesBase64Encoded: "aGVsbG8gd29ybGQ=", mimeType: "image/png" }, "image", ["PNG", "JPEG"]],
    [{ bytesBase64Encoded: "aGVsbG8gd29ybGQ=" }, "image", ["image/png, image/jpeg"]],
    [{ bytesBase64Encoded: "not base64!", mimeType: "image/png" }, "image.bytesBase64Encoded", [
      "base64",
    ]],
    [{ bytesBase64Encoded: "aGVsbG8=x", mimeType: "image/png" }, "image.bytesBase64Encoded", [
      "base64",
    ]],
    [{ bytesBase64Encoded: "aGVsb G8=", mimeType: "image/png" }, "image.bytesBase64Encoded", [
      "base64",
    ]],
    [{ bytesBase64Encoded: "", mimeType: "image/png" }, "image.bytesBase64Encoded", ["empty"]],
    [{ bytesBase64Encoded: 12, mimeType: "image/png" }, "image.bytesBase64Encoded", ["base64"]],
    [{ mimeType: "image/png" }, "image", ["bytesBase64Encoded", "inlineData"]],
    [{ ...PNG, inlineData: { mimeType: "image/png", data: PNG_B64 } }, "image", [
      "bytesBase64Encoded",
      "inlineData",
    ]],
    [
      { inlineData: { mimeType: "image/png", data: PNG_B64 }, mimeType: "image/png" },
      "image.mimeType",
      ["inlineData.mimeType"],
    ],
    [{ inlineData: { mimeType: "image/png", data: PNG_B64, uri: "x" } }, "image.inlineData.uri", [
      '"uri"',
      "mimeType, data",
    ]],
    [{ inlineData: "x" }, "image.inlineData", ["mimeType, data"]],
    [{ gcsUri: "gs://bucket/a.png", mimeType: "image/png" }, "image.gcsUri", [
      '"gcsUri"',
      "bytesBase64Encoded",
    ]],
    ["iVBORw0KGgo=", "image", ["bytesBase64Encoded", "inlineData"]],
  ];
  for (const [wire, field, mentions] of cases) {
    reject(V31, body({ prompt: "a cat", image: wire }), field, mentions);
  }
  // lastFrame goes through the same checks, under its own name.
  reject(
    V31,
    body({ image: PNG, lastFrame: { bytesBase64Encoded: "!!", mimeType: "image/png" } }),
    "lastFrame.bytesBase64Encoded",
    [
      "base64",
    ],
  );
});

Deno.test("images: 20 MB decoded is the limit, checked before decoding", () => {
  const limit = 20 * 1024 * 1024;
  const big = new Uint8Array(limit);
  big.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const atLimit = big.toBase64();
  assert.equal(base64DecodedLength(atLimit), limit);
  const r = accept(V31, body({ image: { bytesBase64Encoded: atLimit, mimeType: "image/png" } }));
  assert.equal(r.request.image?.bytes.length, limit);
  const over = new Uint8Array(limit + 1);
  over.set(big.subarray(0, 8));
  const overB64 = over.toBase64();
  for (
    const wire of [
      { bytesBase64Encoded: overB64, mimeType: "image/png" },
      { inlineData: { mimeType: "image/png", data: overB64 } },
    ]
  ) {
    reject(V31, body({ image: wire }), "image", ["20 MB", String(limit), String(limit + 1)]);
  }
  // Oversized garbage is refused on its length, not decoded.
  reject(V31, body({ image: { bytesBase64Encoded: "!".repeat(28_000_000) } }), "image", [
    "21000000 bytes",
    "20 MB",
  ]);
});

Deno.test("decodeBase64, base64DecodedLength and sniffImageMimeType", () => {
  const bytes = new Uint8Array([0, 1, 2, 250, 251, 252, 253, 254, 255]);
  for (const n of [0, 1, 2, 3, 4, 8, 9]) {
    const part = bytes.subarray(0, n);
    const std = part.toBase64();
    assert.deepEqual(decodeBase64(std), part, std);
    assert.deepEqual(decodeBase64(std.replace(/=+$/, "")), part, `${std} unpadded`);
    assert.deepEqual(decodeBase64(part.toBase64({ alphabet: "base64url" })), part);
    assert.equal(base64DecodedLength(std), n);
  }
  for (const bad of ["a", "abcde", "ab=c", "ab===", "a+_b", "ab c", "abc==", "ab\n"]) {
    assert.equal(decodeBase64(bad), undefined, JSON.stringify(bad));
  }
  assert.equal(sniffImageMimeType(Uint8Array.fromBase64(PNG_B64)), "image/png");
  assert.equal(sniffImageMimeType(JPEG_BYTES), "image/jpeg");
  assert.equal(sniffImageMimeType(new Uint8Array([0x89, 0x50])), undefined);
  assert.equal(sniffImageMimeType(new TextEncoder().encode("GIF89a")), undefined);
  const direct = decodeImage({ bytesBase64Encoded: PNG_B64 }, "x");
  assert.ok(direct.ok && direct.value.mimeType === "image/png");
});

// ---------------------------------------------------------------------------------------------
// Extension

Deno.test("extension: a uri of a generated video (also mangled by the SDK); output = input + 7 s", () => {
  const uris = [
    uri(VIDEO_ID),
    `https://example.test/v1beta/files/${VIDEO_ID}:download?alt=media&key=k`,
    // The SDK's rewrite of an http:// uri under its own base URL.
    `/v1beta/files/http://127.0.0.1:8000/v1beta/files/${VIDEO_ID}:download?alt=media`,
    `files/zzzzzzzzzzzz/files/${VIDEO_ID}`,
  ];
  for (const m of [V31, V31F]) {
    for (const u of uris) {
      const r = accept(m, body({ prompt: "go on", video: { uri: u } }));
      assert.equal(r.request.mode, "extension");
      assert.equal(r.request.videoFileId, VIDEO_ID);
      assert.equal(r.request.durationSeconds, 8);
      assert.equal(r.request.resolution, "720p");
      assert.equal(r.request.personGeneration, "allow_all");
      assert.equal(r.outputSeconds, 15);
    }
    // What the SDK sends for a Video from a previous response: uri plus its mime type.
    accept(m, body({ video: { uri: uri(VIDEO_ID), encoding: "video/mp4" } }));
    accept(m, body({ video: { uri: uri(VIDEO_ID), mimeType: "video/mp4" } }));
  }
  assert.equal(
    accept(V31, body({ video: { uri: uri(VIDEO_ID) } }), ctx({ region: "eu" })).request
      .personGeneration,
    "allow_adult",
  );
});

Deno.test("extension: bytes of a generated video in each wire form", () => {
  const b64 = VIDEO_BYTES.toBase64();
  const forms = [
    { encodedVideo: b64, encoding: "video/mp4" },
    { encodedVideo: b64 },
    { bytesBase64Encoded: b64, mimeType: "video/mp4" },
    { inlineData: { mimeType: "video/mp4", data: b64 } },
  ];
  for (const video of forms) {
    const r = accept(V31, body({ prompt: "go on", video }));
    assert.equal(r.request.videoFileId, VIDEO_ID);
    assert.equal(r.outputSeconds, 15);
  }
  const other = new TextEncoder().encode("some other mp4").toBase64();
  reject(V31, body({ video: { encodedVideo: other, encoding: "video/mp4" } }), "video", [
    "not a video this server generated",
  ]);
  reject(V31, body({ video: { encodedVideo: "@@@" } }), "video.encodedVideo", ["base64"]);
  reject(V31, body({ video: { encodedVideo: b64, encoding: "video/webm" } }), "video.encoding", [
    "video/mp4",
  ]);
  reject(
    V31,
    body({ video: { inlineData: { mimeType: "video/quicktime", data: b64 } } }),
    "video.inlineData.mimeType",
    [
      "video/mp4",
    ],
  );
  reject(V31, body({ video: { uri: uri(VIDEO_ID), encodedVideo: b64 } }), "video", [
    "uri",
    "bytes",
  ]);
  reject(V31, body({ video: {} }), "video", ["uri", "encodedVideo", "inlineData"]);
  reject(V31, body({ video: "x" }), "video", ["uri"]);
});

Deno.test("extension: unknown or foreign uris are refused", () => {
  const cases: [unknown, string, string[]][] = [
    [uri("zzzzzzzzzzzz"), "video.uri", ["zzzzzzzzzzzz", "not a video this server generated"]],
    ["https://generativelanguage.googleapis.com/v1beta/files/abc:download", "video.uri", [
      "files/{id}",
    ]],
    [uri("abcdefghij123"), "video.uri", ["files/{id}"]],
    [uri("ABCDEFGHIJ12"), "video.uri", ["files/{id}"]],
    ["gs://bucket/video.mp4", "video.uri", ["files/{id}"]],
    [42, "video.uri", ["string"]],
  ];
  for (const [u, field, mentions] of cases) {
    reject(V31, body({ video: { uri: u } }), field, mentions);
  }
});

Deno.test("extension: 720p, 141 s input, 20 extensions, 148 s output, the request's own settings", () => {
  const at = (o: Partial<ExtensionSource>) => {
    const s = source("chain0000001", o);
    return ctx({ lookupVideo: (id) => (id === s.fileId ? s : undefined) });
  };
  const ext = (parameters?: Record<string, unknown>) =>
    body({ prompt: "go on", video: { uri: uri("chain0000001") } }, parameters);

  // 141 s is the longest input, giving the longest output, 148 s.
  assert.equal(accept(V31, ext(), at({ durationSeconds: 141 })).outputSeconds, 148);
  assert.equal(
    accept(V31, ext(), at({ durationSeconds: 134, extensionCount: 18 })).outputSeconds,
    141,
  );
  reject(V31, ext(), "video", ["141 seconds", "141.5"], at({ durationSeconds: 141.5 }));
  reject(V31, ext(), "video", ["141 seconds", "148"], at({ durationSeconds: 148 }));
  // The 20th extension is allowed, a 21st is not.
  accept(V31, ext(), at({ extensionCount: 19 }));
  reject(V31, ext(), "video", ["20 times"], at({ extensionCount: 20 }));
  // Inputs must be 720p.
  for (const resolution of ["1080p", "4k"] as const) {
    reject(V31, ext(), "video", ["720p", resolution], at({ resolution }));
  }
  // The request itself: 720p, 8 s, the input's aspect ratio (its default).
  const plain = at({});
  accept(V31, ext({ resolution: "720p", durationSeconds: "8" }), plain);
  reject(V31, ext({ resolution: "1080p" }), "resolution", ["720p", "video extension"], plain);
  reject(V31, ext({ resolution: "4k", durationSeconds: 8 }), "resolution", ["720p"], plain);
  reject(
    V31,
    ext({ durationSeconds: 6 }),
    "durationSeconds",
    ["must be 8", "video extension"],
    plain,
  );
  const portrait = at({ aspectRatio: "9:16" });
  assert.equal(accept(V31, ext(), portrait).request.aspectRatio, "9:16");
  assert.equal(accept(V31, ext({ aspectRatio: "9:16" }), portrait).request.aspectRatio, "9:16");
  reject(V31, ext({ aspectRatio: "16:9" }), "aspectRatio", ["9:16", "input video"], portrait);
  // Only 3.1 and 3.1 Fast extend.
  for (const m of [LITE, V3, V3F, V2]) {
    reject(m, ext(), "video", [NOT_SUPPORTED, V31, V31F], plain);
  }
});
