// A conversation that outgrows the model's context, with the real Claude Code and Codex CLIs from
// npm (pinned in support/agent_clis.ts) run hermetically against `hearth serve` on a tiny model,
// through a proxy that records each request and forwards the bytes unchanged both ways.
//
// Claude Code (2.1.330) compacts reactively, also under `-p`: a 400 whose error message is
// `prompt is too long: N tokens > M maximum` makes it summarize the older rounds (a request whose
// last user message asks for a `<summary>` block, sized from the gap N - M; a summary or resent
// turn refused again starts another round) and resend the turn on top of the summary. It is not
// told the window here (no CLAUDE_CODE_MAX_CONTEXT_TOKENS: it assumes 1M tokens), so the
// overflow is sure.
//
// Codex (0.169.0) reads the 400 with `error.code: "context_length_exceeded"` as its
// ContextWindowExceeded, but its turn loop does not compact on it: it marks the window full and
// ends the turn ("Codex ran out of room ..."), after one request, with no retries (in its
// published source only a refused compaction request is retried, with the oldest item dropped).
// It compacts ahead of the window instead, from the usage Hearth reports, once that passes
// `model_auto_compact_token_limit` (90% of `model_context_window` unless set).
//
// The tiny model's words are noise: the assertions are on the protocol (requests, statuses, token
// counts, exit codes). Its replies end after about 40 tokens at temperature 1 (the fixture turns
// off the default top-k/min-p, under which the lifted end-of-turn token would win at once).
import assert from "node:assert/strict";
import { launchPlan } from "../lib/cli/launch.ts";
import { cachedTinyModel } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { agentCliBin, isolatedCliEnv } from "./support/agent_clis.ts";

const SECRET = "sk-compaction-4242";

/** The hermes tiny model ending replies after ~40 tokens, sampled plainly at temperature 1. */
function plainSamplingModel(): Promise<string> {
  return cachedTinyModel(
    "hermes-ends40-t1",
    ["make_model_formats.ts", "reply_length.ts", "presets.ts"],
    {
      chatFormat: "hermes",
      replyLength: 40,
      sampling: { temp: 1, top_k: 0, top_p: 1, min_p: 0 },
    },
  );
}

/** One request through the proxy: what was asked, and (once `done`) what came back. */
type Exchange = {
  path: string;
  status: number;
  bytes: number;
  // deno-lint-ignore no-explicit-any
  body: any;
  response: string;
  done: Promise<void>;
};

/** A loopback proxy to `upstream` that records every exchange and changes no byte of either. */
function recordingProxy(upstream: string) {
  const exchanges: Exchange[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const u = new URL(req.url);
    const sent = new Uint8Array(await req.arrayBuffer());
    const res = await fetch(upstream + u.pathname + u.search, {
      method: req.method,
      headers: req.headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : sent,
    });
    let body: unknown = undefined;
    try {
      body = JSON.parse(new TextDecoder().decode(sent));
    } catch {
      // not JSON (a GET)
    }
    const [forward, copy] = res.body ? res.body.tee() : [null, null];
    const x: Exchange = {
      path: u.pathname,
      status: res.status,
      bytes: sent.length,
      body,
      response: "",
      done: Promise.resolve(),
    };
    if (copy) {
      x.done = new Response(copy).text().then((t) => {
        x.response = t;
      }, () => {});
    }
    exchanges.push(x);
    return new Response(forward, { status: res.status, headers: res.headers });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    exchanges,
    async settled() {
      await Promise.all(exchanges.map((x) => x.done));
    },
    close: () => server.shutdown(),
  };
}

/** The data of each SSE event in `text`, parsed. */
// deno-lint-ignore no-explicit-any
function sseData(text: string): any[] {
  return text.split("\n").filter((l) => l.startsWith("data: ")).flatMap((l) => {
    try {
      return [JSON.parse(l.slice(6))];
    } catch {
      return [];
    }
  });
}

/** The prompt tokens of a streamed Anthropic reply, from its `message_start` usage. */
function anthropicPromptTokens(x: Exchange): number {
  const u = sseData(x.response).find((e) => e.type === "message_start")?.message?.usage;
  assert.ok(u, `no message_start in ${x.response.slice(0, 300)}`);
  return u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
}

/** The tokens a streamed Anthropic reply wrote, from its last `message_delta`. */
function anthropicOutputTokens(x: Exchange): number {
  return sseData(x.response).findLast((e) => e.type === "message_delta")?.usage?.output_tokens ?? 0;
}

// deno-lint-ignore no-explicit-any
function texts(content: any): string[] {
  if (typeof content === "string") return [content];
  // deno-lint-ignore no-explicit-any
  return Array.isArray(content) ? content.map((b: any) => b?.text ?? "") : [];
}

/** Claude Code's summarization request: its last user message asks for a `<summary>` block. */
function isClaudeSummarization(x: Exchange): boolean {
  // deno-lint-ignore no-explicit-any
  const lastUser = (x.body?.messages ?? []).findLast((m: any) => m.role === "user");
  return texts(lastUser?.content).some((t) => t.includes("<summary>"));
}

/** `n` numbered lines of filler (about 14 tokens each), a user message that fills the context. */
function filler(n: number, tag: string): string {
  return Array.from({ length: n }, (_, i) => `${tag} line ${i}: the quick brown fox jumps`).join(
    "\n",
  );
}

/** A hermetic HOME and a git work tree (Codex refuses to work outside one). */
async function workspace(): Promise<{ dir: string; home: string; work: string }> {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-compact-" }));
  const home = `${dir}/home`;
  const work = `${dir}/work`;
  await Deno.mkdir(`${home}/.codex`, { recursive: true });
  await Deno.mkdir(work);
  await new Deno.Command("git", { args: ["init", "-q", work] }).output();
  return { dir, home, work };
}

async function run(
  command: string,
  args: string[],
  env: Record<string, string>,
  cwd: string,
): Promise<{ code: number; out: string }> {
  const o = await new Deno.Command(command, {
    args,
    env,
    clearEnv: true,
    cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const td = new TextDecoder();
  return { code: o.code, out: `${td.decode(o.stdout)}\n${td.decode(o.stderr)}` };
}

const CLAUDE_CTX = 6144;

/** What one Claude Code session that outgrew the context did, from its refused request on. */
type ClaudeOverflow = {
  result: { code: number; out: string };
  after: Exchange[];
  trace: string;
  emptySummary: boolean;
};

/**
 * `claude -p` then `claude -p --continue` with ~2k tokens of filler a turn, in a fresh HOME,
 * until a turn's prompt passes the context (the server refuses it) or six turns have gone.
 */
async function claudeOverflowSession(
  bin: string,
  proxy: ReturnType<typeof recordingProxy>,
  modelId: string,
): Promise<ClaudeOverflow | undefined> {
  const { dir, home, work } = await workspace();
  // What `hearth launch claude` sets, less the window: Claude Code then assumes 1M tokens and
  // learns of the real one only from the refusal.
  const plan = launchPlan("claude", { baseUrl: proxy.url, apiKey: SECRET, modelId });
  const env = { ...isolatedCliEnv(home), ...plan.env };
  // No tools: the system prompt alone then takes about a third of the context.
  const claude = (extra: string[]) =>
    run(`${bin}/claude`, ["-p", ...extra, "--tools", ""], env, work);
  try {
    const first = await claude(["Reply with one word."]);
    assert.equal(first.code, 0, first.out);
    for (let turn = 1; turn <= 6; turn++) {
      const before = proxy.exchanges.length;
      const result = await claude(["--continue", filler(150, `t${turn}`)]);
      await proxy.settled();
      const refused = proxy.exchanges.slice(before).findIndex((x) => x.status === 400);
      if (refused < 0) {
        assert.equal(result.code, 0, result.out);
        continue;
      }
      const after = proxy.exchanges.slice(before + refused);
      const summaries = after.filter((x) => isClaudeSummarization(x) && x.status === 200);
      return {
        result,
        after,
        trace: after.map((x) =>
          `${x.status} ${x.bytes}B${isClaudeSummarization(x) ? " summarize" : ""}`
        ).join(", "),
        emptySummary: summaries.some((x) => anthropicOutputTokens(x) === 0),
      };
    }
    return undefined;
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

Deno.test({
  name: "compaction: claude -p compacts after Hearth refuses a prompt over the context, and ends 0",
  sanitizeResources: false,
  async fn() {
    const bin = await agentCliBin();
    await using srv = await startServer([
      "--model",
      await plainSamplingModel(),
      "--max-seq-len",
      String(CLAUDE_CTX),
      "--max-batch",
      "2",
      "--threads",
      "2",
      "--api-key",
      SECRET,
    ]);
    const modelId = (await (await fetch(`${srv.url}/v1/models`, {
      headers: { authorization: `Bearer ${SECRET}` },
    })).json()).data[0].id;
    const proxy = recordingProxy(srv.url);
    try {
      const t0 = performance.now();
      let s = await claudeOverflowSession(bin, proxy, modelId);
      if (s && s.result.code !== 0 && s.emptySummary) {
        // The random model ends a reply at its first token about once in 40, and Claude Code gives
        // up on an empty summary ("summarization produced empty response"): that is the model's
        // noise, not Hearth's doing, so the session is played once more from the start.
        console.log(`claude: a summary came back empty (${s.trace}); once more`);
        s = await claudeOverflowSession(bin, proxy, modelId);
      }
      console.log(`claude: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      assert.ok(s, "the conversation outgrew the context within six turns");
      const { result, after, trace } = s;
      console.log(`claude: from the refusal on: ${trace}`);

      const refusal = JSON.parse(after[0].response);
      assert.equal(refusal.type, "error");
      assert.equal(refusal.error.type, "invalid_request_error");
      assert.match(
        refusal.error.message,
        new RegExp(`^prompt is too long: \\d+ tokens > ${CLAUDE_CTX} maximum$`),
      );
      assert.ok(!isClaudeSummarization(after[0]), "the refused request was the turn itself");

      assert.equal(result.code, 0, `exit ${result.code} (${trace}):\n${result.out}`);
      assert.ok(!/API Error|prompt is too long/i.test(result.out), result.out);
      const summary = after.findIndex((x) => isClaudeSummarization(x) && x.status === 200);
      assert.ok(summary > 0, `a summarization request was served: ${trace}`);
      const last = after.at(-1)!;
      assert.equal(last.status, 200, trace);
      assert.ok(!isClaudeSummarization(last), `the turn was resent after compacting: ${trace}`);
      assert.ok(after.indexOf(last) > summary, trace);
      assert.ok(last.bytes < after[0].bytes, `the resent turn is shorter: ${trace}`);
      assert.ok(anthropicPromptTokens(last) < CLAUDE_CTX, trace);
      // Every refusal on the way (a summarization request may be refused too, then trimmed) was an
      // overflow in Claude Code's words.
      for (const x of after.filter((x) => x.status !== 200)) {
        assert.equal(x.status, 400, trace);
        assert.match(JSON.parse(x.response).error.message, /^prompt is too long: /);
      }
    } finally {
      await proxy.close();
    }
  },
});

const CODEX_CTX = 16384;

/** Codex's compaction request: no tools, its last user message asks for a summary. */
function isCodexCompaction(x: Exchange): boolean {
  // deno-lint-ignore no-explicit-any
  const lastUser = (x.body?.input ?? []).findLast((i: any) => i.role === "user");
  return !(x.body?.tools?.length > 0) &&
    texts(lastUser?.content).some((t) => /COMPACTION/.test(t) && /summary/i.test(t));
}

/** The `error.code` of a refused OpenAI request. */
function errorCode(x: Exchange): string | undefined {
  try {
    return JSON.parse(x.response).error?.code;
  } catch {
    return undefined;
  }
}

Deno.test({
  name: "compaction: codex exec stops at once on an overflow, and compacts ahead of the window",
  sanitizeResources: false,
  async fn(t) {
    const bin = await agentCliBin();
    await using srv = await startServer([
      "--model",
      await plainSamplingModel(),
      "--max-seq-len",
      String(CODEX_CTX),
      "--max-batch",
      "2",
      "--threads",
      "2",
      "--api-key",
      SECRET,
    ]);
    const modelId = (await (await fetch(`${srv.url}/v1/models`, {
      headers: { authorization: `Bearer ${SECRET}` },
    })).json()).data[0].id;
    const proxy = recordingProxy(srv.url);
    const t0 = performance.now();

    /** `codex exec` (then `exec resume --last`) in a fresh HOME, with `-c` overrides `extra`. */
    const session = async (contextWindow: number | undefined, extra: string[]) => {
      const { dir, home, work } = await workspace();
      const env = { ...isolatedCliEnv(home), CODEX_HOME: `${home}/.codex` };
      const exec = async (resume: boolean, prompt: string) => {
        const args = ["exec", "--skip-git-repo-check", ...(resume ? ["resume", "--last"] : [])];
        const plan = launchPlan(
          "codex",
          { baseUrl: proxy.url, apiKey: SECRET, modelId, contextWindow },
          [...extra, ...args, prompt],
        );
        const before = proxy.exchanges.length;
        const r = await run(`${bin}/codex`, plan.args, { ...env, ...plan.env }, work);
        await proxy.settled();
        return { ...r, sent: proxy.exchanges.slice(before) };
      };
      return {
        exec,
        close: () => Deno.remove(dir, { recursive: true }).catch(() => {}),
      };
    };

    try {
      await t.step("an overflow ends the turn after one request, in Codex's words", async () => {
        // Not told the window, Codex never compacts ahead; the second turn passes the context.
        const s = await session(undefined, []);
        try {
          const first = await s.exec(false, "Reply with one word.");
          assert.equal(first.code, 0, first.out);
          const over = await s.exec(true, filler(1200, "big"));
          const trace = over.sent.map((x) => `${x.path} ${x.status} ${errorCode(x) ?? ""}`);
          assert.deepEqual(
            over.sent.map((x) => [x.path, x.status, errorCode(x)]),
            [["/v1/responses", 400, "context_length_exceeded"]],
            `one refused request, no retries and no compaction: ${trace.join(", ")}`,
          );
          assert.notEqual(over.code, 0);
          // CodexErr::ContextWindowExceeded, not the generic "unexpected status 400".
          assert.match(over.out, /ran out of room in the model's context window/, over.out);
        } finally {
          await s.close();
        }
      });

      await t.step("past model_auto_compact_token_limit it compacts, then carries on", async () => {
        const s = await session(CODEX_CTX, ["-c", "model_auto_compact_token_limit=10000"]);
        try {
          const first = await s.exec(false, "Reply with one word.");
          assert.equal(first.code, 0, first.out);
          // ~3.5k tokens more: the usage Hearth reports for this turn passes 10000.
          const grow = await s.exec(true, filler(250, "grow"));
          assert.equal(grow.code, 0, grow.out);
          assert.ok(!grow.sent.some(isCodexCompaction), "not yet");
          const next = await s.exec(true, "Reply with one word.");
          const trace = next.sent.map((x) =>
            `${x.status} ${x.bytes}B${isCodexCompaction(x) ? " compact" : ""}`
          ).join(", ");
          assert.equal(next.code, 0, `${trace}\n${next.out}`);
          assert.equal(next.sent.length, 2, trace);
          assert.ok(isCodexCompaction(next.sent[0]), `the compaction request first: ${trace}`);
          assert.ok(next.sent.every((x) => x.status === 200), trace);
          assert.ok(!isCodexCompaction(next.sent[1]), trace);
          assert.ok(next.sent[1].body.tools?.length > 0, "then the turn, with its tools");
          assert.match(next.out, /context compacted/);
        } finally {
          await s.close();
        }
      });
    } finally {
      console.log(`codex: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      await proxy.close();
    }
  },
});
