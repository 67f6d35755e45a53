/**
 * The prompt cache beyond the slots: sequences' KV states (`llama_state_seq_get_data` bytes),
 * each with the tokens it holds, in host memory (`--cache-ram`) and optionally on disk
 * (`--cache-dir`, bounded by `--cache-disk`). The scheduler saves a slot's state here before
 * another request takes the slot, and restores the entry sharing the longest prefix with a new
 * prompt, so an agent's 20-50k-token prefix is computed once per session, not once per idle gap.
 *
 * Both tiers are LRU within their byte bounds. The disk tier is written behind the memory tier
 * (one file at a time, off the decode loop) and indexed again at start-up, so it survives a
 * restart: each file records the model fingerprint and KV type it was made with, and a file made
 * with others is a miss (and is never loaded into llama.cpp). A file that cannot be read is
 * dropped from the index.
 *
 * `exact` lookups serve models whose cache llama.cpp cannot trim (recurrent, hybrid, sliding
 * window): there an entry is usable only when all its tokens start the prompt, so entries act as
 * checkpoints.
 *
 * @example
 * ```ts
 * import { openPromptCache } from "./prompt_cache.ts";
 * declare const state: Uint8Array;
 * const cache = openPromptCache({ ramBytes: 1 << 30, fingerprint: "model+f16" });
 * cache.put(Int32Array.from([1, 2, 3, 4]), state);
 * const hit = cache.find(Int32Array.from([1, 2, 3, 9, 9]), { limit: 4, exact: false });
 * hit?.common; // 3
 * ```
 * @module
 */

export type PromptCacheOptions = {
  /** Bytes of states kept in host memory; 0 keeps none there (the disk tier still works). */
  ramBytes: number;
  /** The disk tier's directory (entries of this fingerprint go in a folder of their own). */
  dir?: string;
  /** Bytes of states kept on disk. */
  diskBytes?: number;
  /** What a state must have been made with to be loaded: the model and the KV cache type. */
  fingerprint: string;
  /** Called after each state reaches the disk. */
  onWritten?: () => void;
};

export type Tier = "ram" | "disk";

export type TierStats = {
  hits: number;
  misses: number;
  /** Bytes of states held in this tier now. */
  bytes: number;
  entries: number;
  /** Bytes this tier may hold. */
  capacity: number;
  /** Prompt tokens restored from this tier instead of computed. */
  tokens: number;
};

export type PromptCacheStats = { ram: TierStats; disk?: TierStats; dir?: string };

/** A lookup's answer: the entry and how many prompt tokens it serves. */
export type CacheHit = { id: number; common: number; length: number; tier: Tier };

export type PromptCache = {
  /**
   * The entry sharing the longest prefix with `prompt`, counting at most `limit` tokens; with
   * `exact`, only entries whose every token starts the prompt (and fit in `limit`).
   */
  find(prompt: Int32Array, o: { limit: number; exact: boolean }): CacheHit | undefined;
  /** Whether an entry already holds `tokens` (the same or more, with these first). */
  covers(tokens: ArrayLike<number>, exact: boolean): boolean;
  /** The state and tokens of entry `id`; reads the disk tier when memory lacks it. */
  take(id: number): { state: Uint8Array; tokens: Int32Array } | undefined;
  /** Keeps a state; with `exact` false, entries it extends (its prefixes) are dropped. */
  put(tokens: Int32Array, state: Uint8Array, exact: boolean): void;
  /** Forgets an entry llama.cpp refused. */
  drop(id: number): void;
  /** Counts a lookup: the tier that served it, or a miss in every tier. */
  count(hit: CacheHit | undefined, restored: number): void;
  stats(): PromptCacheStats;
  /** Resolves when every disk write queued so far is on disk. */
  flushed(): Promise<void>;
};

type Entry = {
  id: number;
  tokens: Int32Array;
  bytes: number;
  used: number;
  /** The state in memory, when the memory tier holds it. */
  ram?: Uint8Array;
  /** The state's file, once written (or found at start-up). */
  file?: string;
  /** The state while its disk write waits its turn (memory may have dropped it meanwhile). */
  pending?: Uint8Array;
};

const MAGIC = "HKV1";
const FILE_EXT = ".hkv";

/** `<dir>/<fingerprint-as-folder-name>`: entries of other models and cache types stay apart. */
export function cacheFolder(dir: string, fingerprint: string): string {
  return `${dir}/${fingerprint.replace(/[^A-Za-z0-9._-]/g, "_")}`;
}

/** Length of the common prefix of `a` and `b`, at most `limit`. */
function commonPrefix(a: ArrayLike<number>, b: ArrayLike<number>, limit: number): number {
  const max = Math.min(a.length, b.length, limit);
  let n = 0;
  while (n < max && a[n] === b[n]) n++;
  return n;
}

/**
 * A cache file: `HKV1`, a u32 header length, the JSON header `{fingerprint, tokens, stateBytes}`,
 * the tokens as i32, then the state.
 */
export function encodeEntry(
  fingerprint: string,
  tokens: Int32Array,
  state: Uint8Array,
): Uint8Array {
  const header = new TextEncoder().encode(
    JSON.stringify({ fingerprint, tokens: tokens.length, stateBytes: state.length }),
  );
  const out = new Uint8Array(8 + header.length + tokens.length * 4 + state.length);
  out.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(out.buffer).setUint32(4, header.length, true);
  out.set(header, 8);
  const at = 8 + header.length;
  out.set(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.length * 4), at);
  out.set(state, at + tokens.length * 4);
  return out;
}

/**
 * Writes what `encodeEntry` would, without copying the state into one more buffer (a 30k-token
 * state is hundreds of MiB, and the copy would run on the decode loop's thread).
 */
async function writeEntry(
  path: string,
  fingerprint: string,
  tokens: Int32Array,
  state: Uint8Array,
): Promise<void> {
  const header = new TextEncoder().encode(
    JSON.stringify({ fingerprint, tokens: tokens.length, stateBytes: state.length }),
  );
  const head = new Uint8Array(8 + header.length);
  head.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(head.buffer).setUint32(4, header.length, true);
  head.set(header, 8);
  const toks = new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.length * 4);
  const f = await Deno.open(path, { write: true, create: true, truncate: true });
  try {
    for (const part of [head, toks, state]) {
      let at = 0;
      while (at < part.length) at += await f.write(part.subarray(at));
    }
  } finally {
    f.close();
  }
}

/** Reads a cache file's header and tokens (and its state with `withState`); throws when bad. */
export function decodeEntry(
  bytes: Uint8Array,
  withState: boolean,
): { fingerprint: string; tokens: Int32Array; state?: Uint8Array; stateBytes: number } {
  if (new TextDecoder().decode(bytes.subarray(0, 4)) !== MAGIC) throw new Error("not a cache file");
  const hlen = new DataView(bytes.buffer, bytes.byteOffset).getUint32(4, true);
  const h = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + hlen)));
  const n = Number(h.tokens);
  const at = 8 + hlen;
  const tokens = new Int32Array(n);
  new Uint8Array(tokens.buffer).set(bytes.subarray(at, at + n * 4));
  if (tokens.length !== n) throw new Error("truncated tokens");
  const s = at + n * 4;
  const state = withState ? bytes.subarray(s, s + Number(h.stateBytes)) : undefined;
  if (state && state.length !== Number(h.stateBytes)) throw new Error("truncated state");
  return { fingerprint: String(h.fingerprint), tokens, state, stateBytes: Number(h.stateBytes) };
}

/** Reads the first bytes of a file: enough for the header and tokens of an entry. */
function readHead(path: string): Uint8Array {
  const f = Deno.openSync(path);
  try {
    const first = new Uint8Array(8);
    if (f.readSync(first) !== 8) throw new Error("truncated");
    const hlen = new DataView(first.buffer).getUint32(4, true);
    const header = new Uint8Array(hlen);
    readFull(f, header);
    const h = JSON.parse(new TextDecoder().decode(header));
    const toks = new Uint8Array(Number(h.tokens) * 4);
    readFull(f, toks);
    const out = new Uint8Array(8 + hlen + toks.length);
    out.set(first, 0);
    out.set(header, 8);
    out.set(toks, 8 + hlen);
    return out;
  } finally {
    f.close();
  }
}

function readFull(f: Deno.FsFile, into: Uint8Array): void {
  let got = 0;
  while (got < into.length) {
    const n = f.readSync(into.subarray(got));
    if (n === null || n === 0) throw new Error("truncated");
    got += n;
  }
}

export function openPromptCache(o: PromptCacheOptions): PromptCache {
  const entries = new Map<number, Entry>();
  let nextId = 1;
  let clock = 0;
  const ram: TierStats = {
    hits: 0,
    misses: 0,
    bytes: 0,
    entries: 0,
    capacity: o.ramBytes,
    tokens: 0,
  };
  const folder = o.dir ? cacheFolder(o.dir, o.fingerprint) : undefined;
  const diskCap = o.diskBytes ?? 0;
  const disk: TierStats | undefined = folder
    ? { hits: 0, misses: 0, bytes: 0, entries: 0, capacity: diskCap, tokens: 0 }
    : undefined;
  let writes: Promise<void> = Promise.resolve();

  if (folder) {
    Deno.mkdirSync(folder, { recursive: true });
    // Index what an earlier run left, oldest first so the LRU order survives the restart.
    const found: { file: string; mtime: number; size: number }[] = [];
    for (const e of Deno.readDirSync(folder)) {
      if (!e.isFile) continue;
      const file = `${folder}/${e.name}`;
      if (!e.name.endsWith(FILE_EXT)) {
        if (e.name.endsWith(".tmp")) Deno.removeSync(file); // a write cut short by a stop
        continue;
      }
      const st = Deno.statSync(file);
      found.push({ file, mtime: st.mtime?.getTime() ?? 0, size: st.size });
    }
    found.sort((a, b) => a.mtime - b.mtime);
    for (const f of found) {
      try {
        const h = decodeEntry(readHead(f.file), false);
        if (h.fingerprint !== o.fingerprint) continue; // another model or cache type: a miss
        const e: Entry = { id: nextId++, tokens: h.tokens, bytes: h.stateBytes, used: ++clock };
        e.file = f.file;
        entries.set(e.id, e);
        disk!.bytes += e.bytes;
        disk!.entries++;
      } catch {
        // unreadable: not an entry
      }
    }
    evictDisk();
  }

  function usable(e: Entry): boolean {
    return e.ram !== undefined || e.file !== undefined || e.pending !== undefined;
  }

  function find(prompt: Int32Array, q: { limit: number; exact: boolean }): CacheHit | undefined {
    let best: Entry | undefined;
    let bestCommon = 0;
    for (const e of entries.values()) {
      if (!usable(e)) continue;
      if (q.exact && e.tokens.length > q.limit) continue;
      const common = commonPrefix(e.tokens, prompt, q.limit);
      if (q.exact && common < e.tokens.length) continue;
      // Ties go to the entry in memory, then to the shorter one (less to load).
      if (
        common > bestCommon ||
        (best && common === bestCommon && common > 0 &&
          ((e.ram && !best.ram) ||
            (!!e.ram === !!best.ram && e.tokens.length < best.tokens.length)))
      ) {
        best = e;
        bestCommon = common;
      }
    }
    if (!best || bestCommon === 0) return undefined;
    return {
      id: best.id,
      common: bestCommon,
      length: best.tokens.length,
      tier: best.ram ? "ram" : "disk",
    };
  }

  function covers(tokens: ArrayLike<number>, exact: boolean): boolean {
    for (const e of entries.values()) {
      if (!usable(e)) continue;
      if (exact ? e.tokens.length !== tokens.length : e.tokens.length < tokens.length) continue;
      if (commonPrefix(e.tokens, tokens, tokens.length) === tokens.length) {
        e.used = ++clock;
        return true;
      }
    }
    return false;
  }

  function take(id: number): { state: Uint8Array; tokens: Int32Array } | undefined {
    const e = entries.get(id);
    if (!e) return undefined;
    e.used = ++clock;
    if (e.ram) return { state: e.ram, tokens: e.tokens };
    if (e.pending) return { state: e.pending, tokens: e.tokens };
    if (!e.file) return undefined;
    try {
      const d = decodeEntry(Deno.readFileSync(e.file), true);
      if (d.fingerprint !== o.fingerprint || d.state!.length !== e.bytes) {
        throw new Error("changed");
      }
      // Back in memory: the next turn of this session finds it there.
      if (o.ramBytes >= e.bytes) {
        e.ram = d.state!;
        ram.bytes += e.bytes;
        ram.entries++;
        evictRam(e);
      }
      return { state: d.state!, tokens: e.tokens };
    } catch {
      drop(id);
      return undefined;
    }
  }

  function put(tokens: Int32Array, state: Uint8Array, exact: boolean): void {
    if (!exact) {
      // A longer state serves every prompt its prefixes served.
      for (const e of [...entries.values()]) {
        if (
          e.tokens.length <= tokens.length &&
          commonPrefix(e.tokens, tokens, e.tokens.length) === e.tokens.length
        ) {
          drop(e.id);
        }
      }
    }
    const e: Entry = { id: nextId++, tokens, bytes: state.length, used: ++clock };
    if (o.ramBytes >= e.bytes) {
      e.ram = state;
      ram.bytes += e.bytes;
      ram.entries++;
    }
    entries.set(e.id, e);
    if (folder && diskCap >= e.bytes) queueWrite(e, state);
    evictRam(e);
    if (!usable(e)) entries.delete(e.id);
  }

  /** Writes `e` to disk behind the memory tier; one write at a time, in order. */
  function queueWrite(e: Entry, state: Uint8Array): void {
    e.pending = state;
    writes = writes.then(async () => {
      if (!entries.has(e.id)) return; // dropped (superseded) before its turn
      const file = `${folder}/${crypto.randomUUID()}${FILE_EXT}`;
      try {
        await writeEntry(`${file}.tmp`, o.fingerprint, e.tokens, state);
        await Deno.rename(`${file}.tmp`, file);
      } catch (err) {
        console.error(`hearth: prompt cache: could not write ${file}: ${(err as Error).message}`);
        await Deno.remove(`${file}.tmp`).catch(() => {});
        e.pending = undefined;
        if (!usable(e)) entries.delete(e.id);
        return;
      }
      e.pending = undefined;
      if (!entries.has(e.id)) {
        await Deno.remove(file).catch(() => {});
        return;
      }
      e.file = file;
      disk!.bytes += e.bytes;
      disk!.entries++;
      evictDisk(e);
      o.onWritten?.();
    });
  }

  /** Drops memory copies, least recently used first, until the tier fits (`keep` stays). */
  function evictRam(keep?: Entry): void {
    if (ram.bytes <= o.ramBytes) return;
    const order = [...entries.values()].filter((e) => e.ram && e !== keep).sort((a, b) =>
      a.used - b.used
    );
    for (const e of order) {
      if (ram.bytes <= o.ramBytes) break;
      e.ram = undefined;
      ram.bytes -= e.bytes;
      ram.entries--;
      if (!usable(e)) entries.delete(e.id);
    }
  }

  function evictDisk(keep?: Entry): void {
    if (!disk || disk.bytes <= diskCap) return;
    const order = [...entries.values()].filter((e) => e.file && e !== keep).sort((a, b) =>
      a.used - b.used
    );
    for (const e of order) {
      if (disk.bytes <= diskCap) break;
      removeFile(e);
      if (!e.ram) entries.delete(e.id);
    }
  }

  function removeFile(e: Entry): void {
    if (!e.file) return;
    try {
      Deno.removeSync(e.file);
    } catch {
      // already gone
    }
    e.file = undefined;
    disk!.bytes -= e.bytes;
    disk!.entries--;
  }

  function drop(id: number): void {
    const e = entries.get(id);
    if (!e) return;
    entries.delete(id);
    e.pending = undefined;
    if (e.ram) {
      ram.bytes -= e.bytes;
      ram.entries--;
      e.ram = undefined;
    }
    removeFile(e);
  }

  function count(hit: CacheHit | undefined, restored: number): void {
    if (hit?.tier === "ram") {
      ram.hits++;
      ram.tokens += restored;
      return;
    }
    ram.misses++;
    if (!disk) return;
    if (hit?.tier === "disk") {
      disk.hits++;
      disk.tokens += restored;
    } else disk.misses++;
  }

  return {
    find,
    covers,
    take,
    put,
    drop,
    count,
    stats: () => ({
      ram: { ...ram },
      ...(disk ? { disk: { ...disk }, dir: folder } : {}),
    }),
    flushed: () => writes,
  };
}

/** One log line on the cache's tiers, e.g. "8.0 GiB in memory, 16.0 GiB in /var/cache/kv". */
export function describePromptCache(o: PromptCacheOptions, kvTrim: boolean): string {
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;
  const tiers = [
    o.ramBytes > 0 ? `${gib(o.ramBytes)} in memory` : "none in memory (--cache-ram 0)",
    ...(o.dir ? [`${gib(o.diskBytes ?? 0)} in ${cacheFolder(o.dir, o.fingerprint)}`] : []),
  ];
  return tiers.join(", ") +
    (kvTrim ? "" : "; this model's cache cannot be trimmed, so prompts keep checkpoints");
}
