/**
 * Several machines through llama.cpp's RPC backend, on one machine: two `hearth rpc-server`
 * processes on loopback serve their CPU, and `hearth serve --master-addr` places the model's
 * layers on them. Greedy output must equal a single process's, token for token.
 */
import assert from "node:assert/strict";
import { childEnv, freePort, mainTs, runMain, startServer } from "./support/server.ts";
import { tinyModelPath } from "./support/models.ts";
import { buildRpc } from "../tools/build_rpc.ts";

type RpcServer = { endpoint: string; output: () => string; stop: () => Promise<void> };

/** Starts `hearth rpc-server` and waits until its port accepts connections. */
async function startRpcServer(): Promise<RpcServer> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", mainTs, "rpc-server", "--port", String(port), "--threads", "1"],
    // The CPU device on any host: a GPU host's rpc-server would offer its GPUs instead.
    env: childEnv({ env: { HEARTH_LLAMA_LOG: "off" } }),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  const dec = new TextDecoder();
  const pumps = [child.stdout, child.stderr].map(async (s) => {
    for await (const c of s) out += dec.decode(c, { stream: true });
  });
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  const stop = async () => {
    if (!exited) child.kill("SIGKILL");
    await status;
    await Promise.all(pumps);
  };
  const deadline = Date.now() + 30_000;
  while (true) {
    if (exited) {
      await stop();
      throw new Error(`rpc-server exited before it listened:\n${out}`);
    }
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`rpc-server did not listen in 30 s:\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { endpoint: `127.0.0.1:${port}`, output: () => out, stop };
}

async function complete(url: string, prompt: string): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: 24, temperature: 0 }),
  });
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.usage.completion_tokens, 24);
  return body.choices[0].text;
}

async function chat(url: string): Promise<string> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      messages: [{ role: "user", content: "Split me over two hosts" }],
      max_tokens: 16,
      temperature: 0,
    }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).choices[0].message.content;
}

const SERVE = ["--max-batch", "2", "--max-seq-len", "512", "--threads", "1"];

/** `hearth serve` on a free loopback port with `extra` flags, run to its exit. */
function serveOnce(model: string, extra: string[]) {
  const port = String(freePort());
  return runMain([
    "serve",
    "--model",
    model,
    ...SERVE,
    "--host",
    "127.0.0.1",
    "--port",
    port,
    ...extra,
  ]);
}

Deno.test("rpc: a model split over two loopback rpc-servers gives a single process's greedy output", async () => {
  await buildRpc(); // cached after the suite's setup
  const model = await tinyModelPath();
  const a = await startRpcServer();
  const b = await startRpcServer();
  try {
    const prompts = ["Hello there", "The quick brown fox", "1 2 3 4 5 6 7"];
    const expected: string[] = [];
    {
      await using one = await startServer(["--model", model, ...SERVE]);
      for (const p of prompts) expected.push(await complete(one.url, p));
      expected.push(await chat(one.url));
    }
    await using split = await startServer(
      ["--model", model, ...SERVE, "--master-addr", `${a.endpoint},${b.endpoint}`],
      { env: { HEARTH_LLAMA_LOG: "1" } },
    );
    // Concurrently, so batched decodes cross both hosts too.
    const got = await Promise.all([...prompts.map((p) => complete(split.url, p)), chat(split.url)]);
    assert.deepEqual(got, expected);

    // llama.cpp placed layers on both servers, and says so.
    const log = split.stderr();
    assert.match(log, /layer +\d+ assigned to device RPC0/);
    assert.match(log, /layer +\d+ assigned to device RPC1/);
    assert.match(
      log,
      new RegExp(`devices: CPU \\([^)]*\\), RPC0 \\(${a.endpoint}\\), RPC1 \\(${b.endpoint}\\)`),
    );

    const props = await (await fetch(`${split.url}/props`)).json();
    const rpc = props.devices.filter((d: { backend: string }) => d.backend === "RPC");
    assert.deepEqual(
      rpc.map((d: { name: string; description: string }) => [d.name, d.description]),
      [
        ["RPC0", a.endpoint],
        ["RPC1", b.endpoint],
      ],
    );
    assert.ok(rpc.every((d: { memory_total: number }) => d.memory_total > 0));
    assert.equal(props.devices[0].type, "cpu");
    assert.match(a.output(), /Accepted client connection/);

    // An RPC server serves one client at a time: a second Hearth is told so, not crashed.
    const second = await serveOnce(model, ["--master-addr", a.endpoint]);
    assert.equal(second.code, 1);
    assert.match(second.stderr, /did not answer within 5 s \(an RPC server serves one client/);

    await split.stop();
    // --num-ranks picks devices explicitly: here one rank, taken from the RPC servers only.
    await using one = await startServer(
      [
        "--model",
        model,
        ...SERVE,
        "--master-addr",
        `${a.endpoint},${b.endpoint}`,
        "--num-ranks",
        "1",
        "--local-num-ranks",
        "0",
      ],
      { env: { HEARTH_LLAMA_LOG: "1" } },
    );
    assert.equal(await complete(one.url, prompts[0]), expected[0]);
    assert.match(one.stderr(), /layer +\d+ assigned to device RPC0/);
    assert.doesNotMatch(one.stderr(), /assigned to device RPC1/);
    await one.stop(); // an RPC server serves one client at a time
    const tooMany = await serveOnce(model, [
      "--num-ranks",
      "3",
      "--local-num-ranks",
      "0",
      "--master-addr",
      `${a.endpoint}`,
    ]);
    assert.equal(tooMany.code, 2);
    assert.match(
      tooMany.stderr,
      /--num-ranks 3 with 0 local GPUs needs 3 devices from --master-addr, which added 1/,
    );

    // Something that is not an RPC server (an HTTP server) is named as such.
    const web = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () => new Response("hi"),
    );
    const http = `127.0.0.1:${web.addr.port}`;
    const wrong = await serveOnce(model, ["--master-addr", http]);
    await web.shutdown();
    assert.equal(wrong.code, 1);
    assert.match(
      wrong.stderr,
      new RegExp(`RPC server ${http} (answered the handshake|closed the connection)`),
    );
    assert.match(b.output(), /Accepted client connection/);
  } finally {
    await Promise.all([a.stop(), b.stop()]);
  }
});

Deno.test("rpc: bad endpoints, an unreachable server and a busy port are refused with one clear line", async () => {
  await buildRpc();
  const model = await tinyModelPath();
  const run = (args: string[]) => runMain(args);

  const remote = await run(["rpc-server", "--host", "0.0.0.0"]);
  assert.equal(remote.code, 2);
  assert.match(remote.stderr, /not loopback: the RPC protocol is unauthenticated.*--allow-remote/);

  for (const bad of ["nohost", "127.0.0.1:0", "127.0.0.1:70000", "a:1,a:1"]) {
    const r = await run(["serve", "--model", model, "--master-addr", bad]);
    assert.equal(r.code, 2, `--master-addr ${bad}: ${r.stderr}`);
    assert.match(r.stderr, /^hearth: --master-addr /m);
  }

  const nobody = `127.0.0.1:${freePort()}`;
  const down = await serveOnce(model, ["--master-addr", nobody]);
  assert.equal(down.code, 1);
  assert.match(down.stderr, new RegExp(`RPC server ${nobody} refused the connection`));

  const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = (busy.addr as Deno.NetAddr).port;
    const r = await run(["rpc-server", "--port", String(port)]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`could not listen on 127\\.0\\.0\\.1:${port}`));
  } finally {
    busy.close();
  }

  const help = await run(["rpc-server", "--help"]);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /unauthenticated|no\s+authentication/);
});
