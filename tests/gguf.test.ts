import assert from "node:assert/strict";
import {
  dequantizeQ8_0,
  elementCount,
  encodeF16,
  f16ToF32,
  f32ToF16,
  GgmlType,
  type GgufKv,
  GgufType,
  kvArray,
  kvBool,
  kvF32,
  kvF64,
  kvI16,
  kvI32,
  kvI64,
  kvI8,
  kvString,
  kvU16,
  kvU32,
  kvU64,
  kvU8,
  layoutTensors,
  LLAMA3_CHAT_TEMPLATE,
  LLAMA_BPE_VOCAB_URL,
  makeModel,
  quantizeQ8_0,
  readGgufHeader,
  summarizeGguf,
  writeGguf,
} from "../lib/gguf/mod.ts";

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-gguf-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function sha256(path: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function readRange(path: string | URL, offset: number, length: number): Promise<Uint8Array> {
  const file = await Deno.open(path);
  try {
    await file.seek(offset, Deno.SeekMode.Start);
    const out = new Uint8Array(length);
    let got = 0;
    while (got < length) {
      const n = await file.read(out.subarray(got));
      if (n === null) throw new Error("short read");
      got += n;
    }
    return out;
  } finally {
    file.close();
  }
}

async function truncateCopy(src: string | URL, dst: string, length: number): Promise<void> {
  const bytes = await readRange(src, 0, length);
  await Deno.writeFile(dst, bytes);
}

const toArray = (v: ArrayLike<unknown>): unknown[] => Array.from(v);
const bytesOf = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

Deno.test("vocab asset: Llama-3 BPE tokenizer metadata", async () => {
  const header = await readGgufHeader(LLAMA_BPE_VOCAB_URL);
  assert.equal(header.version, 3);
  assert.equal(header.tensors.length, 0);
  const md = header.metadata;
  assert.deepEqual(md.get("tokenizer.ggml.model"), kvString("gpt2"));
  assert.deepEqual(md.get("tokenizer.ggml.pre"), kvString("llama-bpe"));
  assert.deepEqual(md.get("tokenizer.ggml.bos_token_id"), kvU32(128000));
  assert.deepEqual(md.get("tokenizer.ggml.eos_token_id"), kvU32(128001));
  assert.equal(md.has("tokenizer.chat_template"), false);
  assert.equal(md.has("tokenizer.ggml.eot_token_id"), false);

  const tokens = md.get("tokenizer.ggml.tokens");
  assert.ok(tokens?.type === GgufType.ARRAY && tokens.itemType === GgufType.STRING);
  assert.equal(tokens.value.length, 128256);
  assert.equal(tokens.value[0], "!");
  assert.equal(tokens.value[128000], "<|begin_of_text|>");
  assert.equal(tokens.value[128009], "<|eot_id|>");
  assert.equal(tokens.value[1917], "Ġworld"); // multi-byte UTF-8 in a byte-level BPE token

  const types = md.get("tokenizer.ggml.token_type");
  assert.ok(types?.type === GgufType.ARRAY && types.itemType === GgufType.INT32);
  assert.ok(types.value instanceof Int32Array);
  assert.equal(types.value.length, 128256);
  assert.equal(types.value[0], 1); // normal
  assert.equal(types.value[128000], 3); // control

  const merges = md.get("tokenizer.ggml.merges");
  assert.ok(merges?.type === GgufType.ARRAY && merges.itemType === GgufType.STRING);
  assert.equal(merges.value.length, 280147);
  assert.equal(merges.value[0], "Ġ Ġ");

  const summary = summarizeGguf(header);
  assert.equal(summary.architecture, "llama");
  assert.equal(summary.vocabSize, 128256);
  assert.equal(summary.tokenizerModel, "gpt2");
  assert.equal(summary.tokenizerPre, "llama-bpe");
  assert.equal(summary.bosTokenId, 128000);
  assert.equal(summary.eosTokenId, 128001);
  assert.equal(summary.eotTokenId, undefined);
  assert.equal(summary.chatTemplate, undefined);
});

Deno.test("writer/reader round trip of every value type", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/kv.gguf`;
    const metadata: [string, GgufKv][] = [
      ["u8", kvU8(255)],
      ["i8", kvI8(-128)],
      ["u16", kvU16(65535)],
      ["i16", kvI16(-32768)],
      ["u32", kvU32(0xffffffff)],
      ["i32", kvI32(-0x80000000)],
      ["f32", kvF32(0.1)],
      ["f64", kvF64(Math.PI)],
      ["bool.true", kvBool(true)],
      ["bool.false", kvBool(false)],
      ["str", kvString("héllo ✓ 🦙")],
      ["str.empty", kvString("")],
      ["u64.max", kvU64(0xffffffffffffffffn)],
      ["i64.min", kvI64(-0x8000000000000000n)],
      ["arr.u8", kvArray({ itemType: GgufType.UINT8, value: [0, 1, 255] })],
      ["arr.i8", kvArray({ itemType: GgufType.INT8, value: [-128, 127] })],
      ["arr.u16", kvArray({ itemType: GgufType.UINT16, value: [1, 65535] })],
      ["arr.i16", kvArray({ itemType: GgufType.INT16, value: [-2, 300] })],
      ["arr.u32", kvArray({ itemType: GgufType.UINT32, value: [4000000000] })],
      ["arr.i32", kvArray({ itemType: GgufType.INT32, value: [-1, 2, -3] })],
      ["arr.f32", kvArray({ itemType: GgufType.FLOAT32, value: [1.5, -0.25] })],
      ["arr.f64", kvArray({ itemType: GgufType.FLOAT64, value: [1e300, -1e-300] })],
      ["arr.bool", kvArray({ itemType: GgufType.BOOL, value: [true, false, true] })],
      ["arr.str", kvArray({ itemType: GgufType.STRING, value: ["a", "", "Ġworld", "😀"] })],
      ["arr.u64", kvArray({ itemType: GgufType.UINT64, value: [0n, 0xffffffffffffffffn] })],
      ["arr.i64", kvArray({ itemType: GgufType.INT64, value: [-1n, 0x7fffffffffffffffn] })],
      ["arr.empty", kvArray({ itemType: GgufType.INT32, value: [] })],
      [
        "arr.nested",
        kvArray({
          itemType: GgufType.ARRAY,
          value: [
            { itemType: GgufType.STRING, value: ["x", "y"] },
            { itemType: GgufType.UINT8, value: [7] },
          ],
        }),
      ],
    ];
    const w = new Float32Array([1, 2, 3, 4, 5, 6]);
    await writeGguf(path, {
      metadata,
      tensors: [{ name: "w", type: GgmlType.F32, dims: [3, 2], data: bytesOf(w) }],
    });
    const header = await readGgufHeader(path);
    assert.equal(header.version, 3);
    assert.deepEqual([...header.metadata.keys()], metadata.map(([k]) => k));

    const get = (key: string) => header.metadata.get(key)!;
    for (const [key, kv] of metadata) {
      const got = get(key);
      assert.equal(got.type, kv.type, key);
      if (kv.type !== GgufType.ARRAY) {
        const want = kv.type === GgufType.FLOAT32 ? Math.fround(kv.value) : kv.value;
        assert.equal(got.value, want, key);
      } else {
        assert.ok(got.type === GgufType.ARRAY);
        assert.equal(got.itemType, kv.itemType, key);
        if (kv.itemType !== GgufType.ARRAY) {
          assert.deepEqual(toArray(got.value), toArray(kv.value), key);
        }
      }
    }
    assert.equal(get("u64.max").value, 18446744073709551615n);
    assert.equal(get("i64.min").value, -9223372036854775808n);
    assert.equal(get("str").value, "héllo ✓ 🦙");
    const nested = get("arr.nested");
    assert.ok(nested.type === GgufType.ARRAY && nested.itemType === GgufType.ARRAY);
    assert.equal(nested.value[0].itemType, GgufType.STRING);
    assert.deepEqual(toArray(nested.value[0].value), ["x", "y"]);
    assert.deepEqual(toArray(nested.value[1].value), [7]);

    assert.equal(header.tensors.length, 1);
    const t = header.tensors[0];
    assert.deepEqual(t, { name: "w", dims: [3, 2], type: GgmlType.F32, offset: 0, size: 24 });
    const data = await readRange(path, header.dataOffset + t.offset, t.size!);
    assert.deepEqual(new Float32Array(data.buffer), w);

    // Re-writing what was read reproduces the file byte for byte.
    const copy = `${dir}/copy.gguf`;
    await writeGguf(copy, {
      metadata: header.metadata,
      tensors: [{ name: "w", type: GgmlType.F32, dims: [3, 2], data: () => [data] }],
    });
    assert.equal(await sha256(copy), await sha256(path));
  });
});

Deno.test("tensor data is aligned and zero-padded", async () => {
  await withTempDir(async (dir) => {
    for (const alignment of [32, 64]) {
      const path = `${dir}/align-${alignment}.gguf`;
      const tensors = [
        { name: "a", type: GgmlType.F32, dims: [3] }, // 12 bytes
        { name: "b", type: GgmlType.F16, dims: [5, 3] }, // 30 bytes
        { name: "c", type: GgmlType.Q8_0, dims: [64] }, // 68 bytes
        { name: "d", type: GgmlType.F32, dims: [1] }, // 4 bytes
      ];
      const fill = (n: number, v: number) => new Uint8Array(n).fill(v);
      await writeGguf(path, {
        metadata: [["general.alignment", kvU32(alignment)], ["x", kvString("odd-length")]],
        tensors: tensors.map((t, i) => ({
          ...t,
          // Exercise chunked producers with uneven chunk sizes.
          data: function* () {
            const size = layoutTensors([t])[0].size;
            yield fill(1, i + 1);
            yield fill(size - 1, i + 1);
          },
        })),
      });
      const header = await readGgufHeader(path);
      assert.equal(header.alignment, alignment);
      assert.equal(header.dataOffset % alignment, 0);
      const expected = layoutTensors(tensors, alignment);
      assert.deepEqual(expected.map((t) => t.size), [12, 30, 68, 4]);
      assert.deepEqual(
        header.tensors.map((t) => [t.name, t.offset, t.size]),
        expected.map((t) => [t.name, t.offset, t.size]),
      );
      for (const t of header.tensors) assert.equal(t.offset % alignment, 0, t.name);
      const last = expected[expected.length - 1];
      const fileSize = (await Deno.stat(path)).size;
      assert.equal(fileSize, header.dataOffset + last.offset + alignment);

      const all = await Deno.readFile(path);
      for (let i = 0; i < expected.length; i++) {
        const { offset, size } = expected[i];
        const start = header.dataOffset + offset;
        const end = i + 1 < expected.length ? header.dataOffset + expected[i + 1].offset : fileSize;
        assert.ok(all.subarray(start, start + size).every((b) => b === i + 1));
        assert.ok(all.subarray(start + size, end).every((b) => b === 0), "padding is zero");
      }
    }
  });
});

Deno.test("writer rejects inconsistent input and leaves no file behind", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/bad.gguf`;
    await assert.rejects(
      writeGguf(path, {
        metadata: [],
        tensors: [{ name: "w", type: GgmlType.F32, dims: [4], data: new Uint8Array(12) }],
      }),
      /tensor "w": expected 16 bytes of data, got 12/,
    );
    await assert.rejects(
      writeGguf(path, { metadata: [["k", kvU8(1)], ["k", kvU8(2)]], tensors: [] }),
      /duplicate metadata key "k"/,
    );
    await assert.rejects(
      writeGguf(path, { metadata: [["k", kvU8(256)]], tensors: [] }),
      /256 is not a valid u8/,
    );
    await assert.rejects(
      writeGguf(path, {
        metadata: [],
        tensors: [{ name: "q", type: GgmlType.Q8_0, dims: [48], data: new Uint8Array(0) }],
      }),
      /multiple of 32/,
    );
    assert.deepEqual([...Deno.readDirSync(dir)], []);
  });
});

Deno.test("f32 -> f16 conversion matches IEEE half precision", () => {
  const cases: [number, number][] = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [0.5, 0x3800],
    [0.1, 0x2e66],
    [65504, 0x7bff], // largest finite half
    [65520, 0x7c00], // rounds up to infinity
    [1e6, 0x7c00],
    [-Infinity, 0xfc00],
    [2 ** -14, 0x0400], // smallest normal
    [2 ** -24, 0x0001], // smallest subnormal
    [2 ** -25, 0x0000], // tie between 0 and the smallest subnormal -> even (0)
    [3 * 2 ** -25, 0x0002], // tie between 1 and 2 subnormal units -> even (2)
    [1e-8, 0x0000],
    [1 + 2 ** -11, 0x3c00], // tie -> even mantissa
    [1 + 3 * 2 ** -11, 0x3c02], // tie -> even mantissa (rounds up)
    [2049, 0x6800], // 2048 | 2050 tie -> 2048
  ];
  for (const [x, bits] of cases) {
    assert.equal(f32ToF16(x), bits, `f32ToF16(${x})`);
  }
  assert.equal(f32ToF16(NaN) & 0x7c00, 0x7c00);
  assert.notEqual(f32ToF16(NaN) & 0x03ff, 0);
  for (const [x, bits] of cases) {
    if (Math.abs(x) <= 65504 && (x === 0 || Math.abs(x) >= 2 ** -24)) {
      assert.ok(Math.abs(f16ToF32(bits) - x) <= Math.abs(x) * 2 ** -11 + 2 ** -25, `${x}`);
    }
  }
  assert.deepEqual(encodeF16(new Float32Array([1, -2])), new Uint8Array([0x00, 0x3c, 0x00, 0xc0]));
});

Deno.test("Q8_0 blocks match ggml's block_q8_0 layout and rounding", () => {
  // Block 0: values -16..15 -> amax 16, d = 16/127, stored as f16 0x3008 (0.1259765625).
  // Block 1: amax 127 -> d = 1, so q = roundf(x) with halves away from zero.
  // Block 2: all zeros -> d = 0 and q = 0.
  const x = new Float32Array(96);
  for (let j = 0; j < 32; j++) x[j] = j - 16;
  x.set([127, 2.5, -2.5, 0.5, -0.5, 1.49, -126.5], 32);
  const q = quantizeQ8_0(x);
  assert.equal(q.length, 3 * 34);
  const i8 = new Int8Array(q.buffer);

  assert.deepEqual([q[0], q[1]], [0x08, 0x30]);
  // q = roundf(x * fround(1 / fround(16 / 127))) = roundf(x * 7.9375)
  const expect0 = Array.from({ length: 32 }, (_, j) => {
    const v = (j - 16) * 7.9375;
    return v < 0 ? -Math.round(-v) : Math.round(v);
  });
  assert.deepEqual(Array.from(i8.subarray(2, 34)), expect0);
  assert.equal(i8[2], -127); // x = -16
  assert.equal(i8[2 + 17], 8); // x = 1 -> 7.9375
  assert.equal(i8[2 + 31], 119); // x = 15 -> 119.06

  assert.deepEqual([q[34], q[35]], [0x00, 0x3c]);
  assert.deepEqual(Array.from(i8.subarray(36, 43)), [127, 3, -3, 1, -1, 1, -127]);
  assert.ok(i8.subarray(43, 68).every((v) => v === 0));

  assert.ok(q.subarray(68, 102).every((b) => b === 0));

  const back = dequantizeQ8_0(q);
  assert.equal(back[0], -127 * 0.1259765625);
  assert.equal(back[32], 127);
  assert.throws(() => quantizeQ8_0(new Float32Array(33)), /multiple of 32/);
});

const TINY_TENSORS = (() => {
  const list: [string, number[]][] = [
    ["token_embd.weight", [64, 128256]],
    ["output_norm.weight", [64]],
  ];
  for (let i = 0; i < 2; i++) {
    list.push(
      [`blk.${i}.attn_norm.weight`, [64]],
      [`blk.${i}.attn_q.weight`, [64, 64]],
      [`blk.${i}.attn_k.weight`, [64, 32]],
      [`blk.${i}.attn_v.weight`, [64, 32]],
      [`blk.${i}.attn_output.weight`, [64, 64]],
      [`blk.${i}.ffn_norm.weight`, [64]],
      [`blk.${i}.ffn_gate.weight`, [64, 128]],
      [`blk.${i}.ffn_up.weight`, [64, 128]],
      [`blk.${i}.ffn_down.weight`, [128, 64]],
    );
  }
  return list;
})();

Deno.test("makeModel tiny: llama metadata, Llama-3 vocab, tensors, determinism", async () => {
  await withTempDir(async (dir) => {
    const a = `${dir}/a.gguf`;
    const result = await makeModel({ preset: "tiny", out: a });
    const header = await readGgufHeader(a);
    assert.equal(result.bytes, header.fileSize);
    assert.equal(result.tensorCount, 20);
    assert.equal(result.parameterCount, 8282432);

    const s = summarizeGguf(header);
    assert.equal(s.architecture, "llama");
    assert.equal(s.name, "hearth-tiny");
    assert.equal(s.contextLength, 32768);
    assert.equal(s.embeddingLength, 64);
    assert.equal(s.blockCount, 2);
    assert.equal(s.headCount, 4);
    assert.equal(s.headCountKv, 2);
    assert.equal(s.vocabSize, 128256);
    assert.equal(s.chatTemplate, LLAMA3_CHAT_TEMPLATE);
    assert.equal(s.bosTokenId, 128000);
    assert.equal(s.eosTokenId, 128001);
    assert.equal(s.eotTokenId, 128009);
    assert.equal(s.tokenizerModel, "gpt2");
    assert.equal(s.fileType, 0);
    assert.equal(s.poolingType, undefined);
    // The template's "\n\n" are Jinja escapes (backslash + n), not newlines.
    assert.ok(LLAMA3_CHAT_TEMPLATE.includes("'<|end_header_id|>\\n\\n'"));
    assert.ok(!LLAMA3_CHAT_TEMPLATE.includes("\n"));

    const md = header.metadata;
    assert.deepEqual(md.get("general.alignment"), kvU32(32));
    assert.deepEqual(md.get("llama.rope.dimension_count"), kvU32(16));
    assert.deepEqual(md.get("llama.feed_forward_length"), kvU32(128));
    assert.deepEqual(md.get("llama.vocab_size"), kvU32(128256));
    assert.deepEqual(md.get("llama.rope.freq_base"), kvF32(500000));
    const eps = md.get("llama.attention.layer_norm_rms_epsilon");
    assert.equal(eps?.type, GgufType.FLOAT32);
    assert.equal(eps?.value, Math.fround(1e-5));
    assert.deepEqual(md.get("tokenizer.ggml.eot_token_id"), kvU32(128009));

    // Every tokenizer KV of the vocab asset is copied with its exact type and value.
    const vocab = await readGgufHeader(LLAMA_BPE_VOCAB_URL);
    for (const [key, kv] of vocab.metadata) {
      if (key.startsWith("tokenizer.")) assert.deepEqual(md.get(key), kv, key);
    }

    assert.deepEqual(header.tensors.map((t) => [t.name, t.dims]), TINY_TENSORS);
    assert.ok(header.tensors.every((t) => t.type === GgmlType.F32));
    let offset = 0;
    for (const t of header.tensors) {
      assert.equal(t.size, elementCount(t.dims) * 4, t.name);
      assert.equal(t.offset, offset, t.name);
      offset += Math.ceil(t.size! / 32) * 32;
    }
    assert.equal(header.tensors[0].size, 64 * 128256 * 4);
    assert.equal(header.fileSize, header.dataOffset + offset);

    const norm = header.tensors.find((t) => t.name === "blk.1.ffn_norm.weight")!;
    const normData = await readRange(a, header.dataOffset + norm.offset, norm.size!);
    assert.ok(new Float32Array(normData.buffer).every((v) => v === 1));
    const embd = await readRange(a, header.dataOffset, 4096);
    const e = new Float32Array(embd.buffer);
    const std = Math.sqrt(e.reduce((acc, v) => acc + v * v, 0) / e.length);
    assert.ok(std > 0.9 && std < 1.1, `token_embd std ${std}`);

    // Same options -> byte-identical file; another seed -> different weights.
    const b = `${dir}/b.gguf`;
    await makeModel({ preset: "tiny", out: b });
    assert.equal(await sha256(b), await sha256(a));
    const c = `${dir}/c.gguf`;
    await makeModel({ preset: "tiny", out: c, seed: 7 });
    assert.notEqual(await sha256(c), await sha256(a));
  });
});

Deno.test("makeModel embedding + q8_0: pooling type and quantized sizes", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/embed.gguf`;
    await makeModel({ preset: "tiny", out: path, embedding: true, dtype: "q8_0" });
    const header = await readGgufHeader(path);
    assert.deepEqual(header.metadata.get("llama.pooling_type"), kvU32(1));
    const s = summarizeGguf(header);
    assert.equal(s.poolingType, 1);
    assert.equal(s.fileType, 7);
    assert.equal(s.name, "hearth-tiny-embed");
    await assert.rejects(
      makeModel({ preset: "constructor" as "tiny", out: `${dir}/x.gguf` }),
      /unknown preset "constructor"/,
    );
    await assert.rejects(
      makeModel({ preset: "tiny", out: `${dir}/x.gguf`, dtype: "q4" as "f16" }),
      /unknown dtype "q4"/,
    );
    for (const t of header.tensors) {
      const isNorm = t.dims.length === 1;
      assert.equal(t.type, isNorm ? GgmlType.F32 : GgmlType.Q8_0, t.name);
      const n = elementCount(t.dims);
      assert.equal(t.size, isNorm ? n * 4 : (n / 32) * 34, t.name);
    }
  });
});

Deno.test("reader errors: bad magic, truncation, unsupported version", async () => {
  await withTempDir(async (dir) => {
    const good = `${dir}/good.gguf`;
    await writeGguf(good, {
      metadata: [
        ["general.architecture", kvString("llama")],
        ["tokens", kvArray({ itemType: GgufType.STRING, value: ["a", "b", "c"] })],
      ],
      tensors: [{ name: "w", type: GgmlType.F32, dims: [64], data: new Uint8Array(256) }],
    });
    const size = (await Deno.stat(good)).size;

    const bad = `${dir}/bad.gguf`;
    await Deno.writeFile(bad, new TextEncoder().encode("GGML and some more bytes here"));
    await assert.rejects(readGgufHeader(bad), /not a GGUF file: bad magic/);

    await Deno.writeFile(bad, new Uint8Array([0x47, 0x47]));
    await assert.rejects(readGgufHeader(bad), /not a GGUF file/);

    const cut = `${dir}/cut.gguf`;
    for (const length of [10, 30, 60, 90]) {
      await truncateCopy(good, cut, length);
      await assert.rejects(readGgufHeader(cut), /truncated GGUF file/, `cut at ${length}`);
    }
    // Cut inside the vocab's token strings: the error must surface from a buffer refill.
    await truncateCopy(LLAMA_BPE_VOCAB_URL, cut, 1_500_000);
    await assert.rejects(readGgufHeader(cut), /truncated GGUF file.*tokenizer\.ggml\.tokens/);
    await truncateCopy(good, cut, size - 100);
    await assert.rejects(readGgufHeader(cut), /truncated GGUF file.*tensor "w"/);

    const v1 = await Deno.readFile(good);
    v1[4] = 1;
    await Deno.writeFile(bad, v1);
    await assert.rejects(readGgufHeader(bad), /unsupported GGUF version 1/);

    await assert.rejects(readGgufHeader(`${dir}/missing.gguf`), Deno.errors.NotFound);
  });
});
