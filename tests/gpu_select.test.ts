// Choosing the llama.cpp build on GPU hosts without a GPU: host detection over fake /proc, /sys
// and /dev trees, the selection matrix with stub fetchers, the CUDA package fetch against a fake
// npm registry on loopback (a small tarball shaped like the real one), and the build script's
// dry run.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { detectHost, dlopenProbe, type HostFacts, visibleGpus } from "../lib/gpu/detect.ts";
import {
  CUDA_LLAMA_LIB,
  CUDA_PACKAGE,
  cudaCacheDir,
  cudaLibraryDir,
  npmError,
} from "../lib/gpu/cuda_package.ts";
import {
  libraryLogLine,
  llamaLibraryFiles,
  type SelectDeps,
  selectLlamaLibrary,
} from "../lib/gpu/select.ts";
import type { Candidate } from "../lib/gpu/candidates.ts";

const root = new URL("..", import.meta.url).pathname;

async function withTemp(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-gpu-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function write(path: string, text: string): Promise<void> {
  await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
  await Deno.writeTextFile(path, text);
}

const H200_A = "GPU-aaaa1111-2222-3333-4444-555566667777";
const H200_B = "GPU-bbbb1111-2222-3333-4444-555566667777";

/** A host with two GPUs the way the NVIDIA driver shows them; listed out of bus order. */
async function fakeTwoGpuHost(dir: string): Promise<void> {
  const info = (model: string, uuid: string, bus: string, minor: number) =>
    `Model: \t\t ${model}\nIRQ:   \t\t 42\nGPU UUID: \t ${uuid}\nVideo BIOS: \t 96.00.99.00.01\n` +
    `Bus Type: \t PCIe\nBus Location: \t ${bus}\nDevice Minor: \t ${minor}\nGPU Excluded:\t No\n`;
  await write(
    `${dir}/proc/driver/nvidia/gpus/0000:9a:00.0/information`,
    info("NVIDIA H200", H200_B, "0000:9a:00.0", 1),
  );
  await write(
    `${dir}/proc/driver/nvidia/gpus/0000:19:00.0/information`,
    info("NVIDIA H200", H200_A, "0000:19:00.0", 0),
  );
  await write(`${dir}/sys/module/nvidia/version`, "580.65.06\n");
  for (const dev of ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"]) {
    await write(`${dir}/dev/${dev}`, "");
  }
}

const noSmi = () => Promise.resolve(undefined);
const allFound = () => true;
const mustNotProbe = (lib: string): boolean => {
  throw new Error(`probed ${lib}`);
};

Deno.test("detect: GPUs from /proc in bus order, driver version, runtime probed", async () => {
  await withTemp(async (dir) => {
    await fakeTwoGpuHost(dir);
    const probed: string[] = [];
    const facts = await detectHost({
      root: dir,
      env: {},
      smi: noSmi,
      probe: (lib) => (probed.push(lib), lib !== "libcublas.so.13"),
    });
    assert.equal(facts.gpuSource, "proc");
    assert.deepEqual(facts.gpus.map((g) => [g.index, g.name, g.uuid, g.busId]), [
      [0, "NVIDIA H200", H200_A, "0000:19:00.0"],
      [1, "NVIDIA H200", H200_B, "0000:9a:00.0"],
    ]);
    assert.equal(facts.visible.length, 2);
    assert.equal(facts.driverVersion, "580.65.06");
    assert.deepEqual(probed, ["libcuda.so.1", "libcudart.so.13", "libcublas.so.13"]);
    assert.deepEqual(facts.runtime, {
      probed: true,
      found: ["libcuda.so.1", "libcudart.so.13"],
      missing: ["libcublas.so.13"],
    });
  });
});

Deno.test("detect: CUDA_VISIBLE_DEVICES variants", async () => {
  await withTemp(async (dir) => {
    await fakeTwoGpuHost(dir);
    const visible = async (value: string | undefined) => {
      const facts = await detectHost({
        root: dir,
        env: { CUDA_VISIBLE_DEVICES: value },
        smi: noSmi,
        // Hidden GPUs need no runtime: probing would only cost time.
        probe: value === "" || value === "-1" ? mustNotProbe : allFound,
      });
      return facts.visible.map((g) => g.index);
    };
    assert.deepEqual(await visible(undefined), [0, 1]);
    assert.deepEqual(await visible(""), []);
    assert.deepEqual(await visible("-1"), []);
    assert.deepEqual(await visible("1"), [1]);
    assert.deepEqual(await visible("1,0"), [1, 0]);
    assert.deepEqual(await visible(" 0 , 1 "), [0, 1]);
    assert.deepEqual(await visible("0,7,1"), [0], "the list ends at the first unknown entry");
    assert.deepEqual(await visible("0,0"), [0], "a repeated GPU ends the list");
    assert.deepEqual(await visible("GPU-bbbb"), [1], "UUID prefix");
    assert.deepEqual(await visible(H200_A), [0]);
    assert.deepEqual(await visible("GPU-"), [], "an ambiguous prefix names no GPU");
    assert.deepEqual(await visible("GPU-ffff"), []);
  });
  assert.deepEqual(visibleGpus("MIG-1234", [{ index: 0, name: "A100" }]).map((g) => g.name), [
    "MIG instance MIG-1234",
  ]);
  assert.deepEqual(visibleGpus("MIG-1234", []), []);
});

Deno.test("detect: /dev fallback, nvidia-smi fallback, no GPU, HEARTH_LLAMA_LIB_DIR", async () => {
  await withTemp(async (dir) => {
    for (const dev of ["nvidia3", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps"]) {
      await write(`${dir}/dev/${dev}`, "");
    }
    await write(
      `${dir}/proc/driver/nvidia/version`,
      "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n",
    );
    const facts = await detectHost({ root: dir, env: {}, smi: noSmi, probe: allFound });
    assert.equal(facts.gpuSource, "dev");
    assert.deepEqual(facts.gpus.map((g) => [g.index, g.name]), [[0, "NVIDIA GPU"], [
      1,
      "NVIDIA GPU",
    ]]);
    assert.equal(facts.driverVersion, "550.54.15");

    const smi = () => Promise.resolve("0, NVIDIA GeForce RTX 4090, GPU-1234, 00000000:01:00.0\n");
    const viaSmi = await detectHost({ root: dir, env: {}, smi, probe: allFound });
    assert.equal(viaSmi.gpuSource, "nvidia-smi");
    assert.deepEqual(viaSmi.gpus.map((g) => [g.name, g.uuid]), [
      ["NVIDIA GeForce RTX 4090", "GPU-1234"],
    ]);

    const custom = await detectHost({
      root: dir,
      env: { HEARTH_LLAMA_LIB_DIR: "/opt/llama" },
      smi: noSmi,
      probe: mustNotProbe,
    });
    assert.equal(custom.libDir, "/opt/llama");
    assert.equal(custom.runtime.probed, false);
  });
  await withTemp(async (dir) => {
    const facts = await detectHost({ root: dir, env: {}, smi: noSmi, probe: mustNotProbe });
    assert.equal(facts.gpuSource, "none");
    assert.deepEqual(facts.gpus, []);
    assert.equal(facts.runtime.probed, false);
    assert.equal(facts.driverVersion, undefined);
  });
});

Deno.test("detect: the dlopen probe asks the real loader", () => {
  assert.equal(dlopenProbe("libc.so.6"), true);
  assert.equal(dlopenProbe("libhearth-nonexistent.so.13"), false);
});

// --- selection ---

const gpu0 = { index: 0, name: "NVIDIA H200", uuid: H200_A };
const gpu1 = { index: 1, name: "NVIDIA H200", uuid: H200_B };

function facts(over: Partial<HostFacts>): HostFacts {
  return {
    gpus: [gpu0, gpu1],
    visible: [gpu0, gpu1],
    gpuSource: "proc",
    driverVersion: "580.65.06",
    runtime: {
      probed: true,
      found: ["libcuda.so.1", "libcudart.so.13", "libcublas.so.13"],
      missing: [],
    },
    ...over,
  };
}

const noProbe = { probed: false, found: [], missing: [] };

type Calls = { smoke: string[]; build: string[]; checks: number };

/** Fake host effects: candidates as given, smoke results by directory, a build that succeeds. */
function deps(o: {
  candidates: (built: boolean) => Candidate[];
  smokeFails?: Record<string, string>;
  canBuild?: boolean;
}): { deps: SelectDeps; calls: Calls } {
  const calls: Calls = { smoke: [], build: [], checks: 0 };
  let built = false;
  return {
    calls,
    deps: {
      driver: () =>
        Promise.resolve({
          cuda: "13.0",
          devices: [{ index: 0, name: "NVIDIA H200", compute: "9.0" }, {
            index: 1,
            name: "NVIDIA H200",
            compute: "9.0",
          }],
          source: "driver",
        }),
      check: (input) => {
        calls.checks++;
        assert.deepEqual(input.gpus.map((g) => g.compute), ["9.0", "9.0"]);
        const candidates = o.candidates(built);
        return Promise.resolve({
          gpus: input.gpus,
          driver: { cuda: "13.0" },
          candidates,
          choice: candidates.find((c) => c.usable)!.build,
        });
      },
      smoke: (dir) => {
        calls.smoke.push(dir);
        const why = o.smokeFails?.[dir];
        return Promise.resolve(why ? { ok: false, reason: why } : { ok: true, reason: "decoded" });
      },
      build: (arch) => {
        calls.build.push(arch);
        built = !!o.canBuild;
        return Promise.resolve(built);
      },
    },
  };
}

const cand = (build: Candidate["build"], usable: boolean, reason: string, dir?: string) => ({
  build,
  usable,
  reason,
  sass: [],
  ptx: [],
  dir,
});
const CPU_CAND = cand("cpu", true, "always runs");

Deno.test("select: the matrix", async () => {
  // HEARTH_LLAMA_LIB_DIR passes its smoke decode: used, GPUs listed.
  const lib = `${root}node_modules/@node-llama-cpp/linux-x64/bins/linux-x64`;
  const ok = deps({ candidates: () => [CPU_CAND] });
  const custom = await selectLlamaLibrary(facts({ libDir: lib }), ok.deps);
  assert.equal(custom.kind, "custom");
  assert.equal(custom.dir, lib);
  assert.deepEqual(custom.devices, ["0: NVIDIA H200", "1: NVIDIA H200"]);
  assert.match(custom.reason, /^HEARTH_LLAMA_LIB_DIR; 2 GPUs visible; smoke decode: decoded$/);
  assert.deepEqual(ok.calls.smoke, [lib]);
  assert.equal(ok.calls.checks, 0, "a custom build that runs is not second-guessed");

  // It fails its smoke decode: rejected with the reason, and the normal choice goes on.
  const bad = deps({
    candidates: () => [cand("prebuilt-cuda13", true, "sm_90 SASS", "/c13"), CPU_CAND],
    smokeFails: { [lib]: "the smoke decode died with SIGABRT: boom" },
  });
  const fellBack = await selectLlamaLibrary(facts({ libDir: lib }), bad.deps);
  assert.equal(fellBack.build, "prebuilt-cuda13");
  assert.equal(fellBack.dir, "/c13");
  assert.deepEqual(fellBack.rejected, [{
    build: "custom",
    reason: `HEARTH_LLAMA_LIB_DIR=${lib}: the smoke decode died with SIGABRT: boom`,
  }]);
  const noLib = await selectLlamaLibrary(facts({ libDir: "/nonexistent" }), ok.deps);
  assert.match(noLib.rejected[0].reason, /\/nonexistent holds no llama\.cpp library/);

  // No GPU: the CPU build, nothing probed, fetched or smoke-tested.
  const none = deps({ candidates: () => assert.fail("no check without a GPU") });
  const noGpu = await selectLlamaLibrary(
    facts({ gpus: [], visible: [], gpuSource: "none", runtime: noProbe }),
    none.deps,
  );
  assert.equal(noGpu.kind, "cpu");
  assert.equal(noGpu.reason, "no NVIDIA GPU found");
  assert.ok(noGpu.dir.endsWith("/bins/linux-x64"), "the CPU build is loaded by its path");
  assert.deepEqual(none.calls, { smoke: [], build: [], checks: 0 });
  const hidden = await selectLlamaLibrary(
    facts({ visible: [], cudaVisibleDevices: "-1", runtime: noProbe }),
    none.deps,
  );
  assert.equal(hidden.reason, 'CUDA_VISIBLE_DEVICES="-1" hides all 2 GPUs');
  const hiddenEmpty = await selectLlamaLibrary(
    facts({ gpus: [gpu0], visible: [], cudaVisibleDevices: "", runtime: noProbe }),
    none.deps,
  );
  assert.equal(hiddenEmpty.reason, 'CUDA_VISIBLE_DEVICES="" hides the GPU');

  // The H100 case: CUDA 13 unusable by facts, CUDA 12 usable by facts but its smoke decode
  // aborts, no source build: one is built, checked again, smoke-tested and chosen.
  const h100 = deps({
    candidates: (built) => [
      cand("prebuilt-cuda13", false, "no SASS for sm_90, PTX ISA 9.1 needs 13.1"),
      cand("prebuilt-cuda12", false, "libcudart.so.12 cannot be loaded"),
      built ? cand("source", true, "sm_90 SASS", "/src/lib") : cand("source", false, "none"),
      CPU_CAND,
    ],
    canBuild: true,
  });
  const lines: string[] = [];
  const src = await selectLlamaLibrary(facts({}), h100.deps, (l) => lines.push(l));
  assert.deepEqual(h100.calls.build, ["90"], "built once, for the GPUs' arch");
  assert.equal(h100.calls.checks, 2);
  assert.equal(src.kind, "cuda");
  assert.equal(src.build, "source");
  assert.equal(src.dir, "/src/lib");
  assert.match(src.reason, /^sm_90 SASS; smoke decode: decoded$/);
  assert.deepEqual(src.rejected.map((r) => r.build), [
    "prebuilt-cuda13",
    "prebuilt-cuda12",
    "source",
  ], "the missing source build is said before it is built");
  assert.match(lines[0], /^llama\.cpp: not using prebuilt-cuda13: no SASS for sm_90/);
  assert.match(libraryLogLine(src), /^llama\.cpp: source build in \/src\/lib on 2 GPUs/);

  // A usable build whose smoke decode fails moves on to the next; none left: the CPU build.
  const smokeFails = deps({
    candidates: () => [cand("prebuilt-cuda13", true, "sm_90 SASS", "/c13"), CPU_CAND],
    smokeFails: { "/c13": "the smoke decode died with SIGABRT: CUDA error: the provided PTX" },
  });
  const cpuAfter = await selectLlamaLibrary(facts({}), smokeFails.deps);
  assert.equal(cpuAfter.kind, "cpu");
  assert.deepEqual(smokeFails.calls.build, ["90"], "nothing usable: a build is attempted");
  assert.match(cpuAfter.rejected[0].reason, /sm_90 SASS; but the smoke decode died with SIGABRT/);
  assert.match(cpuAfter.reason, /2 GPUs visible but no GPU build can run here/);

  // --no-build (the build hook declines): straight to the CPU build.
  const noBuild = deps({
    candidates: () => [cand("prebuilt-cuda13", false, "no SASS"), CPU_CAND],
    canBuild: false,
  });
  const declined = await selectLlamaLibrary(facts({}), noBuild.deps);
  assert.equal(declined.kind, "cpu");
  assert.equal(noBuild.calls.checks, 1, "nothing built, nothing re-checked");
});

Deno.test("select: the log line says which build and why", () => {
  const base = { rejected: [], dir: "/c/d" };
  assert.equal(
    libraryLogLine({
      ...base,
      kind: "cpu",
      build: "cpu",
      devices: [],
      reason: "no NVIDIA GPU found",
    }),
    "llama.cpp: CPU build @node-llama-cpp/linux-x64@3.22.1: no NVIDIA GPU found",
  );
  assert.equal(
    libraryLogLine({
      ...base,
      kind: "cuda",
      build: "prebuilt-cuda13",
      devices: ["0: NVIDIA H200"],
      reason: "r",
    }),
    "llama.cpp: CUDA build @node-llama-cpp/linux-x64-cuda@3.22.1 in /c/d on 1 GPU " +
      "(0: NVIDIA H200): r",
  );
  assert.equal(
    libraryLogLine({
      ...base,
      kind: "custom",
      build: "custom",
      dir: "/o",
      devices: [],
      reason: "HEARTH_LLAMA_LIB_DIR",
    }),
    "llama.cpp: custom build in /o: HEARTH_LLAMA_LIB_DIR",
  );
});

Deno.test("select: library file names of each kind of build", async () => {
  await withTemp(async (dir) => {
    assert.equal(await llamaLibraryFiles(dir), undefined);
    await write(`${dir}/libllama.so`, "");
    await write(`${dir}/libggml.so`, "");
    assert.deepEqual(await llamaLibraryFiles(dir), { llama: "libllama.so", ggml: "libggml.so" });
    await write(`${dir}/libllama.cuda.v0.5.0.so`, "");
    await write(`${dir}/libggml.cuda.v0.5.0.so`, "");
    assert.deepEqual(await llamaLibraryFiles(dir), {
      llama: "libllama.cuda.v0.5.0.so",
      ggml: "libggml.cuda.v0.5.0.so",
    });
  });
  assert.deepEqual(
    await llamaLibraryFiles(`${root}node_modules/@node-llama-cpp/linux-x64/bins/linux-x64`),
    { llama: "libllama.v0.5.0.so", ggml: "libggml.v0.5.0.so" },
  );
});

// --- the CUDA package against a fake registry ---

const FAKE_LIBS = [
  "libllama.cuda.v0.5.0.so",
  "libggml.cuda.v0.5.0.so",
  "libggml-base.so",
  "libggml-cuda.so",
  "libggml-cpu-x64.so",
];

type Registry = {
  url: string;
  integrity: string;
  tarballHits: () => number;
  close: () => Promise<void>;
};

/** Serves a packument and a tarball shaped like the real package (same paths, tiny files). */
async function fakeRegistry(dir: string): Promise<Registry> {
  const pkg = `${dir}/pkgsrc/package`;
  await write(
    `${pkg}/package.json`,
    JSON.stringify({ name: CUDA_PACKAGE, version: "3.22.1" }),
  );
  for (const lib of FAKE_LIBS) await write(`${pkg}/bins/linux-x64-cuda/${lib}`, `fake ${lib}\n`);
  await write(`${pkg}/dist/index.js`, "export {};\n");
  const tar = await new Deno.Command("tar", {
    args: ["czf", `${dir}/pkg.tgz`, "package"],
    cwd: `${dir}/pkgsrc`,
  }).output();
  assert.ok(tar.success, "tar czf");
  const bytes = await Deno.readFile(`${dir}/pkg.tgz`);
  const integrity = `sha512-${createHash("sha512").update(bytes).digest("base64")}`;
  let hits = 0;
  let url = "";
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req): Response => {
    const path = decodeURIComponent(new URL(req.url).pathname);
    if (path === `/${CUDA_PACKAGE}`) {
      const tarball = `${url}/${CUDA_PACKAGE}/-/linux-x64-cuda-3.22.1.tgz`;
      return Response.json({
        name: CUDA_PACKAGE,
        "dist-tags": { latest: "3.22.1" },
        versions: {
          "3.22.1": {
            name: CUDA_PACKAGE,
            version: "3.22.1",
            dist: { tarball, integrity },
          },
        },
      });
    }
    if (path.endsWith(".tgz")) {
      hits++;
      return new Response(bytes, { headers: { "content-type": "application/octet-stream" } });
    }
    return new Response("not found", { status: 404 });
  });
  url = `http://127.0.0.1:${server.addr.port}`;
  return { url, integrity, tarballHits: () => hits, close: () => server.shutdown() };
}

function npmEnv(dir: string, registry: string): Record<string, string> {
  return {
    npm_config_registry: `${registry}/`,
    npm_config_cache: `${dir}/npm-cache`,
    npm_config_fetch_retries: "0",
    npm_config_update_notifier: "false",
  };
}

async function leftovers(cacheRoot: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(cacheRoot)) names.push(e.name);
  return names.sort();
}

Deno.test("cuda package: fetch, verify, unpack; then cached; concurrent fetches agree", async () => {
  await withTemp(async (dir) => {
    const reg = await fakeRegistry(dir);
    try {
      const base = {
        projectRoot: `${dir}/project`,
        env: npmEnv(dir, reg.url),
        integrity: reg.integrity,
      };
      const cacheRoot = `${dir}/cache`;
      const lines: string[] = [];
      const got = await cudaLibraryDir({ ...base, cacheRoot, log: (l) => lines.push(l) });
      assert.equal(got, cudaCacheDir(cacheRoot));
      assert.equal(got, `${cacheRoot}/llama-cuda-3.22.1`);
      for (const lib of FAKE_LIBS) {
        assert.equal(await Deno.readTextFile(`${got}/${lib}`), `fake ${lib}\n`);
      }
      assert.deepEqual(await leftovers(cacheRoot), ["llama-cuda-3.22.1"], "no work dirs left");
      assert.equal(reg.tarballHits(), 1);
      assert.match(lines.join("\n"), /fetching @node-llama-cpp\/linux-x64-cuda@3\.22\.1/);

      // Cached: npm is not even started.
      const again = await cudaLibraryDir({ ...base, cacheRoot, npm: "/nonexistent/npm" });
      assert.equal(again, got);
      assert.equal(reg.tarballHits(), 1);

      // Two starts at once against an empty cache: both succeed with one intact directory.
      const both = `${dir}/cache2`;
      const [a, b] = await Promise.all([
        cudaLibraryDir({ ...base, cacheRoot: both }),
        cudaLibraryDir({ ...base, cacheRoot: both }),
      ]);
      assert.equal(a, b);
      assert.deepEqual((await leftovers(a)).sort(), [...FAKE_LIBS].sort());
      assert.deepEqual(await leftovers(both), ["llama-cuda-3.22.1"]);
    } finally {
      await reg.close();
    }
  });
});

Deno.test("cuda package: integrity mismatch, unreachable registry, missing npm", async () => {
  await withTemp(async (dir) => {
    const reg = await fakeRegistry(dir);
    const cacheRoot = `${dir}/cache`;
    try {
      const wrong = `sha512-${createHash("sha512").update("other").digest("base64")}`;
      await assert.rejects(
        cudaLibraryDir({
          projectRoot: dir,
          cacheRoot,
          env: npmEnv(dir, reg.url),
          integrity: wrong,
        }),
        (e: Error) => {
          assert.match(
            e.message,
            /^integrity mismatch for @node-llama-cpp\/linux-x64-cuda@3\.22\.1/,
          );
          assert.ok(e.message.includes(wrong) && e.message.includes(reg.integrity));
          assert.ok(!e.message.includes("\n"), "one line");
          return true;
        },
      );
      assert.deepEqual(await leftovers(cacheRoot), [], "nothing kept from a bad tarball");
      // The pinned integrity is the default: the fake tarball does not pass without an override.
      await assert.rejects(
        cudaLibraryDir({ projectRoot: dir, cacheRoot, env: npmEnv(dir, reg.url) }),
        /integrity mismatch/,
      );
    } finally {
      await reg.close();
    }
    // The registry is gone now: its port refuses connections (and a fresh npm cache cannot
    // stand in for it).
    await assert.rejects(
      cudaLibraryDir({ projectRoot: dir, cacheRoot, env: npmEnv(`${dir}/fresh`, reg.url) }),
      (e: Error) => {
        assert.match(e.message, /registry http:\/\/127\.0\.0\.1:\d+ unreachable \(.*ECONNREFUSED/);
        assert.ok(!e.message.includes("\n"), "one line");
        return true;
      },
    );
    await assert.rejects(
      cudaLibraryDir({ projectRoot: dir, cacheRoot, npm: "/nonexistent/npm" }),
      /`\/nonexistent\/npm` is not on PATH/,
    );
    assert.deepEqual(await leftovers(cacheRoot), []);
  });
});

Deno.test("cuda package: a node_modules copy of this release is used as is", async () => {
  await withTemp(async (dir) => {
    const pkg = `${dir}/node_modules/${CUDA_PACKAGE}`;
    await write(`${pkg}/bins/linux-x64-cuda/${CUDA_LLAMA_LIB}`, "");
    await write(`${pkg}/package.json`, JSON.stringify({ version: "3.21.1" }));
    const opts = { projectRoot: dir, cacheRoot: `${dir}/cache`, npm: "/nonexistent/npm" };
    await assert.rejects(cudaLibraryDir(opts), /not on PATH/, "another release is not used");
    await write(`${pkg}/package.json`, JSON.stringify({ version: "3.22.1" }));
    assert.equal(await cudaLibraryDir(opts), `${pkg}/bins/linux-x64-cuda`);
  });
});

Deno.test("cuda package: npm's errors become one line", () => {
  assert.equal(
    npmError("npm error code E404\nnpm error 404 Not Found - GET https://r/x\n"),
    "cannot fetch @node-llama-cpp/linux-x64-cuda@3.22.1: not found on the npm registry (E404)",
  );
  assert.match(
    npmError(
      "npm error code ENOTFOUND\nnpm error network request to http://reg.invalid/x failed, " +
        "reason: getaddrinfo ENOTFOUND reg.invalid\n",
    ),
    /registry http:\/\/reg\.invalid unreachable \(getaddrinfo ENOTFOUND reg\.invalid\)$/,
  );
  assert.match(npmError("npm error code EINTEGRITY\n"), /^integrity mismatch/);
  assert.match(npmError("npm error code EWHAT\nnpm error it broke\n"), /\(EWHAT\): it broke$/);
});
