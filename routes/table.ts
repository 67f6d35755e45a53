/**
 * Every method and path Hearth answers, on one screen, as Ollama's `GenerateRoutes` and the block
 * in llama.cpp's `server.cpp` show theirs: {@link SERVE_ROUTES} for `hearth serve` (the
 * `--ui-port` server answers its `ui` rows at the root: {@link UI_PORT_ROUTES}) and
 * {@link MANAGER_ROUTES} for `hearth manager`. Route modules export their handlers by name;
 * {@link mountRoutes} registers rows on a Hono app in table order, which is the order Hono tries
 * them in. `tests/routes_table.test.ts` holds the table against what the apps register and against
 * the README's endpoint list.
 *
 * A row is what Hono itself records for a route: method, path (Hono syntax: `:id` a parameter,
 * `:rest{.+}` one with its pattern, `*` a sub-tree), and the handler, or the middleware that runs
 * before the rows after it. `ALL` rows answer what the rows above them left (405, or a 404 in the
 * surface's own shape) and name the `route` label of `hearth_requests_total` for what they cover.
 * `HEAD` is answered by every `GET` row (Hono runs the GET handler and drops the body); a `HEAD`
 * row marks a handler that skips the body's work itself.
 *
 * @example
 * ```ts ignore
 * import { Hono } from "hono";
 * import { mountRoutes, routesOf, SERVE_ROUTES } from "./table.ts";
 * const app = mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "ops"), opsHandlers(state));
 * await app.request("/health"); // opsHandlers(state).health
 * ```
 * @module
 */
import type { Context, Handler, Hono, MiddlewareHandler } from "hono";
import type { BlankEnv } from "hono/types";

export type Method = "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "ALL";

/** The module a row's handler comes from (the key of its section below). */
export type Group =
  | "app"
  | "events"
  | "goals"
  | "sessions"
  | "orchestrations"
  | "memory"
  | "agents"
  | "video"
  | "ops"
  | "tokens"
  | "openai"
  | "chat"
  | "embeddings"
  | "anthropic"
  | "responses"
  | "pd"
  | "ui"
  | "manager";

export type Route = {
  method: Method;
  path: string;
  group: Group;
  /** The handler's name: its key in the record the group's module exports, and its `name`. */
  handler: string;
  /** Middleware (`app.use`, or before the handler of the same method and path). */
  middleware?: true;
};

/** A handler's context where its row's path has the parameters `K` (`c.req.param(k)`: a string). */
export type ParamContext<K extends string> = Context<BlankEnv, `/:${K}`>;

/** A handler as the table registers it (one parameter: Hono tells middleware by their two). */
export type RouteHandler = (c: Context) => Response | Promise<Response>;

/** A group's handlers (and middleware) by the names its rows use. */
export type Handlers = Readonly<Record<string, RouteHandler | MiddlewareHandler>>;

const row = (method: Method) => (path: string, group: Group, handler: string): Route => ({
  method,
  path,
  group,
  handler,
});
const GET = row("GET");
const HEAD = row("HEAD");
const POST = row("POST");
const PUT = row("PUT");
const DELETE = row("DELETE");
const ALL = row("ALL");
/** Middleware on `path`, for every method unless `method` says one. */
const USE = (path: string, group: Group, handler: string, method: Method = "ALL"): Route => ({
  method,
  path,
  group,
  handler,
  middleware: true,
});

/** `hearth serve`'s API port, in registration order. */
export const SERVE_ROUTES: readonly Route[] = [
  // Every request (routes/app.ts): metrics, x-hearth-ignored-fields, the --api-key check.
  USE("/*", "app", "countRequests"),
  USE("/*", "app", "ignoredFieldsHeader"),
  USE("/*", "app", "apiKeyGuard"),

  // The agent event channel (routes/events.ts): SSE and its WebSocket fallback; else 405.
  GET("/api/events", "events", "eventStream"),
  GET("/ws", "events", "eventSocket"),
  ALL("/api/events", "events", "eventsMethodNotAllowed"),
  ALL("/ws", "events", "socketMethodNotAllowed"),

  // Agents (--agents-config): the app hands the rows of goals, sessions, orchestrations and memory
  // to the agents' own router (routes/agents.ts), made from these rows.
  // Goals (routes/goals.ts).
  POST("/api/sessions/:id/goal", "goals", "createGoal"),
  GET("/api/sessions/:id/goal", "goals", "getGoal"),
  POST("/api/sessions/:id/goal/pause", "goals", "pauseGoal"),
  POST("/api/sessions/:id/goal/resume", "goals", "resumeGoal"),
  POST("/api/sessions/:id/goal/cancel", "goals", "cancelGoal"),
  POST("/api/sessions/:id/goal/done", "goals", "finishGoal"),
  POST("/api/sessions/:id/goal/checkpoint", "goals", "checkpointGoal"),
  // Sessions and messages (routes/sessions.ts).
  GET("/api/agents", "sessions", "listAgents"),
  POST("/api/sessions", "sessions", "createSession"),
  GET("/api/sessions", "sessions", "listSessions"),
  GET("/api/sessions/:id", "sessions", "getSession"),
  DELETE("/api/sessions/:id", "sessions", "deleteSession"),
  POST("/api/sessions/:id/messages", "sessions", "sendMessage"),
  POST("/api/sessions/:id/steer", "sessions", "steerSession"),
  POST("/api/sessions/:id/cancel", "sessions", "cancelSession"),
  POST("/api/sessions/:id/activate", "sessions", "activateSession"),
  POST("/api/sessions/:id/schedule", "sessions", "scheduleMessage"),
  GET("/api/messages/latest", "sessions", "latestMessage"),
  // Orchestrations (routes/orchestrations.ts).
  POST("/api/sessions/:id/orchestrate", "orchestrations", "startOrchestration"),
  GET("/api/orchestrations/:runId", "orchestrations", "getOrchestration"),
  GET("/api/orchestrations", "orchestrations", "listOrchestrations"),
  // Memory (routes/memory.ts); `search` before `:name`, which would take it for a note.
  GET("/api/memory", "memory", "listNotes"),
  GET("/api/memory/search", "memory", "searchNotes"),
  GET("/api/memory/:name", "memory", "getNote"),
  USE("/api/memory/:name", "memory", "noteBodyLimit", "PUT"),
  PUT("/api/memory/:name", "memory", "putNote"),
  DELETE("/api/memory/:name", "memory", "deleteNote"),
  // The rest of the agents' paths: their router, or 404 AGENTS_NOT_CONFIGURED (routes/app.ts).
  ALL("/api/sessions", "agents", "agentsService"),
  ALL("/api/sessions/*", "agents", "agentsService"),
  ALL("/api/messages/*", "agents", "agentsService"),
  ALL("/api/agents", "agents", "agentsService"),
  ALL("/api/orchestrations", "agents", "agentsService"),
  ALL("/api/orchestrations/*", "agents", "agentsService"),
  ALL("/api/memory", "agents", "agentsService"),
  ALL("/api/memory/*", "agents", "agentsService"),

  // Video, Veo-compatible (routes/video.ts): the app hands `/v1beta/*` to the video service's own
  // router once it is up (403 when it is off, 503 while it starts); it checks its own keys.
  USE("/v1beta/*", "video", "videoKeyCheck"),
  POST("/v1beta/models/:rest{.+}", "video", "startOperation"), // `models/CODE:predictLongRunning`
  GET("/v1beta/models/:code/operations/:id", "video", "pollModelOperation"),
  GET("/v1beta/operations/:id", "video", "pollOperation"),
  GET("/v1beta/models/:code/operations", "video", "listOperations"),
  GET("/v1beta/files/*", "video", "videoFile"), // by its last `files/ID`, `:download` too
  HEAD("/v1beta/files/*", "video", "videoFile"),
  GET("/v1beta/media/:name", "video", "signedMedia"),
  HEAD("/v1beta/media/:name", "video", "signedMedia"),
  ALL("/v1beta/*", "video", "videoNotFound"),

  // Health, settings and Prometheus metrics (routes/ops.ts).
  GET("/health", "ops", "health"),
  GET("/props", "ops", "props"),
  GET("/metrics", "ops", "metrics"),
  // vLLM's tokenizer routes (routes/tokens.ts).
  POST("/tokenize", "tokens", "tokenize"),
  POST("/detokenize", "tokens", "detokenize"),
  // OpenAI (routes/openai.ts, openai_chat.ts, embeddings.ts).
  GET("/v1/models", "openai", "listModels"),
  POST("/v1/completions", "openai", "createCompletion"),
  POST("/v1/chat/completions", "chat", "createChatCompletion"),
  POST("/v1/embeddings", "embeddings", "createEmbeddings"),
  // Anthropic Messages (routes/anthropic.ts): a body over the API's 32 MiB is a 413 before reading.
  USE("/v1/messages", "anthropic", "messagesBodyLimit"),
  USE("/v1/messages/*", "anthropic", "messagesBodyLimit"),
  POST("/v1/messages/count_tokens", "anthropic", "countTokens"),
  POST("/v1/messages", "anthropic", "createMessage"),
  // OpenAI Responses (routes/responses.ts).
  POST("/v1/responses", "responses", "createResponse"),
  GET("/v1/responses/:id", "responses", "getResponse"),
  GET("/v1/responses/:id/input_items", "responses", "listInputItems"),
  DELETE("/v1/responses/:id", "responses", "deleteResponse"),

  // The prefill side of the prefill/decode split (--pd-config role prefill, routes/prefill_decode.ts);
  // lib/engine/prefill_decode.ts's PD_PATH is this path.
  POST("/internal/pd/prefill", "pd", "prefill"),

  // The web UI (routes/ui.ts): pages, documents and assets; the --ui-port server's root.
  GET("/ui", "ui", "uiRedirect"),
  GET("/ui/", "ui", "uiPage"),
  HEAD("/ui/", "ui", "uiPage"),
  GET("/ui/agents", "ui", "uiPage"),
  HEAD("/ui/agents", "ui", "uiPage"),
  GET("/ui/video", "ui", "uiPage"),
  HEAD("/ui/video", "ui", "uiPage"),
  GET("/ui/video-rules.json", "ui", "uiDocument"),
  GET("/ui/assets/*", "ui", "uiAsset"),
  HEAD("/ui/assets/*", "ui", "uiAsset"),
];

/** `--ui-port`: the `ui` rows at the root (not the redirect); the rest goes to the API's app. */
export const UI_PORT_ROUTES: readonly Route[] = SERVE_ROUTES
  .filter((r) => r.group === "ui" && r.path.startsWith("/ui/"))
  .map((r) => ({ ...r, path: r.path.slice("/ui".length) }));

/** `hearth manager` (routes/manager.ts). */
export const MANAGER_ROUTES: readonly Route[] = [
  // The --api-key check: not for /health, nor for the page and its assets.
  USE("/*", "manager", "managerKeyGuard"),
  GET("/health", "manager", "managerHealth"),
  GET("/api/manager/instances", "manager", "listInstances"),
  GET("/api/manager/events", "manager", "instanceEvents"),
  // The manager's page and its assets (routes/ui.ts), read from ui/ on the first request.
  GET("/", "ui", "uiPage"),
  HEAD("/", "ui", "uiPage"),
  GET("/manager", "ui", "uiPage"),
  HEAD("/manager", "ui", "uiPage"),
  GET("/assets/*", "ui", "uiAsset"),
  HEAD("/assets/*", "ui", "uiAsset"),
  // Other methods: 405.
  ALL("/health", "manager", "getOnly"),
  ALL("/api/manager/instances", "manager", "getOnly"),
  ALL("/api/manager/events", "manager", "getOnly"),
];

/** The rows of `groups`, in table order. */
export function routesOf(table: readonly Route[], ...groups: Group[]): Route[] {
  return table.filter((r) => groups.includes(r.group));
}

/**
 * Registers `rows` on `app` in order, each with the handler its name picks from `handlers`. A
 * name with no handler is a mistake in the table or the module: it throws.
 */
export function mountRoutes<A extends Hono>(
  app: A,
  rows: readonly Route[],
  handlers: Handlers,
): A {
  for (const r of rows) {
    const h = Object.hasOwn(handlers, r.handler) ? handlers[r.handler] : undefined;
    if (!h) throw new Error(`routes/table.ts: no handler ${r.handler} for ${r.method} ${r.path}`);
    app.on(r.method, r.path, h as Handler);
  }
  return app;
}

/** One record of several modules' handlers; a name two of them use is a mistake: it throws. */
export function mergeHandlers(...parts: Handlers[]): Handlers {
  const out: Record<string, RouteHandler | MiddlewareHandler> = {};
  for (const part of parts) {
    for (const [name, h] of Object.entries(part)) {
      if (Object.hasOwn(out, name)) throw new Error(`routes/table.ts: two handlers ${name}`);
      out[name] = h;
    }
  }
  return out;
}

/**
 * Whether a request path falls on one of `rows`' paths: the same path, or under a `/x/*` row's
 * `/x/` (a path outside the table's own syntax, for dispatch before Hono sees the request).
 */
export function onPaths(rows: readonly Route[]): (path: string) => boolean {
  const exact = new Set(rows.filter((r) => !r.path.endsWith("/*")).map((r) => r.path));
  const trees = rows.filter((r) => r.path.endsWith("/*")).map((r) => r.path.slice(0, -1));
  return (path) => exact.has(path) || trees.some((t) => path.startsWith(t));
}
