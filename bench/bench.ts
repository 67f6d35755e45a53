/**
 * `deno task bench [--model PATH] [--runs N] [--prompt-tokens N] [--gen-tokens N]`: single-sequence
 * prompt processing and generation speed of the `small` preset (SmolLM2-135M shapes, Q8_0) through
 * the HTTP server, next to a plain FFI loop over the same library and model in the same run (the
 * library's own limit), with their ratio. Prints a table and writes JSON to `bench/results/`.
 *
 * @example
 * ```sh
 * deno task bench --runs 3
 * ```
 * @module
 */
import {
  chainAdd,
  decode,
  freeContext,
  freeModel,
  loadModel,
  newBatch,
  newContext,
  openLlama,
  samplerChain,
  samplerFree,
  samplers,
  samplerSample,
  setBatchSize,
} from "../ffi/mod.ts";
import { makeModel } from "../lib/gguf/mod.ts";
import { startServer } from "../tests/support/server.ts";
import { sourceCacheDir } from "../tests/support/llama_source.ts";

type Args = { model?: string; runs: number; promptTokens: number; genTokens: number };

function parseArgs(argv: string[]): Args {
  const a: Args = { runs: 3, promptTokens: 128, genTokens: 128 };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    switch (argv[i]) {
      case "--model":
        a.model = v;
        i++;
        break;
      case "--runs":
        a.runs = Number(v);
        i++;
        break;
      case "--prompt-tokens":
        a.promptTokens = Number(v);
        i++;
        break;
      case "--gen-tokens":
        a.genTokens = Number(v);
        i++;
        break;
      default:
        console.error(`bench: unknown argument ${argv[i]}`);
        Deno.exit(2);
    }
  }
  return a;
}

async function benchModel(): Promise<string> {
  const dir = `${sourceCacheDir()}/bench`;
  const path = `${dir}/hearth-small-q8_0.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    await Deno.mkdir(dir, { recursive: true });
    console.error("bench: writing the small preset (once)...");
    await makeModel({ preset: "small", out: `${path}.tmp` });
    await Deno.rename(`${path}.tmp`, path);
    return path;
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Token ids of a deterministic prompt: BOS then ordinary word tokens. */
function promptIds(n: number): number[] {
  const ids = [128000];
  for (let i = 1; i < n; i++) ids.push(1000 + ((i * 7919) % 20000));
  return ids;
}

type Speeds = { promptTps: number; genTps: number };

/** The library limit: one prefill batch, then one-token decode steps with greedy sampling. */
async function ffiLoop(path: string, a: Args, threads: number): Promise<Speeds> {
  const llama = openLlama();
  const model = await loadModel(llama, path, {});
  const ctx = newContext(llama, model, {
    n_ctx: 1024,
    n_batch: 2048,
    n_ubatch: 512,
    n_seq_max: 1,
    n_threads: threads,
    n_threads_batch: threads,
    no_perf: true,
  });
  const mem = llama.sym.llama_get_memory(ctx)!;
  const batch = newBatch(a.promptTokens);
  const chain = samplerChain(llama);
  chainAdd(llama, chain, samplers(llama).greedy());
  const ids = promptIds(a.promptTokens);
  const prompt: number[] = [];
  const gen: number[] = [];
  try {
    for (let run = 0; run <= a.runs; run++) {
      llama.sym.llama_memory_clear(mem, true);
      ids.forEach((t, i) => {
        batch.token[i] = t;
        batch.pos[i] = i;
        batch.seqId[i] = 0;
        batch.logits[i] = i === ids.length - 1 ? 1 : 0;
      });
      setBatchSize(batch, ids.length);
      let t0 = performance.now();
      if (await decode(llama, ctx, batch)) throw new Error("prefill failed");
      const tPrompt = performance.now() - t0;
      let tok = samplerSample(llama, chain, ctx, ids.length - 1);
      t0 = performance.now();
      for (let i = 0; i < a.genTokens; i++) {
        batch.token[0] = tok;
        batch.pos[0] = ids.length + i;
        batch.logits[0] = 1;
        setBatchSize(batch, 1);
        if (await decode(llama, ctx, batch)) throw new Error("decode failed");
        tok = samplerSample(llama, chain, ctx, 0);
      }
      const tGen = performance.now() - t0;
      if (run === 0) continue; // warm-up
      prompt.push(ids.length / (tPrompt / 1000));
      gen.push(a.genTokens / (tGen / 1000));
    }
  } finally {
    samplerFree(llama, chain);
    freeContext(llama, ctx);
    freeModel(llama, model);
  }
  return { promptTps: median(prompt), genTps: median(gen) };
}

/** The same work through `POST /v1/completions` with streaming, timed at the client. */
async function serverLoop(path: string, a: Args, threads: number): Promise<Speeds> {
  const srv = await startServer([
    "--model",
    path,
    "--max-batch",
    "4",
    "--max-seq-len",
    "1024",
    "--threads",
    String(threads),
  ], { timeoutMs: 300_000 });
  const prompt: number[] = [];
  const gen: number[] = [];
  try {
    for (let run = 0; run <= a.runs; run++) {
      const t0 = performance.now();
      const r = await fetch(`${srv.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          prompt: promptIds(a.promptTokens),
          max_tokens: a.genTokens + 1,
          temperature: 0,
          ignore_eos: true,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      const reader = r.body!.getReader();
      const dec = new TextDecoder();
      let tFirst = 0;
      let chunks = 0;
      let generated = 0;
      let buf = "";
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const msg = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!msg.startsWith("data: {")) continue;
          const body = JSON.parse(msg.slice(6));
          if (body.usage) generated = body.usage.completion_tokens;
          else if (chunks++ === 0) tFirst = performance.now();
        }
      }
      const tEnd = performance.now();
      if (run === 0) continue;
      // Time to first token covers the prompt; every later token is one decode step.
      prompt.push(a.promptTokens / ((tFirst - t0) / 1000));
      gen.push((generated - 1) / ((tEnd - tFirst) / 1000));
    }
  } finally {
    await srv.stop();
  }
  return { promptTps: median(prompt), genTps: median(gen) };
}

if (import.meta.main) {
  const a = parseArgs(Deno.args);
  const path = a.model ?? await benchModel();
  const threads = navigator.hardwareConcurrency;
  console.error(`bench: model ${path}, ${threads} threads, ${a.runs} runs (+1 warm-up)`);
  const lib = await ffiLoop(path, a, threads);
  const srv = await serverLoop(path, a, threads);
  const rows = [
    ["prompt processing tok/s", lib.promptTps, srv.promptTps],
    ["generation tok/s", lib.genTps, srv.genTps],
  ] as const;
  console.log(
    `\n${"single sequence".padEnd(26)} ${"library".padStart(10)} ${"server".padStart(10)} ${
      "ratio".padStart(7)
    }`,
  );
  for (const [name, l, s] of rows) {
    console.log(
      `${name.padEnd(26)} ${l.toFixed(1).padStart(10)} ${s.toFixed(1).padStart(10)} ${
        (s / l).toFixed(3).padStart(7)
      }`,
    );
  }
  const result = {
    date: new Date().toISOString(),
    model: path,
    threads,
    promptTokens: a.promptTokens,
    genTokens: a.genTokens,
    runs: a.runs,
    library: lib,
    server: srv,
    ratio: { prompt: srv.promptTps / lib.promptTps, gen: srv.genTps / lib.genTps },
  };
  const dir = new URL("./results/", import.meta.url).pathname;
  await Deno.mkdir(dir, { recursive: true });
  const file = `${dir}single-${result.date.replace(/[:.]/g, "-")}.json`;
  await Deno.writeTextFile(file, JSON.stringify(result, null, 2) + "\n");
  console.log(`\nwrote ${file}`);
}
