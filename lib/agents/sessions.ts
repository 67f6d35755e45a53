/**
 * The agent service: sessions (an agent from `--agents-config`, a working directory inside the
 * configured roots, a history), one run at a time per session with a queue behind it, steering,
 * cancelling and scheduled wake-ups — all durable in the SQLite store, all announced on the bus
 * (topic `session`: `session_created`, `session_list`, `session_switched`, `new_message`,
 * `queue_update`, `steer_started`, `schedule_wakeup`, `schedule_wakeup_failed`; the runs
 * themselves publish on topic `agent`, see run.ts).
 *
 * The parts: the records, limits and errors (sessions_api.ts), runs, queues and the recovery at
 * start-up (sessions_runs.ts), wake-ups (sessions_wakeups.ts); this module puts them together.
 *
 * Rules worth knowing:
 * - A message to a busy session waits in its queue; it starts when the run ends, and its
 *   `new_message` then carries `fromQueue: true`. A cancel stops the current run only: the queue
 *   goes on (unless `clearQueue`).
 * - Steering writes to the running CLI's stdin when its adapter takes streamed input; otherwise the
 *   text goes first in the queue.
 * - A restart finds runs that were in flight: their partial output goes into the history as an
 *   assistant message with the error "interrupted by restart", any process group they left behind is
 *   killed (checked by pid and start time), and their queues go on. Wake-ups keep their due time;
 *   overdue ones fire at start-up.
 *
 * @example
 * ```ts
 * import { createAgentService } from "./sessions.ts";
 * const service = await createAgentService({ bus, dataDir: "/var/lib/hearth", config });
 * const s = await service.createSession({ agent: "claude" });
 * service.sendMessage(s.id, "run the tests and fix what fails");
 * await service.close();
 * ```
 * @module
 */
import { resolve, sep } from "node:path";
import { adapterFor as defaultAdapterFor } from "./adapters/mod.ts";
import type { AgentsFile } from "./config.ts";
import { localAgents, LocalEndpointMissing } from "./local.ts";
import type { RunResult } from "./run.ts";
import {
  type AgentService,
  AgentServiceError,
  type AgentServiceOptions,
  bad,
  checkText,
  INTERRUPTED_ERROR,
  messageJson,
} from "./sessions_api.ts";
import {
  dropQueued,
  publish,
  publishQueue,
  pump,
  recoverRuns,
  requireAgent,
  requireSession,
  send,
  sessionJson,
  type SessionsCtx,
} from "./sessions_runs.ts";
import { armAll, disarmAll, scheduleWakeup } from "./sessions_wakeups.ts";
import { openStore, type SessionRow } from "./store.ts";
import type { Provider } from "./types.ts";

export {
  AgentServiceError,
  INTERRUPTED_ERROR,
  MAX_SCHEDULE_SECONDS,
  MAX_TEXT_BYTES,
  MAX_TEXT_CHARS,
} from "./sessions_api.ts";
export type {
  AgentService,
  AgentServiceOptions,
  MessageJson,
  ServiceErrorCode,
  SessionDetail,
  SessionJson,
  TurnEnd,
  TurnMeta,
} from "./sessions_api.ts";

/** What HTTP may say about a configured agent: its name, provider and fallback, never its command. */
export type PublicAgent = { name: string; provider: Provider; fallback?: string };

/** The configured agents as `GET /api/agents` lists them (config order; no commands, args or env). */
export function publicAgents(config: AgentsFile): PublicAgent[] {
  return Object.values(config.agents).map((a) => ({
    name: a.name,
    provider: a.provider,
    ...(a.fallback !== undefined ? { fallback: a.fallback } : {}),
  }));
}

/** Resolves a requested cwd (default: the first root) to a real directory inside a root. */
export async function resolveSessionCwd(config: AgentsFile, cwd?: string): Promise<string> {
  if (cwd === undefined) return config.roots[0];
  if (cwd.includes("\0")) throw bad("cwd must not contain NUL characters");
  const abs = resolve(config.roots[0], cwd);
  let real: string;
  try {
    real = await Deno.realPath(abs);
  } catch {
    throw bad(`cwd ${cwd} does not exist`);
  }
  if (!(await Deno.stat(real)).isDirectory) throw bad(`cwd ${cwd} is not a directory`);
  const inside = config.roots.some((root) =>
    real === root || real.startsWith(root.endsWith(sep) ? root : root + sep)
  );
  if (!inside) {
    throw bad(
      `cwd ${cwd} (${real}) is outside the configured roots: ${config.roots.join(", ")}`,
    );
  }
  return real;
}

/** Opens the store under `dataDir`, recovers interrupted runs and wake-ups, and serves sessions. */
export async function createAgentService(opts: AgentServiceOptions): Promise<AgentService> {
  const { bus, config } = opts;
  const now = opts.now ?? Date.now;
  const local = localAgents(config.agents);
  if (local.length > 0 && !opts.local) throw new LocalEndpointMissing(local);
  const dir = resolve(opts.dataDir, "agents");
  await Deno.mkdir(dir, { recursive: true });
  const store = openStore(resolve(dir, "sessions.db"));
  const ctx: SessionsCtx = {
    bus,
    config,
    store,
    now,
    adapterFor: opts.adapterFor ?? defaultAdapterFor,
    local: opts.local,
    promptFor: opts.promptFor,
    runs: new Map(),
    deleting: new Set(),
    timers: new Map(),
    queuedMeta: new Map(),
    turnListeners: new Set(),
    closing: false,
  };
  const { runs, deleting } = ctx;
  const cancelListeners = new Set<(sessionId: string) => boolean>();
  const listSessions = () => store.listSessions().map((row) => sessionJson(ctx, row));
  const publishList = () => publish(ctx, "session_list", { sessions: listSessions() });

  recoverRuns(ctx);

  const service: AgentService = {
    config,
    db: store.db,

    async createSession(input) {
      const spec = config.agents[input.agent];
      if (!spec) {
        throw bad(
          `unknown agent "${input.agent}"; configured agents: ${
            Object.keys(config.agents).join(", ")
          }`,
        );
      }
      const cwd = await resolveSessionCwd(config, input.cwd);
      const at = now();
      const row: SessionRow = {
        id: crypto.randomUUID(),
        agent: input.agent,
        cwd,
        status: "idle",
        createdAt: at,
        updatedAt: at,
        cliSessions: {},
      };
      store.insertSession(row);
      const session = sessionJson(ctx, row);
      publish(ctx, "session_created", { session });
      publishList();
      return session;
    },

    listSessions,

    activeSessionId() {
      const id = store.getMeta("active") ?? null;
      return id && store.getSession(id) ? id : null;
    },

    getSession(id) {
      const row = requireSession(ctx, id);
      return { ...sessionJson(ctx, row), history: store.history(id).map(messageJson) };
    },

    sendMessage(id, text, meta = {}) {
      return send(ctx, id, text, meta);
    },

    runTurn(id, text, meta = {}) {
      return new Promise<RunResult>((resolve) => send(ctx, id, text, meta, resolve));
    },

    isBusy(id) {
      return runs.has(id) || store.queue(id).length > 0;
    },

    onTurnEnd(listener) {
      ctx.turnListeners.add(listener);
      return () => ctx.turnListeners.delete(listener);
    },

    onCancel(listener) {
      cancelListeners.add(listener);
      return () => cancelListeners.delete(listener);
    },

    async steer(id, text) {
      checkText(text);
      const row = requireSession(ctx, id);
      const run = runs.get(id);
      if (run && await run.handle.steer(text)) {
        store.appendMessage(id, { role: "user", content: text, at: now() });
        publish(ctx, "steer_started", { sessionId: id, prompt: text });
        return { sessionId: id, steered: true, queued: false, pending: store.queue(id).length };
      }
      requireAgent(ctx, row);
      store.enqueue(id, text, now(), true);
      publishQueue(ctx, id);
      pump(ctx, id);
      return { sessionId: id, steered: false, queued: true, pending: store.queue(id).length };
    },

    cancel(id, o = {}) {
      const row = requireSession(ctx, id);
      let handled = false;
      for (const l of cancelListeners) {
        try {
          if (l(id)) handled = true;
        } catch (err) {
          console.error(`hearth: a cancel listener of session ${id} failed:`, err);
        }
      }
      const run = runs.get(id);
      if (!run && !handled) {
        throw new AgentServiceError("NOT_RUNNING", 409, `session ${id} has no run to cancel`);
      }
      if (o.clearQueue) {
        dropQueued(ctx, store.queue(id).map((q) => q.id), row.agent, "queue cleared");
        store.clearQueue(id);
        publishQueue(ctx, id);
      }
      run?.handle.cancel("cancelled by user");
      return { sessionId: id, cancelled: true, pending: store.queue(id).length };
    },

    activate(id) {
      requireSession(ctx, id);
      store.setMeta("active", id);
      publish(ctx, "session_switched", { sessionId: id });
      return { sessionId: id };
    },

    async deleteSession(id) {
      const row = requireSession(ctx, id);
      deleting.add(id);
      dropQueued(ctx, store.queue(id).map((q) => q.id), row.agent, "session deleted");
      try {
        const run = runs.get(id);
        if (run) {
          run.handle.cancel("session deleted");
          await run.finished;
        }
        store.deleteSession(id);
        if (store.getMeta("active") === id) store.setMeta("active", null);
      } finally {
        deleting.delete(id);
      }
      publishList();
    },

    latestMessage(sessionId) {
      if (sessionId !== undefined) requireSession(ctx, sessionId);
      const m = store.latestMessage(sessionId);
      return m
        ? { sessionId: m.sessionId, message: messageJson(m.message) }
        : { sessionId: sessionId ?? null, message: null };
    },

    schedule(id, delaySeconds, text) {
      return scheduleWakeup(ctx, id, delaySeconds, text);
    },

    async close() {
      if (ctx.closing) return;
      ctx.closing = true;
      disarmAll(ctx);
      const pending = [...runs.values()];
      for (const run of pending) {
        run.interrupted = true;
        run.handle.cancel(INTERRUPTED_ERROR);
      }
      await Promise.all(pending.map((r) => r.finished));
      dropQueued(ctx, [...ctx.queuedMeta.keys()], "", INTERRUPTED_ERROR);
      store.close();
    },
  };

  // Queues and wake-ups go on where they stopped.
  for (const id of store.queuedSessions()) pump(ctx, id);
  armAll(ctx);

  return service;
}
