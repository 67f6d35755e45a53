/**
 * The one API-key guard, for the inference server and the manager: a request carries the key as
 * `Authorization: Bearer KEY` or `x-api-key: KEY` (what the OpenAI and Anthropic SDKs send), or as
 * `?api_key=` where a browser cannot set headers (WebSocket). Which paths stay open and the shape
 * of the 401 belong to the caller, since each surface answers in its own API's error format.
 *
 * @example
 * ```ts
 * import { Hono } from "hono";
 * import { apiKeyGuard } from "./auth.ts";
 * const app = new Hono();
 * app.use("*", apiKeyGuard({
 *   key: "secret",
 *   open: (c) => c.req.path === "/health",
 *   deny: (c, message) => c.json({ error: "UNAUTHORIZED", message }, 401),
 * }));
 * ```
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";

export type ApiKeyGuardOptions = {
  /** The key; undefined leaves every path open. */
  key: string | undefined;
  /** Paths that need no key. */
  open?: (c: Context) => boolean;
  /** Paths that may carry the key as `?api_key=`. */
  queryKey?: (c: Context) => boolean;
  /** The 401 in the surface's shape; `message` says whether the key was missing or wrong. */
  deny: (c: Context, message: string) => Response;
};

/** The key a request presents, if any. */
export function presentedKey(c: Context, allowQuery = false): string | undefined {
  const bearer = c.req.header("authorization")?.match(/^Bearer\s+(.+)$/i)?.[1];
  return bearer ?? c.req.header("x-api-key") ?? (allowQuery ? c.req.query("api_key") : undefined);
}

export function apiKeyGuard(o: ApiKeyGuardOptions): MiddlewareHandler {
  return async (c, next) => {
    if (!o.key || o.open?.(c)) return await next();
    const key = presentedKey(c, o.queryKey?.(c) ?? false);
    if (key === o.key) return await next();
    return o.deny(c, key ? "Incorrect API key provided." : "Missing API key.");
  };
}
