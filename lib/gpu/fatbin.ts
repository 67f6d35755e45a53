/**
 * What GPU code a CUDA library carries, read from the file itself: the ELF `.nv_fatbin` section
 * holds one fat binary per compiled unit (header magic `0xBA55ED50`), each a list of entries that
 * are either machine code (SASS, kind 2) for one `sm_XY` or PTX (kind 1) for one `compute_XY` at a
 * PTX ISA version. The driver runs SASS of the GPU's own major arch and compiles PTX of an arch no
 * higher than the GPU's, if it knows that ISA (`verdict.ts` applies the rule). Also reads the
 * library's `DT_NEEDED` entries, the runtime libraries it cannot run without. Only headers are
 * read (the payloads are skipped by offset), so a 374 MB library takes milliseconds.
 *
 * @example
 * ```ts
 * import { readFatbin } from "./fatbin.ts";
 * const facts = await readFatbin("/cache/llama-cuda-3.22.1/libggml-cuda.so");
 * facts.sass; // ["8.6", "8.9", "12.0", "12.1"]
 * facts.ptx; // [{ arch: "7.5", isa: "9.1" }, { arch: "8.0", isa: "9.1" }, { arch: "9.0", isa: "9.1" }]
 * facts.needed; // ["libggml-base.so", "libcudart.so.13", "libcublas.so.13", "libcuda.so.1", ...]
 * ```
 * @module
 */

export type PtxEntry = { arch: string; isa: string };

export type FatbinFacts = {
  /** Compute capabilities with machine code, ascending (`"8.6"`). */
  sass: string[];
  /** PTX entries, ascending by arch. */
  ptx: PtxEntry[];
  /** The library's `DT_NEEDED` sonames, in file order. */
  needed: string[];
  /** How many fat binaries the section holds (one per CUDA translation unit). */
  containers: number;
};

const FATBIN_MAGIC = 0xBA55ED50;
const KIND_PTX = 1;
const KIND_SASS = 2;
const SHT_DYNAMIC = 6;
const DT_NEEDED = 1;
const DT_STRTAB = 5;

type Section = { name: string; type: number; addr: bigint; offset: number; size: number };

/** Reads the facts of a CUDA library; throws with the path when it is not such a library. */
export async function readFatbin(path: string): Promise<FatbinFacts> {
  using file = await Deno.open(path);
  const at = (offset: number, length: number) => readAt(file, offset, length, path);
  const sections = await elfSections(at, path);
  const fat = sections.find((s) => s.name === ".nv_fatbin");
  if (!fat) throw new Error(`${path} has no .nv_fatbin section: it carries no CUDA code`);
  const sass = new Set<string>();
  const ptx = new Map<string, PtxEntry>();
  let containers = 0;
  let p = fat.offset;
  const end = fat.offset + fat.size;
  while (p + 16 <= end) {
    const h = await at(p, 16);
    if (h.getUint32(0, true) !== FATBIN_MAGIC) {
      // Fat binaries are 8-byte aligned and padding is zero; anything else ends the walk.
      if (h.getUint32(0, true) === 0) {
        p += 8;
        continue;
      }
      throw new Error(`${path}: bad fat binary magic at offset ${p}`);
    }
    containers++;
    const headerSize = h.getUint16(6, true);
    const body = Number(h.getBigUint64(8, true));
    let q = p + headerSize;
    const stop = q + body;
    while (q + 32 <= stop) {
      const e = await at(q, 32);
      const kind = e.getUint16(0, true);
      const entryHeader = e.getUint32(4, true);
      const payload = Number(e.getBigUint64(8, true));
      const minor = e.getUint16(24, true);
      const major = e.getUint16(26, true);
      const arch = capability(e.getUint32(28, true));
      if (kind === KIND_SASS) sass.add(arch);
      else if (kind === KIND_PTX) {
        ptx.set(`${arch}/${major}.${minor}`, { arch, isa: `${major}.${minor}` });
      }
      if (entryHeader === 0) throw new Error(`${path}: empty fat binary entry at offset ${q}`);
      q += entryHeader + payload;
    }
    p = stop;
  }
  if (containers === 0) throw new Error(`${path}: the .nv_fatbin section holds no fat binary`);
  return {
    sass: [...sass].sort(byCapability),
    ptx: [...ptx.values()].sort((a, b) =>
      byCapability(a.arch, b.arch) || byCapability(a.isa, b.isa)
    ),
    needed: await neededLibraries(at, sections),
    containers,
  };
}

/** `90` -> `"9.0"`, `121` -> `"12.1"`. */
export function capability(sm: number): string {
  return `${Math.floor(sm / 10)}.${sm % 10}`;
}

/** Orders `"8.6"` < `"9.0"` < `"12.0"` numerically. */
export function byCapability(a: string, b: string): number {
  const [am, an] = a.split(".").map(Number);
  const [bm, bn] = b.split(".").map(Number);
  return am - bm || an - bn;
}

type ReadAt = (offset: number, length: number) => Promise<DataView>;

async function readAt(
  file: Deno.FsFile,
  offset: number,
  length: number,
  path: string,
): Promise<DataView> {
  const buf = new Uint8Array(length);
  await file.seek(offset, Deno.SeekMode.Start);
  let got = 0;
  while (got < length) {
    const n = await file.read(buf.subarray(got));
    if (n === null) throw new Error(`${path}: truncated (wanted ${length} bytes at ${offset})`);
    got += n;
  }
  return new DataView(buf.buffer);
}

async function elfSections(at: ReadAt, path: string): Promise<Section[]> {
  const h = await at(0, 64);
  if (h.getUint32(0, false) !== 0x7F454C46) throw new Error(`${path} is not an ELF file`);
  if (h.getUint8(4) !== 2 || h.getUint8(5) !== 1) {
    throw new Error(`${path} is not a 64-bit little-endian ELF file`);
  }
  const shoff = Number(h.getBigUint64(0x28, true));
  const shentsize = h.getUint16(0x3A, true);
  const shnum = h.getUint16(0x3C, true);
  const shstrndx = h.getUint16(0x3E, true);
  const table = await at(shoff, shentsize * shnum);
  const raw = Array.from({ length: shnum }, (_, i) => {
    const o = i * shentsize;
    return {
      nameOff: table.getUint32(o, true),
      type: table.getUint32(o + 4, true),
      addr: table.getBigUint64(o + 0x10, true),
      offset: Number(table.getBigUint64(o + 0x18, true)),
      size: Number(table.getBigUint64(o + 0x20, true)),
    };
  });
  const names = raw[shstrndx];
  const strtab = new Uint8Array((await at(names.offset, names.size)).buffer);
  return raw.map((s) => ({ ...s, name: cStringAt(strtab, s.nameOff) }));
}

async function neededLibraries(at: ReadAt, sections: Section[]): Promise<string[]> {
  const dyn = sections.find((s) => s.type === SHT_DYNAMIC);
  if (!dyn) return [];
  const d = await at(dyn.offset, dyn.size);
  const needed: number[] = [];
  let strAddr: bigint | undefined;
  for (let o = 0; o + 16 <= dyn.size; o += 16) {
    const tag = Number(d.getBigInt64(o, true));
    const val = d.getBigUint64(o + 8, true);
    if (tag === 0) break;
    if (tag === DT_NEEDED) needed.push(Number(val));
    if (tag === DT_STRTAB) strAddr = val;
  }
  const dynstr = sections.find((s) => s.addr === strAddr) ??
    sections.find((s) => s.name === ".dynstr");
  if (!dynstr) return [];
  const strs = new Uint8Array((await at(dynstr.offset, dynstr.size)).buffer);
  return needed.map((off) => cStringAt(strs, off));
}

function cStringAt(bytes: Uint8Array, offset: number): string {
  let end = offset;
  while (end < bytes.length && bytes[end] !== 0) end++;
  return new TextDecoder().decode(bytes.subarray(offset, end));
}
