/**
 * Listener management for the agent event channel (docs/ARCHITECTURE.md, "Event channel"), whatever the transport:
 * the listener cap, the replay-then-live splice, the shared heartbeat and the slow-client policy.
 * A transport (SSE, WebSocket) hands in an {@link Outlet} that queues bytes for one client without
 * ever waiting; after each message the fanout reads the outlet's backlog and drops a client that
 * has more than `bufferLimit` bytes unsent (beyond the replay it asked for on resuming), so
 * publishing stays synchronous and one stalled reader never holds back the others or grows the
 * server's memory without bound.
 *
 * @example
 * ```ts
 * import { createBus } from "./bus.ts";
 * import { createFanout } from "./fanout.ts";
 * const bus = createBus();
 * const fanout = createFanout(bus, { maxListeners: 2 });
 * const sub = fanout.open({
 *   send: (m) => console.log(m.kind === "event" ? m.event.data : m.kind),
 *   backlog: () => 0,
 *   end: () => {},
 * }, { cursor: 0 });
 * bus.publish("agent", "agent_output", { agentId: "a1", text: "hi" });
 * sub?.close();
 * ```
 * @module
 */
import type { BusEvent, EventBus } from "./bus.ts";

/** The data ping sent with every heartbeat; it carries no id, so it never moves a cursor. */
export const PING_DATA = '{"topic":"system","event":"ping"}';

export const DEFAULT_MAX_LISTENERS = 256;
export const DEFAULT_BUFFER_LIMIT = 1024 * 1024;
export const DEFAULT_PING_MS = 15_000;

export type FanoutOptions = {
  /** Concurrent listeners, every transport together (default 256). */
  maxListeners?: number;
  /** Unsent bytes a listener may hold before it is dropped (default 1 MiB). */
  bufferLimit?: number;
  /** Heartbeat interval in ms (default 15 000). */
  pingMs?: number;
};

/** Live counters; the record is updated in place, so it can be read at any time (`/metrics`). */
export type FanoutStats = {
  /** Listeners holding a place now. */
  listeners: number;
  /** Most listeners held at once. */
  peak: number;
  /** Listeners accepted since start. */
  opened: number;
  /** Listeners refused because the cap was reached. */
  rejected: number;
  /** Listeners dropped because they fell more than `bufferLimit` bytes behind. */
  dropped: number;
};

/** One thing to send: a bus event (it has an id), a heartbeat, or a replay-gap notice (no id). */
export type Message =
  | { kind: "event"; event: BusEvent }
  | { kind: "ping" }
  | { kind: "replay_gap"; data: string };

/** How a transport reaches one client. None of these may block or await. */
export type Outlet = {
  /** Queues one message for the client. Throwing means the client is gone. */
  send(message: Message): void;
  /** Bytes handed to the transport that the client has not taken yet. */
  backlog(): number;
  /** Ends the connection from the server side; `dropped` when the client fell too far behind. */
  end(dropped: boolean): void;
};

/** A listener's handle, for its transport. */
export type Subscription = {
  /** The transport can send now: what was queued until then (hello, replay) goes out in order. */
  ready(): void;
  /** The client went away: release its place and stop delivery. Idempotent. */
  close(): void;
};

export type OpenOptions = {
  /** Last event id the client has seen: replay what followed it. Absent: live events only. */
  cursor?: number;
  /** False when the transport cannot send yet (a WebSocket before `open`); default true. */
  ready?: boolean;
};

export type Fanout = {
  readonly bus: EventBus;
  readonly options: Readonly<Required<FanoutOptions>>;
  readonly stats: FanoutStats;
  /** True when the next listener would be refused. */
  full(): boolean;
  /** Claims a place and starts delivery, or returns null at the cap. */
  open(outlet: Outlet, opts?: OpenOptions): Subscription | null;
  /** Ends every listener from the server side (graceful shutdown: long-lived streams end). */
  closeAll(): void;
};

type Entry = {
  outlet: Outlet;
  ready: boolean;
  /** Messages queued before the transport was ready, and their approximate size. */
  pending: Message[];
  pendingBytes: number;
  /** Highest event id handed to the outlet: the splice never sends an id twice. */
  lastId: number;
  /** True while the initial replay is queued: it is owed to the client, not a backlog. */
  replaying: boolean;
  /**
   * Backlog bytes excused because they are the replay the client asked for. It only shrinks (to
   * the lowest backlog seen), so it is gone once the client has caught up; until then the client
   * may be `bufferLimit` behind on top of it. Without it a resume from a ring bigger than the
   * limit would be dropped at once, reconnect, and be dropped again.
   */
  allowance: number;
  closed: boolean;
  off: () => void;
};

function positiveInt(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`event channel: ${name} must be a positive whole number, got ${value}`);
  }
  return value;
}

function approxBytes(m: Message): number {
  if (m.kind === "event") return m.event.data.length + 24;
  if (m.kind === "ping") return PING_DATA.length + 16;
  return m.data.length + 8;
}

/** The `replay_gap` notice for a client whose cursor the ring cannot continue from. */
export function replayGapData(cursor: number, serverLastId: number): string {
  return JSON.stringify({
    topic: "system",
    event: "replay_gap",
    lastEventId: cursor,
    serverLastId,
  });
}

export function createFanout(bus: EventBus, opts: FanoutOptions = {}): Fanout {
  const options = {
    maxListeners: positiveInt("maxListeners", opts.maxListeners, DEFAULT_MAX_LISTENERS),
    bufferLimit: positiveInt("bufferLimit", opts.bufferLimit, DEFAULT_BUFFER_LIMIT),
    pingMs: positiveInt("pingMs", opts.pingMs, DEFAULT_PING_MS),
  };
  const stats: FanoutStats = { listeners: 0, peak: 0, opened: 0, rejected: 0, dropped: 0 };
  const entries = new Set<Entry>();
  // One timer for every listener, alive only while someone listens (no idle timer to leak).
  let timer: ReturnType<typeof setInterval> | undefined;

  const release = (entry: Entry): boolean => {
    if (entry.closed) return false;
    entry.closed = true;
    entry.off();
    entry.pending = [];
    entries.delete(entry);
    stats.listeners = entries.size;
    if (entries.size === 0 && timer !== undefined) {
      clearInterval(timer);
      timer = undefined;
    }
    return true;
  };

  const drop = (entry: Entry) => {
    if (!release(entry)) return;
    stats.dropped++;
    try {
      entry.outlet.end(true);
    } catch { /* the transport is already gone */ }
  };

  /** Drops the listener when it is more than `bufferLimit` behind, beyond its replay. */
  const check = (entry: Entry, backlog: number) => {
    if (entry.replaying) return;
    if (backlog < entry.allowance) entry.allowance = backlog;
    if (backlog - entry.allowance > options.bufferLimit) drop(entry);
  };

  const deliver = (entry: Entry, m: Message) => {
    if (entry.closed) return;
    if (!entry.ready) {
      entry.pending.push(m);
      entry.pendingBytes += approxBytes(m);
      check(entry, entry.pendingBytes);
      return;
    }
    try {
      entry.outlet.send(m);
    } catch {
      // The transport refused (stream closed, socket gone): the client has left.
      release(entry);
      return;
    }
    check(entry, entry.outlet.backlog());
  };

  const ping = () => {
    for (const entry of [...entries]) if (entry.ready) deliver(entry, { kind: "ping" });
  };

  return {
    bus,
    options,
    stats,
    full: () => entries.size >= options.maxListeners,
    open(outlet, o = {}) {
      if (entries.size >= options.maxListeners) {
        stats.rejected++;
        return null;
      }
      const entry: Entry = {
        outlet,
        ready: o.ready ?? true,
        pending: [],
        pendingBytes: 0,
        lastId: 0,
        replaying: true,
        allowance: 0,
        closed: false,
        off: () => {},
      };
      entries.add(entry);
      stats.listeners = entries.size;
      stats.opened++;
      stats.peak = Math.max(stats.peak, entries.size);
      timer ??= setInterval(ping, options.pingMs);

      const live = (e: BusEvent) => {
        if (e.id === undefined || e.id <= entry.lastId) return;
        entry.lastId = e.id;
        deliver(entry, { kind: "event", event: e });
      };
      // Subscribe before reading the ring, holding live events back until the replay is queued:
      // an event published in between is then either in the replay or held, and the id check
      // in `live` sends it once.
      let held: BusEvent[] | null = o.cursor === undefined ? null : [];
      entry.off = bus.subscribe((e) => held ? held.push(e) : live(e));
      if (o.cursor !== undefined) {
        const r = bus.replay(o.cursor);
        if (r.gap) {
          deliver(entry, { kind: "replay_gap", data: replayGapData(o.cursor, bus.lastId()) });
        }
        for (const e of r.events) live(e);
        const waiting: BusEvent[] = held ?? [];
        held = null;
        for (const e of waiting) live(e);
      }
      entry.replaying = false;
      entry.allowance = entry.ready ? outlet.backlog() : entry.pendingBytes;
      const excused = entry.ready ? 0 : entry.pendingBytes;

      return {
        ready() {
          if (entry.closed || entry.ready) return;
          entry.ready = true;
          const queued = entry.pending;
          // What arrived live before the transport was ready counts; the replay does not.
          const late = Math.max(0, entry.pendingBytes - excused);
          entry.pending = [];
          entry.pendingBytes = 0;
          entry.replaying = true;
          for (const m of queued) deliver(entry, m);
          entry.replaying = false;
          if (entry.closed) return;
          const backlog = outlet.backlog();
          entry.allowance = Math.max(0, backlog - late);
          check(entry, backlog);
        },
        close() {
          release(entry);
        },
      };
    },
    closeAll() {
      for (const entry of [...entries]) {
        if (!release(entry)) continue;
        try {
          entry.outlet.end(false);
        } catch { /* already gone */ }
      }
    },
  };
}
