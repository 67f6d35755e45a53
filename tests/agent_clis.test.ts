// The real agent CLIs against Hearth: `@anthropic-ai/claude-code` (Messages API, `?beta=true`,
// 10+ tools, thinking, mid-conversation system messages) and `@openai/codex` (Responses API,
// streamed) from npm, each run non-interactively against a server on loopback that serves a
// tiny hermes-format model which ends its replies (`--reply-length`). Their answers are noise;
// the point is the protocol: both must finish with exit 0 and no API error.
import assert from "node:assert/strict";
import { chatFormatModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { agentCliBin, isolatedCliEnv } from "./support/agent_clis.ts";

async function run(
  cmd: string[],
  env: Record<string, string>,
  cwd: string,
  timeoutMs = 240_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = new Deno.Command(cmd[0], {
    args: cmd.slice(1),
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

Deno.test("real Claude Code and Codex CLIs complete runs against Hearth", async (t) => {
  const bin = await agentCliBin();
  const model = await chatFormatModelPath("hermes", { replyLength: 40 });
  const dataDir = await Deno.makeTempDir();
  await using srv = await startServer([
    "--model",
    model,
    "--max-seq-len",
    "32768",
    "--max-batch",
    "2",
    "--threads",
    "2",
    "--data-dir",
    dataDir,
  ], { env: { HEARTH_CHAT_LOGGER: "1" } });
  const served = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id;
  const work = await Deno.makeTempDir();

  await t.step("claude -p --output-format json", async () => {
    const home = await Deno.makeTempDir();
    const r = await run([
      `${bin}/claude`,
      "-p",
      "Reply with one word.",
      "--output-format",
      "json",
      "--model",
      served,
      "--max-turns",
      "2",
    ], {
      ...isolatedCliEnv(home),
      ANTHROPIC_BASE_URL: srv.url,
      ANTHROPIC_API_KEY: "hearth-local",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_AUTOUPDATER: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_ERROR_REPORTING: "1",
      CLAUDE_CODE_MAX_OUTPUT_TOKENS: "2000",
    }, work);
    assert.equal(r.code, 0, `claude exited ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
    const result = JSON.parse(r.stdout);
    assert.equal(result.type, "result");
    assert.equal(result.is_error, false, r.stdout);
    assert.doesNotMatch(r.stdout + r.stderr, /API Error/);
  });

  await t.step("codex exec over the Responses API", async () => {
    const home = await Deno.makeTempDir();
    const codexHome = `${home}/.codex`;
    await Deno.mkdir(codexHome);
    await Deno.writeTextFile(
      `${codexHome}/config.toml`,
      [
        `model = "${served}"`,
        `model_provider = "hearth"`,
        `check_for_update_on_startup = false`,
        `web_search = "disabled"`,
        `approval_policy = "never"`,
        `sandbox_mode = "read-only"`,
        `model_context_window = 32768`,
        ``,
        `[analytics]`,
        `enabled = false`,
        ``,
        `[feedback]`,
        `enabled = false`,
        ``,
        `[features]`,
        `plugins = false`,
        ``,
        `[model_providers.hearth]`,
        `name = "Hearth"`,
        `base_url = "${srv.url}/v1"`,
        `wire_api = "responses"`,
        `request_max_retries = 0`,
        `stream_max_retries = 0`,
        `stream_idle_timeout_ms = 120000`,
        ``,
      ].join("\n"),
    );
    const r = await run(
      [
        `${bin}/codex`,
        "exec",
        "--skip-git-repo-check",
        "Reply with one word.",
      ],
      { ...isolatedCliEnv(home), CODEX_HOME: codexHome },
      work,
    );
    assert.equal(r.code, 0, `codex exited ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
    assert.doesNotMatch(r.stderr, /ERROR: |Responses API error|stream closed before/);
  });

  await t.step("both reached the server through their own dialects", async () => {
    await srv.stop();
    const logs = [...Deno.readDirSync(`${dataDir}/logs`)].map((e) =>
      Deno.readTextFileSync(`${dataDir}/logs/${e.name}`)
    ).join("");
    const routes = logs.trim().split("\n").map((l) => JSON.parse(l).route);
    assert.ok(routes.includes("/v1/messages"), `routes: ${routes}`);
    assert.ok(routes.includes("/v1/responses"), `routes: ${routes}`);
  });
});
