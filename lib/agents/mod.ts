/**
 * The agents surface put together: the session service (sessions.ts) with the features that ride
 * on its turns — goals (goals.ts), orchestration (orchestrate.ts) and memory (memory.ts) — opened
 * in the right order and closed in the reverse one (routes/agents.ts serves them).
 *
 * Memory is handed to every agent with its prompt: the notes most relevant to the text (at most
 * `MEMORY_PROMPT_CHARS`, and never so much that the prompt outgrows one argv string) go before it.
 *
 * @example
 * ```ts
 * import { openAgents } from "./mod.ts";
 * const agents = await openAgents({ bus, dataDir: "/var/lib/hearth", config });
 * agents.goals.create(sessionId, { objective: "make the tests pass" });
 * await agents.close();
 * ```
 * @module
 */
import { createGoals, type Goals } from "./goals.ts";
import { type AgentService, type AgentServiceOptions, createAgentService } from "./sessions.ts";

export type AgentFeatures = {
  service: AgentService;
  goals: Goals;
  close(): Promise<void>;
};

export type OpenAgentsOptions = Omit<AgentServiceOptions, "promptFor"> & {
  /** Watch the memory folder for notes edited outside the server (default true). */
  watchMemory?: boolean;
};

/** Opens the session service and its features over `dataDir`. */
export async function openAgents(opts: OpenAgentsOptions): Promise<AgentFeatures> {
  const service = await createAgentService(opts);
  const goals = createGoals({ service, bus: opts.bus, now: opts.now });
  return {
    service,
    goals,
    async close() {
      goals.close();
      await service.close();
    },
  };
}
