/**
 * Reads a Server-Sent Events body (a `fetch` response's stream) into messages, per the HTML
 * spec's parsing rules: lines end in CRLF, LF or CR; `data:` lines join with "\n"; `id:` and
 * `event:`; comment lines (`: ...`) are reported separately so a caller can tell "opened"; a
 * message is dispatched at a blank line. Used by the chat page (streamed completions) and the event
 * channel (with headers an `EventSource` cannot send).
 *
 * @example
 * ```js
 * import { readSse } from "./sse.js";
 * const res = await fetch("/v1/chat/completions", { method: "POST", body, headers });
 * for await (const m of readSse(res.body)) {
 *   if (m.data === "[DONE]") break;
 *   console.log(JSON.parse(m.data));
 * }
 * ```
 * @module
 */

/**
 * @typedef {{ data: string, event: string, id: string | undefined, comment?: undefined }} SseMessage
 * @typedef {{ comment: string }} SseComment
 */

/**
 * Incremental parser: feed text chunks, get back complete messages and comments.
 * @returns {{ push(text: string): Array<SseMessage | SseComment> }}
 */
export function sseParser() {
  let buffer = "";
  /** @type {string[]} */
  let data = [];
  let event = "";
  /** @type {string | undefined} */
  let id;
  let pendingCR = false;
  return {
    push(text) {
      /** @type {Array<SseMessage | SseComment>} */
      const out = [];
      // A CR at the end of the last chunk may be the first half of a CRLF.
      if (pendingCR && text.startsWith("\n")) text = text.slice(1);
      pendingCR = false;
      buffer += text;
      let start = 0;
      for (let i = 0; i < buffer.length; i++) {
        const ch = buffer[i];
        if (ch !== "\n" && ch !== "\r") continue;
        const line = buffer.slice(start, i);
        if (ch === "\r") {
          if (i + 1 < buffer.length) {
            if (buffer[i + 1] === "\n") i++;
          } else pendingCR = true;
        }
        start = i + 1;
        if (line === "") {
          if (data.length > 0) out.push({ data: data.join("\n"), event: event || "message", id });
          data = [];
          event = "";
          continue;
        }
        if (line.startsWith(":")) {
          out.push({ comment: line.slice(1).trimStart() });
          continue;
        }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") data.push(value);
        else if (field === "event") event = value;
        else if (field === "id" && !value.includes("\0")) id = value;
      }
      buffer = buffer.slice(start);
      return out;
    },
  };
}

/**
 * Messages and comments of a response body, in order. Ends when the body ends; a dropped
 * connection rejects like the underlying read does.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<SseMessage | SseComment>}
 */
export async function* readSse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = sseParser();
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      yield* parser.push(value);
    }
  } finally {
    reader.releaseLock();
  }
}
