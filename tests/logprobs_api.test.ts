// Logprobs over HTTP with the official `openai` client: chat `logprobs` + `top_logprobs` (whole
// and streamed), and completions `logprobs` N with `echo` and `max_tokens: 0` on a token-id
// prompt, the way lm-evaluation-harness's `local-completions` scores a continuation.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { testDataDir, tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

Deno.test("logprobs: chat (whole and streamed) and completions echo scoring", async (t) => {
  await using srv = await startServer([
    "--model",
    await tinyModelPath(),
    "--max-seq-len",
    "512",
    "--max-batch",
    "2",
    "--threads",
    "1",
    "--data-dir",
    testDataDir(),
  ]);
  const client = new OpenAI({ apiKey: "x", baseURL: `${srv.url}/v1`, maxRetries: 0 });
  const model = (await client.models.list()).data[0].id;

  await t.step("chat: one entry per token; greedy picks the top alternative", async () => {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Count to three." }],
      max_tokens: 6,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      ignore_eos: true,
    } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    const lp = r.choices[0].logprobs!.content!;
    assert.equal(lp.length, r.usage!.completion_tokens);
    assert.equal(lp.map((e) => e.token).join(""), r.choices[0].message.content);
    for (const e of lp) {
      assert.equal(e.top_logprobs.length, 3);
      assert.ok(e.logprob <= 0);
      assert.equal(e.logprob, e.top_logprobs[0].logprob);
      assert.equal(e.token, e.top_logprobs[0].token);
      assert.deepEqual(e.bytes, [...new TextEncoder().encode(e.token)]);
      for (let i = 1; i < 3; i++) {
        assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
      }
    }
  });

  await t.step("chat stream: logprobs ride on the content chunks", async () => {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Count to three." }],
      max_tokens: 6,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
      stream: true,
      ignore_eos: true,
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let text = "";
    let tokens = "";
    for await (const ch of stream) {
      const c = ch.choices[0];
      if (!c) continue;
      text += c.delta.content ?? "";
      for (const e of c.logprobs?.content ?? []) tokens += e.token;
    }
    assert.equal(tokens, text);
    assert.ok(text.length > 0);
  });

  await t.step("completions: echo + logprobs + max_tokens 0 scores the prompt", async () => {
    const ids = (await (await fetch(`${srv.url}/tokenize`, {
      method: "POST",
      body: JSON.stringify({ prompt: "The capital of France is Paris" }),
    })).json()).tokens as number[];
    const r = await client.completions.create({
      model,
      prompt: ids,
      max_tokens: 0,
      echo: true,
      logprobs: 1,
      temperature: 0,
    });
    const c = r.choices[0];
    const lp = c.logprobs!;
    assert.equal(lp.tokens!.length, ids.length);
    assert.equal(lp.token_logprobs![0], null, "nothing precedes the first token");
    for (const v of lp.token_logprobs!.slice(1)) assert.ok(typeof v === "number" && v <= 0);
    assert.equal(lp.top_logprobs![0], null);
    for (const top of lp.top_logprobs!.slice(1)) assert.equal(Object.keys(top!).length, 1);
    assert.equal(lp.tokens!.join(""), c.text);
    assert.deepEqual(lp.text_offset!.slice(0, 2), [0, lp.tokens![0].length]);
    assert.equal(r.usage!.completion_tokens, 0);
    // The same prompt scored again gives the same numbers (no reuse shortcut changes them).
    const again = await client.completions.create({
      model,
      prompt: ids,
      max_tokens: 0,
      echo: true,
      logprobs: 1,
    });
    assert.deepEqual(again.choices[0].logprobs!.token_logprobs, lp.token_logprobs);
  });
});
