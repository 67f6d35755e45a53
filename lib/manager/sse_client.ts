/**
 * A server-side reader of one server-sent event stream over `fetch`, for the manager's
 * subscription to each worker's `/api/events`. The parser follows the WHATWG event-stream format
 * (LF, CRLF or CR line ends, even split across chunks; `data:` lines joined by LF; comments;
 * `id:` kept as the resume cursor; `retry:`; a leading BOM). The client never gives up: a refused
 * connection (HTTP 503 `SSE_CAPACITY` or any other non-200), a network error, a stream that ends or
 * goes silent for `idleTimeoutMs` all lead to a reconnect after an exponential backoff (1 s doubling
 * to 30 s; back to the minimum after a connection that delivered data), resending the last id seen
 * as `Last-Event-ID` so the server replays what was missed. It stops only when `signal` aborts.
 *
 * @example
 * ```ts
 * import { runSseClient } from "./sse_client.ts";
 * const stop = new AbortController();
 * const done = runSseClient({
 *   url: "http://127.0.0.1:8000/api/events",
 *   signal: stop.signal,
 *   onEvent: (payload, id) => console.log(id, payload),
 *   onState: (state, detail) => console.log(state, detail.error ?? ""),
 * });
 * // later
 * stop.abort();
 * await done;
 * ```
 * @module
 */

/** One dispatched message. `id` is set only when this message carried an `id:` field. */
export type SseMessage = { data: string; event: string; id?: string };

export type SseParserHandlers = {
  onMessage(message: SseMessage): void;
  /** A `retry:` field with a valid number of milliseconds. */
  onRetry?(ms: number): void;
  /** A comment line (`: text`), without the colon and one leading space. */
  onComment?(text: string): void;
  /** A message longer than `maxMessageChars` was dropped (its `id:`, if seen first, still counts). */
  onOversize?(chars: number): void;
};

export type SseParser = {
  /** Feeds the next decoded chunk of the stream. */
  push(chunk: string): void;
  /** The cursor to resume from: the last `id:` value seen ("" when none or reset). */
  lastEventId(): string;
};

/** Parses the event-stream format incrementally; `lastEventId` seeds the cursor. */
export function createSseParser(
  handlers: SseParserHandlers,
  opts: { lastEventId?: string; maxMessageChars?: number } = {},
): SseParser {
  const max = opts.maxMessageChars ?? 16 * 1024 * 1024;
  let lastId = opts.lastEventId ?? "";
  let pending = ""; // the unterminated tail of the stream (never holds a line end)
  let started = false;
  let afterCR = false; // the previous chunk ended in CR: a leading LF belongs to it
  let data: string[] = [];
  let dataChars = 0;
  let eventType = "";
  let messageId: string | undefined;
  let dropped = 0; // chars of the current message thrown away for size; the message is skipped
  let skipLine = false; // the rest of an oversized line is still arriving: discard it

  const reset = () => {
    data = [];
    dataChars = 0;
    eventType = "";
    messageId = undefined;
    dropped = 0;
  };

  const dispatch = () => {
    if (dropped > 0) {
      const chars = dropped;
      reset();
      handlers.onOversize?.(chars);
      return;
    }
    // An id-only block moves the cursor but dispatches nothing (as in the spec).
    if (data.length === 0) return reset();
    const message: SseMessage = { data: data.join("\n"), event: eventType || "message" };
    if (messageId !== undefined) message.id = messageId;
    reset();
    handlers.onMessage(message);
  };

  const line = (text: string) => {
    if (text === "") return dispatch();
    if (text.charCodeAt(0) === 58 /* : */) {
      handlers.onComment?.(text.slice(text.charCodeAt(1) === 32 ? 2 : 1));
      return;
    }
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    switch (field) {
      case "data":
        if (dropped > 0) {
          dropped += value.length;
        } else if (dataChars + value.length > max) {
          dropped = dataChars + value.length;
          data = [];
        } else {
          data.push(value);
          dataChars += value.length + 1;
        }
        break;
      case "event":
        eventType = value;
        break;
      case "id":
        if (!value.includes("\0")) {
          lastId = value;
          messageId = value;
        }
        break;
      case "retry":
        if (/^\d+$/.test(value)) handlers.onRetry?.(Number(value));
        break;
      default:
        // Unknown fields are ignored, as the format requires.
    }
  };

  return {
    push(chunk) {
      if (chunk.length === 0) return;
      if (!started) {
        started = true;
        if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
      }
      if (afterCR && chunk.charCodeAt(0) === 10) chunk = chunk.slice(1);
      afterCR = false;
      let start = 0;
      const ends = /[\r\n]/g;
      for (let m = ends.exec(chunk); m; m = ends.exec(chunk)) {
        const end = m.index;
        if (skipLine) {
          dropped += end - start;
          skipLine = false;
        } else line(pending + chunk.slice(start, end));
        pending = "";
        start = end + 1;
        if (chunk.charCodeAt(end) === 13) {
          if (end + 1 === chunk.length) afterCR = true;
          else if (chunk.charCodeAt(end + 1) === 10) start = end + 2;
          ends.lastIndex = start;
        }
      }
      if (skipLine) dropped += chunk.length - start;
      else pending += chunk.slice(start);
      if (pending.length > max) {
        // A line this long is dropped rather than buffered without bound; so is its message.
        dropped += pending.length;
        pending = "";
        skipLine = true;
      }
    },
    lastEventId: () => lastId,
  };
}

export type SseState = "connecting" | "open" | "backoff";

export type SseStateDetail = {
  /** Connection attempts so far, this one included. */
  attempt: number;
  /** The cursor sent (connecting) or to be sent next (backoff). */
  lastEventId?: string;
  /** HTTP status of a refused connection. */
  status?: number;
  /** Why the last connection ended or failed (backoff only). */
  error?: string;
  /** How long until the next attempt (backoff only). */
  delayMs?: number;
  /** The server's `retry:` hint, when it sent one (informational: the backoff is ours). */
  retryMs?: number;
};

export type SseClientOptions = {
  url: string | URL;
  /** Extra request headers (e.g. `Authorization`). */
  headers?: Record<string, string>;
  /** Cursor for the first connection. */
  lastEventId?: string;
  /** Stops the client: the open connection or pending backoff ends at once. */
  signal: AbortSignal;
  /** First reconnect delay (default 1000 ms); doubles per failed attempt. */
  minBackoffMs?: number;
  /** Longest reconnect delay (default 30000 ms). */
  maxBackoffMs?: number;
  /**
   * Reconnect when nothing (not even a ping) arrives for this long (default 45000 ms: Hearth
   * workers ping every 15 s, so three missed pings mean a dead peer, e.g. a half-open socket).
   */
  idleTimeoutMs?: number;
  /** Largest message kept; longer ones are dropped (default 16 MiB of characters). */
  maxMessageChars?: number;
  /** Each message whose data is JSON, parsed, with its own `id:` when it had one. */
  onEvent(payload: unknown, id?: string): void;
  /** Connection lifecycle: connecting -> open -> backoff -> connecting ... */
  onState?(state: SseState, detail: SseStateDetail): void;
  /** A message that could not be used (not JSON, or too large). */
  onInvalid?(reason: string): void;
};

/** Resolves once `signal` aborts and the connection is closed; never rejects. */
export async function runSseClient(opts: SseClientOptions): Promise<void> {
  const min = Math.max(1, opts.minBackoffMs ?? 1000);
  const max = Math.max(min, opts.maxBackoffMs ?? 30_000);
  const { signal } = opts;
  let cursor = opts.lastEventId ?? "";
  let retryMs: number | undefined;
  let delay = min;
  let attempt = 0;
  while (!signal.aborted) {
    attempt++;
    opts.onState?.("connecting", { attempt, lastEventId: cursor || undefined });
    const outcome = await connectOnce(opts, cursor, attempt, (ms) => (retryMs = ms));
    cursor = outcome.cursor;
    if (signal.aborted) break;
    if (outcome.delivered) delay = min;
    opts.onState?.("backoff", {
      attempt,
      lastEventId: cursor || undefined,
      status: outcome.status,
      error: outcome.error,
      delayMs: delay,
      retryMs,
    });
    await sleep(delay, signal);
    delay = Math.min(delay * 2, max);
  }
}

type Outcome = { cursor: string; delivered: boolean; error: string; status?: number };

async function connectOnce(
  opts: SseClientOptions,
  cursor: string,
  attempt: number,
  setRetry: (ms: number) => void,
): Promise<Outcome> {
  const idleMs = opts.idleTimeoutMs ?? 45_000;
  const conn = new AbortController();
  const onAbort = () => conn.abort(new Error("stopped"));
  opts.signal.addEventListener("abort", onAbort, { once: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const armIdle = () => {
    clearTimeout(timer);
    timer = setTimeout(
      () => conn.abort(new Error(`no data for ${idleMs} ms`)),
      idleMs,
    );
  };
  let delivered = false;
  const parser = createSseParser({
    onMessage(m) {
      delivered = true;
      let payload: unknown;
      try {
        payload = JSON.parse(m.data);
      } catch {
        opts.onInvalid?.(`event data is not JSON: ${m.data.slice(0, 120)}`);
        return;
      }
      try {
        opts.onEvent(payload, m.id);
      } catch (e) {
        // The consumer's bug must not look like a broken stream (which would replay forever).
        console.error("hearth: SSE event handler failed:", e);
      }
    },
    onRetry: setRetry,
    onOversize: (chars) => opts.onInvalid?.(`event of ${chars} characters dropped: too large`),
  }, { lastEventId: cursor, maxMessageChars: opts.maxMessageChars });

  const headers: Record<string, string> = {
    accept: "text/event-stream",
    "cache-control": "no-cache",
    ...opts.headers,
  };
  if (cursor) headers["last-event-id"] = cursor;
  let reader: ReadableStreamDefaultReader<string> | undefined;
  try {
    armIdle();
    const res = await fetch(opts.url, { headers, signal: conn.signal });
    if (res.status !== 200) {
      return {
        cursor,
        delivered,
        status: res.status,
        error: `HTTP ${res.status}${describeBody(await readSnippet(res))}`,
      };
    }
    const type = res.headers.get("content-type") ?? "";
    if (!/^text\/event-stream\b/i.test(type) || !res.body) {
      await res.body?.cancel();
      return { cursor, delivered, error: `not an event stream (content-type ${type || "none"})` };
    }
    opts.onState?.("open", { attempt, lastEventId: cursor || undefined });
    reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    while (true) {
      armIdle();
      const r = await reader.read();
      if (r.done) break;
      parser.push(r.value);
    }
    return { cursor: parser.lastEventId(), delivered, error: "stream ended" };
  } catch (e) {
    const reason = conn.signal.aborted ? conn.signal.reason : e;
    return { cursor: parser.lastEventId(), delivered, error: errorText(reason) };
  } finally {
    clearTimeout(timer);
    opts.signal.removeEventListener("abort", onAbort);
    if (reader) await reader.cancel().catch(() => {});
  }
}

/** Up to `limit` characters of a refused response's body, for the error line. */
async function readSnippet(res: Response, limit = 300): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  try {
    while (text.length < limit) {
      const r = await reader.read();
      if (r.done) break;
      text += r.value;
    }
  } catch {
    // Only a detail for the error line.
  } finally {
    await reader.cancel().catch(() => {});
  }
  return text.slice(0, limit);
}

/** `{"error":"SSE_CAPACITY"}` -> " SSE_CAPACITY"; other bodies quoted briefly. */
function describeBody(text: string): string {
  const trimmed = text.trim();
  if (!trimmed) return "";
  try {
    const json = JSON.parse(trimmed);
    const code = json?.error?.code ?? json?.error?.type ?? json?.error;
    if (typeof code === "string") {
      const message = json?.message ?? json?.error?.message;
      return ` ${code}${typeof message === "string" ? `: ${message}` : ""}`;
    }
  } catch {
    // not JSON: quote it
  }
  return `: ${trimmed.replace(/\s+/g, " ").slice(0, 200)}`;
}

function errorText(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** Waits `ms`, or less when `signal` aborts; leaves no timer behind either way. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
