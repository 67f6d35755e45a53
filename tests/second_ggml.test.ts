// A second copy of ggml in the process is refused (`ffi/library.ts`): two `libggml-base` files
// mean two device registries and two loggers, and tensors of one meeting the other's backends
// crash later, far from the cause. The second copy is another build's real `libggml-base.so` (the
// CPU source build's) under another soname, as a distro's versioned `libggml-base.so.0` would be,
// so the loader keeps it apart from the prebuilt's. It is put into a child process first
// (dlopen, or LD_PRELOAD for `serve`); then opening the prebuilt build must fail with an error that
// names both files, and the same child without it must open the prebuilt.
import assert from "node:assert/strict";
import { prebuiltDir } from "../ffi/library.ts";
import { cpuSourceBuildDir } from "../lib/source/cuda_build.ts";
import { tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const dec = new TextDecoder();
const libraryTs = new URL("../ffi/library.ts", import.meta.url).href;

/**
 * `<dir>/libggml-base.so`: the source build's, its soname `libggml-base.so` rewritten in place
 * to `libggml-bas0.so` (same length), so the loader does not take it for the prebuilt's.
 */
async function otherGgml(dir: string): Promise<string> {
  const bytes = await Deno.readFile(`${cpuSourceBuildDir()}/lib/libggml-base.so`);
  const from = new TextEncoder().encode("libggml-base.so\0");
  const to = new TextEncoder().encode("libggml-bas0.so\0");
  let patched = 0;
  for (let i = 0; i + from.length <= bytes.length; i++) {
    if (from.every((b, k) => bytes[i + k] === b)) {
      bytes.set(to, i);
      patched++;
    }
  }
  assert.ok(patched > 0, "no soname to rewrite");
  const path = `${dir}/libggml-base.so`;
  await Deno.writeFile(path, bytes);
  return path;
}

/** A child that maps `first` (if any) and then opens the prebuilt build: what it said. */
async function openInChild(first?: string): Promise<{ opened?: string; error?: string }> {
  const script = `
    import { openLlama, prebuiltDir } from ${JSON.stringify(libraryTs)};
    const first = Deno.args[0];
    if (first) Deno.dlopen(first, {});
    try {
      console.log(JSON.stringify({ opened: openLlama(prebuiltDir()).dir }));
    } catch (e) {
      console.log(JSON.stringify({ error: e.message }));
    }`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script, ...(first ? [first] : [])],
    env: { HEARTH_LLAMA_LOG: "off" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, dec.decode(out.stderr));
  return JSON.parse(dec.decode(out.stdout).trim().split("\n").pop()!);
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-ggml-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The refusal: its words, and the two files it names (in the order they are mapped). */
function assertRefusal(message: string, other: string): void {
  const m = message.match(
    /two copies of ggml are loaded \(([^,]+), ([^)]+)\): LD_LIBRARY_PATH or another build put a second libggml-base in the process; load only (\S+)/,
  );
  assert.ok(m, message);
  assert.deepEqual([m[1], m[2]].filter((f) => f === other), [other], message);
  assert.match([m[1], m[2]].find((f) => f !== other)!, /\/bins\/linux-x64\/libggml-base\.so$/);
  assert.equal(m[3], prebuiltDir());
}

Deno.test("second ggml: opening a build beside another build's ggml is refused, naming both", () =>
  withDir(async (dir) => {
    const other = await otherGgml(dir);
    assert.deepEqual(await openInChild(), { opened: prebuiltDir() }, "alone, it opens");
    const r = await openInChild(other);
    assert.equal(r.opened, undefined, "two copies of ggml were let through");
    assertRefusal(r.error!, other);
  }));

Deno.test({
  name: "second ggml: serve refuses to start with a preloaded second ggml, and says why",
  sanitizeResources: false,
  fn: () =>
    withDir(async (dir) => {
      const other = await otherGgml(dir);
      const err = await startServer(
        ["--model", await tinyModelPath(), "--max-batch", "1", "--max-seq-len", "256"],
        // No GPU, so nothing runs in a child: the refusal is serve's own.
        { env: { LD_PRELOAD: other, CUDA_VISIBLE_DEVICES: "-1" }, timeoutMs: 60_000 },
      ).then(async (srv) => {
        await srv.stop();
        return undefined;
      }, (e: Error) => e);
      assert.ok(err, "serve started with two copies of ggml");
      assert.match(err.message, /exited before it was ready/);
      assert.match(err.message, /could not load the model: two copies of ggml/);
      assertRefusal(err.message, other);
    }),
});
