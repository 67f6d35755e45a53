/**
 * The manager page (`hearth manager`, at `/` and `/manager`): each watched worker's URL, status
 * (up / down / connecting), session count, latest message (role, text, time) and last error, kept
 * live by the manager's event stream `GET /api/manager/events` (data-only SSE: the whole
 * `{instances}` document at once and after every change). A dropped stream is reopened with
 * backoff; a manager without the stream is polled every second instead. When the manager has an
 * API key, its 401 shows the header's "API key" textbox (shell.js); the key is kept in this
 * browser and sent as `Authorization: Bearer`.
 *
 * @example
 * ```html
 * <script type="module" src="./assets/manager.js"></script>
 * ```
 * @module
 */
import { ApiError, apiFetch, apiJson } from "./api.js";
import { $, clear, h } from "./dom.js";
import { initShell } from "./shell.js";
import { readSse } from "./sse.js";

/**
 * @typedef {{ sessionId: string, role: string, content: string, at: string | number,
 *   error?: string }} LatestMessage
 * @typedef {{ url: string, status: "connecting" | "up" | "down", stream: string,
 *   lastSeen: string | null, lastError?: string, sessions: Array<{ id: string }>,
 *   latestMessage: LatestMessage | null, events: number, reconnects: number,
 *   retryInMs?: number }} Instance
 */

const POLL_MS = 1000;
const list = $("ul.workers");
const empty = $(".manager-empty");
const live = $(".live-state");
/** @type {Instance[] | undefined} */
let last;

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** @param {string | number | null | undefined} at */
function toDate(at) {
  if (at === null || at === undefined || at === "") return undefined;
  const d = new Date(typeof at === "number" && at < 1e12 ? at * 1000 : at);
  return Number.isNaN(d.getTime()) ? undefined : d;
}

/** @param {Date} d */
function ago(d) {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return d.toLocaleDateString();
}

/** @param {string | number | null | undefined} at */
function timeEl(at) {
  const d = toDate(at);
  if (!d) return h("span", {}, "unknown time");
  return h(
    "time",
    { datetime: d.toISOString(), title: d.toLocaleString() },
    `${d.toLocaleTimeString()} (${ago(d)})`,
  );
}

/** @param {number} n @param {string} one */
const count = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;

/** @param {Instance} w */
function workerCard(w) {
  const m = w.latestMessage;
  const seen = toDate(w.lastSeen);
  return h(
    "article",
    { class: `panel worker ${w.status}`, "aria-label": `Worker ${w.url}` },
    h(
      "div",
      { class: "worker-head" },
      h("span", { class: `badge ${w.status}` }, w.status),
      h(
        "h2",
        { class: "worker-url" },
        h("a", { href: `${w.url}/ui/agents`, target: "_blank", rel: "noreferrer" }, w.url),
      ),
      h("span", { class: "worker-sessions" }, count(w.sessions.length, "session")),
    ),
    m
      ? h(
        "div",
        { class: "latest" },
        h(
          "div",
          { class: "latest-meta" },
          h("span", { class: `role ${m.role}` }, m.role),
          h("span", { class: "muted" }, " · "),
          timeEl(m.at),
          h("span", { class: "muted" }, ` · session ${m.sessionId}`),
        ),
        h("p", { class: "latest-text" }, m.content || "(empty)"),
        m.error ? h("p", { class: "latest-error" }, m.error) : null,
      )
      : h("p", { class: "latest none muted" }, "No messages yet."),
    w.lastError
      ? h("div", { class: "error-box worker-error" }, h("strong", {}, "Last error: "), w.lastError)
      : null,
    h(
      "p",
      { class: "worker-facts muted" },
      [
        w.retryInMs !== undefined
          ? `stream ${w.stream}, retry in ${Math.max(1, Math.round(w.retryInMs / 1000))} s`
          : `stream ${w.stream}`,
        count(w.events, "event"),
        count(w.reconnects, "reconnect"),
        seen ? `last seen ${ago(seen)}` : "not seen yet",
      ].join(" · "),
    ),
  );
}

/** @param {Instance[]} instances */
function render(instances) {
  last = instances;
  clear(list);
  for (const w of instances) list.append(h("li", {}, workerCard(w)));
  const up = instances.filter((w) => w.status === "up").length;
  $(".summary").textContent = `${count(instances.length, "worker")}, ${up} up`;
  empty.hidden = instances.length > 0;
  if (instances.length === 0) empty.textContent = "The manager watches no workers.";
}

/** @param {"live" | "polling" | "reconnecting" | "key" | ""} state */
function setLive(state) {
  live.dataset.state = state;
  live.textContent = {
    live: "Live",
    polling: "Live (polling)",
    reconnecting: "Reconnecting…",
    key: "Needs the API key",
    "": "",
  }[state];
}

/** Resolves when the header's key form saves a key. */
const keyChanged = () =>
  new Promise((resolve) => addEventListener("hearth:key-changed", resolve, { once: true }));

/** Polls `/api/manager/instances`, for a manager without the event stream. */
async function poll() {
  while (true) {
    try {
      render((await apiJson("/api/manager/instances")).instances);
      setLive("polling");
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        setLive("key");
        await keyChanged();
        continue;
      }
      setLive("reconnecting");
    }
    await sleep(POLL_MS);
  }
}

async function stream() {
  let delay = 500;
  while (true) {
    try {
      const res = await apiFetch("/api/manager/events", {
        headers: { accept: "text/event-stream" },
      });
      if (!res.body) throw new Error("no stream");
      setLive("live");
      delay = 500;
      for await (const m of readSse(res.body)) {
        if ("data" in m && m.data) render(JSON.parse(m.data).instances);
      }
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        setLive("key");
        empty.textContent = "This manager needs its API key.";
        await keyChanged();
        continue;
      }
      if (e instanceof ApiError && (e.status === 404 || e.status === 405)) return await poll();
    }
    setLive("reconnecting");
    await sleep(delay);
    delay = Math.min(delay * 2, 5000);
  }
}

initShell();
$(".workers-link").setAttribute("aria-current", "page");
// Relative times ("2 min ago") move on without new data.
setInterval(() => last && render(last), 10_000);
void stream();
