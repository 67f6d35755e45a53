// Tokenizer conformance: every vocabulary in the llama.cpp source bundle that ships test vectors is
// loaded vocab-only and must reproduce the expected ids exactly; `/tokenize` on the tiny model
// (whose vocabulary is the Llama-3 BPE one) must reproduce the llama-bpe vectors; detokenize
// round-trips.
import assert from "node:assert/strict";
import { freeModel, loadModel, modelVocab, openLlama, tokenize } from "../ffi/mod.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { readVocabVectors, vocabFilesWithVectors } from "./support/vocab_vectors.ts";
import { inProcessApp } from "./support/app.ts";

Deno.test("tokenizer conformance: every ggml-vocab-*.gguf with vectors", async (t) => {
  const src = await llamaSourceDir();
  const files = await vocabFilesWithVectors(src);
  assert.ok(files.length >= 15, `expected the bundle's vocab vectors, found ${files.length}`);
  const llama = openLlama();
  for (const file of files) {
    await t.step(file.split("/").pop()!, async () => {
      const cases = await readVocabVectors(file);
      assert.ok(cases.length > 0);
      const model = await loadModel(llama, file, { vocab_only: true });
      try {
        const vocab = modelVocab(llama, model);
        for (const c of cases) {
          // Same call as llama.cpp's test-tokenizer-0: no BOS/EOS added, specials not parsed.
          const got = Array.from(tokenize(llama, vocab, c.input, false, false));
          assert.deepEqual(got, c.expected, `input ${JSON.stringify(c.input)}`);
        }
      } finally {
        freeModel(llama, model);
      }
    });
  }
});

// Hugging Face's clean_up_tokenization, written from its documented replacements.
function cleanUpSpaces(s: string): string {
  return s.replaceAll(" .", ".").replaceAll(" ?", "?").replaceAll(" !", "!")
    .replaceAll(" ,", ",").replaceAll(" ' ", "'").replaceAll(" n't", "n't")
    .replaceAll(" 'm", "'m").replaceAll(" 's", "'s").replaceAll(" 've", "'ve")
    .replaceAll(" 're", "'re");
}

Deno.test("the committed Llama-3 vocab is a byte-exact copy of the bundle's", async () => {
  const src = await llamaSourceDir();
  const hash = async (p: string) =>
    Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", await Deno.readFile(p))))
      .map((b) => b.toString(16).padStart(2, "0")).join("");
  assert.equal(
    await hash(new URL("../lib/gguf/assets/llama-bpe.vocab.gguf", import.meta.url).pathname),
    await hash(`${src}/models/ggml-vocab-llama-bpe.gguf`),
  );
});

Deno.test("/tokenize reproduces the llama-bpe vectors and detokenize round-trips", async () => {
  const src = await llamaSourceDir();
  const cases = await readVocabVectors(`${src}/models/ggml-vocab-llama-bpe.gguf`);
  const app = await inProcessApp();
  for (const c of cases) {
    const r = await app.request("/tokenize", {
      method: "POST",
      body: JSON.stringify({ prompt: c.input, add_special_tokens: false }),
    });
    assert.equal(r.status, 200);
    const body = await r.json();
    assert.deepEqual(body.tokens, c.expected, `input ${JSON.stringify(c.input)}`);
    assert.equal(body.count, c.expected.length);
    const d = await app.request("/detokenize", {
      method: "POST",
      body: JSON.stringify({ tokens: body.tokens }),
    });
    assert.equal(d.status, 200);
    // Byte-level BPE is lossless; the only change is the vocabulary's own
    // clean_up_tokenization_spaces, which llama.cpp applies like Hugging Face does.
    assert.equal((await d.json()).prompt, cleanUpSpaces(c.input));
  }
});

Deno.test("/tokenize adds BOS by default and parses special tokens", async () => {
  const app = await inProcessApp();
  const r = await app.request("/tokenize", {
    method: "POST",
    body: JSON.stringify({ prompt: "Hello world<|eot_id|>", return_token_strs: true }),
  });
  const body = await r.json();
  assert.deepEqual(body.tokens, [128000, 9906, 1917, 128009]);
  assert.deepEqual(body.token_strs, ["<|begin_of_text|>", "Hello", "Ġworld", "<|eot_id|>"]);
  assert.equal(body.max_model_len, 2048);
});

Deno.test("/detokenize skip_special_tokens drops control tokens", async () => {
  const app = await inProcessApp();
  const post = async (body: unknown) =>
    await (await app.request("/detokenize", { method: "POST", body: JSON.stringify(body) }))
      .json();
  const ids = [128000, 9906, 1917, 128009];
  assert.equal((await post({ tokens: ids })).prompt, "<|begin_of_text|>Hello world<|eot_id|>");
  assert.equal((await post({ tokens: ids, skip_special_tokens: true })).prompt, "Hello world");
  // A multi-byte character split over several byte tokens comes back whole.
  const tok = await (await app.request("/tokenize", {
    method: "POST",
    body: JSON.stringify({ prompt: "🦙 naïve", add_special_tokens: false }),
  })).json();
  assert.ok(tok.tokens.length > 2);
  assert.equal((await post({ tokens: tok.tokens })).prompt, "🦙 naïve");
});
