/**
 * Assembles the Hono application: the API-key guard, every route group, and the error mapping
 * (unknown route -> 404, uncaught failure -> 500, both in OpenAI's error shape).
 *
 * @example
 * ```ts
 * import { createApp } from "./app.ts";
 * Deno.serve({ port: 8000 }, createApp(state).fetch);
 * ```
 * @module
 */
import { Hono } from "hono";
import type { ServerState } from "../lib/engine/state.ts";
import { openaiError } from "./errors.ts";
import { opsRoutes } from "./ops.ts";
import { openaiRoutes } from "./openai.ts";
import { tokenRoutes } from "./tokens.ts";

/** Paths that stay open when `--api-key` is set. */
const OPEN_PATHS = new Set(["/health", "/v1/models"]);

export function createApp(state: ServerState): Hono {
  const app = new Hono();
  app.use("*", async (c, next) => {
    if (!state.apiKey || OPEN_PATHS.has(c.req.path)) return await next();
    const auth = c.req.header("authorization");
    const bearer = auth?.match(/^Bearer\s+(.+)$/i)?.[1];
    const key = bearer ?? c.req.header("x-api-key");
    if (key !== state.apiKey) {
      return openaiError(c, 401, key ? "Incorrect API key provided." : "Missing API key.", {
        type: "authentication_error",
        code: "invalid_api_key",
      });
    }
    await next();
  });
  app.route("/", opsRoutes(state));
  app.route("/", tokenRoutes(state));
  app.route("/", openaiRoutes(state));
  app.notFound((c) =>
    openaiError(c, 404, `no route for ${c.req.method} ${c.req.path}`, { type: "not_found_error" })
  );
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return openaiError(c, 500, `internal error: ${err.message}`);
  });
  return app;
}
