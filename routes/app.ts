/**
 * Assembles the Hono application: request metrics, the API-key guard (its 401 in the shape of the
 * API being called), every route group, and the error mapping (unknown route -> 404, uncaught
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
import { type Context, Hono } from "hono";
import { routePath } from "hono/route";
import { countRequest } from "../lib/engine/metrics.ts";
import type { ServerState } from "./state.ts";
import { anthropicRoutes } from "./anthropic.ts";
import { apiKeyGuard } from "./auth.ts";
import { chatCompletionsRoutes } from "./openai_chat.ts";
import { embeddingsRoutes } from "./embeddings.ts";
import { surfaceError, surfaceOf } from "./errors.ts";
import { opsRoutes } from "./ops.ts";
import { openaiRoutes } from "./openai.ts";
import { tokenRoutes } from "./tokens.ts";
import type { EventBus } from "../lib/events/bus.ts";
import { createFanout, type Fanout, type FanoutOptions } from "../lib/events/fanout.ts";
import { createBus } from "../lib/events/bus.ts";
import { eventRoutes } from "./events.ts";
import { ignoredFieldsHeader } from "./ignored.ts";
import { responsesRoutes } from "./responses.ts";
import { PD_PATH } from "../lib/engine/pd.ts";
import { mountUi, type UiAssets, type UiRouteOptions } from "./ui.ts";

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
   * `/api/sessions*`, `/api/messages*`, `/api/agents`, `/api/orchestrations*` and `/api/memory*`
   * (absent: no `--agents-config`).
   */
  sessions?: Hono;
  /** `/v1beta/*` once the video service is up. */
  video?: Hono;
  /** Why the video routes are off (e.g. no keys on a non-loopback host). */
  videoDisabled?: string;
  /** The prefill side of the prefill/decode split (`--pd-config` with role prefill). */
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

/** The agent channel's routes that a service behind `surfaces.sessions` answers. */
const SESSION_PATHS = [
  "/api/sessions",
  "/api/sessions/*",
  "/api/messages/*",
  "/api/agents",
  "/api/orchestrations",
  "/api/orchestrations/*",
  "/api/memory",
  "/api/memory/*",
];

/** The route table: every path the server answers is mounted here. */
export function createApp(state: ServerState, surfaces: Surfaces = newSurfaces()): Hono {
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
  app.use("*", ignoredFieldsHeader);
  app.use(
    "*",
    apiKeyGuard({
      key: state.apiKey,
      // The video API checks its own keys (`x-goog-api-key`), in Google's error envelope.
      open: (c) => OPEN_PATHS.has(c.req.path) || surfaceOf(c.req.path) === "google" || isUi(c),
      // Where a browser cannot set headers (WebSocket): the key may come as `?api_key=`.
      queryKey: (c) => c.req.path === "/ws",
      deny: (c, message) => surfaceError(c, 401, message),
    }),
  );

  // The agent event channel, its sessions and the video operations.
  app.route("/", eventRoutes(surfaces.bus, { fanout: surfaces.fanout, retryMs: surfaces.retryMs }));
  const { stats } = surfaces.fanout;
  state.channel = () => ({
    listeners: stats.listeners,
    published: surfaces.bus.lastId(),
    dropped: stats.dropped,
    rejected: stats.rejected,
  });
  const sessions = (c: Context) =>
    surfaces.sessions ? surfaces.sessions.fetch(c.req.raw, c.env) : c.json({
      error: "AGENTS_NOT_CONFIGURED",
      message: "no agents are configured: start the server with --agents-config FILE",
    }, 404);
  for (const path of SESSION_PATHS) app.all(path, sessions);
  app.all("/v1beta/*", (c) => {
    if (surfaces.video) return surfaces.video.fetch(c.req.raw, c.env);
    if (surfaces.videoDisabled) return surfaceError(c, 403, surfaces.videoDisabled);
    return surfaceError(c, 503, "the video service is starting; retry shortly");
  });

  // Inference: health and metrics, vLLM's tokenizer, OpenAI, Anthropic.
  app.route("/", opsRoutes(state));
  app.route("/", tokenRoutes(state));
  app.route("/", openaiRoutes(state));
  app.route("/", chatCompletionsRoutes(state));
  app.route("/", embeddingsRoutes(state, { threads: state.threads }));
  app.route("/", anthropicRoutes(state));
  app.route("/", responsesRoutes(state));
  if (surfaces.pd) app.route("/", surfaces.pd);

  if (surfaces.ui) mountUi(app, surfaces.ui.assets, surfaces.ui.options);

  app.notFound((c) => surfaceError(c, 404, `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return surfaceError(c, 500, `internal error: ${err.message}`);
  });
  return app;
}
