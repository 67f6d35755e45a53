// A stop waits for the prompt cache's disk writes under way (README, "Disk": "a stop waits up to
// 30 s for the writes under way"): a state on its way to `--cache-dir` when SIGTERM comes is on
// disk, whole, when the process exits. To hold a write under way for as long as the test needs, a
// small LD_PRELOAD library compiled here makes the open of a cache file (`*.hkv.tmp`) wait until
// a gate file exists, marking that it got there; everything else is the real server.
import assert from "node:assert/strict";
import { decodeEntry } from "../lib/engine/cache/prompt_cache.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";
import { compileShared } from "./fixtures/fake_gpu.ts";

/** Opens of `*.hkv.tmp` wait for `$HEARTH_TEST_WRITE_GATE`, touching `<gate>.reached` first. */
const GATE = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void gate(const char *path) {
  size_t n = path ? strlen(path) : 0;
  const char *g = getenv("HEARTH_TEST_WRITE_GATE");
  if (!g || n < 8 || strcmp(path + n - 8, ".hkv.tmp") != 0) return;
  char reached[4096];
  snprintf(reached, sizeof reached, "%s.reached", g);
  int fd = syscall(SYS_openat, AT_FDCWD, reached, O_CREAT | O_WRONLY, 0644);
  if (fd >= 0) close(fd);
  while (access(g, F_OK) != 0) usleep(20000);
}
#define MODE(flags) \\
  mode_t mode = 0; \\
  if ((flags) & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, int); va_end(a); }
int open(const char *p, int flags, ...) {
  MODE(flags) gate(p);
  static int (*real)(const char *, int, ...);
  if (!real) real = dlsym(RTLD_NEXT, "open");
  return real(p, flags, mode);
}
int open64(const char *p, int flags, ...) {
  MODE(flags) gate(p);
  static int (*real)(const char *, int, ...);
  if (!real) real = dlsym(RTLD_NEXT, "open64");
  return real(p, flags, mode);
}
int openat(int dir, const char *p, int flags, ...) {
  MODE(flags) gate(p);
  static int (*real)(int, const char *, int, ...);
  if (!real) real = dlsym(RTLD_NEXT, "openat");
  return real(dir, p, flags, mode);
}
int openat64(int dir, const char *p, int flags, ...) {
  MODE(flags) gate(p);
  static int (*real)(int, const char *, int, ...);
  if (!real) real = dlsym(RTLD_NEXT, "openat64");
  return real(dir, p, flags, mode);
}
`;

/** `n` token ids from a seeded generator, in the tiny model's ordinary-token range. */
function randomTokens(n: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 1000 + (s % 20000);
  });
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

/** Every file under `dir`, recursively, relative to it. */
async function filesUnder(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if (e.isDirectory) out.push(...await filesUnder(`${dir}/${e.name}`, `${prefix}${e.name}/`));
    else out.push(`${prefix}${e.name}`);
  }
  return out.sort();
}

async function until(what: string, check: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

Deno.test({
  name: "stop: SIGTERM waits for the prompt-cache disk write under way, which lands whole",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "hearth-stop-" });
    try {
      const shim = `${dir}/gate.so`;
      await compileShared(shim, GATE, ["-ldl"]);
      const cache = `${dir}/cache`;
      const gate = `${dir}/gate`;
      const srv = await startServer([
        "--model",
        await tinyModelPath(),
        "--max-batch",
        "1",
        "--max-seq-len",
        "1024",
        "--threads",
        "2",
        "--cache-ram",
        "0.5",
        "--cache-dir",
        cache,
        "--cache-disk",
        "1",
      ], { env: { LD_PRELOAD: shim, HEARTH_TEST_WRITE_GATE: gate } });
      let exited: Deno.CommandStatus | undefined;
      const status = srv.child.status.then((s) => exited = s);
      try {
        const complete = async (prompt: number[]) => {
          const r = await fetch(`${srv.url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ prompt, max_tokens: 4, temperature: 0, ignore_eos: true }),
          });
          assert.equal(r.status, 200, await r.clone().text());
          await r.body?.cancel();
        };
        const a = randomTokens(500, 21);
        await complete(a);
        await complete(randomTokens(500, 22)); // a's cells leave the slot: saved, then written
        await until("the cache write to start", () => exists(`${gate}.reached`), 30_000);

        srv.child.kill("SIGTERM");
        await new Promise((r) => setTimeout(r, 1500));
        assert.equal(exited, undefined, "the server exited with a cache write under way");
        assert.deepEqual(
          (await filesUnder(cache)).filter((f) => f.endsWith(".hkv")),
          [],
          "the write was held",
        );

        await Deno.writeTextFile(gate, "");
        await Promise.race([
          status,
          new Promise((_, reject) =>
            setTimeout(() => reject(new Error("no exit after the write")), 20_000)
          ),
        ]);
        assert.equal(exited!.code, 0, srv.stderr());
        const files = await filesUnder(cache);
        assert.equal(files.length, 1, `one state file, no leftover .tmp: ${files}`);
        assert.match(files[0], /\.hkv$/);
        const entry = decodeEntry(await Deno.readFile(`${cache}/${files[0]}`), true);
        assert.deepEqual([...entry.tokens.subarray(0, a.length)], a, "the state is a's");
        assert.equal(entry.state?.length, entry.stateBytes, "the state is whole");
        assert.ok(entry.stateBytes > 0);
      } finally {
        await srv.stop();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
