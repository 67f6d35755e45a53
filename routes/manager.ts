/**
 * The manager's own HTTP surface: `GET /api/manager/instances` (each watched worker's status,
 * sessions and latest message, as its watcher last saw them), `GET /api/manager/events` (the same
 * document as a data-only server-sent event stream: one at once, then one after every change,
 * coalesced to at most one per {@link EVENTS_COALESCE_MS}; a `: ping` comment every 15 s),
 * `GET /health`, and the web UI's manager page at `/` and `/manager` with its assets (read from
 * `ui/` on first request). With `apiKey` set, every route but `/health` and the page and its
 * assets needs `Authorization: Bearer KEY` or `x-api-key: KEY` (the page asks for the key when the
 * API answers 401). Errors use the agent API's shape, `{"error":"CODE","message":"..."}`.
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
import { loadUiAssets, MANAGER_PAGES, uiRoutes } from "./ui.ts";

export type ManagerRouteOptions = {
  /** Protects every route but `/health` and the page. */
  apiKey?: string;
};

/** The longest a change waits before the event stream sends the new snapshot. */
export const EVENTS_COALESCE_MS = 100;
const PING_MS = 15_000;

/** The routes, plus `close()` to end open event streams (a server shuts down only after them). */
export type ManagerApp = Hono & { close(): void };

const PAGE_PATHS = new Set(MANAGER_PAGES.map((p) => `/${p.path}`));
const isUiPath = (path: string) => PAGE_PATHS.has(path) || path.startsWith("/assets/");

export function managerRoutes(
  watchers: readonly WorkerWatcher[],
  opts: ManagerRouteOptions = {},
): ManagerApp {
  const app = new Hono();
  const document = () => ({ instances: watchers.map((w) => w.snapshot()) });
  // The UI files are read on the first page request, so a manager nobody looks at reads none.
  let ui: Promise<Hono> | undefined;
  const uiApp = () =>
    ui ??= loadUiAssets().then(
      (assets) => uiRoutes(assets, { pages: MANAGER_PAGES }),
      (e) => {
        ui = undefined;
        throw e;
      },
    );
  const streams = new Set<() => void>();
  let closing = false;

  app.use("*", async (c, next) => {
    if (!opts.apiKey || c.req.path === "/health") return await next();
    if ((c.req.method === "GET" || c.req.method === "HEAD") && isUiPath(c.req.path)) {
      return await next();
    }
    const bearer = c.req.header("authorization")?.match(/^Bearer\s+(.+)$/i)?.[1];
    const key = bearer ?? c.req.header("x-api-key");
    if (key === opts.apiKey) return await next();
    return c.json(
      { error: "UNAUTHORIZED", message: key ? "Incorrect API key provided." : "Missing API key." },
      401,
    );
  });
  app.get("/health", (c) => c.json({ status: "ok", workers: watchers.length }));
  app.get("/api/manager/instances", (c) => c.json(document()));
  app.get("/api/manager/events", (c) => {
    if (closing) {
      return c.json({ error: "SHUTTING_DOWN", message: "the manager is shutting down" }, 503);
    }
    const enc = new TextEncoder();
    let end = () => {};
    const body = new ReadableStream<Uint8Array>({
      start(ctrl) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const send = (text: string) => {
          try {
            ctrl.enqueue(enc.encode(text));
          } catch {
            end();
          }
        };
        const flush = () => {
          timer = undefined;
          send(`data: ${JSON.stringify(document())}\n\n`);
        };
        const onChange = () => {
          timer ??= setTimeout(flush, EVENTS_COALESCE_MS);
        };
        const unsubscribe = watchers.map((w) => w.subscribe(onChange));
        const ping = setInterval(() => send(": ping\n\n"), PING_MS);
        end = () => {
          if (!streams.delete(end)) return;
          clearTimeout(timer);
          clearInterval(ping);
          for (const u of unsubscribe) u();
          try {
            ctrl.close();
          } catch { /* the client is gone */ }
        };
        streams.add(end);
        send(": connected\n\n");
        flush();
      },
      cancel: () => end(),
    });
    return new Response(body, {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        "x-accel-buffering": "no",
      },
    });
  });
  app.on(["GET", "HEAD"], [...PAGE_PATHS, "/assets/*"], async (c) => {
    return (await uiApp()).fetch(c.req.raw);
  });
  for (const path of ["/health", "/api/manager/instances", "/api/manager/events"]) {
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
  return Object.assign(app, {
    close() {
      closing = true;
      for (const end of [...streams]) end();
    },
  });
}
