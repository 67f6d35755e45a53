/**
 * The one server-sent-events writer, used by inference streams, the agent event channel and the
 * manager's snapshot stream. Frames wait in a queue until the client's reader asks for more, then
 * go out as one chunk: at once if the last chunk left `coalesceMs` ago or more, else at the next
 * tick of a timer shared by all streams made with the same ticker (one write per window per client
 * under load, not one per event). The bytes not yet taken by the client are counted: a client more
 * than `bufferLimit` bytes behind is dropped, so a stalled reader can never make the server hold
 * an unbounded backlog. When the client goes away (or is dropped) `onClose` runs at once, which is
 * what frees an engine sequence or a channel listener.
 *
 * Two faces: {@link sseStream} is push-based (the caller writes frames when it has them: the event
 * fan-out, the manager), {@link sseResponse} pumps an async iterable of payloads (inference).
 *
 * @example
 * ```ts
 * import { sseResponse, sseStream } from "./sse.ts";
 * // Pull: each yielded string becomes one `data:` message.
 * sseResponse((async function* () { yield JSON.stringify({ a: 1 }); yield "[DONE]"; })());
 * // Push: frames are written as they happen; the writer says how far behind the client is.
 * const { response, writer } = sseStream({ bufferLimit: 1 << 20 });
 * writer.write("data: hello\n\n");
 * writer.backlog(); // bytes the client has not read yet
 * writer.end();
 * ```
 * @module
 */

const encoder = new TextEncoder();

/** Headers every SSE response carries. */
export const SSE_HEADERS: Record<string, string> = {
  "content-type": "text/event-stream; charset=utf-8",
  // `no-transform` also keeps Deno.serve from gzipping the stream, which would hold events back.
  "cache-control": "no-cache, no-transform",
  "x-accel-buffering": "no",
};

/** The writing end of one SSE response. */
export type SseWriter = {
  /** Queues one wire frame; ignored once the stream has ended. */
  write(frame: string | Uint8Array): void;
  /** Bytes written but not yet read by the client. */
  backlog(): number;
  /** Sends what is queued and ends the stream. */
  end(): void;
  /** Ends the stream at once with an error (the client sees a broken stream), dropping the queue. */
  drop(error: Error): void;
  readonly closed: boolean;
};

export type SseStreamOptions = {
  /** Bytes a client may fall behind before it is dropped (default: unbounded). */
  bufferLimit?: number;
  /** A stream written less than this many ms ago batches what follows (default 0: at once). */
  coalesceMs?: number;
  /** The timer coalesced flushes share (see {@link flushTicker}); one per stream if not given. */
  ticker?: FlushTicker;
  /** Called once, when the client disconnects, is dropped, or the stream ends. */
  onClose?: (why: "client" | "dropped" | "ended") => void;
  /** Runs when the response body starts (frames written before then wait in the queue). */
  onStart?: (writer: SseWriter) => void;
  /** The error a client over `bufferLimit` is dropped with. */
  droppedError?: () => Error;
  /** A frame written whenever `everyMs` pass without one (long prefills: clients time out). */
  keepalive?: Keepalive;
  headers?: Record<string, string>;
};

/** A keepalive frame and its period. */
export type Keepalive = { everyMs: number; frame: () => string | Uint8Array };

/**
 * How often an idle inference stream sends a keepalive: well inside the 10 s clients may wait
 * without a byte (Codex gives up on a stream after 300 s without an event; comments do not count
 * for it, so each dialect sends one of its own events).
 */
export const KEEPALIVE_MS = 5_000;

/** A push-based SSE response and its writer. */
export function sseStream(opts: SseStreamOptions = {}): { response: Response; writer: SseWriter } {
  const limit = opts.bufferLimit ?? Infinity;
  const coalesceMs = opts.coalesceMs ?? 0;
  const ticker = opts.ticker ?? (coalesceMs > 0 ? flushTicker(coalesceMs) : undefined);
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  let parts: Uint8Array[] = [];
  let partsBytes = 0;
  let reading = false;
  let lastFlush = -Infinity;
  let lastWrite = performance.now();
  let closed = false;
  let keepaliveTimer: ReturnType<typeof setTimeout> | undefined;
  const keepalive = opts.keepalive;
  const beat = (inMs: number) => {
    keepaliveTimer = setTimeout(() => {
      if (closed) return;
      const idle = performance.now() - lastWrite;
      if (idle >= keepalive!.everyMs) {
        writer.write(keepalive!.frame());
        beat(keepalive!.everyMs);
      } else beat(keepalive!.everyMs - idle);
    }, inMs);
  };
  const finish = (why: "client" | "dropped" | "ended") => {
    if (closed) return false;
    closed = true;
    clearTimeout(keepaliveTimer);
    ticker?.cancel(flushLater);
    opts.onClose?.(why);
    return true;
  };
  const flush = () => {
    const chunk = parts.length === 1 ? parts[0] : concat(parts, partsBytes);
    parts = [];
    partsBytes = 0;
    reading = false;
    lastFlush = performance.now();
    controller!.enqueue(chunk);
  };
  function flushLater() {
    if (reading && parts.length) flush();
  }
  const offer = () => {
    if (!ticker || performance.now() - lastFlush >= coalesceMs) flush();
    else ticker.later(flushLater);
  };
  // Only a pending read is ever handed a chunk, so the stream's own queue stays empty;
  // -desiredSize (zero high-water mark: the bytes queued) is counted in case it is not.
  const backlog = () => partsBytes + Math.max(0, -(controller?.desiredSize ?? 0));
  const writer: SseWriter = {
    write(frame) {
      if (closed) return;
      const bytes = typeof frame === "string" ? encoder.encode(frame) : frame;
      lastWrite = performance.now();
      parts.push(bytes);
      partsBytes += bytes.length;
      if (backlog() > limit) {
        writer.drop(
          opts.droppedError?.() ?? new Error("SSE client fell too far behind and was dropped"),
        );
        return;
      }
      if (reading && controller) offer();
    },
    backlog,
    end() {
      if (!finish("ended")) return;
      if (parts.length && controller) flush();
      try {
        controller?.close();
      } catch { /* the client is gone */ }
    },
    drop(error) {
      if (!finish("dropped")) return;
      parts = [];
      partsBytes = 0;
      try {
        controller?.error(error);
      } catch { /* already errored */ }
    },
    get closed() {
      return closed;
    },
  };
  const body = new ReadableStream<Uint8Array>({
    start(ctl) {
      controller = ctl;
      if (keepalive) beat(keepalive.everyMs);
      opts.onStart?.(writer);
    },
    pull() {
      reading = true;
      if (parts.length) offer();
    },
    cancel() {
      finish("client");
    },
  }, new ByteLengthQueuingStrategy({ highWaterMark: 0 }));
  return {
    response: new Response(body, { headers: { ...SSE_HEADERS, ...opts.headers } }),
    writer,
  };
}

export type SseOptions = {
  /** Bytes a client may have buffered before it is dropped (default: unbounded). */
  bufferLimit?: number;
  /** Called once when the client disconnects or is dropped. */
  onCancel?: () => void;
  /** Formats one payload into wire bytes (default: a data-only message). */
  format?: (payload: string) => string;
  /** See {@link SseStreamOptions.keepalive}. */
  keepalive?: Keepalive;
  headers?: Record<string, string>;
};

/**
 * Each yielded string becomes one `data:` message (multi-line payloads are split per line).
 * Payloads are pumped eagerly; when the client goes away the iterator is closed and `onCancel`
 * runs at once.
 */
export function sseResponse(payloads: AsyncIterable<string>, opts: SseOptions = {}): Response {
  const it = payloads[Symbol.asyncIterator]();
  const format = opts.format ?? formatData;
  const { response } = sseStream({
    bufferLimit: opts.bufferLimit,
    headers: opts.headers,
    keepalive: opts.keepalive,
    onClose: (why) => {
      if (why === "ended") return;
      opts.onCancel?.();
      void it.return?.();
    },
    onStart: (writer) => {
      (async () => {
        try {
          while (!writer.closed) {
            const r = await it.next();
            if (r.done || writer.closed) break;
            writer.write(format(r.value));
          }
          writer.end();
        } catch (e) {
          writer.drop(e as Error);
        }
      })();
    },
  });
  return response;
}

export function formatData(payload: string): string {
  return payload.split("\n").map((l) => `data: ${l}`).join("\n") + "\n\n";
}

/** A timer shared by many streams' coalesced flushes. */
export type FlushTicker = { later(f: () => void): void; cancel(f: () => void): void };

/**
 * One timer for all SSE streams of a router: a stream that wrote too recently leaves its flush
 * here, and one tick runs every such flush (no timer per stream, none while nothing waits).
 */
export function flushTicker(ms: number): FlushTicker {
  const due = new Set<() => void>();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const run = () => {
    timer = undefined;
    const fns = [...due];
    due.clear();
    for (const f of fns) f();
  };
  return {
    later(f) {
      due.add(f);
      timer ??= setTimeout(run, ms);
    },
    cancel(f) {
      due.delete(f);
      if (due.size === 0 && timer !== undefined) {
        clearTimeout(timer);
        timer = undefined;
      }
    },
  };
}

function concat(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** `HEARTH_SSE_BUFFER_SIZE` as bytes, or undefined when unset; a bad value throws. */
export function sseBufferLimitFromEnv(env: Record<string, string | undefined>): number | undefined {
  const raw = env.HEARTH_SSE_BUFFER_SIZE;
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) < 1024) {
    throw new Error(
      `HEARTH_SSE_BUFFER_SIZE=${raw}: must be a whole number of bytes, at least 1024`,
    );
  }
  return Number(raw);
}
