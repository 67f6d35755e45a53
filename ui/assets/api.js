/**
 * Talking to Hearth's API from a page: the API key kept in this browser (sent as
 * `Authorization: Bearer`), fetch with it, and errors as each API words them (OpenAI
 * `{"error":{"message"}}`, Anthropic `{"type":"error","error":{"message"}}`, Google
 * `{"error":{"code","message","status"}}`, the agent channel `{"error":"CODE","message"}`).
 * A 401 fires `hearth:need-key` on `window` so the page can show its "API key" textbox.
 *
 * @example
 * ```js
 * import { apiFetch, ApiError } from "./api.js";
 * try { const r = await apiFetch("/v1/models"); console.log(await r.json()); }
 * catch (e) { if (e instanceof ApiError) console.log(e.status, e.message); }
 * ```
 * @module
 */

const KEY = "hearth.apiKey";

/** The key saved in this browser, or "". */
export function getApiKey() {
  try {
    return localStorage.getItem(KEY) ?? "";
  } catch {
    return "";
  }
}

/** @param {string} key */
export function setApiKey(key) {
  try {
    if (key) localStorage.setItem(KEY, key);
    else localStorage.removeItem(KEY);
  } catch { /* storage off: the key lives for this page only */ }
}

/** @returns {Record<string, string>} */
export function authHeaders() {
  const key = getApiKey();
  return key ? { authorization: `Bearer ${key}` } : {};
}

/** An API refusal: HTTP status, the API's own message, and the parsed body when it was JSON. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {unknown} [body]
   */
  constructor(status, message, body) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
  }
}

/**
 * The message of an error body in any of the API shapes; the raw text when it has none.
 * @param {number} status
 * @param {string} text
 * @returns {{ message: string, body: unknown }}
 */
export function errorFromBody(status, text) {
  /** @type {any} */
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return { message: text.trim() || `HTTP ${status}`, body: undefined };
  }
  const e = body?.error;
  if (e && typeof e === "object" && typeof e.message === "string") {
    return { message: e.message, body };
  }
  if (typeof body?.message === "string") {
    return { message: typeof e === "string" ? `${e}: ${body.message}` : body.message, body };
  }
  if (typeof e === "string") return { message: e, body };
  return { message: text.trim() || `HTTP ${status}`, body };
}

/**
 * `fetch` with the saved key; a non-2xx answer throws {@link ApiError} with the API's message.
 * @param {string} path
 * @param {RequestInit & { json?: unknown }} [init]
 * @returns {Promise<Response>}
 */
export async function apiFetch(path, init = {}) {
  const headers = new Headers(init.headers);
  for (const [k, v] of Object.entries(authHeaders())) if (!headers.has(k)) headers.set(k, v);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("content-type", "application/json");
    body = JSON.stringify(init.json);
  }
  const res = await fetch(path, { ...init, headers, body });
  if (res.ok) return res;
  const { message, body: parsed } = errorFromBody(res.status, await res.text());
  if (res.status === 401) {
    globalThis.dispatchEvent(new CustomEvent("hearth:need-key", { detail: message }));
  }
  throw new ApiError(res.status, message, parsed);
}

/**
 * `apiFetch` and parse the JSON answer.
 * @param {string} path
 * @param {RequestInit & { json?: unknown }} [init]
 */
export async function apiJson(path, init) {
  const res = await apiFetch(path, init);
  return await res.json();
}
