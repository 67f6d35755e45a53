// The tiny sliding-window (gemma2) and hybrid (lfm2) test models from make-model, loaded by the
// real llama.cpp library, and what llama.cpp lets a prompt cache do with their memory: where
// `llama_memory_seq_rm(mem, seq, k, -1)` succeeds, where the result is then exact (the rest
// decoded again gives bit-for-bit the logits of a fresh computation with the same batches), what
// `llama_state_seq_get_data`/`set_data` carry into another sequence, and what
// `llama_memory_seq_pos_min` reports. The facts the prompt cache's checkpoints are designed on
// (issue 27).
import assert from "node:assert/strict";
import {
  type ContextPtr,
  contextRsSeq,
  decode,
  freeContext,
  freeModel,
  type Llama,
  loadModel,
  logitsIth,
  memory,
  memorySeqPosMax,
  memorySeqPosMin,
  memorySeqRm,
  modelMemoryKind,
  type ModelPtr,
  modelVocab,
  newBatch,
  newContext,
  openLlama,
  type Pointer,
  seqStateGet,
  seqStateGetExt,
  seqStateSet,
  setBatchSize,
  STATE_SEQ_PARTIAL_ONLY,
  tokenize,
  vocabInfo,
} from "../ffi/mod.ts";
import { DEFAULT_SLIDING_WINDOW, GgufType, makeModel, readGgufHeader } from "../lib/gguf/mod.ts";
import { loadEngineModel, unloadEngineModel } from "../lib/engine/model.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { parseMakeModelArgs } from "../lib/cli/make_model_args.ts";
import { cachedTinyModel } from "./support/models.ts";

const SOURCES = ["arch_variants.ts", "presets.ts"];
function variantPath(arch: "gemma2" | "lfm2"): Promise<string> {
  return cachedTinyModel(arch, SOURCES, { arch });
}

// Logits of the same text decoded in other batches, or with cells in other slots, differ by up
// to ~0.003 on these F32 models (float sums in another order); a trim that lost context is off by
// 0.03 and more. Q8_0 weights amplify the former to ~0.15, hence F32.
const NOISE = 0.01;
const WRONG = 0.015;

const N_SWA = DEFAULT_SLIDING_WINDOW;
// Small ubatches so that, without the full-size SWA cache, the SWA cache is llama.cpp's minimum
// (256 cells: n_swa + n_ubatch padded to 256) and a 400-token sequence overflows it.
const N_UBATCH = 64;
const SWA_CELLS = 256;

type Rig = { llama: Llama; model: ModelPtr; nVocab: number; text: Int32Array };

async function withModel(arch: "gemma2" | "lfm2", fn: (r: Rig) => Promise<void>): Promise<void> {
  const llama = openLlama();
  const model = await loadModel(llama, await variantPath(arch), {});
  try {
    const vocab = modelVocab(llama, model);
    const text = tokenize(
      llama,
      vocab,
      "The quick brown fox jumps over the lazy dog. ".repeat(60),
      true,
      false,
    );
    await fn({ llama, model, nVocab: vocabInfo(llama, vocab).nTokens, text });
  } finally {
    freeModel(llama, model);
  }
}

function context(r: Rig, o: { swaFull?: boolean; rsSeq?: number } = {}): ContextPtr {
  // One thread: ggml workers spin between graphs, which costs more than it saves here.
  return newContext(r.llama, r.model, {
    n_ctx: 2048,
    n_batch: 512,
    n_ubatch: N_UBATCH,
    n_seq_max: 2,
    n_threads: 1,
    n_threads_batch: 1,
    swa_full: o.swaFull ?? true,
    n_rs_seq: o.rsSeq ?? 0,
  });
}

/** Decodes `text[from, to)` into `seq` at its own positions; the last row's logits (a copy). */
async function feed(
  r: Rig,
  ctx: ContextPtr,
  seq: number,
  from: number,
  to: number,
): Promise<Float32Array> {
  const b = newBatch(to - from);
  for (let i = 0; i < to - from; i++) {
    b.token[i] = r.text[from + i];
    b.pos[i] = from + i;
    b.seqId[i] = seq;
    b.logits[i] = i === to - from - 1 ? 1 : 0;
  }
  setBatchSize(b, to - from);
  const rc = await decode(r.llama, ctx, b);
  assert.equal(rc, 0, `llama_decode of [${from}, ${to}) returned ${rc}`);
  return new Float32Array(logitsIth(r.llama, ctx, to - from - 1, r.nVocab));
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** The logits after `text[0, n)` decoded in fresh context as `[0, k)` then `[k, n)`. */
async function fresh(r: Rig, k: number, n: number): Promise<Float32Array> {
  const ctx = context(r);
  try {
    if (k > 0) await feed(r, ctx, 0, 0, k);
    return await feed(r, ctx, 0, k, n);
  } finally {
    freeContext(r.llama, ctx);
  }
}

type Trim = { removed: boolean; exact?: boolean; diff?: number; posMin: number; posMax: number };

/**
 * Trims `seq` to its first `k` positions, decodes `text[k, n)` again and compares the last logits
 * with `want`. `posMin`/`posMax` are read before the trim.
 */
async function trimAndRedo(
  r: Rig,
  ctx: ContextPtr,
  seq: number,
  k: number,
  n: number,
  want: Float32Array,
): Promise<Trim> {
  const mem: Pointer = memory(r.llama, ctx);
  const posMin = memorySeqPosMin(r.llama, mem, seq);
  const posMax = memorySeqPosMax(r.llama, mem, seq);
  const removed = memorySeqRm(r.llama, mem, seq, k, -1);
  if (!removed) return { removed, posMin, posMax };
  const diff = maxDiff(await feed(r, ctx, seq, k, n), want);
  if (Deno.env.get("HEARTH_TRIM_FACTS")) {
    console.log(`  trim to ${k}: pos [${posMin}, ${posMax}], off by ${diff}`);
  }
  assert.ok(diff < NOISE || diff > WRONG, `trim to ${k}: off by ${diff}, between noise and error`);
  return { removed, exact: diff < NOISE, diff, posMin, posMax };
}

/** A sequence `text[0, n)` decoded as `[0, split)`, `[split, n)`, trimmed to `k` and redone. */
async function trimCase(
  r: Rig,
  o: { swaFull?: boolean; rsSeq?: number },
  n: number,
  split: number,
  k: number,
): Promise<Trim> {
  const want = await fresh(r, k, n);
  const ctx = context(r, o);
  try {
    if (split > 0) await feed(r, ctx, 0, 0, split);
    await feed(r, ctx, 0, split, n);
    return await trimAndRedo(r, ctx, 0, k, n, want);
  } finally {
    freeContext(r.llama, ctx);
  }
}

Deno.test("make-model --arch: gemma2 and lfm2 files with the tiny preset's tokenizer", async () => {
  for (const arch of ["gemma2", "lfm2"] as const) {
    const h = await readGgufHeader(await variantPath(arch));
    assert.equal(h.metadata.get("general.architecture")?.value, arch);
    assert.equal(h.metadata.get("tokenizer.ggml.model")?.value, "gpt2");
    assert.match(String(h.metadata.get("tokenizer.chat_template")?.value), /start_header_id/);
  }
  const g = await readGgufHeader(await variantPath("gemma2"));
  assert.equal(g.metadata.get("gemma2.attention.sliding_window")?.value, N_SWA);
  const l = await readGgufHeader(await variantPath("lfm2"));
  const kv = l.metadata.get("lfm2.attention.head_count_kv");
  assert.deepEqual(kv?.type === GgufType.ARRAY ? Array.from(kv.value as ArrayLike<number>) : kv, [
    0,
    2,
  ]);
  assert.ok(l.tensors.some((t) => t.name === "blk.0.shortconv.conv.weight"));
  assert.ok(!l.tensors.some((t) => t.name === "blk.1.shortconv.conv.weight"));
});

Deno.test("make-model flags: --arch and --sliding-window", () => {
  const argv = ["--preset", "tiny", "--out", "m.gguf", "--arch", "lfm2", "--sliding-window", "64"];
  const p = parseMakeModelArgs(argv);
  assert.ok(p.ok);
  assert.equal(p.options.arch, "lfm2");
  assert.equal(p.options.slidingWindow, 64);
  const bad = parseMakeModelArgs(["--preset", "tiny", "--out", "m.gguf", "--arch", "mamba"]);
  assert.deepEqual(bad, {
    ok: false,
    message: "make-model: --arch must be llama, gemma2, lfm2",
  });
  assert.deepEqual(
    parseMakeModelArgs(["--preset", "tiny", "--out", "m", "--sliding-window", "8"]),
    {
      ok: false,
      message: "make-model: --sliding-window needs --arch gemma2 or lfm2",
    },
  );
});

Deno.test("lfm2 with a window: hybrid memory whose attention blocks slide", async () => {
  const out = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await makeModel({ preset: "tiny", arch: "lfm2", slidingWindow: 16, dtype: "q8_0", out });
    const llama = openLlama();
    const model = await loadModel(llama, out, {});
    assert.deepEqual(modelMemoryKind(llama, model), { recurrent: false, hybrid: true, nSwa: 16 });
    freeModel(llama, model);
    await assert.rejects(
      makeModel({ preset: "tiny", slidingWindow: 16, out }),
      /slidingWindow needs an arch variant/,
    );
  } finally {
    await Deno.remove(out);
  }
});

Deno.test("gemma2 (iSWA): what llama.cpp reports and what seq_rm and state copies keep", async () => {
  await withModel("gemma2", async (r) => {
    assert.deepEqual(modelMemoryKind(r.llama, r.model), {
      recurrent: false,
      hybrid: false,
      nSwa: N_SWA,
    });

    // The full-size SWA cache (llama.cpp's default context, `swa_full: true`) never drops a
    // cell: any trim is exact, even far below the window.
    for (const k of [99, 80, 60, 10]) {
      const t = await trimCase(r, { swaFull: true }, 100, k, k);
      assert.deepEqual([t.posMin, t.posMax, t.removed, t.exact], [0, 99, true, true], `k=${k}`);
    }
    {
      const t = await trimCase(r, { swaFull: true }, 400, 10, 10);
      assert.deepEqual([t.posMin, t.removed, t.exact], [0, true, true]);
    }

    // Without it the SWA cache has 256 cells: after 400 tokens it kept the last 256 positions.
    // seq_rm says yes to every trim; the rest computes right where the window of the first redone
    // token is still in the cache (llama-server's rule, k >= pos_min + n_swa, holds), and wrong
    // where much of it is gone. (In between the error fades into the noise: k = pos_min + 20
    // measured 0.003, the far end of a random model's window weighs little.)
    const n = 400;
    const posMin = n - SWA_CELLS;
    for (const k of [399, 360, 300, 200, posMin + N_SWA]) {
      const t = await trimCase(r, { swaFull: false }, n, k, k);
      assert.deepEqual(
        [t.posMin, t.posMax, t.removed, t.exact],
        [posMin, 399, true, true],
        `k=${k}`,
      );
    }
    for (const k of [posMin, 100, 10]) {
      const t = await trimCase(r, { swaFull: false }, n, k, k);
      assert.deepEqual([t.posMin, t.removed, t.exact], [posMin, true, false], `k=${k}`);
    }
    // Trimmed below every SWA cell, the sequence reads as empty (iSWA reports the SWA half).
    {
      const ctx = context(r, { swaFull: false });
      await feed(r, ctx, 0, 0, n);
      const mem = memory(r.llama, ctx);
      assert.equal(memorySeqRm(r.llama, mem, 0, 10, -1), true);
      assert.deepEqual([memorySeqPosMin(r.llama, mem, 0), memorySeqPosMax(r.llama, mem, 0)], [
        -1,
        -1,
      ]);
      freeContext(r.llama, ctx);
    }

    // A saved sequence carries the SWA layers' last n_swa positions only (cells outside the
    // window are skipped even in the full-size cache), the full-attention layers' all. Restored
    // into sequence 1 it continues exactly; seq_rm on it says yes to any trim, but only
    // k >= pos_min + n_swa - 1 (= pos_max: the last token alone) keeps the whole window. (k = 98,
    // short of one far-end cell, measured 8e-6 off.)
    for (const swaFull of [true, false]) {
      const ctx = context(r, { swaFull });
      const mem = memory(r.llama, ctx);
      await feed(r, ctx, 0, 0, 100);
      const state = seqStateGet(r.llama, ctx, 0);
      const partial = seqStateGetExt(r.llama, ctx, 0, STATE_SEQ_PARTIAL_ONLY);
      assert.ok(partial.length < state.length, `${partial.length} < ${state.length}`);
      assert.equal(seqStateSet(r.llama, ctx, 1, state), true);
      assert.deepEqual([memorySeqPosMin(r.llama, mem, 1), memorySeqPosMax(r.llama, mem, 1)], [
        100 - N_SWA,
        99,
      ]);
      const a = await feed(r, ctx, 1, 100, 101);
      const b = await feed(r, ctx, 0, 100, 101);
      assert.equal(maxDiff(a, b), 0, "restored sequence continues exactly");
      freeContext(r.llama, ctx);
    }
    for (const [k, exact] of [[99, true], [60, false], [20, false]] as const) {
      const want = await fresh(r, k, 100);
      const ctx = context(r);
      await feed(r, ctx, 0, 0, 100);
      assert.equal(seqStateSet(r.llama, ctx, 1, seqStateGet(r.llama, ctx, 0)), true);
      const t = await trimAndRedo(r, ctx, 1, k, 100, want);
      freeContext(r.llama, ctx);
      assert.deepEqual([t.posMin, t.removed, t.exact], [100 - N_SWA, true, exact], `k=${k}`);
    }
  });
});

Deno.test("lfm2 (hybrid): partial trims only as n_rs_seq rollbacks within the last ubatch", async () => {
  await withModel("lfm2", async (r) => {
    assert.deepEqual(modelMemoryKind(r.llama, r.model), {
      recurrent: false,
      hybrid: true,
      nSwa: 0,
    });
    const n = 100;
    // Without recurrent snapshots no partial trim is allowed (the whole sequence still goes),
    // and pos_min is pos_max: the recurrent half holds one state per sequence.
    {
      const ctx = context(r);
      assert.equal(contextRsSeq(r.llama, ctx), 0);
      const mem = memory(r.llama, ctx);
      await feed(r, ctx, 0, 0, n);
      assert.deepEqual([memorySeqPosMin(r.llama, mem, 0), memorySeqPosMax(r.llama, mem, 0)], [
        99,
        99,
      ]);
      for (const k of [99, 96, 50, 1]) assert.equal(memorySeqRm(r.llama, mem, 0, k, -1), false);
      assert.equal(memorySeqRm(r.llama, mem, 0, 0, -1), true);
      assert.equal(memorySeqPosMax(r.llama, mem, 0), -1);
      freeContext(r.llama, ctx);
    }
    // n_rs_seq = 4: a rollback of 1..4 tokens succeeds; it is exact when those tokens were all
    // in the last ubatch of the last decode (here [64, 100)), and silently wrong when not (the
    // last decode was the single token 99); 5 or more is refused.
    const R = 4;
    for (const k of [99, 98, 96]) {
      const t = await trimCase(r, { rsSeq: R }, n, 0, k);
      assert.deepEqual([t.removed, t.exact], [true, true], `k=${k}`);
      const late = await trimCase(r, { rsSeq: R }, n, 99, k);
      assert.deepEqual([late.removed, late.exact], [true, false], `k=${k} after a 1-token decode`);
    }
    assert.equal((await trimCase(r, { rsSeq: R }, n, 0, 95)).removed, false);
    assert.equal((await trimCase(r, { rsSeq: R }, n, 0, 50)).removed, false);
    {
      // A pending rollback is single-use: a second one before the next decode is refused.
      const ctx = context(r, { rsSeq: R });
      assert.equal(contextRsSeq(r.llama, ctx), R);
      const mem = memory(r.llama, ctx);
      await feed(r, ctx, 0, 0, n);
      assert.equal(memorySeqRm(r.llama, mem, 0, 98, -1), true);
      assert.equal(memorySeqRm(r.llama, mem, 0, 97, -1), false);
      freeContext(r.llama, ctx);
    }

    // A saved sequence (KV cells and the recurrent state) restores into sequence 1 and continues
    // exactly; the restored sequence cannot be trimmed either.
    const ctx = context(r);
    const mem = memory(r.llama, ctx);
    await feed(r, ctx, 0, 0, n);
    const state = seqStateGet(r.llama, ctx, 0);
    const partial = seqStateGetExt(r.llama, ctx, 0, STATE_SEQ_PARTIAL_ONLY);
    assert.ok(partial.length < state.length, `${partial.length} < ${state.length}`);
    assert.equal(seqStateSet(r.llama, ctx, 1, state), true);
    assert.deepEqual([memorySeqPosMin(r.llama, mem, 1), memorySeqPosMax(r.llama, mem, 1)], [
      99,
      99,
    ]);
    const a = await feed(r, ctx, 1, n, n + 1);
    const b = await feed(r, ctx, 0, n, n + 1);
    assert.equal(maxDiff(a, b), 0, "restored sequence continues exactly");
    assert.equal(memorySeqRm(r.llama, mem, 1, 60, -1), false);
    freeContext(r.llama, ctx);
  });
});

Deno.test("the engine generates on both models, the same tokens as a plain greedy loop", async () => {
  for (const arch of ["gemma2", "lfm2"] as const) {
    const path = await variantPath(arch);
    // The plain loop: the prompt, then one token at a time, argmax of the logits.
    const want: number[] = [];
    let text = new Int32Array();
    await withModel(arch, async (r) => {
      text = r.text.slice(0, 12);
      const ctx = context(r);
      let logits = await feed(r, ctx, 0, 0, 12);
      const b = newBatch(1);
      for (let pos = 12; want.length < 8; pos++) {
        let best = 0;
        for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
        want.push(best);
        b.token[0] = best;
        b.pos[0] = pos;
        b.seqId[0] = 0;
        b.logits[0] = 1;
        setBatchSize(b, 1);
        assert.equal(await decode(r.llama, ctx, b), 0);
        logits = new Float32Array(logitsIth(r.llama, ctx, 0, r.nVocab));
      }
      freeContext(r.llama, ctx);
    });
    const m = await loadEngineModel({ path, maxBatch: 2, maxSeqLen: 256, threads: 1 });
    try {
      const engine = inProcessScheduler(m);
      // Twice: the second request finds the first one's cells (prefix reuse, where allowed).
      for (let i = 0; i < 2; i++) {
        let tokens: number[] | undefined;
        for await (
          const ev of engine.submit({
            prompt: text,
            maxTokens: 8,
            sampling: { ...defaultSampling(), temperature: 0, seed: 1 },
            stop: [],
            ignoreEos: true,
            logprobs: 0,
          })
        ) {
          if (ev.type === "error") throw new Error(ev.message);
          if (ev.type === "done") tokens = ev.tokens;
        }
        assert.deepEqual(tokens, want, `${arch}, request ${i + 1}`);
      }
      await engine.idle();
    } finally {
      unloadEngineModel(m);
    }
  }
});
