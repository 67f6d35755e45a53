/**
 * Prefill/decode split on one machine: a prefill server computes prompts and sends their KV
 * cells; the decode server loads them and generates. Greedy output must equal one server's, and
 * every failure of the prefill side (down, hanging, wrong token, another model, cells refused)
 * must fall back to a local prefill without the client noticing.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { freePort, runMain, startServer } from "./support/server.ts";
import { chatFormatModelPath, tinyModelPath } from "./support/models.ts";
import { PD_PATH, PD_TOKENS_HEADER } from "../lib/engine/prefill_decode.ts";

const SERVE = ["--max-batch", "4", "--max-seq-len", "1024", "--threads", "1"];

async function pdFile(cfg: Record<string, unknown>): Promise<string> {
  const f = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(f, JSON.stringify(cfg));
  return f;
}

async function complete(url: string, prompt: string, extra: Record<string, unknown> = {}) {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: 20, temperature: 0, ...extra }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return (await r.json()).choices[0].text as string;
}

async function pdStats(url: string) {
  return (await (await fetch(`${url}/props`)).json()).pd;
}

const PROMPTS = [
  "Hello there my friend, how are you today?",
  "The quick brown fox jumps over the lazy dog. ".repeat(6),
  "1 2 3 4 5 6 7 8 9 10 11 12",
];

Deno.test("pd: the decode server's greedy output equals one server's, with the prompt computed by the prefill server", async () => {
  const model = await tinyModelPath();
  const token = "pd-secret-token";
  await using prefill = await startServer([
    "--model",
    model,
    ...SERVE,
    "--pd-config",
    await pdFile({ role: "prefill", token }),
  ]);
  await using decode = await startServer([
    "--model",
    model,
    ...SERVE,
    "--pd-config",
    await pdFile({ role: "decode", peer: prefill.url, token, minPrefillTokens: 4 }),
  ]);
  // The prefill server is an ordinary server too: it is the single-server reference.
  const expected = [];
  for (const p of PROMPTS) expected.push(await complete(prefill.url, p));
  const before = await pdStats(prefill.url);
  assert.equal(before.remotePrefills, 0);

  const got = await Promise.all(PROMPTS.map((p) => complete(decode.url, p)));
  assert.deepEqual(got, expected);

  // Streamed chat through the official SDK, against the same on one server.
  const ask = async (url: string) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none" });
    const { data: [served] } = await client.models.list();
    const stream = await client.chat.completions.create({
      model: served.id,
      messages: [{ role: "user", content: "Tell me about prefill and decode." }],
      max_tokens: 16,
      temperature: 0,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    return text;
  };
  assert.equal(await ask(decode.url), await ask(prefill.url));

  const d = await pdStats(decode.url);
  assert.deepEqual(
    { role: d.role, peer: d.peer, remotePrefills: d.remotePrefills, fallbacks: d.fallbacks },
    { role: "decode", peer: prefill.url, remotePrefills: 4, fallbacks: 0 },
  );
  assert.equal((await pdStats(prefill.url)).remotePrefills, 4);

  // Short prompts are computed locally (a round trip costs more than they do).
  await complete(decode.url, "Hi");
  assert.equal((await pdStats(decode.url)).remotePrefills, 4);

  // The route itself: token, model and body are checked.
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${prefill.url}${PD_PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  const noToken = await post({ fingerprint: "x", tokens: [1, 2] });
  assert.equal(noToken.status, 401);
  assert.match((await noToken.json()).error.message, /x-hearth-pd-token/);
  const h = { "x-hearth-pd-token": token };
  const other = await post({ fingerprint: "another|model", tokens: [1, 2] }, h);
  assert.equal(other.status, 409);
  assert.match((await other.json()).error.message, /runs another model/);
  const bad = await post({ fingerprint: "x", tokens: [] }, h);
  assert.equal(bad.status, 400);
  await bad.body?.cancel();
});

Deno.test("pd: a prefill server that is down, hangs, refuses the token, runs another model or sends bad cells falls back to local prefill", async () => {
  const model = await tinyModelPath();
  const prompt = PROMPTS[1];
  await using reference = await startServer(["--model", model, ...SERVE]);
  const want = await complete(reference.url, prompt);

  // A peer that answers nothing for a while, and one that sends bytes llama.cpp will refuse.
  const hang = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    await new Promise((r) => setTimeout(r, 3000));
    await req.body?.cancel();
    return new Response("late", { status: 500 });
  });
  const junk = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const { tokens } = await req.json();
    return new Response(new Uint8Array(64).fill(7), {
      headers: { [PD_TOKENS_HEADER]: String(tokens.length) },
    });
  });
  const otherModel = await startServer([
    "--model",
    await chatFormatModelPath("hermes"),
    ...SERVE,
    "--pd-config",
    await pdFile({ role: "prefill", token: "t" }),
  ]);
  try {
    const cases: [string, Record<string, unknown>, RegExp][] = [
      [
        "down",
        { peer: `http://127.0.0.1:${freePort()}` },
        /could not reach the prefill server .*(refused|connect)/i,
      ],
      [
        "hanging",
        { peer: `http://127.0.0.1:${hang.addr.port}`, timeoutMs: 300 },
        /did not answer within 300 ms/,
      ],
      ["wrong token", { peer: otherModel.url, token: "nope" }, /answered 401/],
      [
        "another model",
        { peer: otherModel.url, token: "t" },
        /answered 409: this prefill server runs another model/,
      ],
      [
        "bad cells",
        { peer: `http://127.0.0.1:${junk.addr.port}` },
        /refused the prefill server's KV cells/,
      ],
    ];
    for (const [name, cfg, why] of cases) {
      await using decode = await startServer([
        "--model",
        model,
        ...SERVE,
        "--pd-config",
        await pdFile({ role: "decode", minPrefillTokens: 1, ...cfg }),
      ]);
      assert.equal(await complete(decode.url, prompt), want, name);
      const s = await pdStats(decode.url);
      assert.equal(s.fallbacks, 1, name);
      assert.equal(s.remotePrefills, 0, name);
      assert.match(s.lastError, why, `${name}: ${s.lastError}`);
      assert.match(decode.stderr(), /computing the prompt here|refused the prefill server's KV/);
    }
  } finally {
    await Promise.all([hang.shutdown(), junk.shutdown(), otherModel.stop()]);
  }
});

Deno.test("pd: a client that leaves while the prefill server works frees everything on both sides", async () => {
  const model = await tinyModelPath();
  // A peer that holds the request until the client is gone, and reports when its side closed.
  let peerSawAbort!: () => void;
  const aborted = new Promise<void>((r) => (peerSawAbort = r));
  const slow = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) =>
    // Answers only once the caller has gone.
    new Promise<Response>((resolve) =>
      req.signal.addEventListener("abort", () => {
        peerSawAbort();
        resolve(new Response("gone"));
      })
    ));
  try {
    await using decode = await startServer([
      "--model",
      model,
      ...SERVE,
      "--pd-config",
      await pdFile({
        role: "decode",
        peer: `http://127.0.0.1:${slow.addr.port}`,
        minPrefillTokens: 1,
      }),
    ]);
    const ac = new AbortController();
    const req = fetch(`${decode.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: PROMPTS[0], max_tokens: 50, stream: true }),
      signal: ac.signal,
    }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 300));
    ac.abort();
    await req;
    // The decode server cancelled its call to the peer.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      aborted,
      new Promise((_, reject) =>
        timer = setTimeout(() => reject(new Error("the peer never saw the call end")), 10_000)
      ),
    ]);
    clearTimeout(timer);
    // Nothing is counted as a fallback, nothing runs, and the server still serves.
    const s = await pdStats(decode.url);
    assert.equal(s.fallbacks, 0);
    const metrics = await (await fetch(`${decode.url}/metrics`)).text();
    assert.match(metrics, /^hearth_sequences_running 0$/m);
  } finally {
    await slow.shutdown();
  }
});

Deno.test("pd: bad --pd-config files exit 2 with the field at fault", async () => {
  const model = await tinyModelPath();
  const cases: [unknown, RegExp][] = [
    [{ role: "decode" }, /peer: a decode server needs peer/],
    [{ role: "middle", peer: "http://x:1" }, /role: /],
    [{ role: "decode", peer: "ftp://x:1" }, /peer: must be an http\(s\) URL/],
    [{ role: "prefill", colour: "red" }, /colour|Unrecognized key/],
    [{ role: "prefill", token: "" }, /token: must not be empty/],
  ];
  for (const [cfg, why] of cases) {
    const r = await runMain([
      "serve",
      "--model",
      model,
      "--pd-config",
      await pdFile(cfg as Record<string, unknown>),
    ]);
    assert.equal(r.code, 2, JSON.stringify(cfg));
    assert.match(r.stderr, why);
  }
  const notJson = await Deno.makeTempFile();
  await Deno.writeTextFile(notJson, "{role:");
  const nj = await runMain(["serve", "--pd-config", notJson]);
  assert.equal(nj.code, 2);
  assert.match(nj.stderr, /--pd-config .*: not JSON/);
  const open = await runMain([
    "serve",
    "--host",
    "0.0.0.0",
    "--pd-config",
    await pdFile({ role: "prefill" }),
  ]);
  assert.equal(open.code, 2);
  assert.match(open.stderr, /prefill server on a non-loopback --host \(0\.0\.0\.0\) needs a token/);
});
