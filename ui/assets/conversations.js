/**
 * The chat page's state kept in this browser (`localStorage`): conversations, the open one, and
 * the settings; and the pure step from them to a `/v1/chat/completions` request body. No DOM here,
 * so all of it runs (and is tested) in Deno too, with any `Storage`-like object.
 *
 * @example
 * ```js
 * import { buildRequest, loadConversations, loadSettings } from "./conversations.js";
 * const convs = loadConversations(localStorage);
 * const req = buildRequest(loadSettings(localStorage), convs[0].messages, "my-model");
 * if ("error" in req) alert(req.error); else fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify(req.body) });
 * ```
 * @module
 */

export const CONVERSATIONS_KEY = "hearth.chat.conversations";
export const CURRENT_KEY = "hearth.chat.current";
export const SETTINGS_KEY = "hearth.chat.settings";

/**
 * @typedef {{ id?: string, name: string, arguments: string }} ToolCall
 * @typedef {{ server_label: string, name: string, arguments: string, output: string,
 *   is_error: boolean }} ToolStep
 * @typedef {{ tokens: number, estimated?: boolean, tps?: number, firstTokenMs?: number,
 *   promptTokens?: number, cachedTokens?: number }} Stats
 * @typedef {{ role: "user" | "assistant", content: string, reasoning?: string,
 *   toolCalls?: ToolCall[], toolSteps?: ToolStep[], error?: string, stats?: Stats, finish?: string, stopped?: boolean,
 *   pending?: boolean, mode?: string, model?: string }} ChatMessage
 * @typedef {{ id: string, title: string, created: number, updated: number,
 *   messages: ChatMessage[] }} Conversation
 * @typedef {"none" | "json" | "choice" | "regex"} Mode
 * @typedef {{ model: string, temperature: string, maxTokens: string, system: string, mode: Mode,
 *   schema: string, choices: string, regex: string }} Settings
 * @typedef {Pick<Storage, "getItem" | "setItem" | "removeItem">} StorageLike
 */

/** @returns {Settings} */
export function defaultSettings() {
  return {
    model: "",
    temperature: "",
    maxTokens: "",
    system: "",
    mode: "none",
    schema: "",
    choices: "",
    regex: "",
  };
}

/**
 * @param {StorageLike} storage
 * @param {string} key
 * @returns {unknown}
 */
function readJson(storage, key) {
  try {
    const text = storage.getItem(key);
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Saved conversations, newest first. Malformed entries are dropped; a reply that was still
 * streaming when the page went away is marked stopped.
 * @param {StorageLike} storage
 * @returns {Conversation[]}
 */
export function loadConversations(storage) {
  const raw = readJson(storage, CONVERSATIONS_KEY);
  if (!Array.isArray(raw)) return [];
  /** @type {Conversation[]} */
  const out = [];
  for (const c of raw) {
    if (!c || typeof c.id !== "string" || !Array.isArray(c.messages)) continue;
    const messages = c.messages.filter(
      (/** @type {any} */ m) =>
        m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string",
    ).map((/** @type {ChatMessage} */ m) => {
      if (!m.pending) return m;
      const { pending: _, ...rest } = m;
      return { ...rest, stopped: true };
    });
    out.push({
      id: c.id,
      title: typeof c.title === "string" ? c.title : titleFor(messages),
      created: Number(c.created) || 0,
      updated: Number(c.updated) || 0,
      messages,
    });
  }
  return out.sort((a, b) => b.updated - a.updated);
}

/**
 * Saves every conversation; false when the browser refused (storage full or off).
 * @param {StorageLike} storage
 * @param {Conversation[]} list
 */
export function saveConversations(storage, list) {
  try {
    storage.setItem(CONVERSATIONS_KEY, JSON.stringify(list));
    return true;
  } catch {
    return false;
  }
}

/** @param {StorageLike} storage */
export function loadCurrentId(storage) {
  try {
    return storage.getItem(CURRENT_KEY) ?? "";
  } catch {
    return "";
  }
}

/**
 * @param {StorageLike} storage
 * @param {string} id "" for a new, unsaved chat
 */
export function saveCurrentId(storage, id) {
  try {
    if (id) storage.setItem(CURRENT_KEY, id);
    else storage.removeItem(CURRENT_KEY);
  } catch { /* storage off */ }
}

/**
 * @param {StorageLike} storage
 * @returns {Settings}
 */
export function loadSettings(storage) {
  const raw = /** @type {Record<string, unknown> | undefined} */ (readJson(storage, SETTINGS_KEY));
  const s = defaultSettings();
  if (!raw || typeof raw !== "object") return s;
  for (const key of /** @type {(keyof Settings)[]} */ (Object.keys(s))) {
    if (typeof raw[key] === "string") /** @type {Record<string, string>} */ (s)[key] = raw[key];
  }
  if (!["none", "json", "choice", "regex"].includes(s.mode)) s.mode = "none";
  return s;
}

/**
 * @param {StorageLike} storage
 * @param {Settings} settings
 */
export function saveSettings(storage, settings) {
  try {
    storage.setItem(SETTINGS_KEY, JSON.stringify(settings));
  } catch { /* storage off: settings last for this page */ }
}

/** @returns {Conversation} */
export function newConversation() {
  const now = Date.now();
  return { id: crypto.randomUUID(), title: "New chat", created: now, updated: now, messages: [] };
}

/**
 * A conversation's title: its first user message, shortened.
 * @param {ChatMessage[]} messages
 */
export function titleFor(messages) {
  const first = messages.find((m) => m.role === "user")?.content ?? "";
  const line = first.replace(/\s+/g, " ").trim();
  if (!line) return "New chat";
  return line.length > 48 ? `${line.slice(0, 47)}…` : line;
}

/**
 * The conversation as OpenAI chat messages: the system prompt first; an exchange whose reply
 * failed or came back empty left out, question and all (the error is the page's note, not the
 * model's words, and many chat templates refuse two user turns in a row); reasoning not sent back.
 * @param {ChatMessage[]} messages
 * @param {string} system
 * @returns {{ role: string, content: string }[]}
 */
export function requestMessages(messages, system) {
  /** @type {{ role: string, content: string }[]} */
  const out = [];
  if (system.trim()) out.push({ role: "system", content: system });
  /** @param {ChatMessage | undefined} m */
  const empty = (m) => m?.role === "assistant" && !m.content;
  messages.forEach((m, k) => {
    if (empty(m)) return;
    if (m.role === "user" && empty(messages[k + 1])) return;
    out.push({ role: m.role, content: m.content });
  });
  return out;
}

/**
 * The streaming request body for these settings, or what is wrong with them (`field` names the
 * setting to fix).
 * @param {Settings} s
 * @param {ChatMessage[]} messages the conversation so far, ending with the new user message
 * @param {string} [model] omitted when empty (the server's own model)
 * @param {string[]} [mcpServers] MCP servers to attach (all the server has ready); a structured
 *   output setting leaves them out, since the server does not combine tools with a format
 * @returns {{ body: Record<string, unknown> } | { error: string, field: string }}
 */
export function buildRequest(s, messages, model, mcpServers = []) {
  /** @type {Record<string, unknown>} */
  const body = {
    messages: requestMessages(messages, s.system),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (model) body.model = model;
  if (s.temperature.trim()) {
    const t = Number(s.temperature);
    if (!Number.isFinite(t)) {
      return { error: "Temperature must be a number.", field: "temperature" };
    }
    body.temperature = t;
  }
  if (s.maxTokens.trim()) {
    const n = Number(s.maxTokens);
    if (!Number.isInteger(n)) {
      return { error: "Max tokens must be a whole number.", field: "maxTokens" };
    }
    body.max_tokens = n;
  }
  if (s.mode === "json") {
    const checked = parseSchema(s.schema);
    if ("error" in checked) return { error: checked.error, field: "schema" };
    body.response_format = {
      type: "json_schema",
      json_schema: { name: "output", schema: checked.schema, strict: true },
    };
  } else if (s.mode === "choice") {
    body.structured_outputs = {
      choice: s.choices.split("\n").map((c) => c.trim()).filter((c) => c !== ""),
    };
  } else if (s.mode === "regex") {
    body.structured_outputs = { regex: s.regex };
  } else if (mcpServers.length) {
    body.tools = mcpServers.map((name) => ({ type: "mcp", server_label: name }));
  }
  return { body };
}

/**
 * The JSON Schema setting parsed, or why it is not JSON (the server judges whether it is a
 * schema it can follow).
 * @param {string} text
 * @returns {{ schema: unknown } | { error: string }}
 */
export function parseSchema(text) {
  if (!text.trim()) return { error: "JSON Schema is empty." };
  try {
    const schema = JSON.parse(text);
    const kind = typeof schema;
    if (schema === null || Array.isArray(schema) || (kind !== "object" && kind !== "boolean")) {
      return { error: "JSON Schema must be an object." };
    }
    return { schema };
  } catch (e) {
    return { error: `JSON Schema is not valid JSON: ${e instanceof Error ? e.message : e}` };
  }
}
