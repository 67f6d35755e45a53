/**
 * The agent manager endpoints (docs/ARCHITECTURE.md, "Event channel") over the agent service: the configured agents
 * (`GET /api/agents`: names and providers only), sessions, messages, steering, cancel, activation,
 * schedules and the latest message. Bodies are strict JSON objects
 * checked with Zod; every refusal is `{"error": CODE, "message": "..."}` with its status (400
 * `BAD_REQUEST`, 404 `NOT_FOUND`, 409 `NOT_RUNNING` / `AGENT_UNAVAILABLE`). Requests name agents,
 * never commands: what runs is fixed by `--agents-config`.
 *
 * @example
 * ```ts
 * import { sessionRoutes } from "./sessions.ts";
 * app.route("/", sessionRoutes(await createAgentService({ bus, dataDir, config })));
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { z } from "zod";
import {
  type AgentService,
  AgentServiceError,
  MAX_SCHEDULE_SECONDS,
  MAX_TEXT_BYTES,
  MAX_TEXT_CHARS,
  publicAgents,
} from "../lib/agents/sessions.ts";
import { parseBody, type Parsed } from "./errors.ts";
import { mountRoutes, type ParamContext, routesOf, SERVE_ROUTES } from "./table.ts";

const encoder = new TextEncoder();
// A prompt may travel as one argv string: no NUL, and within Linux's 128 KiB per argument.
const text = z.string().min(1, "must not be empty").max(MAX_TEXT_CHARS)
  .refine((t) => !t.includes("\0"), "must not contain NUL characters")
  .refine(
    (t) => encoder.encode(t).length <= MAX_TEXT_BYTES,
    `must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`,
  );

const createSchema = z.strictObject({
  agent: z.string().min(1),
  cwd: z.string().min(1).optional(),
});
const textSchema = z.strictObject({ text });
const cancelSchema = z.strictObject({ clearQueue: z.boolean().optional() });
const scheduleSchema = z.strictObject({
  delaySeconds: z.number().min(0).max(MAX_SCHEDULE_SECONDS),
  text,
});

export function apiError(
  c: Context,
  status: ContentfulStatusCode,
  code: string,
  message: string,
): Response {
  return c.json({ error: code, message }, status);
}

/** Runs `f`, turning the service's refusals into their HTTP error. */
export async function guard(c: Context, f: () => Promise<Response> | Response): Promise<Response> {
  try {
    return await f();
  } catch (err) {
    if (err instanceof AgentServiceError) return apiError(c, err.status, err.code, err.message);
    throw err;
  }
}

/** The request's JSON body checked against `schema`; refusals are 400 `BAD_REQUEST`. */
export function body<S extends z.ZodType>(c: Context, schema: S): Promise<Parsed<z.output<S>>> {
  return parseBody(c, schema, (status, message) => apiError(c, status, "BAD_REQUEST", message));
}

/** The session routes (routes/table.ts, group `sessions`) on their own app. */
export function sessionRoutes(service: AgentService): Hono {
  const app = mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "sessions"), sessionHandlers(service));
  // Used when this router serves requests itself (the app may mount it with its own handlers).
  app.notFound((c) => apiError(c, 404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return apiError(c, 500, "INTERNAL", `internal error: ${err.message}`);
  });
  return app;
}

/** The handlers of the `sessions` rows of routes/table.ts. */
export function sessionHandlers(service: AgentService) {
  const listAgents = (c: Context) => c.json({ agents: publicAgents(service.config) });

  const createSession = (c: Context) =>
    guard(c, async () => {
      const b = await body(c, createSchema);
      if (!b.ok) return b.response;
      return c.json(await service.createSession(b.data), 201);
    });

  const listSessions = (c: Context) =>
    c.json({ sessions: service.listSessions(), activeSessionId: service.activeSessionId() });

  const getSession = (c: ParamContext<"id">) =>
    guard(c, () => c.json(service.getSession(c.req.param("id"))));

  const deleteSession = (c: ParamContext<"id">) =>
    guard(c, async () => {
      await service.deleteSession(c.req.param("id"));
      return c.body(null, 204);
    });

  const sendMessage = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id); // 404 before 400: the session is the resource
      const b = await body(c, textSchema);
      if (!b.ok) return b.response;
      return c.json(service.sendMessage(id, b.data.text), 202);
    });

  const steerSession = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id);
      const b = await body(c, textSchema);
      if (!b.ok) return b.response;
      return c.json(await service.steer(id, b.data.text), 202);
    });

  const cancelSession = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id);
      // The body is optional: none means no options.
      let opts: z.output<typeof cancelSchema> = {};
      if ((await c.req.text()).trim()) {
        const b = await body(c, cancelSchema);
        if (!b.ok) return b.response;
        opts = b.data;
      }
      return c.json(service.cancel(id, opts), 202);
    });

  const activateSession = (c: ParamContext<"id">) =>
    guard(c, () => c.json(service.activate(c.req.param("id"))));

  const scheduleMessage = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id);
      const b = await body(c, scheduleSchema);
      if (!b.ok) return b.response;
      return c.json(service.schedule(id, b.data.delaySeconds, b.data.text), 202);
    });

  const latestMessage = (c: Context) =>
    guard(c, () => {
      const id = c.req.query("sessionId");
      return c.json(service.latestMessage(id === undefined || id === "" ? undefined : id));
    });

  return {
    listAgents,
    createSession,
    listSessions,
    getSession,
    deleteSession,
    sendMessage,
    steerSession,
    cancelSession,
    activateSession,
    scheduleMessage,
    latestMessage,
  };
}
