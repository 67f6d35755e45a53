/**
 * The agent service: sessions (an agent from `--agents-config`, a working directory inside the
 * configured roots, a history), one run at a time per session with a queue behind it, steering,
 * cancelling and scheduled wake-ups — all durable in the SQLite store, all announced on the bus
 * (topic `session`: `session_created`, `session_list`, `session_switched`, `new_message`,
 * `queue_update`, `steer_started`, `schedule_wakeup`, `schedule_wakeup_failed`; the runs
 * themselves publish on topic `agent`, see run.ts).
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
import type { DatabaseSync } from "node:sqlite";
import type { EventBus } from "../events/bus.ts";
import { adapterFor as defaultAdapterFor } from "./adapters/mod.ts";
import type { AgentsFile } from "./config.ts";
import { localAgents, type LocalEndpoint, LocalEndpointMissing } from "./local.ts";
import { processStartTicks, signalGroup } from "./process.ts";
import { type RunHandle, type RunResult, startRun } from "./run.ts";
import { openStore, type SessionRow, type Store, type StoredMessage } from "./store.ts";
import type { ErrorKind, Provider, ProviderAdapter } from "./types.ts";

export const INTERRUPTED_ERROR = "interrupted by restart";
/** Longest message text: a prompt may travel as one argv string, which Linux caps at 128 KiB. */
export const MAX_TEXT_CHARS = 100_000;
export const MAX_TEXT_BYTES = 128 * 1024 - 1;
export const MAX_SCHEDULE_SECONDS = 30 * 24 * 3600;
/** How often at most the partial output of a run is written to the store. */
const OUTPUT_FLUSH_MS = 250;
/** setTimeout's longest delay; longer wake-ups re-arm. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export type MessageJson = {
  role: "user" | "assistant";
  content: string;
  at: string;
  error?: string;
  errorKind?: ErrorKind;
  partial?: boolean;
  fromQueue?: boolean;
};

export type SessionJson = {
  id: string;
  agent: string;
  cwd: string;
  status: "idle" | "running";
  /** Texts waiting for the current run to end, first in line first. */
  queue: string[];
  latestMessage: MessageJson | null;
  createdAt: string;
  updatedAt: string;
};

export type SessionDetail = SessionJson & { history: MessageJson[] };

export type ServiceErrorCode =
  | "BAD_REQUEST"
  | "NOT_FOUND"
  | "NOT_RUNNING"
  | "AGENT_UNAVAILABLE"
  | "CONFLICT"
  | "SHUTTING_DOWN";

/** A refusal the HTTP layer turns into `{"error": code, "message"}` with `status`. */
export class AgentServiceError extends Error {
  constructor(
    readonly code: ServiceErrorCode,
    readonly status: 400 | 404 | 409 | 503,
    message: string,
  ) {
    super(message);
    this.name = "AgentServiceError";
  }
}

export type AgentService = {
  readonly config: AgentsFile;
  /**
   * The store's database, for the tables of goals and orchestrations that live beside sessions.
   * Closed by `close`: close what uses it first.
   */
  readonly db: DatabaseSync;
  createSession(input: { agent: string; cwd?: string }): Promise<SessionJson>;
  listSessions(): SessionJson[];
  /** The session last activated, if it still exists. */
  activeSessionId(): string | null;
  getSession(id: string): SessionDetail;
  /**
   * Starts a run, or queues the text behind the running one. `goalId` marks a goal's continuation
   * prompt (carried in its `new_message`).
   */
  sendMessage(
    id: string,
    text: string,
    meta?: TurnMeta,
  ): { sessionId: string; queued: boolean; pending: number };
  /**
   * Like `sendMessage`, and resolves with the outcome of that very turn once it ends (a turn that
   * never runs — session deleted, server stopping — resolves as cancelled).
   */
  runTurn(id: string, text: string, meta?: TurnMeta): Promise<RunResult>;
  /** True while the session runs or has anything queued. */
  isBusy(id: string): boolean;
  /**
   * Called after every turn that ended with a result (not one stopped by `close`), once the
   * history holds its answer and the next queued text (if any) has started.
   */
  onTurnEnd(listener: (end: TurnEnd) => void): () => void;
  /**
   * Called by `cancel` before it stops the session's own run: a listener returns true when it
   * stopped something of the session's (an orchestration), so a session with no run of its own is
   * not refused.
   */
  onCancel(listener: (sessionId: string) => boolean): () => void;
  /** Streams the text into the running CLI, or queues it first in line. */
  steer(
    id: string,
    text: string,
  ): Promise<{ sessionId: string; steered: boolean; queued: boolean; pending: number }>;
  cancel(
    id: string,
    opts?: { clearQueue?: boolean },
  ): { sessionId: string; cancelled: true; pending: number };
  activate(id: string): { sessionId: string };
  /** Stops the session's run and removes it with its history and queue. */
  deleteSession(id: string): Promise<void>;
  /** The newest history entry of one session, or over all sessions. */
  latestMessage(sessionId?: string): { sessionId: string | null; message: MessageJson | null };
  schedule(
    id: string,
    delaySeconds: number,
    text: string,
  ): { sessionId: string; scheduleId: number; dueAt: string };
  /** Stops every run (kept as interrupted for the next start), clears timers, closes the store. */
  close(): Promise<void>;
};

/** What a turn is for, beyond its text. */
export type TurnMeta = {
  /** The goal whose continuation prompt this is. */
  goalId?: string;
  /** `agent_status` at the start of the run (`evaluating` for a checker). */
  status?: "running" | "evaluating";
};

export type TurnEnd = { sessionId: string; result: RunResult; meta: TurnMeta };

export type AgentServiceOptions = {
  bus: EventBus;
  dataDir: string;
  config: AgentsFile;
  /** Clock for timestamps and due times (ms since the epoch). */
  now?: () => number;
  /** Adapter lookup; defaults to the provider adapters of ./adapters. */
  adapterFor?: (provider: Provider) => ProviderAdapter;
  /**
   * How agents with `"model": "local"` reach this server (loopback URL, `--api-key`, served model
   * id). Required when the config has such an agent: the service refuses to start without it.
   */
  local?: LocalEndpoint;
  /**
   * What the CLI is given for a user's text: e.g. the text with the relevant memory notes before
   * it. The history keeps the text as sent.
   */
  promptFor?: (session: { id: string; agent: string; cwd: string }, text: string) => string;
};

type ActiveRun = {
  handle: RunHandle;
  finished: Promise<void>;
  /** Stopped by `close`: left in the store for the next start to mark interrupted. */
  interrupted: boolean;
  /** The partial output, written to the store at most every OUTPUT_FLUSH_MS. */
  buf: { output: string; flushTimer?: ReturnType<typeof setTimeout> };
  meta: TurnMeta;
  /** `runTurn` callers waiting for this turn. */
  waiters: ((r: RunResult) => void)[];
};

const iso = (ms: number) => new Date(ms).toISOString();

function messageJson(m: StoredMessage): MessageJson {
  const out: MessageJson = { role: m.role, content: m.content, at: iso(m.at) };
  if (m.error !== undefined) out.error = m.error;
  if (m.errorKind !== undefined) out.errorKind = m.errorKind;
  if (m.partial) out.partial = true;
  if (m.fromQueue) out.fromQueue = true;
  return out;
}

const bad = (message: string) => new AgentServiceError("BAD_REQUEST", 400, message);
const encoder = new TextEncoder();

/** A prompt may travel as one argv string: not empty, no NUL, within Linux's 128 KiB. */
function checkText(text: string) {
  if (!text) throw bad("text must not be empty");
  if (text.includes("\0")) throw bad("text must not contain NUL characters");
  if (text.length > MAX_TEXT_CHARS || encoder.encode(text).length > MAX_TEXT_BYTES) {
    throw bad(`text must be at most ${MAX_TEXT_CHARS} characters and ${MAX_TEXT_BYTES} bytes`);
  }
}

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
  const adapterFor = opts.adapterFor ?? defaultAdapterFor;
  const local = localAgents(config.agents);
  if (local.length > 0 && !opts.local) throw new LocalEndpointMissing(local);
  const dir = resolve(opts.dataDir, "agents");
  await Deno.mkdir(dir, { recursive: true });
  const store: Store = openStore(resolve(dir, "sessions.db"));

  const runs = new Map<string, ActiveRun>();
  const deleting = new Set<string>();
  const timers = new Map<number, ReturnType<typeof setTimeout>>();
  /** Queued texts with a meta or a waiter, by queue item id (not durable: a restart drops them). */
  const queuedMeta = new Map<number, { meta: TurnMeta; waiters: ((r: RunResult) => void)[] }>();
  const turnListeners = new Set<(end: TurnEnd) => void>();
  const cancelListeners = new Set<(sessionId: string) => boolean>();
  let closing = false;
  const never = (agent: string, error: string): RunResult => ({
    ok: false,
    agent,
    text: "",
    error,
    errorKind: "cancelled",
    partial: false,
    toolLog: [],
  });

  const publish = (event: string, fields: Record<string, unknown>) =>
    bus.publish("session", event, fields);

  const sessionJson = (row: SessionRow): SessionJson => ({
    id: row.id,
    agent: row.agent,
    cwd: row.cwd,
    status: row.status,
    queue: store.queue(row.id).map((q) => q.text),
    latestMessage: (() => {
      const m = store.latestMessage(row.id);
      return m ? messageJson(m.message) : null;
    })(),
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
  });
  const listSessions = () => store.listSessions().map(sessionJson);
  const publishList = () => publish("session_list", { sessions: listSessions() });
  const publishQueue = (sessionId: string) => {
    const queue = store.queue(sessionId).map((q) => q.text);
    publish("queue_update", { sessionId, pending: queue.length, queue });
    return queue.length;
  };

  const requireSession = (id: string): SessionRow => {
    if (closing) throw new AgentServiceError("SHUTTING_DOWN", 503, "the agent service is stopping");
    const row = deleting.has(id) ? undefined : store.getSession(id);
    if (!row) throw new AgentServiceError("NOT_FOUND", 404, `no session ${id}`);
    return row;
  };
  const requireAgent = (row: SessionRow) => {
    if (!(row.agent in config.agents)) {
      throw new AgentServiceError(
        "AGENT_UNAVAILABLE",
        409,
        `session ${row.id} uses agent "${row.agent}", which is no longer configured (configured: ${
          Object.keys(config.agents).join(", ")
        })`,
      );
    }
  };

  function startSessionRun(
    row: SessionRow,
    text: string,
    fromQueue: boolean,
    meta: TurnMeta = {},
    waiters: ((r: RunResult) => void)[] = [],
  ) {
    const id = row.id;
    const at = now();
    store.appendMessage(id, { role: "user", content: text, at, fromQueue });
    store.updateSession(id, { status: "running", updatedAt: at });
    store.beginRun({
      sessionId: id,
      agent: row.agent,
      output: "",
      pid: null,
      startTicks: null,
      startedAt: at,
    });
    publish("new_message", {
      sessionId: id,
      role: "user",
      content: text,
      ...(fromQueue ? { fromQueue: true } : {}),
      ...(meta.goalId ? { goalId: meta.goalId } : {}),
    });

    let cliSessions = { ...row.cliSessions };
    const buf: ActiveRun["buf"] = { output: "" };
    const flush = () => {
      buf.flushTimer = undefined;
      if (!deleting.has(id)) store.updateRun(id, { output: buf.output });
    };
    const handle = startRun({
      bus,
      config,
      agent: row.agent,
      prompt: opts.promptFor ? opts.promptFor({ id, agent: row.agent, cwd: row.cwd }, text) : text,
      cwd: row.cwd,
      status: meta.status,
      sessionId: id,
      adapterFor,
      local: opts.local,
      resume: cliSessions,
      onCliSession(agent, cliId) {
        if (cliSessions[agent] === cliId || deleting.has(id)) return;
        cliSessions = { ...cliSessions, [agent]: cliId };
        store.updateSession(id, { updatedAt: now(), cliSessions });
      },
      onOutput(partial) {
        buf.output = partial;
        buf.flushTimer ??= setTimeout(flush, OUTPUT_FLUSH_MS);
      },
      onProcess(proc) {
        if (!deleting.has(id)) {
          store.updateRun(id, { pid: proc?.pid ?? null, startTicks: proc?.startTicks ?? null });
        }
      },
    });
    const entry: ActiveRun = {
      handle,
      finished: Promise.resolve(),
      interrupted: false,
      buf,
      meta,
      waiters,
    };
    entry.finished = entry.handle.done.then(
      (result) => finishRun(id, entry, result),
      (err) =>
        finishRun(id, entry, {
          ok: false,
          agent: row.agent,
          text: buf.output,
          error: `run failed: ${(err as Error).message}`,
          errorKind: "crash",
          partial: buf.output.length > 0,
          toolLog: [],
        }),
    ).catch((err) => console.error(`hearth: finishing the run of session ${id} failed:`, err));
    runs.set(id, entry);
  }

  function finishRun(id: string, entry: ActiveRun, result: RunResult) {
    clearTimeout(entry.buf.flushTimer);
    runs.delete(id);
    for (const w of entry.waiters) w(result);
    if (deleting.has(id)) return;
    if (entry.interrupted && !result.ok) {
      store.updateRun(id, { output: result.text });
      return;
    }
    const message: StoredMessage = { role: "assistant", content: result.text, at: now() };
    if (!result.ok) {
      message.error = result.error;
      message.errorKind = result.errorKind;
      if (result.partial) message.partial = true;
    }
    store.appendMessage(id, message);
    store.endRun(id);
    store.updateSession(id, { status: "idle", updatedAt: message.at });
    publish("new_message", {
      sessionId: id,
      role: "assistant",
      content: message.content,
      ...(result.ok ? {} : { error: message.error, errorKind: message.errorKind }),
      ...(message.partial ? { partial: true } : {}),
    });
    pump(id);
    for (const l of turnListeners) {
      try {
        l({ sessionId: id, result, meta: entry.meta });
      } catch (err) {
        console.error(`hearth: a turn listener of session ${id} failed:`, err);
      }
    }
  }

  /** Starts the next queued text of an idle session. */
  function pump(id: string) {
    if (closing || runs.has(id) || deleting.has(id)) return;
    const row = store.getSession(id);
    if (!row || !(row.agent in config.agents)) return;
    const item = store.dequeue(id);
    if (!item) return;
    publishQueue(id);
    const extra = queuedMeta.get(item.id);
    queuedMeta.delete(item.id);
    startSessionRun(row, item.text, true, extra?.meta, extra?.waiters);
  }

  function send(
    id: string,
    text: string,
    meta: TurnMeta,
    waiter?: (r: RunResult) => void,
  ): { sessionId: string; queued: boolean; pending: number } {
    checkText(text);
    const row = requireSession(id);
    requireAgent(row);
    if (runs.has(id) || store.queue(id).length > 0) {
      const itemId = store.enqueue(id, text, now());
      if (waiter || meta.goalId || meta.status) {
        queuedMeta.set(itemId, { meta, waiters: waiter ? [waiter] : [] });
      }
      publishQueue(id);
      pump(id);
      return { sessionId: id, queued: true, pending: store.queue(id).length };
    }
    startSessionRun(row, text, false, meta, waiter ? [waiter] : []);
    return { sessionId: id, queued: false, pending: 0 };
  }

  /** Settles the waiters of queued items that will never run. */
  function dropQueued(itemIds: Iterable<number>, agent: string, why: string) {
    for (const itemId of itemIds) {
      const extra = queuedMeta.get(itemId);
      queuedMeta.delete(itemId);
      for (const w of extra?.waiters ?? []) w(never(agent, why));
    }
  }

  function arm(scheduleId: number, dueAt: number) {
    const wait = Math.max(0, dueAt - now());
    const t = setTimeout(() => {
      timers.delete(scheduleId);
      if (wait > MAX_TIMER_MS) arm(scheduleId, dueAt);
      else fire(scheduleId);
    }, Math.min(wait, MAX_TIMER_MS));
    timers.set(scheduleId, t);
  }

  function fire(scheduleId: number) {
    if (closing) return;
    const row = store.schedules().find((s) => s.id === scheduleId);
    if (!row) return;
    store.removeSchedule(scheduleId);
    const failed = (error: string) =>
      publish("schedule_wakeup_failed", { sessionId: row.sessionId, reason: row.text, error });
    try {
      const session = store.getSession(row.sessionId);
      if (!session || deleting.has(row.sessionId)) {
        return failed(`session ${row.sessionId} no longer exists`);
      }
      service.sendMessage(row.sessionId, row.text);
    } catch (err) {
      failed((err as Error).message);
    }
  }

  // Recovery of what the last process left behind.
  for (const live of store.liveRuns()) {
    if (live.pid !== null && live.startTicks !== null) {
      if (processStartTicks(live.pid) === live.startTicks) signalGroup(live.pid, "SIGKILL");
    }
    const at = now();
    const message: StoredMessage = {
      role: "assistant",
      content: live.output,
      at,
      error: INTERRUPTED_ERROR,
    };
    if (live.output) message.partial = true;
    if (store.getSession(live.sessionId)) {
      store.appendMessage(live.sessionId, message);
      store.updateSession(live.sessionId, { status: "idle", updatedAt: at });
      publish("new_message", {
        sessionId: live.sessionId,
        role: "assistant",
        content: live.output,
        error: INTERRUPTED_ERROR,
        ...(message.partial ? { partial: true } : {}),
      });
    }
    store.endRun(live.sessionId);
  }
  for (const row of store.listSessions()) {
    if (row.status === "running") store.updateSession(row.id, { status: "idle", updatedAt: now() });
  }

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
      const session = sessionJson(row);
      publish("session_created", { session });
      publishList();
      return session;
    },

    listSessions,

    activeSessionId() {
      const id = store.getMeta("active") ?? null;
      return id && store.getSession(id) ? id : null;
    },

    getSession(id) {
      const row = requireSession(id);
      return { ...sessionJson(row), history: store.history(id).map(messageJson) };
    },

    sendMessage(id, text, meta = {}) {
      return send(id, text, meta);
    },

    runTurn(id, text, meta = {}) {
      return new Promise<RunResult>((resolve) => send(id, text, meta, resolve));
    },

    isBusy(id) {
      return runs.has(id) || store.queue(id).length > 0;
    },

    onTurnEnd(listener) {
      turnListeners.add(listener);
      return () => turnListeners.delete(listener);
    },

    onCancel(listener) {
      cancelListeners.add(listener);
      return () => cancelListeners.delete(listener);
    },

    async steer(id, text) {
      checkText(text);
      const row = requireSession(id);
      const run = runs.get(id);
      if (run && await run.handle.steer(text)) {
        store.appendMessage(id, { role: "user", content: text, at: now() });
        publish("steer_started", { sessionId: id, prompt: text });
        return { sessionId: id, steered: true, queued: false, pending: store.queue(id).length };
      }
      requireAgent(row);
      store.enqueue(id, text, now(), true);
      publishQueue(id);
      pump(id);
      return { sessionId: id, steered: false, queued: true, pending: store.queue(id).length };
    },

    cancel(id, o = {}) {
      const row = requireSession(id);
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
        dropQueued(store.queue(id).map((q) => q.id), row.agent, "queue cleared");
        store.clearQueue(id);
        publishQueue(id);
      }
      run?.handle.cancel("cancelled by user");
      return { sessionId: id, cancelled: true, pending: store.queue(id).length };
    },

    activate(id) {
      requireSession(id);
      store.setMeta("active", id);
      publish("session_switched", { sessionId: id });
      return { sessionId: id };
    },

    async deleteSession(id) {
      const row = requireSession(id);
      deleting.add(id);
      dropQueued(store.queue(id).map((q) => q.id), row.agent, "session deleted");
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
      if (sessionId !== undefined) requireSession(sessionId);
      const m = store.latestMessage(sessionId);
      return m
        ? { sessionId: m.sessionId, message: messageJson(m.message) }
        : { sessionId: sessionId ?? null, message: null };
    },

    schedule(id, delaySeconds, text) {
      checkText(text);
      requireSession(id);
      if (!(delaySeconds >= 0 && delaySeconds <= MAX_SCHEDULE_SECONDS)) {
        throw bad(`delaySeconds must be between 0 and ${MAX_SCHEDULE_SECONDS}`);
      }
      const createdAt = now();
      const dueAt = createdAt + Math.round(delaySeconds * 1000);
      const scheduleId = store.addSchedule({ sessionId: id, text, delaySeconds, dueAt, createdAt });
      arm(scheduleId, dueAt);
      publish("schedule_wakeup", {
        sessionId: id,
        delaySeconds,
        reason: text,
        scheduleId,
        dueAt: iso(dueAt),
      });
      return { sessionId: id, scheduleId, dueAt: iso(dueAt) };
    },

    async close() {
      if (closing) return;
      closing = true;
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
      const pending = [...runs.values()];
      for (const run of pending) {
        run.interrupted = true;
        run.handle.cancel(INTERRUPTED_ERROR);
      }
      await Promise.all(pending.map((r) => r.finished));
      dropQueued([...queuedMeta.keys()], "", INTERRUPTED_ERROR);
      store.close();
    },
  };

  // Queues and wake-ups go on where they stopped.
  for (const id of store.queuedSessions()) pump(id);
  for (const s of store.schedules()) arm(s.id, s.dueAt);

  return service;
}
