/**
 * `deno task bench --cache-restore`: what the prompt cache saves an agent's long prefix. One
 * server (`--max-batch 1`, so another prompt must take the slot) on the `small` preset's shapes
 * with a 32k context, and a prefix of `--prefix-tokens` (default 30000):
 *
 * 1. **cold**: the prefix plus its new tokens, computed (time to first token);
 * 2. **slot**: the same prefix again with other new tokens, while the slot still holds it: only
 *    the new tokens are computed (the floor of any reuse);
 * 3. another prompt takes the slot (its time includes saving the prefix's KV to the cache);
 * 4. **ram**: the prefix with other new tokens, restored from host memory;
 * 5. the server restarts with the same `--cache-dir` and `--cache-ram 0`: **disk**, restored
 *    from the file the first server wrote (the page cache may still hold it: say so).
 *
 * Prints the table and writes JSON to `bench/results/cache-restore-<date>.json`.
 *
 * @example
 * ```sh
 * deno task bench --cache-restore                       # 30k-token prefix
 * deno task bench --cache-restore --prefix-tokens 8000  # quicker
 * ```
 * @module
 */
import { makeModel } from "../lib/gguf/mod.ts";
import { type RunningServer, startServer } from "../tools/server_process.ts";
import { benchDataDir } from "./support/models.ts";

type Args = { prefixTokens: number; newTokens: number; model?: string; jsonOut?: string };

function parseArgs(argv: string[]): Args {
  const a: Args = { prefixTokens: 30000, newTokens: 16 };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    switch (argv[i]) {
      case "--cache-restore":
        break;
      case "--prefix-tokens":
        a.prefixTokens = Number(v);
        i++;
        break;
      case "--new-tokens":
        a.newTokens = Number(v);
        i++;
        break;
      case "--model":
        a.model = v;
        i++;
        break;
      case "--json-out":
        a.jsonOut = v;
        i++;
        break;
      default:
        throw new Error(`bench --cache-restore: unknown option ${argv[i]}`);
    }
  }
  if (!(a.prefixTokens >= 512 && a.prefixTokens <= 32000)) {
    throw new Error("--prefix-tokens must be 512 to 32000");
  }
  return a;
}

/** The `small` preset (Q8_0) with a 32k context, written once beside the other bench models. */
async function longContextModel(): Promise<string> {
  const path = `${benchDataDir()}/hearth-small-32k-q8_0.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // first use
  }
  await Deno.mkdir(benchDataDir(), { recursive: true });
  console.error("bench: writing the small preset with a 32k context (once)...");
  await makeModel({ preset: "small", contextLength: 32768, out: `${path}.tmp` });
  await Deno.rename(`${path}.tmp`, path);
  return path;
}

/** `n` token ids from a seeded generator, in the Llama-3 vocabulary's ordinary range. */
function tokens(n: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 1000 + (s % 100000);
  });
}

/** One completion of one token: its wall time (the time to first token) and cached tokens. */
async function once(srv: RunningServer, prompt: number[]): Promise<{ ms: number; cached: number }> {
  const t0 = performance.now();
  const r = await fetch(`${srv.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true }),
  });
  const body = await r.json();
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`completion: ${r.status} ${JSON.stringify(body)}`);
  return { ms, cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

async function metricsText(srv: RunningServer): Promise<string> {
  return await (await fetch(`${srv.url}/metrics`)).text();
}

async function diskEntries(srv: RunningServer): Promise<number> {
  const m = (await metricsText(srv)).match(/^hearth_prompt_cache_entries\{tier="disk"\} (\d+)/m);
  return Number(m?.[1] ?? 0);
}

export async function cacheRestoreMain(argv: string[]): Promise<void> {
  const a = parseArgs(argv);
  const model = a.model ?? await longContextModel();
  const dir = await Deno.makeTempDir({ prefix: "hearth-cache-bench-" });
  const serverArgs = (ram: string) => [
    "--model",
    model,
    "--max-batch",
    "1",
    "--max-seq-len",
    "32768",
    "--threads",
    "2",
    "--cache-ram",
    ram,
    "--cache-dir",
    dir,
    "--cache-disk",
    "8",
  ];
  const prefix = tokens(a.prefixTokens, 1);
  const turn = (seed: number) => [...prefix, ...tokens(a.newTokens, seed)];
  const rows: Record<string, { ms: number; cached: number }> = {};
  const load = () => Deno.loadavg()[0];
  const loadBefore = load();
  try {
    {
      await using srv = await startServer(serverArgs("6"), { timeoutMs: 300_000 });
      console.error(`bench: cold prefill of ${prefix.length + a.newTokens} tokens...`);
      rows.cold = await once(srv, turn(2));
      rows.slot = await once(srv, turn(3));
      rows.other = await once(srv, tokens(512, 99)); // takes the slot: the prefix goes to the cache
      rows.ram = await once(srv, turn(4));
      // The disk tier is written behind the memory tier.
      for (let i = 0; i < 600 && (await diskEntries(srv)) < 1; i++) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    {
      await using srv = await startServer(serverArgs("0"), { timeoutMs: 300_000 });
      rows.disk = await once(srv, turn(5));
      rows.stateBytes = {
        ms: 0,
        cached: Number(
          (await metricsText(srv)).match(/^hearth_prompt_cache_bytes\{tier="disk"\} (\d+)/m)?.[1],
        ),
      };
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  const out = {
    when: new Date().toISOString(),
    prefixTokens: a.prefixTokens,
    newTokens: a.newTokens,
    model,
    loadavg: [loadBefore, load()],
    rows,
    coldOverRam: rows.cold.ms / rows.ram.ms,
    coldOverDisk: rows.cold.ms / rows.disk.ms,
  };
  const fmt = (k: string, what: string) =>
    `| ${k.padEnd(5)} | ${what.padEnd(44)} | ${rows[k].ms.toFixed(0).padStart(8)} | ${
      String(rows[k].cached).padStart(6)
    } |`;
  console.log(
    [
      `prompt cache restore: ${a.prefixTokens}-token prefix + ${a.newTokens} new tokens, ` +
      `small preset 32k, 1 token generated (load ${loadBefore.toFixed(2)})`,
      "| run   | what                                         | TTFT ms  | cached |",
      "| ----- | -------------------------------------------- | -------- | ------ |",
      fmt("cold", "everything computed"),
      fmt("slot", "the slot still holds the prefix (the floor)"),
      fmt("other", "512-token prompt takes the slot (+ the save)"),
      fmt("ram", "prefix restored from host memory"),
      fmt("disk", "restarted server, prefix restored from disk"),
      `state: ${(rows.stateBytes.cached / 2 ** 20).toFixed(0)} MiB; cold/ram ${
        out.coldOverRam.toFixed(1)
      }x, cold/disk ${out.coldOverDisk.toFixed(1)}x`,
    ].join("\n"),
  );
  const path = a.jsonOut ?? `bench/results/cache-restore-${out.when.replace(/[:.]/g, "-")}.json`;
  await Deno.mkdir("bench/results", { recursive: true });
  await Deno.writeTextFile(path, JSON.stringify(out, null, 2) + "\n");
  console.error(`bench: wrote ${path}`);
}

if (import.meta.main) await cacheRestoreMain(Deno.args);
