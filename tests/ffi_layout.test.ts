// Checks every struct layout in ffi/layout.ts against the real llama.h (compiled with the system
// C compiler and offsetof), and that llama.cpp's default params survive a decode/encode round trip
// through our layout and back through the C library.
import assert from "node:assert/strict";
import { allLayouts, contextParams, readStruct, writeStruct } from "../ffi/layout.ts";
import {
  contextInfo,
  defaultContextParams,
  defaultModelParams,
  defaultParams,
  freeContext,
  freeModel,
  loadModel,
  newContext,
  openLlama,
} from "../ffi/mod.ts";
import { modelParams } from "../ffi/layout.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { tinyModelPath } from "./support/models.ts";

async function headerLayouts(): Promise<
  Record<string, { size: number; fields: Record<string, number> }>
> {
  const src = await llamaSourceDir();
  const dir = await Deno.makeTempDir();
  try {
    const lines = allLayouts.map((l) => {
      const fields = l.fields.map((f) =>
        `printf("\\"%s\\":%zu,", "${f.name}", offsetof(struct ${l.name}, ${f.name}));`
      ).join("\n");
      return `printf("\\"${l.name}\\":{\\"size\\":%zu,\\"fields\\":{", sizeof(struct ${l.name}));
${fields}
printf("\\"_\\":0}},");`;
    }).join("\n");
    const c = `#include <stdio.h>
#include <stddef.h>
#include "llama.h"
int main(void) { printf("{"); ${lines} printf("\\"_\\":0}"); return 0; }`;
    await Deno.writeTextFile(`${dir}/layout.c`, c);
    const cc = await new Deno.Command("cc", {
      args: [
        `-I${src}/include`,
        `-I${src}/ggml/include`,
        "-o",
        `${dir}/layout`,
        `${dir}/layout.c`,
      ],
      stderr: "piped",
    }).output();
    assert.ok(cc.success, new TextDecoder().decode(cc.stderr));
    const out = await new Deno.Command(`${dir}/layout`, { stdout: "piped" }).output();
    return JSON.parse(new TextDecoder().decode(out.stdout));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("struct sizes and field offsets match include/llama.h", async () => {
  const real = await headerLayouts();
  for (const layout of allLayouts) {
    const h = real[layout.name];
    assert.ok(h, `${layout.name} missing from header output`);
    assert.equal(layout.size, h.size, `sizeof(${layout.name})`);
    const ours = Object.fromEntries(layout.fields.map((f) => [f.name, f.offset]));
    assert.deepEqual({ ...ours, _: 0 }, h.fields, `offsets of ${layout.name}`);
  }
});

Deno.test("known sizes of the llama.cpp ABI: 80, 160, 56", () => {
  const size = (n: string) => allLayouts.find((l) => l.name === n)!.size;
  assert.equal(size("llama_model_params"), 80);
  assert.equal(size("llama_context_params"), 160);
  assert.equal(size("llama_batch"), 56);
});

Deno.test("default params round-trip through the layout", () => {
  const llama = openLlama();
  for (
    const [layout, bytes] of [
      [modelParams, defaultModelParams(llama)],
      [contextParams, defaultContextParams(llama)],
    ] as const
  ) {
    const values = readStruct(layout, bytes);
    const again = new Uint8Array(layout.size);
    writeStruct(layout, again, values);
    for (const f of layout.fields) {
      assert.deepEqual(readStruct(layout, again)[f.name], values[f.name], f.name);
    }
  }
  // Defaults documented by llama.cpp's llama_context_default_params().
  const d = defaultParams(llama);
  assert.equal(d.llama_context_params.n_ctx, 512);
  assert.equal(d.llama_context_params.n_batch, 2048);
  assert.equal(d.llama_context_params.n_ubatch, 512);
  assert.equal(d.llama_context_params.n_seq_max, 1);
  assert.equal(d.llama_context_params.type_k, 1); // GGML_TYPE_F16
  assert.equal(d.llama_model_params.vocab_only, false);
  assert.equal(d.llama_model_params.n_gpu_layers, -1);
  assert.equal(d.llama_sampler_chain_params.no_perf, true);
});

Deno.test("params written through the layout reach llama.cpp", async () => {
  const llama = openLlama();
  const model = await loadModel(llama, await tinyModelPath(), {});
  const ctx = newContext(llama, model, { n_ctx: 1024, n_batch: 256, n_ubatch: 128, n_seq_max: 4 });
  try {
    const info = contextInfo(llama, ctx);
    assert.equal(info.nCtx, 1024);
    assert.equal(info.nBatch, 256);
    assert.equal(info.nUbatch, 128);
    assert.equal(info.nSeqMax, 4);
  } finally {
    freeContext(llama, ctx);
    freeModel(llama, model);
  }
});
