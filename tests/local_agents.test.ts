/**
 * Local agents (`"model": "local"`, docs/ARCHITECTURE.md, "Local agents"): config validation, the launch spec each
 * provider gets (pure, no process), the service refusing to start without the server's endpoint,
 * and end to end: the real Claude Code and Codex CLIs from npm as local agents of a Hearth app
 * served in this process (the real routes, the real engine on a tiny model that ends its
 * replies), each finishing a session run with `agent_done` and no error, seen on `/api/events`,
 * with the server counting their `/v1/messages` and `/v1/responses` requests in `/metrics`.
 */
import assert from "node:assert/strict";
import { parseAgentsConfig } from "../lib/agents/config.ts";
import {
  agentLaunch,
  CODEX_KEY_ENV,
  localBaseUrl,
  LocalEndpointMissing,
  PLACEHOLDER_API_KEY,
} from "../lib/agents/local.ts";
import { spawnAgentProcess } from "../lib/agents/process.ts";
import { createAgentService } from "../lib/agents/sessions.ts";
import type { AgentConfig } from "../lib/agents/types.ts";
import { compileTemplate } from "../lib/chat/template.ts";
import { createBus } from "../lib/events/bus.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { newServerState } from "../routes/state.ts";
import { startWorkerEngine } from "../lib/engine/worker_host.ts";
import { createApp, newSurfaces } from "../routes/app.ts";
import { sessionRoutes } from "../routes/sessions.ts";
import { agentCliBin } from "./support/agent_clis.ts";
import { chatFormatModelPath } from "./support/models.ts";

// deno-lint-ignore no-explicit-any -- JSON bodies are checked field by field
type Json = any;

async function withDir<T>(f: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-local-agents-" }));
  try {
    return await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

const parse = (dir: string, agents: Record<string, unknown>) =>
  parseAgentsConfig(JSON.stringify({ agents }), `${dir}/agents.json`);

Deno.test("local agents config: model local, default commands and clear errors", async () => {
  await withDir(async (dir) => {
    const c = await parse(dir, {
      lc: { provider: "claude", model: "local" },
      lx: { provider: "codex", model: "local", command: "./bin/codex", args: ["--oss"] },
      named: { provider: "gemini", command: "gemini", model: "gemini-2.5-pro" },
      plain: { provider: "jsonl", command: "agent" },
    });
    assert.equal(c.agents.lc.command, "claude");
    assert.equal(c.agents.lc.model, "local");
    assert.equal(c.agents.lx.command, `${dir}/bin/codex`);
    assert.equal(c.agents.lx.model, "local");
    assert.equal(c.agents.named.model, "gemini-2.5-pro");
    assert.equal("model" in c.agents.plain, false);

    const bad: [Record<string, unknown>, RegExp][] = [
      [
        { g: { provider: "gemini", command: "gemini", model: "local" } },
        /agents\.g\.model: "local" is supported for providers claude and codex only, not gemini/,
      ],
      [
        { o: { provider: "opencode", model: "local" } },
        /agents\.o\.model: "local" is supported .* not opencode/,
      ],
      [
        { j: { provider: "jsonl", command: "a", model: "gpt-5" } },
        /agents\.j\.model: provider jsonl takes no model field/,
      ],
      [{ c: { provider: "claude" } }, /agents\.c\.command: required \(only a "model": "local"/],
      [{ c: { provider: "claude", command: "claude", model: "" } }, /agents\.c\.model/],
      [{ c: { provider: "claude", model: 7 } }, /agents\.c\.model/],
    ];
    for (const [agents, re] of bad) {
      await assert.rejects(parse(dir, agents), (e: Error) => {
        assert.match(e.message, re);
        assert.ok(!e.message.includes("\n"), e.message);
        return true;
      });
    }
  });
});

const SECRET = "sk-hearth-local-secret-0123";
const endpoint = { baseUrl: "http://127.0.0.1:8123", apiKey: SECRET, modelId: "hearth-tiny" };
const agent = (over: Partial<AgentConfig>): AgentConfig & { name: string } => ({
  name: "a",
  provider: "claude",
  command: "claude",
  args: [],
  env: {},
  maxRetries: 2,
  ...over,
});

Deno.test("local agents launch: Claude Code gets the endpoint in env and --model", () => {
  const l = agentLaunch(
    agent({
      model: "local",
      args: ["--max-turns", "3"],
      env: { CLAUDE_CODE_MAX_OUTPUT_TOKENS: "500", ANTHROPIC_BASE_URL: "https://elsewhere" },
    }),
    { args: ["-p", "--output-format", "stream-json"], stdin: "{}\n" },
    endpoint,
  );
  assert.equal(l.command, "claude");
  assert.deepEqual(l.args, [
    "--max-turns",
    "3",
    "--model",
    "hearth-tiny",
    "-p",
    "--output-format",
    "stream-json",
  ]);
  assert.equal(l.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:8123", "the server's URL wins");
  assert.equal(l.env.ANTHROPIC_API_KEY, SECRET);
  assert.equal(l.env.CLAUDE_CODE_MAX_OUTPUT_TOKENS, "500", "the agent's own tuning is kept");
  assert.equal(l.env.CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, "1");
  assert.equal(l.env.DISABLE_AUTOUPDATER, "1");
  assert.equal(l.env.ANTHROPIC_DEFAULT_HAIKU_MODEL, "hearth-tiny");
  assert.deepEqual(l.unsetEnv, ["ANTHROPIC_AUTH_TOKEN"]);
  assert.ok(!l.args.join(" ").includes(SECRET), "the key never goes into argv");

  const open = agentLaunch(agent({ model: "local" }), { args: [] }, {
    baseUrl: "http://127.0.0.1:8123/",
    modelId: "m",
  });
  assert.equal(open.env.ANTHROPIC_API_KEY, PLACEHOLDER_API_KEY);
  assert.equal(open.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:8123");
});

Deno.test("local agents launch: Codex gets -c overrides for a responses provider", () => {
  const l = agentLaunch(
    agent({ provider: "codex", command: "codex", model: "local", env: { CODEX_HOME: "/x" } }),
    { args: ["exec", "--json", "--", "hi"] },
    { ...endpoint, contextWindow: 32768 },
  );
  const overrides: string[] = [];
  for (let i = 0; i < l.args.length; i++) {
    if (l.args[i] === "-c") overrides.push(l.args[++i]);
  }
  assert.deepEqual(l.args.slice(-4), ["exec", "--json", "--", "hi"]);
  assert.deepEqual(overrides, [
    'model_provider="hearth"',
    'model_providers.hearth.name="Hearth"',
    'model_providers.hearth.base_url="http://127.0.0.1:8123/v1"',
    'model_providers.hearth.wire_api="responses"',
    `model_providers.hearth.env_key="${CODEX_KEY_ENV}"`,
    'model="hearth-tiny"',
    "check_for_update_on_startup=false",
    "analytics.enabled=false",
    "feedback.enabled=false",
    'web_search="disabled"',
    "model_context_window=32768",
    "model_auto_compact_token_limit=26214",
  ]);
  assert.equal(l.env[CODEX_KEY_ENV], SECRET);
  assert.equal(l.env.CODEX_HOME, "/x");
  assert.ok(!l.args.join(" ").includes(SECRET), "the key never goes into argv");
});

Deno.test("local agents launch: other models, no model, and no endpoint", () => {
  const proto = { args: ["-p"] };
  assert.deepEqual(agentLaunch(agent({ model: "opus" }), proto).args, ["--model", "opus", "-p"]);
  assert.deepEqual(
    agentLaunch(agent({ provider: "codex", model: "gpt-5" }), { args: ["exec"] }).args,
    ["-c", 'model="gpt-5"', "exec"],
  );
  assert.deepEqual(
    agentLaunch(agent({ provider: "gemini", model: "g" }), proto).args,
    ["--model", "g", "-p"],
  );
  const plain = agentLaunch(agent({ args: ["-x"], env: { A: "1" } }), proto);
  assert.deepEqual(plain, { command: "claude", args: ["-x", "-p"], env: { A: "1" }, unsetEnv: [] });
  assert.throws(() => agentLaunch(agent({ model: "local" }), proto), LocalEndpointMissing);
  assert.throws(
    () => agentLaunch(agent({ model: "local" }), proto),
    /agent a has "model": "local", but the agent service was started without/,
  );
});

Deno.test("local agents: the reachable base URL of a listening address", () => {
  assert.equal(localBaseUrl("0.0.0.0", 8000), "http://127.0.0.1:8000");
  assert.equal(localBaseUrl("::", 8000), "http://127.0.0.1:8000");
  assert.equal(localBaseUrl("localhost", 9), "http://127.0.0.1:9");
  assert.equal(localBaseUrl("127.0.0.1", 9), "http://127.0.0.1:9");
  assert.equal(localBaseUrl("::1", 9), "http://[::1]:9");
  assert.equal(localBaseUrl("[::1]", 9), "http://[::1]:9");
  assert.equal(localBaseUrl("10.1.2.3", 9), "http://10.1.2.3:9");
});

Deno.test("local agents: the service refuses a local agent without the endpoint", async () => {
  await withDir(async (dir) => {
    const config = await parse(dir, {
      ok: { provider: "jsonl", command: "a" },
      lc: { provider: "claude", model: "local" },
    });
    await assert.rejects(
      createAgentService({ bus: createBus(), dataDir: dir, config }),
      /agent lc has "model": "local", but the agent service was started without/,
    );
  });
});

Deno.test("local agents: unsetEnv removes inherited variables from the CLI's environment", async () => {
  Deno.env.set("HEARTH_TEST_INHERITED", "inherited");
  Deno.env.set("HEARTH_TEST_DROPPED", "dropped");
  try {
    const lines: string[] = [];
    const p = spawnAgentProcess({
      command: "sh",
      args: ["-c", 'echo "$HEARTH_TEST_INHERITED ${HEARTH_TEST_DROPPED:-unset} $ADDED"'],
      cwd: "/",
      env: { ADDED: "added" },
      unsetEnv: ["HEARTH_TEST_DROPPED"],
      onStdoutLine: (l) => lines.push(l),
      onStderrLine: () => {},
    });
    assert.equal((await p.exited).code, 0);
    assert.deepEqual(lines, ["inherited unset added"]);
  } finally {
    Deno.env.delete("HEARTH_TEST_INHERITED");
    Deno.env.delete("HEARTH_TEST_DROPPED");
  }
});

/** A JSON event channel reader over `GET /api/events` (data-only SSE). */
function readEvents(url: string, apiKey: string) {
  const events: Json[] = [];
  const ctrl = new AbortController();
  const waiters = new Set<{ pred: (e: Json) => boolean; resolve: (e: Json) => void }>();
  const done = (async () => {
    const r = await fetch(`${url}/api/events`, {
      headers: { authorization: `Bearer ${apiKey}` },
      signal: ctrl.signal,
    });
    assert.equal(r.status, 200);
    let buf = "";
    const dec = new TextDecoder();
    for await (const chunk of r.body!) {
      buf += dec.decode(chunk, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.startsWith("data: ")) continue;
        const e = JSON.parse(line.slice(6));
        events.push(e);
        for (const w of [...waiters]) {
          if (w.pred(e)) {
            waiters.delete(w);
            w.resolve(e);
          }
        }
      }
    }
  })().catch(() => {});
  return {
    events,
    waitFor(pred: (e: Json) => boolean, ms: number): Promise<Json> {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      let timer: ReturnType<typeof setTimeout>;
      return new Promise((resolve, reject) => {
        const w = {
          pred,
          resolve: (e: Json) => {
            clearTimeout(timer);
            resolve(e);
          },
        };
        waiters.add(w);
        timer = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`no matching event in ${ms} ms; saw ${events.map((e) => e.event)}`));
        }, ms);
      });
    },
    async close() {
      ctrl.abort();
      await done;
    },
  };
}

const requestsTo = (metrics: string, route: string) =>
  metrics.split("\n").filter((l) =>
    l.startsWith("hearth_requests_total{") && l.includes(`route="${route}"`) &&
    l.includes('status="200"')
  ).reduce((n, l) => n + Number(l.split(" ").pop()), 0);

Deno.test({
  name: "local agents: the real Claude Code and Codex CLIs finish session runs on Hearth's model",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const bin = await agentCliBin();
    const path = await chatFormatModelPath("hermes", { replyLength: 40 });
    const model = await loadEngineModel({ path, maxBatch: 2, maxSeqLen: 32768, threads: 2 });
    const state = newServerState("hearth-tiny-local", SECRET);
    state.threads = 2;
    if (model.info.chatTemplate) state.template = compileTemplate(model.info.chatTemplate);
    const engine = await startWorkerEngine(model);
    state.engine = engine;
    const surfaces = newSurfaces({ pingMs: 60_000 });
    const app = createApp(state, surfaces);
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, app.fetch);
    const url = localBaseUrl("0.0.0.0", server.addr.port);
    const auth = { authorization: `Bearer ${SECRET}`, "content-type": "application/json" };

    try {
      await withDir(async (dir) => {
        const work = `${dir}/work`;
        await Deno.mkdir(work);
        // Codex refuses to work outside a git repository.
        const git = await new Deno.Command("git", { args: ["init", "-q", work] }).output()
          .then((o) => o.success, () => false);
        const home = `${dir}/home`;
        await Deno.mkdir(`${home}/.codex`, { recursive: true });
        const isolated = { HOME: home, CODEX_HOME: `${home}/.codex`, LANG: "C.UTF-8" };
        await Deno.writeTextFile(
          `${dir}/agents.json`,
          JSON.stringify({
            roots: ["work"],
            retryBaseMs: 0,
            agents: {
              claude: {
                provider: "claude",
                model: "local",
                command: `${bin}/claude`,
                args: ["--max-turns", "2"],
                env: { ...isolated, CLAUDE_CODE_MAX_OUTPUT_TOKENS: "2000" },
                maxRetries: 0,
                timeoutSeconds: 120,
              },
              codex: {
                provider: "codex",
                model: "local",
                command: `${bin}/codex`,
                env: isolated,
                maxRetries: 0,
                timeoutSeconds: 120,
              },
            },
          }),
        );
        const config = await parseAgentsConfig(
          await Deno.readTextFile(`${dir}/agents.json`),
          `${dir}/agents.json`,
        );
        const internal: string[] = [];
        const off = surfaces.bus.subscribe((e) => internal.push(e.data), { internal: true });
        const service = await createAgentService({
          bus: surfaces.bus,
          dataDir: `${dir}/data`,
          config,
          local: { baseUrl: url, apiKey: SECRET, modelId: state.modelId, contextWindow: 32768 },
        });
        surfaces.sessions = sessionRoutes(service);
        const channel = readEvents(url, SECRET);

        const runAgent = async (name: string) => {
          const created = await fetch(`${url}/api/sessions`, {
            method: "POST",
            headers: auth,
            body: JSON.stringify({ agent: name }),
          });
          assert.equal(created.status, 201);
          const session = await created.json();
          const sent = await fetch(`${url}/api/sessions/${session.id}/messages`, {
            method: "POST",
            headers: auth,
            body: JSON.stringify({ text: "Reply with one word." }),
          });
          assert.equal(sent.status, 202);
          await sent.body?.cancel();
          const done = await channel.waitFor(
            (e) => e.event === "agent_done" && e.agentId === session.id,
            120_000,
          );
          const traces = internal.filter((l) =>
            l.includes(session.id) && l.includes("agent_trace")
          );
          assert.equal(
            done.error,
            undefined,
            `agent_done: ${JSON.stringify(done)}\ntrace tail:\n${traces.slice(-15).join("\n")}`,
          );
          assert.ok(
            channel.events.some((e) =>
              e.event === "agent_status" && e.agentId === session.id && e.status === "running"
            ),
          );
          return session.id as string;
        };

        try {
          await t.step("claude", async () => {
            const t0 = performance.now();
            await runAgent("claude");
            const metrics = await (await fetch(`${url}/metrics`, { headers: auth })).text();
            assert.ok(requestsTo(metrics, "/v1/messages") > 0, metrics);
            console.log(`claude local run: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
          });
          await t.step({
            name: "codex",
            ignore: !git,
            fn: async () => {
              const t0 = performance.now();
              await runAgent("codex");
              const metrics = await (await fetch(`${url}/metrics`, { headers: auth })).text();
              assert.ok(requestsTo(metrics, "/v1/responses") > 0, metrics);
              console.log(`codex local run: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
            },
          });
          await t.step("the API key appears in no event", () => {
            assert.ok(!internal.some((l) => l.includes(SECRET)));
            assert.ok(!channel.events.some((e) => JSON.stringify(e).includes(SECRET)));
          });
        } finally {
          off();
          await channel.close();
          surfaces.fanout.closeAll();
          await service.close();
        }
      });
    } finally {
      await server.shutdown();
      engine.close();
    }
  },
});
