// The single executable: built by the same code as `deno task compile`, copied alone into an empty
// directory, run with HOME pointing at an empty directory (so nothing cached is reused): it must
// unpack itself, write the demo model, answer /health and a completion.
import assert from "node:assert/strict";
import { compile } from "../tools/compile.ts";
import { startServer } from "./support/server.ts";
import { gpuDataDir } from "./support/gpu_data.ts";
import { cpuSourceBuildDir } from "../lib/source/cuda_build.ts";

Deno.test("compiled binary serves the demo model from an empty HOME", async () => {
  const work = await Deno.makeTempDir({ prefix: "hearth-bin-" });
  try {
    const built = await compile(`${work}/build/hearth`);
    assert.ok(built.size > 10e6, `binary size ${built.size}`);
    console.log(`binary size: ${(built.size / 1e6).toFixed(1)} MB`);
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
    const cp = await new Deno.Command("cp", { args: ["-al", gpuDataDir(), gd] }).output();
    assert.ok(cp.success);
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
