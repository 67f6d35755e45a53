/**
 * The agent event channel as a page uses it (docs/ARCHITECTURE.md, "Event channel" and "Web UI"), in one place:
 *
 * - `GET /api/events` read with `fetch` (so the API key goes in `Authorization`), resuming from the
 *   last event id seen (`Last-Event-ID`). The stream counts as open once it is a 200
 *   `text/event-stream` that has sent its `: connected` comment.
 * - `GET /ws` (with `?lastEventId=` and `?api_key=`) only while SSE has never opened on this page:
 *   after an SSE attempt that failed without opening, the next attempt is a WebSocket; once SSE
 *   has worked it is never given up for WebSocket, and once only WebSocket has worked it is kept.
 * - Quiet reconnects: backoff 250 ms, 500 ms, 1 s, then every 2 s; no message while it retries.
 * - `onStatus` reports the state; `disconnected` turns true only when the channel has been down
 *   for more than `noticeAfterMs` (8 s), and false again as soon as it is back.
 * - A `replay_gap` notice (the server lost the cursor: ring overrun or a restart, whose ids start
 *   again) resets the cursor, so the ids that follow are taken, and calls `onGap` so the page
 *   reloads what it shows from the API. Pings are dropped; an event id already seen is dropped.
 * - A 401 calls `onAuth` and waits for `reconnect()` (after the key changed).
 * - Nothing heard for `idleTimeoutMs` (the server pings every 15 s) counts as a lost connection.
 *
 * Everything it touches is injectable (`fetch`, `WebSocket`, timers, clock), so it runs in Deno
 * with fakes as well as in the browser.
 *
 * @example
 * ```js
 * import { createChannel } from "./channel.js";
 * const channel = createChannel({
 *   getApiKey,
 *   onEvent: (e, id) => console.log(id, e.event),
 *   onGap: () => reloadFromApi(),
 *   onStatus: (s) => (notice.textContent = s.disconnected ? "Disconnected" : ""),
 * });
 * channel.start();
 * ```
 * @module
 */
import { readSse } from "./sse.js";

export const NOTICE_AFTER_MS = 8000;
export const BACKOFF_MS = [250, 500, 1000, 2000];
export const OPEN_TIMEOUT_MS = 10_000;
export const IDLE_TIMEOUT_MS = 45_000;

/**
 * @typedef {{ topic: string, event: string, [field: string]: unknown }} ChannelEvent
 * @typedef {"sse" | "ws"} Transport
 * @typedef {{
 *   state: "connecting" | "open" | "down" | "closed",
 *   transport: Transport | null,
 *   disconnected: boolean,
 *   downSince: number | null,
 *   sseOpened: boolean,
 *   cursor: number | null,
 * }} ChannelStatus
 * @typedef {{
 *   onEvent?: (event: ChannelEvent, id: number | undefined) => void,
 *   onGap?: (notice: ChannelEvent) => void,
 *   onStatus?: (status: ChannelStatus) => void,
 *   onAuth?: (message: string) => void,
 *   getApiKey?: () => string,
 *   fetch?: typeof fetch,
 *   WebSocket?: { new (url: string): WebSocket },
 *   setTimeout?: (fn: () => void, ms: number) => unknown,
 *   clearTimeout?: (id: any) => void,
 *   now?: () => number,
 *   base?: string,
 *   noticeAfterMs?: number,
 *   backoffMs?: number[],
 *   openTimeoutMs?: number,
 *   idleTimeoutMs?: number,
 * }} ChannelOptions
 */

/**
 * @param {ChannelOptions} [opts]
 */
export function createChannel(opts = {}) {
  const onEvent = opts.onEvent ?? (() => {});
  const onGap = opts.onGap ?? (() => {});
  const onStatus = opts.onStatus ?? (() => {});
  const onAuth = opts.onAuth ?? (() => {});
  const getApiKey = opts.getApiKey ?? (() => "");
  const fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const WS = opts.WebSocket ?? globalThis.WebSocket;
  const setT = opts.setTimeout ?? ((fn, ms) => globalThis.setTimeout(fn, ms));
  const clearT = opts.clearTimeout ?? ((id) => globalThis.clearTimeout(id));
  const now = opts.now ?? (() => Date.now());
  const base = opts.base ?? globalThis.location?.href ?? "http://localhost/";
  const noticeAfterMs = opts.noticeAfterMs ?? NOTICE_AFTER_MS;
  const backoffMs = opts.backoffMs ?? BACKOFF_MS;
  const openTimeoutMs = opts.openTimeoutMs ?? OPEN_TIMEOUT_MS;
  const idleTimeoutMs = opts.idleTimeoutMs ?? IDLE_TIMEOUT_MS;

  /** Last event id taken; null: none yet (the first connection asks for live events only). */
  /** @type {number | null} */
  let cursor = null;
  let sseOpened = false;
  let wsOpened = false;
  /** The next attempt while SSE has never opened: after a failed SSE attempt, WebSocket. */
  /** @type {Transport} */
  let next = "sse";
  let failures = 0;
  let generation = 0;
  let closed = false;
  let started = false;
  /** @type {ChannelStatus["state"]} */
  let state = "connecting";
  /** @type {Transport | null} */
  let transport = null;
  /** @type {number | null} */
  let downSince = null;
  let disconnected = false;
  /** @type {unknown} */
  let noticeTimer;
  /** @type {unknown} */
  let retryTimer;
  /** Stops the connection in progress (abort the fetch, close the socket). */
  /** @type {(() => void) | null} */
  let stopCurrent = null;

  const status = () => ({ state, transport, disconnected, downSince, sseOpened, cursor });
  const emit = () => onStatus(status());

  const markDown = () => {
    if (downSince !== null) return;
    downSince = now();
    clearT(noticeTimer);
    noticeTimer = setT(() => {
      noticeTimer = undefined;
      if (downSince !== null && !closed) {
        disconnected = true;
        emit();
      }
    }, noticeAfterMs);
  };

  const markOpen = (/** @type {Transport} */ t) => {
    failures = 0;
    state = "open";
    transport = t;
    downSince = null;
    disconnected = false;
    clearT(noticeTimer);
    noticeTimer = undefined;
    emit();
  };

  /** @param {string} text JSON of one event; @param {unknown} sseId the SSE `id:` if any */
  const take = (text, sseId) => {
    /** @type {any} */
    let ev;
    try {
      ev = JSON.parse(text);
    } catch {
      return;
    }
    if (!ev || typeof ev !== "object" || Array.isArray(ev)) return;
    if (ev.topic === "system") {
      if (ev.event === "ping") return;
      if (ev.event === "replay_gap") {
        // What follows starts again (a restarted server counts from 1): take it all.
        cursor = 0;
        onGap(ev);
        return;
      }
      onEvent(ev, undefined);
      return;
    }
    const raw = sseId !== undefined ? sseId : ev.id;
    const id = typeof raw === "number"
      ? raw
      : typeof raw === "string" && /^\d+$/.test(raw)
      ? Number(raw)
      : NaN;
    if (Number.isSafeInteger(id)) {
      if (cursor !== null && id <= cursor) return; // seen already (a replay overlapping)
      cursor = id;
      onEvent(ev, id);
    } else onEvent(ev, undefined);
  };

  const url = (/** @type {string} */ path) => new URL(path, base);

  /**
   * Ends attempt `gen`: `opened` tells a lost connection from a failed attempt; `auth` waits for
   * `reconnect()` instead of retrying.
   * @param {number} gen @param {Transport} t @param {boolean} opened @param {boolean} [auth]
   */
  const ended = (gen, t, opened, auth = false) => {
    if (gen !== generation || closed) return;
    stopCurrent = null;
    state = "down";
    transport = null;
    markDown();
    if (!opened && !sseOpened && !auth) {
      if (t === "sse" && !wsOpened && WS) next = "ws";
      else if (t === "ws" && !wsOpened) next = "sse";
    }
    emit();
    if (auth) return;
    const delay = backoffMs[Math.min(failures, backoffMs.length - 1)];
    failures++;
    clearT(retryTimer);
    retryTimer = setT(() => {
      retryTimer = undefined;
      connect();
    }, delay);
  };

  function connect() {
    if (closed) return;
    const gen = ++generation;
    state = "connecting";
    const t = sseOpened || !WS ? "sse" : wsOpened ? "ws" : next;
    emit();
    if (t === "sse") connectSse(gen);
    else connectWs(gen);
  }

  /** @param {number} gen */
  function connectSse(gen) {
    const ctl = new AbortController();
    let opened = false;
    let done = false;
    /** @type {unknown} */
    let timer;
    const arm = (/** @type {number} */ ms) => {
      clearT(timer);
      timer = setT(() => ctl.abort(), ms);
    };
    stopCurrent = () => {
      done = true;
      clearT(timer);
      ctl.abort();
    };
    arm(openTimeoutMs);
    /** @type {Record<string, string>} */
    const headers = { accept: "text/event-stream" };
    const key = getApiKey();
    if (key) headers.authorization = `Bearer ${key}`;
    if (cursor !== null) headers["last-event-id"] = String(cursor);
    let auth = false;
    const run = async () => {
      try {
        const res = await fetchFn(url("/api/events").href, {
          headers,
          signal: ctl.signal,
          cache: "no-store",
        });
        if (res.status === 401) {
          auth = true;
          const text = await res.text().catch(() => "");
          let message = "This server needs an API key.";
          try {
            const body = JSON.parse(text);
            if (typeof body?.message === "string") message = body.message;
          } catch { /* not JSON */ }
          if (!done && gen === generation) onAuth(message);
          return;
        }
        const type = res.headers.get("content-type") ?? "";
        if (res.status !== 200 || !/^text\/event-stream/i.test(type) || !res.body) {
          await res.body?.cancel().catch(() => {});
          return;
        }
        for await (const m of readSse(res.body)) {
          if (done || gen !== generation) break;
          if (m.comment !== undefined) {
            if (!opened && m.comment === "connected") {
              opened = true;
              sseOpened = true;
              markOpen("sse");
            }
            if (opened) arm(idleTimeoutMs);
            continue;
          }
          if (!opened) continue; // nothing counts before `: connected`
          arm(idleTimeoutMs);
          take(m.data, m.id);
        }
      } catch {
        // refused, dropped, aborted (closed, timed out): all end the attempt
      } finally {
        clearT(timer);
        ctl.abort();
      }
    };
    run().then(() => {
      if (!done) ended(gen, "sse", opened, auth);
    });
  }

  /** @param {number} gen */
  function connectWs(gen) {
    const u = url("/ws");
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    if (cursor !== null) u.searchParams.set("lastEventId", String(cursor));
    const key = getApiKey();
    if (key) u.searchParams.set("api_key", key);
    let opened = false;
    let done = false;
    /** @type {WebSocket} */
    let ws;
    try {
      ws = new WS(u.href);
    } catch {
      ended(gen, "ws", false);
      return;
    }
    /** @type {unknown} */
    let timer;
    const arm = (/** @type {number} */ ms) => {
      clearT(timer);
      timer = setT(() => finish(), ms);
    };
    const finish = () => {
      if (done) return;
      done = true;
      clearT(timer);
      try {
        ws.close();
      } catch { /* already closed */ }
      ended(gen, "ws", opened);
    };
    stopCurrent = () => {
      done = true;
      clearT(timer);
      try {
        ws.close();
      } catch { /* already closed */ }
    };
    arm(openTimeoutMs);
    ws.onopen = () => {
      if (done) return;
      opened = true;
      wsOpened = true;
      arm(idleTimeoutMs);
      markOpen("ws");
    };
    ws.onmessage = (/** @type {MessageEvent} */ m) => {
      if (done || typeof m.data !== "string") return;
      arm(idleTimeoutMs);
      take(m.data, undefined);
    };
    ws.onerror = () => finish();
    ws.onclose = () => finish();
  }

  return {
    /** Connects (once; later calls do nothing). */
    start() {
      if (started || closed) return;
      started = true;
      markDown(); // not yet connected: the notice rule runs from the start
      connect();
    },
    /** Drops the current connection and connects again now (e.g. the API key changed). */
    reconnect() {
      if (closed) return;
      started = true;
      stopCurrent?.();
      stopCurrent = null;
      clearT(retryTimer);
      retryTimer = undefined;
      failures = 0;
      markDown();
      connect();
    },
    /** Stops for good: no connection, no timer left. */
    close() {
      if (closed) return;
      closed = true;
      generation++;
      stopCurrent?.();
      stopCurrent = null;
      clearT(retryTimer);
      clearT(noticeTimer);
      retryTimer = noticeTimer = undefined;
      state = "closed";
      transport = null;
      disconnected = false;
      emit();
    },
    status,
  };
}
