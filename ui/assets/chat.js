/**
 * The chat page (`/`, docs/ARCHITECTURE.md, "Web UI"): streams `/v1/chat/completions` into an `article`
 * "assistant" per reply (Markdown repainted at most once per animation frame), with Stop (aborts
 * the fetch, so the server frees the sequence), the reply's reasoning folded under "Thinking", its
 * tool calls, tokens and tokens/s, API errors in the API's own words, settings (temperature, max
 * tokens, system prompt, structured output) under "Settings", and conversations kept in this
 * browser (`conversations.js`).
 *
 * @module
 */
import { $, clear, h } from "./dom.js";
import { ApiError, apiFetch, apiJson } from "./api.js";
import { initShell } from "./shell.js";
import { readSse } from "./sse.js";
import { renderMarkdown } from "./markdown.js";
import {
  buildRequest,
  CONVERSATIONS_KEY,
  defaultSettings,
  loadConversations,
  loadCurrentId,
  loadSettings,
  newConversation,
  parseSchema,
  saveConversations,
  saveCurrentId,
  saveSettings,
  titleFor,
} from "./conversations.js";

/**
 * @typedef {import("./conversations.js").Conversation} Conversation
 * @typedef {import("./conversations.js").ChatMessage} ChatMessage
 * @typedef {import("./conversations.js").Settings} Settings
 * @typedef {{ article: HTMLElement, body: HTMLElement, shown: string, reasoning?: HTMLElement,
 *   tools?: HTMLElement, error?: HTMLElement, stats?: HTMLElement }} View
 * @typedef {{ conv: Conversation, msg: ChatMessage, controller: AbortController, stopped: boolean,
 *   sentAt: number, first: number, last: number, chunks: number, frame: number,
 *   savedAt: number }} Live
 */

initShell();

const list = /** @type {HTMLUListElement} */ ($("#conversations"));
const log = /** @type {HTMLElement} */ ($("#log"));
const messagesEl = /** @type {HTMLElement} */ ($("#messages"));
const form = /** @type {HTMLFormElement} */ ($("#composer"));
const input = /** @type {HTMLTextAreaElement} */ ($("#message"));
const sendBtn = /** @type {HTMLButtonElement} */ ($("#send"));
const stopBtn = /** @type {HTMLButtonElement} */ ($("#stop"));
const modelField = /** @type {HTMLElement} */ ($("#model-field"));
const modelSelect = /** @type {HTMLSelectElement} */ ($("#model"));
const summary = /** @type {HTMLElement} */ ($("#settings-summary"));
const dialog = /** @type {HTMLDialogElement} */ ($("#settings"));
const notice = /** @type {HTMLElement} */ ($("#notice"));
const fields = {
  temperature: /** @type {HTMLInputElement} */ ($("#temperature")),
  maxTokens: /** @type {HTMLInputElement} */ ($("#max-tokens")),
  system: /** @type {HTMLTextAreaElement} */ ($("#system")),
  mode: /** @type {HTMLSelectElement} */ ($("#mode")),
  schema: /** @type {HTMLTextAreaElement} */ ($("#schema")),
  choices: /** @type {HTMLTextAreaElement} */ ($("#choices")),
  regex: /** @type {HTMLInputElement} */ ($("#regex")),
};
const schemaError = /** @type {HTMLElement} */ ($("#schema-error"));

const MODE_NAMES = { none: "", json: "JSON Schema", choice: "Choice", regex: "Regex" };

let conversations = loadConversations(localStorage);
/** The open conversation; not in `conversations` until its first message is sent. */
let current = conversations.find((c) => c.id === loadCurrentId(localStorage)) ??
  newConversation();
let settings = loadSettings(localStorage);
/** @type {string[]} */
let models = [];
/** @type {string[]} */
let mcpServers = [];
/** @type {Live | null} */
let live = null;
/** @type {WeakMap<ChatMessage, View>} */
let views = new WeakMap();

// ---- storage ---------------------------------------------------------------------------------

function save() {
  if (!saveConversations(localStorage, conversations)) {
    say("This browser would not save the conversation (storage full?). Delete old chats.");
  }
  saveCurrentId(localStorage, conversations.includes(current) ? current.id : "");
}

/** @param {string} text */
function say(text) {
  notice.textContent = text;
  setTimeout(() => {
    if (notice.textContent === text) notice.textContent = "";
  }, 5000);
}

// ---- sidebar ---------------------------------------------------------------------------------

function renderList() {
  clear(list);
  if (!conversations.length) {
    list.append(h("li", { class: "muted list-empty" }, "No conversations yet."));
    return;
  }
  for (const conv of conversations) {
    const busy = live?.conv === conv;
    list.append(h(
      "li",
      {},
      h(
        "button",
        {
          type: "button",
          class: "conv",
          "aria-current": conv === current ? "true" : null,
          title: conv.title,
          onclick: () => open(conv),
        },
        busy ? h("span", { class: "live-dot", "aria-label": "replying" }) : null,
        conv.title,
      ),
      h("button", {
        type: "button",
        class: "ghost delete",
        "aria-label": `Delete ${conv.title}`,
        title: "Delete",
        onclick: () => remove(conv),
      }, "✕"),
    ));
  }
}

/** @param {Conversation} conv */
function open(conv) {
  current = conv;
  saveCurrentId(localStorage, conversations.includes(conv) ? conv.id : "");
  renderList();
  renderMessages();
  input.focus();
}

/** @param {Conversation} conv */
function remove(conv) {
  if (live?.conv === conv) stop();
  conversations = conversations.filter((c) => c !== conv);
  if (current === conv) current = conversations[0] ?? newConversation();
  save();
  renderList();
  renderMessages();
}

$("#new-chat").addEventListener("click", () => {
  if (!current.messages.length) return input.focus();
  open(newConversation());
});

// ---- messages --------------------------------------------------------------------------------

function renderMessages() {
  clear(messagesEl);
  views = new WeakMap();
  if (!current.messages.length) {
    const model = modelSelect.value || models[0];
    messagesEl.append(h(
      "div",
      { class: "empty" },
      h("p", { class: "empty-title" }, model ? `Chat with ${model}` : "Start a conversation"),
      h(
        "p",
        {},
        "Type a message below. Sampling, a system prompt and structured output are under Settings.",
      ),
    ));
    return;
  }
  for (const msg of current.messages) messagesEl.append(messageEl(msg));
  log.scrollTop = log.scrollHeight;
}

/**
 * @param {ChatMessage} msg
 * @returns {HTMLElement}
 */
function messageEl(msg) {
  if (msg.role === "user") {
    return h(
      "article",
      { class: "message user", "aria-label": "user" },
      h("div", { class: "who" }, "You"),
      h("div", { class: "text" }, msg.content),
    );
  }
  const body = h("div", { class: msg.mode ? `raw ${msg.mode}` : "md" });
  const article = h(
    "article",
    { class: "message assistant", "aria-label": "assistant" },
    h(
      "div",
      { class: "who" },
      "Assistant",
      msg.model ? h("span", { class: "model" }, msg.model) : null,
    ),
    body,
  );
  /** @type {View} */
  const view = { article, body, shown: "" };
  views.set(msg, view);
  paint(msg, view);
  return article;
}

/**
 * Brings a reply's view up to date with the message (cheap when nothing changed).
 * @param {ChatMessage} msg
 * @param {View} view
 */
function paint(msg, view) {
  const { article } = view;
  const streaming = !!msg.pending;
  article.classList.toggle("streaming", streaming);
  if (streaming) article.setAttribute("aria-busy", "true");
  else article.removeAttribute("aria-busy");

  if (msg.reasoning) {
    if (!view.reasoning) {
      const text = h("div", {});
      const details = h("details", { class: "reasoning" }, h("summary", {}, "Thinking"), text);
      article.insertBefore(details, view.body);
      view.reasoning = text;
    }
    if (view.reasoning.textContent !== msg.reasoning) view.reasoning.textContent = msg.reasoning;
  }

  if (view.shown !== msg.content) {
    view.shown = msg.content;
    if (msg.mode) view.body.textContent = msg.content;
    else view.body.replaceChildren(renderMarkdown(msg.content));
  }
  view.body.hidden = !msg.content && !streaming;

  const calls = msg.toolCalls ?? [];
  const steps = msg.toolSteps ?? [];
  if (calls.length || steps.length) {
    if (!view.tools) {
      view.tools = h("div", { class: "tool-calls" });
      article.insertBefore(view.tools, view.body);
    }
    view.tools.replaceChildren(
      ...steps.map((st) =>
        h(
          "details",
          { class: `tool-call${st.is_error ? " error" : ""}`, "aria-label": `MCP ${st.name}` },
          h(
            "summary",
            {},
            h("span", { class: "muted" }, `MCP ${st.server_label} · `),
            h("strong", {}, st.name),
            st.is_error ? h("span", { class: "badge error" }, "error") : null,
          ),
          h("pre", {}, h("code", {}, pretty(st.arguments))),
          h("pre", {}, h("code", {}, st.output)),
        )
      ),
      ...calls.map((c) =>
        h(
          "div",
          { class: "tool-call" },
          h("span", { class: "muted" }, "Tool call "),
          h("strong", {}, c.name || "…"),
          h("pre", {}, h("code", {}, streaming ? c.arguments : pretty(c.arguments))),
        )
      ),
    );
  }

  if (msg.error) {
    if (!view.error) {
      view.error = h("div", { class: "error-box", role: "alert" });
      article.append(view.error);
    }
    view.error.textContent = msg.error;
  }

  if (!streaming && (msg.stats || msg.stopped || msg.finish === "length")) {
    const s = msg.stats;
    const parts = [];
    if (s) {
      parts.push(`${s.estimated ? "≈" : ""}${s.tokens} ${s.tokens === 1 ? "token" : "tokens"}`);
      if (s.tps !== undefined) parts.push(`${s.tps.toFixed(1)} tokens/s`);
      if (s.firstTokenMs !== undefined) parts.push(`first token ${Math.round(s.firstTokenMs)} ms`);
      if (s.promptTokens !== undefined) {
        parts.push(
          `prompt ${s.promptTokens}${s.cachedTokens ? ` (${s.cachedTokens} cached)` : ""}`,
        );
      }
    }
    if (msg.stopped) parts.push("stopped");
    else if (msg.finish === "length") parts.push("max tokens reached");
    else if (msg.finish === "tool_calls") parts.push("tool calls");
    if (!view.stats) {
      view.stats = h("div", { class: "stats" });
      article.append(view.stats);
    }
    view.stats.replaceChildren(...parts.map((p) => h("span", {}, p)));
  }
}

/** @param {string} args */
function pretty(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

function nearBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
}

// ---- sending and streaming -------------------------------------------------------------------

form.addEventListener("submit", (e) => {
  e.preventDefault();
  void send();
});

input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    void send();
  } else if (e.key === "Escape" && live) {
    e.preventDefault();
    stop();
  }
});

stopBtn.addEventListener("click", () => stop());

function stop() {
  if (!live) return;
  live.stopped = true;
  live.controller.abort();
}

/** @param {boolean} busy */
function setBusy(busy) {
  stopBtn.hidden = !busy;
  sendBtn.disabled = busy;
}

async function send() {
  if (live) return;
  const text = input.value;
  if (!text.trim()) return;
  /** @type {ChatMessage} */
  const user = { role: "user", content: text };
  const model = modelSelect.value || models[0] || "";
  const req = buildRequest(settings, [...current.messages, user], model, mcpServers);
  if ("error" in req) {
    openSettings(req.field, req.error);
    return;
  }
  const conv = current;
  if (!conversations.includes(conv)) conversations.unshift(conv);
  conv.messages.push(user);
  /** @type {ChatMessage} */
  const msg = { role: "assistant", content: "", pending: true };
  if (model) msg.model = model;
  if (settings.mode !== "none") msg.mode = settings.mode;
  conv.messages.push(msg);
  conv.title = titleFor(conv.messages);
  touch(conv);
  input.value = "";

  const controller = new AbortController();
  const now = performance.now();
  live = {
    conv,
    msg,
    controller,
    stopped: false,
    sentAt: now,
    first: 0,
    last: 0,
    chunks: 0,
    frame: 0,
    savedAt: now,
  };
  save();
  renderList();
  renderMessages();
  setBusy(true);
  /** @type {any} */
  let usage;
  let done = false;
  try {
    const res = await apiFetch("/v1/chat/completions", {
      method: "POST",
      json: req.body,
      signal: controller.signal,
    });
    if (!res.body) throw new Error("the server sent no stream");
    for await (const m of readSse(res.body)) {
      if (m.comment !== undefined) continue;
      if (m.data === "[DONE]") {
        done = true;
        break;
      }
      /** @type {any} */
      let chunk;
      try {
        chunk = JSON.parse(m.data);
      } catch {
        continue;
      }
      if (chunk?.error) {
        msg.error = typeof chunk.error.message === "string"
          ? chunk.error.message
          : String(chunk.error);
        done = true;
        break;
      }
      if (chunk?.usage) usage = chunk.usage;
      for (const choice of chunk?.choices ?? []) {
        if ((choice.index ?? 0) !== 0) continue;
        if (take(msg, choice.delta ?? {})) {
          const t = performance.now();
          if (!live.first) live.first = t;
          live.last = t;
          live.chunks++;
        }
        if (choice.finish_reason) msg.finish = choice.finish_reason;
      }
      schedule();
    }
    if (!done && !live.stopped) msg.error = "The stream ended before the reply was complete.";
  } catch (e) {
    if (!live.stopped) {
      msg.error = e instanceof ApiError
        ? e.message
        : `Could not reach the server: ${e instanceof Error ? e.message : e}`;
    }
  } finally {
    const l = live;
    controller.abort(); // a stream left early (an error chunk) must not hold the sequence
    if (l.frame) cancelAnimationFrame(l.frame);
    if (l.stopped) msg.stopped = true;
    const tokens = usage?.completion_tokens ?? l.chunks;
    if (tokens > 0 || usage) {
      msg.stats = { tokens };
      if (!usage) msg.stats.estimated = true;
      // The rate between the first token and the last; a one-token reply has no such span, so
      // its rate counts from the request instead.
      const span = (l.last - l.first) / 1000;
      if (tokens > 1 && span > 0) msg.stats.tps = (tokens - 1) / span;
      else if (l.last > l.sentAt) msg.stats.tps = tokens / ((l.last - l.sentAt) / 1000);
      if (l.first) msg.stats.firstTokenMs = l.first - l.sentAt;
      if (usage?.prompt_tokens !== undefined) {
        msg.stats.promptTokens = usage.prompt_tokens;
        msg.stats.cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? 0;
      }
    }
    delete msg.pending;
    live = null;
    touch(l.conv);
    save();
    setBusy(false);
    renderList();
    const view = views.get(msg);
    if (view) {
      const stick = nearBottom();
      paint(msg, view);
      if (stick) log.scrollTop = log.scrollHeight;
    }
  }
}

/**
 * Adds one streamed delta to the reply; true when it carried anything.
 * @param {ChatMessage} msg
 * @param {any} d
 */
function take(msg, d) {
  let got = false;
  if (typeof d.content === "string" && d.content) {
    msg.content += d.content;
    got = true;
  }
  const reasoning = d.reasoning_content ?? d.reasoning;
  if (typeof reasoning === "string" && reasoning) {
    msg.reasoning = (msg.reasoning ?? "") + reasoning;
    got = true;
  }
  if (Array.isArray(d.hearth_tool_steps)) {
    // Tools the server ran itself (MCP), each with its result.
    (msg.toolSteps ??= []).push(...d.hearth_tool_steps);
    got = true;
  }
  if (Array.isArray(d.tool_calls)) {
    const calls = msg.toolCalls ??= [];
    for (const tc of d.tool_calls) {
      const k = typeof tc.index === "number" ? tc.index : calls.length;
      const call = calls[k] ??= { name: "", arguments: "" };
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.name = tc.function.name;
      if (typeof tc.function?.arguments === "string") call.arguments += tc.function.arguments;
    }
    got = true;
  }
  return got;
}

/** @param {Conversation} conv */
function touch(conv) {
  conv.updated = Date.now();
  conversations.sort((a, b) => b.updated - a.updated);
}

/** Repaints the streaming reply on the next animation frame (once, however many chunks came). */
function schedule() {
  const l = live;
  if (!l || l.frame) return;
  l.frame = requestAnimationFrame(() => {
    l.frame = 0;
    const view = views.get(l.msg);
    if (view) {
      const stick = nearBottom();
      paint(l.msg, view);
      if (stick) log.scrollTop = log.scrollHeight;
    }
    // A reload mid-reply keeps what had arrived (saved at most once a second).
    const t = performance.now();
    if (t - l.savedAt > 1000) {
      l.savedAt = t;
      saveConversations(localStorage, conversations);
    }
  });
}

// ---- models ----------------------------------------------------------------------------------

/** Names of the server's ready MCP servers (`/health`), all attached to every request. */
async function loadMcpServers() {
  try {
    const res = await fetch("/health");
    const health = await res.json();
    mcpServers = Array.isArray(health?.mcp)
      ? health.mcp.filter((/** @type {any} */ s) => s.status === "ready").map((
        /** @type {any} */ s,
      ) => String(s.name))
      : [];
  } catch {
    mcpServers = [];
  }
}

async function loadModels() {
  try {
    const res = await apiJson("/v1/models");
    models = Array.isArray(res?.data) ? res.data.map((/** @type {any} */ m) => String(m.id)) : [];
  } catch {
    models = [];
  }
  clear(modelSelect);
  for (const id of models) modelSelect.append(h("option", { value: id }, id));
  if (models.includes(settings.model)) modelSelect.value = settings.model;
  modelField.hidden = models.length <= 1;
  if (!current.messages.length) renderMessages();
}

modelSelect.addEventListener("change", () => {
  settings.model = modelSelect.value;
  saveSettings(localStorage, settings);
});

addEventListener("hearth:key-changed", () => void loadModels());

// ---- settings --------------------------------------------------------------------------------

/**
 * @param {string} [focus] the setting to focus
 * @param {string} [problem] what is wrong with it
 */
function openSettings(focus, problem) {
  fillSettings();
  if (!dialog.open) dialog.showModal();
  const el = focus && /** @type {Record<string, HTMLInputElement>} */ (fields)[focus];
  if (!el) return;
  el.focus();
  if (!problem) return;
  if (el === fields.schema) {
    schemaError.textContent = problem;
    el.setAttribute("aria-invalid", "true");
  } else {
    el.setCustomValidity(problem);
    el.reportValidity();
    el.addEventListener("input", () => el.setCustomValidity(""), { once: true });
  }
}

function fillSettings() {
  fields.temperature.value = settings.temperature;
  fields.maxTokens.value = settings.maxTokens;
  fields.system.value = settings.system;
  fields.mode.value = settings.mode;
  fields.schema.value = settings.schema;
  fields.choices.value = settings.choices;
  fields.regex.value = settings.regex;
  showMode();
}

function showMode() {
  const mode = fields.mode.value;
  $("#schema-field").hidden = mode !== "json";
  $("#choices-field").hidden = mode !== "choice";
  $("#regex-field").hidden = mode !== "regex";
  checkSchema();
}

function checkSchema() {
  const bad = fields.mode.value === "json" && fields.schema.value.trim()
    ? parseSchema(fields.schema.value)
    : null;
  const problem = bad && "error" in bad ? bad.error : "";
  schemaError.textContent = problem;
  if (problem) fields.schema.setAttribute("aria-invalid", "true");
  else fields.schema.removeAttribute("aria-invalid");
}

function readSettings() {
  settings = {
    ...settings,
    temperature: fields.temperature.value,
    maxTokens: fields.maxTokens.value,
    system: fields.system.value,
    mode: /** @type {Settings["mode"]} */ (fields.mode.value),
    schema: fields.schema.value,
    choices: fields.choices.value,
    regex: fields.regex.value,
  };
  saveSettings(localStorage, settings);
  renderSummary();
}

function renderSummary() {
  const parts = [];
  const mode = MODE_NAMES[settings.mode];
  if (mode) parts.push(mode);
  if (settings.temperature.trim()) parts.push(`temperature ${settings.temperature}`);
  if (settings.maxTokens.trim()) parts.push(`max ${settings.maxTokens} tokens`);
  if (settings.system.trim()) parts.push("system prompt");
  summary.textContent = parts.join(" · ");
}

for (const el of Object.values(fields)) {
  el.addEventListener("input", () => {
    readSettings();
    if (el === fields.mode) showMode();
    else if (el === fields.schema) checkSchema();
  });
}
fields.mode.addEventListener("change", () => {
  readSettings();
  showMode();
});

$("#settings-open").addEventListener("click", () => openSettings());
$("#settings-close").addEventListener("click", () => dialog.close());
$("#settings-reset").addEventListener("click", () => {
  settings = { ...defaultSettings(), model: settings.model };
  saveSettings(localStorage, settings);
  fillSettings();
  renderSummary();
});
// A click on the backdrop (the dialog element itself, outside its box) closes it.
dialog.addEventListener("click", (e) => {
  if (e.target !== dialog) return;
  const r = dialog.getBoundingClientRect();
  const inside = e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top &&
    e.clientY <= r.bottom;
  if (!inside) dialog.close();
});
dialog.addEventListener("close", () => input.focus());

// ---- other tabs ------------------------------------------------------------------------------

addEventListener("storage", (e) => {
  if (e.key !== CONVERSATIONS_KEY || live) return;
  conversations = loadConversations(localStorage);
  current = conversations.find((c) => c.id === current.id) ?? current;
  renderList();
  renderMessages();
});

// ---- start -----------------------------------------------------------------------------------

renderSummary();
renderList();
renderMessages();
void loadModels();
void loadMcpServers();
input.focus();
