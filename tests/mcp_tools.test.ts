/**
 * MCP tools executed by Hearth, end to end: a real `serve` with `--mcp-config` naming the fixture
 * MCP server over stdio and over streamable HTTP, the tiny Hermes-format model (its calls are
 * grammar-constrained, so arguments always validate), and the official SDKs of all three
 * dialects. Each step's result must be what the fixture computes from the arguments the model
 * produced. A server that crashes after its first call is reported in /health and its tools
 * withdrawn, while the other keeps serving.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { chatFormatModelPath } from "./support/models.ts";
import { freePort, startServer } from "./support/server.ts";

const fixture = new URL("./fixtures/mcp/server.ts", import.meta.url).pathname;

async function startHttpFixture(dir: string) {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      fixture,
      "--mode",
      "http",
      "--port",
      String(port),
      "--require-header",
      "X-Token=sekret-header-value",
      "--name",
      "text",
    ],
    stdout: "null",
    stderr: "null",
    cwd: dir,
  }).spawn();
  const url = `http://127.0.0.1:${port}/mcp`;
  for (let i = 0; i < 200; i++) {
    try {
      const r = await fetch(url, { method: "GET" });
      await r.body?.cancel();
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      await child.status;
    },
  };
}

/** The fixture's `upper` answers the text the model wrote, upper-cased. */
function assertUpper(args: string, output: string, where: string) {
  const a = JSON.parse(args);
  assert.equal(typeof a.text, "string", `${where}: ${args}`);
  assert.equal(output, a.text.toUpperCase(), `${where}: ${args} -> ${output}`);
}

async function health(url: string) {
  return await (await fetch(`${url}/health`)).json();
}

async function until<T>(f: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  while (true) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 100));
  }
}

Deno.test("MCP tools run by the server in all three dialects; a crashing server is withdrawn", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-mcp-" });
  const http = await startHttpFixture(dir);
  const config = {
    mcpServers: {
      calc: {
        command: Deno.execPath(),
        args: ["run", "-A", fixture, "--mode", "stdio", "--name", "calc"],
        env: { CALC_SECRET: "sekret-env-value" },
      },
      text: { url: http.url, headers: { "X-Token": "sekret-header-value" } },
      flaky: {
        command: Deno.execPath(),
        args: ["run", "-A", fixture, "--mode", "stdio", "--crash-after", "1"],
      },
    },
  };
  await Deno.writeTextFile(`${dir}/mcp.json`, JSON.stringify(config));
  const srv = await startServer([
    "--model",
    await chatFormatModelPath("hermes"),
    "--mcp-config",
    `${dir}/mcp.json`,
    "--max-seq-len",
    "8192",
    "--max-batch",
    "4",
    "--threads",
    "1",
    "--data-dir",
    dir,
  ]);
  try {
    const ready = await until(async () => {
      const h = await health(srv.url);
      return h.mcp?.every((s: { status: string }) => s.status === "ready") ? h : undefined;
    });
    assert.deepEqual(ready.mcp.map((s: { name: string }) => s.name).sort(), [
      "calc",
      "flaky",
      "text",
    ]);
    assert.doesNotMatch(JSON.stringify(ready), /sekret/);

    const openai = new OpenAI({ apiKey: "x", baseURL: `${srv.url}/v1`, maxRetries: 0 });
    const anthropic = new Anthropic({ apiKey: "x", baseURL: srv.url, maxRetries: 0 });
    const model = (await openai.models.list()).data[0].id;
    type Step = { server_label: string; name: string; arguments: string; output: string };
    /** Chat Completions with one server's `upper` forced in the first round. */
    const forcedUpper = async (server: string, content: string, seed: number) => {
      const chat = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content }],
        tools: [{ type: "mcp", server_label: server, allowed_tools: ["upper"] }] as never,
        tool_choice: "required",
        parallel_tool_calls: false,
        max_tokens: 300,
        seed,
      });
      const message = chat.choices[0].message as unknown as { hearth_tool_steps: Step[] };
      return { chat, steps: message.hearth_tool_steps };
    };

    // Chat Completions: the forced first round calls calc_upper; Hearth runs it and goes on.
    const { chat, steps } = await forcedUpper("calc", "Shout a word.", 1);
    assert.ok(steps.length >= 1, JSON.stringify(chat));
    assert.equal(steps[0].server_label, "calc");
    assert.equal(steps[0].name, "upper");
    assertUpper(steps[0].arguments, steps[0].output, "chat");
    assert.notEqual(chat.choices[0].finish_reason, "tool_calls");
    assert.equal(chat.choices[0].message.tool_calls ?? undefined, undefined);

    // Streamed: the step arrives as a delta, with its result.
    const stream = await openai.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Shout it." }],
      tools: [{ type: "mcp", server_label: "text", allowed_tools: ["echo"] }] as never,
      tool_choice: "required",
      parallel_tool_calls: false,
      max_tokens: 300,
      stream: true,
      seed: 2,
    });
    const streamed: { name: string; arguments: string; output: string }[] = [];
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta as { hearth_tool_steps?: typeof streamed } | undefined;
      if (d?.hearth_tool_steps) streamed.push(...d.hearth_tool_steps);
    }
    assert.ok(streamed.length >= 1);
    assert.equal(streamed[0].name, "echo");
    assert.equal(streamed[0].output, JSON.parse(streamed[0].arguments).text);

    // Anthropic Messages: mcp_tool_use then mcp_tool_result blocks.
    const msg = await anthropic.beta.messages.create({
      model,
      max_tokens: 300,
      messages: [{ role: "user", content: "Shout a word." }],
      mcp_servers: [{
        type: "url",
        name: "calc",
        url: "https://example.invalid/mcp",
        tool_configuration: { allowed_tools: ["upper"] },
      }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      betas: ["mcp-client-2025-04-04"],
    });
    const use = msg.content.find((b) => b.type === "mcp_tool_use");
    const result = msg.content.find((b) => b.type === "mcp_tool_result");
    assert.ok(use && use.type === "mcp_tool_use", JSON.stringify(msg.content));
    assert.equal(use.server_name, "calc");
    assert.ok(result && result.type === "mcp_tool_result");
    assert.equal(result.tool_use_id, use.id);
    assert.equal(result.is_error, false);
    const text = (result.content as { type: string; text: string }[])[0].text;
    assert.equal(use.name, "upper");
    assertUpper(JSON.stringify(use.input), text, "anthropic");
    assert.notEqual(msg.stop_reason, "tool_use");

    // Responses: an mcp_call item with the output the server computed.
    const resp = await openai.responses.create({
      model,
      input: "Echo something.",
      tools: [{
        type: "mcp",
        server_label: "text",
        server_url: "https://example.invalid/mcp",
        allowed_tools: ["echo"],
        require_approval: "never",
      }],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_output_tokens: 300,
    });
    const call = resp.output.find((i) => i.type === "mcp_call");
    assert.ok(call && call.type === "mcp_call", JSON.stringify(resp.output));
    assert.equal(call.server_label, "text");
    assert.equal(call.name, "echo");
    assert.equal(call.output, JSON.parse(call.arguments).text);
    // The stored step is replayed to the model on the next turn (not left out as unknown).
    const next = await openai.responses.create({
      model,
      previous_response_id: resp.id,
      input: "And again.",
      max_output_tokens: 20,
    }).withResponse();
    assert.equal(next.data.status, "incomplete");
    assert.doesNotMatch(next.response.headers.get("x-hearth-ignored-fields") ?? "", /mcp_call/);

    // Both streamed: the SDKs' own accumulators see the same steps.
    const streamedMsg = await anthropic.beta.messages.stream({
      model,
      max_tokens: 300,
      messages: [{ role: "user", content: "Shout a word." }],
      mcp_servers: [{
        type: "url",
        name: "text",
        url: "https://example.invalid/mcp",
        // Bounded arguments: a random model asked for any of the fixture's tools may pick one
        // whose numbers it never finishes writing.
        tool_configuration: { allowed_tools: ["echo", "upper"] },
      }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      betas: ["mcp-client-2025-04-04"],
    }).finalMessage();
    const sUse = streamedMsg.content.find((b) => b.type === "mcp_tool_use");
    const sRes = streamedMsg.content.find((b) => b.type === "mcp_tool_result");
    assert.ok(sUse?.type === "mcp_tool_use" && sRes?.type === "mcp_tool_result");
    assert.equal(sRes.tool_use_id, sUse.id);
    const sText = (sRes.content as { type: string; text: string }[])[0].text;
    const sInput = sUse.input as { text?: string };
    if (sUse.name === "echo") assert.equal(sText, sInput.text);
    if (sUse.name === "upper") assert.equal(sText, sInput.text!.toUpperCase());
    const rs = openai.responses.stream({
      model,
      input: "Echo something.",
      tools: [{
        type: "mcp",
        server_label: "calc",
        server_url: "https://example.invalid/mcp",
        allowed_tools: ["echo"],
        require_approval: "never",
      }],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_output_tokens: 300,
    });
    const types = new Set<string>();
    for await (const ev of rs) types.add(ev.type);
    const final = await rs.finalResponse();
    const sCall = final.output.find((i) => i.type === "mcp_call");
    assert.ok(sCall?.type === "mcp_call", JSON.stringify(final.output));
    assert.equal(sCall.output, JSON.parse(sCall.arguments).text);
    assert.ok(types.has("response.mcp_call.completed"), [...types].join(","));

    // An unknown server is the client's mistake, named.
    const bad = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        messages: [{ role: "user", content: "hi" }],
        tools: [{ type: "mcp", server_label: "nope" }],
      }),
    });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error.message, /no MCP server named "nope"/);

    // The flaky server answers once, then dies: reported, withdrawn, the rest keeps serving.
    const first = (await forcedUpper("flaky", "Add.", 3)).steps[0];
    assertUpper(first.arguments, first.output, "flaky");
    // Its death is noticed (down, or already restarted by the reconnect backoff).
    const down = await until(async () => {
      const h = await health(srv.url);
      const f = h.mcp.find((s: { name: string }) => s.name === "flaky");
      return f.status !== "ready" || f.restarts >= 1 ? f : undefined;
    });
    assert.ok(down.error || down.restarts >= 1, JSON.stringify(down));
    const s2 = (await forcedUpper("calc", "Add.", 4)).steps[0];
    assertUpper(s2.arguments, s2.output, "calc after flaky died");
    assert.equal((await health(srv.url)).status, "ok");
    assert.doesNotMatch(srv.stderr(), /sekret/);
  } finally {
    await srv.stop();
    await http.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
