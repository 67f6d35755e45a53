// The single executable: built by the same code as `deno task compile`, its payload listed (only
// the npm packages the product needs, none that only tests use), copied alone into an empty
// directory, run with HOME pointing at an empty directory (so nothing cached is reused): it must
// unpack itself, write the demo model, answer /health and a completion.
import assert from "node:assert/strict";
import { compile, payloadEntries } from "../tools/compile.ts";
import { startServer } from "./support/server.ts";
import { gpuDataDir } from "./support/gpu_data.ts";
import { linkOrCopyTree } from "./support/copy_tree.ts";
import { cpuSourceBuildDir } from "../lib/source/cuda_build.ts";

/** npm packages in `deno.json` that only tests (and benches) import. */
const TEST_ONLY = [
  "playwright-core",
  "openai",
  "@anthropic-ai/sdk",
  "@google/genai",
  "eventsource",
];

const root = new URL("..", import.meta.url).pathname;

/**
 * `node_modules/.deno` folder names (`@scope+name@version`) of the packages the product's imports
 * (every `deno.json` import but `TEST_ONLY`) need, from `deno.lock`: the imports and all they
 * depend on.
 */
function productPackages(): Set<string> {
  const config = JSON.parse(Deno.readTextFileSync(`${root}deno.json`));
  const lock = JSON.parse(Deno.readTextFileSync(`${root}deno.lock`));
  const npm: Record<string, { dependencies?: string[] }> = lock.npm;
  const keyOf = (dep: string) => {
    if (npm[dep]) return dep;
    const keys = Object.keys(npm).filter((k) => k.startsWith(`${dep}@`));
    assert.equal(keys.length, 1, `deno.lock: ${dep} is ${keys.join(", ") || "missing"}`);
    return keys[0];
  };
  const seen = new Set<string>();
  const visit = (key: string) => {
    if (seen.has(key)) return;
    seen.add(key);
    for (const d of npm[key].dependencies ?? []) visit(keyOf(d));
  };
  for (const [name, spec] of Object.entries<string>(config.imports)) {
    if (TEST_ONLY.includes(name.replace(/\/$/, "")) || !spec.startsWith("npm:")) continue;
    const req = spec.replace(/^npm:\/?/, "").replace(/\/$/, ""); // "@scope/name@1.2.3"
    visit(`${req.slice(0, req.lastIndexOf("@"))}@${lock.specifiers[`npm:${req}`]}`);
  }
  // `name@version_peer@version` -> `name@version`, `@scope/name` -> `@scope+name`.
  return new Set([...seen].map((k) => k.split("_")[0].replace("/", "+")));
}

Deno.test("compiled binary serves the demo model from an empty HOME", async (t) => {
  const work = await Deno.makeTempDir({ prefix: "hearth-bin-" });
  try {
    const built = await compile(`${work}/build/hearth`);
    assert.ok(built.size > 10e6, `binary size ${built.size}`);
    console.log(`binary size: ${built.size} bytes (${(built.size / 1e6).toFixed(1)} MB)`);
    await t.step(
      "the payload carries the product's npm packages and none only tests use",
      async () => {
        const entries = await payloadEntries(built.path);
        assert.ok(entries.includes("./app/main.ts"), entries.slice(0, 20).join("\n"));
        const modules = "./app/node_modules/";
        // Top-level links: what the payload's imports name.
        const top = entries.filter((e) =>
          e.startsWith(modules) && /^(@[^/]+\/)?[^/.@][^/]*\/?$/.test(e.slice(modules.length))
        ).map((e) => e.slice(modules.length).replace(/\/$/, ""));
        console.log(`payload packages: ${top.join(", ")}`);
        for (const name of TEST_ONLY) assert.ok(!top.includes(name), `payload links ${name}`);
        assert.ok(top.includes("hono") && top.includes("@node-llama-cpp/linux-x64"), top.join());
        // The package store: exactly the product's imports and their dependencies. (ajv@8.20.0 and
        // eventsource@3.0.7 are there as dependencies of @modelcontextprotocol/sdk, not as imports.)
        const store = new Set(
          entries.map((e) => e.match(/^\.\/app\/node_modules\/\.deno\/([^/]+)\/$/)?.[1])
            .filter((n): n is string => n !== undefined && n !== "node_modules"),
        );
        const expected = productPackages();
        assert.deepEqual([...store].sort(), [...expected].sort());
        for (const name of ["playwright-core", "openai", "@anthropic-ai/sdk", "@google/genai"]) {
          const dir = `${name.replace("/", "+")}@`;
          assert.ok(![...store].some((s) => s.startsWith(dir)), `payload carries ${name}`);
        }
      },
    );
    await Deno.mkdir(`${work}/empty`);
    await Deno.mkdir(`${work}/home`);
    const bin = `${work}/empty/hearth`;
    await Deno.copyFile(built.path, bin);
    await Deno.chmod(bin, 0o755);
    await Deno.remove(`${work}/build`, { recursive: true });
    const env = { HOME: `${work}/home`, PATH: "/usr/bin:/bin" };
    const srv = await startServer(["--max-batch", "2", "--max-seq-len", "512"], {
      cmd: [bin],
      env,
      cwd: `${work}/empty`,
      timeoutMs: 120_000,
    });
    try {
      assert.match(srv.stderr(), /demo model .*noise/);
      const health = await fetch(`${srv.url}/health`);
      assert.deepEqual(await health.json(), { status: "ok" });
      const r = await fetch(`${srv.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "Hello", max_tokens: 5, seed: 3 }),
      });
      assert.equal(r.status, 200);
      const body = await r.json();
      assert.equal(body.model, "hearth-demo");
      assert.equal(body.usage.completion_tokens, 5);
      // The web UI travels inside the binary.
      const ui = await fetch(`${srv.url}/ui/`);
      assert.equal(ui.status, 200);
      assert.match(await ui.text(), /<title>Chat · Hearth<\/title>/);
      const js = await fetch(`${srv.url}/ui/assets/api.js`);
      assert.equal(js.status, 200);
      await js.body?.cancel();
      // Deno.serve's request.signal runs without the legacy behaviour (launched with
      // --unstable-no-legacy-abort), so no warning after a request that watched the signal.
      assert.doesNotMatch(srv.stderr(), /legacy behavior/);
    } finally {
      await srv.stop();
    }
    // A custom build is smoke-tested by a child of the single executable (itself, run again from
    // its unpacked copy without the network) before it is used.
    const custom = await startServer(["--max-batch", "2", "--max-seq-len", "512"], {
      cmd: [bin],
      env: { ...env, HEARTH_LLAMA_LIB_DIR: `${cpuSourceBuildDir()}/lib` },
      cwd: `${work}/empty`,
      timeoutMs: 120_000,
    });
    try {
      const lib = (await (await fetch(`${custom.url}/props`)).json()).library;
      assert.equal(lib.build, "custom", JSON.stringify(lib));
      assert.match(lib.reason, /smoke decode: decoded 4 tokens/);
    } finally {
      await custom.stop();
    }
    // gpu-check and build-cuda work from the single executable (a what-if on the real packages).
    const gd = `${work}/gpu-data`;
    await linkOrCopyTree(gpuDataDir(), gd);
    const run = async (args: string[]) => {
      const out = await new Deno.Command(bin, { args, env, cwd: `${work}/empty`, stdout: "piped" })
        .output();
      assert.equal(out.code, 0, args.join(" "));
      return new TextDecoder().decode(out.stdout);
    };
    const check = JSON.parse(
      await run([
        "gpu-check",
        "--compute",
        "9.0",
        "--cuda-driver",
        "13.1",
        "--json",
        "--data-dir",
        gd,
      ]),
    );
    assert.equal(check.choice, "prebuilt-cuda13");
    assert.match(
      await run(["build-cuda", "--arch", "90", "--dry-run", "--data-dir", gd]),
      /-DCMAKE_CUDA_ARCHITECTURES=90 /,
    );
    // It unpacked into the data dir under HOME, by content hash, and wrote the demo model there.
    const runtimes = [...Deno.readDirSync(`${work}/home/.cache/hearth/runtime`)];
    assert.equal(runtimes.length, 1);
    assert.match(runtimes[0].name, /^[0-9a-f]{16}$/);
    const models = [...Deno.readDirSync(`${work}/home/.cache/hearth/models`)];
    assert.ok(models.some((m) => m.name.endsWith(".gguf")));
  } finally {
    await Deno.remove(work, { recursive: true });
  }
});
