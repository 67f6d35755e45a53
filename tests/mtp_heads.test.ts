// Multi-token-prediction heads through llama.cpp on CPU: the tiny glm4moe MTP model is written
// with one NextN block, an MTP context drafts from it deterministically, and drafts verified in
// one batch on the target give exactly the plain greedy output (the call sequence of MTP.md).
import assert from "node:assert/strict";
import { decodeOneSequence } from "./support/decode.ts";
import {
  type ContextPtr,
  freeContext,
  freeModel,
  type Llama,
  loadModel,
  logitsIth,
  memory,
  memorySeqPosMax,
  memorySeqRm,
  type ModelPtr,
  modelVocab,
  newContext,
  openLlama,
  tokenize,
} from "../ffi/mod.ts";
import {
  draftGreedy,
  embeddingsNextnIth,
  enableTargetNextn,
  freeMtpContext,
  freeMtpModel,
  loadModelWithMtp,
  modelNLayerNextn,
  mtpCatchUp,
  type MtpContext,
  mtpUnsupportedReason,
  newMtpContext,
  setNextnLayerOffset,
} from "../ffi/mtp.ts";
import { readGgufHeader } from "../lib/gguf/mod.ts";
import { mtpModelPath } from "./support/mtp_model.ts";

// One thread: ggml workers spin between graphs, which costs far more than it saves on a busy
// 2-core machine with a model this small.
const CTX = {
  n_ctx: 512,
  n_batch: 64,
  n_ubatch: 64,
  n_seq_max: 1,
  n_threads: 1,
  n_threads_batch: 1,
};
const PROMPT = "The quick brown fox jumps over the lazy dog";

type Rig = {
  llama: Llama;
  model: ModelPtr;
  target: ContextPtr;
  mtp: MtpContext;
  prompt: Int32Array;
};

async function withRig(fn: (r: Rig) => Promise<void>): Promise<void> {
  const llama = openLlama();
  const model = await loadModelWithMtp(llama, await mtpModelPath(), {});
  const target = newContext(llama, model, CTX);
  enableTargetNextn(llama, target);
  const mtp = newMtpContext(llama, model, target, { n_threads: 1, n_threads_batch: 1 });
  const prompt = tokenize(llama, modelVocab(llama, model), PROMPT, true, false);
  try {
    await fn({ llama, model, target, mtp, prompt });
  } finally {
    freeMtpContext(llama, mtp);
    freeContext(llama, target);
    freeMtpModel(llama, model);
  }
}

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/** Decodes `tokens` at `pos0..` on `ctx` (all rows output) and returns each row's argmax. */
async function decodeArgmax(
  llama: Llama,
  ctx: ContextPtr,
  tokens: ArrayLike<number>,
  pos0: number,
  nVocab: number,
  allLogits = true,
): Promise<number[]> {
  const rc = await decodeOneSequence(llama, ctx, tokens, { pos0, allOutputs: allLogits });
  assert.equal(rc, 0, `target decode failed (${rc})`);
  const out: number[] = [];
  for (let i = 0; i < tokens.length; i++) {
    if (allLogits || i === tokens.length - 1) out.push(argmax(logitsIth(llama, ctx, i, nVocab)));
  }
  return out;
}

/** Prefills the prompt on both contexts; returns the first sampled token and its hidden row. */
async function prefill(r: Rig): Promise<{ last: number; h: Float32Array }> {
  const { llama, target, mtp, prompt } = r;
  const [last] = await decodeArgmax(llama, target, prompt, 0, mtp.nVocab, false);
  const h = await mtpCatchUp(llama, mtp, target, 0, prompt, 0, 0, new Float32Array(mtp.nEmbd));
  return { last, h };
}

Deno.test("the tiny MTP model is a glm4moe file with one NextN block", async () => {
  const header = await readGgufHeader(await mtpModelPath());
  const md = (k: string) => header.metadata.get(k)?.value;
  assert.equal(md("general.architecture"), "glm4moe");
  assert.equal(md("glm4moe.block_count"), 2);
  assert.equal(md("glm4moe.nextn_predict_layers"), 1);
  assert.equal(md("glm4moe.leading_dense_block_count"), 1);
  const shapes = new Map(header.tensors.map((t) => [t.name, t.dims.join("x")]));
  assert.equal(shapes.get("blk.1.nextn.eh_proj.weight"), "128x64");
  assert.equal(shapes.get("blk.1.nextn.enorm.weight"), "64");
  assert.equal(shapes.get("blk.1.nextn.hnorm.weight"), "64");
  assert.equal(shapes.get("blk.1.ffn_gate_exps.weight"), "64x128x2");
  assert.equal(shapes.get("blk.1.ffn_down_shexp.weight"), "128x64");
  assert.ok(header.fileSize < 48e6, `${header.fileSize} bytes`);
});

Deno.test("the MTP context drafts valid tokens deterministically and restores its memory", async () => {
  await withRig(async (r) => {
    const { llama, model, mtp, prompt } = r;
    assert.equal(modelNLayerNextn(llama, model), 1);
    assert.equal(mtp.nLayerNextn, 1);
    assert.throws(() => setNextnLayerOffset(llama, mtp, 1), /out of range/);
    const { last, h } = await prefill(r);
    // The catch-up wrote the prompt into the MTP context's own KV cache.
    assert.equal(memorySeqPosMax(llama, mtp.mem, 0), prompt.length - 1);
    const k = 5;
    const a = await draftGreedy(llama, mtp, 0, last, prompt.length, h, k);
    assert.equal(memorySeqPosMax(llama, mtp.mem, 0), prompt.length - 1);
    const b = await draftGreedy(llama, mtp, 0, last, prompt.length, h, k);
    assert.equal(a.length, k);
    assert.deepEqual([...a], [...b]);
    for (const t of a) assert.ok(Number.isInteger(t) && t >= 0 && t < mtp.nVocab, `token ${t}`);
    // The head reads the hidden state: a different one changes some logits (here: the draft or
    // at least the head's own hidden row).
    const hid = await draftGreedy(llama, mtp, 0, last, prompt.length, h, 1);
    const hRow = embeddingsNextnIth(llama, mtp.ctx, 0, mtp.nEmbd);
    await draftGreedy(llama, mtp, 0, last, prompt.length, new Float32Array(mtp.nEmbd), 1);
    const zRow = embeddingsNextnIth(llama, mtp.ctx, 0, mtp.nEmbd);
    assert.equal(hid[0], a[0]);
    assert.notDeepEqual([...hRow], [...zRow]);
  });
});

Deno.test("drafts verified in one target batch reproduce plain greedy decoding", async () => {
  await withRig(async (r) => {
    const { llama, model, target, mtp, prompt } = r;
    let { last, h } = await prefill(r);
    const tmem = memory(llama, target);
    const k = 4;
    const steps = 12;
    let pos = prompt.length;
    let accepted = 0;
    let rejected = 0;
    const out: number[] = [];
    for (let step = 0; step < steps; step++) {
      const drafts = await draftGreedy(llama, mtp, 0, last, pos, h, k);
      // Verify: the last sampled token and the drafts in one batch, every row an output.
      const batch = [last, ...drafts];
      const am = await decodeArgmax(llama, target, batch, pos, mtp.nVocab);
      let n = 0;
      while (n < k && drafts[n] === am[n]) n++;
      accepted += n;
      if (n < k) rejected++;
      // Keep the sampled token and the accepted drafts: mirror them into the MTP context with
      // the target rows from this batch, then drop the rejected tail from the target.
      const kept = batch.slice(0, n + 1);
      h = await mtpCatchUp(llama, mtp, target, 0, kept, pos, 0, h);
      assert.ok(memorySeqRm(llama, tmem, 0, pos + n + 1, -1));
      assert.equal(memorySeqPosMax(llama, tmem, 0), pos + n);
      assert.equal(memorySeqPosMax(llama, mtp.mem, 0), pos + n);
      out.push(...kept);
      pos += n + 1;
      last = am[n];
    }
    // The head copies the trunk up to a little noise: most drafts are right, some are not.
    assert.ok(accepted >= steps, `accepted ${accepted} of ${steps * k}`);
    assert.ok(rejected >= 1, "expected at least one rejected draft");

    // Plain greedy decoding on a fresh context gives the same tokens.
    const plain = newContext(llama, model, CTX);
    try {
      const ref: number[] = [];
      let [t] = await decodeArgmax(llama, plain, prompt, 0, mtp.nVocab, false);
      while (ref.length < out.length) {
        ref.push(t);
        [t] = await decodeArgmax(llama, plain, [t], prompt.length + ref.length - 1, mtp.nVocab);
      }
      assert.deepEqual(out, ref);
    } finally {
      freeContext(llama, plain);
    }
  });
});

Deno.test("an MTP context is refused, not aborted, for a model loaded without its heads", async () => {
  const llama = openLlama();
  const model = await loadModel(llama, await mtpModelPath(), {});
  try {
    assert.equal(modelNLayerNextn(llama, model), 1);
    assert.match(mtpUnsupportedReason(llama, model) ?? "", /not loaded with its NextN tensors/);
    const target = newContext(llama, model, CTX);
    try {
      assert.throws(() => newMtpContext(llama, model, target, {}), /loadModelWithMtp/);
    } finally {
      freeContext(llama, target);
    }
  } finally {
    freeModel(llama, model);
  }
});
