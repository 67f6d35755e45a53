/**
 * `--models-dir DIR`: the models a folder holds, as llama-server's router reads one. Each `.gguf`
 * at its top is a model named by its file stem; a split model (`x-00001-of-00003.gguf`, ...) is one
 * model `x` loaded from its first part; `mmproj*` projector files are no models; a folder with
 * GGUFs in it is one model named by the folder (its file picked as `--model DIR` picks one); a
 * hub cache folder (`models--owner--repo/snapshots/{commit}/`) is the model `owner/repo`.
 * Hidden entries and folders without a GGUF model are passed over.
 *
 * @example
 * ```ts ignore
 * import { scanModelsDir } from "./models_dir.ts";
 * await scanModelsDir("/models");
 * // [{ id: "qwen3-0.6b", model: "/models/qwen3-0.6b.gguf" },
 * //  { id: "Qwen/Qwen3-8B-GGUF", model: "/models/models--Qwen--Qwen3-8B-GGUF/snapshots/ab12...",
 * //    modelFile: "Qwen3-8B-Q4_K_M.gguf" }]
 * ```
 * @module
 */
import { parseHubId, pickGguf } from "../hub.ts";

/** One model found in the folder: `model` and `modelFile` as `--model`/`--model-file` take them. */
export type DirModel = { id: string; model: string; modelFile?: string };

const SPLIT = /^(.+)-(\d{5})-of-(\d{5})\.gguf$/i;
const GGUF = /\.gguf$/i;

function isProjector(name: string): boolean {
  return name.toLowerCase().startsWith("mmproj");
}

async function statOrUndefined(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.stat(path);
  } catch {
    // A dangling link or an unreadable entry is no model; the folder's other models still are.
    return undefined;
  }
}

/** Every model in `dir`, by id. Throws a one-line Error naming `--models-dir`. */
export async function scanModelsDir(dir: string): Promise<DirModel[]> {
  const where = `--models-dir ${dir}`;
  const base = dir.replace(/\/+$/, "") || "/";
  let names: { name: string; isFile: boolean; isDirectory: boolean }[];
  try {
    names = [];
    for await (const e of Deno.readDir(base)) {
      if (e.name.startsWith(".")) continue;
      const info = e.isSymlink ? await statOrUndefined(`${base}/${e.name}`) : e;
      if (info) names.push({ name: e.name, isFile: info.isFile, isDirectory: info.isDirectory });
    }
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
  names.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  const out: DirModel[] = [];
  const splits = new Map<string, string[]>();
  for (const { name, isFile, isDirectory } of names) {
    const path = `${base}/${name}`;
    if (isFile && GGUF.test(name) && !isProjector(name)) {
      const m = SPLIT.exec(name);
      if (m) splits.set(`${m[1]}\0${m[3]}`, [...splits.get(`${m[1]}\0${m[3]}`) ?? [], name]);
      else out.push({ id: name.replace(GGUF, ""), model: path });
    } else if (isDirectory) {
      const folder = await folderModel(path, name, where);
      if (folder) out.push(folder);
    }
  }
  for (const [key, parts] of splits) {
    const [stem, total] = key.split("\0");
    const first = `${stem}-00001-of-${total}.gguf`;
    const found = parts.find((p) => p.toLowerCase() === first.toLowerCase());
    if (!found) {
      throw new Error(
        `${where}: the split model ${stem} lacks its first part ${first} (found ${
          parts.join(", ")
        })`,
      );
    }
    out.push({ id: stem, model: `${base}/${found}` });
  }
  if (out.length === 0) {
    throw new Error(`${where} has no .gguf model (nor a folder holding one)`);
  }
  return out.sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** The .gguf files at the top of `dir` (links followed). */
async function ggufNames(dir: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) {
      if (!GGUF.test(e.name) || e.name.startsWith(".")) continue;
      if (e.isFile || (e.isSymlink && (await statOrUndefined(`${dir}/${e.name}`))?.isFile)) {
        out.push(e.name);
      }
    }
  } catch {
    return [];
  }
  return out;
}

/**
 * A subfolder as one model: a hub cache folder is `owner/repo` read from its current snapshot,
 * any other folder is named by itself. Undefined when it holds no GGUF model.
 */
async function folderModel(
  path: string,
  name: string,
  where: string,
): Promise<DirModel | undefined> {
  const hub = /^models--(.+)$/.exec(name)?.[1].split("--");
  const id = hub?.length === 2 && parseHubId(hub.join("/")) ? hub.join("/") : undefined;
  const dir = id ? await currentSnapshot(path) : path;
  if (!dir) return undefined;
  const files = await ggufNames(dir);
  if (!files.some((f) => !isProjector(f))) return undefined;
  // Chosen now, so a folder of two different models is refused at start-up, not at first use.
  const modelFile = pickGguf(files, undefined, `${where}: folder ${name}`);
  return { id: id ?? name, model: dir, modelFile };
}

/**
 * The snapshot a hub cache folder's `refs/main` names, else its most recently written one that
 * holds a GGUF; undefined when none does.
 */
async function currentSnapshot(repoDir: string): Promise<string | undefined> {
  try {
    const commit = (await Deno.readTextFile(`${repoDir}/refs/main`)).trim();
    const dir = `${repoDir}/snapshots/${commit}`;
    if (commit && !commit.includes("/") && (await ggufNames(dir)).length) return dir;
  } catch {
    // No refs/main: a cache written by another tool, or copied without refs.
  }
  const snapshots: { dir: string; mtime: number }[] = [];
  try {
    for await (const e of Deno.readDir(`${repoDir}/snapshots`)) {
      const dir = `${repoDir}/snapshots/${e.name}`;
      const info = await statOrUndefined(dir);
      if (info?.isDirectory && (await ggufNames(dir)).length) {
        snapshots.push({ dir, mtime: info.mtime?.getTime() ?? 0 });
      }
    }
  } catch {
    return undefined;
  }
  return snapshots.sort((a, b) => b.mtime - a.mtime)[0]?.dir;
}
