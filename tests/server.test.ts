// End to end against a real `hearth serve` process on the tiny model: health, models, tokenize,
// detokenize, completions (plain and streamed), sampling fields, and every bad input answered
// with a 4xx in OpenAI's error shape.
import assert from "node:assert/strict";
import { startServer } from "./support/server.ts";
import { tinyModelPath } from "./support/models.ts";
import { testDataDir } from "./support/models.ts";

const modelPath = await tinyModelPath();
const MAX_SEQ = 256;

async function withServer(fn: (url: string) => Promise<void>): Promise<void> {
  const srv = await startServer([
    "--model",
    modelPath,
    "--max-batch",
    "4",
    "--max-seq-len",
    String(MAX_SEQ),
    "--threads",
    "1",
    "--data-dir",
    testDataDir(),
  ]);
  try {
    await fn(srv.url);
  } finally {
    await srv.stop();
  }
}

async function post(url: string, path: string, body: unknown, raw = false) {
  const r = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: raw ? (body as string) : JSON.stringify(body),
  });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, json, text, headers: r.headers };
}

/** Reads an SSE body into its `data:` payloads. */
async function sse(url: string, body: unknown): Promise<string[]> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type") ?? "", /text\/event-stream/);
  const text = await r.text();
  return text.split("\n\n").filter((b) => b.trim()).map((b) => {
    assert.ok(b.startsWith("data: "), `every message is data-only: ${b}`);
    return b.slice(6);
  });
}

function assertOpenAIError(res: { status: number; json: unknown }, status: number, re: RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.json));
  const e = (res.json as { error: Record<string, unknown> }).error;
  assert.ok(e, "error object");
  assert.equal(typeof e.message, "string");
  assert.equal(typeof e.type, "string");
  assert.ok("param" in e && "code" in e, "param and code keys present");
  assert.match(e.message as string, re);
}

Deno.test("server: health, models, tokenize, completions", async (t) => {
  await withServer(async (url) => {
    await t.step("GET /health", async () => {
      const r = await fetch(`${url}/health`);
      assert.equal(r.status, 200);
      assert.deepEqual(await r.json(), { status: "ok" });
    });

    await t.step("GET /v1/models", async () => {
      const r = await (await fetch(`${url}/v1/models`)).json();
      assert.equal(r.object, "list");
      assert.equal(r.data.length, 1);
      const m = r.data[0];
      assert.equal(m.id, modelPath.split("/").pop()!.replace(/\.gguf$/, ""));
      assert.equal(m.object, "model");
      assert.equal(m.owned_by, "hearth");
      assert.equal(typeof m.created, "number");
      assert.equal(m.max_model_len, MAX_SEQ);
    });

    await t.step("POST /tokenize and /detokenize", async () => {
      const tok = await post(url, "/tokenize", { prompt: "Hello world" });
      assert.deepEqual(tok.json, { tokens: [128000, 9906, 1917], count: 3, max_model_len: 256 });
      const chat = await post(url, "/tokenize", {
        messages: [{ role: "user", content: "Hi" }],
      });
      // <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|> + assistant header
      assert.deepEqual(
        chat.json.tokens,
        [128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271],
      );
      const det = await post(url, "/detokenize", { tokens: [9906, 1917] });
      assert.deepEqual(det.json, { prompt: "Hello world" });
    });

    await t.step("completion: shape, usage, max_tokens, seed determinism", async () => {
      const body = { prompt: "The capital of France is", max_tokens: 12, seed: 7 };
      const a = await post(url, "/v1/completions", body);
      assert.equal(a.status, 200);
      assert.match(a.json.id, /^cmpl-/);
      assert.equal(a.json.object, "text_completion");
      assert.equal(a.json.choices.length, 1);
      const c = a.json.choices[0];
      assert.equal(c.index, 0);
      assert.equal(c.finish_reason, "length");
      assert.equal(c.logprobs, null);
      assert.equal(a.json.usage.prompt_tokens, 6);
      assert.equal(a.json.usage.completion_tokens, 12);
      assert.equal(a.json.usage.total_tokens, 18);
      const b = await post(url, "/v1/completions", body);
      assert.equal(b.json.choices[0].text, c.text, "same seed, same text");
      const d = await post(url, "/v1/completions", { ...body, seed: 8 });
      assert.notEqual(d.json.choices[0].text, c.text, "another seed, another text");
    });

    await t.step("temperature 0 is greedy and equals top_k 1", async () => {
      const base = { prompt: "Once upon a time", max_tokens: 10 };
      const g1 = await post(url, "/v1/completions", { ...base, temperature: 0, seed: 1 });
      const g2 = await post(url, "/v1/completions", { ...base, temperature: 0, seed: 2 });
      const k1 = await post(url, "/v1/completions", { ...base, top_k: 1, seed: 3 });
      assert.equal(g1.json.choices[0].text, g2.json.choices[0].text);
      assert.equal(g1.json.choices[0].text, k1.json.choices[0].text);
    });

    await t.step(
      "top_p, min_p and penalties are accepted and change nothing for greedy",
      async () => {
        const r = await post(url, "/v1/completions", {
          prompt: "Hi",
          max_tokens: 4,
          top_p: 0.9,
          min_p: 0.05,
          top_k: 40,
          temperature: 0.8,
          seed: 3,
          repetition_penalty: 1.1,
          presence_penalty: 0.5,
          frequency_penalty: 0.5,
        });
        assert.equal(r.status, 200);
        assert.equal(r.json.usage.completion_tokens, 4);
      },
    );

    await t.step("streaming equals the plain response and ends with [DONE]", async () => {
      const body = { prompt: "Tell me a story", max_tokens: 16, seed: 11 };
      const plain = await post(url, "/v1/completions", body);
      const msgs = await sse(url, {
        ...body,
        stream: true,
        stream_options: { include_usage: true },
      });
      assert.equal(msgs.at(-1), "[DONE]");
      const chunks = msgs.slice(0, -1).map((m) => JSON.parse(m));
      const usage = chunks.at(-1);
      assert.deepEqual(usage.choices, []);
      const { prompt_tokens_details: cachedPlain, ...plainCounts } = plain.json.usage;
      const { prompt_tokens_details: cachedStream, ...streamCounts } = usage.usage;
      assert.deepEqual(streamCounts, plainCounts);
      assert.ok(cachedPlain.cached_tokens <= 1, "at most the shared BOS");
      // The same prompt again reuses the first request's KV (all but the last prompt token).
      assert.equal(cachedStream.cached_tokens, plainCounts.prompt_tokens - 1);
      const content = chunks.slice(0, -1);
      assert.equal(content.at(-1).choices[0].finish_reason, "length");
      for (const ch of content.slice(0, -1)) assert.equal(ch.choices[0].finish_reason, null);
      for (const ch of content) {
        assert.equal(ch.object, "text_completion");
        assert.equal(ch.id, content[0].id);
      }
      assert.equal(content.map((ch) => ch.choices[0].text).join(""), plain.json.choices[0].text);
      const noUsage = await sse(url, { ...body, stream: true });
      assert.ok(!noUsage.some((m) => m.includes('"usage"')));
    });

    await t.step("stop strings cut the output, in plain and streamed responses", async () => {
      const body = { prompt: "List:", max_tokens: 24, seed: 5 };
      const full = (await post(url, "/v1/completions", body)).json.choices[0].text as string;
      assert.ok(full.length > 8, `need some output, got ${JSON.stringify(full)}`);
      // A stop string from the middle of the known output, long enough to span tokens.
      const start = Math.floor(full.length / 2);
      const stop = full.slice(start, start + 4);
      const want = full.slice(0, full.indexOf(stop));
      const cut = await post(url, "/v1/completions", { ...body, stop: [stop, "zzzqqq"] });
      assert.equal(cut.json.choices[0].text, want);
      assert.equal(cut.json.choices[0].finish_reason, "stop");
      const msgs = await sse(url, { ...body, stop, stream: true });
      const chunks = msgs.slice(0, -1).map((m) => JSON.parse(m));
      const text = chunks.map((c) => c.choices[0].text).join("");
      assert.equal(text, want);
      assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
      for (const c of chunks) assert.ok(!c.choices[0].text.includes(stop));
    });

    await t.step("EOS ends generation unless ignore_eos", async () => {
      const forceEot = { prompt: "Hi", max_tokens: 6, seed: 1, logit_bias: { "128009": 100 } };
      const stopped = await post(url, "/v1/completions", forceEot);
      assert.equal(stopped.json.choices[0].finish_reason, "stop");
      assert.equal(stopped.json.usage.completion_tokens, 0);
      const ignored = await post(url, "/v1/completions", { ...forceEot, ignore_eos: true });
      assert.equal(ignored.json.choices[0].finish_reason, "length");
      assert.equal(ignored.json.usage.completion_tokens, 6);
    });

    await t.step("prompt forms: token ids, several prompts, n, echo", async () => {
      const ids = await post(url, "/v1/completions", {
        prompt: [128000, 9906],
        max_tokens: 3,
        temperature: 0,
      });
      const str = await post(url, "/v1/completions", {
        prompt: "Hello",
        max_tokens: 3,
        temperature: 0,
      });
      assert.equal(ids.json.choices[0].text, str.json.choices[0].text);
      const many = await post(url, "/v1/completions", {
        prompt: ["Hello", "Goodbye"],
        max_tokens: 3,
        n: 2,
        seed: 1,
      });
      assert.deepEqual(many.json.choices.map((c: { index: number }) => c.index), [0, 1, 2, 3]);
      const count = async (p: string) => (await post(url, "/tokenize", { prompt: p })).json.count;
      assert.equal(
        many.json.usage.prompt_tokens,
        (await count("Hello")) + (await count("Goodbye")),
      );
      assert.equal(many.json.usage.completion_tokens, 12);
      const echo = await post(url, "/v1/completions", {
        prompt: "Hello",
        max_tokens: 2,
        echo: true,
        temperature: 0,
      });
      assert.ok(echo.json.choices[0].text.startsWith("<|begin_of_text|>Hello"));
    });

    await t.step("bad inputs are 4xx in OpenAI's shape", async () => {
      const c = "/v1/completions";
      assertOpenAIError(await post(url, c, "{not json", true), 400, /not valid JSON/);
      assertOpenAIError(await post(url, c, "", true), 400, /empty/);
      assertOpenAIError(await post(url, c, {}), 400, /prompt/);
      assertOpenAIError(await post(url, c, { prompt: 3 }), 400, /prompt/);
      assertOpenAIError(await post(url, c, { prompt: "x", max_tokens: "5" }), 400, /max_tokens/);
      assertOpenAIError(await post(url, c, { prompt: "x", max_tokens: -1 }), 400, /max_tokens/);
      assertOpenAIError(await post(url, c, { prompt: "x", max_tokens: 1.5 }), 400, /max_tokens/);
      assertOpenAIError(await post(url, c, { prompt: "x", temperature: 3 }), 400, /temperature/);
      assertOpenAIError(await post(url, c, { prompt: "x", top_p: 0 }), 400, /top_p/);
      assertOpenAIError(await post(url, c, { prompt: "x", top_k: -5 }), 400, /top_k/);
      assertOpenAIError(await post(url, c, { prompt: "x", min_p: 2 }), 400, /min_p/);
      assertOpenAIError(await post(url, c, { prompt: "x", seed: "a" }), 400, /seed/);
      assertOpenAIError(await post(url, c, { prompt: "x", stop: 5 }), 400, /stop/);
      assertOpenAIError(await post(url, c, { prompt: "x", ignore_eos: "yes" }), 400, /ignore_eos/);
      assertOpenAIError(await post(url, c, { prompt: "x", logprobs: 21 }), 400, /logprobs/);
      // An unknown field is accepted and named, never refused (docs/ARCHITECTURE.md, "Inference API and the field policy").
      const unknown = await fetch(`${url}${c}`, {
        method: "POST",
        body: JSON.stringify({ prompt: "x", max_tokens: 1, wat: 1 }),
      });
      assert.equal(unknown.status, 200);
      assert.equal(unknown.headers.get("x-hearth-ignored-fields"), "wat");
      await unknown.body?.cancel();
      assertOpenAIError(await post(url, c, { prompt: [1, 99999999] }), 400, /99999999.*range/);
      assertOpenAIError(await post(url, c, { prompt: [-1] }), 400, /-1.*range/);
      assertOpenAIError(await post(url, c, { prompt: "x", model: "gpt-9" }), 404, /gpt-9/);
      assertOpenAIError(
        await post(url, c, { prompt: "x", stream_options: { include_usage: true } }),
        400,
        /stream_options/,
      );
      const long = "word ".repeat(400);
      const n = (await post(url, "/tokenize", { prompt: long })).json.count;
      const tooLong = await post(url, c, { prompt: long });
      assertOpenAIError(tooLong, 400, new RegExp(`${n} tokens.*256`));
      assertOpenAIError(await post(url, "/tokenize", { prompt: 1 }), 400, /prompt/);
      assertOpenAIError(
        await post(url, "/tokenize", { prompt: "a", messages: [{ role: "user", content: "b" }] }),
        400,
        /exactly one/,
      );
      assertOpenAIError(await post(url, "/detokenize", { tokens: [1.5] }), 400, /tokens/);
      assertOpenAIError(await post(url, "/detokenize", { tokens: [128256] }), 400, /128256/);
      assertOpenAIError(await post(url, "/detokenize", { tokens: "abc" }), 400, /tokens/);
      const nf = await fetch(`${url}/v1/nothing`);
      assertOpenAIError({ status: nf.status, json: await nf.json() }, 404, /no route/);
      // The server is still fine after all of that.
      const ok = await post(url, c, { prompt: "x", max_tokens: 1 });
      assert.equal(ok.status, 200);
    });
  });
});
