// The import checker CI runs (`tools/check_imports.ts`): it finds a cycle between folders and an
// import against the layers in a made-up tree, and finds neither in this repository.
import assert from "node:assert/strict";
import {
  cycles,
  folderEdges,
  folderOf,
  layerViolations,
  moduleSpecifiers,
  uiImportProblems,
} from "../tools/check_imports.ts";

async function tree(files: Record<string, string>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-imports-" });
  for (const [path, text] of Object.entries(files)) {
    await Deno.mkdir(`${dir}/${path.slice(0, path.lastIndexOf("/"))}`, { recursive: true });
    await Deno.writeTextFile(`${dir}/${path}`, text);
  }
  return dir;
}

Deno.test("a package's subfolders belong to it; other folders are their top", () => {
  assert.equal(folderOf("lib/chat/formats/hermes.ts"), "lib/chat");
  assert.equal(folderOf("routes/app.ts"), "routes");
  assert.equal(folderOf("main.ts"), "main.ts");
});

Deno.test("a cycle through three folders and an upward import are both found", async () => {
  const dir = await tree({
    "lib/a/x.ts": `import { y } from "../b/y.ts";\nexport const x = y;`,
    "lib/b/y.ts": `export { z as y } from "../c/z.ts";`,
    "lib/c/z.ts": `// import { x } from "../a/x.ts"; (a comment is no import)\n` +
      `export const z = await import("../a/x.ts");`,
    "ffi/f.ts": `import { r } from "../routes/r.ts";\nexport const f = r;`,
    "routes/r.ts": `export const r = 1;`,
  });
  try {
    const edges = folderEdges(dir);
    assert.deepEqual(cycles(edges), [["lib/a", "lib/b", "lib/c"]]);
    const layers = layerViolations(edges);
    assert.equal(layers.length, 1);
    assert.match(layers[0], /^ffi → routes .*bottom layer/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("this repository has no import cycle between folders and no upward import", () => {
  const edges = folderEdges(".");
  assert.ok(edges.length > 20, `only ${edges.length} edges: the walk found too little`);
  assert.deepEqual(cycles(edges), []);
  assert.deepEqual(layerViolations(edges), []);
});

// `ui/` is plain ES modules served as they are (`routes/ui.ts`): the walk above reads `.ts` files
// and never sees it. What the browser needs instead: every import of a module and every page's
// script is a relative path that stays inside `ui/` (nothing else is served under `/ui/`) and
// names a file that is there.

Deno.test("ui/: an import out of ui/, a bare one and a missing one are each found", async () => {
  const dir = await tree({
    "ui/index.html": `<script type="module" src="./assets/app.js"></script>\n` +
      `<script type="module" src="./assets/gone.js"></script>`,
    "ui/assets/app.js": `import { h } from "./dom.js";\n` +
      `// import { x } from "../../lib/x.ts"; (a comment is no import)\n` +
      `import { route } from "../../routes/app.ts";\n` +
      `export { z } from "zod";\n` +
      `const lazy = () => import("./later.js");\n`,
    "ui/assets/dom.js": `export const h = 1;`,
  });
  try {
    assert.deepEqual(uiImportProblems(dir), [
      "ui/assets/app.js → routes/app.ts: outside ui/, which is all that is served",
      "ui/assets/app.js → zod: not a relative path (a page has no import map)",
      "ui/assets/app.js → ui/assets/later.js: no such file",
      "ui/index.html → ui/assets/gone.js: no such file",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ui/: every page script and module import stays inside ui/ and is there", () => {
  const base = new URL("..", import.meta.url).pathname;
  assert.ok(
    [...Deno.readDirSync(`${base}/ui/assets`)].filter((e) => e.name.endsWith(".js")).length > 5,
    "the walk found too little",
  );
  assert.deepEqual(uiImportProblems(base), []);
  // The walk sees what the pages load: each page's script and the modules those import.
  const chat = moduleSpecifiers(Deno.readTextFileSync(`${base}/ui/assets/chat.js`));
  assert.ok(chat.includes("./dom.js") && chat.includes("./markdown.js"), chat.join(", "));
});
