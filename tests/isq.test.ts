// --isq / --dtype through llama.cpp's quantizer on the tiny F32 test model: the output must load
// in llama.cpp with the asked type, a second call must reuse the cached file untouched, and
// quantized sources and conflicting flags must be refused with one clear line.
import assert from "node:assert/strict";
import { freeModel, loadModel, modelInfo, openLlama } from "../ffi/mod.ts";
import { applyIsq, isqCachePath, storedType, weightTarget } from "../lib/models/isq.ts";
import { tinyModelPath } from "./support/models.ts";

async function fileTypeOf(path: string): Promise<string> {
  const llama = openLlama();
  const model = await loadModel(llama, path, {});
  try {
    return modelInfo(llama, model).fileType;
  } finally {
    freeModel(llama, model);
  }
}

async function withDataDir(fn: (dataDir: string) => Promise<void>): Promise<void> {
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-isq-" });
  try {
    await fn(dataDir);
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
}

Deno.test("flag mapping, and --isq with --dtype is refused", () => {
  assert.equal(weightTarget(undefined, "auto"), undefined);
  assert.deepEqual(weightTarget("q4k", "auto"), { ftype: 15, flag: "--isq q4k", label: "q4k" });
  assert.deepEqual(weightTarget(undefined, "bf16"), {
    ftype: 32,
    flag: "--dtype bf16",
    label: "bf16",
  });
  assert.throws(() => weightTarget("q8_0", "f16"), {
    message: "--isq q8_0 and --dtype f16 both pick the weight type; give only one of them",
  });
});

Deno.test("--isq q8_0: loads as Q8_0, cached on the second call, and not re-quantized", async () => {
  const tiny = await tinyModelPath();
  assert.deepEqual(await storedType(tiny), { ftype: 0, name: "F32", float: true });
  await withDataDir(async (dataDir) => {
    const lines: string[] = [];
    const log = (l: string) => lines.push(l);
    const out = await applyIsq(tiny, { isq: "q8_0", dataDir, log, threads: 2 });
    assert.equal(out, await isqCachePath(tiny, weightTarget("q8_0")!, dataDir));
    assert.ok(out.startsWith(`${dataDir}/isq/`), out);
    assert.equal(await fileTypeOf(out), "Q8_0");
    assert.deepEqual(await storedType(out), { ftype: 7, name: "Q8_0", float: false });
    assert.ok((await Deno.stat(out)).size < (await Deno.stat(tiny)).size / 2);
    // No temp file is left beside the result.
    const names = [...Deno.readDirSync(`${dataDir}/isq`)].map((e) => e.name);
    assert.deepEqual(names, [out.slice(out.lastIndexOf("/") + 1)]);

    const mtime = (await Deno.stat(out)).mtime?.getTime();
    lines.length = 0;
    const again = await applyIsq(tiny, { isq: "q8_0", dataDir, log });
    assert.equal(again, out);
    assert.equal((await Deno.stat(out)).mtime?.getTime(), mtime);
    assert.deepEqual(lines, [`using cached Q8_0 weights ${out}`]);

    // A quantized model is refused, for --isq and --dtype alike, before llama.cpp is asked.
    await assert.rejects(applyIsq(out, { isq: "q4k", dataDir, log }), {
      message: "model is already quantized (Q8_0); --isq needs an F16/BF16/F32 model",
    });
    await assert.rejects(applyIsq(out, { dtype: "f16", dataDir, log }), {
      message: "model is already quantized (Q8_0); --dtype needs an F16/BF16/F32 model",
    });
    // Without a conversion the source is loaded as it is, quantized or not.
    assert.equal(await applyIsq(out, { dtype: "auto", dataDir }), out);
  });
});

Deno.test("--dtype f16 converts an F32 model; --dtype f32 keeps it as stored", async () => {
  const tiny = await tinyModelPath();
  await withDataDir(async (dataDir) => {
    const log = () => {};
    const out = await applyIsq(tiny, { dtype: "f16", dataDir, log, threads: 2 });
    assert.notEqual(out, tiny);
    assert.equal(await fileTypeOf(out), "F16");
    assert.equal((await storedType(out)).name, "F16");
    assert.equal(await applyIsq(tiny, { dtype: "f32", dataDir, log }), tiny);
    // The F16 copy is a valid source for --isq.
    const q = await applyIsq(out, { isq: "q8_0", dataDir, log, threads: 2 });
    assert.equal(await fileTypeOf(q), "Q8_0");
  });
});
