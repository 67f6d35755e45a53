/**
 * The event bus of the agent channel (docs/ARCHITECTURE.md, "Event channel"): every public event gets the next id
 * of one monotonically increasing sequence and lands in a ring of the last 1000; internal topics
 * (`trace`) get no id, never enter the ring and reach only listeners that ask for them. Publishing
 * calls listeners synchronously and never waits on them: a transport that cannot keep up must
 * buffer or drop its own client, so one slow reader never holds back another.
 *
 * @example
 * ```ts
 * import { createBus } from "./bus.ts";
 * const bus = createBus();
 * const off = bus.subscribe((e) => console.log(e.id, e.data));
 * bus.publish("agent", "agent_output", { agentId: "a1", text: "hi" });
 * off();
 * ```
 * @module
 */

/** The JSON payload every client sees: `topic` and `event` plus the event's own fields. */
export type PublicEvent = { topic: string; event: string; [field: string]: unknown };

/** One published event. `id` is absent for internal topics; `data` is the payload's JSON. */
export type BusEvent = { id?: number; topic: string; payload: PublicEvent; data: string };

export type Listener = (event: BusEvent) => void;

export type ReplayResult = {
  /** True when events after the cursor are no longer (or not yet) known: send `replay_gap`. */
  gap: boolean;
  /** Ring events with an id above the cursor (the whole ring after a gap), oldest first. */
  events: BusEvent[];
};

export type EventBus = {
  /** Publishes one event; returns it with its id (none for internal topics). */
  publish(topic: string, event: string, fields?: Record<string, unknown>): BusEvent;
  /** Id of the last public event, 0 before the first. */
  lastId(): number;
  /** Public events after `cursor` from the ring, and whether there is a gap before them. */
  replay(cursor: number): ReplayResult;
  /** Calls `listener` for each future event; internal topics only with `internal: true`. */
  subscribe(listener: Listener, opts?: { internal?: boolean }): () => void;
};

export const INTERNAL_TOPICS: ReadonlySet<string> = new Set(["trace"]);
export const RING_SIZE = 1000;

export function createBus(opts: { ringSize?: number } = {}): EventBus {
  const size = opts.ringSize ?? RING_SIZE;
  const ring: BusEvent[] = [];
  let head = 0; // index of the oldest entry once the ring is full
  let last = 0;
  const publicListeners = new Set<Listener>();
  const internalListeners = new Set<Listener>();

  const deliver = (set: Set<Listener>, e: BusEvent) => {
    for (const l of [...set]) {
      try {
        l(e);
      } catch (err) {
        // A failing listener is its transport's bug; it must not stop delivery to the others.
        console.error("hearth: event listener failed:", err);
      }
    }
  };

  return {
    publish(topic, event, fields = {}) {
      const payload: PublicEvent = { ...fields, topic, event };
      const data = JSON.stringify(payload);
      if (INTERNAL_TOPICS.has(topic)) {
        const e: BusEvent = { topic, payload, data };
        deliver(internalListeners, e);
        return e;
      }
      const e: BusEvent = { id: ++last, topic, payload, data };
      if (ring.length < size) ring.push(e);
      else {
        ring[head] = e;
        head = (head + 1) % size;
      }
      deliver(publicListeners, e);
      deliver(internalListeners, e);
      return e;
    },
    lastId: () => last,
    replay(cursor) {
      const ordered = ring.length < size ? ring : [...ring.slice(head), ...ring.slice(0, head)];
      const oldest = ordered[0]?.id ?? last + 1;
      if (cursor > last) return { gap: true, events: ordered };
      if (cursor < oldest - 1) return { gap: true, events: ordered };
      return { gap: false, events: ordered.filter((e) => e.id! > cursor) };
    },
    subscribe(listener, o = {}) {
      const set = o.internal ? internalListeners : publicListeners;
      set.add(listener);
      return () => set.delete(listener);
    },
  };
}
