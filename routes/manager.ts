/**
 * The manager's own HTTP surface: `GET /api/manager/instances` (each watched worker's status,
 * sessions and latest message, as its watcher last saw them) and `GET /health`. With `apiKey` set,
 * every route but `/health` needs `Authorization: Bearer KEY` or `x-api-key: KEY`. Errors use the
 * agent API's shape, `{"error":"CODE","message":"..."}`.
 *
 * @example
 * ```ts
 * import { managerRoutes } from "./manager.ts";
 * import { watchWorker } from "../lib/manager/instances.ts";
 * const watchers = [watchWorker({ url: "http://127.0.0.1:8000" })];
 * Deno.serve({ port: 8002 }, managerRoutes(watchers, { apiKey: "secret" }).fetch);
 * ```
 * @module
 */
import { Hono } from "hono";
import type { WorkerWatcher } from "../lib/manager/instances.ts";

export type ManagerRouteOptions = {
  /** Protects every route but `/health`. */
  apiKey?: string;
};

export function managerRoutes(
  watchers: readonly WorkerWatcher[],
  opts: ManagerRouteOptions = {},
): Hono {
  const app = new Hono();
  app.use("*", async (c, next) => {
    if (!opts.apiKey || c.req.path === "/health") return await next();
    const bearer = c.req.header("authorization")?.match(/^Bearer\s+(.+)$/i)?.[1];
    const key = bearer ?? c.req.header("x-api-key");
    if (key === opts.apiKey) return await next();
    return c.json(
      { error: "UNAUTHORIZED", message: key ? "Incorrect API key provided." : "Missing API key." },
      401,
    );
  });
  app.get("/health", (c) => c.json({ status: "ok", workers: watchers.length }));
  app.get("/api/manager/instances", (c) => {
    return c.json({ instances: watchers.map((w) => w.snapshot()) });
  });
  for (const path of ["/health", "/api/manager/instances"]) {
    app.all(
      path,
      (c) =>
        c.json({ error: "METHOD_NOT_ALLOWED", message: `${c.req.method} ${path}: use GET` }, 405, {
          allow: "GET",
        }),
    );
  }
  app.notFound((c) =>
    c.json({ error: "NOT_FOUND", message: `no route for ${c.req.method} ${c.req.path}` }, 404)
  );
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return c.json({ error: "INTERNAL", message: `internal error: ${err.message}` }, 500);
  });
  return app;
}
