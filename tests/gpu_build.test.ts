/**
 * The GPU build choice from facts (the real CUDA packages' fat binaries), `hearth gpu-check`, the
 * smoke decode falling back from a build that aborts, `hearth build-cuda`'s refusals, and the
 * source-build path proven on a CPU: the bundle built with `build-cuda`'s flags minus CUDA serves
 * the same greedy output as the prebuilt. The servers run with the GPUs hidden (as every test
 * server does), so the fallbacks mean the same on a GPU host; the one test about this host's own
 * GPU runs only where one is visible.
 */
import assert from "node:assert/strict";
import { readFatbin } from "../lib/gpu/fatbin.ts";
import { cudaForIsa, judgeKernels } from "../lib/gpu/verdict.ts";
import { gpuCheck } from "../lib/cli/gpu_check.ts";
import { checkBuilds } from "../lib/gpu/candidates.ts";
import { cudaCacheDir, cudaExtCacheDir } from "../lib/gpu/cuda_package.ts";
import { cpuSourceBuildDir, parseProgress } from "../lib/source/cuda_build.ts";
import { SOURCE_HASH } from "../lib/source/llama_source.ts";
import { graphBatchFor, parseServeArgs } from "../lib/cli/flags.ts";
import { gpuDataDir } from "./support/gpu_data.ts";
import { linkOrCopyTree } from "./support/copy_tree.ts";
import { detectHost } from "../lib/gpu/detect.ts";
import { llamaSourceDir } from "./support/llama_source.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const root = new URL("..", import.meta.url).pathname;
const dec = new TextDecoder();

async function hearth(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${root}main.ts`, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("fatbin: the two real packages' libggml-cuda.so, read from their .nv_fatbin", async () => {
  const c13 = await readFatbin(`${cudaCacheDir(gpuDataDir())}/libggml-cuda.so`);
  assert.deepEqual(c13.sass, ["8.6", "8.9", "12.0", "12.1"]);
  assert.deepEqual(c13.ptx, [
    { arch: "7.5", isa: "9.1" },
    { arch: "8.0", isa: "9.1" },
    { arch: "9.0", isa: "9.1" },
  ]);
  assert.ok(c13.needed.includes("libcudart.so.13") && c13.needed.includes("libcublas.so.13"));
  assert.ok(c13.containers > 100, "one fat binary per CUDA translation unit");
  const c12 = await readFatbin(`${cudaExtCacheDir(gpuDataDir())}/libggml-cuda.so`);
  assert.deepEqual(c12.sass, ["8.6"]);
  assert.deepEqual(c12.ptx.map((p) => `${p.arch}@${p.isa}`), [
    "5.0@8.4",
    "6.1@8.4",
    "7.0@8.4",
    "7.5@8.4",
    "8.0@8.4",
  ]);
  assert.ok(c12.needed.includes("libcudart.so.12") && c12.needed.includes("libcublas.so.12"));
  await assert.rejects(
    readFatbin(`${root}node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so`),
    /has no \.nv_fatbin section/,
  );
  await assert.rejects(readFatbin(`${root}deno.json`), /is not an ELF file/);
});

Deno.test("verdict: the rule for SASS minors, PTX arch and ISA, and an unknown driver", () => {
  const k = { sass: ["8.6"], ptx: [{ arch: "8.0", isa: "8.4" }] };
  assert.equal(judgeKernels(k, "8.9", "12.4").reason, "sm_86 SASS", "8.6 SASS runs on 8.9");
  assert.equal(judgeKernels(k, "9.0", "12.4").reason, "compute_80 PTX (ISA 8.4)");
  assert.match(judgeKernels(k, "9.0", "12.3").reason, /ISA 8\.4, which needs a CUDA 12\.4 driver/);
  assert.match(judgeKernels(k, "9.0", undefined).reason, /CUDA version is unknown/);
  assert.match(judgeKernels(k, "7.5", "13.0").reason, /no PTX for an arch at or below 7\.5/);
  assert.equal(cudaForIsa("9.0"), "13.0");
  assert.equal(cudaForIsa("8.8"), "12.9");
  assert.equal(cudaForIsa("9.3"), "13.3", "a newer ISA than the table errs toward refusing");
});

Deno.test("gpu-check: the verdicts for each GPU and driver (what-if, real packages)", async () => {
  const dataDir = gpuDataDir();
  const check = async (compute: string, cudaDriver: string) => {
    const c = await gpuCheck({ compute, cudaDriver, smoke: false, json: true, dataDir });
    const by = Object.fromEntries(c.candidates.map((x) => [x.build, x]));
    return { c, c13: by["prebuilt-cuda13"], c12: by["prebuilt-cuda12"], source: by.source };
  };
  const h100 = await check("9.0", "13.0");
  assert.equal(h100.c13.usable, false);
  assert.match(h100.c13.reason, /no SASS for sm_90 \(has sm_86, sm_89, sm_120, sm_121\)/);
  assert.match(h100.c13.reason, /PTX compute_90 is ISA 9\.1, which needs a CUDA 13\.1 driver/);
  assert.equal(h100.source.usable, false);
  assert.match(h100.source.reason, /hearth build-cuda --arch 90/);

  const newer = await check("9.0", "13.1");
  assert.equal(newer.c13.usable, true);
  assert.match(newer.c13.reason, /through compute_90 PTX \(ISA 9\.1\)/);
  assert.equal(newer.c.choice, "prebuilt-cuda13");

  for (const [gpu, sass] of [["8.6", "sm_86"], ["8.9", "sm_89"], ["12.0", "sm_120"]]) {
    const r = await check(gpu, "13.0");
    assert.equal(r.c13.usable, true, gpu);
    assert.match(r.c13.reason, new RegExp(`through ${sass} SASS`), gpu);
    assert.equal(r.c.choice, "prebuilt-cuda13", gpu);
  }

  const a100 = await check("8.0", "13.0");
  assert.equal(a100.c13.usable, false);
  assert.equal(a100.c12.usable, true);
  assert.match(a100.c12.reason, /through compute_80 PTX \(ISA 8\.4\)/);
  assert.match(a100.c12.reason, /needs libcudart\.so\.12, libcublas\.so\.12/);
  assert.equal(a100.c.choice, "prebuilt-cuda12");

  const v100 = await check("7.0", "13.0");
  assert.equal(v100.c13.usable, false);
  assert.match(v100.c13.reason, /no PTX for an arch at or below 7\.0/);
  assert.match(v100.c12.reason, /through compute_70 PTX \(ISA 8\.4\)/);
  assert.equal(v100.c.choice, "prebuilt-cuda12");
});

Deno.test("candidates: serve judges lazily, so a package is fetched only when needed", async () => {
  const deps = {
    cuda13Dir: () => Promise.resolve(cudaCacheDir(gpuDataDir())),
    cuda12Dir: (): Promise<string> => {
      throw new Error("the CUDA 12 package must not be fetched");
    },
    sourceDirs: () => Promise.reject(new Error("no source builds must be listed")),
    probe: () => true,
  };
  const gpus = [{ index: 0, name: "RTX 3090", compute: "8.6" }];
  const lazy = await checkBuilds({ gpus, driverCuda: "13.0", whatIf: false, lazy: true }, deps);
  assert.deepEqual(
    lazy.candidates.map((c) => [c.build, c.usable, c.deferred ?? false]),
    [
      ["prebuilt-cuda13", true, false],
      ["prebuilt-cuda12", false, true],
      ["source", false, true],
      ["cpu", true, false],
    ],
  );
  assert.match(lazy.candidates[1].reason, /not judged: an earlier build is usable/);
  // Once the caller rejected it (say, its smoke decode failed), the next is judged.
  const skipped = await checkBuilds(
    { gpus, driverCuda: "13.0", whatIf: false, lazy: true, skip: ["prebuilt-cuda13"] },
    { ...deps, cuda12Dir: () => Promise.reject(new Error("offline")) },
  );
  assert.equal(skipped.candidates[0].reason, "already rejected");
  assert.match(skipped.candidates[1].reason, /could not read .*cuda-ext.*: offline/);
});

Deno.test("gpu-check: the CLI prints the contract's JSON and a table; bad flags exit 2", async () => {
  const dataDir = gpuDataDir();
  const json = await hearth([
    "gpu-check",
    "--compute",
    "9.0",
    "--cuda-driver",
    "13.0",
    "--json",
    "--data-dir",
    dataDir,
  ]);
  assert.equal(json.code, 0, json.stderr);
  const out = JSON.parse(json.stdout);
  assert.deepEqual(out.gpus, [{ index: 0, name: "compute 9.0 (what-if)", compute: "9.0" }]);
  assert.deepEqual(out.driver, { cuda: "13.0" });
  assert.deepEqual(
    out.candidates.map((c: { build: string }) => c.build),
    ["prebuilt-cuda13", "prebuilt-cuda12", "source", "cpu"],
  );
  assert.deepEqual(out.candidates[0].sass, ["8.6", "8.9", "12.0", "12.1"]);
  assert.deepEqual(out.candidates[0].ptx[2], { arch: "9.0", isa: "9.1" });
  assert.equal(out.choice, "prebuilt-cuda12");

  // This host has no GPU: every CUDA candidate says so, nothing is fetched, the CPU build wins.
  const host = await hearth(["gpu-check", "--data-dir", `${dataDir}/nonexistent`], {
    CUDA_VISIBLE_DEVICES: "-1",
  });
  assert.equal(host.code, 0, host.stderr);
  assert.match(host.stdout, /✗ prebuilt-cuda13 +unusable: (no NVIDIA GPU found|CUDA_VISIBLE)/);
  assert.match(host.stdout, /choice: cpu$/m);

  // --smoke on this host: the chosen (CPU) build decodes in a child.
  const smokeDir = await Deno.makeTempDir({ prefix: "hearth-gpu-check-smoke-" });
  try {
    const smoke = await hearth(["gpu-check", "--smoke", "--json", "--data-dir", smokeDir], {
      CUDA_VISIBLE_DEVICES: "-1",
    });
    assert.equal(smoke.code, 0, smoke.stderr);
    const cpu = JSON.parse(smoke.stdout).candidates.find((c: { build: string }) =>
      c.build === "cpu"
    );
    assert.match(cpu.smoke, /^decoded 4 tokens on CPU/);
  } finally {
    await Deno.remove(smokeDir, { recursive: true });
  }
  const whatIfSmoke = await hearth(["gpu-check", "--compute", "9.0", "--smoke"]);
  assert.equal(whatIfSmoke.code, 2);
  assert.match(whatIfSmoke.stderr, /--smoke .* cannot go with --compute/);

  const bad = await hearth(["gpu-check", "--compute", "nine"]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--compute "nine": must look like 9\.0/);
});

Deno.test("build-cuda: names what is missing, refuses bad flags, dry run prints commands", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-build-cuda-" });
  try {
    await Deno.mkdir(`${dir}/cuda/bin`, { recursive: true });
    await Deno.writeTextFile(`${dir}/cuda/bin/nvcc`, "#!/bin/sh\nexit 0\n");
    await Deno.chmod(`${dir}/cuda/bin/nvcc`, 0o755);
    const env = { CUDACXX: `${dir}/cuda/bin/nvcc`, CUDA_HOME: `${dir}/cuda` };
    const noCublas = await hearth(["build-cuda", "--arch", "90", "--data-dir", dir], env);
    assert.equal(noCublas.code, 2, noCublas.stderr);
    assert.match(noCublas.stderr, /cannot build llama\.cpp with CUDA: missing cuBLAS/);
    assert.ok(!noCublas.stderr.includes("nvcc ("), "nvcc was found");

    const noNvcc = await hearth(["build-cuda", "--arch", "90", "--data-dir", dir], {
      CUDACXX: `${dir}/none/nvcc`,
    });
    assert.equal(noNvcc.code, 2);
    assert.match(noNvcc.stderr, /missing nvcc: CUDACXX=.*\/none\/nvcc does not exist/);

    const dry = await hearth(
      ["build-cuda", "--arch", "80,90", "--jobs", "3", "--dry-run", "--data-dir", dir],
      env,
    );
    assert.equal(dry.code, 0, dry.stderr);
    const out = `${dir}/llama-cuda-src-80-90-${SOURCE_HASH}`;
    assert.match(dry.stdout, new RegExp(`-B ${out}/build `));
    assert.match(dry.stdout, /'-DCMAKE_CUDA_ARCHITECTURES=80;90'/);
    assert.match(dry.stdout, /-DGGML_CUDA=ON/);
    assert.ok(
      dry.stdout.includes(`--build ${out}/build -j3 --target llama ggml ggml-cpu ggml-cuda`),
    );

    const native = await hearth(["build-cuda", "--data-dir", dir], {
      ...env,
      CUDA_VISIBLE_DEVICES: "-1",
      PATH: "/usr/bin:/bin",
    });
    assert.equal(native.code, 2);
    assert.match(native.stderr, /--arch native: no NVIDIA GPU/);
    const bad = await hearth(["build-cuda", "--arch", "sm90"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--arch "sm90": must be native or compute capabilities/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  assert.deepEqual(parseProgress("[12/353] Building CUDA object x.cu.o"), { step: 12, total: 353 });
  assert.deepEqual(parseProgress("[ 42%] Building CXX object y.o"), { step: 42, total: 100 });
  assert.equal(parseProgress("-- Configuring done"), undefined);
});

Deno.test("source: the bundle's commit is the hash build directories are named by", async () => {
  const src = await llamaSourceDir();
  const out = await new Deno.Command("git", {
    args: ["-C", src, "rev-parse", "HEAD"],
    stdout: "piped",
  }).output();
  assert.ok(dec.decode(out.stdout).startsWith(SOURCE_HASH));
});

Deno.test("--graph-batch: the seed's sizes on a GPU, off on a CPU, off when asked", () => {
  const cfg = (args: string[]) => {
    const r = parseServeArgs(args, {});
    assert.ok(r.ok);
    return r.config;
  };
  assert.deepEqual(graphBatchFor(cfg([]), true).sizes, [1, 2, 4, 8, 16, 32]);
  assert.equal(graphBatchFor(cfg([]), false).sizes, undefined);
  assert.equal(graphBatchFor(cfg(["--graph-batch", "off"]), true).sizes, undefined);
  assert.deepEqual(graphBatchFor(cfg(["--graph-batch", "1,8"]), false).sizes, [1, 8]);
  const big = graphBatchFor(cfg(["--max-batch", "256"]), true);
  assert.equal(big.sizes, undefined);
  assert.match(big.note!, /left off: .*padding sequences/);
});

async function greedy(url: string): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "The capital of France is", max_tokens: 32, temperature: 0 }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).choices[0].text;
}

async function props(url: string) {
  return (await (await fetch(`${url}/props`)).json()).library;
}

Deno.test("source build: served through HEARTH_LLAMA_LIB_DIR, same greedy text as the prebuilt", async () => {
  const model = await tinyModelPath();
  const lib = `${cpuSourceBuildDir()}/lib`;
  const args = ["--model", model, "--max-batch", "2", "--max-seq-len", "256"];
  const prebuilt = await startServer(args);
  let expected: string;
  try {
    expected = await greedy(prebuilt.url);
  } finally {
    await prebuilt.stop();
  }
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-src-serve-" });
  const source = await startServer([...args, "--data-dir", dataDir], {
    env: { HEARTH_LLAMA_LIB_DIR: lib },
  });
  try {
    assert.equal(await greedy(source.url), expected);
    const l = await props(source.url);
    assert.equal(l.build, "custom");
    assert.equal(l.dir, lib);
    assert.match(l.reason, /smoke decode: decoded 4 tokens on CPU.* matching the CPU build/);
    assert.deepEqual(l.rejected, []);
    // llama.cpp loads on a 64 MiB-stack thread, not Deno's 2 MiB blocking pool, and decodes on
    // the engine's web Worker (4 MiB, the stack the smoke decode ran on too).
    const p = await (await fetch(`${source.url}/props`)).json();
    assert.deepEqual(p.thread_stack_bytes, { load: 64 << 20, engine: 4 << 20 });
  } finally {
    await source.stop();
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("smoke: a build whose backend aborts on its first compute is rejected; serve falls back", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-abort-" });
  try {
    // A libllama.so that puts an aborting graph compute in front of the real source build's.
    const real = `${cpuSourceBuildDir()}/lib`;
    await Deno.writeTextFile(
      `${dir}/shim.c`,
      "#include <stdio.h>\n#include <stdlib.h>\n" +
        "int ggml_backend_sched_graph_compute_async(void *s, void *g) {\n" +
        '  fprintf(stderr, "test backend: abort on first compute\\n");\n  abort();\n}\n',
    );
    const cc = await new Deno.Command("cc", {
      args: [
        "-shared",
        "-fPIC",
        "-o",
        `${dir}/libllama.so`,
        `${dir}/shim.c`,
        "-Wl,-soname,libllama-abort-shim.so",
        "-Wl,--no-as-needed",
        `-L${real}`,
        "-l:libllama.so",
        `-Wl,-rpath,${real}`,
      ],
      stderr: "piped",
    }).output();
    assert.ok(cc.success, dec.decode(cc.stderr));
    for (const lib of ["libggml.so", "libggml-base.so", "libggml-cpu.so"]) {
      await Deno.symlink(`${real}/${lib}`, `${dir}/${lib}`);
    }
    const model = await tinyModelPath();
    const srv = await startServer(
      ["--model", model, "--max-batch", "2", "--max-seq-len", "256", "--data-dir", dir],
      { env: { HEARTH_LLAMA_LIB_DIR: dir } },
    );
    try {
      // The first request is served: by the CPU build, not the one that aborts.
      assert.ok((await greedy(srv.url)).length > 0);
      const l = await props(srv.url);
      assert.equal(l.build, "cpu");
      assert.ok(l.dir.endsWith("/bins/linux-x64"), l.dir);
      assert.equal(l.rejected.length, 1);
      assert.equal(l.rejected[0].build, "custom");
      assert.match(
        l.rejected[0].reason,
        /the smoke decode died with SIGABRT: .*test backend: abort on first compute/,
      );
      assert.match(srv.stderr(), /not using custom: HEARTH_LLAMA_LIB_DIR=.*died with SIGABRT/);
    } finally {
      await srv.stop();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The GPUs this test process sees (CUDA_VISIBLE_DEVICES applied); none on a CPU host. */
const hostGpus = (await detectHost()).visible;

Deno.test({
  name:
    "serve on this host's GPU: a CUDA build that passes its smoke decode, else the CPU with why" +
    (hostGpus.length ? "" : " (ignored: no NVIDIA GPU visible)"),
  ignore: hostGpus.length === 0,
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "hearth-gpu-serve-" });
    try {
      // The CUDA packages the setup fetched, in a data dir of the test's own: nothing downloads.
      const dataDir = `${dir}/data`;
      await linkOrCopyTree(gpuDataDir(), dataDir);
      const model = await tinyModelPath();
      // --no-build: a host no prebuilt suits must not compile CUDA for minutes inside a test.
      const args = ["--model", model, "--max-batch", "2", "--max-seq-len", "256", "--no-build"];
      const srv = await startServer([...args, "--data-dir", dataDir], {
        gpu: true,
        timeoutMs: 300_000,
      });
      try {
        assert.ok((await greedy(srv.url)).length > 0);
        const l = await props(srv.url);
        if (l.kind === "cuda") {
          assert.equal(l.gpus.length, hostGpus.length, JSON.stringify(l));
          assert.match(l.reason, /smoke decode: decoded \d+ tokens on .* matching the CPU build/);
          const p = await (await fetch(`${srv.url}/props`)).json();
          assert.ok(p.devices.some((d: { type: string }) => d.type === "gpu"), JSON.stringify(p));
        } else {
          // No prebuilt runs on this GPU and driver: each CUDA build is named with its reason.
          assert.equal(l.build, "cpu", JSON.stringify(l));
          assert.ok(l.rejected.length > 0, JSON.stringify(l));
          assert.match(srv.stderr(), /llama\.cpp: not using prebuilt-cuda13: /);
        }
      } finally {
        await srv.stop();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
