/**
 * Server-sent events from an async iterable of payloads. The stream is pull-driven, and when the
 * client goes away the iterator is closed (`return()`), which is what lets the engine drop the
 * sequence before its next decode step.
 *
 * @example
 * ```ts
 * import { sseResponse } from "./sse.ts";
 * return sseResponse((async function* () { yield JSON.stringify({ a: 1 }); yield "[DONE]"; })());
 * ```
 * @module
 */

const encoder = new TextEncoder();

/** Each yielded string becomes one `data:` message (multi-line payloads are split per line). */
export function sseResponse(payloads: AsyncIterable<string>, init: ResponseInit = {}): Response {
  const it = payloads[Symbol.asyncIterator]();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done } = await it.next();
        if (done) controller.close();
        else controller.enqueue(encoder.encode(formatData(value)));
      } catch (e) {
        controller.error(e);
      }
    },
    async cancel() {
      await it.return?.();
    },
  });
  return new Response(body, {
    ...init,
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      "x-accel-buffering": "no",
      ...init.headers,
    },
  });
}

export function formatData(payload: string): string {
  return payload.split("\n").map((l) => `data: ${l}`).join("\n") + "\n\n";
}
