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
import { embeddingsRoutes } from "./embeddings.ts";
import { anthropicError, openaiError } from "./errors.ts";
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

/**
 * The surfaces beside inference. Mutable: `main.ts` fills `sessions` and `video` once their
 * services are up, and until then their paths answer 503 instead of 404.
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
};

export function newSurfaces(opts: FanoutOptions = {}): Surfaces {
  const bus = createBus();
  return { bus, fanout: createFanout(bus, opts) };
}

const googleError = (c: Context, code: 403 | 404 | 500 | 503, status: string, message: string) =>
  c.json({ error: { code, message, status } }, code);

/** Paths that stay open when `--api-key` is set (the split's route checks its own token). */
const OPEN_PATHS = new Set(["/health", "/v1/models", PD_PATH]);

const isAnthropic = (c: Context) => c.req.path.startsWith("/v1/messages");
const isGoogle = (c: Context) => c.req.path.startsWith("/v1beta/");
const isAgentChannel = (c: Context) => c.req.path.startsWith("/api/") || c.req.path === "/ws";
/** The web UI's static pages: open, so a browser can load them and then ask for the key. */
const isUi = (c: Context) => c.req.path === "/ui" || c.req.path.startsWith("/ui/");
/** Where a browser cannot set headers (WebSocket): the key may come as `?api_key=`. */
const takesQueryKey = (c: Context) => c.req.path === "/ws";

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
  app.use("*", async (c, next) => {
    // The video API checks its own keys (`x-goog-api-key`), in Google's error envelope.
    if (!state.apiKey || OPEN_PATHS.has(c.req.path) || isGoogle(c) || isUi(c)) return await next();
    const bearer = c.req.header("authorization")?.match(/^Bearer\s+(.+)$/i)?.[1];
    const key = bearer ?? c.req.header("x-api-key") ??
      (takesQueryKey(c) ? c.req.query("api_key") : undefined);
    if (key === state.apiKey) return await next();
    const message = key ? "Incorrect API key provided." : "Missing API key.";
    if (isAnthropic(c)) return anthropicError(401, "authentication_error", message);
    if (isAgentChannel(c)) return c.json({ error: "UNAUTHORIZED", message }, 401);
    return openaiError(c, 401, message, { type: "authentication_error", code: "invalid_api_key" });
  });
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
  app.all("/api/sessions", sessions);
  app.all("/api/sessions/*", sessions);
  app.all("/api/messages/*", sessions);
  app.all("/api/agents", sessions);
  app.all("/api/orchestrations", sessions);
  app.all("/api/orchestrations/*", sessions);
  app.all("/api/memory", sessions);
  app.all("/api/memory/*", sessions);
  app.all("/v1beta/*", (c) => {
    if (surfaces.video) return surfaces.video.fetch(c.req.raw, c.env);
    if (surfaces.videoDisabled) {
      return googleError(c, 403, "PERMISSION_DENIED", surfaces.videoDisabled);
    }
    return googleError(c, 503, "UNAVAILABLE", "the video service is starting; retry shortly");
  });
  app.route("/", opsRoutes(state));
  app.route("/", tokenRoutes(state));
  app.route("/", openaiRoutes(state));
  app.route("/", embeddingsRoutes(state, { threads: state.threads }));
  app.route("/", anthropicRoutes(state));
  app.route("/", responsesRoutes(state));
  app.notFound((c) => {
    const message = `no route for ${c.req.method} ${c.req.path}`;
    if (isAnthropic(c)) return anthropicError(404, "not_found_error", message);
    if (isAgentChannel(c)) return c.json({ error: "NOT_FOUND", message }, 404);
    return openaiError(c, 404, message, { type: "not_found_error" });
  });
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    const message = `internal error: ${err.message}`;
    if (isAnthropic(c)) return anthropicError(500, "api_error", message);
    if (isGoogle(c)) return googleError(c, 500, "INTERNAL", message);
    if (isAgentChannel(c)) return c.json({ error: "INTERNAL", message }, 500);
    return openaiError(c, 500, message);
  });
  return app;
}
