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
/** Tool-schema keywords nothing enforces (JSON pointers with the tool's wire path). */
export const RELAXED_HEADER = "x-hearth-relaxed-schema";
/** Tool-schema keywords enforced by checking the finished call rather than by the grammar. */
export const CHECKED_HEADER = "x-hearth-checked-schema";

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

/**
 * The headers naming what a turn's call grammar relaxed (`relaxed`: enforced by nothing;
 * `checked`: by validating the finished call), and the log line, once per distinct list.
 */
export function relaxedHeaders(
  route: string,
  relaxed: string[],
  checked: string[],
): Record<string, string> {
  const out: Record<string, string> = {};
  const ascii = (xs: string[]) => [...new Set(xs)].join(", ").replace(/[^\x20-\x7e]/g, "?");
  if (relaxed.length) out[RELAXED_HEADER] = ascii(relaxed);
  if (checked.length) out[CHECKED_HEADER] = ascii(checked);
  const line = `${route}: ${relaxed.length ? `not enforced: ${ascii(relaxed)}` : ""}${
    relaxed.length && checked.length ? "; " : ""
  }${checked.length ? `checked on the finished call: ${ascii(checked)}` : ""}`;
  if ((relaxed.length || checked.length) && !logged.has(line)) {
    if (logged.size > 1000) logged.clear();
    logged.add(line);
    console.error(`hearth: tool schemas relaxed in the call grammar on ${line}`);
  }
  return out;
}
