/**
 * The runs of the agent service (sessions.ts): its state (`SessionsCtx`, passed to every function
 * here), one run at a time per session with a queue behind it, the end of a run (history, the next
 * queued text, turn listeners), and the recovery at start-up of the runs a previous process left
 * in flight.
 *
 * A run's partial output goes to the store at most every OUTPUT_FLUSH_MS, so a restart can keep it
 * as an interrupted assistant message.
 *
 * @example
 * ```ts ignore
 * import { pump, send } from "./sessions_runs.ts";
 * send(ctx, sessionId, "run the tests", {}); // starts a run, or queues behind the running one
 * for (const id of ctx.store.queuedSessions()) pump(ctx, id); // queues go on after a restart
 * ```
 * @module
 */
import type { EventBus } from "../events/bus.ts";
import type { AgentsFile } from "./config.ts";
import type { LocalEndpoint } from "./local.ts";
import { processStartTicks, signalGroup } from "./process.ts";
import { type RunHandle, type RunResult, startRun } from "./run.ts";
import {
  AgentServiceError,
  type AgentServiceOptions,
  checkText,
  INTERRUPTED_ERROR,
  iso,
  messageJson,
  type SessionJson,
  type TurnEnd,
  type TurnMeta,
} from "./sessions_api.ts";
import type { SessionRow, Store, StoredMessage } from "./store.ts";
import type { Provider, ProviderAdapter } from "./types.ts";

/** How often at most the partial output of a run is written to the store. */
const OUTPUT_FLUSH_MS = 250;

type Waiter = (r: RunResult) => void;

export type ActiveRun = {
  handle: RunHandle;
  finished: Promise<void>;
  /** Stopped by `close`: left in the store for the next start to mark interrupted. */
  interrupted: boolean;
  /** The partial output, written to the store at most every OUTPUT_FLUSH_MS. */
  buf: { output: string; flushTimer?: ReturnType<typeof setTimeout> };
  meta: TurnMeta;
  /** `runTurn` callers waiting for this turn. */
  waiters: Waiter[];
};

/** The agent service's state. */
export type SessionsCtx = {
  bus: EventBus;
  config: AgentsFile;
  store: Store;
  now: () => number;
  adapterFor: (provider: Provider) => ProviderAdapter;
  local?: LocalEndpoint;
  promptFor?: AgentServiceOptions["promptFor"];
  runs: Map<string, ActiveRun>;
  /** Sessions being deleted: what their runs still report is not written. */
  deleting: Set<string>;
  /** Armed wake-ups, by schedule id. */
  timers: Map<number, ReturnType<typeof setTimeout>>;
  /** Queued texts with a meta or a waiter, by queue item id (not durable: a restart drops them). */
  queuedMeta: Map<number, { meta: TurnMeta; waiters: Waiter[] }>;
  turnListeners: Set<(end: TurnEnd) => void>;
  /** Set by `close`: nothing new starts. */
  closing: boolean;
};

/** The outcome of a turn that never runs. */
const never = (agent: string, error: string): RunResult => ({
  ok: false,
  agent,
  text: "",
  error,
  errorKind: "cancelled",
  partial: false,
  toolLog: [],
});

export const publish = (ctx: SessionsCtx, event: string, fields: Record<string, unknown>) =>
  ctx.bus.publish("session", event, fields);

export const sessionJson = (ctx: SessionsCtx, row: SessionRow): SessionJson => ({
  id: row.id,
  agent: row.agent,
  cwd: row.cwd,
  status: row.status,
  queue: ctx.store.queue(row.id).map((q) => q.text),
  latestMessage: (() => {
    const m = ctx.store.latestMessage(row.id);
    return m ? messageJson(m.message) : null;
  })(),
  createdAt: iso(row.createdAt),
  updatedAt: iso(row.updatedAt),
});

export const publishQueue = (ctx: SessionsCtx, sessionId: string) => {
  const queue = ctx.store.queue(sessionId).map((q) => q.text);
  publish(ctx, "queue_update", { sessionId, pending: queue.length, queue });
  return queue.length;
};

export const requireSession = (ctx: SessionsCtx, id: string): SessionRow => {
  if (ctx.closing) {
    throw new AgentServiceError("SHUTTING_DOWN", 503, "the agent service is stopping");
  }
  const row = ctx.deleting.has(id) ? undefined : ctx.store.getSession(id);
  if (!row) throw new AgentServiceError("NOT_FOUND", 404, `no session ${id}`);
  return row;
};

export const requireAgent = (ctx: SessionsCtx, row: SessionRow) => {
  if (!(row.agent in ctx.config.agents)) {
    throw new AgentServiceError(
      "AGENT_UNAVAILABLE",
      409,
      `session ${row.id} uses agent "${row.agent}", which is no longer configured (configured: ${
        Object.keys(ctx.config.agents).join(", ")
      })`,
    );
  }
};

function startSessionRun(
  ctx: SessionsCtx,
  row: SessionRow,
  text: string,
  fromQueue: boolean,
  meta: TurnMeta = {},
  waiters: Waiter[] = [],
) {
  const { store, deleting } = ctx;
  const id = row.id;
  const at = ctx.now();
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
  publish(ctx, "new_message", {
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
    bus: ctx.bus,
    config: ctx.config,
    agent: row.agent,
    prompt: ctx.promptFor ? ctx.promptFor({ id, agent: row.agent, cwd: row.cwd }, text) : text,
    cwd: row.cwd,
    status: meta.status,
    sessionId: id,
    adapterFor: ctx.adapterFor,
    local: ctx.local,
    resume: cliSessions,
    onCliSession(agent, cliId) {
      if (cliSessions[agent] === cliId || deleting.has(id)) return;
      cliSessions = { ...cliSessions, [agent]: cliId };
      store.updateSession(id, { updatedAt: ctx.now(), cliSessions });
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
    (result) => finishRun(ctx, id, entry, result),
    (err) =>
      finishRun(ctx, id, entry, {
        ok: false,
        agent: row.agent,
        text: buf.output,
        error: `run failed: ${(err as Error).message}`,
        errorKind: "crash",
        partial: buf.output.length > 0,
        toolLog: [],
      }),
  ).catch((err) => console.error(`hearth: finishing the run of session ${id} failed:`, err));
  ctx.runs.set(id, entry);
}

function finishRun(ctx: SessionsCtx, id: string, entry: ActiveRun, result: RunResult) {
  const { store } = ctx;
  clearTimeout(entry.buf.flushTimer);
  ctx.runs.delete(id);
  for (const w of entry.waiters) w(result);
  if (ctx.deleting.has(id)) return;
  if (entry.interrupted && !result.ok) {
    store.updateRun(id, { output: result.text });
    return;
  }
  const message: StoredMessage = { role: "assistant", content: result.text, at: ctx.now() };
  if (!result.ok) {
    message.error = result.error;
    message.errorKind = result.errorKind;
    if (result.partial) message.partial = true;
  }
  store.appendMessage(id, message);
  store.endRun(id);
  store.updateSession(id, { status: "idle", updatedAt: message.at });
  publish(ctx, "new_message", {
    sessionId: id,
    role: "assistant",
    content: message.content,
    ...(result.ok ? {} : { error: message.error, errorKind: message.errorKind }),
    ...(message.partial ? { partial: true } : {}),
  });
  pump(ctx, id);
  for (const l of ctx.turnListeners) {
    try {
      l({ sessionId: id, result, meta: entry.meta });
    } catch (err) {
      console.error(`hearth: a turn listener of session ${id} failed:`, err);
    }
  }
}

/** Starts the next queued text of an idle session. */
export function pump(ctx: SessionsCtx, id: string) {
  if (ctx.closing || ctx.runs.has(id) || ctx.deleting.has(id)) return;
  const row = ctx.store.getSession(id);
  if (!row || !(row.agent in ctx.config.agents)) return;
  const item = ctx.store.dequeue(id);
  if (!item) return;
  publishQueue(ctx, id);
  const extra = ctx.queuedMeta.get(item.id);
  ctx.queuedMeta.delete(item.id);
  startSessionRun(ctx, row, item.text, true, extra?.meta, extra?.waiters);
}

/** Starts a run of the text, or queues it behind the running one (`waiter` gets its outcome). */
export function send(
  ctx: SessionsCtx,
  id: string,
  text: string,
  meta: TurnMeta,
  waiter?: Waiter,
): { sessionId: string; queued: boolean; pending: number } {
  const { store } = ctx;
  checkText(text);
  const row = requireSession(ctx, id);
  requireAgent(ctx, row);
  if (ctx.runs.has(id) || store.queue(id).length > 0) {
    const itemId = store.enqueue(id, text, ctx.now());
    if (waiter || meta.goalId || meta.status) {
      ctx.queuedMeta.set(itemId, { meta, waiters: waiter ? [waiter] : [] });
    }
    publishQueue(ctx, id);
    pump(ctx, id);
    return { sessionId: id, queued: true, pending: store.queue(id).length };
  }
  startSessionRun(ctx, row, text, false, meta, waiter ? [waiter] : []);
  return { sessionId: id, queued: false, pending: 0 };
}

/** Settles the waiters of queued items that will never run. */
export function dropQueued(
  ctx: SessionsCtx,
  itemIds: Iterable<number>,
  agent: string,
  why: string,
) {
  for (const itemId of itemIds) {
    const extra = ctx.queuedMeta.get(itemId);
    ctx.queuedMeta.delete(itemId);
    for (const w of extra?.waiters ?? []) w(never(agent, why));
  }
}

/**
 * Recovery of what the last process left behind: each run still in flight becomes an assistant
 * message with the error INTERRUPTED_ERROR (its partial output kept), the process group it left is
 * killed when it is still the same process (pid and start time), and every session is idle.
 */
export function recoverRuns(ctx: SessionsCtx) {
  const { store, now } = ctx;
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
      publish(ctx, "new_message", {
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
}
