// The smoke decode's two verdicts that need a build to misbehave without crashing
// (`lib/gpu/smoke.ts`): a build whose logits disagree with the CPU build's (negated, or NaN) and
// a build that hangs past the timeout. Each misbehaving build is the real CPU source build with a
// small `libllama.so` in front of it, compiled here, that changes one call; the verdict is
// checked on `smokeTest` itself and on `serve`, which must reject the build and serve on the CPU
// build. The servers hide any GPU (CUDA_VISIBLE_DEVICES=-1): the fallback under test is the CPU's.
import assert from "node:assert/strict";
import { smokeTest } from "../lib/gpu/smoke.ts";
import { cpuSourceBuildDir } from "../lib/source/cuda_build.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { compileShared } from "./fixtures/fake_gpu.ts";

const REAL = `${cpuSourceBuildDir()}/lib`;

/**
 * A build directory whose `libllama.so` defines `source`'s functions and takes the rest from the
 * real source build (beside which its ggml libraries are linked).
 */
async function shimBuild(dir: string, source: string): Promise<string> {
  await compileShared(`${dir}/libllama.so`, source, [
    '-DREAL_LLAMA="' + REAL + '/libllama.so"',
    "-Wl,-soname,libllama-test-shim.so",
    "-Wl,--no-as-needed",
    `-L${REAL}`,
    "-l:libllama.so",
    `-Wl,-rpath,${REAL}`,
    "-ldl",
  ]);
  for (const lib of ["libggml.so", "libggml-base.so", "libggml-cpu.so"]) {
    await Deno.symlink(`${REAL}/${lib}`, `${dir}/${lib}`);
  }
  return dir;
}

/** `llama_get_logits_ith` that rewrites every logit of the row with `WRONG(x)`. */
const wrongLogits = (wrong: string) =>
  `#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#define WRONG(x) (${wrong})
const void *llama_get_model(const void *ctx);
const void *llama_model_get_vocab(const void *model);
int llama_vocab_n_tokens(const void *vocab);
float *llama_get_logits_ith(void *ctx, int i) {
  static float *(*real)(void *, int);
  if (!real) real = (float *(*)(void *, int))dlsym(dlopen(REAL_LLAMA, RTLD_NOW | RTLD_NOLOAD),
                                                   "llama_get_logits_ith");
  float *l = real(ctx, i);
  if (!l) return l;
  int n = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  for (int k = 0; k < n; k++) l[k] = WRONG(l[k]);
  return l;
}
`;

/** A graph compute that never returns: a wedged GPU. */
const HANG = `#include <stdio.h>
#include <unistd.h>
int ggml_backend_sched_graph_compute_async(void *s, void *g) {
  fprintf(stderr, "test backend: fault injected, hanging in the first compute\\n");
  for (;;) pause();
}
`;

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-smoke-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** `serve` with `HEARTH_LLAMA_LIB_DIR=lib` and no GPU: what it chose, and a greedy reply. */
async function serveWith(lib: string, dataDir: string, env: Record<string, string> = {}) {
  const srv = await startServer(
    [
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
    ],
    { env: { HEARTH_LLAMA_LIB_DIR: lib, CUDA_VISIBLE_DEVICES: "-1", ...env } },
  );
  try {
    const library = (await (await fetch(`${srv.url}/props`)).json()).library;
    const r = await fetch(`${srv.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Hello", max_tokens: 4, temperature: 0, ignore_eos: true }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    const body = await r.json();
    return { library, tokens: body.usage.completion_tokens as number, stderr: srv.stderr() };
  } finally {
    await srv.stop();
  }
}

/** The CPU build was taken, and `custom` was rejected for `reason`. */
function assertFellBack(library: Record<string, unknown>, reason: RegExp): void {
  assert.equal(library.build, "cpu");
  assert.equal(library.kind, "cpu");
  assert.ok(String(library.dir).endsWith("/bins/linux-x64"), String(library.dir));
  const rejected = library.rejected as { build: string; reason: string }[];
  assert.equal(rejected.length, 1, JSON.stringify(rejected));
  assert.equal(rejected[0].build, "custom");
  assert.match(rejected[0].reason, reason);
}

Deno.test({
  name: "smoke: a build whose logits disagree with the CPU build's is rejected; serve falls back",
  sanitizeResources: false,
  fn: () =>
    withDir(async (dir) => {
      const lib = await shimBuild(`${dir}/negated`, wrongLogits("-(x)"));
      // It decodes to the end without an error: only the comparison can tell.
      const r = await smokeTest(lib, { dataDir: dir });
      assert.equal(r.ok, false);
      assert.equal(
        r.reason,
        "the smoke decode ran but its logits disagree with the CPU build's (cosine -1.000 < 0.99)",
      );
      assert.equal(r.output?.tokens.length, 4, "the candidate's own decode finished");

      const served = await serveWith(lib, dir);
      assertFellBack(served.library, /: the smoke decode ran but its logits disagree .*cosine -1/);
      assert.equal(served.tokens, 4);
      assert.match(served.stderr, /not using custom: HEARTH_LLAMA_LIB_DIR=.*logits disagree/);
    }),
});

Deno.test("smoke: a build whose logits are NaN is rejected as not finite", () =>
  withDir(async (dir) => {
    const lib = await shimBuild(`${dir}/nan`, wrongLogits("NAN"));
    const r = await smokeTest(lib, { dataDir: dir });
    assert.equal(r.ok, false);
    assert.equal(r.reason, "the smoke decode ran but its logits are not finite (NaN or Inf)");
  }));

Deno.test({
  name: "smoke: a build that hangs is given up on at the timeout; serve falls back",
  sanitizeResources: false,
  fn: () =>
    withDir(async (dir) => {
      const lib = await shimBuild(`${dir}/hang`, HANG);
      // serve's smoke timeout shortened, as a slow host would lengthen it. On a loaded host the
      // child may still be loading when it fires (its stderr tail then says so, not the shim's
      // line): the verdict is the timeout either way.
      const served = await serveWith(lib, dir, { HEARTH_SMOKE_TIMEOUT_MS: "10000" });
      assertFellBack(
        served.library,
        /^HEARTH_LLAMA_LIB_DIR=.*: the smoke decode died with SIGTERM \(no answer within 10 s\): /,
      );
      assert.equal(served.tokens, 4);
    }),
});
