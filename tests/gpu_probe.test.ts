// The driver probe (`lib/gpu/probe.ts`): `hearth gpu-probe` asks libcuda in a child process, so
// a driver that aborts or hangs its caller takes down the child, not the server, and
// `nvidia-smi` then supplies the compute capabilities. The driver is a `libcuda.so.1` compiled
// here (`tests/fixtures/fake_gpu.ts`) and found through LD_LIBRARY_PATH, as the real one would be.
import assert from "node:assert/strict";
import { probeDriver } from "../lib/gpu/probe.ts";
import { FAKE_DRIVER, FAKE_SMI_GPU, fakeLibcuda, fakeNvidiaSmi } from "./fixtures/fake_gpu.ts";

type Host = { dir: string; smiCalls: () => Promise<string[]> };

/** A fake driver and nvidia-smi in a temp dir, removed after `fn`. */
async function withFakeHost(fn: (h: Host) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-probe-" });
  try {
    await fakeLibcuda(`${dir}/lib`);
    const smi = await fakeNvidiaSmi(`${dir}/bin`);
    await fn({ dir, smiCalls: smi.calls });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Runs `fn` with the child's environment set as given (restored after). */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const before = Object.fromEntries(Object.keys(vars).map((k) => [k, Deno.env.get(k)]));
  for (const [k, v] of Object.entries(vars)) Deno.env.set(k, v);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
  }
}

/** The probe with the fake driver in `mode` and the fake nvidia-smi first on PATH. */
async function probeWith(
  h: Host,
  mode: string,
  o: { lib?: string; smi?: boolean; timeoutMs?: number } = {},
) {
  const path = o.smi === false ? `${h.dir}/nothing` : `${h.dir}/bin:${Deno.env.get("PATH")}`;
  const facts = await withEnv(
    { FAKE_CUDA: mode, LD_LIBRARY_PATH: o.lib ?? `${h.dir}/lib`, PATH: path },
    () => probeDriver({ timeoutMs: o.timeoutMs }),
  );
  return { facts, smiCalls: await h.smiCalls() };
}

const smiDevice = { index: 0, name: FAKE_SMI_GPU.name, compute: FAKE_SMI_GPU.compute };

Deno.test("gpu probe: the child reads the driver's version and every device", async () => {
  await withFakeHost(async (h) => {
    const { facts, smiCalls } = await probeWith(h, "ok");
    assert.deepEqual(facts, { ...FAKE_DRIVER, source: "driver" });
    assert.deepEqual(smiCalls, [], "nvidia-smi is only a fallback");
  });
});

Deno.test("gpu probe: a driver that aborts kills the child only; nvidia-smi answers", async () => {
  await withFakeHost(async (h) => {
    const { facts, smiCalls } = await probeWith(h, "abort");
    // This process is still here to compare: the abort happened in `hearth gpu-probe`.
    assert.equal(facts.source, "nvidia-smi");
    assert.equal(facts.cuda, undefined, "nvidia-smi's CSV says no CUDA version");
    assert.deepEqual(facts.devices, [smiDevice]);
    assert.match(facts.error!, /^the driver probe died with SIGABRT$/);
    assert.deepEqual(smiCalls, ["--query-gpu=index,name,compute_cap --format=csv,noheader"]);
  });
});

Deno.test("gpu probe: a driver that hangs is given up on; nvidia-smi answers", async () => {
  await withFakeHost(async (h) => {
    const t0 = performance.now();
    const { facts } = await probeWith(h, "hang", { timeoutMs: 3000 });
    assert.ok(performance.now() - t0 < 20_000, "the probe waited for the hung child");
    assert.equal(facts.source, "nvidia-smi");
    assert.deepEqual(facts.devices, [smiDevice]);
    assert.match(facts.error!, /^the driver probe died with SIGTERM$/);
  });
});

Deno.test("gpu probe: a driver with no device keeps its CUDA version, devices from nvidia-smi", async () => {
  await withFakeHost(async (h) => {
    const { facts } = await probeWith(h, "nodevice");
    assert.deepEqual(facts, {
      cuda: FAKE_DRIVER.cuda,
      devices: [smiDevice],
      source: "nvidia-smi",
      error: "cuInit returned CUDA error 100",
    });
  });
});

Deno.test("gpu probe: no usable driver and no nvidia-smi: nothing, and why", async () => {
  await withFakeHost(async (h) => {
    const { facts } = await probeWith(h, "ok", { lib: `${h.dir}/lib/empty`, smi: false });
    assert.equal(facts.source, "none");
    assert.deepEqual(facts.devices, []);
    assert.equal(facts.cuda, undefined);
    // The child could not bind the driver's calls and said so; no device was invented.
    assert.match(facts.error!, /cuDriverGetVersion|symbol/i);
  });
});
