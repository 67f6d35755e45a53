/**
 * One watcher per Hearth worker, for the manager: it keeps the worker's event stream open
 * (`/api/events`, through {@link runSseClient}, reconnecting with backoff), polls `/api/sessions`
 * and `/api/messages/latest` every `pollMs`, and refreshes the latest message as soon as the stream
 * says it changed (`new_message`, `agent_done`), after a `replay_gap` (the worker restarted or the
 * manager fell behind its ring: events were lost) and whenever the stream (re)opens, so the
 * manager's view is current well before the next poll. Fetches of one kind never overlap: an event
 * that arrives while one is in flight schedules exactly one more, so the last answer is never
 * older than the last event.
 *
 * `status` follows the event stream, because only an open stream keeps `latestMessage` live:
 * `connecting` until the first connection settles, then `up` while the stream is open and `down`
 * while it is not (refused, e.g. 503 `SSE_CAPACITY`, or unreachable). While a worker is down its
 * last known sessions and latest message stay in the snapshot (polling goes on: a worker whose
 * stream is refused but whose API answers keeps them current). `lastError` is the most recent
 * problem not yet cleared by a success of the same kind.
 *
 * A restarted worker numbers its events from 1 again. When the manager's cursor is ahead of the
 * worker the worker says `replay_gap`; when the new worker has already passed the old cursor it
 * cannot tell, which is why every (re)connection refreshes sessions and the latest message too.
 *
 * @example
 * ```ts
 * import { watchWorker } from "./instances.ts";
 * const w = watchWorker({ url: "http://127.0.0.1:8000", pollMs: 5000 });
 * console.log(w.snapshot().status); // "connecting", later "up"
 * await w.stop();
 * ```
 * @module
 */
import { z } from "zod";
import { runSseClient, type SseState } from "./sse_client.ts";

export type InstanceStatus = "connecting" | "up" | "down";

/** A worker's latest chat message and the session it belongs to. */
export type LatestMessage = {
  sessionId: string;
  role: string;
  content: string;
  at: string | number;
  error?: string;
  errorKind?: string;
  [field: string]: unknown;
};

/** A worker session as the worker reports it (`id` checked, the other fields passed on as-is). */
export type WorkerSession = { id: string; [field: string]: unknown };

export type InstanceSnapshot = {
  url: string;
  status: InstanceStatus;
  /** The event stream's own state (`backoff` = waiting to reconnect). */
  stream: SseState;
  /** ISO time of the last answer from the worker (an event, a ping, a poll). */
  lastSeen: string | null;
  lastError?: string;
  sessions: WorkerSession[];
  latestMessage: LatestMessage | null;
  /** The last event id received: the cursor the next connection resumes from. */
  lastEventId: string | null;
  /** Events received (pings excluded). */
  events: number;
  /** Connection attempts after the first. */
  reconnects: number;
  /** `replay_gap` events seen (the worker restarted, or events were lost). */
  replayGaps: number;
  /** Delay before the next connection attempt, while in backoff. */
  retryInMs?: number;
};

export type WatcherOptions = {
  /** Base URL of the worker (`http(s)://host:port`, optionally with a path prefix). */
  url: string;
  /** Sent to the worker as `Authorization: Bearer KEY`. */
  workerKey?: string;
  /** Poll interval for sessions and the latest message (default 5000 ms). */
  pollMs?: number;
  /** Reconnect backoff bounds (default 1000 -> 30000 ms). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Reconnect when the stream is silent this long (default 45000 ms; the worker pings every 15 s). */
  idleTimeoutMs?: number;
  /** Time limit of one poll request (default 10000 ms). */
  requestTimeoutMs?: number;
  /** A line per status change (default: none). */
  log?: (line: string) => void;
  now?: () => number;
};

export type WorkerWatcher = {
  readonly url: string;
  snapshot(): InstanceSnapshot;
  /**
   * Calls `fn` after anything in the snapshot may have changed (an event, a poll answer, a stream
   * state change; not pings). Returns the unsubscribe function. Callers coalesce: it can fire often.
   */
  subscribe(fn: () => void): () => void;
  /** Closes the stream, stops polling and waits for every request in flight. */
  stop(): Promise<void>;
};

const messageSchema = z.looseObject({
  role: z.string(),
  content: z.string(),
  at: z.union([z.string(), z.number()]),
  error: z.string().optional(),
  errorKind: z.string().optional(),
});
const latestSchema = z.object({
  sessionId: z.string().nullish(),
  message: messageSchema.nullable(),
});
const sessionsSchema = z.object({ sessions: z.array(z.looseObject({ id: z.string() })) });

/** Events after which the session list is stale (re-polled, coalesced). */
const SESSION_EVENTS = new Set([
  "session_created",
  "session_deleted",
  "agent_status",
  "queue_update",
]);

/** Starts watching at once. */
export function watchWorker(opts: WatcherOptions): WorkerWatcher {
  const url = opts.url.replace(/\/+$/, "");
  const now = opts.now ?? Date.now;
  const log = opts.log ?? (() => {});
  const pollMs = opts.pollMs ?? 5000;
  const requestTimeoutMs = opts.requestTimeoutMs ?? 10_000;
  const auth: Record<string, string> = opts.workerKey
    ? { authorization: `Bearer ${opts.workerKey}` }
    : {};
  const stopper = new AbortController();

  let status: InstanceStatus = "connecting";
  let stream: SseState = "connecting";
  let lastSeen: number | null = null;
  let sessions: WorkerSession[] = [];
  let latestMessage: LatestMessage | null = null;
  let lastEventId: string | null = null;
  let events = 0;
  let attempts = 0;
  let replayGaps = 0;
  let retryInMs: number | undefined;
  // Per source, so that a success clears only its own kind of failure.
  const errors = new Map<string, { message: string; at: number }>();

  const listeners = new Set<() => void>();
  const changed = () => {
    for (const fn of listeners) {
      try {
        fn();
      } catch (e) {
        log(`worker ${url}: a change listener failed: ${(e as Error).message}`);
      }
    }
  };
  const seen = () => (lastSeen = now());
  const fail = (source: string, message: string) => errors.set(source, { message, at: now() });
  const setStatus = (next: InstanceStatus, why?: string) => {
    if (next === status) return;
    status = next;
    log(`worker ${url} ${next}${why ? ` (${why})` : ""}`);
  };

  /** GET one worker endpoint as validated JSON; failures are recorded under `source`. */
  const getJson = async <T>(source: string, path: string, schema: z.ZodType<T>) => {
    if (stopper.signal.aborted) return undefined;
    const ctrl = new AbortController();
    const onStop = () => ctrl.abort(new Error("stopped"));
    stopper.signal.addEventListener("abort", onStop, { once: true });
    const timer = setTimeout(
      () => ctrl.abort(new Error(`no answer in ${requestTimeoutMs} ms`)),
      requestTimeoutMs,
    );
    try {
      const res = await fetch(`${url}${path}`, { headers: auth, signal: ctrl.signal });
      const text = await res.text();
      if (stopper.signal.aborted) return undefined;
      seen();
      if (!res.ok) {
        fail(source, `GET ${path}: HTTP ${res.status} ${text.replace(/\s+/g, " ").slice(0, 200)}`);
        return undefined;
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        fail(source, `GET ${path}: answer is not JSON`);
        return undefined;
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        fail(source, `GET ${path}: unexpected answer: ${issue.path.join(".")} ${issue.message}`);
        return undefined;
      }
      errors.delete(source);
      return parsed.data;
    } catch (e) {
      if (!stopper.signal.aborted) {
        const reason = ctrl.signal.aborted ? ctrl.signal.reason : e;
        fail(source, `GET ${path}: ${(reason as Error)?.message ?? String(reason)}`);
      }
      return undefined;
    } finally {
      clearTimeout(timer);
      stopper.signal.removeEventListener("abort", onStop);
    }
  };
  /** `getJson` whose answer (or failure) is announced once the caller has applied it. */
  const fetchThen = async <T>(
    source: string,
    path: string,
    schema: z.ZodType<T>,
    apply: (data: T) => void,
  ) => {
    const data = await getJson(source, path, schema);
    if (data !== undefined) apply(data);
    if (!stopper.signal.aborted) changed();
  };

  const refreshLatest = singleFlight(() =>
    fetchThen("latest", "/api/messages/latest", latestSchema, (r) => {
      latestMessage = r.message && r.sessionId ? { ...r.message, sessionId: r.sessionId } : null;
    })
  );
  const refreshSessions = singleFlight(() =>
    fetchThen("sessions", "/api/sessions", sessionsSchema, (r) => (sessions = r.sessions))
  );
  const refreshAll = () => {
    refreshLatest.run();
    refreshSessions.run();
  };

  const handleEvent = (payload: unknown, id?: string) => {
    seen();
    if (!payload || typeof payload !== "object") {
      fail("events", `event is not a JSON object: ${JSON.stringify(payload)?.slice(0, 120)}`);
      return;
    }
    const p = payload as Record<string, unknown>;
    if (p.topic === "system" && p.event === "ping") return;
    events++;
    if (id !== undefined) lastEventId = id;
    switch (p.event) {
      case "replay_gap":
        replayGaps++;
        log(`worker ${url}: replay gap (events were missed), refreshing`);
        refreshAll();
        return;
      case "new_message":
      case "agent_done":
        refreshLatest.run();
        return;
      case "session_list": {
        const r = sessionsSchema.safeParse(p);
        if (r.success) sessions = r.data.sessions;
        else refreshSessions.run();
        return;
      }
      default:
        if (SESSION_EVENTS.has(String(p.event))) refreshSessions.run();
    }
  };
  /** Every event but pings may change the snapshot. */
  const onEvent = (payload: unknown, id?: string) => {
    handleEvent(payload, id);
    const p = payload as Record<string, unknown> | null;
    if (!(p?.topic === "system" && p?.event === "ping")) changed();
  };

  const eventsDone = runSseClient({
    url: `${url}/api/events`,
    headers: auth,
    signal: stopper.signal,
    minBackoffMs: opts.minBackoffMs,
    maxBackoffMs: opts.maxBackoffMs,
    idleTimeoutMs: opts.idleTimeoutMs,
    onEvent,
    onInvalid: (reason) => {
      fail("events", reason);
      changed();
    },
    onState(state, detail) {
      stream = state;
      if (state === "connecting") {
        attempts = detail.attempt;
        retryInMs = undefined;
      } else if (state === "open") {
        seen();
        errors.delete("events");
        setStatus("up");
        // Whatever happened while the stream was closed, the view is current again from here.
        refreshAll();
      } else {
        retryInMs = detail.delayMs;
        const why = `event stream: ${detail.error ?? "closed"}`;
        fail("events", why);
        setStatus("down", `${why}; retry in ${detail.delayMs} ms`);
      }
      changed();
    },
  });

  refreshAll();
  const poll = setInterval(refreshAll, pollMs);

  const lastError = () => {
    let latest: { message: string; at: number } | undefined;
    for (const e of errors.values()) if (!latest || e.at >= latest.at) latest = e;
    return latest?.message;
  };

  return {
    url,
    snapshot() {
      const error = lastError();
      return {
        url,
        status,
        stream,
        lastSeen: lastSeen === null ? null : new Date(lastSeen).toISOString(),
        ...(error ? { lastError: error } : {}),
        sessions,
        latestMessage,
        lastEventId,
        events,
        reconnects: Math.max(0, attempts - 1),
        replayGaps,
        ...(retryInMs !== undefined ? { retryInMs } : {}),
      };
    },
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    async stop() {
      clearInterval(poll);
      stopper.abort();
      await Promise.all([eventsDone, refreshLatest.idle(), refreshSessions.idle()]);
      listeners.clear();
    },
  };
}

/**
 * Runs `task` with at most one call in flight; a `run()` during a call makes exactly one more
 * call after it, so the last result is never older than the last request for one.
 */
function singleFlight(task: () => Promise<void>): { run(): void; idle(): Promise<void> } {
  let current: Promise<void> | null = null;
  let again = false;
  return {
    run() {
      if (current) {
        again = true;
        return;
      }
      current = (async () => {
        do {
          again = false;
          await task();
        } while (again);
      })().finally(() => (current = null));
    },
    idle: () => current ?? Promise.resolve(),
  };
}
