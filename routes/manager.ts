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
import { type Context, Hono } from "hono";
import { routePath } from "hono/route";
import { sseStream, type SseWriter } from "./sse.ts";
import { apiKeyGuard } from "./auth.ts";
import type { WorkerWatcher } from "../lib/manager/instances.ts";
import { loadUiAssets, MANAGER_PAGES, uiHandlers } from "./ui.ts";
import { type Handlers, MANAGER_ROUTES, mountRoutes, onPaths, routesOf } from "./table.ts";

export type ManagerRouteOptions = {
  /** Protects every route but `/health` and the page. */
  apiKey?: string;
  /** Bytes an event-stream client may fall behind before it is dropped (default 1 MiB). */
  bufferLimit?: number;
};

const DEFAULT_MANAGER_BUFFER_LIMIT = 1024 * 1024;

/** The longest a change waits before the event stream sends the new snapshot. */
export const EVENTS_COALESCE_MS = 100;
const PING_MS = 15_000;

/** The routes, plus `close()` to end open event streams (a server shuts down only after them). */
export type ManagerApp = Hono & { close(): void };

const UI_ROWS = routesOf(MANAGER_ROUTES, "ui");
const isUiPath = onPaths(UI_ROWS);

/** The manager's routes (routes/table.ts, `MANAGER_ROUTES`) on its app. */
export function managerRoutes(
  watchers: readonly WorkerWatcher[],
  opts: ManagerRouteOptions = {},
): ManagerApp {
  const { handlers, close } = managerHandlers(watchers, opts);
  const app = mountRoutes(new Hono(), MANAGER_ROUTES, handlers);
  app.notFound((c) =>
    c.json({ error: "NOT_FOUND", message: `no route for ${c.req.method} ${c.req.path}` }, 404)
  );
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return c.json({ error: "INTERNAL", message: `internal error: ${err.message}` }, 500);
  });
  return Object.assign(app, { close });
}

/** The handlers of `MANAGER_ROUTES`, and `close()` to end open event streams. */
export function managerHandlers(
  watchers: readonly WorkerWatcher[],
  opts: ManagerRouteOptions = {},
): { handlers: Handlers; close(): void } {
  const document = () => ({ instances: watchers.map((w) => w.snapshot()) });
  // The UI files are read on the first page request, so a manager nobody looks at reads none.
  let ui: Promise<ReturnType<typeof uiHandlers>> | undefined;
  const uiOf = () =>
    ui ??= loadUiAssets().then(
      (assets) => uiHandlers(assets, { pages: MANAGER_PAGES }, "", UI_ROWS),
      (e) => {
        ui = undefined;
        throw e;
      },
    );
  const streams = new Set<() => void>();
  let closing = false;

  const managerKeyGuard = apiKeyGuard({
    key: opts.apiKey,
    open: (c) =>
      c.req.path === "/health" ||
      ((c.req.method === "GET" || c.req.method === "HEAD") && isUiPath(c.req.path)),
    deny: (c, message) => c.json({ error: "UNAUTHORIZED", message }, 401),
  });
  const managerHealth = (c: Context) => c.json({ status: "ok", workers: watchers.length });
  const listInstances = (c: Context) => c.json(document());
  const instanceEvents = (c: Context) => {
    if (closing) {
      return c.json({ error: "SHUTTING_DOWN", message: "the manager is shutting down" }, 503);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    let ping: ReturnType<typeof setInterval> | undefined;
    let unsubscribe: (() => void)[] = [];
    let writer: SseWriter | undefined;
    const end = () => writer?.end();
    const { response } = sseStream({
      bufferLimit: opts.bufferLimit ?? DEFAULT_MANAGER_BUFFER_LIMIT,
      onStart: (w) => {
        writer = w;
        const flush = () => {
          timer = undefined;
          w.write(`data: ${JSON.stringify(document())}\n\n`);
        };
        const onChange = () => {
          timer ??= setTimeout(flush, EVENTS_COALESCE_MS);
        };
        unsubscribe = watchers.map((x) => x.subscribe(onChange));
        ping = setInterval(() => w.write(": ping\n\n"), PING_MS);
        streams.add(end);
        w.write(": connected\n\n");
        flush();
      },
      onClose: () => {
        streams.delete(end);
        clearTimeout(timer);
        clearInterval(ping);
        for (const u of unsubscribe) u();
      },
    });
    return response;
  };
  const uiPage = async (c: Context) => (await uiOf()).uiPage(c);
  const uiAsset = async (c: Context) => (await uiOf()).uiAsset(c);
  // Its own path in the message: every row it answers is a plain path.
  const getOnly = (c: Context) =>
    c.json(
      { error: "METHOD_NOT_ALLOWED", message: `${c.req.method} ${routePath(c)}: use GET` },
      405,
      { allow: "GET" },
    );
  return {
    handlers: {
      managerKeyGuard,
      managerHealth,
      listInstances,
      instanceEvents,
      uiPage,
      uiAsset,
      getOnly,
    },
    close() {
      closing = true;
      for (const end of [...streams]) end();
    },
  };
}
