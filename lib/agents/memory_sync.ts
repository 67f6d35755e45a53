/**
 * How the memory's index (memory_index.ts) follows its notes directory (memory.ts): `reconcile`
 * compares the directory with the index by mtime and size and reindexes what changed, skipping (and
 * logging once) the files that break the rules of a note; `watchDir` calls back once the directory
 * settles after edits made outside the server. The files are the source of truth.
 *
 * @example
 * ```ts ignore
 * import { reconcile, watchDir } from "./memory_sync.ts";
 * const changed = reconcile(notes); // names whose index entry changed
 * const watch = watchDir(notes.dir, () => reconcile(notes));
 * await watch.close();
 * ```
 * @module
 */
import { join } from "node:path";
import type { NoteIndex } from "./memory_index.ts";
import {
  badContent,
  fileNote,
  type FileStat,
  lstatOrUndefined,
  MAX_NOTE_BYTES,
  MAX_NOTES,
  NAME_RULE,
  strictUtf8,
} from "./memory_notes.ts";

/** How long the watcher waits for the directory to settle before reindexing. */
export const WATCH_DEBOUNCE_MS = 200;

/** A notes directory and what is known of it. */
export type NoteFiles = {
  dir: string;
  index: NoteIndex;
  /** Valid note files as of the last scan, kept current by put/remove: `files` of the events. */
  known: Map<string, FileStat>;
  /** Skipped files already logged, with why, so a watcher pass does not log them again. */
  warned: Map<string, string>;
};

/** Logs that `file` is not taken as a note, once for the same reason. */
function skip(notes: NoteFiles, file: string, why: string) {
  if (notes.warned.get(file) === why) return;
  notes.warned.set(file, why);
  console.error(`hearth: memory: skipping ${join(notes.dir, file)}: ${why}`);
}

/** Brings the index in line with the directory; returns the names it changed. */
export function reconcile(notes: NoteFiles): string[] {
  const { dir, index, known, warned } = notes;
  const found = new Map<string, FileStat>();
  const seen = new Set<string>();
  for (const entry of Deno.readDirSync(dir)) {
    // Hidden files are the index, temporary files of writes, editors' swap files.
    if (entry.name.startsWith(".") || !entry.name.endsWith(".md")) continue;
    seen.add(entry.name);
    const name = fileNote(entry.name);
    if (name === undefined) {
      skip(notes, entry.name, `not a valid note name (${NAME_RULE}, not "search")`);
      continue;
    }
    // A symlink could point anywhere on the host; the API would then serve it.
    if (!entry.isFile) {
      skip(notes, entry.name, "not a regular file");
      continue;
    }
    const st = lstatOrUndefined(join(dir, entry.name));
    if (!st?.isFile) continue; // gone (or replaced) since the listing
    if (st.size > MAX_NOTE_BYTES) {
      skip(notes, entry.name, `${st.size} bytes, over the ${MAX_NOTE_BYTES}-byte limit`);
      continue;
    }
    found.set(name, { bytes: st.size, mtime: st.mtime?.getTime() ?? 0 });
  }
  for (const file of warned.keys()) if (!seen.has(file)) warned.delete(file);

  const names = [...found.keys()].sort();
  for (const name of names.slice(MAX_NOTES)) {
    skip(
      notes,
      `${name}.md`,
      `more than ${MAX_NOTES} notes (the first ${MAX_NOTES} by name are kept)`,
    );
  }
  const keep = new Set(names.slice(0, MAX_NOTES));
  const indexed = index.stats();
  const changed: string[] = [];
  index.tx(() => {
    for (const name of keep) {
      const s = found.get(name)!;
      const old = indexed.get(name);
      if (old && old.bytes === s.bytes && old.mtime === s.mtime) continue;
      let data: Uint8Array;
      try {
        data = Deno.readFileSync(join(dir, `${name}.md`));
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
        found.delete(name);
        keep.delete(name);
        continue;
      }
      const why = badContent(data);
      if (why) {
        skip(notes, `${name}.md`, why);
        found.delete(name);
        keep.delete(name);
        continue;
      }
      // The size read may differ from the one listed when the file is being written: record
      // what was indexed, so the next pass sees the difference if the write goes on.
      index.upsert(name, { bytes: data.length, mtime: s.mtime }, strictUtf8.decode(data));
      found.set(name, { bytes: data.length, mtime: s.mtime });
      changed.push(name);
    }
    for (const name of indexed.keys()) {
      if (!keep.has(name) && index.drop(name)) changed.push(name);
    }
  });
  known.clear();
  for (const [name, s] of found) known.set(name, s);
  return changed;
}

/**
 * Watches `dir` (throws when it cannot): any non-hidden path changing schedules one call of
 * `settled` WATCH_DEBOUNCE_MS after the last change. `close` stops it and waits for the watch loop.
 */
export function watchDir(dir: string, settled: () => void): { close(): Promise<void> } {
  const watcher = Deno.watchFs(dir, { recursive: false });
  let closed = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const fire = () => {
    timer = undefined;
    if (!closed) settled();
  };
  const watching = (async () => {
    try {
      for await (const ev of watcher) {
        if (ev.kind === "access") continue;
        const ours = ev.paths.every((p) => (p.split(/[/\\]/).pop() ?? "").startsWith("."));
        if (ours) continue;
        if (timer !== undefined) clearTimeout(timer);
        timer = setTimeout(fire, WATCH_DEBOUNCE_MS);
      }
    } catch (err) {
      // The directory vanished or the watcher broke: notes still work, only edits made
      // outside the server go unseen until the next start.
      if (!closed) console.error(`hearth: memory: watching ${dir} stopped:`, err);
    }
  })();
  return {
    async close() {
      if (closed) return;
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      try {
        watcher.close();
      } catch { /* already closed */ }
      await watching;
    },
  };
}
