/**
 * Every agents endpoint in one router, over lib/agents/mod.ts: sessions and messages
 * (routes/sessions.ts), goals (routes/goals.ts), orchestrations and memory.
 *
 * @example
 * ```ts
 * import { agentRoutes } from "./agents.ts";
 * app.route("/", agentRoutes(await openAgents({ bus, dataDir, config })));
 * ```
 * @module
 */
import { Hono } from "hono";
import type { AgentFeatures } from "../lib/agents/mod.ts";
import { goalRoutes } from "./goals.ts";
import { memoryRoutes } from "./memory.ts";
import { orchestrationRoutes } from "./orchestrations.ts";
import { sessionRoutes } from "./sessions.ts";

export function agentRoutes(a: AgentFeatures): Hono {
  const app = new Hono();
  app.route("/", goalRoutes(a.goals, a.service));
  app.route("/", sessionRoutes(a.service));
  app.route("/", orchestrationRoutes(a.orchestrator, a.service));
  app.route("/", memoryRoutes(a.memory));
  return app;
}
