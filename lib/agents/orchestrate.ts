/**
 * Orchestration (docs/ARCHITECTURE.md, "Goals, orchestration, memory"): one task split across agents. A planner agent answers with a
 * numbered list, workers run the steps (a session each, in parallel up to `maxParallelWorkers`),
 * a checker judges the result (`PASS` or `FAIL: WHY` on its first line) and a `FAIL` sends the
 * work back to build as one fix step, for at most `maxRounds` rounds. Every agent turn goes
 * through `service.runTurn`, so each one is supervised (stall, timeout, retry, transient fallback)
 * like any other session run.
 *
 * Durable in the agents store (table `orchestrations`, one JSON record per run, rewritten on
 * every change): a run cut by a restart goes on where it stopped — planning again, running the
 * steps that were not done (a step that was running re-runs in its own worker session), or
 * checking again — and says so with an `orchestrate_warning`.
 *
 * Events (topic `orchestrate`, each with `{sessionId, runId}` where sessionId is the parent
 * session): `orc_state {state, title, step?, of?}` on every change of state and when each step
 * starts, `orchestrate_warning {message}` for what does not stop the run (a worker fell back, a
 * step retried, no verdict, the last round, a resume), `orchestrate_done {text, error?}` once.
 *
 * Rules worth knowing:
 * - A step whose worker fails (not cancelled) moves to the first agent along its `fallback` chain
 *   not yet tried for that step, in a new session; with none left it is retried once on the same
 *   agent; then the run fails.
 * - Cancelling the parent session (`service.cancel`) stops the run and its workers; a worker turn
 *   cancelled by anyone else fails the run too. Turns stopped by a shutdown (`INTERRUPTED_ERROR`)
 *   never fail anything: the next start resumes.
 *
 * @example
 * ```ts
 * import { createOrchestrator } from "./orchestrate.ts";
 * const orch = createOrchestrator({ service, bus });
 * const run = orch.start(sessionId, { task: "add a README and a LICENSE", workers: ["a", "b"] });
 * orch.get(run.runId).state; // "plan" | "build" | "check" | "done" | "failed"
 * await orch.close(); // before service.close()
 * ```
 * @module
 */
import { z } from "zod";
import type { EventBus } from "../events/bus.ts";
import { drive, resumeRun } from "./orchestrate_drive.ts";
import { fail, type Live, type OrchestratorCtx, save, stateEvent } from "./orchestrate_live.ts";
import { openRunTable, type OrchestrationJson, type Rec, toJson } from "./orchestrate_store.ts";
import {
  type AgentService,
  AgentServiceError,
  MAX_TEXT_BYTES,
  MAX_TEXT_CHARS,
} from "./sessions.ts";

export {
  ANSWER_CHARS,
  checkerPrompt,
  MAX_STEPS,
  parsePlan,
  parseVerdict,
} from "./orchestrate_prompts.ts";
export type {
  OrchestrationJson,
  OrchestrationState,
  OrchestrationStep,
  StepStatus,
} from "./orchestrate_store.ts";

export const MAX_ROUNDS = 10;
export const DEFAULT_MAX_ROUNDS = 3;

export type OrchestrateInput = {
  task: string;
  planner?: string;
  workers?: string | string[];
  checker?: string;
  maxRounds?: number;
};

export type Orchestrator = {
  /** Validates (AgentServiceError 400/404/409), records the run and drives it in the background. */
  start(sessionId: string, input: OrchestrateInput): OrchestrationJson;
  /** AgentServiceError 404 for an unknown run. */
  get(runId: string): OrchestrationJson;
  /** Oldest first; only the parent session's runs when `sessionId` is given. */
  list(sessionId?: string): OrchestrationJson[];
  /**
   * Stops driving runs without marking them failed: the service's close interrupts their agent
   * turns and the next start resumes them. Call before `service.close()`.
   */
  close(): Promise<void>;
};

const encoder = new TextEncoder();
/** The same rules as a message's text: the task reaches the planner as (most of) one prompt. */
const taskText = z.string({
  error: (issue) => (issue.input === undefined ? "is required" : "must be a string"),
}).min(1, "must not be empty")
  .max(MAX_TEXT_CHARS, `must be at most ${MAX_TEXT_CHARS} characters`)
  .refine((t) => !t.includes("\0"), "must not contain NUL characters")
  .refine(
    (t) => encoder.encode(t).length <= MAX_TEXT_BYTES,
    `must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`,
  );
const agentName = z.string({ error: "must be an agent name" }).min(1, "must not be empty");
const roundsError = `must be a whole number from 1 to ${MAX_ROUNDS}`;

/** The body of `POST /api/sessions/:id/orchestrate` (agent names are checked by `start`). */
export const orchestrateInputSchema = z.strictObject({
  task: taskText,
  planner: agentName.optional(),
  workers: z.union([
    agentName,
    z.array(agentName, { error: "must be an agent name or an array of agent names" })
      .min(1, "must name at least one agent"),
  ], { error: "must be an agent name or a non-empty array of agent names" }).optional(),
  checker: agentName.optional(),
  maxRounds: z.number({ error: roundsError }).int(roundsError).min(1, roundsError)
    .max(MAX_ROUNDS, roundsError).optional(),
});

/** Opens the `orchestrations` table, resumes unfinished runs and serves new ones. */
export function createOrchestrator(
  opts: { service: AgentService; bus: EventBus; now?: () => number },
): Orchestrator {
  const { service, bus } = opts;
  const config = service.config;
  const now = opts.now ?? Date.now;
  const iso = () => new Date(now()).toISOString();
  const table = openRunTable(service.db);
  const ctx: OrchestratorCtx = {
    service,
    config,
    bus,
    table,
    iso,
    live: new Map(),
    closing: false,
  };
  const { live } = ctx;

  const offCancel = service.onCancel((sessionId) => {
    if (ctx.closing) return false;
    let handled = false;
    for (const l of [...live.values()]) {
      if (l.rec.sessionId !== sessionId) continue;
      fail(ctx, l, "cancelled");
      handled = true;
    }
    return handled;
  });

  // Runs a restart cut short go on where they stopped.
  for (const rec of table.unfinished()) {
    const l: Live = { rec, stopped: false, active: new Set() };
    live.set(rec.runId, l);
    resumeRun(ctx, l);
  }

  const notFound = (runId: string) =>
    new AgentServiceError("NOT_FOUND", 404, `no orchestration ${runId}`);

  return {
    start(sessionId, input) {
      if (ctx.closing) {
        throw new AgentServiceError("SHUTTING_DOWN", 503, "the orchestrator is stopping");
      }
      const parent = service.getSession(sessionId);
      const parsed = orchestrateInputSchema.safeParse(input);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const path = issue.path.map(String).join(".");
        const message = issue.code === "unrecognized_keys"
          ? `unknown field(s): ${issue.keys.join(", ")}`
          : path
          ? `${path}: ${issue.message}`
          : issue.message;
        throw new AgentServiceError("BAD_REQUEST", 400, message);
      }
      const data = parsed.data;
      const configured = Object.keys(config.agents);
      const pick = (role: string, name: string | undefined) => {
        if (name === undefined) {
          if (!(parent.agent in config.agents)) {
            throw new AgentServiceError(
              "AGENT_UNAVAILABLE",
              409,
              `session ${sessionId} uses agent "${parent.agent}", which is no longer configured; ` +
                `name the ${role} (configured agents: ${configured.join(", ")})`,
            );
          }
          return parent.agent;
        }
        if (!(name in config.agents)) {
          throw new AgentServiceError(
            "BAD_REQUEST",
            400,
            `unknown agent "${name}" for ${role}; configured agents: ${configured.join(", ")}`,
          );
        }
        return name;
      };
      const planner = pick("planner", data.planner);
      const workers = data.workers === undefined
        ? [pick("workers", undefined)]
        : (typeof data.workers === "string" ? [data.workers] : data.workers).map((w) =>
          pick("workers", w)
        );
      const checker = pick("checker", data.checker);
      for (const l of live.values()) {
        if (l.rec.sessionId === sessionId) {
          throw new AgentServiceError(
            "CONFLICT",
            409,
            `session ${sessionId} already has an unfinished orchestration ${l.rec.runId} ` +
              `(state ${l.rec.state}); cancel the session or wait for it to end`,
          );
        }
      }
      const at = iso();
      const rec: Rec = {
        runId: crypto.randomUUID(),
        sessionId,
        task: data.task,
        state: "plan",
        round: 1,
        maxRounds: data.maxRounds ?? DEFAULT_MAX_ROUNDS,
        planner,
        workers,
        checker,
        steps: [],
        createdAt: at,
        updatedAt: at,
        cwd: parent.cwd,
      };
      const l: Live = { rec, stopped: false, active: new Set() };
      save(ctx, l);
      live.set(rec.runId, l);
      stateEvent(ctx, l, "Planning");
      void drive(ctx, l);
      return toJson(rec);
    },

    get(runId) {
      const l = live.get(runId);
      if (l) return toJson(l.rec);
      const rec = table.one(runId);
      if (!rec) throw notFound(runId);
      return toJson(rec);
    },

    list(sessionId) {
      const recs = sessionId === undefined ? table.all() : table.bySession(sessionId);
      return recs.map((rec) => toJson(live.get(rec.runId)?.rec ?? rec));
    },

    close() {
      if (!ctx.closing) {
        ctx.closing = true;
        offCancel();
      }
      // Nothing to wait for: each driver awaits a turn that the service's close interrupts, and
      // stops there without writing.
      return Promise.resolve();
    },
  };
}
