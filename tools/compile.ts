/**
 * `deno task compile`: writes `dist/hearth`, one executable file that carries the Deno runtime,
 * Hearth's sources, its npm dependencies, the prebuilt llama.cpp libraries and a warm module
 * cache. On first run it unpacks itself by content hash into `<data-dir>/runtime/<hash>/` and
 * loads everything from there, so `dist/hearth serve ...` behaves like `deno task serve ...`.
 *
 * Why not `deno compile`: it needs the `denort` base runtime, which it downloads from
 * dl.deno.land; that host is unreachable here and `denort` is not on npm (the full `deno` binary
 * does not run an embedded payload). With `DENORT_BIN` pointing at a real denort, the standard
 * route would apply; this builder keeps the same contract without it.
 *
 * @example
 * ```sh
 * deno run -A lib/build/compile.ts            # writes dist/hearth
 * dist/hearth serve --port 8000
 * ```
 * @module
 */

const root = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

/** What goes into the payload, relative to the project root. */
const APP_ENTRIES = [
  "main.ts",
  "deno.json",
  "deno.lock",
  "routes",
  "ffi",
  "lib",
  "ui",
  "node_modules",
];

async function run(cmd: string, args: string[], env?: Record<string, string>): Promise<void> {
  const out = await new Deno.Command(cmd, { args, env, stdout: "inherit", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
}

/**
 * A file another deno process (a test, `deno install`) creates and removes in `node_modules/.deno`
 * while it waits for the npm cache lock: handed to `cp` by a glob, it can be gone by the time `cp`
 * reaches it, and the build fails with "cannot stat".
 */
const TRANSIENT = new Set([".deno.lock.poll"]);

/** `cp -a` of the app entries into `dest`, leaving out `TRANSIENT` files of `node_modules/.deno`. */
async function copyApp(dest: string): Promise<void> {
  const entries = APP_ENTRIES.filter((e) => e !== "node_modules");
  await run("cp", ["-a", ...entries.map((e) => `${root}/${e}`), `${dest}/`]);
  const modules = `${root}/node_modules`;
  const names = async (dir: string, skip: (n: string) => boolean) => {
    const out: string[] = [];
    for await (const e of Deno.readDir(dir)) if (!skip(e.name)) out.push(`${dir}/${e.name}`);
    return out;
  };
  await Deno.mkdir(`${dest}/node_modules/.deno`, { recursive: true });
  const top = await names(modules, (n) => n === ".deno");
  if (top.length) await run("cp", ["-a", ...top, `${dest}/node_modules/`]);
  const store = await names(`${modules}/.deno`, (n) => TRANSIENT.has(n));
  if (store.length) await run("cp", ["-a", ...store, `${dest}/node_modules/.deno/`]);
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
exec "$rt/deno" run -A --cached-only --config "$rt/app/deno.json" "$rt/app/main.ts" "$@"
exit 0
__HEARTH_PAYLOAD__
`;
}

export async function compile(
  out = `${root}/dist/hearth`,
): Promise<{ path: string; size: number }> {
  const dist = out.slice(0, out.lastIndexOf("/"));
  await Deno.mkdir(dist, { recursive: true });
  const stage = await Deno.makeTempDir({ dir: dist, prefix: ".stage-" });
  try {
    await Deno.mkdir(`${stage}/app`);
    await copyApp(`${stage}/app`);
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
