/**
 * Test support for the agent features: a temp tree with an agents root, an agents config whose
 * agents are the scripted fixture CLI (tests/fixtures/agents/bin/script_agent.ts, provider
 * `jsonl`), and a harness that serves the whole agents surface (`lib/agents/mod.ts`) with the
 * event channel on a loopback port, capturing every bus event.
 *
 * @example
 * ```ts
 * await withAgentsTree(async (dir) => {
 *   const config = await scriptedConfig(dir, { worker: { rules: [{ match: "", replies: ["ok"] }] } });
 *   await using h = await serveAgents(config, `${dir}/data`);
 *   const s = (await h.api("POST", "/api/sessions", { agent: "worker" })).json;
 * });
 * ```
 * @module
 */
import { Hono } from "hono";
import { type AgentsFile, loadAgentsConfig } from "../../lib/agents/config.ts";
import { type AgentFeatures, openAgents } from "../../lib/agents/mod.ts";
import { agentRoutes } from "../../routes/agents.ts";
import { createBus, type EventBus, type PublicEvent } from "../../lib/events/bus.ts";
import { createFanout } from "../../lib/events/fanout.ts";
import { eventRoutes } from "../../routes/events.ts";
import { freePort } from "./server.ts";

const root = new URL("../..", import.meta.url).pathname;
export const scriptAgent = `${root}tests/fixtures/agents/bin/script_agent.ts`;

// deno-lint-ignore no-explicit-any -- response bodies are checked field by field
export type Json = any;

export type ScriptReply = string | {
  text?: string;
  touch?: string[];
  crash?: boolean;
  hang?: boolean;
  delayMs?: number;
  error?: string;
  kind?: string;
};
export type Script = { rules: { match: string; replies: ScriptReply[] }[] };

/** A temp dir with `work/` (the agents root), removed afterwards. */
export async function withAgentsTree(f: (dir: string) => Promise<void>) {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-agents-" }));
  try {
    await Deno.mkdir(`${dir}/work`, { recursive: true });
    await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Writes one script per agent (`DIR/scripts/NAME.json`, or the path of a script file given as a
 * string; state in `DIR/state/NAME`) and an agents
 * config running them; `extra` adds fields per agent (fallback, maxRetries) and `top` top-level
 * fields.
 */
export async function scriptedConfig(
  dir: string,
  scripts: Record<string, Script | string>,
  opts: { extra?: Record<string, Record<string, unknown>>; top?: Record<string, unknown> } = {},
): Promise<AgentsFile> {
  await Deno.mkdir(`${dir}/scripts`, { recursive: true });
  const agents: Record<string, unknown> = {};
  for (const [name, script] of Object.entries(scripts)) {
    let file = script as string;
    if (typeof script !== "string") {
      file = `${dir}/scripts/${name}.json`;
      await Deno.writeTextFile(file, JSON.stringify(script));
    }
    agents[name] = {
      provider: "jsonl",
      command: Deno.execPath(),
      args: ["run", "-A", scriptAgent, "--script", file, "--state", `${dir}/state/${name}`],
      ...(opts.extra?.[name] ?? {}),
    };
  }
  const path = `${dir}/agents.json`;
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      roots: ["work"],
      killGraceSeconds: 0.2,
      retryBaseMs: 10,
      goalDelaySeconds: 0.05,
      ...(opts.top ?? {}),
      agents,
    }),
  );
  return await loadAgentsConfig(path);
}

/** The prompts one scripted agent was given, oldest first. */
export async function promptsOf(dir: string, agent: string): Promise<string[]> {
  try {
    const text = await Deno.readTextFile(`${dir}/state/${agent}/prompts.jsonl`);
    return text.split("\n").filter(Boolean).map((l) => JSON.parse(l).prompt);
  } catch {
    return [];
  }
}

/** Every event of `bus`, kept in order, with a wait for the first that matches. */
export type EventLog = {
  events: PublicEvent[];
  waitFor(pred: (e: PublicEvent) => boolean, ms?: number): Promise<PublicEvent>;
  /** Stops capturing. */
  off(): void;
};

export function captureEvents(bus: EventBus, defaultMs = 15_000): EventLog {
  const events: PublicEvent[] = [];
  const waiters = new Set<
    { pred: (e: PublicEvent) => boolean; resolve: (e: PublicEvent) => void }
  >();
  const off = bus.subscribe((e) => {
    events.push(e.payload);
    for (const w of [...waiters]) {
      if (w.pred(e.payload)) {
        waiters.delete(w);
        w.resolve(e.payload);
      }
    }
  });
  return {
    events,
    off,
    waitFor(pred, ms = defaultMs) {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      let timer: ReturnType<typeof setTimeout>;
      return new Promise<PublicEvent>((resolve, reject) => {
        const w = {
          pred,
          resolve: (e: PublicEvent) => {
            clearTimeout(timer);
            resolve(e);
          },
        };
        waiters.add(w);
        timer = setTimeout(() => {
          waiters.delete(w);
          reject(
            new Error(`no matching event in ${ms} ms; saw ${events.map((e) => e.event).join(" ")}`),
          );
        }, ms);
      });
    },
  };
}

/** A JSON request to `url + path`: a string body goes as it is, anything else as JSON. */
export function jsonApi(url: string) {
  return async (
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: Json }> => {
    const r = await fetch(url + path, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, json: text ? JSON.parse(text) : null };
  };
}

/**
 * `routes` and the event channel of `bus` on a loopback port. `stop` (idempotent) closes the
 * listeners, then `close` (the services behind the routes), then the server.
 */
export function serveWithEvents(
  bus: EventBus,
  routes: Hono,
  close: () => Promise<void>,
): { url: string; stop: () => Promise<void> } {
  const fanout = createFanout(bus, { pingMs: 60_000 });
  const app = new Hono();
  app.route("/", routes);
  app.route("/", eventRoutes(bus, { fanout }));
  const port = freePort();
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, app.fetch);
  let stopped = false;
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (stopped) return;
      stopped = true;
      fanout.closeAll();
      await close();
      await server.shutdown();
    },
  };
}

export type AgentsHarness = {
  url: string;
  agents: AgentFeatures;
  events: PublicEvent[];
  of(event: string, sessionId?: string): PublicEvent[];
  waitFor(pred: (e: PublicEvent) => boolean, ms?: number): Promise<PublicEvent>;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }>;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
};

/** The agents surface and `/api/events` on a loopback port; every bus event is kept. */
export async function serveAgents(
  config: AgentsFile,
  dataDir: string,
  opts: { watchMemory?: boolean } = {},
): Promise<AgentsHarness> {
  const bus = createBus();
  const log = captureEvents(bus);
  const agents = await openAgents({ bus, dataDir, config, watchMemory: opts.watchMemory });
  const { url, stop } = serveWithEvents(bus, agentRoutes(agents), async () => {
    await agents.close();
    log.off();
  });
  return {
    url,
    agents,
    events: log.events,
    of: (event, sessionId) =>
      log.events.filter((e) => e.event === event && (!sessionId || e.sessionId === sessionId)),
    waitFor: log.waitFor,
    api: jsonApi(url),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
