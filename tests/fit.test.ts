// `--max-seq-len auto` and `--max-batch auto` (contract 4c): the context is fitted to the devices'
// free memory, never a failed load on defaults; an explicit value that cannot fit exits 2 naming
// the memory it needs. The end-to-end case serves a model whose full context x 32 cannot fit in
// this machine's real MemAvailable.
import assert from "node:assert/strict";
import {
  BATCH_FLOOR,
  budgetFor,
  contextBytes,
  type ContextCost,
  contextCost,
  CTX_FLOOR,
  DEFAULT_BATCH,
  type Fit,
  fitContext,
  type FitInput,
  GIB,
  headroomBytes,
  hostMemAvailable,
} from "../lib/engine/fit.ts";
import { readGgufHeader } from "../lib/gguf/mod.ts";
import { parseServeArgs } from "../lib/cli/flags.ts";
import { N_UBATCH } from "../lib/engine/graph_batch.ts";
import { cachedTinyModel, tinyModelPath } from "./support/models.ts";
import { freePort, runMain, startServer } from "./support/server.ts";

/** Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x f16; the Llama-3 vocabulary. */
const LLAMA8B: ContextCost = {
  kvBytesPerToken: 32 * 8 * 128 * 2 * 2,
  bytesPerSeq: 128256 * 4,
  maskBytesPerCell: N_UBATCH * 2,
  fixedBytes: N_UBATCH * 4 * (128256 + 4 * 4096 + 2 * 14336),
  unified: false,
};

function fit(
  freeGiB: number,
  requested: FitInput["requested"],
  o: { trainCtx?: number; autoShare?: number; cost?: ContextCost } = {},
) {
  return fitContext({
    trainCtx: o.trainCtx ?? 131072,
    cost: o.cost ?? LLAMA8B,
    budget: {
      freeBytes: freeGiB * GIB,
      weightsBytes: 0,
      autoShare: o.autoShare ?? 1,
      where: "GPU0",
    },
    requested,
  });
}

function ok(r: ReturnType<typeof fitContext>): Fit {
  if ("error" in r) throw new Error(r.error);
  return r;
}

const AUTO = { maxSeqLen: "auto", maxBatch: "auto" } as const;

/** The chosen context fits auto's share, and neither a longer context nor one more sequence does. */
function assertLargest(f: Fit, cost: ContextCost, trainCtx: number, share = 1) {
  const budget = f.usableBytes * share;
  assert.ok(f.bytes <= budget, `${f.bytes} > ${budget}`);
  assert.ok(f.maxSeqLen <= trainCtx);
  if (f.maxSeqLen < trainCtx) {
    assert.equal(f.maxSeqLen % 256, 0);
    assert.ok(contextBytes(cost, f.maxSeqLen + 256, f.maxBatch) > budget, "a longer context fits");
  }
  if (f.maxBatch < DEFAULT_BATCH && f.maxSeqLen === trainCtx) {
    assert.ok(contextBytes(cost, f.maxSeqLen, f.maxBatch + 1) > budget, "one more sequence fits");
  }
}

Deno.test("auto never exceeds the model's context, and takes 32 sequences of it when they fit", () => {
  const f = ok(fit(1000, AUTO));
  assert.equal(f.maxSeqLen, 131072);
  assert.equal(f.maxBatch, DEFAULT_BATCH);
  assert.match(f.why, /full context fits 32 sequences/);
  // A context not a multiple of 256 is still the model's own, whole.
  const odd = ok(fit(1000, AUTO, { trainCtx: 40000 }));
  assert.equal(odd.maxSeqLen, 40000);
  // An explicit context beyond the model's is held to the model's.
  assert.equal(ok(fit(1000, { maxSeqLen: 1 << 20, maxBatch: 4 })).maxSeqLen, 131072);
});

Deno.test("auto shrinks the batch first, then the context, then the batch below 8", () => {
  // 200 GiB free: the full 128k context (16 GiB a sequence) fits fewer than 32, at least 8.
  const many = ok(fit(200, AUTO));
  assert.equal(many.maxSeqLen, 131072);
  assert.ok(many.maxBatch >= BATCH_FLOOR && many.maxBatch < DEFAULT_BATCH, `${many.maxBatch}`);
  assertLargest(many, LLAMA8B, 131072);
  assert.match(
    many.why,
    /^fewer sequences: the model's 131072 tokens x 32 would need 5\d\d\.\d GiB/,
  );
  // 40 GiB: 8 sequences of a shorter context (between 32768 and 131072).
  const shorter = ok(fit(40, AUTO));
  assert.equal(shorter.maxBatch, BATCH_FLOOR);
  assert.ok(shorter.maxSeqLen >= CTX_FLOOR && shorter.maxSeqLen < 131072);
  assertLargest(shorter, LLAMA8B, 131072);
  assert.match(shorter.why, /^shorter context/);
  // 12 GiB: 8 x 32768 does not fit; fewer sequences of at least 32768 tokens do.
  const fewer = ok(fit(12, AUTO));
  assert.ok(fewer.maxBatch >= 1 && fewer.maxBatch < BATCH_FLOOR, `${fewer.maxBatch}`);
  assert.ok(fewer.maxSeqLen >= CTX_FLOOR, `${fewer.maxSeqLen}`);
  assertLargest(fewer, LLAMA8B, 131072);
  assert.ok(contextBytes(LLAMA8B, CTX_FLOOR, fewer.maxBatch + 1) > fewer.usableBytes);
  // 3 GiB (a tiny budget): one sequence of whatever fits.
  const one = ok(fit(3, AUTO));
  assert.equal(one.maxBatch, 1);
  assert.ok(one.maxSeqLen >= 256 && one.maxSeqLen < CTX_FLOOR, `${one.maxSeqLen}`);
  assertLargest(one, LLAMA8B, 131072);
});

Deno.test("auto on a CPU host takes its share; headroom is 10% or 1 GiB", () => {
  const f = ok(fit(40, AUTO, { autoShare: 0.5 }));
  assertLargest(f, LLAMA8B, 131072, 0.5);
  assert.match(f.why, /auto takes 50% of it/);
  assert.equal(f.usableBytes, Math.floor(40 * GIB - headroomBytes(40 * GIB)));
  assert.equal(headroomBytes(4 * GIB), GIB);
  assert.equal(headroomBytes(40 * GIB), 4 * GIB);
  // An explicit value may use what auto leaves.
  const all = ok(fit(40, { maxSeqLen: 32768, maxBatch: 7 }, { autoShare: 0.5 }));
  assert.ok(all.bytes > all.usableBytes / 2 && all.bytes <= all.usableBytes);
});

Deno.test("an explicit value that cannot fit is refused naming the memory it needs and the free", () => {
  const r = fit(24, { maxSeqLen: 131072, maxBatch: 32 });
  assert.ok("error" in r);
  const need = contextBytes(LLAMA8B, 131072, 32) / GIB;
  assert.equal(
    r.error,
    `--max-seq-len 131072 x --max-batch 32 needs ${need.toFixed(1)} GiB for the KV cache and ` +
      "compute buffers (131072 tokens x 32 sequences), but only 21.6 GiB is usable on GPU0 " +
      "(24.0 GiB free, less 2.4 GiB headroom)",
  );
  // Explicit context, auto batch: refused when not even one sequence fits.
  const seq = fit(4, { maxSeqLen: 131072, maxBatch: "auto" });
  assert.ok("error" in seq);
  assert.match(
    seq.error,
    /^--max-seq-len 131072 needs 16\.\d GiB .* \(131072 tokens x 1 sequence\)/,
  );
  // Explicit batch, auto context: the context shrinks instead.
  const batch = ok(fit(4, { maxSeqLen: "auto", maxBatch: 4 }));
  assert.equal(batch.maxBatch, 4);
  assert.ok(batch.maxSeqLen < 131072 && batch.maxSeqLen % 256 === 0);
  assertLargest(batch, LLAMA8B, 131072);
  // Weights still to be placed come out of the free memory first.
  const cpu = fitContext({
    trainCtx: 131072,
    cost: LLAMA8B,
    budget: { freeBytes: 20 * GIB, weightsBytes: 16 * GIB, autoShare: 0.5, where: "the CPU" },
    requested: { maxSeqLen: 32768, maxBatch: 1 },
  });
  assert.ok("error" in cpu);
  assert.match(
    cpu.error,
    /needs 4\.\d GiB .* only 3\.0 GiB is usable on the CPU \(20\.0 GiB free, less 16\.0 GiB of weights, less 1\.0 GiB headroom\)/,
  );
});

Deno.test("budgetFor: the GPUs' free memory, else the host's MemAvailable less the weights", () => {
  const dev = (name: string, type: "cpu" | "gpu", backend: string, free: number) => ({
    index: 0,
    name,
    description: name,
    type,
    backend,
    memoryFree: free,
    memoryTotal: 2 * free,
  });
  const gpu = budgetFor(
    [
      dev("CPU", "cpu", "CPU", 64 * GIB),
      dev("CUDA0", "gpu", "CUDA", 10 * GIB),
      dev("RPC0", "gpu", "RPC", 6 * GIB),
    ],
    100 * GIB,
    8 * GIB,
  );
  assert.deepEqual(gpu, {
    freeBytes: 16 * GIB,
    weightsBytes: 0,
    autoShare: 1,
    where: "CUDA0 + RPC0",
  });
  const cpu = budgetFor([dev("CPU", "cpu", "CPU", 64 * GIB)], 100 * GIB, 8 * GIB);
  assert.deepEqual(cpu, {
    freeBytes: 100 * GIB,
    weightsBytes: 8 * GIB,
    autoShare: 0.5,
    where: "the CPU (MemAvailable)",
  });
});

Deno.test("contextCost reads the KV width from the GGUF: the tiny preset's 256 bytes a token in f16", async () => {
  const h = await readGgufHeader(await tinyModelPath());
  const meta = (k: string) => h.metadata.get(k)?.value;
  const opts = { nVocab: 128256, nUbatch: N_UBATCH, unified: false };
  // 2 layers x 2 KV heads x 16 dims x (K + V): llama.cpp logs 4.00 MiB for 16384 cells in f16.
  assert.equal(contextCost(meta, { ...opts, kvType: "f16" }).kvBytesPerToken, 256);
  assert.equal(contextCost(meta, { ...opts, kvType: "auto" }).kvBytesPerToken, 256);
  assert.equal(contextCost(meta, { ...opts, kvType: "q8_0" }).kvBytesPerToken, 136);
  assert.equal(contextCost(meta, { ...opts, kvType: "f32" }).kvBytesPerToken, 512);
  const c = contextCost(meta, { ...opts, kvType: "f16" });
  // The compute buffer llama.cpp reserves for this model (250.75 MiB) is within the estimate.
  assert.ok(c.fixedBytes >= 250.75 * 2 ** 20 && c.fixedBytes < 260 * 2 ** 20, `${c.fixedBytes}`);
  // Per-layer head counts (an array) are summed layer by layer; 0 is a layer without attention.
  const hybrid = (k: string) =>
    k === "general.architecture" ? "x" : ({
      "x.block_count": 4,
      "x.embedding_length": 256,
      "x.attention.head_count": 4,
      "x.attention.head_count_kv": [2, 0, 2, 0],
    } as Record<string, unknown>)[k];
  assert.equal(contextCost(hybrid, { ...opts, kvType: "f16" }).kvBytesPerToken, 2 * 2 * 64 * 2 * 2);
});

Deno.test("--max-seq-len and --max-batch take auto, the default, or a number", () => {
  const d = parseServeArgs([], {});
  assert.ok(d.ok && d.config.maxSeqLen === "auto" && d.config.maxBatch === "auto");
  const g = parseServeArgs(["--max-seq-len=auto", "--max-batch", "4"], {});
  assert.ok(g.ok && g.config.maxSeqLen === "auto" && g.config.maxBatch === 4);
  const bad = (args: string[]) => {
    const r = parseServeArgs(args, {});
    return r.ok ? "" : r.message;
  };
  assert.equal(bad(["--max-seq-len", "lots"]), '--max-seq-len "lots": must be auto or an integer');
  assert.equal(bad(["--max-seq-len", "8"]), '--max-seq-len "8": must be at least 16');
  assert.equal(bad(["--max-batch", "0"]), '--max-batch "0": must be at least 1');
  assert.equal(bad(["--max-batch", "Auto"]), '--max-batch "Auto": must be auto or an integer');
});

Deno.test({
  name:
    "serve fits a model whose full context x 32 cannot fit here, and refuses it given explicitly",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const tiny = await readGgufHeader(await tinyModelPath());
    const cost = contextCost((k) => tiny.metadata.get(k)?.value, {
      kvType: "f16",
      nVocab: 128256,
      nUbatch: N_UBATCH,
      unified: false,
    });
    const available = hostMemAvailable();
    assert.ok(available !== undefined, "no /proc/meminfo MemAvailable");
    // The premise: the model's defaults (its context for 32 sequences) cannot fit on this
    // machine: 4M tokens (36 GiB for 32 sequences), more on a machine with more memory.
    let trainCtx = 4 * 1024 * 1024;
    while (contextBytes(cost, trainCtx, 32) <= available) trainCtx *= 2;
    const path = await cachedTinyModel(`ctx${trainCtx}`, ["presets.ts"], {
      contextLength: trainCtx,
    });
    assert.equal(
      Number((await readGgufHeader(path)).metadata.get("llama.context_length")?.value),
      trainCtx,
    );

    const refused = await runMain([
      "serve",
      "--model",
      path,
      "--max-seq-len",
      String(trainCtx),
      "--max-batch",
      "32",
      "--port",
      String(freePort()),
    ]);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(
        `^hearth: --max-seq-len ${trainCtx} x --max-batch 32 needs \\d+\\.\\d GiB for the KV cache ` +
          `and compute buffers \\(${trainCtx} tokens x 32 sequences\\), but only \\d+\\.\\d GiB ` +
          `is usable on the CPU \\(MemAvailable\\) \\(\\d+\\.\\d GiB free, less 3\\d MiB of weights, ` +
          `less \\d+\\.\\d GiB headroom\\)$`,
        "m",
      ),
    );

    const srv = await startServer(["--model", path, "--threads", "2"], { timeoutMs: 180_000 });
    try {
      const props = await (await fetch(`${srv.url}/props`)).json();
      const f = props.fit;
      assert.equal(props.n_ctx_train, trainCtx);
      assert.equal(props.max_model_len, f.max_seq_len);
      assert.equal(props.max_batch, f.max_batch);
      assert.ok(f.max_seq_len * f.max_batch < trainCtx * 32, JSON.stringify(f));
      assert.ok(f.max_seq_len <= trainCtx && f.max_batch >= 1 && f.max_batch <= 32);
      // The CPU's share: half of what is usable, which is under the free memory.
      assert.ok(f.bytes <= f.usable_bytes / 2 && f.usable_bytes < f.free_bytes, JSON.stringify(f));
      assert.equal(f.bytes, Math.ceil(contextBytes(cost, f.max_seq_len, f.max_batch)));
      assert.match(
        f.why,
        new RegExp(`the model's ${trainCtx} tokens x 32 would need \\d+\\.\\d GiB`),
      );
      assert.match(
        srv.stderr(),
        new RegExp(`hearth: context: ${f.max_seq_len} tokens x ${f.max_batch} sequences \\(`),
      );
      const r = await fetch(`${srv.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "Hello" }],
          max_tokens: 4,
          seed: 1,
        }),
      });
      assert.equal(r.status, 200, await r.clone().text());
      const body = await r.json();
      assert.equal(typeof body.choices[0].message.content, "string");
      assert.ok(body.usage.completion_tokens >= 1 && body.usage.completion_tokens <= 4);
    } finally {
      await srv.stop();
    }
  },
});
