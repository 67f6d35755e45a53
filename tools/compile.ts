/**
 * `deno task compile`: writes `dist/hearth`, one executable file that carries the Deno runtime,
 * Hearth's sources, the npm packages the product imports (and nothing that only tests or benches
 * use), the prebuilt llama.cpp libraries and a warm module cache. On first run it unpacks itself by
 * content hash into `<data-dir>/runtime/<hash>/` and loads everything from there, so
 * `dist/hearth serve ...` behaves like `deno task serve ...`.
 *
 * The payload's `deno.json` is the project's with only the product's imports (`productImports`)
 * and `"nodeModulesDir": "manual"`; its `node_modules` is a fresh `deno install` of those, taken
 * from Deno's npm cache (the network only when a package is missing there), so test-only packages
 * (`playwright-core`, `openai`, the provider SDKs) stay out.
 *
 * Why not `deno compile`: it needs the `denort` base runtime, which it downloads from
 * dl.deno.land; that host is unreachable here and `denort` is not on npm (the full `deno` binary
 * does not run an embedded payload). With `DENORT_BIN` pointing at a real denort, the standard
 * route would apply; this builder keeps the same contract without it.
 *
 * @example
 * ```sh
 * deno run -A tools/compile.ts                # writes dist/hearth
 * dist/hearth serve --port 8000
 * ```
 * @module
 */

const root = new URL("..", import.meta.url).pathname.replace(/\/$/, "");

/** What goes into the payload, relative to the project root (`node_modules` is installed anew). */
const APP_ENTRIES = ["main.ts", "deno.lock", "routes", "ffi", "lib", "ui"];

/**
 * npm packages the product loads by path rather than by import: the prebuilt llama.cpp libraries
 * (`PREBUILT_SUBDIR` in `ffi/library.ts`).
 */
const LOADED_BY_PATH = ["@node-llama-cpp/linux-x64"];

/** Bare module specifiers (not relative, not `node:`/`npm:`/URLs) a source imports or re-exports. */
export function bareSpecifiers(source: string): string[] {
  const specs = new Set<string>();
  const patterns = [
    /\bfrom\s+["']([^"'./][^"']*)["']/g,
    /\bimport\s*\(\s*["']([^"'./][^"']*)["']/g,
    /\bimport\s+["']([^"'./][^"']*)["']/g,
  ];
  for (const re of patterns) {
    for (const m of source.matchAll(re)) if (!/^[a-z]+:/.test(m[1])) specs.add(m[1]);
  }
  return [...specs];
}

/**
 * The entries of `imports` (a `deno.json` import map) that `specifiers` use, plus the packages in
 * `LOADED_BY_PATH`. A key ending in `/` maps every specifier under it.
 */
export function productImports(
  imports: Record<string, string>,
  specifiers: Iterable<string>,
): Record<string, string> {
  const used = new Set(specifiers);
  const keep = (key: string) =>
    LOADED_BY_PATH.includes(key) ||
    (key.endsWith("/") ? [...used].some((s) => s.startsWith(key)) : used.has(key));
  return Object.fromEntries(Object.entries(imports).filter(([key]) => keep(key)));
}

/** Every bare specifier in the product's sources (the `APP_ENTRIES`' `.ts`/`.tsx`/`.js` files). */
async function productSpecifiers(): Promise<Set<string>> {
  const out = new Set<string>();
  const visit = async (path: string) => {
    const st = await Deno.stat(path);
    if (st.isDirectory) {
      for await (const e of Deno.readDir(path)) await visit(`${path}/${e.name}`);
    } else if (/\.(ts|tsx|js|mjs)$/.test(path)) {
      for (const s of bareSpecifiers(await Deno.readTextFile(path))) out.add(s);
    }
  };
  for (const e of APP_ENTRIES) await visit(`${root}/${e}`);
  return out;
}

/**
 * The payload's `deno.json`: the project's, with only the product's imports, no tasks (they name
 * tools and tests the payload does not carry), and a `node_modules` that is used as unpacked,
 * never installed into at run time.
 */
export async function productConfig(): Promise<Record<string, unknown>> {
  const config = JSON.parse(await Deno.readTextFile(`${root}/deno.json`));
  const { tasks: _tasks, ...rest } = config;
  return {
    ...rest,
    nodeModulesDir: "manual",
    imports: productImports(config.imports ?? {}, await productSpecifiers()),
  };
}

async function run(cmd: string, args: string[], env?: Record<string, string>): Promise<void> {
  const out = await new Deno.Command(cmd, { args, env, stdout: "inherit", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
}

/**
 * Copies the app entries into `dest`, writes the product's `deno.json` there and installs its npm
 * packages into `dest/node_modules` (quietly: the build prints one line when done).
 */
async function stageApp(dest: string): Promise<void> {
  await run("cp", ["-a", ...APP_ENTRIES.map((e) => `${root}/${e}`), `${dest}/`]);
  await Deno.writeTextFile(
    `${dest}/deno.json`,
    JSON.stringify(await productConfig(), null, 2) + "\n",
  );
  // Deno's own npm cache (DENO_DIR as the caller has it) supplies the packages; the lockfile is
  // pruned to the product's.
  const install = await new Deno.Command(Deno.execPath(), {
    args: ["install", "--quiet"],
    cwd: dest,
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (!install.success) {
    throw new Error(`deno install failed:\n${new TextDecoder().decode(install.stderr)}`);
  }
}

async function sha256File(path: string): Promise<string> {
  const data = await Deno.readFile(path);
  const digest = await crypto.subtle.digest("SHA-256", data);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The launcher: finds the data dir like `serve` does, unpacks once, then runs the app. */
export function stubScript(hash: string): string {
  return `#!/bin/sh
# Hearth single-file executable: a launcher followed by a gzip'd tar payload.
set -eu
HASH=${hash}
data="\${HOME:-/tmp}/.cache/hearth"
prev=""
for a in "$@"; do
  case "$a" in --data-dir=*) data="\${a#--data-dir=}" ;; esac
  if [ "$prev" = "--data-dir" ]; then data="$a"; fi
  prev="$a"
done
rt="$data/runtime/$HASH"
if [ ! -f "$rt/.complete" ]; then
  mkdir -p "$data/runtime"
  tmp="$rt.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  line=$(awk '/^__HEARTH_PAYLOAD__$/ { print NR + 1; exit 0 }' "$0")
  tail -n +"$line" "$0" | tar xzf - -C "$tmp"
  touch "$tmp/.complete"
  if ! mv "$tmp" "$rt" 2>/dev/null; then rm -rf "$tmp"; fi
fi
export DENO_DIR="$rt/deno_dir"
export HEARTH_RUNTIME_DIR="$rt"
export DENO_NO_UPDATE_CHECK=1
exec "$rt/deno" run -A --cached-only --unstable-no-legacy-abort --config "$rt/app/deno.json" "$rt/app/main.ts" "$@"
exit 0
__HEARTH_PAYLOAD__
`;
}

/** The paths in an executable's payload, as `tar` names them (`./app/main.ts`, ...). */
export async function payloadEntries(path: string): Promise<string[]> {
  const bytes = await Deno.readFile(path);
  const marker = new TextEncoder().encode("\n__HEARTH_PAYLOAD__\n");
  let at = -1;
  for (let i = bytes.indexOf(marker[0]); i >= 0; i = bytes.indexOf(marker[0], i + 1)) {
    if (marker.every((b, k) => bytes[i + k] === b)) {
      at = i + marker.length;
      break;
    }
  }
  if (at < 0) throw new Error(`${path}: no payload marker`);
  const tar = new Deno.Command("tar", { args: ["tzf", "-"], stdin: "piped", stdout: "piped" })
    .spawn();
  const [, out] = await Promise.all([
    (async () => {
      const w = tar.stdin.getWriter();
      await w.write(bytes.subarray(at));
      await w.close();
    })(),
    tar.output(),
  ]);
  if (!out.success) throw new Error(`tar tzf failed on ${path}'s payload`);
  return new TextDecoder().decode(out.stdout).split("\n").filter((l) => l !== "");
}

export async function compile(
  out = `${root}/dist/hearth`,
): Promise<{ path: string; size: number }> {
  const dist = out.slice(0, out.lastIndexOf("/"));
  await Deno.mkdir(dist, { recursive: true });
  const stage = await Deno.makeTempDir({ dir: dist, prefix: ".stage-" });
  try {
    await Deno.mkdir(`${stage}/app`);
    await stageApp(`${stage}/app`);
    await Deno.copyFile(Deno.execPath(), `${stage}/deno`);
    await Deno.chmod(`${stage}/deno`, 0o755);
    // Warm the module cache (type-checked once here) so the first run needs no network.
    await run(`${stage}/deno`, [
      "cache",
      "--config",
      `${stage}/app/deno.json`,
      `${stage}/app/main.ts`,
    ], {
      ...Deno.env.toObject(),
      DENO_DIR: `${stage}/deno_dir`,
    });
    const payload = `${stage}.tgz`;
    await run("tar", ["czf", payload, "-C", stage, "."]);
    const hash = (await sha256File(payload)).slice(0, 16);
    const tmpOut = `${out}.tmp`;
    const file = await Deno.open(tmpOut, {
      write: true,
      create: true,
      truncate: true,
      mode: 0o755,
    });
    try {
      await file.write(new TextEncoder().encode(stubScript(hash)));
      const src = await Deno.open(payload);
      await src.readable.pipeTo(file.writable, { preventClose: true });
    } finally {
      file.close();
    }
    await Deno.remove(payload);
    await Deno.rename(tmpOut, out);
    await Deno.chmod(out, 0o755);
    return { path: out, size: (await Deno.stat(out)).size };
  } finally {
    await Deno.remove(stage, { recursive: true });
  }
}

if (import.meta.main) {
  const t0 = performance.now();
  const { path, size } = await compile();
  console.log(
    `wrote ${path} (${(size / 1e6).toFixed(1)} MB) in ${
      ((performance.now() - t0) / 1000).toFixed(1)
    } s`,
  );
}
