/**
 * Fails when two folders of the product import each other, directly or through others, or when an
 * import goes against the layers: `ffi/` imports only `ffi/`; `lib/` never imports `routes/`,
 * `tools/` or `main.ts`; `routes/` never imports `tools/` or `main.ts`; nothing in the product
 * imports `tests/` or `bench/`.
 *
 * A folder is the unit of layering here (`routes`, `lib/chat`, `lib/engine`, `ffi`, ...; a
 * package's subfolders belong to it): modules inside one folder may import each other freely, but the graph between folders must stay acyclic
 * so that data flows one way (route → lib → ffi). Tests and benches are leaves and not checked.
 *
 * @example
 * ```sh
 * deno run -A tools/check_imports.ts       # exit 0, or the cycles and the imports behind them
 * ```
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, posix, relative } from "node:path";

/** Roots whose folders are checked. */
export const ROOTS = ["main.ts", "routes", "lib", "ffi", "tools", "ui"];

/** Every `.ts` file under the roots, relative to `base`. */
export function productFiles(base: string): string[] {
  const out: string[] = [];
  const visit = (rel: string) => {
    const abs = join(base, rel);
    let st;
    try {
      st = statSync(abs);
    } catch {
      return;
    }
    if (st.isDirectory()) {
      for (const name of readdirSync(abs).sort()) visit(join(rel, name));
    } else if (rel.endsWith(".ts")) out.push(rel);
  };
  for (const r of ROOTS) visit(r);
  return out;
}

/** Relative module specifiers a source imports (static, dynamic, re-exports and workers). */
export function importsOf(source: string): string[] {
  const specs = new Set<string>();
  const patterns = [
    /\bfrom\s+["'](\.{1,2}\/[^"']+)["']/g,
    /\bimport\s*\(\s*["'](\.{1,2}\/[^"']+)["']/g,
    /\bimport\s+["'](\.{1,2}\/[^"']+)["']/g,
    /new URL\(\s*["'](\.{1,2}\/[^"']+\.ts)["']\s*,\s*import\.meta\.url/g,
  ];
  for (const re of patterns) for (const m of source.matchAll(re)) specs.add(m[1]);
  return [...specs];
}

/**
 * The folder a file belongs to: `lib/<package>` for everything under `lib/` (a package's own
 * subfolders, such as `lib/chat/formats`, are part of it), else the top folder; `main.ts` is its
 * own node.
 */
export function folderOf(rel: string): string {
  const parts = rel.split("/");
  if (parts.length === 1) return rel;
  return parts[0] === "lib" && parts.length > 2 ? `lib/${parts[1]}` : parts[0];
}

/** One folder-level edge with an example import that makes it. */
export interface Edge {
  from: string;
  to: string;
  example: string;
}

/** Folder edges of the product graph. */
export function folderEdges(base: string): Edge[] {
  const edges = new Map<string, Edge>();
  for (const file of productFiles(base)) {
    const text = readFileSync(join(base, file), "utf8");
    for (const spec of importsOf(stripComments(text))) {
      const target = normalize(join(dirname(file), spec));
      const from = folderOf(file);
      const to = folderOf(relative(".", target));
      if (from === to) continue;
      const key = `${from}\0${to}`;
      if (!edges.has(key)) edges.set(key, { from, to, example: `${file} → ${target}` });
    }
  }
  return [...edges.values()];
}

/** Comments can hold import examples; they are not imports. */
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

/** Strongly connected components with more than one folder (Tarjan). */
export function cycles(edges: Edge[]): string[][] {
  const adj = new Map<string, string[]>();
  for (const e of edges) {
    if (!adj.has(e.from)) adj.set(e.from, []);
    if (!adj.has(e.to)) adj.set(e.to, []);
    adj.get(e.from)!.push(e.to);
  }
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const strong = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of adj.get(v)!) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1) out.push(comp.sort());
    }
  };
  for (const v of [...adj.keys()].sort()) if (!idx.has(v)) strong(v);
  return out;
}

const top = (folder: string) => folder.split("/")[0];

/** Imports that go against the layers, with the reason. */
export function layerViolations(edges: Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const from = top(e.from), to = top(e.to);
    const why = to === "tests" || to === "bench"
      ? "the product never imports tests or benchmarks"
      : from === "ffi" && to !== "ffi"
      ? "ffi/ is the bottom layer and imports nothing above it"
      : from === "lib" && (to === "routes" || to === "tools" || to === "main.ts")
      ? "lib/ never reaches up into routes/, tools/ or main.ts"
      : from === "routes" && (to === "tools" || to === "main.ts")
      ? "routes/ never reaches up into tools/ or main.ts"
      : undefined;
    if (why) out.push(`${e.from} → ${e.to} (${e.example}): ${why}`);
  }
  return out;
}

// `ui/` is plain ES modules served as they are (`routes/ui.ts`): the walk above reads `.ts` files
// and never sees it. What the browser needs instead: every import of a module and every page's
// script is a relative path that stays inside `ui/` and names a file that is there.

/** Every module specifier a JS source imports: static, side-effect, re-export and dynamic. */
export function moduleSpecifiers(source: string): string[] {
  // Comments hold examples and JSDoc type imports; they are not imports.
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const patterns = [
    /\b(?:import|export)\b[^'"`;]*?\bfrom\s*["']([^"']+)["']/g,
    /\bimport\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']/g,
    /new\s+URL\(\s*["']([^"']+)["']\s*,\s*import\.meta\.url/g,
  ];
  return [...new Set(patterns.flatMap((re) => [...code.matchAll(re)].map((m) => m[1])))];
}

/** Imports and page scripts of `<base>/ui` that a browser could not load, each with why. */
export function uiImportProblems(base: string): string[] {
  const walk = (rel: string): string[] =>
    [...Deno.readDirSync(`${base}/${rel}`)].flatMap((e) =>
      e.isDirectory
        ? walk(`${rel}/${e.name}`)
        : /\.(js|mjs|html)$/.test(e.name)
        ? [`${rel}/${e.name}`]
        : []
    ).sort();
  const isFile = (path: string) => {
    try {
      return Deno.statSync(path).isFile;
    } catch {
      return false;
    }
  };
  const problems: string[] = [];
  for (const file of walk("ui")) {
    const text = Deno.readTextFileSync(`${base}/${file}`);
    const specs = file.endsWith(".html")
      ? [...text.matchAll(/<script\b[^>]*\bsrc=["']([^"']+)["']/g)].map((m) => m[1])
      : moduleSpecifiers(text);
    for (const spec of specs) {
      if (!/^\.{1,2}\//.test(spec)) {
        problems.push(`${file} → ${spec}: not a relative path (a page has no import map)`);
        continue;
      }
      const target = posix.normalize(posix.join(posix.dirname(file), spec));
      if (!target.startsWith("ui/")) {
        problems.push(`${file} → ${target}: outside ui/, which is all that is served`);
      } else if (!isFile(`${base}/${target}`)) {
        problems.push(`${file} → ${target}: no such file`);
      }
    }
  }
  return problems;
}

if (import.meta.main) {
  const base = Deno.args[0] ?? ".";
  const edges = folderEdges(base);
  const found = cycles(edges);
  const layers = layerViolations(edges);
  for (const v of layers) console.log(`import against the layers: ${v}`);
  const ui = uiImportProblems(base);
  for (const v of ui) console.log(`ui import a browser cannot load: ${v}`);
  if (found.length === 0) {
    console.log(`import cycles: none (${edges.length} edges between folders)`);
    Deno.exit(layers.length || ui.length ? 1 : 0);
  }
  for (const comp of found) {
    console.log(`import cycle between folders: ${comp.join(", ")}`);
    const inComp = new Set(comp);
    for (const e of edges) {
      if (inComp.has(e.from) && inComp.has(e.to)) {
        console.log(`  ${e.from} → ${e.to}: ${e.example}`);
      }
    }
  }
  Deno.exit(1);
}
