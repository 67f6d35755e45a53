/**
 * Shared GGUF records and constants: metadata value types, ggml tensor types and their
 * block layouts, plus small constructors for metadata values.
 *
 * GGUF v3 layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 KV count,
 * the KVs, the tensor infos, then the tensor data section aligned to `general.alignment`.
 *
 * @example Build metadata for a GGUF writer
 * ```ts
 * import { GgmlType, kvString, kvU32, tensorByteSize } from "./types.ts";
 *
 * const metadata = new Map([
 *   ["general.architecture", kvString("llama")],
 *   ["general.alignment", kvU32(32)],
 * ]);
 * tensorByteSize(GgmlType.Q8_0, [64, 2]); // 136: 4 blocks of 34 bytes
 * ```
 *
 * @module
 */

/** Little-endian u32 of the ASCII bytes `GGUF`. */
export const GGUF_MAGIC = 0x46554747;
/** The version {@linkcode writeGguf} emits. */
export const GGUF_VERSION = 3;
/** Alignment used when a file has no `general.alignment` key. */
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml's GGML_MAX_DIMS; llama.cpp rejects tensors with more dimensions. */
export const GGML_MAX_DIMS = 4;

/** GGUF metadata value types (`gguf_type`). */
export const GgufType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
/** One of the {@linkcode GgufType} codes. */
export type GgufType = typeof GgufType[keyof typeof GgufType];

/** Value types held in JS as `number`. */
export type GgufNumberType =
  | typeof GgufType.UINT8
  | typeof GgufType.INT8
  | typeof GgufType.UINT16
  | typeof GgufType.INT16
  | typeof GgufType.UINT32
  | typeof GgufType.INT32
  | typeof GgufType.FLOAT32
  | typeof GgufType.FLOAT64;
/** Value types held in JS as `bigint`, so 64-bit values survive a round trip exactly. */
export type GgufBigIntType = typeof GgufType.UINT64 | typeof GgufType.INT64;

/** Names of the {@linkcode GgufType} codes, for messages. */
export const GGUF_TYPE_NAMES: Readonly<Record<number, string>> = {
  0: "u8",
  1: "i8",
  2: "u16",
  3: "i16",
  4: "u32",
  5: "i32",
  6: "f32",
  7: "bool",
  8: "string",
  9: "array",
  10: "u64",
  11: "i64",
  12: "f64",
};

/**
 * Array contents. The reader returns typed arrays for numeric items (a 128k-entry
 * `token_type` array stays compact); the writer also accepts plain arrays.
 */
export type GgufArray =
  | { itemType: GgufNumberType; value: ArrayLike<number> }
  | { itemType: GgufBigIntType; value: ArrayLike<bigint> }
  | { itemType: typeof GgufType.BOOL; value: ArrayLike<boolean> }
  | { itemType: typeof GgufType.STRING; value: ArrayLike<string> }
  | { itemType: typeof GgufType.ARRAY; value: ArrayLike<GgufArray> };

/**
 * A metadata value together with its GGUF type, so that a KV read from one file can be
 * written to another unchanged (a u32 stays a u32, an i32 array stays an i32 array).
 */
export type GgufKv =
  | { type: GgufNumberType; value: number }
  | { type: GgufBigIntType; value: bigint }
  | { type: typeof GgufType.BOOL; value: boolean }
  | { type: typeof GgufType.STRING; value: string }
  | ({ type: typeof GgufType.ARRAY } & GgufArray);

/** A tensor description from the header; `offset` is relative to the data section. */
export type GgufTensorInfo = {
  name: string;
  /** ggml order: `dims[0]` (ne0) is the contiguous dimension. */
  dims: number[];
  /** A {@linkcode GgmlType} code. */
  type: number;
  offset: number;
  /** Bytes of data; absent for ggml types this module does not know. */
  size?: number;
};

/** A parsed GGUF header; tensor data starts at `dataOffset` (absolute file offset). */
export type GgufHeader = {
  version: number;
  metadata: Map<string, GgufKv>;
  tensors: GgufTensorInfo[];
  alignment: number;
  dataOffset: number;
  /** File size in bytes when the header was read. */
  fileSize: number;
};

/** ggml tensor types (`ggml_type`); the generator writes F32, F16 and Q8_0. */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
} as const;
/** One of the {@linkcode GgmlType} codes. */
export type GgmlType = typeof GgmlType[keyof typeof GgmlType];

/** Block layout of a ggml type: `blockSize` elements are stored in `typeSize` bytes. */
export type GgmlTypeInfo = { name: string; blockSize: number; typeSize: number };

/** Elements per Q8_0 block (ggml's QK8_0). */
export const QK8_0 = 32;
/** Bytes per Q8_0 block: an f16 scale then 32 int8 values (`block_q8_0`). */
export const Q8_0_BLOCK_BYTES = 34;

// Sizes mirror ggml's type_traits so headers of real quantized models (Q4_K etc.) can be
// summarized and bounds-checked, even though only F32/F16/Q8_0 are ever generated here.
const TYPE_INFO: Readonly<Record<number, GgmlTypeInfo>> = {
  0: { name: "F32", blockSize: 1, typeSize: 4 },
  1: { name: "F16", blockSize: 1, typeSize: 2 },
  2: { name: "Q4_0", blockSize: 32, typeSize: 18 },
  3: { name: "Q4_1", blockSize: 32, typeSize: 20 },
  6: { name: "Q5_0", blockSize: 32, typeSize: 22 },
  7: { name: "Q5_1", blockSize: 32, typeSize: 24 },
  8: { name: "Q8_0", blockSize: QK8_0, typeSize: Q8_0_BLOCK_BYTES },
  9: { name: "Q8_1", blockSize: 32, typeSize: 36 },
  10: { name: "Q2_K", blockSize: 256, typeSize: 84 },
  11: { name: "Q3_K", blockSize: 256, typeSize: 110 },
  12: { name: "Q4_K", blockSize: 256, typeSize: 144 },
  13: { name: "Q5_K", blockSize: 256, typeSize: 176 },
  14: { name: "Q6_K", blockSize: 256, typeSize: 210 },
  15: { name: "Q8_K", blockSize: 256, typeSize: 292 },
  16: { name: "IQ2_XXS", blockSize: 256, typeSize: 66 },
  17: { name: "IQ2_XS", blockSize: 256, typeSize: 74 },
  18: { name: "IQ3_XXS", blockSize: 256, typeSize: 98 },
  19: { name: "IQ1_S", blockSize: 256, typeSize: 50 },
  20: { name: "IQ4_NL", blockSize: 32, typeSize: 18 },
  21: { name: "IQ3_S", blockSize: 256, typeSize: 110 },
  22: { name: "IQ2_S", blockSize: 256, typeSize: 82 },
  23: { name: "IQ4_XS", blockSize: 256, typeSize: 136 },
  24: { name: "I8", blockSize: 1, typeSize: 1 },
  25: { name: "I16", blockSize: 1, typeSize: 2 },
  26: { name: "I32", blockSize: 1, typeSize: 4 },
  27: { name: "I64", blockSize: 1, typeSize: 8 },
  28: { name: "F64", blockSize: 1, typeSize: 8 },
  29: { name: "IQ1_M", blockSize: 256, typeSize: 56 },
  30: { name: "BF16", blockSize: 1, typeSize: 2 },
  34: { name: "TQ1_0", blockSize: 256, typeSize: 54 },
  35: { name: "TQ2_0", blockSize: 256, typeSize: 66 },
  39: { name: "MXFP4", blockSize: 32, typeSize: 17 },
};

/** Block layout of a ggml type, or `undefined` for a type this module does not know. */
export function ggmlTypeInfo(type: number): GgmlTypeInfo | undefined {
  return TYPE_INFO[type];
}

/** Human-readable ggml type name (`"Q8_0"`), or `"type<N>"` for unknown codes. */
export function ggmlTypeName(type: number): string {
  return TYPE_INFO[type]?.name ?? `type${type}`;
}

/** Product of the dimensions (1 for a scalar with no dims). */
export function elementCount(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) n *= d;
  return n;
}

/**
 * Bytes of tensor data for `dims` in ggml `type`. Throws for unknown types and when ne0 is
 * not a whole number of blocks, because ggml quantizes each row independently.
 */
export function tensorByteSize(type: number, dims: readonly number[]): number {
  const info = TYPE_INFO[type];
  if (!info) throw new Error(`unsupported ggml tensor type ${type}`);
  const ne0 = dims.length > 0 ? dims[0] : 1;
  if (ne0 % info.blockSize !== 0) {
    throw new Error(
      `ggml type ${info.name} needs ne0 to be a multiple of ${info.blockSize}, got ${ne0}`,
    );
  }
  return (elementCount(dims) / info.blockSize) * info.typeSize;
}

/** Round `n` up to a multiple of `alignment`. */
export function alignUp(n: number, alignment: number): number {
  const rem = n % alignment;
  return rem === 0 ? n : n + alignment - rem;
}

/** A `u8` metadata value. */
export function kvU8(value: number): GgufKv {
  return { type: GgufType.UINT8, value };
}
/** An `i8` metadata value. */
export function kvI8(value: number): GgufKv {
  return { type: GgufType.INT8, value };
}
/** A `u16` metadata value. */
export function kvU16(value: number): GgufKv {
  return { type: GgufType.UINT16, value };
}
/** An `i16` metadata value. */
export function kvI16(value: number): GgufKv {
  return { type: GgufType.INT16, value };
}
/** A `u32` metadata value. */
export function kvU32(value: number): GgufKv {
  return { type: GgufType.UINT32, value };
}
/** An `i32` metadata value. */
export function kvI32(value: number): GgufKv {
  return { type: GgufType.INT32, value };
}
/** An `f32` metadata value (stored rounded to single precision). */
export function kvF32(value: number): GgufKv {
  return { type: GgufType.FLOAT32, value };
}
/** An `f64` metadata value. */
export function kvF64(value: number): GgufKv {
  return { type: GgufType.FLOAT64, value };
}
/** A `u64` metadata value. */
export function kvU64(value: bigint | number): GgufKv {
  return { type: GgufType.UINT64, value: BigInt(value) };
}
/** An `i64` metadata value. */
export function kvI64(value: bigint | number): GgufKv {
  return { type: GgufType.INT64, value: BigInt(value) };
}
/** A `bool` metadata value. */
export function kvBool(value: boolean): GgufKv {
  return { type: GgufType.BOOL, value };
}
/** A `string` metadata value. */
export function kvString(value: string): GgufKv {
  return { type: GgufType.STRING, value };
}
/** An `array` metadata value with the given item type. */
export function kvArray(array: GgufArray): GgufKv {
  return { type: GgufType.ARRAY, ...array } as GgufKv;
}
