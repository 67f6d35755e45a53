/**
 * The suite's own machinery, which the other files trust: every process a test starts runs on
 * the CPU unless the test opts in (so the suite means the same on a GPU host), the slow-compute
 * shim gives a prefill of a known length on any host, test models are keyed by every file that
 * writes them, a shared cache is copied into a test's dir across filesystems too, and the setup
 * prints each step with its time and goes on past an optional one that failed.
 */
import assert from "node:assert/strict";
import { childEnv, CPU_ONLY_ENV, runCommand, startServer } from "./support/server.ts";
import { modelSourcesKey, tinyModelPath } from "./support/models.ts";
import { linkOrCopyTree } from "./support/copy_tree.ts";
import { slowComputeEnv } from "./support/slow_compute.ts";
import { elapsed, runSetup } from "./support/setup.ts";

const json = { "content-type": "application/json" };

/** The environment of a running process, from /proc. */
async function environOf(pid: number): Promise<Map<string, string>> {
  const raw = await Deno.readTextFile(`/proc/${pid}/environ`);
  return new Map(
    raw.split("\0").filter((l) => l).map((l) => {
      const eq = l.indexOf("=");
      return [l.slice(0, eq), l.slice(eq + 1)];
    }),
  );
}

Deno.test({
  name: "test servers and commands run with the GPUs hidden unless they opt in",
  sanitizeResources: false,
  fn: async () => {
    assert.deepEqual(CPU_ONLY_ENV, { CUDA_VISIBLE_DEVICES: "-1" });
    assert.deepEqual(childEnv({ env: { A: "1" } }), { CUDA_VISIBLE_DEVICES: "-1", A: "1" });
    // A test may still choose its own value (gpu_build's gpu-check cases do).
    assert.equal(childEnv({ env: { CUDA_VISIBLE_DEVICES: "0" } }).CUDA_VISIBLE_DEVICES, "0");
    assert.deepEqual(childEnv({ env: { A: "1" }, gpu: true }), { A: "1" });

    const env = await runCommand(["env"]);
    assert.match(env.stdout, /^CUDA_VISIBLE_DEVICES=-1$/m);
    const own = Deno.env.get("CUDA_VISIBLE_DEVICES");
    const optIn = await runCommand(["env"], { gpu: true });
    const seen = optIn.stdout.match(/^CUDA_VISIBLE_DEVICES=(.*)$/m)?.[1];
    assert.equal(seen, own, "an opted-in command sees this process's GPUs");

    await using srv = await startServer(["--model", await tinyModelPath(), "--max-batch", "1"]);
    assert.equal((await environOf(srv.child.pid)).get("CUDA_VISIBLE_DEVICES"), "-1");
    const lib = (await (await fetch(`${srv.url}/props`)).json()).library;
    assert.equal(lib.build, "cpu");
    // The words serve logs on a host without a GPU, or on one whose GPUs are hidden.
    assert.match(lib.reason, /^(no NVIDIA GPU found|CUDA_VISIBLE_DEVICES="-1" hides )/);
    assert.match(srv.stderr(), /llama\.cpp: CPU build /);
    // Nothing is fetched for a GPU it may not use (`fetching @node-llama-cpp/linux-x64-cuda...`).
    assert.doesNotMatch(srv.stderr(), /fetching /);
  },
});

Deno.test({
  name: "slow compute: every graph compute of a server waits the given time, on any host",
  sanitizeResources: false,
  fn: async () => {
    const ms = 400;
    await using srv = await startServer(["--model", await tinyModelPath(), "--max-batch", "1"], {
      env: await slowComputeEnv(ms),
    });
    const complete = async (words: number) => {
      const t0 = performance.now();
      const r = await fetch(`${srv.url}/v1/completions`, {
        method: "POST",
        headers: json,
        body: JSON.stringify({ prompt: "hello ".repeat(words), max_tokens: 2, ignore_eos: true }),
      });
      assert.equal(r.status, 200);
      await r.body?.cancel();
      return performance.now() - t0;
    };
    // A short prompt: one compute for the prompt, one for the second token.
    assert.ok(await complete(4) >= 2 * ms);
    // 2,100 tokens: five ubatches of 512, then the second token.
    assert.ok(await complete(2_100) >= 6 * ms);
  },
});

Deno.test("model cache key: any edit, new file or rename under the sources changes it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-model-key-" });
  try {
    await Deno.mkdir(`${dir}/gguf/assets`, { recursive: true });
    await Deno.writeTextFile(`${dir}/gguf/writer.ts`, "export const a = 1;\n");
    await Deno.writeTextFile(`${dir}/gguf/assets/vocab.bin`, "abc");
    await Deno.writeTextFile(`${dir}/demo.ts`, "export const v = 2;\n");
    const roots = [`${dir}/gguf/`, `${dir}/demo.ts`];
    const key = () => modelSourcesKey(roots);
    const first = key();
    assert.match(first, /^[0-9a-f]{12}$/);
    assert.equal(key(), first, "stable");
    const seen = new Set([first]);
    const changed = (what: string) => {
      const k = key();
      assert.ok(!seen.has(k), `${what} did not change the key`);
      seen.add(k);
    };
    await Deno.writeTextFile(`${dir}/gguf/assets/vocab.bin`, "abd");
    changed("an asset's bytes");
    await Deno.writeTextFile(`${dir}/gguf/chat_formats.ts`, "export const t = '';\n");
    changed("a new file");
    await Deno.rename(`${dir}/gguf/chat_formats.ts`, `${dir}/gguf/chat_templates.ts`);
    changed("a rename");
    await Deno.writeTextFile(`${dir}/demo.ts`, "export const v = 3;\n");
    changed("the demo writer");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("linkOrCopyTree: hard links on one filesystem, a copy across two", async () => {
  const src = await Deno.makeTempDir({ prefix: "hearth-tree-src-" });
  const here = await Deno.makeTempDir({ prefix: "hearth-tree-dst-" });
  // /dev/shm is tmpfs: a filesystem of its own where it exists.
  const shm = Deno.statSync("/dev/shm").dev !== Deno.statSync(src).dev
    ? await Deno.makeTempDir({ dir: "/dev/shm", prefix: "hearth-tree-dst-" })
    : undefined;
  try {
    await Deno.mkdir(`${src}/a/b`, { recursive: true });
    await Deno.writeTextFile(`${src}/a/b/lib.so`, "payload");
    await Deno.writeTextFile(`${src}/top.txt`, "top");
    assert.equal(await linkOrCopyTree(src, `${here}/copy`), "link");
    assert.equal(
      Deno.statSync(`${here}/copy/a/b/lib.so`).ino,
      Deno.statSync(`${src}/a/b/lib.so`).ino,
    );
    if (shm) {
      // `cp -al` alone fails here (EXDEV); the fallback copies.
      assert.equal(await linkOrCopyTree(src, `${shm}/copy`), "copy");
      assert.equal(await Deno.readTextFile(`${shm}/copy/a/b/lib.so`), "payload");
      assert.equal(await Deno.readTextFile(`${shm}/copy/top.txt`), "top");
    }
  } finally {
    for (const d of [src, here, shm]) if (d) await Deno.remove(d, { recursive: true });
  }
});

Deno.test("setup: a line per step with its time, optional failures named, a required one stops", async () => {
  const lines: string[] = [];
  const print = (l: string) => lines.push(l);
  const r = await runSetup([
    { what: "first", run: () => Promise.resolve("made /x") },
    { what: "flaky", run: () => Promise.reject(new Error("offline")), optional: true },
    { what: "last", run: () => Promise.resolve("cached: /y") },
  ], print);
  assert.equal(r.failed, 1);
  assert.deepEqual(lines.map((l) => l.replace(/\d+ ms/g, "N ms")), [
    "test setup: [1/3] first ...",
    "test setup: [1/3] first: made /x (N ms, N ms so far)",
    "test setup: [2/3] flaky ...",
    "test setup: [2/3] flaky: failed, the tests that need it will say why (N ms, N ms so far): " +
    "offline",
    "test setup: [3/3] last ...",
    "test setup: [3/3] last: cached: /y (N ms, N ms so far)",
    "test setup: done in N ms",
  ]);
  lines.length = 0;
  let ran = false;
  await assert.rejects(
    runSetup([
      { what: "needed", run: () => Promise.reject(new Error("no cmake")) },
      { what: "after", run: () => (ran = true, Promise.resolve("")) },
    ], print),
    /no cmake/,
  );
  assert.equal(ran, false);
  assert.match(
    lines.at(-1)!,
    /^test setup: \[1\/2\] needed: FAILED \(\d+ ms, \d+ ms so far\): no cmake$/,
  );
  assert.equal(elapsed(850), "850 ms");
  assert.equal(elapsed(12_400), "12 s");
  assert.equal(elapsed(184_000), "3 min 4 s");
});
