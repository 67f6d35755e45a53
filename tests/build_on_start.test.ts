// `serve`'s decision on a GPU host where no prebuilt llama.cpp can run (`lib/cli/build_on_start.ts`):
// `--no-build` serves on the CPU without looking for a toolkit; without a toolkit it says what is
// missing; with one it starts a source build for the GPUs' arch (here a fake nvcc fails it at
// once), and a finished build in the data dir is taken without building again. Then the same
// through a real `serve` on a fake GPU host: an `nvidia-smi` script shows an H100, a
// `libcuda.so.1` compiled here aborts the driver probe, and an `npm` that cannot fetch keeps the
// prebuilt CUDA packages away, so nothing can run and the build decision is what is left.
import assert from "node:assert/strict";
import { buildOnStart } from "../lib/cli/build_on_start.ts";
import { parseServeArgs, type ServeConfig } from "../lib/cli/flags.ts";
import { cudaSourceBuildDir } from "../lib/source/cuda_build.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { fakeLibcuda, fakeNvidiaSmi, fakeTool } from "./fixtures/fake_gpu.ts";

type Toolkit = { env: Record<string, string>; nvccCalls: () => Promise<string[]> };

/**
 * A CUDA toolkit as `findToolkit` sees one: nvcc (`CUDACXX`, a script that logs each call and
 * fails) and cuBLAS's header and library under `CUDA_HOME`.
 */
async function fakeToolkit(dir: string): Promise<Toolkit> {
  const nvccCalls = await fakeTool(
    `${dir}/bin/nvcc`,
    'echo "nvcc fatal: a fake toolkit cannot compile (test)" >&2\nexit 1',
  );
  for (const f of ["include/cublas_v2.h", "lib64/libcublas.so"]) {
    await Deno.mkdir(`${dir}/${f.slice(0, f.lastIndexOf("/"))}`, { recursive: true });
    await Deno.writeTextFile(`${dir}/${f}`, "");
  }
  return {
    env: { CUDACXX: `${dir}/bin/nvcc`, CUDA_HOME: dir, PATH: Deno.env.get("PATH") ?? "" },
    nvccCalls,
  };
}

/** No toolkit wherever this host keeps one: CUDACXX names nothing, CUDA_HOME is empty. */
function noToolkit(dir: string): Record<string, string> {
  return { CUDACXX: `${dir}/no-such/nvcc`, CUDA_HOME: dir, PATH: dir };
}

function config(argv: string[], dataDir: string): ServeConfig {
  const parsed = parseServeArgs([...argv, "--data-dir", dataDir], {});
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.config;
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-build-on-start-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function isDir(path: string): Promise<boolean> {
  return await Deno.stat(path).then((s) => s.isDirectory, () => false);
}

Deno.test("build on start: --no-build serves on the CPU, toolkit or not", () =>
  withDir(async (dir) => {
    const tk = await fakeToolkit(`${dir}/cuda`);
    const lines: string[] = [];
    const built = await buildOnStart(
      "90",
      config(["--no-build"], `${dir}/data`),
      (l) => lines.push(l),
      tk.env,
    );
    assert.equal(built, false);
    assert.deepEqual(lines, [
      "no GPU build of llama.cpp can run here and --no-build is set: serving on the CPU",
    ]);
    assert.deepEqual(await tk.nvccCalls(), [], "no compiler was run");
    assert.equal(await isDir(`${dir}/data`), false, "nothing was written");
  }));

Deno.test("build on start: without a toolkit it says what is missing and builds nothing", () =>
  withDir(async (dir) => {
    const lines: string[] = [];
    const built = await buildOnStart(
      "90",
      config([], `${dir}/data`),
      (l) => lines.push(l),
      noToolkit(`${dir}/empty`),
    );
    assert.equal(built, false);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0],
      new RegExp(
        "^no GPU build of llama\\.cpp can run here and none can be built: missing nvcc: " +
          `CUDACXX=${dir}/empty/no-such/nvcc does not exist; and cuBLAS \\(cublas_v2\\.h`,
      ),
    );
    assert.equal(await isDir(`${dir}/data`), false);
  }));

Deno.test("build on start: with a toolkit, a source build for the GPUs' arch is started", () =>
  withDir(async (dir) => {
    const tk = await fakeToolkit(`${dir}/cuda`);
    const lines: string[] = [];
    const built = await buildOnStart(
      "90",
      config([], `${dir}/data`),
      (l) => lines.push(l),
      tk.env,
    );
    // The fake nvcc fails CMake's compiler check: the build fails and serve goes on, on the CPU.
    assert.equal(built, false);
    assert.match(
      lines[0],
      /^no prebuilt llama\.cpp can run on this GPU: building one from source for sm_90 with \d+ jobs .*--no-build skips it\)$/,
    );
    assert.match(lines[1], /^the source build failed: llama\.cpp CUDA build failed at `cmake /);
    assert.equal(lines.length, 2, lines.join("\n"));
    assert.ok((await tk.nvccCalls()).length > 0, "CMake never ran the toolkit's nvcc");
    const buildDir = cudaSourceBuildDir(`${dir}/data`, "90");
    const log = await Deno.readTextFile(`${buildDir}/build/build.log`);
    assert.match(log, /-DGGML_CUDA=ON/);
    assert.match(log, /-DCMAKE_CUDA_ARCHITECTURES=90/);
    assert.match(log, new RegExp(`-DCMAKE_CUDA_COMPILER=${tk.env.CUDACXX}`));
  }));

Deno.test("build on start: a finished build in the data dir is taken without building", () =>
  withDir(async (dir) => {
    const tk = await fakeToolkit(`${dir}/cuda`);
    const lib = `${cudaSourceBuildDir(`${dir}/data`, "90")}/lib`;
    await Deno.mkdir(lib, { recursive: true });
    await Deno.writeTextFile(`${lib}/.complete`, "");
    const lines: string[] = [];
    const built = await buildOnStart(
      "90",
      config([], `${dir}/data`),
      (l) => lines.push(l),
      tk.env,
    );
    assert.equal(built, true);
    assert.match(lines[1], new RegExp(`^built ${lib} in 0 s$`));
    assert.deepEqual(await tk.nvccCalls(), []);
  }));

/**
 * A host with one H100 that nothing prebuilt can run on: the fake nvidia-smi shows it (and, with
 * the driver probe aborting, gives its compute capability), the fake npm fetches nothing.
 */
async function fakeGpuHost(dir: string) {
  await fakeLibcuda(`${dir}/lib`);
  await fakeNvidiaSmi(`${dir}/bin`);
  const npmCalls = await fakeTool(
    `${dir}/bin/npm`,
    'echo "npm error network: offline (test)" >&2\nexit 1',
  );
  const tk = await fakeToolkit(`${dir}/cuda`);
  const env = {
    ...tk.env,
    PATH: `${dir}/bin:${Deno.env.get("PATH")}`,
    LD_LIBRARY_PATH: `${dir}/lib`,
    FAKE_CUDA: "abort",
    // The first GPU, whichever host this is (a real GPU host shows its own first).
    CUDA_VISIBLE_DEVICES: "0",
  };
  return { env, nvccCalls: tk.nvccCalls, npmCalls };
}

async function serveOn(env: Record<string, string>, dataDir: string, extra: string[]) {
  const srv = await startServer([
    "--model",
    await tinyModelPath(),
    "--max-batch",
    "1",
    "--max-seq-len",
    "256",
    "--threads",
    "2",
    "--data-dir",
    dataDir,
    ...extra,
  ], { env });
  try {
    const library = (await (await fetch(`${srv.url}/props`)).json()).library;
    return { library, stderr: srv.stderr() };
  } finally {
    await srv.stop();
  }
}

Deno.test({
  name: "serve on a GPU host where nothing can run: --no-build serves on the CPU, else it builds",
  sanitizeResources: false,
  fn: () =>
    withDir(async (dir) => {
      const host = await fakeGpuHost(dir);

      const declined = await serveOn(host.env, `${dir}/data1`, ["--no-build"]);
      assert.equal(declined.library.build, "cpu");
      assert.deepEqual(declined.library.gpus, []);
      assert.deepEqual(
        declined.library.rejected.map((r: { build: string }) => r.build),
        ["prebuilt-cuda13", "prebuilt-cuda12", "source"],
      );
      assert.match(declined.library.reason, /^1 GPU visible but no GPU build can run here/);
      // The driver aborted in the probe's child; serve lived on and asked nvidia-smi.
      assert.match(declined.stderr, /GPU probe: the driver probe died with SIGABRT/);
      assert.match(
        declined.stderr,
        /no GPU build of llama\.cpp can run here and --no-build is set: serving on the CPU/,
      );
      assert.doesNotMatch(declined.stderr, /building one from source/);
      assert.deepEqual(await host.nvccCalls(), [], "--no-build ran no compiler");
      assert.ok((await host.npmCalls()).length > 0, "the prebuilt package was asked for");

      const tried = await serveOn(host.env, `${dir}/data2`, []);
      assert.equal(tried.library.build, "cpu");
      assert.match(
        tried.stderr,
        /no prebuilt llama\.cpp can run on this GPU: building one from source for sm_90 with/,
      );
      assert.match(tried.stderr, /the source build failed: llama\.cpp CUDA build failed/);
      assert.ok((await host.nvccCalls()).length > 0, "the build ran the toolkit's nvcc");
      assert.ok(await isDir(`${cudaSourceBuildDir(`${dir}/data2`, "90")}/build`));
    }),
});
