/**
 * `x-hearth-ignored-fields`: routes note the request fields they accepted without acting on
 * them (hints, metadata, unknown keys, tools of types the server cannot run); one middleware
 * puts them on the response header and in the log (the field policy of docs/ARCHITECTURE.md).
 *
 * @example
 * ```ts
 * import { ignoredFieldsHeader, noteIgnored } from "./ignored.ts";
 * app.use("*", ignoredFieldsHeader);
 * app.post("/x", (c) => { noteIgnored(c, ["metadata"]); return c.json({}); });
 * ```
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { ignoredHeader, logIgnored, relaxedHeaders } from "../lib/chat/fields.ts";

const noted = new WeakMap<Request, string[]>();
const relaxedOf = new WeakMap<Request, { relaxed: string[]; checked: string[] }>();

/**
 * Names what the call grammar of this request's turn relaxed of its tools' schemas
 * (`x-hearth-relaxed-schema`, `x-hearth-checked-schema`).
 */
export function noteRelaxed(
  c: Context,
  checks: { relaxed: string[]; checked: string[] } | undefined,
): void {
  if (checks && (checks.relaxed.length || checks.checked.length)) relaxedOf.set(c.req.raw, checks);
}

/** Adds field names to what this request's response will name as ignored. */
export function noteIgnored(c: Context, fields: string[]): void {
  if (!fields.length) return;
  const have = noted.get(c.req.raw);
  if (have) have.push(...fields);
  else noted.set(c.req.raw, [...fields]);
}

export const ignoredFieldsHeader: MiddlewareHandler = async (c, next) => {
  await next();
  const fields = noted.get(c.req.raw) ?? [];
  const relaxed = relaxedOf.get(c.req.raw);
  if (!fields.length && !relaxed) return;
  const route = `${c.req.method} ${c.req.path}`;
  logIgnored(route, fields);
  const headers = {
    ...ignoredHeader(fields),
    ...(relaxed ? relaxedHeaders(route, relaxed.relaxed, relaxed.checked) : {}),
  };
  for (const [k, v] of Object.entries(headers)) {
    try {
      c.res.headers.set(k, v);
    } catch {
      // Immutable headers (a proxied response): copy it once with the header added.
      const headers = new Headers(c.res.headers);
      headers.set(k, v);
      c.res = new Response(c.res.body, { status: c.res.status, headers });
    }
  }
};
