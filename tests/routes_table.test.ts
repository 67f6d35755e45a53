/**
 * The route table (routes/table.ts) is what the servers register and what the README lists: the
 * `serve` app's routes are the table's rows in its order, with the handlers it names (both ways:
 * nothing registered that the table lacks, nothing in the table left out); so are the routers of
 * the agents, the video API, the event channel, Anthropic, the prefill split and `hearth manager`;
 * and the README's `## Endpoints` table lists every endpoint row and no other.
 */
import assert from "node:assert/strict";
import { Hono } from "hono";
import { inspectRoutes } from "hono/dev";
import type { AgentFeatures } from "../lib/agents/mod.ts";
import { createBus } from "../lib/events/bus.ts";
import { createFanout } from "../lib/events/fanout.ts";
import { PD_PATH, type PdConfig } from "../lib/engine/prefill_decode.ts";
import type { VideoService } from "../lib/video/operations.ts";
import { agentRoutes } from "../routes/agents.ts";
import { anthropicRoutes } from "../routes/anthropic.ts";
import { createApp, HANDED_OVER, newSurfaces } from "../routes/app.ts";
import { eventRoutes } from "../routes/events.ts";
import { managerRoutes } from "../routes/manager.ts";
import { pdRoutes } from "../routes/prefill_decode.ts";
import { newServerState } from "../routes/state.ts";
import {
  MANAGER_ROUTES,
  mountRoutes,
  type Route,
  routesOf,
  SERVE_ROUTES,
  UI_PORT_ROUTES,
} from "../routes/table.ts";
import { loadUiAssets, SERVER_PAGES, uiServerHandler } from "../routes/ui.ts";
import { videoRoutes } from "../routes/video.ts";

/** One registered route as the test compares it: the handler's name, or none for middleware. */
type Seen = { method: string; path: string; handler: string | null };

const key = (r: { method: string; path: string }) => `${r.method} ${r.path}`;

/** What Hono registered on `app`, in order (a composed handler counts as the one inside it). */
function registered(app: Hono): Seen[] {
  return inspectRoutes(app).map((r) => ({
    method: r.method,
    path: r.path,
    handler: r.isMiddleware ? null : r.name,
  }));
}

/** What `rows` should register; `name` is the handler a row gets on this app. */
function expected(rows: readonly Route[], name = (r: Route) => r.handler): Seen[] {
  return rows.map((r) => ({
    method: r.method,
    path: r.path,
    handler: r.middleware ? null : name(r),
  }));
}

/** Both ways, with the difference named, then the order and the handlers. */
function assertSame(app: Hono, rows: Seen[], what: string): void {
  const seen = registered(app);
  const want = new Set(rows.map(key));
  const got = new Set(seen.map(key));
  const extra = [...got].filter((k) => !want.has(k));
  const missing = [...want].filter((k) => !got.has(k));
  assert.deepEqual(extra, [], `${what} registers routes routes/table.ts does not list`);
  assert.deepEqual(missing, [], `${what} leaves out rows of routes/table.ts`);
  assert.deepEqual(seen, rows, `${what}: the order or the handlers differ from routes/table.ts`);
}

const info = {
  remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 1 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;

const assets = await loadUiAssets();
const uiOptions = { pages: SERVER_PAGES, json: { "video-rules.json": () => ({}) } };

/** `hearth serve`'s app with every surface on: the prefill route, the UI, agents and video. */
function fullApp() {
  const state = newServerState("hearth-test");
  const surfaces = newSurfaces({ pingMs: 60_000 });
  const cfg = { role: "prefill", peer: "http://127.0.0.1:1" } as PdConfig;
  surfaces.pd = pdRoutes(
    state,
    cfg,
    { role: "prefill", remotePrefills: 0, fallbacks: 0 },
    () => Promise.resolve("fingerprint"),
  );
  surfaces.ui = { assets, options: uiOptions };
  return { app: createApp(state, surfaces), surfaces };
}

Deno.test("routes table: the serve app registers SERVE_ROUTES, in order, with their handlers", () => {
  const { app, surfaces } = fullApp();
  try {
    // Handed-over rows answer through the service's router (their middleware runs there).
    const rows = SERVE_ROUTES.filter((r) => !(HANDED_OVER[r.group] && r.middleware));
    assertSame(app, expected(rows, (r) => HANDED_OVER[r.group] ?? r.handler), "createApp");
  } finally {
    surfaces.fanout.closeAll();
  }
});

Deno.test("routes table: the routers behind the app register their groups' rows", () => {
  const fake = {} as never;
  const features = { service: fake, goals: fake, orchestrator: fake, memory: fake };
  assertSame(
    agentRoutes(features as unknown as AgentFeatures),
    expected(routesOf(SERVE_ROUTES, "goals", "sessions", "orchestrations", "memory")),
    "agentRoutes",
  );
  assertSame(
    videoRoutes({} as VideoService),
    expected(routesOf(SERVE_ROUTES, "video")),
    "videoRoutes",
  );
  const bus = createBus();
  const fanout = createFanout(bus, { pingMs: 60_000 });
  try {
    assertSame(eventRoutes(bus, { fanout }), expected(routesOf(SERVE_ROUTES, "events")), "events");
  } finally {
    fanout.closeAll();
  }
  const state = newServerState("hearth-test");
  assertSame(anthropicRoutes(state), expected(routesOf(SERVE_ROUTES, "anthropic")), "anthropic");
  const pd = pdRoutes(
    state,
    { role: "prefill", peer: "http://127.0.0.1:1" } as PdConfig,
    { role: "prefill", remotePrefills: 0, fallbacks: 0 },
    () => Promise.resolve("fingerprint"),
  );
  assertSame(pd, expected(routesOf(SERVE_ROUTES, "pd")), "pdRoutes");
  assert.deepEqual(routesOf(SERVE_ROUTES, "pd").map((r) => r.path), [PD_PATH]);
});

Deno.test("routes table: hearth manager registers MANAGER_ROUTES", () => {
  const manager = managerRoutes([], { apiKey: "k" });
  try {
    assertSame(manager, expected(MANAGER_ROUTES), "managerRoutes");
  } finally {
    manager.close();
  }
});

Deno.test("routes table: the --ui-port server answers the ui rows at its root, the API the rest", async () => {
  const { app, surfaces } = fullApp();
  try {
    assert.deepEqual(
      UI_PORT_ROUTES.map(key),
      routesOf(SERVE_ROUTES, "ui").filter((r) => r.path !== "/ui").map((r) =>
        key({ method: r.method, path: r.path.slice("/ui".length) })
      ),
    );
    const handler = uiServerHandler(assets, app, uiOptions);
    for (const r of UI_PORT_ROUTES.filter((r) => r.method === "GET")) {
      const path = r.path.replace("*", "style.css");
      const res = await handler(new Request(`http://127.0.0.1${path}`), info);
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get("content-security-policy") !== null, r.handler !== "uiDocument");
      await res.body?.cancel();
    }
    const api = await handler(new Request("http://127.0.0.1/v1/models"), info);
    assert.equal((await api.json()).object, "list");
  } finally {
    surfaces.fanout.closeAll();
  }
});

Deno.test("routes table: no method and path twice; a table name without a handler throws", () => {
  for (const [name, table] of [["SERVE_ROUTES", SERVE_ROUTES], ["MANAGER", MANAGER_ROUTES]]) {
    const routes = (table as Route[]).filter((r) => !r.middleware).map(key);
    assert.deepEqual(
      routes.filter((k, i) => routes.indexOf(k) !== i),
      [],
      `${name}: a second row for a method and path is never reached`,
    );
  }
  assert.throws(
    () => mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "ops"), { health: () => new Response() }),
    /no handler props for GET \/props/,
  );
});

// The README's endpoint list.

type ReadmeRow = { method: string; path: string; line: number };

/**
 * The rows of the markdown table in the README's `## Endpoints` section: its first two columns
 * are `method` and `path`, the path in backticks in Hono syntax; one row per method and path.
 */
function readmeEndpoints(markdown: string): ReadmeRow[] {
  const lines = markdown.split("\n");
  const start = lines.findIndex((l) => /^##\s+Endpoints\s*$/.test(l));
  if (start < 0) throw new Error("README.md has no `## Endpoints` section");
  const next = lines.findIndex((l, i) => i > start && /^##\s/.test(l));
  const end = next < 0 ? lines.length : next;
  const head = lines.findIndex((l, i) => i > start && i < end && l.trim().startsWith("|"));
  if (head < 0) throw new Error("README.md's `## Endpoints` section has no table");
  const cells = (l: string) =>
    l.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  const [m, p] = cells(lines[head]);
  if (m?.toLowerCase() !== "method" || p?.toLowerCase() !== "path") {
    throw new Error(`README.md:${head + 1}: the endpoint table's columns must start method | path`);
  }
  if (!/^\|?\s*:?-{3,}/.test(lines[head + 1]?.trim() ?? "")) {
    throw new Error(`README.md:${head + 2}: no separator row under the endpoint table's header`);
  }
  const rows: ReadmeRow[] = [];
  for (let i = head + 2; i < end && lines[i].trim().startsWith("|"); i++) {
    const [method, raw] = cells(lines[i]);
    const path = /^`([^`]+)`$/.exec(raw ?? "")?.[1];
    if (!/^[A-Z]+$/.test(method ?? "") || !path) {
      throw new Error(`README.md:${i + 1}: want | METHOD | \`/path\` |, got ${lines[i].trim()}`);
    }
    rows.push({ method, path, line: i + 1 });
  }
  return rows;
}

/**
 * A README row stands for the table's rows of its method and path; one ending `/*` that is not
 * itself a table path stands for the whole sub-tree (e.g. `/ui/*` for the UI's pages and files).
 */
function covers(row: ReadmeRow, r: Route): boolean {
  if (row.method !== r.method) return false;
  return row.path === r.path ||
    (row.path.endsWith("/*") && r.path.startsWith(row.path.slice(0, -1)));
}

/** The endpoints a client calls: not middleware, not the `ALL` rows that answer what is left. */
const ENDPOINTS = SERVE_ROUTES.filter((r) => !r.middleware && r.method !== "ALL");

function compare(rows: ReadmeRow[], endpoints: readonly Route[]) {
  const twice = rows.filter((r, i) => rows.findIndex((o) => key(o) === key(r)) !== i);
  const unlisted = endpoints.filter((r) => !rows.some((row) => covers(row, r))).map(key);
  const unknown = rows.filter((row) => !endpoints.some((r) => covers(row, r)))
    .map((row) => `README.md:${row.line}: ${key(row)}`);
  return { twice: twice.map((r) => `README.md:${r.line}: ${key(r)}`), unlisted, unknown };
}

Deno.test("routes table: the README's endpoint list is the table's endpoints", async () => {
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const diff = compare(readmeEndpoints(readme), ENDPOINTS);
  assert.deepEqual(diff.unlisted, [], "endpoints of routes/table.ts the README does not list");
  assert.deepEqual(diff.unknown, [], "README rows that routes/table.ts does not have");
  assert.deepEqual(diff.twice, [], "README rows listed twice");
});

Deno.test("routes table: the README check finds a missing, an unknown and a doubled row", () => {
  const doc = (rows: string[]) =>
    [
      "# x",
      "## Endpoints",
      "",
      "| method | path | notes |",
      "| --- | --- | --- |",
      ...rows,
      "",
      "## Next",
      "| a |",
    ]
      .join("\n");
  const table = [
    { method: "GET", path: "/health", group: "ops", handler: "health" },
    { method: "GET", path: "/ui/", group: "ui", handler: "uiPage" },
    { method: "GET", path: "/ui/assets/*", group: "ui", handler: "uiAsset" },
  ] satisfies Route[];
  const ok = readmeEndpoints(doc(["| GET | `/health` | x |", "| GET | `/ui/*` | pages |"]));
  assert.deepEqual(ok.map(key), ["GET /health", "GET /ui/*"]);
  assert.deepEqual(compare(ok, table), { twice: [], unlisted: [], unknown: [] });
  const bad = readmeEndpoints(
    doc(["| GET | `/ui/*` | x |", "| POST | `/health` | x |", "| GET | `/ui/*` | again |"]),
  );
  assert.deepEqual(compare(bad, table), {
    twice: ["README.md:8: GET /ui/*"],
    unlisted: ["GET /health"],
    unknown: ["README.md:7: POST /health"],
  });
  assert.throws(() => readmeEndpoints("# x\n## Other\n"), /no `## Endpoints` section/);
  assert.throws(
    () => readmeEndpoints(doc(["| GET | /health | no backticks |"])),
    /README.md:6: want/,
  );
  assert.throws(
    () => readmeEndpoints("## Endpoints\n\n| path | method |\n| --- | --- |\n"),
    /must start method \| path/,
  );
});
