/**
 * The pages' SSE reader (ui/assets/sse.js): line endings split across chunks, multi-line data,
 * ids that persist, comments reported apart, and a real streamed body.
 */
import assert from "node:assert/strict";
import { readSse, sseParser } from "../ui/assets/sse.js";

Deno.test("sse: messages, comments and ids across chunk boundaries and line endings", () => {
  const p = sseParser();
  const out = [
    ...p.push(": connected\n\nid: 1\nda"),
    ...p.push('ta: {"a":1}\r'),
    ...p.push("\n\r\ndata: x\ndata: y\r\rid: 7\nevent: ping\ndata\n\n"),
  ];
  assert.deepEqual(out, [
    { comment: "connected" },
    { data: '{"a":1}', event: "message", id: "1" },
    { data: "x\ny", event: "message", id: "1" },
    { data: "", event: "ping", id: "7" },
  ]);
  // A blank line with no data dispatches nothing; a field without a colon has an empty value.
  assert.deepEqual(p.push("id: 9\n\n"), []);
});

Deno.test("sse: readSse over a streamed body", async () => {
  const enc = new TextEncoder();
  const parts = ["data: one\n", "\ndata: [DO", "NE]\n\n"];
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (const part of parts) c.enqueue(enc.encode(part));
      c.close();
    },
  });
  const got = [];
  for await (const m of readSse(body)) got.push(m);
  assert.deepEqual(got.map((m) => "data" in m ? m.data : m.comment), ["one", "[DONE]"]);
});
