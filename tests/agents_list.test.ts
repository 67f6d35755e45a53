/**
 * `GET /api/agents`: the configured agents by name and provider (and fallback), in config order,
 * never their commands, arguments or environment; through the whole app it sits behind the API
 * key like the rest of `/api`, and without `--agents-config` it answers like the other agent
 * routes (404 `AGENTS_NOT_CONFIGURED`).
 */
import assert from "node:assert/strict";
import { loadAgentsConfig } from "../lib/agents/config.ts";
import { createAgentService, publicAgents } from "../lib/agents/sessions.ts";
import { createBus } from "../lib/events/bus.ts";
import { newServerState } from "../routes/state.ts";
import { createApp, newSurfaces } from "../routes/app.ts";
import { openAgents } from "../lib/agents/mod.ts";
import { agentRoutes } from "../routes/agents.ts";
import { sessionRoutes } from "../routes/sessions.ts";

const SECRET = "sk-secret-value-never-sent";

async function withService(
  f: (svc: Awaited<ReturnType<typeof createAgentService>>) => Promise<void>,
) {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-agents-list-" }));
  try {
    const path = `${dir}/agents.json`;
    await Deno.writeTextFile(
      path,
      JSON.stringify({
        agents: {
          claude: {
            provider: "claude",
            command: "/opt/secret-bin/claude",
            args: ["--dangerously-skip-permissions"],
            env: { ANTHROPIC_API_KEY: SECRET },
            fallback: "codex",
            maxRetries: 1,
          },
          codex: { provider: "codex", command: "codex-cli", env: { CODEX_HOME: "/srv/codex" } },
          local: { provider: "jsonl", command: "./bin/local-agent", args: ["--fast"] },
        },
      }),
    );
    const config = await loadAgentsConfig(path);
    const service = await createAgentService({ bus: createBus(), dataDir: `${dir}/data`, config });
    try {
      await f(service);
    } finally {
      await service.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const expected = [
  { name: "claude", provider: "claude", fallback: "codex" },
  { name: "codex", provider: "codex" },
  { name: "local", provider: "jsonl" },
];

Deno.test("GET /api/agents lists names, providers and fallbacks only", async () => {
  await withService(async (service) => {
    assert.deepEqual(publicAgents(service.config), expected);
    const res = await sessionRoutes(service).request("/api/agents");
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /application\/json/);
    const text = await res.text();
    assert.deepEqual(JSON.parse(text), { agents: expected });
    for (const leak of [SECRET, "secret-bin", "codex-cli", "local-agent", "--fast", "CODEX_HOME"]) {
      assert.ok(!text.includes(leak), `the answer names ${leak}: ${text}`);
    }
    // Only GET: other methods are not routes.
    const post = await sessionRoutes(service).request("/api/agents", { method: "POST" });
    assert.equal(post.status, 404);
    assert.equal((await post.json()).error, "NOT_FOUND");
  });
});

Deno.test("GET /api/agents through the app: behind the API key; 404 without --agents-config", async () => {
  await withService(async (service) => {
    const surfaces = newSurfaces({ pingMs: 60_000 });
    surfaces.sessions = sessionRoutes(service);
    const app = createApp(newServerState("test", "k-123"), surfaces);
    try {
      const denied = await app.request("/api/agents");
      assert.equal(denied.status, 401);
      assert.deepEqual(await denied.json(), { error: "UNAUTHORIZED", message: "Missing API key." });
      const ok = await app.request("/api/agents", { headers: { authorization: "Bearer k-123" } });
      assert.equal(ok.status, 200);
      assert.deepEqual(await ok.json(), { agents: expected });
    } finally {
      surfaces.fanout.closeAll();
    }
  });
  const bare = newSurfaces({ pingMs: 60_000 });
  try {
    const res = await createApp(newServerState("test"), bare).request("/api/agents");
    assert.equal(res.status, 404);
    assert.equal((await res.json()).error, "AGENTS_NOT_CONFIGURED");
  } finally {
    bare.fanout.closeAll();
  }
});

Deno.test("goals, orchestrations and memory through the app: behind the key, 404 without agents", async () => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-agents-app-" }));
  const bus = createBus();
  const surfaces = newSurfaces({ pingMs: 60_000 });
  await Deno.writeTextFile(
    `${dir}/agents.json`,
    JSON.stringify({ agents: { a: { provider: "jsonl", command: "true" } } }),
  );
  const agents = await openAgents({
    bus,
    dataDir: `${dir}/data`,
    config: await loadAgentsConfig(`${dir}/agents.json`),
    watchMemory: false,
  });
  try {
    surfaces.sessions = agentRoutes(agents);
    const app = createApp(newServerState("test", "k-123"), surfaces);
    const auth = { authorization: "Bearer k-123", "content-type": "application/json" };
    assert.equal((await app.request("/api/memory")).status, 401);
    const cases: [string, string, unknown, number, RegExp][] = [
      ["PUT", "/api/memory/plan", { text: "ship it" }, 201, /"name":"plan"/],
      ["GET", "/api/memory", undefined, 200, /"notes":\[\{"name":"plan"/],
      ["GET", "/api/memory/search?q=ship", undefined, 200, /"hits":\[\{"name":"plan"/],
      ["GET", "/api/orchestrations/nope", undefined, 404, /no orchestration/],
      ["GET", "/api/orchestrations", undefined, 200, /"orchestrations":\[\]/],
      ["GET", "/api/sessions/nope/goal", undefined, 404, /no session nope/],
      ["POST", "/api/sessions/nope/orchestrate", { task: "x" }, 404, /no session nope/],
    ];
    for (const [method, path, body, status, re] of cases) {
      const res = await app.request(path, {
        method,
        headers: auth,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      assert.equal(res.status, status, `${method} ${path}: ${text}`);
      assert.match(text, re, `${method} ${path}`);
    }
  } finally {
    surfaces.fanout.closeAll();
    await agents.close();
    await Deno.remove(dir, { recursive: true });
  }
  const bare = newSurfaces({ pingMs: 60_000 });
  try {
    for (const path of ["/api/memory", "/api/memory/search?q=x", "/api/orchestrations/x"]) {
      const res = await createApp(newServerState("test"), bare).request(path);
      assert.equal(res.status, 404, path);
      assert.equal((await res.json()).error, "AGENTS_NOT_CONFIGURED");
    }
  } finally {
    bare.fanout.closeAll();
  }
});
