/**
 * Records the traces in this folder again: a tiny random-weight model that ends its turns
 * (`--reply-length 40`, hermes tool-call format) served by Hearth, the recording proxy of
 * `tools/record_trace.ts` in front of it, and the real CLI (pinned by
 * `tests/support/agent_clis.ts`) run by `hearth launch` in a hermetic HOME on a small git
 * repository with a bug. The model calls the tools the steps name (forced by `--steer`, since
 * random weights call none on their own), then answers in noise and the CLI exits.
 *
 * @example
 * ```sh
 * deno run -A bench/traces/record.ts claude bench/traces/claude-code-fix-add.jsonl
 * deno run -A bench/traces/record.ts codex bench/traces/codex-fix-add.jsonl
 * ```
 * @module
 */
import { appendTo, recordingProxy, type SteerStep } from "../../tools/record_trace.ts";
import { mainTs, startServer } from "../../tools/server_process.ts";
import { agentCliBin, isolatedCliEnv } from "../../tests/support/agent_clis.ts";
import { chatFormatModelPath } from "../../tests/support/models.ts";

const TASK = "calc.py has a bug: add() subtracts. Read calc.py and test_calc.py, run the test, " +
  "fix add(), and run the test again.";

/** The tool calls each CLI makes, in its own tools: read, test, fix, test again. */
function steps(cli: "claude" | "codex", work: string): SteerStep[] {
  if (cli === "claude") {
    return [
      { tool: "Read", input: { file_path: `${work}/calc.py` } },
      { tool: "Read", input: { file_path: `${work}/test_calc.py` } },
      { tool: "Bash", input: { command: "python3 test_calc.py", description: "Run the test" } },
      {
        tool: "Edit",
        input: {
          file_path: `${work}/calc.py`,
          old_string: "return a - b",
          new_string: "return a + b",
          replace_all: false,
        },
      },
      { tool: "Bash", input: { command: "python3 test_calc.py", description: "Run it again" } },
    ];
  }
  return [
    "cat calc.py",
    "cat test_calc.py",
    "python3 test_calc.py",
    "sed -i 's/return a - b/return a + b/' calc.py",
    "python3 test_calc.py",
    "git diff",
  ].map((cmd) => ({ tool: "exec_command", input: { cmd } }));
}

async function run(cmd: string, args: string[], opts: Deno.CommandOptions = {}) {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped", ...opts })
    .output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

if (import.meta.main) {
  const [cli, out] = Deno.args;
  if ((cli !== "claude" && cli !== "codex") || !out) {
    console.error("usage: deno run -A bench/traces/record.ts claude|codex OUT.jsonl");
    Deno.exit(2);
  }
  const bin = await agentCliBin();
  const model = await chatFormatModelPath("hermes", { replyLength: 40 });
  // A fixed path, so that the paths the CLIs put in their prompts are the same on every machine.
  const base = `/tmp/hearth-trace-${cli}`;
  await Deno.remove(base, { recursive: true }).catch(() => {});
  const home = `${base}/home`;
  const work = `${base}/work`;
  await Deno.mkdir(`${home}/.codex`, { recursive: true });
  await Deno.mkdir(work);
  await Deno.writeTextFile(`${work}/calc.py`, "def add(a, b):\n    return a - b\n");
  await Deno.writeTextFile(
    `${work}/test_calc.py`,
    'from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint("ok")\n',
  );
  const git = ["-C", work, "-c", "user.name=hearth", "-c", "user.email=hearth@localhost"];
  await run("git", ["init", "-q", work]);
  await run("git", [...git, "add", "."]);
  await run("git", [...git, "commit", "-qm", "calc"]);

  await Deno.remove(out).catch(() => {});
  await using srv = await startServer([
    "--model",
    model,
    "--max-seq-len",
    "32768",
    "--max-batch",
    "1",
  ]);
  const proxy = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    recordingProxy({ upstream: srv.url, write: appendTo(out), steer: steps(cli, work) }),
  );
  const info = await run(Deno.execPath(), ["info", "--json"]);
  const cliArgs = cli === "claude"
    ? ["-p", TASK, "--allowedTools", "Read,Edit,Bash", "--max-turns", "12"]
    : ["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", TASK];
  const r = await run(
    Deno.execPath(),
    ["run", "-A", mainTs, "launch", cli, "--port", String(proxy.addr.port), "--", ...cliArgs],
    {
      cwd: work,
      clearEnv: true,
      stdin: "null",
      env: {
        ...isolatedCliEnv(home),
        PATH: `${bin}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`,
        CODEX_HOME: `${home}/.codex`,
        DENO_DIR: JSON.parse(info.stdout).denoDir,
        HEARTH_LLAMA_LOG: "off",
      },
    },
  );
  await proxy.shutdown();
  const diff = await run("git", ["-C", work, "diff", "--stat"]);
  const lines = (await Deno.readTextFile(out)).trim().split("\n").length;
  const size = (await Deno.stat(out)).size;
  console.log(`${cli} exited ${r.code}; ${lines} requests, ${size} bytes in ${out}`);
  console.log(`the work tree after it: ${diff.stdout.trim() || "(unchanged)"}`);
  if (r.code !== 0) {
    console.error(r.stdout, r.stderr);
    Deno.exit(1);
  }
}
