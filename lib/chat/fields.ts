/**
 * The field policy every dialect shares (docs/ARCHITECTURE.md, "Inference API and the field policy"): what changes generation is honoured or
 * refused by name; hints, metadata and fields nobody here knows are accepted, and named in the
 * `x-hearth-ignored-fields` response header and in the log, so a client is never refused for a
 * field it was right to send and a person can still see what had no effect.
 *
 * @example
 * ```ts
 * import { ignoredFields, logIgnored } from "./fields.ts";
 * const ignored = ignoredFields({ model: "m", metadata: {}, foo: 1 }, new Set(["model"]));
 * // ["metadata", "foo"]
 * logIgnored("/v1/messages", ignored);
 * ```
 * @module
 */

export const IGNORED_HEADER = "x-hearth-ignored-fields";

/** Top-level keys of `body` that are not in `honoured` (hints and unknown fields alike). */
export function ignoredFields(body: unknown, honoured: ReadonlySet<string>): string[] {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return [];
  return Object.keys(body).filter((k) => !honoured.has(k));
}

const logged = new Set<string>();

/**
 * Logs what a route ignored, once per distinct route and list: agents send the same hints with
 * every request, and one line says as much as a thousand.
 */
export function logIgnored(route: string, ignored: string[]): void {
  if (!ignored.length) return;
  const line = `${route}: ${ignored.join(", ")}`;
  if (logged.has(line)) return;
  if (logged.size > 1000) logged.clear();
  logged.add(line);
  console.error(`hearth: accepted and ignored fields on ${line}`);
}

/** The header value: field names, comma-separated, each at most once. */
export function ignoredHeader(ignored: string[]): Record<string, string> {
  if (!ignored.length) return {};
  // Header values are ASCII; a client's odd key must not make the response fail.
  const value = [...new Set(ignored)].join(", ").replace(/[^\x20-\x7e]/g, "?");
  return { [IGNORED_HEADER]: value };
}
