/**
 * Assembles the Hono application from the route table (routes/table.ts, which lists every method
 * and path): request metrics, the API-key guard (its 401 in the shape of the API being called),
 * every route group's handlers, and the error mapping (unknown route -> 404, uncaught
 * failure -> 500), each in the error shape of the surface asked: OpenAI, Anthropic
 * (`/v1/messages`), Google (`/v1beta`, which checks its own keys) or the agent channel (`/api`).
 *
 * @example
 * ```ts
 * import { createApp } from "./app.ts";
 * Deno.serve({ port: 8000 }, createApp(state).fetch);
 * ```
 * @module
 */
import { type Context, Hono, type Next } from "hono";
import { routePath } from "hono/route";
import { countRequest } from "../lib/engine/metrics.ts";
import type { ServerState } from "./state.ts";
import { anthropicHandlers } from "./anthropic.ts";
import { apiKeyGuard } from "./auth.ts";
import { chatCompletionHandlers } from "./openai_chat.ts";
import { embeddingsHandlers } from "./embeddings.ts";
import { surfaceError, surfaceOf } from "./errors.ts";
import { opsHandlers } from "./ops.ts";
import { openaiHandlers } from "./openai.ts";
import { tokenHandlers } from "./tokens.ts";
import type { EventBus } from "../lib/events/bus.ts";
import { createFanout, type Fanout, type FanoutOptions } from "../lib/events/fanout.ts";
import { createBus } from "../lib/events/bus.ts";
import { eventHandlers } from "./events.ts";
import { ignoredFieldsHeader } from "./ignored.ts";
import { responsesHandlers } from "./responses.ts";
import { PD_PATH } from "../lib/engine/prefill_decode.ts";
import { mountUi, type UiAssets, type UiRouteOptions } from "./ui.ts";
import {
  type Group,
  type Handlers,
  mergeHandlers,
  mountRoutes,
  type Route,
  SERVE_ROUTES,
} from "./table.ts";

/**
 * The surfaces beside inference. `sessions` and `video` may be filled after `createApp` (their
 * services start later; until then their paths answer 503 or 404 with a reason); `pd` and `ui`
 * are read when the app is made.
 */
export type Surfaces = {
  bus: EventBus;
  fanout: Fanout;
  /** Reconnection delay announced to SSE clients. */
  retryMs?: number;
  /**
   * The agents' router (routes/agents.ts): the rows of groups goals, sessions, orchestrations,
   * memory and agents in routes/table.ts (absent: no `--agents-config`).
   */
  sessions?: Hono;
  /** The video service's router (routes/video.ts, group video), once it is up. */
  video?: Hono;
  /** Why the video routes are off (e.g. no keys on a non-loopback host). */
  videoDisabled?: string;
  /** The prefill side of the prefill/decode split (`--pd-config` with role prefill, group pd). */
  pd?: Hono;
  /** The web UI, served under `/ui/`. */
  ui?: { assets: UiAssets; options: UiRouteOptions };
};

export function newSurfaces(opts: FanoutOptions = {}): Surfaces {
  const bus = createBus();
  return { bus, fanout: createFanout(bus, opts) };
}

/** Paths that stay open when `--api-key` is set (the split's route checks its own token). */
const OPEN_PATHS = new Set(["/health", "/v1/models", PD_PATH]);

/** The web UI's static pages: open, so a browser can load them and then ask for the key. */
const isUi = (c: Context) => c.req.path === "/ui" || c.req.path.startsWith("/ui/");

/**
 * Groups whose rows the app hands to a service's own router (which may come after `createApp`),
 * by the handler that does it: the agents' (routes/agents.ts) and the video API's.
 */
export const HANDED_OVER: Readonly<Partial<Record<Group, "agentsService" | "videoService">>> = {
  goals: "agentsService",
  sessions: "agentsService",
  orchestrations: "agentsService",
  memory: "agentsService",
  agents: "agentsService",
  video: "videoService",
};

/**
 * The app of `hearth serve`: the rows of routes/table.ts's `SERVE_ROUTES`, in its order. The
 * agents' and the video rows go to their services' routers (their own errors, key check and body
 * limit), which may come after this call; the prefill route and the UI only where configured.
 */
export function createApp(state: ServerState, surfaces: Surfaces = newSurfaces()): Hono {
  const app = new Hono();
  async function countRequests(c: Context, next: Next) {
    await next();
    const route = routePath(c, -1);
    countRequest(
      state.metrics,
      route === "*" || route === "/*" ? "unmatched" : route,
      c.res.status,
    );
  }
  const guard = apiKeyGuard({
    key: state.apiKey,
    // The video API checks its own keys (`x-goog-api-key`), in Google's error envelope.
    open: (c) => OPEN_PATHS.has(c.req.path) || surfaceOf(c.req.path) === "google" || isUi(c),
    // Where a browser cannot set headers (WebSocket): the key may come as `?api_key=`.
    queryKey: (c) => c.req.path === "/ws",
    deny: (c, message) => surfaceError(c, 401, message),
  });

  const events = eventHandlers(surfaces.bus, {
    fanout: surfaces.fanout,
    retryMs: surfaces.retryMs,
  });
  const { stats } = surfaces.fanout;
  state.channel = () => ({
    listeners: stats.listeners,
    published: surfaces.bus.lastId(),
    dropped: stats.dropped,
    rejected: stats.rejected,
  });
  const agentsService = (c: Context) =>
    surfaces.sessions ? surfaces.sessions.fetch(c.req.raw, c.env) : c.json({
      error: "AGENTS_NOT_CONFIGURED",
      message: "no agents are configured: start the server with --agents-config FILE",
    }, 404);
  const videoService = (c: Context) => {
    if (surfaces.video) return surfaces.video.fetch(c.req.raw, c.env);
    if (surfaces.videoDisabled) return surfaceError(c, 403, surfaces.videoDisabled);
    return surfaceError(c, 503, "the video service is starting; retry shortly");
  };
  const services = { agentsService, videoService };
  // A service's middleware (key check, body limit) runs in its own router, after the hand-over.
  const handedOver = (r: Route) => HANDED_OVER[r.group] !== undefined;
  const handOver: Handlers = Object.fromEntries(
    SERVE_ROUTES.filter((r) => handedOver(r) && !r.middleware)
      .map((r) => [r.handler, services[HANDED_OVER[r.group]!]]),
  );
  const handlers = mergeHandlers(
    { countRequests, ignoredFieldsHeader, apiKeyGuard: guard },
    events,
    handOver,
    opsHandlers(state),
    tokenHandlers(state),
    openaiHandlers(state),
    chatCompletionHandlers(state),
    embeddingsHandlers(state, { threads: state.threads }),
    anthropicHandlers(state),
    responsesHandlers(state),
  );
  mountRoutes(
    app,
    SERVE_ROUTES.filter((r) =>
      r.group !== "pd" && r.group !== "ui" && !(handedOver(r) && r.middleware)
    ),
    handlers,
  );
  // The table's last groups: the prefill route (`--pd-config` role prefill) and the web UI.
  if (surfaces.pd) app.route("/", surfaces.pd);
  if (surfaces.ui) mountUi(app, surfaces.ui.assets, surfaces.ui.options);

  app.notFound((c) => surfaceError(c, 404, `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return surfaceError(c, 500, `internal error: ${err.message}`);
  });
  return app;
}
