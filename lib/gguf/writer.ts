/**
 * Streaming GGUF v3 writer.
 *
 * The header and tensor data go through one fixed-size buffer, so a multi-hundred-MB model
 * never has to exist in memory: tensor data may be produced chunk by chunk. The file is
 * written under a temporary name and renamed into place at the end, so a crash or an
 * error never leaves a half-written model at `path`.
 *
 * @example Write a one-tensor file
 * ```ts
 * import { writeGguf } from "./writer.ts";
 * import { GgmlType, kvString, kvU32 } from "./types.ts";
 *
 * await writeGguf("out.gguf", {
 *   metadata: [
 *     ["general.architecture", kvString("llama")],
 *     ["general.alignment", kvU32(32)],
 *   ],
 *   tensors: [{
 *     name: "w",
 *     type: GgmlType.F32,
 *     dims: [4],
 *     data: new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer),
 *   }],
 * });
 * ```
 *
 * @module
 */

import {
  alignUp,
  GGML_MAX_DIMS,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_TYPE_NAMES,
  GGUF_VERSION,
  type GgufArray,
  type GgufKv,
  GgufType,
  tensorByteSize,
} from "./types.ts";

/**
 * Tensor bytes: a buffer, or a function returning chunks. The writer finishes with each
 * chunk before asking for the next, so a producer may refill and yield the same buffer.
 */
export type TensorData =
  | Uint8Array
  | (() => Iterable<Uint8Array> | AsyncIterable<Uint8Array>);

/** A tensor to write; `dims` are in ggml order (ne0 first). */
export type TensorSpec = {
  name: string;
  /** A ggml type code, see `GgmlType`. */
  type: number;
  dims: readonly number[];
  data: TensorData;
};

/** Contents of a GGUF file; metadata is written in iteration order (a Map keeps it). */
export type GgufContents = {
  metadata: Iterable<readonly [string, GgufKv]>;
  tensors: readonly TensorSpec[];
};

const BUFFER_SIZE = 1 << 20;
let tmpCounter = 0;
const encoder = new TextEncoder();

type Sink = {
  file: Deno.FsFile;
  buf: Uint8Array;
  view: DataView;
  pos: number;
  /** Bytes handed to the sink so far (flushed or buffered). */
  written: number;
};

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await file.write(bytes.subarray(off));
}

async function flush(s: Sink): Promise<void> {
  if (s.pos > 0) await writeAll(s.file, s.buf.subarray(0, s.pos));
  s.pos = 0;
}

/** Make room for `n` bytes in the buffer; `n` must not exceed the buffer size. */
async function room(s: Sink, n: number): Promise<void> {
  if (s.buf.length - s.pos < n) await flush(s);
}

async function putBytes(s: Sink, bytes: Uint8Array): Promise<void> {
  if (bytes.length > s.buf.length - s.pos) {
    await flush(s);
    // Large chunks go straight to the file instead of being copied through the buffer.
    if (bytes.length >= s.buf.length) {
      await writeAll(s.file, bytes);
      s.written += bytes.length;
      return;
    }
  }
  s.buf.set(bytes, s.pos);
  s.pos += bytes.length;
  s.written += bytes.length;
}

async function putZeros(s: Sink, n: number): Promise<void> {
  while (n > 0) {
    if (s.pos === s.buf.length) await flush(s);
    const k = Math.min(n, s.buf.length - s.pos);
    s.buf.fill(0, s.pos, s.pos + k);
    s.pos += k;
    s.written += k;
    n -= k;
  }
}

async function putU32(s: Sink, v: number): Promise<void> {
  await room(s, 4);
  s.view.setUint32(s.pos, v, true);
  s.pos += 4;
  s.written += 4;
}

async function putU64(s: Sink, v: number | bigint): Promise<void> {
  await room(s, 8);
  s.view.setBigUint64(s.pos, BigInt(v), true);
  s.pos += 8;
  s.written += 8;
}

/**
 * Encode `str` (length-prefixed) into the buffer if it surely fits, returning false
 * otherwise. UTF-8 needs at most 3 bytes per UTF-16 code unit, so the length prefix can be
 * filled in after encoding in place. Being synchronous lets string arrays (400k vocab
 * entries) skip a promise per item.
 */
function trySetString(s: Sink, str: string): boolean {
  if (s.buf.length - s.pos < 8 + str.length * 3) return false;
  const { written } = encoder.encodeInto(str, s.buf.subarray(s.pos + 8));
  s.view.setUint32(s.pos, written, true);
  s.view.setUint32(s.pos + 4, 0, true);
  s.pos += 8 + written;
  s.written += 8 + written;
  return true;
}

async function putString(s: Sink, str: string): Promise<void> {
  if (trySetString(s, str)) return;
  if (8 + str.length * 3 <= s.buf.length) {
    await flush(s);
    trySetString(s, str);
    return;
  }
  const bytes = encoder.encode(str);
  await putU64(s, bytes.length);
  await putBytes(s, bytes);
}

const SCALAR_SIZE: Readonly<Record<number, number>> = {
  0: 1,
  1: 1,
  2: 2,
  3: 2,
  4: 4,
  5: 4,
  6: 4,
  7: 1,
  10: 8,
  11: 8,
  12: 8,
};

function checkInt(v: unknown, type: number, lo: number, hi: number, where: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) {
    throw new Error(`${where}: ${String(v)} is not a valid ${GGUF_TYPE_NAMES[type]}`);
  }
  return v;
}

/** Write one scalar into the buffer; `room` must already have been ensured. */
function setScalar(s: Sink, type: number, v: unknown, where: string): void {
  const p = s.pos;
  const d = s.view;
  switch (type) {
    case GgufType.UINT8:
      d.setUint8(p, checkInt(v, type, 0, 0xff, where));
      break;
    case GgufType.INT8:
      d.setInt8(p, checkInt(v, type, -0x80, 0x7f, where));
      break;
    case GgufType.UINT16:
      d.setUint16(p, checkInt(v, type, 0, 0xffff, where), true);
      break;
    case GgufType.INT16:
      d.setInt16(p, checkInt(v, type, -0x8000, 0x7fff, where), true);
      break;
    case GgufType.UINT32:
      d.setUint32(p, checkInt(v, type, 0, 0xffffffff, where), true);
      break;
    case GgufType.INT32:
      d.setInt32(p, checkInt(v, type, -0x80000000, 0x7fffffff, where), true);
      break;
    case GgufType.FLOAT32:
      if (typeof v !== "number") throw new Error(`${where}: ${String(v)} is not a number`);
      d.setFloat32(p, v, true);
      break;
    case GgufType.FLOAT64:
      if (typeof v !== "number") throw new Error(`${where}: ${String(v)} is not a number`);
      d.setFloat64(p, v, true);
      break;
    case GgufType.BOOL:
      if (typeof v !== "boolean") throw new Error(`${where}: ${String(v)} is not a boolean`);
      d.setUint8(p, v ? 1 : 0);
      break;
    case GgufType.UINT64:
    case GgufType.INT64: {
      const b = typeof v === "bigint"
        ? v
        : typeof v === "number" && Number.isInteger(v)
        ? BigInt(v)
        : undefined;
      const ok = b !== undefined &&
        (type === GgufType.UINT64 ? BigInt.asUintN(64, b) === b : BigInt.asIntN(64, b) === b);
      if (!ok) throw new Error(`${where}: ${String(v)} is not a valid ${GGUF_TYPE_NAMES[type]}`);
      if (type === GgufType.UINT64) d.setBigUint64(p, b, true);
      else d.setBigInt64(p, b, true);
      break;
    }
    default:
      throw new Error(`${where}: unknown GGUF value type ${type}`);
  }
  s.pos += SCALAR_SIZE[type];
  s.written += SCALAR_SIZE[type];
}

async function putValue(s: Sink, type: number, value: unknown, where: string): Promise<void> {
  if (type === GgufType.STRING) {
    if (typeof value !== "string") throw new Error(`${where}: ${String(value)} is not a string`);
    await putString(s, value);
  } else if (type === GgufType.ARRAY) {
    await putArray(s, value as GgufArray, where);
  } else {
    const size = SCALAR_SIZE[type];
    if (size === undefined) throw new Error(`${where}: unknown GGUF value type ${type}`);
    await room(s, size);
    setScalar(s, type, value, where);
  }
}

async function putArray(s: Sink, arr: GgufArray, where: string): Promise<void> {
  const { itemType, value } = arr;
  if (value === null || typeof value !== "object" || typeof value.length !== "number") {
    throw new Error(`${where}: array value must be array-like`);
  }
  await putU32(s, itemType);
  await putU64(s, value.length);
  const n = value.length;
  if (itemType === GgufType.STRING) {
    for (let i = 0; i < n; i++) {
      const str = value[i];
      if (typeof str !== "string") {
        throw new Error(`${where}[${i}]: ${String(str)} is not a string`);
      }
      if (!trySetString(s, str)) await putString(s, str);
    }
    return;
  }
  if (itemType === GgufType.ARRAY) {
    for (let i = 0; i < n; i++) await putArray(s, value[i] as GgufArray, `${where}[${i}]`);
    return;
  }
  const size = SCALAR_SIZE[itemType];
  if (size === undefined) throw new Error(`${where}: unknown GGUF array item type ${itemType}`);
  for (let i = 0; i < n; i++) {
    if (s.buf.length - s.pos < size) await flush(s);
    setScalar(s, itemType, value[i], `${where}[${i}]`);
  }
}

/** Byte layout of a tensor list: sizes and data-relative offsets as the writer assigns them. */
export function layoutTensors(
  tensors: readonly { name: string; type: number; dims: readonly number[] }[],
  alignment = GGUF_DEFAULT_ALIGNMENT,
): { name: string; offset: number; size: number }[] {
  let offset = 0;
  return tensors.map((t) => {
    const size = tensorByteSize(t.type, t.dims);
    const entry = { name: t.name, offset, size };
    offset = alignUp(offset + size, alignment);
    return entry;
  });
}

/**
 * Write a GGUF v3 file to `path`, streaming tensor data to disk. The alignment is taken from
 * a `general.alignment` entry (u32) when present, else 32; each tensor's data starts on an
 * aligned offset and is zero-padded to the next one, as ggml does. Throws if a tensor's
 * data does not have exactly the size its type and dims imply.
 */
export async function writeGguf(path: string, contents: GgufContents): Promise<void> {
  const metadata = [...contents.metadata];
  const tensors = contents.tensors;

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const keys = new Set<string>();
  for (const [key, kv] of metadata) {
    if (keys.has(key)) throw new Error(`duplicate metadata key "${key}"`);
    keys.add(key);
    if (key === "general.alignment") {
      if (kv.type !== GgufType.UINT32 || !(kv.value > 0)) {
        throw new Error("general.alignment must be a positive u32");
      }
      alignment = kv.value;
    }
  }
  const names = new Set<string>();
  for (const t of tensors) {
    if (names.has(t.name)) throw new Error(`duplicate tensor name "${t.name}"`);
    names.add(t.name);
    if (t.dims.length < 1 || t.dims.length > GGML_MAX_DIMS) {
      throw new Error(`tensor "${t.name}" must have 1 to ${GGML_MAX_DIMS} dimensions`);
    }
  }
  const layout = layoutTensors(tensors, alignment);

  const tmp = `${path}.tmp-${Deno.pid}-${Date.now().toString(36)}-${tmpCounter++}`;
  const file = await Deno.open(tmp, { write: true, create: true, truncate: true });
  let ok = false;
  try {
    const buf = new Uint8Array(BUFFER_SIZE);
    const s: Sink = { file, buf, view: new DataView(buf.buffer), pos: 0, written: 0 };

    await putU32(s, GGUF_MAGIC);
    await putU32(s, GGUF_VERSION);
    await putU64(s, tensors.length);
    await putU64(s, metadata.length);
    for (const [key, kv] of metadata) {
      await putString(s, key);
      await putU32(s, kv.type);
      await putValue(s, kv.type, kv.type === GgufType.ARRAY ? kv : kv.value, `metadata "${key}"`);
    }
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i];
      await putString(s, t.name);
      await putU32(s, t.dims.length);
      for (const d of t.dims) await putU64(s, d);
      await putU32(s, t.type);
      await putU64(s, layout[i].offset);
    }
    await putZeros(s, alignUp(s.written, alignment) - s.written);

    const dataStart = s.written;
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i];
      const { offset, size } = layout[i];
      const start = s.written;
      if (start - dataStart !== offset) throw new Error("internal error: tensor offset drift");
      if (t.data instanceof Uint8Array) {
        await putBytes(s, t.data);
      } else {
        for await (const chunk of t.data()) await putBytes(s, chunk);
      }
      const got = s.written - start;
      if (got !== size) {
        throw new Error(`tensor "${t.name}": expected ${size} bytes of data, got ${got}`);
      }
      await putZeros(s, alignUp(got, alignment) - got);
    }
    await flush(s);
    ok = true;
  } finally {
    file.close();
    if (!ok) await Deno.remove(tmp).catch(() => {});
  }
  await Deno.rename(tmp, path);
}
