/**
 * Server-sent events from an async iterable of payloads. Payloads are pumped eagerly into the
 * response stream and the bytes not yet taken by the client are counted: a client that falls more
 * than `bufferLimit` bytes behind (`HEARTH_SSE_BUFFER_SIZE`) is dropped, so a stalled reader can
 * never make the server hold an unbounded backlog. When the client goes away (or is dropped), the
 * iterator is closed and `onCancel` runs at once, which is what frees the engine's sequence.
 *
 * @example
 * ```ts
 * import { sseResponse } from "./sse.ts";
 * return sseResponse((async function* () { yield JSON.stringify({ a: 1 }); yield "[DONE]"; })());
 * ```
 * @module
 */

const encoder = new TextEncoder();

export type SseOptions = {
  /** Bytes a client may have buffered before it is dropped (default: unbounded). */
  bufferLimit?: number;
  /** Called once when the client disconnects or is dropped. */
  onCancel?: () => void;
  /** Formats one payload into wire bytes (default: a data-only message). */
  format?: (payload: string) => string;
  headers?: Record<string, string>;
};

/** Each yielded string becomes one `data:` message (multi-line payloads are split per line). */
export function sseResponse(payloads: AsyncIterable<string>, opts: SseOptions = {}): Response {
  const it = payloads[Symbol.asyncIterator]();
  const limit = opts.bufferLimit ?? Infinity;
  const format = opts.format ?? formatData;
  let done = false;
  const stop = () => {
    if (done) return;
    done = true;
    opts.onCancel?.();
    void it.return?.();
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      (async () => {
        try {
          while (!done) {
            const r = await it.next();
            if (r.done || done) break;
            controller.enqueue(encoder.encode(format(r.value)));
            // With a zero high-water mark, -desiredSize is exactly the bytes still queued.
            if (-(controller.desiredSize ?? 0) > limit) {
              stop();
              controller.error(new Error("SSE client fell too far behind and was dropped"));
              return;
            }
          }
          if (!done) controller.close();
          done = true;
        } catch (e) {
          stop();
          try {
            controller.error(e);
          } catch { /* already errored */ }
        }
      })();
    },
    cancel() {
      stop();
    },
  }, new ByteLengthQueuingStrategy({ highWaterMark: 0 }));
  return new Response(body, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      "x-accel-buffering": "no",
      ...opts.headers,
    },
  });
}

export function formatData(payload: string): string {
  return payload.split("\n").map((l) => `data: ${l}`).join("\n") + "\n\n";
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
