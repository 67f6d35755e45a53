/**
 * The agent event channel over HTTP (docs/ARCHITECTURE.md, "Event channel"): `GET /api/events` is a data-only SSE
 * stream and `GET /ws` a WebSocket carrying the same JSON payloads, for clients whose SSE never
 * opens. Both resume from a cursor (`Last-Event-ID` header, else `?lastEventId=`), share one
 * listener cap (503 `{"error":"SSE_CAPACITY"}`) and drop a client that falls `bufferLimit` bytes
 * behind; the listener bookkeeping lives in `lib/events/fanout.ts`, this module only frames bytes.
 *
 * SSE wire format: `: connected` and `retry: <ms>` at once; each bus event as
 * `id: <id>\ndata: <json>\n\n` (never an `event:` field); every `pingMs` a `: ping` comment and a
 * `{"topic":"system","event":"ping"}` data message without id; after a cursor the ring cannot
 * continue from, one `replay_gap` notice without id before the replayed events. WebSocket frames
 * are the same JSON texts with the event id added as the field `"id"` (pings and notices have
 * none). Other methods than GET (and HEAD on `/api/events`) answer 405. An SSE stream that
 * wrote less than `coalesceMs` (10) ago sends what follows in one chunk at the end of that
 * window: one write per window per client instead of one per event, which is what lets 256
 * clients take 1000 events a second on two cores.
 *
 * @example
 * ```ts
 * import { createBus } from "../lib/events/bus.ts";
 * import { createFanout } from "../lib/events/fanout.ts";
 * import { eventRoutes } from "./events.ts";
 * const bus = createBus();
 * const fanout = createFanout(bus, { maxListeners: 256 });
 * app.route("/", eventRoutes(bus, { fanout }));
 * fanout.stats.listeners; // for /metrics
 * fanout.closeAll(); // before server.shutdown(): SSE streams would otherwise never end
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import type { BusEvent, EventBus } from "../lib/events/bus.ts";
import { flushTicker, SSE_HEADERS, sseStream, type SseWriter } from "./sse.ts";
import {
  createFanout,
  type Fanout,
  type FanoutOptions,
  type Message,
  type Outlet,
  PING_DATA,
} from "../lib/events/fanout.ts";
import { mountRoutes, routesOf, SERVE_ROUTES } from "./table.ts";

export type EventRouteOptions = FanoutOptions & {
  /** Reconnection delay announced to SSE clients (`retry:`), ms (default 3000). */
  retryMs?: number;
  /**
   * An SSE stream written less than this many ms ago batches what follows into its next chunk
   * (default 10; 0 writes each event at once). An event after a quiet spell always goes out at
   * once; a busy stream costs one write per window instead of one per event.
   */
  coalesceMs?: number;
  /**
   * A fanout made with `createFanout(bus, ...)`, so the caller can read its `stats` and call
   * `closeAll()` at shutdown. Its own options apply: do not pass `maxListeners`, `bufferLimit`
   * or `pingMs` beside it.
   */
  fanout?: Fanout;
};

export const DEFAULT_RETRY_MS = 3000;
export const DEFAULT_COALESCE_MS = 10;

const encoder = new TextEncoder();
const SSE_PING = encoder.encode(`: ping\n\ndata: ${PING_DATA}\n\n`);

/** `Last-Event-ID` header, else `?lastEventId=`; anything but a whole number is no cursor. */
export function parseCursor(header: string | undefined, query: string | undefined) {
  const raw = header?.trim() ? header.trim() : query?.trim();
  if (!raw || !/^\d+$/.test(raw)) return undefined;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Frames each bus event once, however many clients get it: live publishing hands one event to
 * every listener in a row, and a resume replays ring events other clients were sent already. The
 * cache lives as long as the event does (the ring holds the last 1000).
 */
function cachedFrames<T>(frame: (e: BusEvent) => T): (e: BusEvent) => T {
  const cache = new WeakMap<BusEvent, T>();
  return (e) => {
    let bytes = cache.get(e);
    if (bytes === undefined) {
      bytes = frame(e);
      cache.set(e, bytes);
    }
    return bytes;
  };
}

/** A bus event's JSON with its id appended (appended last, so the bus id is the one read). */
export function wsFrame(e: BusEvent): string {
  return `${e.data.slice(0, -1)},"id":${e.id}}`;
}

function capacityError(c: Context): Response {
  return c.json({ error: "SSE_CAPACITY" }, 503);
}

function methodNotAllowed(c: Context, allow: string): Response {
  return c.json({ error: "METHOD_NOT_ALLOWED" }, 405, { allow });
}

/** The channel's routes (routes/table.ts, group `events`) on their own app. */
export function eventRoutes(bus: EventBus, opts: EventRouteOptions = {}): Hono {
  return mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "events"), eventHandlers(bus, opts));
}

/** The handlers of the `events` rows of routes/table.ts. */
export function eventHandlers(bus: EventBus, opts: EventRouteOptions = {}) {
  let fanout = opts.fanout;
  if (fanout) {
    if (fanout.bus !== bus) throw new Error("eventRoutes: the fanout was made for another bus");
    const extra = [opts.maxListeners, opts.bufferLimit, opts.pingMs];
    if (extra.some((v) => v !== undefined)) {
      throw new Error(
        "eventRoutes: pass maxListeners, bufferLimit and pingMs to createFanout, not beside a fanout",
      );
    }
  } else fanout = createFanout(bus, opts);
  const fan = fanout;
  const retryMs = opts.retryMs ?? DEFAULT_RETRY_MS;
  const coalesceMs = opts.coalesceMs ?? DEFAULT_COALESCE_MS;
  for (const [name, v] of [["retryMs", retryMs], ["coalesceMs", coalesceMs]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new RangeError(`eventRoutes: ${name} must be a whole number of ms, got ${v}`);
    }
  }
  const ticker = flushTicker(coalesceMs);
  // Deno.serve logs a body stream's error; a stackless one makes that a single line.
  const droppedError = () => {
    const err = new Error(
      `event channel client dropped: more than ${fan.options.bufferLimit} bytes unsent`,
    );
    err.stack = err.message;
    return err;
  };
  const hello = encoder.encode(`: connected\n\nretry: ${retryMs}\n\n`);
  const sseEvent = cachedFrames((e) => encoder.encode(`id: ${e.id}\ndata: ${e.data}\n\n`));
  const wsEvent = cachedFrames(wsFrame);
  const sseBytes = (m: Message): Uint8Array =>
    m.kind === "event"
      ? sseEvent(m.event)
      : m.kind === "ping"
      ? SSE_PING
      : encoder.encode(`data: ${m.data}\n\n`);
  const wsText = (m: Message): string =>
    m.kind === "event" ? wsEvent(m.event) : m.kind === "ping" ? PING_DATA : m.data;
  const cursorOf = (c: Context) =>
    parseCursor(c.req.header("last-event-id"), c.req.query("lastEventId"));

  const eventStream = (c: Context) => {
    // Hono answers HEAD through the GET handler and throws the body away: no listener for it.
    if (c.req.method === "HEAD") {
      return new Response(null, { headers: { ...SSE_HEADERS, connection: "keep-alive" } });
    }
    // Frames wait in the writer until the response asks for more, and then go out as one
    // chunk: at once if the last chunk left `coalesceMs` ago or more, else at the next tick.
    // Each write costs the server (and each read the client) far more than framing an event,
    // so under load (many listeners, fast publishing, a lagging writer) events batch up. The
    // fan-out enforces the byte cap itself (it owns the listener), so the writer has none.
    let writer: SseWriter | undefined;
    const outlet: Outlet = {
      send: (m) => writer!.write(sseBytes(m)),
      backlog: () => writer?.backlog() ?? 0,
      end: (dropped) => dropped ? writer?.drop(droppedError()) : writer?.end(),
    };
    const sub = fan.open(outlet, { cursor: cursorOf(c), ready: false });
    if (!sub) return capacityError(c);
    const stream = sseStream({
      coalesceMs,
      ticker,
      headers: { connection: "keep-alive" },
      onStart: (w) => {
        writer = w;
        w.write(hello);
        sub.ready();
      },
      onClose: (why) => {
        if (why === "client") sub.close();
      },
    });
    return stream.response;
  };

  const eventSocket = (c: Context) => {
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
      return c.json({ error: "WEBSOCKET_UPGRADE_REQUIRED" }, 400);
    }
    let socket: WebSocket | undefined;
    // Ended before the handshake finished: close as soon as the socket opens.
    let endWith: [number, string] | undefined;
    const outlet: Outlet = {
      send: (m) => socket!.send(wsText(m)),
      backlog: () => socket?.bufferedAmount ?? 0,
      end: (dropped) => {
        endWith = dropped
          ? [1008, "event client fell too far behind; dropped"]
          : [1001, "server closing the event channel"];
        if (socket?.readyState === WebSocket.OPEN) socket.close(...endWith);
      },
    };
    // The place is claimed before upgrading, so a refused client gets a plain 503.
    const sub = fan.open(outlet, { cursor: cursorOf(c), ready: false });
    if (!sub) return capacityError(c);
    let response: Response;
    try {
      ({ socket, response } = Deno.upgradeWebSocket(c.req.raw));
    } catch (e) {
      sub.close();
      return c.json({ error: "WEBSOCKET_UPGRADE_REQUIRED", message: (e as Error).message }, 400);
    }
    const ws = socket;
    ws.onopen = () => endWith ? ws.close(...endWith) : sub.ready();
    ws.onclose = () => sub.close();
    ws.onerror = () => sub.close();
    // The channel is one-way; a client that talks is told so rather than silently ignored.
    ws.onmessage = () => {
      sub.close();
      ws.close(1003, "the event channel accepts no messages");
    };
    return response;
  };

  return {
    eventStream,
    eventSocket,
    eventsMethodNotAllowed: (c: Context) => methodNotAllowed(c, "GET, HEAD"),
    socketMethodNotAllowed: (c: Context) => methodNotAllowed(c, "GET"),
  };
}
