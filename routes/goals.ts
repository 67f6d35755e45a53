/**
 * The goal endpoints (docs/ARCHITECTURE.md, "Goals, orchestration, memory") over lib/agents/goals.ts: `POST /api/sessions/:id/goal` (201),
 * `GET /api/sessions/:id/goal`, `POST /api/sessions/:id/goal/{pause|resume|cancel|done}` and
 * `POST /api/sessions/:id/goal/checkpoint`. Refusals are `{"error": CODE, "message"}` as on the
 * other session routes: 400 `BAD_REQUEST`, 404 `NOT_FOUND` (no session, or no goal), 409
 * `CONFLICT` (a goal already open, or not in the state the action needs).
 *
 * @example
 * ```ts
 * import { goalRoutes } from "./goals.ts";
 * app.route("/", goalRoutes(createGoals({ service, bus }), service));
 * // POST /api/sessions/S/goal {"objective": "make the tests pass", "maxTurns": 10} -> 201
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import {
  type Goals,
  MAX_GOAL_MINUTES,
  MAX_GOAL_TURNS,
  MAX_OBJECTIVE_CHARS,
} from "../lib/agents/goals.ts";
import type { AgentService } from "../lib/agents/sessions.ts";
import { apiError, body, guard } from "./sessions.ts";
import { mountRoutes, type ParamContext, routesOf, SERVE_ROUTES } from "./table.ts";

const noNul = (t: string) => !t.includes("\0");
const maxTurns = z.number().int().min(1).max(MAX_GOAL_TURNS);
const maxMinutes = z.number().positive().max(MAX_GOAL_MINUTES);

const createSchema = z.strictObject({
  objective: z.string().trim().min(1, "must not be empty").max(MAX_OBJECTIVE_CHARS)
    .refine(noNul, "must not contain NUL characters"),
  maxTurns: maxTurns.optional(),
  maxMinutes: maxMinutes.optional(),
});
const resumeSchema = z.strictObject({
  maxTurns: maxTurns.optional(),
  maxMinutes: maxMinutes.optional(),
});
const cancelSchema = z.strictObject({
  reason: z.string().max(2000).refine(noNul, "must not contain NUL characters").optional(),
});
const checkpointSchema = z.strictObject({
  summary: z.string().trim().min(1, "must not be empty").max(2000)
    .refine(noNul, "must not contain NUL characters"),
  evidence: z.array(z.string().min(1).max(4096).refine(noNul, "must not contain NUL characters"))
    .max(20).optional(),
});

/** An optional body: none (or only whitespace) is `{}`. */
async function optionalBody<S extends z.ZodType>(c: Context, schema: S) {
  if (!(await c.req.text()).trim()) return { ok: true as const, data: {} as z.output<S> };
  return await body(c, schema);
}

/** The goal routes (routes/table.ts, group `goals`) on their own app. */
export function goalRoutes(goals: Goals, service: AgentService): Hono {
  const app = mountRoutes(
    new Hono(),
    routesOf(SERVE_ROUTES, "goals"),
    goalHandlers(goals, service),
  );
  app.notFound((c) => apiError(c, 404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`));
  return app;
}

/** The handlers of the `goals` rows of routes/table.ts. */
export function goalHandlers(goals: Goals, service: AgentService) {
  const createGoal = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id); // 404 before 400: the session is the resource
      const b = await body(c, createSchema);
      if (!b.ok) return b.response;
      return c.json(goals.create(id, b.data), 201);
    });

  const getGoal = (c: ParamContext<"id">) => guard(c, () => c.json(goals.get(c.req.param("id"))));

  const pauseGoal = (c: ParamContext<"id">) =>
    guard(c, () => c.json(goals.pause(c.req.param("id"))));

  const resumeGoal = (c: ParamContext<"id">) =>
    guard(c, async () => {
      service.getSession(c.req.param("id"));
      const b = await optionalBody(c, resumeSchema);
      if (!b.ok) return b.response;
      return c.json(goals.resume(c.req.param("id"), b.data));
    });

  const cancelGoal = (c: ParamContext<"id">) =>
    guard(c, async () => {
      service.getSession(c.req.param("id"));
      const b = await optionalBody(c, cancelSchema);
      if (!b.ok) return b.response;
      return c.json(goals.cancel(c.req.param("id"), b.data.reason));
    });

  const finishGoal = (c: ParamContext<"id">) =>
    guard(c, () => c.json(goals.done(c.req.param("id"))));

  const checkpointGoal = (c: ParamContext<"id">) =>
    guard(c, async () => {
      service.getSession(c.req.param("id"));
      const b = await body(c, checkpointSchema);
      if (!b.ok) return b.response;
      return c.json(goals.checkpoint(c.req.param("id"), b.data));
    });

  return {
    createGoal,
    getGoal,
    pauseGoal,
    resumeGoal,
    cancelGoal,
    finishGoal,
    checkpointGoal,
  };
}
