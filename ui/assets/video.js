/**
 * The video page (`/video`): a form driven by the server's rules document (`./video-rules.json`;
 * the option logic is in video_form.js), `predictLongRunning`, polling the operation with a
 * progress bar, the result in `<video controls>`, and this browser's recent operations. The video
 * API has its own key (`x-goog-api-key`), entered in the page's "API key" textbox when the server
 * asks for one and kept in localStorage; API errors are shown exactly as the API words them.
 *
 * @example
 * ```html
 * <script type="module" src="./assets/video.js"></script>
 * ```
 * @module
 */
import { errorFromBody } from "./api.js";
import { $, clear, h } from "./dom.js";
import { initShell } from "./shell.js";
import {
  buildRequest,
  formOptions,
  isKeyError,
  modelLabel,
  readOperation,
  resolveModel,
  wireImage,
  withKey,
} from "./video_form.js";

/** @typedef {import("./video_form.js").Selections} Selections */
/** @typedef {import("./video_form.js").RulesDocument} RulesDocument */
/**
 * @typedef {{
 *   name: string, model: string, prompt: string, at: number, durationSeconds: number,
 *   resolution: string, aspectRatio: string, mode: string,
 *   state: "running" | "done" | "failed" | "filtered", uris?: string[], message?: string,
 * }} RecentOp
 */

const KEY_STORE = "hearth.videoApiKey";
const RECENT_STORE = "hearth.video.recent";
const MODEL_STORE = "hearth.video.model";
const MAX_RECENT = 20;
const POLL_MS = 1000;

const store = {
  /** @param {string} k */
  get(k) {
    try {
      return localStorage.getItem(k);
    } catch {
      return null;
    }
  },
  /** @param {string} k @param {string | null} v */
  set(k, v) {
    try {
      if (v === null || v === "") localStorage.removeItem(k);
      else localStorage.setItem(k, v);
    } catch { /* storage off: this page only */ }
  },
};

const form = /** @type {HTMLFormElement} */ ($("form.video-layout"));
/** @param {string} name */
const field = (name) => /** @type {HTMLInputElement & HTMLSelectElement & HTMLTextAreaElement} */ (
  form.elements.namedItem(name)
);
const keyBox = $(".video-key");
const keyInput = field("key");
const generateButton = /** @type {HTMLButtonElement} */ ($(".video-actions button"));
const resultBody = $(".result-body");
const recentList = $(".recent-list");

/** @type {RulesDocument | undefined} */
let doc;
/** @type {Selections} */
const sel = { referenceImages: [], enhancePrompt: true };
/** Preview (blob) URLs of the chosen images, by the image object in `sel`. */
const previews = new WeakMap();
/** The operation shown in the result panel; a newer one ends the older one's polling loop. */
let current = { name: "", token: 0 };

// --- key ---------------------------------------------------------------------------------------

const apiKey = () => keyInput.value.trim();

/** @param {string} [note] */
function showKeyBox(note) {
  keyBox.hidden = false;
  if (note) $(".key-note").textContent = note;
}

/** @returns {Record<string, string>} */
function headers() {
  const key = apiKey();
  return key ? { "x-goog-api-key": key } : {};
}

// --- the form ----------------------------------------------------------------------------------

/**
 * Replaces a select's options when they differ, then sets its value.
 * @param {HTMLSelectElement} select
 * @param {Array<{ value: string, label: string }>} options
 * @param {string} value
 */
function fillSelect(select, options, value) {
  const now = [...select.options].map((o) => `${o.value}\u0000${o.text}`).join("\u0001");
  const want = options.map((o) => `${o.value}\u0000${o.label}`).join("\u0001");
  if (now !== want) {
    clear(select);
    for (const o of options) select.append(h("option", { value: o.value }, o.label));
  }
  select.value = value;
}

/** @param {readonly (string | number)[]} list */
const plain = (list) => list.map((v) => ({ value: String(v), label: String(v) }));

/** Reads the controls into `sel`, recomputes the options, and writes them back. */
function refresh() {
  if (!doc) return;
  sel.model = field("model").value || sel.model;
  sel.prompt = field("prompt").value;
  sel.negativePrompt = field("negativePrompt").value;
  sel.durationSeconds = field("durationSeconds").value || sel.durationSeconds;
  sel.resolution = field("resolution").value || sel.resolution;
  sel.aspectRatio = field("aspectRatio").value || sel.aspectRatio;
  sel.personGeneration = field("personGeneration").value || sel.personGeneration;
  sel.sampleCount = field("sampleCount").value || sel.sampleCount;
  sel.seed = field("seed").value;
  sel.enhancePrompt = field("enhancePrompt").checked;
  render();
}

function render() {
  if (!doc) return;
  const o = formOptions(doc, sel);
  const rules = doc.models[o.model];
  Object.assign(sel, {
    model: o.model,
    resolution: o.resolution,
    aspectRatio: o.aspectRatio,
    durationSeconds: o.durationSeconds,
    personGeneration: o.personGeneration,
    sampleCount: o.sampleCount,
  });
  fillSelect(field("model"), o.models, o.model);
  fillSelect(field("durationSeconds"), plain(o.durations), String(o.durationSeconds));
  fillSelect(field("resolution"), plain(o.resolutions), o.resolution);
  field("resolution").disabled = o.resolutionFixed;
  const ratios = o.aspectRatioFromVideo
    ? [{ value: "", label: "same as the video" }]
    : plain(o.aspectRatios);
  fillSelect(field("aspectRatio"), ratios, o.aspectRatioFromVideo ? "" : o.aspectRatio);
  fillSelect(field("personGeneration"), plain(o.personGenerations), o.personGeneration ?? "");
  fillSelect(field("sampleCount"), plain(o.sampleCounts), String(o.sampleCount));
  control("sampleCount").hidden = o.sampleCounts.length < 2;
  control("seed").hidden = !o.seed;
  control("enhancePrompt").hidden = !o.enhancePrompt;

  const notes = [];
  if (o.resolutionFixed) {
    notes.push(`${modelLabel(o.model)} renders ${o.resolution} and takes no resolution setting.`);
  }
  if (o.durations.length === 1 && rules.durations.length > 1) {
    const why = rules.eightSecondsOnly.resolutions.includes(o.resolution)
      ? `at ${o.resolution}`
      : `for ${o.modeLabel.toLowerCase()}`;
    notes.push(`Only ${o.durations[0]} s ${why} with ${modelLabel(o.model)}.`);
  }
  if (o.extensionAddsSeconds) {
    notes.push(`An extension adds ${o.extensionAddsSeconds} s to the video.`);
  }
  const fixedNote = $(".fixed-note");
  fixedNote.textContent = notes.join(" ");
  fixedNote.hidden = notes.length === 0;

  renderInputs(o);
  field("prompt").placeholder = o.promptRequired
    ? "Describe the video"
    : "Optional with an image or a video: describe the motion";
  $(".mode-line").textContent = `Mode: ${o.modeLabel}`;
}

/** @param {string} name */
const control = (name) => /** @type {HTMLElement} */ ($(`[data-control="${name}"]`));
/** @param {string} name */
const slot = (name) => /** @type {HTMLElement} */ ($(`[data-slot="${name}"]`));

/**
 * A preview of one chosen image with its remove button (and extra controls).
 * @param {object} image the image in `sel` (its preview URL is kept by identity)
 * @param {string} label
 * @param {() => void} remove
 * @param {Node[]} [extra]
 */
function thumb(image, label, remove, extra = []) {
  return h(
    "figure",
    { class: "thumb" },
    h("img", { src: previews.get(image) ?? "", alt: `${label} preview` }),
    h(
      "figcaption",
      {},
      ...extra,
      h("button", {
        type: "button",
        class: "ghost",
        onclick: () => {
          dropPreview(image);
          remove();
          render();
        },
      }, `Remove ${label}`),
    ),
  );
}

/** @param {ReturnType<typeof formOptions>} o */
function renderInputs(o) {
  const a = o.inputs;
  const accept = doc?.limits.imageMimeTypes.join(",") ?? "image/png,image/jpeg";
  for (const name of ["image", "lastFrame", "referenceImages"]) field(name).accept = accept;

  slot("image").hidden = !a.image.shown;
  field("image").disabled = !a.image.enabled;
  const imageThumbs = $('[data-slot="image"] .thumbs');
  clear(imageThumbs);
  if (sel.image) {
    imageThumbs.append(thumb(sel.image, "first frame", () => {
      if (sel.lastFrame) dropPreview(sel.lastFrame);
      sel.image = null;
      sel.lastFrame = null;
    }));
  }

  slot("lastFrame").hidden = !a.lastFrame.shown;
  field("lastFrame").disabled = !a.lastFrame.enabled;
  const lastThumbs = $('[data-slot="lastFrame"] .thumbs');
  clear(lastThumbs);
  if (sel.lastFrame && sel.image) {
    lastThumbs.append(thumb(sel.lastFrame, "last frame", () => (sel.lastFrame = null)));
  }

  const refs = sel.referenceImages ?? [];
  slot("referenceImages").hidden = !a.referenceImages.shown;
  field("referenceImages").disabled = !a.referenceImages.enabled ||
    refs.length >= a.referenceImages.max;
  $(".ref-limit").textContent = a.referenceImages.shown ? `(up to ${a.referenceImages.max})` : "";
  const refThumbs = $('[data-slot="referenceImages"] .thumbs');
  clear(refThumbs);
  refs.forEach((ref, i) => {
    const type = h("select", {
      "aria-label": `Reference type ${i + 1}`,
      onchange: (/** @type {Event} */ e) => {
        ref.referenceType = /** @type {HTMLSelectElement} */ (e.target).value;
      },
    });
    fillSelect(
      /** @type {HTMLSelectElement} */ (type),
      plain(a.referenceImages.types),
      ref.referenceType,
    );
    refThumbs.append(thumb(ref.image, `reference image ${i + 1}`, () => refs.splice(i, 1), [type]));
  });

  const video = sel.video && a.extension.shown ? sel.video : null;
  slot("video").hidden = !video;
  const videoThumbs = $('[data-slot="video"] .thumbs');
  clear(videoThumbs);
  if (video) {
    const src = recent().find((r) => r.uris?.includes(video.uri));
    videoThumbs.append(h(
      "div",
      { class: "extend-chip" },
      h("span", {}, "Extending: ", h("strong", {}, src?.prompt || "a generated video")),
      src ? h("span", { class: "muted" }, ` (${src.durationSeconds} s, ${src.aspectRatio})`) : null,
      h("button", {
        type: "button",
        class: "ghost",
        onclick: () => {
          sel.video = null;
          render();
        },
      }, "Remove video"),
    ));
  }

  const notes = [];
  if (a.referenceImages.shown && !a.referenceImages.enabled) {
    notes.push("Reference images go without first or last frame, or an extension.");
  } else if (a.image.shown && !a.image.enabled) {
    notes.push("A first frame can't be combined with reference images or an extension.");
  }
  if (a.lastFrame.shown && !sel.image) notes.push("A last frame needs a first frame.");
  if (!a.image.shown && !a.referenceImages.shown) {
    notes.push(`${modelLabel(o.model)} takes text only.`);
  }
  $(".inputs-note").textContent = notes.join(" ");
}

/** @param {object} image */
function dropPreview(image) {
  const url = previews.get(image);
  if (url) URL.revokeObjectURL(url);
  previews.delete(image);
}

/** @param {File} file */
async function readImage(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  // The type the browser guessed from the name; the server checks it against the bytes.
  const image = wireImage(bytes, file.type || "application/octet-stream");
  previews.set(image, URL.createObjectURL(file));
  return image;
}

/** @param {string} name */
async function onFiles(name) {
  const input = field(name);
  const files = [...(input.files ?? [])];
  input.value = "";
  if (files.length === 0 || !doc) return;
  if (name === "referenceImages") {
    const o = formOptions(doc, sel);
    const refs = sel.referenceImages ?? (sel.referenceImages = []);
    for (const file of files.slice(0, Math.max(0, o.inputs.referenceImages.max - refs.length))) {
      refs.push({ image: await readImage(file), referenceType: o.inputs.referenceImages.types[0] });
    }
  } else {
    const slotName = /** @type {"image" | "lastFrame"} */ (name);
    const old = sel[slotName];
    if (old) dropPreview(old);
    sel[slotName] = await readImage(files[0]);
  }
  render();
}

// --- generating and polling --------------------------------------------------------------------

/** @param {...Node | string | null} nodes */
function showResult(...nodes) {
  clear(resultBody);
  resultBody.append(...nodes.filter((n) => n !== null));
  resultBody.scrollIntoView({ block: "nearest" });
}

/** An API refusal, shown as the API words it. @param {string} message */
const errorBox = (message) => h("div", { class: "error-box", role: "alert" }, message);

/**
 * Reads a failed response: shows the key box for key errors, returns the API's message.
 * @param {Response} res
 */
async function failure(res) {
  const { message, body } = errorFromBody(res.status, await res.text());
  if (isKeyError(res.status, body)) {
    showKeyBox(
      apiKey() ? "The server refused this key." : "This server needs a video API key.",
    );
    if (!apiKey()) keyInput.focus();
  }
  return message;
}

async function generate() {
  if (!doc) return;
  refresh();
  const req = buildRequest(doc, sel);
  const o = formOptions(doc, sel);
  generateButton.disabled = true;
  let res;
  try {
    res = await fetch(req.path, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers() },
      body: JSON.stringify(req.body),
    });
  } catch (e) {
    refused(`The server could not be reached: ${/** @type {Error} */ (e).message}`);
    return;
  } finally {
    generateButton.disabled = false;
  }
  if (!res.ok) {
    refused(await failure(res));
    return;
  }
  const { name } = await res.json();
  store.set(MODEL_STORE, req.model);
  /** @type {RecentOp} */
  const op = {
    name,
    model: req.model,
    prompt: sel.prompt ?? "",
    at: Date.now(),
    durationSeconds: o.durationSeconds + o.extensionAddsSeconds,
    resolution: o.resolution,
    aspectRatio: o.aspectRatioFromVideo ? (sel.video?.aspectRatio ?? "") : o.aspectRatio,
    mode: o.mode,
    state: "running",
  };
  saveRecent([op, ...recent().filter((r) => r.name !== name)]);
  void follow(op);
}

/**
 * The request was refused: the panel shows why, and no operation is current any more.
 * @param {string} message
 */
function refused(message) {
  current = { name: "", token: current.token + 1 };
  renderRecent();
  showResult(h("h2", {}, "Not started"), errorBox(message));
}

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Shows one operation and polls it until it is done (or another takes the panel).
 * @param {RecentOp} op
 */
async function follow(op) {
  const token = current.token + 1;
  current = { name: op.name, token };
  renderRecent();
  const progress = /** @type {HTMLProgressElement} */ (h("progress", {
    max: 100,
    "aria-label": "Generating video",
  }));
  const percent = h("span", { class: "muted" }, "Queued");
  showResult(
    h("h2", {}, "Generating…"),
    h("p", { class: "result-prompt" }, op.prompt || "(no prompt)"),
    progress,
    h("p", { class: "row progress-line" }, percent, h("span", { class: "spacer" }), opMeta(op)),
  );
  while (current.token === token) {
    let res;
    try {
      res = await fetch(`/v1beta/${op.name}`, { headers: headers() });
    } catch {
      // The server is restarting or the network blinked: operations are durable, keep polling.
      percent.textContent = "Waiting for the server…";
      await sleep(POLL_MS * 2);
      continue;
    }
    if (current.token !== token) return;
    if (!res.ok) {
      const message = await failure(res);
      if (current.token === token) {
        showResult(h("h2", {}, "Could not get the operation"), errorBox(message), opMeta(op));
      }
      return;
    }
    const state = readOperation(await res.json());
    if (current.token !== token) return;
    if (!state.done) {
      if (state.progress !== undefined) {
        progress.value = state.progress;
        percent.textContent = `${state.progress}%`;
      }
      await sleep(POLL_MS);
      continue;
    }
    /** @type {RecentOp} */
    const finished = {
      ...op,
      state: state.error ? "failed" : state.uris.length ? "done" : "filtered",
      uris: state.uris,
      message: state.error ?? (state.filtered.join("\n") || undefined),
    };
    saveRecent(recent().map((r) => r.name === op.name ? finished : r));
    showFinished(finished);
    return;
  }
}

/** @param {RecentOp} op */
function opMeta(op) {
  const parts = [modelLabel(op.model), `${op.durationSeconds} s`, op.resolution, op.aspectRatio];
  return h("span", { class: "muted" }, parts.filter(Boolean).join(" · "));
}

/** @param {RecentOp} op */
function showFinished(op) {
  renderRecent();
  if (op.state === "failed" || op.state === "filtered") {
    showResult(
      h("h2", {}, op.state === "filtered" ? "Blocked" : "Failed"),
      h("p", { class: "result-prompt" }, op.prompt || "(no prompt)"),
      errorBox(op.message ?? "The video was not generated."),
      opMeta(op),
    );
    return;
  }
  const key = apiKey();
  const canExtend = !!doc &&
    doc.models[resolveModel(doc, op.model)]?.modes.includes("extension") &&
    doc.extension.resolutions.includes(op.resolution) &&
    doc.extension.aspectRatios.includes(op.aspectRatio);
  showResult(
    ...(op.uris ?? []).map((uri, i) =>
      h(
        "figure",
        { class: "result-video" },
        h("video", {
          src: withKey(uri, key),
          controls: true,
          preload: "auto",
          playsinline: true,
          "aria-label": `Generated video${(op.uris?.length ?? 0) > 1 ? ` ${i + 1}` : ""}`,
        }),
        h(
          "figcaption",
          { class: "row" },
          opMeta(op),
          h("span", { class: "spacer" }),
          h("a", { href: withKey(uri, key), download: "" }, "Download MP4"),
          canExtend
            ? h("button", {
              type: "button",
              onclick: () => {
                field("model").value = op.model;
                sel.model = op.model;
                sel.video = { uri, aspectRatio: op.aspectRatio };
                sel.image = null;
                sel.lastFrame = null;
                sel.referenceImages = [];
                render();
                field("prompt").focus();
              },
            }, "Extend")
            : null,
        ),
      )
    ),
    h("p", { class: "result-prompt" }, op.prompt),
  );
}

// --- recent operations -------------------------------------------------------------------------

/** @returns {RecentOp[]} */
function recent() {
  try {
    const list = JSON.parse(store.get(RECENT_STORE) ?? "[]");
    return Array.isArray(list) ? list.filter((r) => typeof r?.name === "string") : [];
  } catch {
    return [];
  }
}

/** @param {RecentOp[]} list */
function saveRecent(list) {
  store.set(RECENT_STORE, list.length ? JSON.stringify(list.slice(0, MAX_RECENT)) : null);
  renderRecent();
}

/** @param {number} at */
function ago(at) {
  const s = Math.max(0, Math.round((Date.now() - at) / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(at).toLocaleDateString();
}

const STATE_LABEL = { running: "running", done: "done", failed: "failed", filtered: "blocked" };
const STATE_CLASS = { running: "running", done: "done", failed: "error", filtered: "error" };

function renderRecent() {
  const list = recent();
  clear(recentList);
  for (const op of list) {
    recentList.append(h(
      "li",
      {},
      h(
        "button",
        {
          type: "button",
          "aria-current": op.name === current.name ? "true" : null,
          // Done or not, ask the server again: it has the current state and video uri.
          onclick: () => void follow(op),
        },
        h("span", { class: "recent-prompt" }, op.prompt || "(no prompt)"),
        h(
          "span",
          { class: "recent-meta" },
          h("span", { class: `badge ${STATE_CLASS[op.state]}` }, STATE_LABEL[op.state]),
          ` ${modelLabel(op.model)} · ${op.durationSeconds} s · ${ago(op.at)}`,
        ),
      ),
    ));
  }
  $(".recent-empty").hidden = list.length > 0;
  $(".clear-recent").hidden = list.length === 0;
}

// --- start -------------------------------------------------------------------------------------

async function start() {
  initShell();
  keyInput.value = store.get(KEY_STORE) ?? "";
  if (keyInput.value) showKeyBox();
  keyInput.addEventListener("input", () => store.set(KEY_STORE, apiKey()));
  renderRecent();
  $(".clear-recent").addEventListener("click", () => saveRecent([]));

  let res;
  try {
    res = await fetch("./video-rules.json");
  } catch (e) {
    showResult(errorBox(`The server could not be reached: ${/** @type {Error} */ (e).message}`));
    return;
  }
  if (!res.ok) {
    showResult(errorBox(errorFromBody(res.status, await res.text()).message));
    return;
  }
  doc = /** @type {RulesDocument} */ (await res.json());
  if (doc.keyRequired) showKeyBox();
  sel.model = resolveModel(doc, store.get(MODEL_STORE) ?? undefined);
  render();
  field("model").disabled = false;
  generateButton.disabled = false;

  form.addEventListener("change", (e) => {
    const t = /** @type {HTMLElement} */ (e.target);
    if (t instanceof HTMLInputElement && t.type === "file") void onFiles(t.name);
    else if (t.getAttribute("aria-label")?.startsWith("Reference type")) return;
    else if (t !== keyInput) refresh();
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void generate();
  });
  field("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      form.requestSubmit();
    }
  });

  const last = recent()[0];
  if (last?.state === "running") void follow(last);
}

void start();
