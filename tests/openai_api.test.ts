// The OpenAI surface with the official `openai` package as the client, plus the operational
// rules around it: API key, metrics, chat logging, the bounded queue, disconnects under load,
// slow SSE clients, and UTF-8 split across tokens.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { freeModel, loadModel, modelVocab, openLlama, tokenize, tokenToPiece } from "../ffi/mod.ts";
import { endText, newTextStream, pushPiece } from "../lib/engine/text_stream.ts";
import { sseResponse } from "../routes/sse.ts";
import { testDataDir, tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const modelPath = await tinyModelPath();
const KEY = "sk-test-123";

function baseArgs(extra: string[] = [], dataDir = testDataDir()): string[] {
  return [
    "--model",
    modelPath,
    "--max-seq-len",
    "512",
    "--threads",
    "1",
    "--data-dir",
    dataDir,
    ...extra,
  ];
}

async function metricValue(url: string, name: string, key = KEY): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { headers: { "x-api-key": key } })).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{"));
  assert.ok(line, `${name} in /metrics`);
  return Number(line.split(" ").at(-1));
}

Deno.test("official openai client: chat, chat stream, completions, completions stream", async () => {
  const tmpl = await Deno.makeTempFile({ suffix: ".jinja" });
  // A template that makes reasoning_effort visible in the prompt length.
  await Deno.writeTextFile(
    tmpl,
    "{{ bos_token }}{% if reasoning_effort == 'high' %}{{ 'Think very carefully, step by step, and check every step twice before answering. Think very carefully, step by step, and check every step twice before answering.' }}" +
      "{% endif %}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n" +
      "{{ m.content }}<|eot_id|>{% endfor %}" +
      "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
  );
  const srv = await startServer(
    baseArgs(["--max-batch", "4", "--api-key", KEY, "--chat-template", tmpl]),
  );
  try {
    const client = new OpenAI({ apiKey: KEY, baseURL: `${srv.url}/v1`, maxRetries: 0 });
    const models = await client.models.list();
    const model = models.data[0].id;

    const chat = await client.chat.completions.create({
      model,
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi there" }],
      max_tokens: 8,
      seed: 4,
    });
    assert.equal(chat.object, "chat.completion");
    assert.match(chat.id, /^chatcmpl-/);
    assert.equal(chat.choices[0].message.role, "assistant");
    assert.equal(typeof chat.choices[0].message.content, "string");
    assert.equal(chat.choices[0].finish_reason, "length");
    assert.equal(chat.usage?.completion_tokens, 8);

    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi there" }],
      max_completion_tokens: 6,
      seed: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null = null;
    let usage;
    let first = true;
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      if (!ch.choices.length) continue;
      if (first) assert.equal(ch.choices[0].delta.role, "assistant");
      first = false;
      text += ch.choices[0].delta.content ?? "";
      finish = ch.choices[0].finish_reason ?? finish;
    }
    assert.equal(finish, "length");
    assert.equal(usage?.completion_tokens, 6);
    const plain = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi there" }],
      max_tokens: 6,
      seed: 4,
    });
    assert.equal(text, plain.choices[0].message.content);

    const low = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 1,
      reasoning_effort: "low",
    });
    const high = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 1,
      reasoning_effort: "high",
    });
    assert.ok(high.usage!.prompt_tokens > low.usage!.prompt_tokens + 20, "effort reaches template");

    const comp = await client.completions.create({ model, prompt: "Hello", max_tokens: 5 });
    assert.equal(comp.object, "text_completion");
    assert.equal(comp.usage?.completion_tokens, 5);
    const cstream = await client.completions.create({
      model,
      prompt: "Hello",
      max_tokens: 5,
      stream: true,
    });
    let n = 0;
    for await (const ch of cstream) if (ch.choices[0]?.text) n++;
    assert.ok(n > 0);

    await assert.rejects(
      () => client.chat.completions.create({ model, messages: [], max_tokens: 2 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /messages/.test(e.message),
    );
    await assert.rejects(
      () =>
        client.chat.completions.create({
          model,
          messages: [{ role: "user", content: "x" }],
          tools: [{ type: "function", function: { name: "bad name!", parameters: {} } }],
        }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /tools/.test(e.message),
    );
    await assert.rejects(
      () =>
        client.chat.completions.create({
          model: "nope",
          messages: [{ role: "user", content: "x" }],
        }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
  } finally {
    await srv.stop();
    await Deno.remove(tmpl);
  }
});

Deno.test("api key, metrics, chat logger", async () => {
  const dataDir = await Deno.makeTempDir();
  const srv = await startServer(
    baseArgs(["--max-batch", "2", "--api-key", KEY], dataDir),
    { env: { HEARTH_CHAT_LOGGER: "1" } },
  );
  try {
    // Open routes stay open.
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
    assert.equal((await (await fetch(`${srv.url}/v1/models`)).json()).object, "list");
    const body = JSON.stringify({ prompt: "Hi", max_tokens: 2 });
    const post = (headers: Record<string, string>) =>
      fetch(`${srv.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body,
      });
    const none = await post({});
    assert.equal(none.status, 401);
    assert.equal((await none.json()).error.type, "authentication_error");
    const wrong = await post({ authorization: "Bearer nope" });
    assert.equal(wrong.status, 401);
    await wrong.body?.cancel();
    assert.equal((await post({ authorization: `Bearer ${KEY}` })).status, 200);
    // On the Anthropic routes the 401 comes in Anthropic's shape.
    const msg = await fetch(`${srv.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "m",
        max_tokens: 2,
        messages: [{ role: "user", content: "x" }],
      }),
    });
    assert.equal(msg.status, 401);
    assert.deepEqual(await msg.json(), {
      type: "error",
      error: { type: "authentication_error", message: "Missing API key." },
    });
    assert.equal((await post({ "x-api-key": KEY })).status, 200);

    const metrics = await (await fetch(`${srv.url}/metrics`, { headers: { "x-api-key": KEY } }))
      .text();
    assert.match(metrics, /# TYPE hearth_requests_total counter/);
    assert.match(metrics, /hearth_requests_total\{route="\/v1\/completions",status="200"\} 2/);
    assert.match(metrics, /hearth_requests_total\{route="\/v1\/completions",status="401"\} 2/);
    assert.ok((await metricValue(srv.url, "hearth_generated_tokens_total")) >= 4);
    assert.ok((await metricValue(srv.url, "hearth_prompt_tokens_total")) >= 1);
    assert.equal(await metricValue(srv.url, "hearth_sequences_running"), 0);
    assert.equal(await metricValue(srv.url, "hearth_queue_length"), 0);
    const kv = await metricValue(srv.url, "hearth_kv_cache_usage_ratio");
    assert.ok(kv > 0 && kv < 1, `kv usage ${kv}`);
    assert.match(metrics, /hearth_tokens_per_second /);

    const chat = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ messages: [{ role: "user", content: "log me" }], max_tokens: 3 }),
    });
    assert.equal(chat.status, 200);
    const reply = await chat.json();
    await srv.stop();
    const logs = [...Deno.readDirSync(`${dataDir}/logs`)];
    assert.equal(logs.length, 1);
    assert.match(logs[0].name, /^chat-\d{4}-\d\d-\d\d\.jsonl$/);
    const lines = (await Deno.readTextFile(`${dataDir}/logs/${logs[0].name}`)).trim().split("\n")
      .map((l) => JSON.parse(l));
    const entry = lines.find((l) => l.route === "/v1/chat/completions");
    assert.ok(entry, "chat request logged");
    assert.equal(entry.request.messages[0].content, "log me");
    assert.equal(entry.response.choices[0].message.content, reply.choices[0].message.content);
    assert.ok(lines.filter((l) => l.route === "/v1/completions").length >= 2);
  } finally {
    await srv.stop();
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("random disconnects under load leave no running sequence; full queue is a 503", async () => {
  const srv = await startServer(baseArgs(["--max-batch", "3", "--max-queue", "4"]));
  try {
    const rnd = (() => {
      let s = 42;
      return () => (s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    })();
    const one = async (i: number) => {
      const ac = new AbortController();
      const r = await fetch(`${srv.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          prompt: `Story ${i}:`,
          max_tokens: 60,
          ignore_eos: true,
          stream: true,
          seed: i,
        }),
        signal: ac.signal,
      });
      if (r.status === 503) {
        assert.equal(r.headers.get("retry-after"), "1");
        await r.body?.cancel();
        return "busy";
      }
      assert.equal(r.status, 200);
      const reader = r.body!.getReader();
      const stopAfter = Math.floor(rnd() * 12);
      for (let k = 0;; k++) {
        if (stopAfter < 8 && k === stopAfter) {
          ac.abort();
          return "aborted";
        }
        const { done } = await reader.read();
        if (done) return "done";
      }
    };
    const results = await Promise.all(
      Array.from(
        { length: 12 },
        (_, i) => one(i).catch((e) => (e.name === "AbortError" ? "aborted" : Promise.reject(e))),
      ),
    );
    assert.ok(results.includes("aborted"), results.join());
    assert.ok(results.includes("busy"), `some request found the queue full: ${results.join()}`);
    // Give the engine a step to notice the last disconnects.
    for (let t = 0; t < 50; t++) {
      if ((await metricValue(srv.url, "hearth_sequences_running", "")) === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(await metricValue(srv.url, "hearth_sequences_running", ""), 0);
    assert.equal(await metricValue(srv.url, "hearth_queue_length", ""), 0);
    const ok = await fetch(`${srv.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "still alive?", max_tokens: 3 }),
    });
    assert.equal(ok.status, 200);
    assert.equal((await ok.json()).usage.completion_tokens, 3);
  } finally {
    await srv.stop();
  }
});

Deno.test("a client that never reads is dropped past the SSE buffer limit", async () => {
  let cancelled = false;
  let produced = 0;
  async function* forever() {
    while (true) {
      produced++;
      yield JSON.stringify({ text: "x".repeat(100) });
      await new Promise((r) => setTimeout(r, 0));
    }
  }
  const res = sseResponse(forever(), { bufferLimit: 4096, onCancel: () => (cancelled = true) });
  for (let i = 0; i < 100 && !cancelled; i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cancelled, "producer cancelled");
  assert.ok(produced < 100, `stopped producing after ~4 KiB, produced ${produced}`);
  await assert.rejects(() => res.text(), /fell too far behind/);
});

Deno.test("UTF-8 split across tokens is held until whole, stop strings across pieces", async () => {
  const llama = openLlama();
  const model = await loadModel(llama, modelPath, { vocab_only: true });
  try {
    const vocab = modelVocab(llama, model);
    const text = "naïve 🦙 café — 漢字 done";
    const ids = Array.from(tokenize(llama, vocab, text, false, false));
    const pieces = ids.map((t) => tokenToPiece(llama, vocab, t, false));
    // The emoji and CJK characters really are split over several byte tokens.
    assert.ok(
      pieces.some((p) => new TextDecoder("utf-8", { fatal: false }).decode(p).includes("\ufffd")),
    );
    const t = newTextStream([]);
    const emitted: string[] = [];
    for (const p of pieces) emitted.push(pushPiece(t, p).emit);
    emitted.push(endText(t));
    assert.equal(emitted.join(""), text);
    for (const e of emitted) {
      assert.ok(!e.includes("\ufffd"), `no broken character in ${JSON.stringify(e)}`);
    }

    const s = newTextStream(["漢字 do"]);
    let out = "";
    let stopped = false;
    for (const p of pieces) {
      const r = pushPiece(s, p);
      out += r.emit;
      if (r.stopped) {
        stopped = true;
        break;
      }
    }
    assert.ok(stopped);
    assert.equal(out, "naïve 🦙 café — ");
  } finally {
    freeModel(llama, model);
  }
});

Deno.test("--kvcache-dtype reaches llama.cpp's type_k/type_v", async () => {
  const srv = await startServer(baseArgs(["--max-batch", "2", "--kvcache-dtype", "bf16"]));
  try {
    const r = await fetch(`${srv.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Hello", max_tokens: 4, seed: 1 }),
    });
    assert.equal(r.status, 200);
    assert.equal((await r.json()).usage.completion_tokens, 4);
  } finally {
    await srv.stop();
  }
  // q8_0 blocks are 32 wide; the tiny model's heads are 16: llama.cpp refuses, and so do we.
  await assert.rejects(
    () => startServer(baseArgs(["--max-batch", "2", "--kvcache-dtype", "q8_0"])),
    /could not load the model: .*q8_0.*n_embd_head_k=16/,
  );
});
