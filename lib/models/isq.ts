/**
 * Quantize-on-load (`--isq`) and weight dtype conversion (`--dtype`) through llama.cpp's own
 * `llama_model_quantize`, cached so only the first start pays for it.
 *
 * `--isq q2k|q3k|q4k|q5k|q6k|q8_0` maps to `Q2_K`, `Q3_K_M`, `Q4_K_M`, `Q5_K_M`, `Q6_K`, `Q8_0`;
 * `--dtype bf16|f16|f32` converts the weights to that float type (`auto` keeps them as stored).
 * Both pick the weight type, so giving both is refused rather than silently preferring one.
 * Only float sources (F32/F16/BF16) are converted: re-quantizing a quantized model loses quality
 * twice, and llama.cpp itself refuses it by default. The result is written under
 * `{dataDir}/isq/`, keyed by the source's real path, size and mtime and the target type, via a
 * temp name and a rename, so a replaced source is converted again and a crash leaves no
 * half-written model.
 *
 * @example
 * ```ts
 * import { applyIsq } from "./isq.ts";
 * const path = await applyIsq("model-f16.gguf", { isq: "q4k", dataDir: "/home/me/.cache/hearth" });
 * ```
 * @module
 */
import type { ServeConfig } from "../cli/flags.ts";
import { openLlama, quantizeModel } from "../../ffi/mod.ts";
import { readGgufHeader } from "../gguf/reader.ts";
import { GgmlType, ggmlTypeName } from "../gguf/types.ts";

export type IsqType = NonNullable<ServeConfig["isq"]>;
export type Dtype = ServeConfig["dtype"];

/** `llama_ftype` for each `--isq` value. */
export const ISQ_FTYPES: Readonly<Record<IsqType, number>> = {
  q2k: 10,
  q3k: 12,
  q4k: 15,
  q5k: 17,
  q6k: 18,
  q8_0: 7,
};

/** `llama_ftype` for each `--dtype` value but `auto`. */
export const DTYPE_FTYPES: Readonly<Record<Exclude<Dtype, "auto">, number>> = {
  f32: 0,
  f16: 1,
  bf16: 32,
};

// Short names of `enum llama_ftype` (llama.h), for messages and file names.
const FTYPE_NAMES: Readonly<Record<number, string>> = {
  0: "F32",
  1: "F16",
  2: "Q4_0",
  3: "Q4_1",
  7: "Q8_0",
  8: "Q5_0",
  9: "Q5_1",
  10: "Q2_K",
  11: "Q3_K_S",
  12: "Q3_K_M",
  13: "Q3_K_L",
  14: "Q4_K_S",
  15: "Q4_K_M",
  16: "Q5_K_S",
  17: "Q5_K_M",
  18: "Q6_K",
  19: "IQ2_XXS",
  20: "IQ2_XS",
  21: "Q2_K_S",
  22: "IQ3_XS",
  23: "IQ3_XXS",
  24: "IQ1_S",
  25: "IQ4_NL",
  26: "IQ3_S",
  27: "IQ3_M",
  28: "IQ2_S",
  29: "IQ2_M",
  30: "IQ4_XS",
  31: "IQ1_M",
  32: "BF16",
  36: "TQ1_0",
  37: "TQ2_0",
  38: "MXFP4_MOE",
  39: "NVFP4",
  40: "Q1_0",
  41: "Q2_0",
};

const FLOAT_FTYPES = new Set([0, 1, 32]);
const FLOAT_TENSORS = new Set<number>([GgmlType.F32, GgmlType.F16, GgmlType.BF16]);

/** Short name of a `llama_ftype` (`"Q4_K_M"`), or `"ftype N"` for one this table lacks. */
export function ftypeName(ftype: number): string {
  return FTYPE_NAMES[ftype] ?? `ftype ${ftype}`;
}

/** The weight type asked for by `--isq`/`--dtype`. */
export type WeightTarget = {
  ftype: number;
  /** The flag that asked for it, for messages: `--isq q4k`. */
  flag: string;
  /** The flag value, used in cached file names: `q4k`. */
  label: string;
};

/**
 * The `llama_ftype` that `isq`/`dtype` ask for, or undefined when the model loads as stored.
 * Throws when both are given: each picks the weight type, and preferring one silently would
 * hide a mistake in the command line.
 */
export function weightTarget(isq?: IsqType, dtype: Dtype = "auto"): WeightTarget | undefined {
  if (isq && dtype !== "auto") {
    throw new Error(
      `--isq ${isq} and --dtype ${dtype} both pick the weight type; give only one of them`,
    );
  }
  if (isq) {
    const ftype = ISQ_FTYPES[isq];
    if (ftype === undefined) throw new Error(`unknown --isq type ${isq}`);
    return { ftype, flag: `--isq ${isq}`, label: isq };
  }
  if (dtype === "auto") return undefined;
  const ftype = DTYPE_FTYPES[dtype];
  if (ftype === undefined) throw new Error(`unknown --dtype ${dtype}`);
  return { ftype, flag: `--dtype ${dtype}`, label: dtype };
}

/** What a GGUF's weights are stored as. */
export type StoredType = {
  /** `general.file_type`, else inferred from the tensors (undefined when it cannot be). */
  ftype?: number;
  /** `"Q8_0"`, `"F16"`, ... */
  name: string;
  /** Every tensor is F32, F16 or BF16, so the file can be quantized or converted. */
  float: boolean;
};

/**
 * Reads only the GGUF header. Float-ness is judged from the tensors themselves, since
 * `general.file_type` is optional and some converters leave it stale.
 */
export async function storedType(path: string): Promise<StoredType> {
  const header = await readGgufHeader(path);
  const kv = header.metadata.get("general.file_type");
  const declared = kv && (typeof kv.value === "number" || typeof kv.value === "bigint")
    ? Number(kv.value)
    : undefined;
  const float = header.tensors.every((t) => FLOAT_TENSORS.has(t.type));
  // The most common type among matrices decides, as 1-D norms stay F32 in every ftype.
  const counts = new Map<number, number>();
  for (const t of header.tensors) {
    if (t.dims.filter((d) => d > 1).length < 2) continue;
    counts.set(t.type, (counts.get(t.type) ?? 0) + 1);
  }
  const dominant = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0];
  let ftype = declared;
  if (ftype === undefined && float) {
    ftype = dominant === GgmlType.F16 ? 1 : dominant === GgmlType.BF16 ? 32 : 0;
  }
  const name = ftype !== undefined
    ? ftypeName(ftype)
    : dominant !== undefined
    ? ggmlTypeName(dominant)
    : "unknown";
  return { ftype, name, float: float && (ftype === undefined || FLOAT_FTYPES.has(ftype)) };
}

export type IsqOptions = {
  isq?: IsqType;
  dtype?: Dtype;
  dataDir: string;
  /** llama.cpp quantize threads; default 0 = all cores. */
  threads?: number;
  /** One-line status messages; default stderr. */
  log?: (line: string) => void;
};

function stderrLog(line: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(`hearth: ${line}\n`));
}

async function cacheKey(path: string, ftype: number): Promise<string> {
  const real = await Deno.realPath(path);
  const st = await Deno.stat(real);
  const key = JSON.stringify([real, st.size, st.mtime?.getTime() ?? 0, ftype]);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key));
  return Array.from(new Uint8Array(digest).subarray(0, 8), (b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** Where the converted copy of `path` for `target` lives (it may not exist yet). */
export async function isqCachePath(
  path: string,
  target: WeightTarget,
  dataDir: string,
): Promise<string> {
  const stem = path.slice(path.lastIndexOf("/") + 1).replace(/\.gguf$/i, "");
  return `${dataDir}/isq/${stem}.${target.label}.${await cacheKey(path, target.ftype)}.gguf`;
}

/**
 * The path to load for `path` under `--isq`/`--dtype`: `path` itself when nothing is asked or
 * the weights already have the asked float type, else the cached converted copy, made on first
 * use with llama.cpp (off the event loop). Throws a one-line Error for a quantized source.
 */
export async function applyIsq(path: string, options: IsqOptions): Promise<string> {
  const target = weightTarget(options.isq, options.dtype);
  if (!target) return path;
  const log = options.log ?? stderrLog;
  const stored = await storedType(path);
  if (!stored.float) {
    throw new Error(
      `model is already quantized (${stored.name}); ${target.flag.split(" ")[0]} needs an ` +
        `F16/BF16/F32 model`,
    );
  }
  // --dtype f16 on an F16 model: nothing to convert.
  if (stored.ftype === target.ftype) return path;
  const out = await isqCachePath(path, target, options.dataDir);
  try {
    await Deno.stat(out);
    log(`using cached ${ftypeName(target.ftype)} weights ${out}`);
    return out;
  } catch {
    // first use
  }
  await Deno.mkdir(`${options.dataDir}/isq`, { recursive: true });
  const tmp = `${out}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  log(`${target.flag}: converting ${stored.name} weights to ${ftypeName(target.ftype)} (cached)`);
  const llama = openLlama();
  const start = performance.now();
  try {
    llama.recentLog.length = 0;
    const status = await quantizeModel(llama, path, tmp, {
      ftype: target.ftype,
      nthread: options.threads ?? 0,
    });
    if (status !== 0) {
      const why = llama.recentLog.slice(-2).join("; ");
      throw new Error(
        `llama.cpp could not convert ${path} to ${ftypeName(target.ftype)}` +
          (why ? `: ${why}` : ` (status ${status})`),
      );
    }
    await Deno.rename(tmp, out);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  log(`converted in ${((performance.now() - start) / 1000).toFixed(1)}s: ${out}`);
  return out;
}
