/**
 * The orchestration endpoints (docs/ARCHITECTURE.md, "Goals, orchestration, memory") over lib/agents/orchestrate.ts:
 * `POST /api/sessions/:id/orchestrate {task, planner?, workers?, checker?, maxRounds?}` -> 202 with
 * the run (it goes on in the background; follow it on `/api/events`, topic `orchestrate`),
 * `GET /api/orchestrations/:runId` and `GET /api/orchestrations?sessionId=` -> `{orchestrations}`.
 * Refusals are `{"error": CODE, "message"}` as on the other session routes: 400 `BAD_REQUEST`
 * (bad body, unknown agent), 404 `NOT_FOUND` (no session, no run), 409 `CONFLICT` (the session
 * already has an unfinished orchestration) or `AGENT_UNAVAILABLE`.
 *
 * @example
 * ```ts
 * import { orchestrationRoutes } from "./orchestrations.ts";
 * const orch = createOrchestrator({ service, bus });
 * app.route("/", orchestrationRoutes(orch, service));
 * // POST /api/sessions/S/orchestrate {"task": "add a README", "workers": ["a", "b"]} -> 202
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { orchestrateInputSchema, type Orchestrator } from "../lib/agents/orchestrate.ts";
import type { AgentService } from "../lib/agents/sessions.ts";
import { apiError, body, guard } from "./sessions.ts";
import { mountRoutes, type ParamContext, routesOf, SERVE_ROUTES } from "./table.ts";

/** The orchestration routes (routes/table.ts, group `orchestrations`) on their own app. */
export function orchestrationRoutes(orch: Orchestrator, service: AgentService): Hono {
  const app = mountRoutes(
    new Hono(),
    routesOf(SERVE_ROUTES, "orchestrations"),
    orchestrationHandlers(orch, service),
  );
  // Used when this router serves requests itself (the app may mount it with its own handlers).
  app.notFound((c) => apiError(c, 404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return apiError(c, 500, "INTERNAL", `internal error: ${err.message}`);
  });
  return app;
}

/** The handlers of the `orchestrations` rows of routes/table.ts. */
export function orchestrationHandlers(orch: Orchestrator, service: AgentService) {
  const startOrchestration = (c: ParamContext<"id">) =>
    guard(c, async () => {
      const id = c.req.param("id");
      service.getSession(id); // 404 before 400: the session is the resource
      const b = await body(c, orchestrateInputSchema);
      if (!b.ok) return b.response;
      return c.json(orch.start(id, b.data), 202);
    });

  const getOrchestration = (c: ParamContext<"runId">) =>
    guard(c, () => c.json(orch.get(c.req.param("runId"))));

  const listOrchestrations = (c: Context) =>
    guard(c, () => {
      const id = c.req.query("sessionId");
      if (id === undefined || id === "") return c.json({ orchestrations: orch.list() });
      service.getSession(id);
      return c.json({ orchestrations: orch.list(id) });
    });

  return { startOrchestration, getOrchestration, listOrchestrations };
}
