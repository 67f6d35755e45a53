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
import { resolve } from "node:path";
import { createGoals, type Goals } from "./goals.ts";
import { createMemory, DEFAULT_RELEVANT_CHARS, type Memory } from "./memory.ts";
import { createOrchestrator, type Orchestrator } from "./orchestrate.ts";
import {
  type AgentService,
  type AgentServiceOptions,
  createAgentService,
  MAX_TEXT_BYTES,
} from "./sessions.ts";

/** How much of the memory goes before a prompt at most. */
export const MEMORY_PROMPT_CHARS = DEFAULT_RELEVANT_CHARS;
const encoder = new TextEncoder();

/**
 * The text with the notes most relevant to it before it, within `MEMORY_PROMPT_CHARS` and within
 * what one argv string can carry (a UTF-16 unit is at most 3 bytes of UTF-8).
 */
export function withMemory(memory: Memory, text: string): string {
  const room = Math.floor((MAX_TEXT_BYTES - encoder.encode(text).length) / 3);
  const notes = memory.relevant(text, Math.min(MEMORY_PROMPT_CHARS, room));
  return notes + text;
}

export type AgentFeatures = {
  service: AgentService;
  goals: Goals;
  orchestrator: Orchestrator;
  memory: Memory;
  close(): Promise<void>;
};

export type OpenAgentsOptions = Omit<AgentServiceOptions, "promptFor"> & {
  /** Watch the memory folder for notes edited outside the server (default true). */
  watchMemory?: boolean;
};

/** Opens the session service and its features over `dataDir`. */
export async function openAgents(opts: OpenAgentsOptions): Promise<AgentFeatures> {
  const memory = await createMemory({
    dir: resolve(opts.dataDir, "agents", "memory"),
    bus: opts.bus,
    now: opts.now,
    watch: opts.watchMemory,
  });
  let service: AgentService;
  try {
    service = await createAgentService({
      ...opts,
      promptFor: (_session, text) => withMemory(memory, text),
    });
  } catch (err) {
    await memory.close();
    throw err;
  }
  const goals = createGoals({ service, bus: opts.bus, now: opts.now });
  const orchestrator = createOrchestrator({ service, bus: opts.bus, now: opts.now });
  return {
    service,
    goals,
    orchestrator,
    memory,
    async close() {
      goals.close();
      await orchestrator.close();
      await service.close();
      await memory.close();
    },
  };
}
