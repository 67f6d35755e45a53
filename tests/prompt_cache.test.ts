/**
 * The prompt cache beyond the slots (`lib/engine/cache/prompt_cache.ts`, DESIGN 4d): its index and
 * tiers on their own, then in the engine (a slot's KV saved when another request takes the slot,
 * restored for a later prompt sharing its prefix, with the same output as computing it), then
 * the disk tier across a restart of the real server, with a mismatched cache type as a miss.
 */
import assert from "node:assert/strict";
import {
  cacheFolder,
  decodeEntry,
  encodeEntry,
  openPromptCache,
} from "../lib/engine/cache/prompt_cache.ts";
import { loadEngineModel } from "../lib/engine/model.ts";
import { modelFingerprint } from "../lib/engine/prefill_decode.ts";
import { inProcessScheduler } from "../lib/engine/in_process.ts";
import type { GenEvent, GenRequest } from "../lib/engine/scheduler.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import { cachedTinyModel, tinyModelPath } from "./support/models.ts";
import { startServer } from "./support/server.ts";

const toks = (...xs: number[]) => Int32Array.from(xs);
const bytes = (n: number, fill = 1) => new Uint8Array(n).fill(fill);

/** `n` token ids from a seeded generator, in the tiny model's ordinary-token range. */
function randomTokens(n: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 1000 + (s % 20000);
  });
}

Deno.test("prompt cache: the longest shared prefix wins, up to the limit; exact needs every token", () => {
  const c = openPromptCache({ ramBytes: 1 << 20, fingerprint: "m" });
  c.put(toks(1, 2, 3, 4, 5), bytes(10), true);
  c.put(toks(1, 2, 9), bytes(10), true);
  const prompt = toks(1, 2, 3, 4, 7, 8);
  assert.deepEqual(c.find(prompt, { limit: 5, exact: false }), {
    id: 1,
    common: 4,
    length: 5,
    tier: "ram",
  });
  assert.equal(c.find(prompt, { limit: 3, exact: false })?.common, 3);
  // Exact: the 5-token entry is not all in the prompt, the 3-token one diverges at its end.
  assert.equal(c.find(prompt, { limit: 5, exact: true }), undefined);
  c.put(toks(1, 2, 3), bytes(10), true);
  assert.equal(c.find(prompt, { limit: 5, exact: true })?.length, 3);
  assert.equal(c.find(toks(7, 7), { limit: 1, exact: false }), undefined);
});

Deno.test("prompt cache: a longer state replaces its prefixes; covers; LRU within the memory bound", () => {
  const c = openPromptCache({ ramBytes: 25, fingerprint: "m" });
  c.put(toks(1, 2), bytes(10), false);
  c.put(toks(1, 2, 3), bytes(10), false); // supersedes [1, 2]
  assert.equal(c.stats().ram.entries, 1);
  assert.ok(c.covers([1, 2], false));
  assert.ok(!c.covers([1, 2], true), "exact: only the same tokens");
  c.put(toks(5, 6), bytes(10), false);
  // [1, 2, 3] is touched, so [5, 6] is the least recently used when a third arrives.
  assert.ok(c.take(c.find(toks(1, 2, 3, 4), { limit: 3, exact: false })!.id));
  c.put(toks(8, 9), bytes(10), false);
  const s = c.stats().ram;
  assert.equal(s.entries, 2);
  assert.equal(s.bytes, 20);
  assert.equal(c.find(toks(5, 6, 7), { limit: 2, exact: false }), undefined);
  assert.ok(c.find(toks(1, 2, 3, 4), { limit: 3, exact: false }));
  // A state larger than the whole tier is not kept.
  c.put(toks(4, 4, 4), bytes(30), false);
  assert.equal(c.find(toks(4, 4, 4, 4), { limit: 3, exact: false }), undefined);
  c.count(undefined, 0);
  c.count({ id: 1, common: 3, length: 3, tier: "ram" }, 3);
  assert.deepEqual([c.stats().ram.hits, c.stats().ram.misses, c.stats().ram.tokens], [1, 1, 3]);
});

Deno.test("prompt cache: the disk tier survives a reopen; other fingerprints, damaged files and leftovers are misses", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const a = openPromptCache({ ramBytes: 0, dir, diskBytes: 1000, fingerprint: "model-a:f16" });
    a.put(toks(1, 2, 3), bytes(40, 7), false);
    // With no memory tier the state is served from its pending write, then from the file.
    assert.deepEqual(
      a.take(a.find(toks(1, 2, 3, 4), { limit: 3, exact: false })!.id)?.state,
      bytes(40, 7),
    );
    await a.flushed();
    assert.equal(a.stats().disk?.entries, 1);
    const folder = cacheFolder(dir, "model-a:f16");
    await Deno.writeTextFile(`${folder}/junk.hkv`, "not a cache file");
    await Deno.writeFile(`${folder}/left.hkv.tmp`, bytes(3));
    await Deno.writeFile(
      `${folder}/other.hkv`,
      encodeEntry("model-b:f16", toks(1, 2, 3), bytes(40)),
    );

    const b = openPromptCache({ ramBytes: 1000, dir, diskBytes: 1000, fingerprint: "model-a:f16" });
    assert.equal(b.stats().disk?.entries, 1, "only the entry of this fingerprint is indexed");
    assert.ok(!(await exists(`${folder}/left.hkv.tmp`)), "a write cut short is cleaned up");
    const hit = b.find(toks(1, 2, 3, 9), { limit: 3, exact: false });
    assert.equal(hit?.tier, "disk");
    assert.deepEqual(b.take(hit!.id)?.state, bytes(40, 7));
    // Read back into memory: the next lookup is served there.
    assert.equal(b.find(toks(1, 2, 3, 9), { limit: 3, exact: false })?.tier, "ram");

    // Another model's cache lives in another folder: nothing of model-a is found.
    const other = openPromptCache({
      ramBytes: 1000,
      dir,
      diskBytes: 1000,
      fingerprint: "model-a:q8_0",
    });
    assert.equal(other.find(toks(1, 2, 3, 9), { limit: 3, exact: false }), undefined);

    // A file changed under the index is dropped when read, not loaded.
    const c = openPromptCache({ ramBytes: 0, dir, diskBytes: 1000, fingerprint: "model-a:f16" });
    for await (const e of Deno.readDir(folder)) {
      if (e.name !== "junk.hkv" && e.name !== "other.hkv") {
        await Deno.writeFile(
          `${folder}/${e.name}`,
          encodeEntry("model-a:f16", toks(1, 2, 3), bytes(5)),
        );
      }
    }
    const h = c.find(toks(1, 2, 3, 9), { limit: 3, exact: false });
    assert.equal(c.take(h!.id), undefined);
    assert.equal(c.stats().disk?.entries, 0);
    // The disk bound evicts the least recently used files.
    const d = openPromptCache({ ramBytes: 0, dir, diskBytes: 100, fingerprint: "model-a:f16" });
    for (let i = 0; i < 4; i++) d.put(toks(50 + i, 1), bytes(40), false);
    await d.flushed();
    assert.equal(d.stats().disk?.entries, 2);
    assert.equal(d.find(toks(50, 1, 1), { limit: 2, exact: false }), undefined);
    assert.ok(d.find(toks(53, 1, 1), { limit: 2, exact: false }));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("prompt cache: entry files round-trip their header, tokens and state", () => {
  const e = encodeEntry("fp", toks(5, -1, 70000), Uint8Array.from([1, 2, 3]));
  const d = decodeEntry(e, true);
  assert.equal(d.fingerprint, "fp");
  assert.deepEqual(Array.from(d.tokens), [5, -1, 70000]);
  assert.deepEqual(Array.from(d.state!), [1, 2, 3]);
  assert.throws(() => decodeEntry(e.subarray(0, e.length - 1), true), /truncated/);
});

async function exists(p: string): Promise<boolean> {
  try {
    await Deno.stat(p);
    return true;
  } catch {
    return false;
  }
}

type Done = Extract<GenEvent, { type: "done" }>;

async function run(
  engine: ReturnType<typeof inProcessScheduler>,
  prompt: number[],
): Promise<{ text: string; done: Done }> {
  const req: GenRequest = {
    prompt: Int32Array.from(prompt),
    maxTokens: 8,
    sampling: { ...defaultSampling(), temperature: 0 },
    stop: [],
    ignoreEos: true,
  };
  let text = "";
  let done: Done | undefined;
  for await (const ev of engine.submit(req)) {
    if (ev.type === "text") text += ev.text;
    if (ev.type === "done") done = ev;
    if (ev.type === "error") throw new Error(ev.message);
  }
  return { text, done: done! };
}

Deno.test({
  name: "prompt cache in the engine: a slot's prefix outlives the slot and is restored exactly",
  sanitizeResources: false,
  async fn() {
    const m = await loadEngineModel({
      path: await tinyModelPath(),
      maxBatch: 1,
      maxSeqLen: 1024,
      threads: 2,
    });
    assert.ok(m.kvTrim, "the tiny llama model's cache can be trimmed");
    const engine = inProcessScheduler(m, {
      promptCache: { ramBytes: 1 << 30, fingerprint: "tiny" },
    });
    const a = randomTokens(600, 1);
    const b = randomTokens(600, 2);
    const first = await run(engine, a);
    assert.equal(first.done.cachedTokens, 0);
    await run(engine, b); // takes the only slot: a's cells go to the cache
    let pc = engine.stats().promptCache!;
    assert.equal(pc.ram.entries, 1);
    assert.ok(pc.ram.bytes > 0);
    const turn2 = [...a, ...randomTokens(40, 3)];
    const restored = await run(engine, turn2);
    assert.equal(restored.done.cachedTokens, 600, "all of a (its prompt) came from the cache");
    pc = engine.stats().promptCache!;
    assert.equal(pc.ram.hits, 1);
    assert.equal(pc.ram.tokens, 600);
    // b was saved in turn when turn2 took the slot; a's own entry was replaced by nothing
    // longer, so both are there.
    assert.equal(pc.ram.entries, 2);
    // The same prompt again reuses the slot's own cells: the same computation as the restore.
    const again = await run(engine, turn2);
    assert.equal(again.done.cachedTokens, turn2.length - 1);
    const recomputed = await run(engine, [...b.slice(0, 10)]); // short: no cache traffic
    assert.equal(recomputed.done.cachedTokens, 0);
    const fresh = await run(engine, turn2);
    assert.ok(fresh.done.cachedTokens >= 600);
    // Served from the first restore's cells again: it can only agree with that restore.
    assert.equal(restored.text, fresh.text, "a second restore gives what the first gave");
    assert.ok(engine.stats().slotHits >= 1);
    // The reference is the prompt computed whole, by an engine with nothing cached.
    const cold = await run(inProcessScheduler(m), turn2);
    assert.equal(cold.done.cachedTokens, 0);
    assert.equal(
      restored.text,
      cold.text,
      "restored cells give the greedy output of computing them",
    );
  },
});

for (const arch of ["lfm2", "gemma2"] as const) {
  Deno.test({
    name: `prompt cache checkpoints (${arch}): a model whose restored states cannot be cut back ` +
      "reuses the checkpoint its last prompt left, with the output of computing it all",
    sanitizeResources: false,
    async fn() {
      // F32 weights: logits of the same text in other batch shapes then differ by ~0.003 only.
      const path = await cachedTinyModel(arch, ["arch_variants.ts", "presets.ts"], { arch });
      const m = await loadEngineModel({ path, maxBatch: 1, maxSeqLen: 1024, threads: 2 });
      assert.equal(m.stateTrim, false);
      assert.equal(m.kvTrim, arch === "gemma2", "a hybrid's live cache cannot be cut back either");
      const engine = inProcessScheduler(m, {
        promptCache: { ramBytes: 1 << 30, fingerprint: arch },
      });
      const a = randomTokens(600, 21);
      await run(engine, a);
      // The prefill paused 4 tokens before the end to keep a checkpoint there.
      assert.equal(engine.stats().promptCache!.ram.entries, 1);
      await run(engine, randomTokens(600, 22)); // takes the only slot
      const turn2 = [...a, ...randomTokens(40, 23)];
      const restored = await run(engine, turn2);
      assert.equal(restored.done.cachedTokens, 596);
      assert.equal(engine.stats().promptCache!.ram.hits, 1);
      const plain = await run(inProcessScheduler(m), turn2);
      assert.equal(plain.done.cachedTokens, 0);
      assert.equal(restored.text, plain.text, "the checkpoint gives the same greedy output");
    },
  });
}

Deno.test({
  name: "prompt cache on disk: survives a server restart; another KV type is a miss, not a crash",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir();
    const model = await tinyModelPath();
    const flags = (extra: string[]) => [
      "--model",
      model,
      "--max-batch",
      "1",
      "--max-seq-len",
      "1024",
      "--threads",
      "2",
      "--cache-ram",
      "0.5",
      "--cache-dir",
      dir,
      "--cache-disk",
      "1",
      ...extra,
    ];
    const complete = async (url: string, prompt: number[]) => {
      const r = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt, max_tokens: 4, temperature: 0, ignore_eos: true }),
      });
      assert.equal(r.status, 200, await r.clone().text());
      return (await r.json()).usage.prompt_tokens_details.cached_tokens as number;
    };
    const a = randomTokens(500, 11);
    try {
      {
        await using srv = await startServer(flags([]));
        const props = await (await fetch(`${srv.url}/props`)).json();
        assert.equal(props.prompt_cache.ram.capacity_bytes, 2 ** 29);
        assert.equal(props.prompt_cache.disk.capacity_bytes, 2 ** 30);
        assert.equal(await complete(srv.url, a), 0);
        await complete(srv.url, randomTokens(500, 12)); // a's cells leave the slot
        // The disk write is behind the memory tier: wait until the file is there.
        for (let i = 0; i < 100 && (await diskEntries(srv.url)) < 1; i++) {
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.equal(await diskEntries(srv.url), 1);
      }
      {
        await using srv = await startServer(flags([]));
        assert.equal(await diskEntries(srv.url), 1, "the index is read again at start-up");
        assert.equal(await complete(srv.url, [...a, ...randomTokens(20, 13)]), 500);
        const text = await (await fetch(`${srv.url}/metrics`)).text();
        assert.match(text, /^hearth_prompt_cache_hits\{tier="disk"\} 1$/m);
        assert.match(text, /^hearth_prompt_cache_bytes\{tier="ram"\} [1-9]\d*$/m);
        const props = await (await fetch(`${srv.url}/props`)).json();
        assert.equal(props.prompt_cache.disk.hits, 1);
        assert.equal(props.prompt_cache.checkpoints, false);
      }
      {
        // States of an f16 cache are not for a bf16 one: a miss, and the server answers.
        await using srv = await startServer(flags(["--kvcache-dtype", "bf16"]));
        assert.equal(await diskEntries(srv.url), 0);
        assert.equal(await complete(srv.url, [...a, ...randomTokens(20, 13)]), 0);
      }
      {
        // A state llama.cpp refuses (damaged, under the right fingerprint) is dropped and the
        // prompt computed.
        const fp = `${await modelFingerprint(model)}-f16`;
        const c = randomTokens(400, 14);
        await Deno.writeFile(
          `${cacheFolder(dir, fp)}/damaged.hkv`,
          encodeEntry(fp, Int32Array.from(c), new Uint8Array(4096).fill(3)),
        );
        await using srv = await startServer(flags([]));
        assert.equal(await diskEntries(srv.url), 2);
        assert.equal(await complete(srv.url, [...c, 5, 6]), 0);
        assert.equal(await diskEntries(srv.url), 1);
        assert.equal((await fetch(`${srv.url}/health`)).status, 200);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

async function diskEntries(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(text.match(/^hearth_prompt_cache_entries\{tier="disk"\} (\d+)/m)?.[1] ?? NaN);
}

Deno.test("serve: --cache-disk without --cache-dir is refused at start-up", async () => {
  const { unsupportedFlag, parseServeArgs } = await import("../lib/cli/flags.ts");
  const r = parseServeArgs(["--cache-disk", "4"], {});
  assert.ok(r.ok);
  assert.match(unsupportedFlag(r.config) ?? "", /--cache-disk .* needs --cache-dir/);
  const bad = parseServeArgs(["--cache-ram", "lots"], {});
  assert.ok(!bad.ok);
  assert.match(bad.message, /--cache-ram.*number of GiB/);
});
