/**
 * Incremental GGUF header reader and model summary.
 *
 * Only the header is read, through a small growing buffer, so metadata of a multi-GB model
 * costs a few MB of I/O. Tensor data is never touched, but its bounds are checked so that a
 * truncated download is reported when the header is read rather than when llama.cpp
 * fails later.
 *
 * @example Inspect a model
 * ```ts
 * import { readGgufHeader, summarizeGguf } from "./reader.ts";
 *
 * const header = await readGgufHeader("model.gguf");
 * const summary = summarizeGguf(header);
 * console.log(summary.architecture, summary.contextLength, summary.vocabSize);
 * console.log(header.metadata.get("tokenizer.ggml.model")?.value);
 * ```
 *
 * @module
 */

import {
  alignUp,
  GGML_MAX_DIMS,
  ggmlTypeInfo,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  type GgufArray,
  type GgufHeader,
  type GgufKv,
  type GgufTensorInfo,
  GgufType,
} from "./types.ts";

/** The facts about a model that a server needs to list, load and prompt it. */
export type GgufSummary = {
  architecture: string;
  name?: string;
  contextLength?: number;
  embeddingLength?: number;
  blockCount?: number;
  headCount?: number;
  headCountKv?: number;
  chatTemplate?: string;
  bosTokenId?: number;
  eosTokenId?: number;
  eotTokenId?: number;
  /** Entries in `tokenizer.ggml.tokens`, else `{arch}.vocab_size`, else token_embd's ne1, else 0. */
  vocabSize: number;
  tokenizerModel?: string;
  tokenizerPre?: string;
  /** `{arch}.pooling_type`: 0 none, 1 mean, 2 cls, 3 last, 4 rank. */
  poolingType?: number;
  /** `general.file_type` (llama_ftype): 0 F32, 1 F16, 7 Q8_0, ... */
  fileType?: number;
  tensorCount: number;
  /** Sum of element counts over all tensors. */
  parameterCount: number;
};

type Cursor = {
  file: Deno.FsFile;
  path: string;
  fileSize: number;
  buf: Uint8Array;
  view: DataView;
  /** File offset of `buf[0]`. */
  base: number;
  pos: number;
  end: number;
  /** What is being read, for error messages. */
  context: string;
};

const INITIAL_BUFFER = 1 << 20;
const decoder = new TextDecoder();

/**
 * Read the header of the GGUF file at `path`: metadata, tensor infos and the absolute
 * offset of the data section. Throws an Error naming the file for non-GGUF, unsupported
 * or truncated files.
 */
export async function readGgufHeader(path: string | URL): Promise<GgufHeader> {
  const name = typeof path === "string" ? path : path.href;
  const file = await Deno.open(path, { read: true });
  try {
    const fileSize = (await file.stat()).size;
    const buf = new Uint8Array(INITIAL_BUFFER);
    const c: Cursor = {
      file,
      path: name,
      fileSize,
      buf,
      view: new DataView(buf.buffer),
      base: 0,
      pos: 0,
      end: 0,
      context: "magic",
    };
    return await parseHeader(c);
  } finally {
    file.close();
  }
}

async function parseHeader(c: Cursor): Promise<GgufHeader> {
  if (c.fileSize < 4) throw new Error(`not a GGUF file: ${c.path} is only ${c.fileSize} bytes`);
  await need(c, 4);
  const magic = c.view.getUint32(c.pos, true);
  if (magic !== GGUF_MAGIC) {
    const got = Array.from(c.buf.subarray(c.pos, c.pos + 4), (b) => b.toString(16).padStart(2, "0"))
      .join(" ");
    throw new Error(`not a GGUF file: bad magic in ${c.path} (expected "GGUF", got ${got})`);
  }
  c.pos += 4;

  c.context = "version";
  await need(c, 4 + 8 + 8);
  const version = c.view.getUint32(c.pos, true);
  c.pos += 4;
  if (version !== 2 && version !== 3) {
    const hint = (version & 0xffff) === 0 && version !== 0
      ? " (big-endian GGUF files are not supported)"
      : "";
    throw new Error(`unsupported GGUF version ${version} in ${c.path}${hint}`);
  }
  const tensorCount = u64(c, "tensor count");
  const kvCount = u64(c, "metadata count");
  // Each KV needs at least a key length, a type and one byte; each tensor info at least
  // 8 + 4 + 4 + 8 bytes. Checking up front turns a corrupt count into a clear error
  // instead of a huge allocation or a long loop.
  if (kvCount * 13 + tensorCount * 24 > c.fileSize - absPos(c)) {
    throw truncated(c, `${kvCount} metadata entries and ${tensorCount} tensors do not fit`);
  }

  const metadata = new Map<string, GgufKv>();
  for (let i = 0; i < kvCount; i++) {
    c.context = `metadata entry ${i}`;
    const key = await readString(c);
    c.context = `metadata key "${key}"`;
    if (metadata.has(key)) throw new Error(`invalid GGUF file ${c.path}: duplicate key "${key}"`);
    await need(c, 4);
    const type = c.view.getUint32(c.pos, true);
    c.pos += 4;
    metadata.set(key, await readValue(c, type));
  }

  const alignKv = metadata.get("general.alignment");
  let alignment = GGUF_DEFAULT_ALIGNMENT;
  if (alignKv !== undefined) {
    if (alignKv.type !== GgufType.UINT32 || alignKv.value === 0) {
      throw new Error(`invalid GGUF file ${c.path}: general.alignment must be a non-zero u32`);
    }
    alignment = alignKv.value;
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    c.context = `tensor info ${i}`;
    const name = await readString(c);
    c.context = `tensor info "${name}"`;
    if (names.has(name)) throw new Error(`invalid GGUF file ${c.path}: duplicate tensor "${name}"`);
    names.add(name);
    await need(c, 4);
    const nDims = c.view.getUint32(c.pos, true);
    c.pos += 4;
    if (nDims > GGML_MAX_DIMS) {
      throw new Error(`invalid GGUF file ${c.path}: tensor "${name}" has ${nDims} dimensions`);
    }
    await need(c, nDims * 8 + 4 + 8);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(u64(c, `dimension ${d} of "${name}"`));
    const type = c.view.getUint32(c.pos, true);
    c.pos += 4;
    const offset = u64(c, `offset of "${name}"`);
    if (offset % alignment !== 0) {
      throw new Error(
        `invalid GGUF file ${c.path}: tensor "${name}" offset ${offset} is not a multiple of ` +
          `the alignment ${alignment}`,
      );
    }
    const info: GgufTensorInfo = { name, dims, type, offset };
    const typeInfo = ggmlTypeInfo(type);
    if (typeInfo) {
      let elements = 1;
      for (const d of dims) elements *= d;
      info.size = Math.ceil(elements / typeInfo.blockSize) * typeInfo.typeSize;
    }
    tensors.push(info);
  }

  const dataOffset = alignUp(absPos(c), alignment);
  for (const t of tensors) {
    if (t.size !== undefined && dataOffset + t.offset + t.size > c.fileSize) {
      throw new Error(
        `truncated GGUF file ${c.path}: data of tensor "${t.name}" ends at byte ` +
          `${dataOffset + t.offset + t.size} but the file has ${c.fileSize} bytes`,
      );
    }
  }
  return { version, metadata, tensors, alignment, dataOffset, fileSize: c.fileSize };
}

function absPos(c: Cursor): number {
  return c.base + c.pos;
}

function truncated(c: Cursor, detail: string): Error {
  return new Error(
    `truncated GGUF file ${c.path}: ${detail} (at byte ${absPos(c)} of ${c.fileSize}, ` +
      `reading ${c.context})`,
  );
}

/**
 * Make at least `n` bytes available at `c.pos`. Callers check `c.end - c.pos` themselves
 * first, so the common case costs no promise at all; that matters for the ~400k strings
 * of a Llama-3 vocabulary.
 */
async function need(c: Cursor, n: number): Promise<void> {
  if (c.end - c.pos >= n) return;
  if (absPos(c) + n > c.fileSize) throw truncated(c, `need ${n} more bytes`);
  const kept = c.end - c.pos;
  if (n > c.buf.length) {
    const grown = new Uint8Array(Math.max(n, c.buf.length * 2));
    grown.set(c.buf.subarray(c.pos, c.end));
    c.buf = grown;
    c.view = new DataView(grown.buffer);
  } else {
    c.buf.copyWithin(0, c.pos, c.end);
  }
  c.base += c.pos;
  c.pos = 0;
  c.end = kept;
  while (c.end < n) {
    const got = await c.file.read(c.buf.subarray(c.end));
    if (got === null) throw truncated(c, `need ${n - c.end} more bytes`);
    c.end += got;
  }
}

/** Read a u64 that must already be buffered, as a safe integer. */
function u64(c: Cursor, what: string): number {
  const lo = c.view.getUint32(c.pos, true);
  const hi = c.view.getUint32(c.pos + 4, true);
  c.pos += 8;
  if (hi >= 0x200000) {
    throw new Error(`invalid GGUF file ${c.path}: ${what} is too large (reading ${c.context})`);
  }
  return hi * 0x100000000 + lo;
}

async function readString(c: Cursor): Promise<string> {
  if (c.end - c.pos < 8) await need(c, 8);
  const len = u64(c, "string length");
  if (c.end - c.pos < len) await need(c, len);
  const s = decodeUtf8(c.buf, c.pos, len);
  c.pos += len;
  return s;
}

/**
 * Read `count` strings. Kept as one loop that only awaits when the buffer runs dry: an
 * `await` per string would cost a promise and a microtask for each of the ~400k strings
 * of a Llama-3 vocabulary.
 */
async function readStrings(c: Cursor, count: number): Promise<string[]> {
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    if (c.end - c.pos < 8) await need(c, 8);
    const len = u64(c, "string length");
    if (c.end - c.pos < len) await need(c, len);
    out[i] = decodeUtf8(c.buf, c.pos, len);
    c.pos += len;
  }
  return out;
}

// Tokens and merges are short; decoding them by hand avoids a TextDecoder call per string,
// which otherwise dominates reading a vocabulary. Anything unusual (long strings, invalid
// or 4-byte sequences) goes to TextDecoder, which also supplies U+FFFD replacement.
function decodeUtf8(buf: Uint8Array, start: number, len: number): string {
  if (len > 64) return decoder.decode(buf.subarray(start, start + len));
  const end = start + len;
  let s = "";
  let i = start;
  while (i < end) {
    const b = buf[i];
    if (b < 0x80) {
      s += String.fromCharCode(b);
      i++;
    } else if ((b & 0xe0) === 0xc0 && i + 1 < end && (buf[i + 1] & 0xc0) === 0x80 && b >= 0xc2) {
      s += String.fromCharCode(((b & 0x1f) << 6) | (buf[i + 1] & 0x3f));
      i += 2;
    } else if (
      (b & 0xf0) === 0xe0 && i + 2 < end && (buf[i + 1] & 0xc0) === 0x80 &&
      (buf[i + 2] & 0xc0) === 0x80
    ) {
      const cp = ((b & 0x0f) << 12) | ((buf[i + 1] & 0x3f) << 6) | (buf[i + 2] & 0x3f);
      if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)) {
        return decoder.decode(buf.subarray(start, end));
      }
      s += String.fromCharCode(cp);
      i += 3;
    } else {
      return decoder.decode(buf.subarray(start, end));
    }
  }
  return s;
}

const SCALAR_SIZE: Readonly<Record<number, number>> = {
  [GgufType.UINT8]: 1,
  [GgufType.INT8]: 1,
  [GgufType.UINT16]: 2,
  [GgufType.INT16]: 2,
  [GgufType.UINT32]: 4,
  [GgufType.INT32]: 4,
  [GgufType.FLOAT32]: 4,
  [GgufType.BOOL]: 1,
  [GgufType.UINT64]: 8,
  [GgufType.INT64]: 8,
  [GgufType.FLOAT64]: 8,
};

async function readValue(c: Cursor, type: number): Promise<GgufKv> {
  if (type === GgufType.STRING) return { type, value: await readString(c) };
  if (type === GgufType.ARRAY) return { type, ...(await readArray(c)) } as GgufKv;
  const size = SCALAR_SIZE[type];
  if (size === undefined) {
    throw new Error(`invalid GGUF file ${c.path}: unknown value type ${type} for ${c.context}`);
  }
  if (c.end - c.pos < size) await need(c, size);
  const v = c.view;
  const p = c.pos;
  c.pos += size;
  switch (type) {
    case GgufType.UINT8:
      return { type, value: v.getUint8(p) };
    case GgufType.INT8:
      return { type, value: v.getInt8(p) };
    case GgufType.UINT16:
      return { type, value: v.getUint16(p, true) };
    case GgufType.INT16:
      return { type, value: v.getInt16(p, true) };
    case GgufType.UINT32:
      return { type, value: v.getUint32(p, true) };
    case GgufType.INT32:
      return { type, value: v.getInt32(p, true) };
    case GgufType.FLOAT32:
      return { type, value: v.getFloat32(p, true) };
    case GgufType.BOOL:
      return { type, value: v.getUint8(p) !== 0 };
    case GgufType.UINT64:
      return { type, value: v.getBigUint64(p, true) };
    case GgufType.INT64:
      return { type, value: v.getBigInt64(p, true) };
    default:
      return { type: GgufType.FLOAT64, value: v.getFloat64(p, true) };
  }
}

async function readArray(c: Cursor): Promise<GgufArray> {
  await need(c, 12);
  const itemType = c.view.getUint32(c.pos, true);
  c.pos += 4;
  const count = u64(c, "array length");
  const remaining = c.fileSize - absPos(c);

  if (itemType === GgufType.STRING) {
    if (count * 8 > remaining) throw truncated(c, `array of ${count} strings does not fit`);
    return { itemType, value: await readStrings(c, count) };
  }
  if (itemType === GgufType.ARRAY) {
    if (count * 12 > remaining) throw truncated(c, `array of ${count} arrays does not fit`);
    const out = new Array<GgufArray>(count);
    for (let i = 0; i < count; i++) out[i] = await readArray(c);
    return { itemType, value: out };
  }
  const size = SCALAR_SIZE[itemType];
  if (size === undefined) {
    throw new Error(
      `invalid GGUF file ${c.path}: unknown array item type ${itemType} for ${c.context}`,
    );
  }
  if (count * size > remaining) {
    throw truncated(c, `array of ${count} items of ${size} bytes does not fit`);
  }
  await need(c, count * size);
  const bytes = c.buf.subarray(c.pos, c.pos + count * size);
  c.pos += count * size;
  // Copy into a fresh buffer so the typed array is aligned and does not pin the read
  // buffer; on little-endian hosts the bytes are already in the right order.
  const copy = bytes.slice().buffer;
  switch (itemType) {
    case GgufType.UINT8:
      return { itemType, value: new Uint8Array(copy) };
    case GgufType.INT8:
      return { itemType, value: new Int8Array(copy) };
    case GgufType.UINT16:
      return { itemType, value: fixEndian(new Uint16Array(copy), copy, 2) };
    case GgufType.INT16:
      return { itemType, value: fixEndian(new Int16Array(copy), copy, 2) };
    case GgufType.UINT32:
      return { itemType, value: fixEndian(new Uint32Array(copy), copy, 4) };
    case GgufType.INT32:
      return { itemType, value: fixEndian(new Int32Array(copy), copy, 4) };
    case GgufType.FLOAT32:
      return { itemType, value: fixEndian(new Float32Array(copy), copy, 4) };
    case GgufType.BOOL:
      return { itemType, value: Array.from(new Uint8Array(copy), (b) => b !== 0) };
    case GgufType.UINT64:
      return { itemType, value: fixEndian(new BigUint64Array(copy), copy, 8) };
    case GgufType.INT64:
      return { itemType, value: fixEndian(new BigInt64Array(copy), copy, 8) };
    default:
      return { itemType: GgufType.FLOAT64, value: fixEndian(new Float64Array(copy), copy, 8) };
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function fixEndian<T>(arr: T, buffer: ArrayBuffer, size: number): T {
  if (!LITTLE_ENDIAN) {
    const bytes = new Uint8Array(buffer);
    for (let i = 0; i < bytes.length; i += size) bytes.subarray(i, i + size).reverse();
  }
  return arr;
}

function kvNumber(kv: GgufKv | undefined): number | undefined {
  if (kv === undefined) return undefined;
  if (typeof kv.value === "number") return kv.value;
  if (typeof kv.value === "bigint") return Number(kv.value);
  return undefined;
}

function kvStr(kv: GgufKv | undefined): string | undefined {
  return kv?.type === GgufType.STRING ? kv.value : undefined;
}

/**
 * Pull the commonly needed facts out of a header. Architecture-specific keys are looked
 * up under `general.architecture` (`llama.context_length` for a llama model). A file
 * without an architecture reports `"unknown"` rather than failing, so any GGUF can be
 * listed.
 */
export function summarizeGguf(header: GgufHeader): GgufSummary {
  const m = header.metadata;
  const arch = kvStr(m.get("general.architecture")) ?? "unknown";
  const archNum = (key: string) => kvNumber(m.get(`${arch}.${key}`));

  const tokens = m.get("tokenizer.ggml.tokens");
  let vocabSize = tokens?.type === GgufType.ARRAY ? tokens.value.length : archNum("vocab_size");
  if (vocabSize === undefined) {
    vocabSize = header.tensors.find((t) => t.name === "token_embd.weight")?.dims[1] ?? 0;
  }

  let parameterCount = 0;
  for (const t of header.tensors) {
    let n = 1;
    for (const d of t.dims) n *= d;
    parameterCount += n;
  }

  const summary: GgufSummary = {
    architecture: arch,
    name: kvStr(m.get("general.name")),
    contextLength: archNum("context_length"),
    embeddingLength: archNum("embedding_length"),
    blockCount: archNum("block_count"),
    headCount: archNum("attention.head_count"),
    headCountKv: archNum("attention.head_count_kv"),
    chatTemplate: kvStr(m.get("tokenizer.chat_template")),
    bosTokenId: kvNumber(m.get("tokenizer.ggml.bos_token_id")),
    eosTokenId: kvNumber(m.get("tokenizer.ggml.eos_token_id")),
    eotTokenId: kvNumber(m.get("tokenizer.ggml.eot_token_id")),
    vocabSize,
    tokenizerModel: kvStr(m.get("tokenizer.ggml.model")),
    tokenizerPre: kvStr(m.get("tokenizer.ggml.pre")),
    poolingType: archNum("pooling_type"),
    fileType: kvNumber(m.get("general.file_type")),
    tensorCount: header.tensors.length,
    parameterCount,
  };
  // Drop absent optional fields so summaries compare and print cleanly.
  for (const key of Object.keys(summary) as (keyof GgufSummary)[]) {
    if (summary[key] === undefined) delete summary[key];
  }
  return summary;
}
