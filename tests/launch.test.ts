// `hearth launch claude|codex|opencode` (lib/cli/launch.ts): the argv parser and the plan each CLI
// gets (pure), the printed plan (the key masked, and the export lines valid for `sh`), then end to
// end against a served tiny model with `--api-key`: `--print` for all three, the refusals (no
// server, no key, a wrong key, a CLI not on PATH, each with one clear line), and the real Claude
// Code and Codex CLIs from npm run through `hearth launch ... -- <non-interactive args>` with a
// hermetic HOME, each exiting 0 after the server served its request (counted in /metrics).
import assert from "node:assert/strict";
import {
  launchPlan,
  outputBudget,
  parseLaunchArgs,
  printPlan,
  STREAM_TIMEOUT_MS,
} from "../lib/cli/launch.ts";
import { CODEX_KEY_ENV, PLACEHOLDER_API_KEY } from "../lib/agents/local.ts";
import { chatFormatModelPath } from "./support/models.ts";
import { freePort, mainTs, startServer } from "./support/server.ts";
import { agentCliBin, isolatedCliEnv } from "./support/agent_clis.ts";

const SECRET = "sk-launch-secret-4242";
const local = { baseUrl: "http://127.0.0.1:8123", modelId: "hearth-tiny", contextWindow: 32768 };

/** The values of the `-c` overrides in `args`, in order. */
function overrides(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) if (args[i] === "-c") out.push(args[++i]);
  return out;
}

Deno.test("launch args: the CLI first, flags, then -- and the CLI's own arguments", () => {
  const o = parseLaunchArgs(["codex", "--port", "9001", "--print", "--", "exec", "--port", "x"]);
  assert.equal(o.target, "codex");
  assert.equal(o.port, 9001);
  assert.equal(o.host, "127.0.0.1");
  assert.equal(o.print, true);
  assert.equal(o.apiKey, undefined);
  assert.deepEqual(o.args, ["exec", "--port", "x"], "flags after -- belong to the CLI");

  const d = parseLaunchArgs(["claude"], { HEARTH_API_KEY: "k1" });
  assert.deepEqual([d.port, d.print, d.apiKey, d.args], [8000, false, "k1", []]);
  assert.equal(parseLaunchArgs(["claude", "--api-key=k2"], { HEARTH_API_KEY: "k1" }).apiKey, "k2");
  assert.equal(parseLaunchArgs(["opencode", "--host", "10.0.0.2"]).host, "10.0.0.2");
  assert.equal(parseLaunchArgs(["--help"]).help, true);

  const bad: [string[], RegExp][] = [
    [[], /launch needs the CLI to run: claude, codex or opencode/],
    [["--port", "1"], /launch needs the CLI to run/],
    [["gemini"], /launch "gemini": the CLI must be claude, codex or opencode/],
    [["claude", "--model", "x"], /unknown flag --model \(see hearth launch --help\)/],
    [["claude", "--port", "0"], /--port "0"/],
    [["claude", "--port", "http"], /--port "http"/],
    [["claude", "extra"], /unexpected argument "extra"/],
    [["claude", "--print", "--print"], /--print given twice/],
  ];
  for (const [argv, re] of bad) assert.throws(() => parseLaunchArgs(argv), re, argv.join(" "));
});

Deno.test("launch plan: Claude Code gets the server, the model, the window and long timeouts", () => {
  const p = launchPlan("claude", { ...local, apiKey: SECRET }, ["-p", "hi"]);
  assert.equal(p.command, "claude");
  assert.deepEqual(p.args, ["-p", "hi"], "the user's arguments, untouched");
  assert.equal(p.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:8123");
  // A Bearer token: with ANTHROPIC_API_KEY an interactive Claude Code checks api.anthropic.com.
  assert.equal(p.env.ANTHROPIC_AUTH_TOKEN, SECRET);
  assert.equal(p.env.ANTHROPIC_API_KEY, undefined);
  for (
    const k of [
      "ANTHROPIC_MODEL",
      "ANTHROPIC_DEFAULT_OPUS_MODEL",
      "ANTHROPIC_DEFAULT_SONNET_MODEL",
      "ANTHROPIC_DEFAULT_HAIKU_MODEL",
      "ANTHROPIC_SMALL_FAST_MODEL",
      "CLAUDE_CODE_SUBAGENT_MODEL",
    ]
  ) assert.equal(p.env[k], "hearth-tiny", k);
  assert.equal(p.env.CLAUDE_CODE_MAX_CONTEXT_TOKENS, "32768");
  assert.equal(p.env.CLAUDE_CODE_MAX_OUTPUT_TOKENS, "8192");
  assert.equal(p.env.CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, "1");
  assert.equal(p.env.DISABLE_AUTOUPDATER, "1");
  for (
    const k of [
      "API_TIMEOUT_MS",
      "CLAUDE_STREAM_IDLE_TIMEOUT_MS",
      "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS",
    ]
  ) assert.equal(p.env[k], String(STREAM_TIMEOUT_MS), k);
  for (const k of ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK"]) {
    assert.ok(p.unsetEnv.includes(k), k);
  }
  assert.equal(p.secret, SECRET);

  const open = launchPlan("claude", { ...local, baseUrl: "http://127.0.0.1:8123/" });
  assert.equal(open.env.ANTHROPIC_AUTH_TOKEN, PLACEHOLDER_API_KEY, "Claude Code insists on a key");
  assert.equal(open.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:8123");
  assert.equal(open.secret, undefined);
  assert.deepEqual(open.args, []);

  assert.equal(outputBudget(32768), 8192);
  assert.equal(outputBudget(1_000_000), 32000);
  assert.equal(outputBudget(2), 1);
});

Deno.test("launch plan: Codex gets a responses provider by -c, env_key only with a key", () => {
  const p = launchPlan("codex", { ...local, apiKey: SECRET }, ["exec", "--json", "hi"]);
  assert.equal(p.command, "codex");
  assert.deepEqual(p.args.slice(-3), ["exec", "--json", "hi"], "the user's arguments last");
  assert.deepEqual(overrides(p.args), [
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
    `model_providers.hearth.stream_idle_timeout_ms=${STREAM_TIMEOUT_MS}`,
  ]);
  assert.deepEqual(p.env, { [CODEX_KEY_ENV]: SECRET });
  assert.ok(!p.args.join(" ").includes(SECRET), "the key never goes into argv");

  const open = launchPlan("codex", local, []);
  assert.ok(!overrides(open.args).some((o) => o.includes("env_key")), "no env_key without a key");
  assert.deepEqual(open.env, {});
});

Deno.test("launch plan: opencode gets an inline config with an openai-compatible provider", () => {
  const p = launchPlan("opencode", { ...local, apiKey: SECRET }, ["run", "hi"]);
  assert.equal(p.command, "opencode");
  assert.deepEqual(p.args, ["run", "hi"]);
  assert.equal(p.env.OPENCODE_DISABLE_AUTOUPDATE, "true");
  assert.equal(p.env.OPENCODE_DISABLE_MODELS_FETCH, "true");
  const c = JSON.parse(p.env.OPENCODE_CONFIG_CONTENT);
  assert.equal(c.model, "hearth/hearth-tiny");
  assert.equal(c.small_model, "hearth/hearth-tiny");
  assert.equal(c.autoupdate, false);
  assert.equal(c.share, "disabled");
  const h = c.provider.hearth;
  assert.equal(h.npm, "@ai-sdk/openai-compatible");
  assert.equal(h.options.baseURL, "http://127.0.0.1:8123/v1");
  assert.equal(h.options.apiKey, SECRET);
  assert.equal(h.options.timeout, false);
  assert.equal(h.options.chunkTimeout, STREAM_TIMEOUT_MS);
  assert.equal(h.options.headerTimeout, STREAM_TIMEOUT_MS);
  assert.deepEqual(h.models["hearth-tiny"], {
    name: "hearth-tiny",
    tool_call: true,
    limit: { context: 32768, output: 8192 },
  });
  const open = JSON.parse(launchPlan("opencode", local).env.OPENCODE_CONFIG_CONTENT);
  assert.equal("apiKey" in open.provider.hearth.options, false);
});

/** Runs `sh` on the printed export lines, then `env`, and returns what the shell exported. */
async function exportedBy(printed: string): Promise<Record<string, string>> {
  const lines = printed.split("\n").filter((l) =>
    l.startsWith("export ") || l.startsWith("unset ")
  );
  const out = await new Deno.Command("sh", {
    args: ["-c", `${lines.join("\n")}\nenv -0`],
    clearEnv: true,
    env: { ANTHROPIC_API_KEY: "inherited" },
    stdout: "piped",
  }).output();
  assert.ok(out.success);
  return Object.fromEntries(
    new TextDecoder().decode(out.stdout).split("\0").filter(Boolean).map((kv) => {
      const eq = kv.indexOf("=");
      return [kv.slice(0, eq), kv.slice(eq + 1)];
    }),
  );
}

Deno.test("launch print: valid shell, the key masked, the command as it runs", async () => {
  for (const target of ["claude", "codex", "opencode"] as const) {
    const plan = launchPlan(target, { ...local, apiKey: SECRET }, ["run", "it's"]);
    const text = printPlan(plan);
    assert.ok(!text.includes(SECRET), `${target}: the key is masked:\n${text}`);
    const env = await exportedBy(text);
    for (const [k, v] of Object.entries(plan.env)) {
      assert.equal(env[k], v.replaceAll(SECRET, "sk-***"), `${target}: ${k} round-trips`);
    }
    for (const k of plan.unsetEnv) assert.equal(env[k], undefined, `${target}: ${k} unset`);
    assert.ok(text.trimEnd().endsWith(`run 'it'\\''s'`), text);
  }
  const codex = printPlan(launchPlan("codex", local, ["exec", "hi"]));
  assert.match(codex, /^codex \\\n {2}-c 'model_provider="hearth"' \\\n/m);
  assert.match(codex, / \\\n {2}exec hi$/);
});

/** `hearth launch ARGS` with exactly `env` (no inherited variables), stdin closed. */
async function launch(
  args: string[],
  env: Record<string, string>,
  cwd = Deno.cwd(),
  timeoutMs = 240_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", mainTs, "launch", ...args],
    env,
    cwd,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  const out = await child.output();
  clearTimeout(timer);
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** 200-status requests to `route` in the server's `/metrics`. */
async function served(url: string, route: string): Promise<number> {
  const r = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${SECRET}` } });
  return (await r.text()).split("\n").filter((l) =>
    l.startsWith("hearth_requests_total{") && l.includes(`route="${route}"`) &&
    l.includes('status="200"')
  ).reduce((n, l) => n + Number(l.split(" ").pop()), 0);
}

Deno.test({
  name: "launch: --print, the refusals and the real CLIs against a served model",
  sanitizeResources: false,
  async fn(t) {
    const bin = await agentCliBin();
    const model = await chatFormatModelPath("hermes", { replyLength: 40 });
    await using srv = await startServer([
      "--model",
      model,
      "--max-seq-len",
      "32768",
      "--max-batch",
      "1",
      "--threads",
      "2",
      "--api-key",
      SECRET,
    ]);
    const id = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id;
    const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-launch-" }));
    const home = `${dir}/home`;
    const work = `${dir}/work`;
    await Deno.mkdir(`${home}/.codex`, { recursive: true });
    await Deno.mkdir(work);
    // Codex refuses to work outside a git repository.
    await new Deno.Command("git", { args: ["init", "-q", work] }).output();
    // The CLIs from npm first on PATH; Deno's own cache, so a fresh HOME recompiles nothing.
    const info = await new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).output();
    const denoDir = JSON.parse(new TextDecoder().decode(info.stdout)).denoDir as string;
    const env = {
      ...isolatedCliEnv(home),
      PATH: `${bin}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`,
      CODEX_HOME: `${home}/.codex`,
      DENO_DIR: denoDir,
      HEARTH_LLAMA_LOG: "off",
    };
    const at = ["--port", String(srv.port)];
    const withKey = [...at, "--api-key", SECRET];

    try {
      await t.step("--print for all three", async () => {
        for (const target of ["claude", "codex", "opencode"]) {
          const r = await launch([target, ...withKey, "--print", "--", "run", "x"], env);
          assert.equal(r.code, 0, r.stderr);
          assert.ok(!r.stdout.includes(SECRET), `${target}: the key is masked`);
          assert.ok(
            r.stdout.startsWith(`# ${target} on ${id} at ${srv.url} (context 32768 tokens)\n`),
            r.stdout,
          );
          assert.match(r.stdout, new RegExp(`^${target} .*run x$`, "ms"));
        }
        const claude = await launch(["claude", ...withKey, "--print"], env);
        assert.match(claude.stdout, new RegExp(`^export ANTHROPIC_BASE_URL=${srv.url}$`, "m"));
        assert.match(claude.stdout, new RegExp(`^export ANTHROPIC_MODEL=${id}$`, "m"));
        assert.match(claude.stdout, /^export CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768$/m);
        assert.match(claude.stdout, /^export ANTHROPIC_AUTH_TOKEN='sk-\*\*\*'$/m);
        const codex = await launch(["codex", ...withKey, "--print"], env);
        assert.match(codex.stdout, /-c model_context_window=32768/);
        assert.match(codex.stdout, new RegExp(`-c 'model="${id}"'`));
        // HEARTH_API_KEY from the environment is the default key.
        const opencode = await launch(["opencode", ...at, "--print"], {
          ...env,
          HEARTH_API_KEY: SECRET,
        });
        assert.equal(opencode.code, 0, opencode.stderr);
        assert.match(opencode.stdout, /"apiKey":"sk-\*\*\*"/);
        assert.match(opencode.stdout, /"limit":\{"context":32768,"output":8192\}/);
      });

      await t.step("refusals: one clear line and exit 2 (127 for a missing CLI)", async () => {
        const down = freePort();
        const none = await launch(["claude", "--port", String(down), "--print"], env);
        assert.equal(none.code, 2);
        assert.equal(none.stdout, "");
        assert.match(
          none.stderr,
          new RegExp(
            `^hearth: no Hearth server answers at http://127\\.0\\.0\\.1:${down} \\(.*refused.*\\): start one with \`hearth serve\``,
          ),
        );
        const noKey = await launch(["codex", ...at, "--print"], env);
        assert.equal(noKey.code, 2);
        assert.match(noKey.stderr, /requires an API key: pass --api-key K/);
        const wrong = await launch(["codex", ...at, "--api-key", "nope", "--print"], env);
        assert.equal(wrong.code, 2);
        assert.match(wrong.stderr, /refuses the key given with --api-key/);
        for (const r of [none, noKey, wrong]) {
          assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
        }
        const usage = await launch(["vim"], env);
        assert.equal(usage.code, 2);
        assert.match(usage.stderr, /the CLI must be claude, codex or opencode/);
        const empty = await Deno.makeTempDir({ dir });
        const missing = await launch(["opencode", ...withKey], { ...env, PATH: empty });
        assert.equal(missing.code, 127);
        assert.match(
          missing.stderr,
          /`opencode` is not on PATH: install it with `npm install -g opencode-ai`/,
        );
      });

      await t.step("claude -p through hearth launch", async () => {
        const before = await served(srv.url, "/v1/messages");
        const t0 = performance.now();
        const r = await launch(
          ["claude", ...withKey, "--", "-p", "Reply with one word.", "--max-turns", "2"],
          env,
          work,
        );
        assert.equal(r.code, 0, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);
        assert.ok(!/API Error/i.test(r.stdout + r.stderr), r.stdout + r.stderr);
        assert.ok(await served(srv.url, "/v1/messages") > before, "the server served Claude Code");
        console.log(`claude via launch: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
        // The CLI's exit status comes back: an option Claude Code does not know is its error.
        const bad = await launch(["claude", ...withKey, "--", "--no-such-option"], env, work);
        assert.notEqual(bad.code, 0);
        assert.notEqual(bad.code, 2, bad.stderr);
        assert.match(bad.stderr, /no-such-option/);
      });

      await t.step("codex exec through hearth launch", async () => {
        const before = await served(srv.url, "/v1/responses");
        const t0 = performance.now();
        const r = await launch(
          ["codex", ...withKey, "--", "exec", "--skip-git-repo-check", "Reply with one word."],
          env,
          work,
        );
        assert.equal(r.code, 0, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);
        assert.match(r.stderr, new RegExp(`model: ${id}`));
        assert.match(r.stderr, /provider: hearth/);
        assert.ok(await served(srv.url, "/v1/responses") > before, "the server served Codex");
        console.log(`codex via launch: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      });
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
