// `/v1/embeddings` in-process, through the official OpenAI SDK: vector shape and norm,
// determinism, batching and order, token-id input, base64 vs float, every bad input as an
// OpenAI-shaped 400. Then the engine under it: the model's own pooling (a make-model --embedding
// GGUF, and a copy patched to last-token pooling) checked against per-token embeddings pooled
// by hand, chunked long inputs, and embeddings interleaved with a running generation.
import assert from "node:assert/strict";
import { decodeOneSequence } from "./support/decode.ts";
import OpenAI from "openai";
import { embeddingsIth, freeContext, newContext } from "../ffi/mod.ts";
import { makeModel } from "../lib/gguf/mod.ts";
import { createEmbedder, POOLING } from "../lib/engine/embeddings.ts";
import { type EngineModel, loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { type GenEvent, isRefusal } from "../lib/engine/scheduler.ts";
import type { ServerState } from "../routes/state.ts";
import { tokenizeText } from "../lib/engine/tokens.ts";
import { createApp } from "../routes/app.ts";
import { inProcessState } from "./support/app.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";

type Served = { url: string; state: ServerState; client: OpenAI };

async function withServer(fn: (s: Served) => Promise<void>): Promise<void> {
  const state = await inProcessState();
  const app = createApp(state);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
  const url = `http://127.0.0.1:${server.addr.port}`;
  try {
    await fn({ url, state, client: new OpenAI({ apiKey: "x", baseURL: `${url}/v1` }) });
  } finally {
    await server.shutdown();
  }
}

/** The fields the tests read, of a success or an error reply. */
type Reply = {
  data: { index: number; embedding: number[] & string }[];
  error: { message: string; type: string; param: string | null; code: string | null };
};

async function post(url: string, body: unknown): Promise<{ status: number; json: Reply }> {
  const r = await fetch(`${url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

function norm(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i] * v[i];
  return Math.sqrt(s);
}

function assertClose(a: ArrayLike<number>, b: ArrayLike<number>, tol = 1e-5, what = "") {
  assert.equal(a.length, b.length, `${what} length`);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  assert.ok(worst <= tol, `${what} differs by ${worst}`);
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

Deno.test("POST /v1/embeddings through the OpenAI SDK", async (t) => {
  await withServer(async ({ url, state, client }) => {
    const model = state.modelId;
    const m = state.engine!.model;

    await t.step("one string: n_embd floats of norm 1, usage counts tokens", async () => {
      const r = await client.embeddings.create({ model, input: "Hello world" });
      assert.equal(r.object, "list");
      assert.equal(r.model, model);
      assert.equal(r.data.length, 1);
      assert.equal(r.data[0].object, "embedding");
      assert.equal(r.data[0].index, 0);
      assert.equal(r.data[0].embedding.length, 64);
      assert.equal(m.info.nEmbd, 64);
      assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5);
      const n = tokenizeText(m, "Hello world", true).length;
      assert.equal(n, 3); // BOS + 2
      assert.deepEqual(r.usage, { prompt_tokens: n, total_tokens: n });
    });

    await t.step("base64 (the SDK default) decodes to exactly the float vectors", async () => {
      const sdk = await client.embeddings.create({ model, input: ["Hello world", "abc"] });
      const float = await post(url, { model, input: ["Hello world", "abc"] });
      assert.equal(float.status, 200);
      const b64 = await post(url, { input: ["Hello world", "abc"], encoding_format: "base64" });
      assert.equal(typeof b64.json.data[0].embedding, "string");
      for (let i = 0; i < 2; i++) {
        assert.deepEqual(sdk.data[i].embedding, float.json.data[i].embedding);
        const bytes = Uint8Array.from(atob(b64.json.data[i].embedding), (c) => c.charCodeAt(0));
        assert.equal(bytes.length, 64 * 4);
        const dv = new DataView(bytes.buffer);
        const decoded = Array.from({ length: 64 }, (_, k) => dv.getFloat32(k * 4, true));
        assert.deepEqual(decoded, float.json.data[i].embedding);
      }
      const explicit = await client.embeddings.create({
        model,
        input: "abc",
        encoding_format: "float",
      });
      assert.deepEqual(explicit.data[0].embedding, float.json.data[1].embedding);
    });

    await t.step("same input, same vector; different inputs, different vectors", async () => {
      const a1 = (await client.embeddings.create({ input: "The cat sat", model })).data[0];
      const a2 = (await client.embeddings.create({ input: "The cat sat", model })).data[0];
      const b = (await client.embeddings.create({ input: "A dog ran off", model })).data[0];
      assertClose(a1.embedding, a2.embedding, 1e-6, "repeat");
      assert.ok(maxDiff(a1.embedding, b.embedding) > 1e-3, "distinct inputs gave one vector");
    });

    await t.step("a batch keeps order and index and equals one-by-one results", async () => {
      const inputs = [
        "first input",
        "the second, a little longer than the first",
        "3",
        "fourth",
        "fifth and last",
        "sixth",
        "seventh",
        "eighth",
        "ninth: more than one embedding batch of eight",
      ];
      const batch = await client.embeddings.create({ model, input: inputs });
      assert.deepEqual(batch.data.map((d) => d.index), inputs.map((_, i) => i));
      const singles = await Promise.all(
        inputs.map((input) => client.embeddings.create({ model, input })),
      );
      let tokens = 0;
      singles.forEach((s, i) => {
        assertClose(batch.data[i].embedding, s.data[0].embedding, 1e-5, `input ${i}`);
        tokens += s.usage.prompt_tokens;
      });
      assert.equal(batch.usage.prompt_tokens, tokens);
      assert.equal(batch.usage.total_tokens, tokens);
    });

    await t.step("token ids give the same vector as the string they spell", async () => {
      const ids = tokenizeText(m, "Hello world", true);
      const text = await client.embeddings.create({ model, input: "Hello world" });
      const one = await client.embeddings.create({ model, input: ids });
      const many = await client.embeddings.create({ model, input: [ids, ids.slice(0, 2)] });
      assertClose(one.data[0].embedding, text.data[0].embedding, 1e-6, "ids");
      assertClose(many.data[0].embedding, text.data[0].embedding, 1e-5, "ids[0]");
      assert.equal(many.data.length, 2);
      assert.equal(one.usage.prompt_tokens, 3);
      assert.equal(many.usage.prompt_tokens, 5);
    });

    await t.step("`dimensions` equal to the model's size and `user` are accepted", async () => {
      const r = await post(url, { input: "x", dimensions: 64, user: "u1", model });
      assert.equal(r.status, 200);
      assert.equal(r.json.data[0].embedding.length, 64);
    });

    await t.step("bad input is a 400 in OpenAI's shape, never a 500", async () => {
      const tooLong = Array.from({ length: m.nCtxSeq + 1 }, () => 1000);
      const cases: [string, unknown, RegExp, string | null][] = [
        ["empty array", { input: [] }, /input/, "input"],
        ["empty string", { input: "" }, /input/, "input"],
        ["empty string in array", { input: ["a", ""] }, /input\[1\]/, "input[1]"],
        ["empty id list in array", { input: [[1, 2], []] }, /input/, "input"],
        ["mixed array", { input: ["a", 1] }, /input/, "input"],
        ["missing input", { model }, /input/, "input"],
        ["non-integer id", { input: [1.5] }, /input/, "input"],
        ["negative id", { input: [-1] }, /out of range/, "input"],
        [
          "id past the vocabulary",
          { input: [[1], [m.nVocab]] },
          /input\[1\].*out of range/,
          "input",
        ],
        [
          "unknown field",
          { input: "a", temperature: 1 },
          /Unrecognized.*temperature/,
          "temperature",
        ],
        [
          "bad encoding",
          { input: "a", encoding_format: "binary" },
          /encoding_format/,
          "encoding_format",
        ],
        ["dimensions", { input: "a", dimensions: 32 }, /dimensions.*64/, "dimensions"],
        ["too long", { input: tooLong }, new RegExp(`${m.nCtxSeq + 1}.*${m.nCtxSeq}`), "input"],
        ["not JSON", "{input:", /JSON/, null],
        ["not an object", [1, 2], /object/i, null],
      ];
      for (const [what, body, message, param] of cases) {
        const r = await post(url, body);
        assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.json)}`);
        assert.equal(r.json.error.type, "invalid_request_error", what);
        assert.match(r.json.error.message, message, what);
        // The param names the field, down to the element when Zod can tell (`input[1]`).
        if (param === null) assert.equal(r.json.error.param, null, what);
        else assert.ok(r.json.error.param?.startsWith(param), `${what}: ${r.json.error.param}`);
        assert.ok("code" in r.json.error, what);
      }
      const wrong = await post(url, { model: "gpt-nope", input: "a" });
      assert.equal(wrong.status, 404);
      assert.equal(wrong.json.error.code, "model_not_found");
      await assert.rejects(
        client.embeddings.create({ model: "gpt-nope", input: "a" }),
        (e: unknown) => e instanceof OpenAI.NotFoundError,
      );
      // The server still answers after all of that.
      assert.equal((await post(url, { input: "still fine" })).status, 200);
    });
  });
});

/** Per-token embeddings of `ids` from a pooling-none context, pooled here by hand. */
async function pooledByHand(m: EngineModel, ids: number[], pooling: number): Promise<number[]> {
  const ctx = newContext(m.llama, m.model, {
    n_ctx: 256,
    n_batch: 256,
    n_ubatch: 256,
    n_seq_max: 1,
    embeddings: true,
    pooling_type: POOLING.none,
    n_threads: 1,
    n_threads_batch: 1,
  });
  try {
    assert.equal(await decodeOneSequence(m.llama, ctx, ids), 0);
    const rows = ids.map((_, i) => embeddingsIth(m.llama, ctx, i, m.info.nEmbd)!);
    const v = pooling === POOLING.mean
      ? rows[0].map((_, d) => rows.reduce((s, r) => s + r[d], 0) / rows.length)
      : Array.from(pooling === POOLING.last ? rows[rows.length - 1] : rows[0]);
    const n = norm(v);
    return Array.from(v, (x) => x / n);
  } finally {
    freeContext(m.llama, ctx);
  }
}

/** Sets `llama.pooling_type` in a GGUF file in place (a u32 right after its key). */
async function patchPooling(path: string, pooling: number): Promise<void> {
  const bytes = await Deno.readFile(path);
  const key = new TextEncoder().encode("llama.pooling_type");
  const at = bytes.findIndex((_, i) => key.every((k, j) => bytes[i + j] === k));
  assert.ok(at > 0, "no llama.pooling_type key");
  const dv = new DataView(bytes.buffer);
  assert.equal(dv.getUint32(at + key.length, true), 4); // GGUF_TYPE_UINT32
  dv.setUint32(at + key.length + 4, pooling, true);
  await Deno.writeFile(path, bytes);
}

Deno.test("a make-model --embedding GGUF: the model's own pooling is used", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-embed-" });
  try {
    const path = `${dir}/tiny-embed.gguf`;
    await makeModel({ preset: "tiny", out: path, embedding: true });
    const lastPath = `${dir}/tiny-embed-last.gguf`;
    await Deno.copyFile(path, lastPath);
    await patchPooling(lastPath, POOLING.last);
    for (const [file, pooling] of [[path, POOLING.mean], [lastPath, POOLING.last]] as const) {
      const m = await loadEngineModel({ path: file, maxBatch: 1, maxSeqLen: 256, threads: 1 });
      const embedder = createEmbedder(inProcessScheduler(m), { threads: 1 });
      try {
        assert.equal(embedder.pooling, pooling, file);
        assert.equal(embedder.dimensions, 64);
        assert.equal(embedder.maxTokens, 256);
        const inputs = ["Embeddings from the model's own pooling", "short"]
          .map((s) => tokenizeText(m, s, true));
        const got = await embedder.embed(inputs);
        for (const [i, ids] of inputs.entries()) {
          assertClose(got[i], await pooledByHand(m, ids, pooling), 1e-5, `pooling ${pooling}`);
        }
      } finally {
        await embedder.close();
        unloadEngineModel(m);
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the tiny model (no pooling type) gets mean pooling; refusals", async () => {
  const engine = (await inProcessState()).engine!;
  const m = engine.model;
  const embedder = createEmbedder(engine, { maxTokens: 64, threads: 1 });
  try {
    assert.equal(embedder.pooling, POOLING.mean);
    const ids = tokenizeText(m, "mean pooling by default", true);
    const [v] = await embedder.embed([ids]);
    assertClose(v, await pooledByHand(m, ids, POOLING.mean), 1e-5, "mean");
    // Exactly maxTokens fits; inputs that do not fit together go in separate batches.
    const full = Array.from({ length: 64 }, (_, i) => 1000 + i);
    const mixed = [full.slice(0, 60), full, ids, full.slice(0, 10)];
    const together = await embedder.embed(mixed);
    for (const [i, one] of mixed.entries()) {
      assertClose(together[i], (await embedder.embed([one]))[0], 1e-5, `mixed ${i}`);
    }
    await assert.rejects(embedder.embed([ids, []]), (e: unknown) => {
      assert.ok(isRefusal(e) && e.kind === "invalid", String(e));
      assert.match(e.message, /input\[1\] is empty/);
      return true;
    });
    await assert.rejects(embedder.embed([new Array(65).fill(1000)]), (e: unknown) => {
      assert.ok(isRefusal(e) && e.kind === "too_long", String(e));
      assert.match(e.message, /65 tokens.*at most 64/);
      return true;
    });
  } finally {
    await embedder.close();
  }
  await assert.rejects(embedder.embed([[1]]), /closed/);
});

Deno.test("long inputs fed in chunks pool like one pass (mean, cls, last)", async () => {
  const engine = (await inProcessState()).engine!;
  const m = engine.model;
  const long = tokenizeText(
    m,
    "A longer input that does not fit in one chunk of sixteen tokens, so the embedder feeds it " +
      "in pieces and combines what llama.cpp pools for each piece.",
    true,
  );
  const short = tokenizeText(m, "and a short one beside it", true);
  assert.ok(long.length > 32);
  for (const pooling of [POOLING.mean, POOLING.cls, POOLING.last]) {
    const whole = createEmbedder(engine, { pooling, maxSeqs: 2, threads: 1 });
    const pieces = createEmbedder(engine, { pooling, maxSeqs: 2, chunkTokens: 16, threads: 1 });
    try {
      const a = await whole.embed([short, long, short]);
      const b = await pieces.embed([short, long, short]);
      a.forEach((v, i) => assertClose(b[i], v, 1e-5, `pooling ${pooling} input ${i}`));
      assertClose(a[0], a[2], 1e-6, "the same input in another batch");
    } finally {
      await whole.close();
      await pieces.close();
    }
  }
});

async function collect(events: AsyncIterable<GenEvent>): Promise<{ text: string; done: boolean }> {
  let text = "";
  let done = false;
  for await (const ev of events) {
    if (ev.type === "text") text += ev.text;
    else if (ev.type === "done") done = true;
    else if (ev.type === "error") throw new Error(ev.message);
  }
  return { text, done };
}

Deno.test("embeddings interleaved with a running generation stream both complete", async () => {
  await withServer(async ({ state, client }) => {
    const engine = state.engine!;
    const req = () => ({
      prompt: Int32Array.from(tokenizeText(engine.model, "Once upon a time", true)),
      maxTokens: 120,
      sampling: { ...defaultSampling(), seed: 7, temperature: 0.8 },
      stop: [],
      ignoreEos: true,
    });
    const solo = await collect(engine.submit(req()));
    const inputs = ["alpha", "beta gamma", "delta epsilon zeta"];
    const before = await client.embeddings.create({ model: state.modelId, input: inputs });

    const it = engine.submit(req())[Symbol.asyncIterator]();
    const first = await it.next(); // the generation is running now
    assert.equal(first.done, false);
    const rest = collect({ [Symbol.asyncIterator]: () => it });
    const steps = engine.stats().decodeSteps;
    const during = await Promise.all(
      Array.from(
        { length: 4 },
        () => client.embeddings.create({ model: state.modelId, input: inputs }),
      ),
    );
    // The embeddings were served between generation steps, not after the stream ended.
    assert.equal(engine.stats().running, 1, "the generation had already finished");
    assert.ok(engine.stats().decodeSteps > steps);
    const gen = await rest;
    assert.ok(gen.done);
    const text = (first.value.type === "text" ? first.value.text : "") + gen.text;
    assert.equal(text, solo.text, "generation changed by interleaved embeddings");
    for (const r of during) {
      r.data.forEach((d, i) =>
        assertClose(d.embedding, before.data[i].embedding, 1e-5, `input ${i}`)
      );
    }
    await engine.idle();
  });
});
