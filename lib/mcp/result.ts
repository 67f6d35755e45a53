/**
 * Turns an MCP `tools/call` result into the one string a model is shown. Text items are kept as
 * text; binary items (image, audio, embedded resources) become a short placeholder, because a model
 * fed raw base64 learns nothing and burns its context; `structuredContent` is shown as JSON only when
 * there is no text (servers are asked to mirror it in text anyway). The result is capped in UTF-8 bytes
 * so that one tool cannot blow the context window. It is data: nothing here interprets or runs it.
 *
 * @example
 * ```ts
 * import { capUtf8, formatToolResult } from "./result.ts";
 * formatToolResult({ content: [{ type: "text", text: "5" }] }); // "5"
 * formatToolResult({ content: [{ type: "image", data: "iVBO", mimeType: "image/png" }] });
 * // "[image/png, 3 bytes]"
 * capUtf8("héllo", 2); // { text: "h\n[truncated: 5 bytes more]", truncated: true }
 * ```
 * @module
 */

/** Decoded size of base64 data, without decoding it. */
export function base64Bytes(data: string): number {
  const clean = data.replace(/[^A-Za-z0-9+/=_-]/g, "");
  const pad = clean.endsWith("==") ? 2 : clean.endsWith("=") ? 1 : 0;
  return Math.max(0, Math.floor(clean.length * 3 / 4) - pad);
}

const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

function placeholder(item: Record<string, unknown>): string {
  const str = (v: unknown) => (typeof v === "string" ? v : undefined);
  switch (item.type) {
    case "image":
    case "audio": {
      const mime = str(item.mimeType) ?? item.type;
      return `[${mime}, ${base64Bytes(str(item.data) ?? "")} bytes]`;
    }
    case "resource": {
      const r =
        (typeof item.resource === "object" && item.resource !== null
          ? item.resource
          : {}) as Record<string, unknown>;
      const mime = str(r.mimeType) ?? "resource";
      const size = str(r.text) !== undefined
        ? utf8Bytes(str(r.text)!)
        : base64Bytes(str(r.blob) ?? "");
      return `[resource ${str(r.uri) ?? "(no uri)"}: ${mime}, ${size} bytes]`;
    }
    case "resource_link":
      return `[resource link ${str(item.uri) ?? "(no uri)"}${
        str(item.mimeType) ? `: ${str(item.mimeType)}` : ""
      }]`;
    default:
      return `[${typeof item.type === "string" ? item.type : "unknown"} content]`;
  }
}

/** The text of a `tools/call` result (uncapped). Accepts the legacy `{toolResult}` shape too. */
export function formatToolResult(result: Record<string, unknown>): string {
  const content = Array.isArray(result.content) ? result.content : [];
  const parts: string[] = [];
  let hasText = false;
  for (const raw of content) {
    if (typeof raw !== "object" || raw === null) continue;
    const item = raw as Record<string, unknown>;
    if (item.type === "text" && typeof item.text === "string") {
      hasText = true;
      parts.push(item.text);
    } else {
      parts.push(placeholder(item));
    }
  }
  if (!hasText && result.structuredContent !== undefined) {
    parts.push(JSON.stringify(result.structuredContent));
  }
  if (parts.length === 0 && "toolResult" in result) parts.push(JSON.stringify(result.toolResult));
  return parts.join("\n");
}

/**
 * Caps `text` at `maxBytes` of UTF-8, cut on a character boundary, with a note of how much was cut.
 * The note is outside the budget: it is what tells the model the answer is incomplete.
 */
export function capUtf8(text: string, maxBytes: number): { text: string; truncated: boolean } {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= maxBytes) return { text, truncated: false };
  let cut = Math.max(0, Math.floor(maxBytes));
  // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (bytes[cut] & 0xc0) === 0x80) cut--;
  const kept = new TextDecoder().decode(bytes.subarray(0, cut));
  return { text: `${kept}\n[truncated: ${bytes.length - cut} bytes more]`, truncated: true };
}
