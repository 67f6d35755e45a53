/**
 * Assembles the Hono application: request metrics, the API-key guard (its 401 in the shape of the
 * API being called), every route group, and the error mapping (unknown route -> 404, uncaught
 * failure -> 500).
 *
 * @example
 * ```ts
 * import { createApp } from "./app.ts";
 * Deno.serve({ port: 8000 }, createApp(state).fetch);
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { routePath } from "hono/route";
import { countRequest } from "../lib/engine/metrics.ts";
import type { ServerState } from "../lib/engine/state.ts";
import { anthropicRoutes } from "./anthropic.ts";
import { embeddingsRoutes } from "./embeddings.ts";
import { anthropicError, openaiError } from "./errors.ts";
import { opsRoutes } from "./ops.ts";
import { openaiRoutes } from "./openai.ts";
import { tokenRoutes } from "./tokens.ts";

/** Paths that stay open when `--api-key` is set. */
const OPEN_PATHS = new Set(["/health", "/v1/models"]);

const isAnthropic = (c: Context) => c.req.path.startsWith("/v1/messages");

export function createApp(state: ServerState): Hono {
  const app = new Hono();
  app.use("*", async (c, next) => {
    await next();
    const route = routePath(c, -1);
    countRequest(
      state.metrics,
      route === "*" || route === "/*" ? "unmatched" : route,
      c.res.status,
    );
  });
  app.use("*", async (c, next) => {
    if (!state.apiKey || OPEN_PATHS.has(c.req.path)) return await next();
    const bearer = c.req.header("authorization")?.match(/^Bearer\s+(.+)$/i)?.[1];
    const key = bearer ?? c.req.header("x-api-key");
    if (key === state.apiKey) return await next();
    const message = key ? "Incorrect API key provided." : "Missing API key.";
    if (isAnthropic(c)) return anthropicError(401, "authentication_error", message);
    return openaiError(c, 401, message, { type: "authentication_error", code: "invalid_api_key" });
  });
  app.route("/", opsRoutes(state));
  app.route("/", tokenRoutes(state));
  app.route("/", openaiRoutes(state));
  app.route("/", embeddingsRoutes(state, { threads: state.threads }));
  app.route("/", anthropicRoutes(state));
  app.notFound((c) => {
    const message = `no route for ${c.req.method} ${c.req.path}`;
    if (isAnthropic(c)) return anthropicError(404, "not_found_error", message);
    return openaiError(c, 404, message, { type: "not_found_error" });
  });
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    const message = `internal error: ${err.message}`;
    if (isAnthropic(c)) return anthropicError(500, "api_error", message);
    return openaiError(c, 500, message);
  });
  return app;
}
