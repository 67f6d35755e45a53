/**
 * The MCP client layer (lib/mcp/) against real MCP servers: tests/fixtures/mcp/server.ts run by this
 * same Deno, over stdio (spawned by the registry) and over streamable HTTP (spawned here). Tool
 * results are computed by the fixture from the arguments, so a passing call is a real round trip.
 * Covers config validation, listing with pagination, calls, the result cap, timeouts and aborts,
 * list_changed, a crashing server being withdrawn and reconnected while another keeps serving, start
 * failures (missing command, early exit, start timeout), secret redaction and clean shutdown.
 */
import assert from "node:assert/strict";
import {
  exposedToolName,
  loadMcpConfig,
  type McpRegistry,
  type McpRegistryOptions,
  type McpServerConfig,
  parseMcpConfig,
  startMcpRegistry,
} from "../lib/mcp/registry.ts";
import { redactorFor } from "../lib/mcp/redact.ts";
import { capUtf8, formatToolResult } from "../lib/mcp/result.ts";

const root = new URL("..", import.meta.url).pathname;
const fixture = `${root}tests/fixtures/mcp/server.ts`;

/** Env a child Deno needs to find its cache; the registry passes only a minimal environment. */
function denoEnv(): Record<string, string> {
  const env: Record<string, string> = { DENO_NO_UPDATE_CHECK: "1" };
  const dir = Deno.env.get("DENO_DIR");
  if (dir) env.DENO_DIR = dir;
  return env;
}

/** A stdio server config that runs the fixture with `flags`. */
function stdio(flags: string[], env: Record<string, string> = {}): McpServerConfig {
  return {
    command: Deno.execPath(),
    args: ["run", "-A", "--quiet", fixture, "--mode", "stdio", ...flags],
    env: { ...denoEnv(), ...env },
    cwd: root,
  };
}

/** Starts a registry with a log collector; `f` runs with it and it is always closed. */
async function withRegistry(
  servers: Record<string, McpServerConfig>,
  opts: McpRegistryOptions,
  f: (mcp: McpRegistry, logs: string[]) => Promise<void>,
) {
  const logs: string[] = [];
  const mcp = startMcpRegistry({ mcpServers: servers }, {
    minBackoffMs: 100,
    maxBackoffMs: 400,
    ...opts,
    log: (line) => {
      logs.push(line);
      if (Deno.env.get("MCP_TEST_LOG")) console.error(line);
    },
  });
  try {
    await f(mcp, logs);
  } finally {
    await mcp.close();
  }
}

async function waitFor(what: string, pred: () => boolean, timeoutMs = 10_000) {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const stateOf = (mcp: McpRegistry, name: string) => mcp.states().find((s) => s.name === name)!;

/** Runs the fixture over HTTP; resolves once it listens. */
async function httpFixture(flags: string[], port = 0) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", fixture, "--mode", "http", "--port", String(port), ...flags],
    cwd: root,
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  let m: RegExpMatchArray | null = null;
  while (!(m = out.match(/PORT=(\d+)\n/))) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`http fixture exited: ${out}`);
    out += value;
  }
  await reader.cancel();
  return {
    port: Number(m[1]),
    async stop() {
      try {
        child.kill("SIGKILL");
      } catch { /* already gone */ }
      await child.status;
    },
  };
}

function processGone(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return / Z /.test(stat); // a zombie has exited
  } catch {
    return true;
  }
}

Deno.test("parseMcpConfig: valid files, and one clear line naming the field for each mistake", () => {
  const ok = parseMcpConfig(
    JSON.stringify({
      mcpServers: {
        calc: { command: "calc-mcp", args: ["-v"], env: { K: "v" }, cwd: "sub" },
        "web_2-x": { url: "https://example.com/mcp", headers: { A: "b" }, type: "http" },
      },
    }),
    "/etc/hearth/mcp.json",
  );
  assert.deepEqual(ok.mcpServers.calc, {
    command: "calc-mcp",
    args: ["-v"],
    env: { K: "v" },
    cwd: "/etc/hearth/sub", // relative to the file
  });
  assert.equal((ok.mcpServers["web_2-x"] as { url: string }).url, "https://example.com/mcp");
  assert.deepEqual(parseMcpConfig('{"mcpServers": {}}', "m.json"), { mcpServers: {} });

  const cases: [unknown, RegExp][] = [
    ["{", /^mcp config m\.json: not valid JSON/],
    [[], /expected a JSON object/],
    [{ servers: {} }, /unknown field "servers"/],
    [{ mcpServers: [] }, /"mcpServers" must be an object/],
    [{ mcpServers: { "bad name": { command: "x" } } }, /mcpServers\.bad name: server names/],
    [{ mcpServers: { ["x".repeat(65)]: { command: "x" } } }, /server names are 1-64/],
    [{ mcpServers: { a: { command: "x", url: "http://h/" } } }, /mcpServers\.a: has both/],
    [{ mcpServers: { a: { args: [] } } }, /mcpServers\.a: needs "command" .* or "url"/],
    [{ mcpServers: { a: "x" } }, /mcpServers\.a: must be an object/],
    [{ mcpServers: { a: { command: "x", comand: 1 } } }, /mcpServers\.a: unknown field "comand"/],
    [
      { mcpServers: { a: { url: "http://h/", header: {} } } },
      /mcpServers\.a: unknown field "header"/,
    ],
    [{ mcpServers: { a: { command: "" } } }, /mcpServers\.a\.command: must not be empty/],
    [{ mcpServers: { a: { command: "x", env: { K: 1 } } } }, /mcpServers\.a\.env\.K: /],
    [{ mcpServers: { a: { command: "x", args: "-v" } } }, /mcpServers\.a\.args: /],
    [{ mcpServers: { a: { url: "ftp://h/" } } }, /mcpServers\.a\.url: must be an http/],
    [{ mcpServers: { a: { url: "not a url" } } }, /mcpServers\.a\.url: must be an http/],
    [{ mcpServers: { a: { url: "http://h/", type: "sse" } } }, /SSE transport is not supported/],
    [{ mcpServers: { a: { command: "x", type: "http" } } }, /mcpServers\.a\.type: /],
  ];
  for (const [input, want] of cases) {
    const text = typeof input === "string" ? input : JSON.stringify(input);
    assert.throws(() => parseMcpConfig(text, "m.json"), (e: Error) => {
      assert.match(e.message, want, `for ${text}`);
      assert.match(e.message, /^mcp config m\.json: /);
      assert.ok(!e.message.includes("\n"), `one line: ${e.message}`);
      return true;
    });
  }
});

Deno.test("loadMcpConfig: an unreadable file is one clear line", async () => {
  await assert.rejects(
    () => loadMcpConfig("/nonexistent/mcp.json"),
    /^Error: mcp config \/nonexistent\/mcp\.json: cannot read \(/,
  );
});

Deno.test("exposed tool names are sanitised, at most 64 chars, and stay distinct", () => {
  assert.equal(exposedToolName("calc", "add"), "calc_add");
  assert.equal(exposedToolName("fs", "read.file/v2 é"), "fs_read_file_v2__");
  const a = exposedToolName("srv", "t".repeat(80) + "a");
  const b = exposedToolName("srv", "t".repeat(80) + "b");
  assert.equal(a.length, 64);
  assert.match(a, /^[A-Za-z0-9_-]+$/);
  assert.notEqual(a, b);
});

Deno.test("redaction: env and header values, URL credentials and query values", () => {
  const r = redactorFor({
    url: "https://user:pw-secret-1@h.example/mcp?key=k-secret-2&v=1",
    headers: { Authorization: "Bearer tok-secret-3", "X-Id": "id-secret-4" },
  });
  assert.equal(r.url, "https://h.example/mcp?…");
  const text = r.redact(
    "GET https://user:pw-secret-1@h.example/mcp?key=k-secret-2&v=1: got tok-secret-3, " +
      "pw-secret-1, k-secret-2, Bearer tok-secret-3 and id-secret-4",
  );
  assert.equal(text, "GET https://h.example/mcp?…: got ***, ***, ***, *** and ***");
  const e = redactorFor({ command: "x", env: { A: "env secret/5", B: "on" } });
  assert.equal(e.redact("A=env secret/5 B=on A=env%20secret%2F5"), "A=*** B=on A=***");
});

Deno.test("result text: placeholders, structured content, UTF-8 cap on a character boundary", () => {
  assert.equal(
    formatToolResult({
      content: [
        { type: "text", text: "a" },
        { type: "image", data: "AAAA", mimeType: "image/png" },
        { type: "audio", data: "AAA=", mimeType: "audio/wav" },
        { type: "resource", resource: { uri: "file:///x", mimeType: "text/plain", text: "héllo" } },
        { type: "resource_link", uri: "file:///y", name: "y" },
      ],
    }),
    "a\n[image/png, 3 bytes]\n[audio/wav, 2 bytes]\n[resource file:///x: text/plain, 6 bytes]\n" +
      "[resource link file:///y]",
  );
  assert.equal(formatToolResult({ content: [], structuredContent: { sum: 3 } }), '{"sum":3}');
  // Structured content mirrored in text is not shown twice.
  assert.equal(
    formatToolResult({ content: [{ type: "text", text: "3" }], structuredContent: {} }),
    "3",
  );
  assert.deepEqual(capUtf8("abc", 3), { text: "abc", truncated: false });
  assert.deepEqual(capUtf8("héllo", 2), { text: "h\n[truncated: 5 bytes more]", truncated: true });
  const emoji = capUtf8("😀😀", 5); // 4 + 4 bytes: only the first fits
  assert.equal(emoji.text, "😀\n[truncated: 4 bytes more]");
});

Deno.test("stdio server: paginated tools with schemas, real calls, cap, timeout, abort, list_changed", async (t) => {
  const secret = "calc-secret-value-7731";
  Deno.env.set("HEARTH_MCP_LEAK_CHECK", "should-not-reach-servers");
  try {
    await withRegistry(
      {
        calc: stdio(["--page-size", "3", "--env-check", "CALC_SECRET"], { CALC_SECRET: secret }),
      },
      { maxResultBytes: 1000 },
      async (mcp, logs) => {
        await mcp.ready();
        await t.step("listing", () => {
          const s = stateOf(mcp, "calc");
          assert.equal(s.status, "ready", JSON.stringify(s));
          assert.equal(s.transport, "stdio");
          assert.ok(s.connectedAt && typeof s.pid === "number");
          assert.equal(s.restarts, 0);
          assert.deepEqual(mcp.names(), ["calc"]);
          const tools = mcp.tools("calc")!;
          // 10 tools over pages of 3: every page was followed.
          assert.deepEqual(tools.map((x) => x.name), [
            "calc_add",
            "calc_echo",
            "calc_upper",
            "calc_big",
            "calc_fail",
            "calc_slow",
            "calc_image",
            "calc_structured",
            "calc_grow",
            "calc_env",
          ]);
          assert.equal(s.tools, 10);
          const add = tools[0];
          assert.equal(add.server, "calc");
          assert.equal(add.toolName, "add");
          assert.equal(add.description, "Adds two numbers.");
          assert.deepEqual(add.inputSchema, {
            type: "object",
            properties: { a: { type: "number" }, b: { type: "number" } },
            required: ["a", "b"],
            additionalProperties: false,
          });
          assert.equal(mcp.tools("nope"), undefined);
          assert.deepEqual(mcp.allTools().map((x) => x.name), tools.map((x) => x.name));
          assert.ok(logs.includes('mcp: server "calc" ready: 10 tools'), logs.join("\n"));
        });

        await t.step("calls computed from the arguments", async () => {
          assert.deepEqual(await mcp.call("calc_add", { a: 2, b: 3 }), {
            text: "5",
            isError: false,
            truncated: false,
          });
          assert.equal((await mcp.call("calc_add", { a: 40.5, b: 1.5 })).text, "42");
          assert.equal((await mcp.call("calc_echo", { text: "héllo" })).text, "héllo");
          assert.equal((await mcp.call("calc_upper", { text: "shout" })).text, "SHOUT");
          assert.deepEqual(await mcp.call("calc_fail", {}), {
            text: "fixture failure requested",
            isError: true,
            truncated: false,
          });
          assert.equal((await mcp.call("calc_image", {})).text, "[image/png, 70 bytes]\na pixel");
          assert.equal((await mcp.call("calc_structured", { a: 1, b: 2 })).text, '{"sum":3}');
          // The configured env arrives; the server's own environment does not.
          assert.equal((await mcp.call("calc_env", {})).text, "CALC_SECRET=set");
          assert.equal(
            (await mcp.call("calc_env", { name: "HEARTH_MCP_LEAK_CHECK" })).text,
            "HEARTH_MCP_LEAK_CHECK=unset",
          );
          const unknown = await mcp.call("calc_nope", {});
          assert.equal(unknown.isError, true);
          assert.match(unknown.text, /unknown MCP tool "calc_nope"/);
        });

        await t.step("result cap cuts on a character boundary with a note", async () => {
          const r = await mcp.call("calc_big", { bytes: 5000, char: "é" });
          assert.equal(r.truncated, true);
          assert.equal(r.isError, false);
          const [body, note] = r.text.split("\n");
          assert.equal(body, "é".repeat(500)); // 1000 bytes
          assert.equal(note, "[truncated: 4000 bytes more]");
          const small = await mcp.call("calc_big", { bytes: 10 });
          assert.deepEqual(small, { text: "x".repeat(10), isError: false, truncated: false });
        });

        await t.step(
          "timeout and abort give a clear error, and the server keeps serving",
          async () => {
            const t0 = Date.now();
            const slow = await mcp.call("calc_slow", { ms: 10_000 }, { timeoutMs: 300 });
            assert.ok(Date.now() - t0 < 3000);
            assert.equal(slow.isError, true);
            assert.match(slow.text, /MCP tool "calc_slow" timed out after 300 ms/);

            const ac = new AbortController();
            const timer = setTimeout(() => ac.abort(), 100);
            const aborted = await mcp.call("calc_slow", { ms: 10_000 }, { signal: ac.signal });
            clearTimeout(timer);
            assert.equal(aborted.isError, true);
            assert.match(aborted.text, /aborted/);
            assert.match(
              (await mcp.call("calc_slow", { ms: 1 }, { signal: ac.signal })).text,
              /aborted/,
            );

            assert.equal((await mcp.call("calc_add", { a: 1, b: 1 })).text, "2");
            assert.equal(stateOf(mcp, "calc").status, "ready");
          },
        );

        await t.step("tools/list_changed brings new tools in", async () => {
          assert.equal((await mcp.call("calc_grow", {})).text, "grown");
          await waitFor(
            "calc_extra",
            () => mcp.tools("calc")!.some((x) => x.name === "calc_extra"),
          );
          assert.equal((await mcp.call("calc_extra", {})).text, "extra called");
        });

        await t.step("the env secret is nowhere in states or logs", () => {
          assert.ok(!JSON.stringify(mcp.states()).includes(secret));
          assert.ok(!logs.join("\n").includes(secret));
        });
      },
    );
  } finally {
    Deno.env.delete("HEARTH_MCP_LEAK_CHECK");
  }
});

Deno.test("http server with a required header: works with it, 401 without; no secret shown; a dead server is withdrawn and comes back", async () => {
  const header = "hdr-secret-value-4410";
  const wrong = "wrong-secret-value-9921";
  const query = "query-secret-5150";
  let server = await httpFixture(["--require-header", `X-Api-Key=${header}`]);
  const { port } = server;
  try {
    await withRegistry(
      {
        web: {
          url: `http://127.0.0.1:${port}/mcp?token=${query}`,
          headers: { "X-Api-Key": header },
        },
        // The fixture's 401 body echoes the header it got: the error must not show it.
        denied: { url: `http://127.0.0.1:${port}/mcp`, headers: { "X-Api-Key": wrong } },
      },
      {},
      async (mcp, logs) => {
        await mcp.ready();
        const web = stateOf(mcp, "web");
        assert.equal(web.status, "ready", JSON.stringify(web));
        assert.equal(web.transport, "http");
        assert.equal(web.url, `http://127.0.0.1:${port}/mcp?…`);
        assert.equal((await mcp.call("web_add", { a: 20, b: 22 })).text, "42");
        assert.equal((await mcp.call("web_upper", { text: "over http" })).text, "OVER HTTP");

        const denied = stateOf(mcp, "denied");
        assert.ok(denied.status === "failed" || denied.status === "reconnecting");
        assert.match(denied.error!, /401/);
        assert.match(denied.error!, /\*\*\*/, "the echoed header value is redacted");
        assert.deepEqual(mcp.tools("denied"), []);

        // The server dies: the next call fails clearly, a ping confirms, the tools are withdrawn.
        await server.stop();
        const down = await mcp.call("web_add", { a: 1, b: 1 });
        assert.equal(down.isError, true);
        assert.match(down.text, /web_add/);
        await waitFor("web withdrawn", () => stateOf(mcp, "web").status !== "ready");
        assert.deepEqual(mcp.tools("web"), []);
        assert.match((await mcp.call("web_add", { a: 1, b: 1 })).text, /unavailable: server "web"/);

        // Back on the same port: reconnected with its tools.
        server = await httpFixture(["--require-header", `X-Api-Key=${header}`], port);
        await waitFor("web back", () => stateOf(mcp, "web").status === "ready");
        assert.ok(stateOf(mcp, "web").restarts >= 1);
        assert.equal((await mcp.call("web_add", { a: 2, b: 2 })).text, "4");

        const shown = JSON.stringify(mcp.states()) + logs.join("\n");
        for (const s of [header, wrong, query]) assert.ok(!shown.includes(s), `${s} leaked`);
      },
    );
  } finally {
    await server.stop();
  }
});

Deno.test("a server that crashes after its first call is withdrawn while the other keeps serving, then reconnects", async () => {
  await withRegistry(
    { crashy: stdio(["--crash-after", "1"]), calc: stdio([]) },
    {},
    async (mcp, logs) => {
      await mcp.ready();
      assert.equal(stateOf(mcp, "crashy").status, "ready");
      const pid = stateOf(mcp, "crashy").pid!;
      assert.equal((await mcp.call("crashy_add", { a: 2, b: 3 })).text, "5");

      await waitFor("crashy down", () => stateOf(mcp, "crashy").status !== "ready");
      const s = stateOf(mcp, "crashy");
      assert.match(s.error!, /server process exited/);
      assert.deepEqual(mcp.tools("crashy"), []);
      assert.ok(!mcp.allTools().some((x) => x.server === "crashy"));
      const refused = await mcp.call("crashy_add", { a: 1, b: 1 });
      assert.equal(refused.isError, true);
      assert.match(refused.text, /MCP tool "crashy_add" is unavailable: server "crashy" is/);
      assert.ok(logs.some((l) => l.startsWith('mcp: server "crashy" down: ')), logs.join("\n"));

      // The other server is unaffected.
      assert.equal(stateOf(mcp, "calc").status, "ready");
      assert.equal((await mcp.call("calc_add", { a: 7, b: 8 })).text, "15");

      await waitFor("crashy back", () => stateOf(mcp, "crashy").status === "ready");
      const back = stateOf(mcp, "crashy");
      assert.ok(back.restarts >= 1);
      assert.notEqual(back.pid, pid);
      assert.equal(back.error, undefined);
      assert.equal(mcp.tools("crashy")!.length, 9);
      assert.equal((await mcp.call("crashy_echo", { text: "again" })).text, "again");
    },
  );
});

Deno.test("start failures: missing command, early exit quoting a secret, start timeout; ready() resolves and the rest works", async () => {
  const secret = "early-exit-secret-8080";
  await withRegistry(
    {
      ghost: { command: "/nonexistent/hearth-mcp-ghost", env: { GHOST_KEY: "ghost-key-123" } },
      leaky: stdio(["--fail-start", "--env-check", "LEAKY_TOKEN"], { LEAKY_TOKEN: secret }),
      calc: stdio([]),
    },
    { minBackoffMs: 60_000, maxBackoffMs: 60_000 },
    async (mcp, logs) => {
      await mcp.ready();

      const ghost = stateOf(mcp, "ghost");
      assert.equal(ghost.status, "failed");
      assert.match(ghost.error!, /^command not found: \/nonexistent\/hearth-mcp-ghost$/);
      assert.ok(ghost.nextRetryAt);
      assert.deepEqual(mcp.tools("ghost"), []);

      const leaky = stateOf(mcp, "leaky");
      assert.equal(leaky.status, "failed");
      assert.equal(
        leaky.error,
        "server process exited during start-up (stderr: fixture: refusing to start; LEAKY_TOKEN=***)",
      );

      assert.equal(stateOf(mcp, "calc").status, "ready");
      assert.equal((await mcp.call("calc_add", { a: 1, b: 2 })).text, "3");
      const shown = JSON.stringify(mcp.states()) + logs.join("\n");
      assert.ok(!shown.includes(secret) && !shown.includes("ghost-key-123"), shown);
      assert.ok(logs.some((l) => /^mcp: server "ghost" failed: .*retrying in 60\.0 s$/.test(l)));
    },
  );

  // A process that never answers (it just drains stdin until the registry closes it).
  const t0 = Date.now();
  await withRegistry(
    {
      mute: {
        command: Deno.execPath(),
        args: ["eval", "for await (const _ of Deno.stdin.readable);"],
      },
    },
    { startTimeoutMs: 500 },
    async (mcp) => {
      await mcp.ready();
      assert.ok(Date.now() - t0 < 5000, "ready() is bounded by the start timeout");
      const mute = stateOf(mcp, "mute");
      assert.ok(mute.status === "failed" || mute.status === "reconnecting");
      assert.match(mute.error!, /did not start within 500 ms/);
    },
  );
});

Deno.test("close() stops every server process and ends calls cleanly", async () => {
  const mcp = startMcpRegistry({
    mcpServers: { a: stdio([]), b: stdio([]), ghost: { command: "/nonexistent/x" } },
  }, { log: () => {}, minBackoffMs: 50 });
  await mcp.ready();
  const pids = mcp.states().flatMap((s) => (s.pid ? [s.pid] : []));
  assert.equal(pids.length, 2);
  const pending = mcp.call("a_slow", { ms: 10_000 });
  await new Promise((r) => setTimeout(r, 50));
  await mcp.close();
  await mcp.close(); // idempotent
  const r = await pending;
  assert.equal(r.isError, true);
  for (const pid of pids) assert.ok(processGone(pid), `process ${pid} still running`);
  assert.ok(mcp.states().every((s) => s.status === "closed" && s.tools === 0));
  assert.deepEqual(mcp.tools("a"), []);
  assert.match((await mcp.call("a_add", { a: 1, b: 1 })).text, /unavailable: server "a" is closed/);
});
