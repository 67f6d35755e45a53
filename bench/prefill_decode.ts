/**
 * Prefill/decode split under mixed load: `R` running streams generate while long prompts arrive
 * one after another. Measured twice on the same model: one server doing both, and a decode server
 * whose prompts a prefill server computes (`--pd-config`). Reported: the long prompts' time to
 * first token and the running streams' inter-token latency (p50/p99), and the greedy outputs of
 * both setups compared. On one machine the two servers share its cores, so this shows the cost
 * of moving the cells (and what the decode loop gains) rather than the gain of a second host.
 *
 * @example
 * ```sh
 * deno run -A bench/prefill_decode.ts                       # 4 streams, 6 prompts of 1024 tokens
 * deno run -A bench/prefill_decode.ts --streams 8 --prompt-tokens 512 --arrivals 8
 * ```
 * @module
 */
import { percentile, streamCompletion } from "./bench.ts";
import { benchModel } from "./support/models.ts";
import { startServer } from "../tools/server_process.ts";

type Opts = {
  streams: number;
  streamTokens: number;
  promptTokens: number;
  arrivals: number;
  gapMs: number;
  threads: number;
};

function parse(argv: string[]): Opts {
  const o: Opts = {
    streams: 4,
    streamTokens: 160,
    promptTokens: 1024,
    arrivals: 6,
    gapMs: 400,
    threads: navigator.hardwareConcurrency,
  };
  const keys: Record<string, keyof Opts> = {
    "--streams": "streams",
    "--stream-tokens": "streamTokens",
    "--prompt-tokens": "promptTokens",
    "--arrivals": "arrivals",
    "--gap-ms": "gapMs",
    "--threads": "threads",
  };
  for (let i = 0; i < argv.length; i += 2) {
    const k = keys[argv[i]];
    const v = Number(argv[i + 1]);
    if (!k || !Number.isInteger(v) || v < 0) throw new Error(`bad flag ${argv[i]} ${argv[i + 1]}`);
    o[k] = v;
  }
  return o;
}

/** Token ids that are fresh per `variant` (no prefix reuse between prompts). */
function prompt(n: number, variant: number): number[] {
  return Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + variant * 104729) % 50000));
}

type Result = {
  ttftMs: number[];
  itlMs: number[];
  outputs: string[];
};

async function mixedLoad(url: string, o: Opts): Promise<Result> {
  const texts: string[] = [];
  // The running streams start first and are generating when the long prompts arrive.
  const streams = Array.from(
    { length: o.streams },
    (_, i) => streamCompletion(url, prompt(32, 100 + i), o.streamTokens),
  );
  await new Promise((r) => setTimeout(r, 300));
  const arrivals: ReturnType<typeof streamCompletion>[] = [];
  for (let i = 0; i < o.arrivals; i++) {
    arrivals.push(streamCompletion(url, prompt(o.promptTokens, i), 8));
    await new Promise((r) => setTimeout(r, o.gapMs));
  }
  const s = await Promise.all(streams);
  const a = await Promise.all(arrivals);
  // Greedy outputs of the long prompts, to compare the two setups.
  for (let i = 0; i < 2; i++) texts.push(await greedy(url, prompt(o.promptTokens, i)));
  // Only the gaps of streams that were running while prompts arrived.
  return { ttftMs: a.map((c) => c.ttftMs), itlMs: s.flatMap((c) => c.gapsMs), outputs: texts };
}

async function greedy(url: string, p: number[]): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: p, max_tokens: 16, temperature: 0 }),
  });
  return (await r.json()).choices[0].text;
}

const f = (x: number) => x.toFixed(0).padStart(6);

if (import.meta.main) {
  const o = parse(Deno.args);
  const model = await benchModel();
  const maxSeqLen = String(Math.ceil((o.promptTokens + 64) / 64) * 64);
  const serve = [
    "--model",
    model,
    "--max-batch",
    String(o.streams + o.arrivals),
    "--max-seq-len",
    maxSeqLen,
    "--threads",
    String(o.threads),
  ];
  const env = { HEARTH_LLAMA_LOG: "off" };
  console.error(
    `bench pd: ${o.streams} streams of ${o.streamTokens} tokens; ${o.arrivals} prompts of ${o.promptTokens} tokens, one every ${o.gapMs} ms; ${o.threads} threads each`,
  );

  let one: Result;
  {
    await using s = await startServer(serve, { env });
    await mixedLoad(s.url, { ...o, arrivals: 1, streams: 1, streamTokens: 8 }); // warm-up
    one = await mixedLoad(s.url, o);
  }
  const dir = await Deno.makeTempDir();
  const token = crypto.randomUUID();
  await Deno.writeTextFile(`${dir}/p.json`, JSON.stringify({ role: "prefill", token }));
  let split: Result;
  let pdStats: unknown;
  const prefillOwn: string[] = [];
  {
    await using p = await startServer([...serve, "--pd-config", `${dir}/p.json`], { env });
    await Deno.writeTextFile(
      `${dir}/d.json`,
      JSON.stringify({ role: "decode", peer: p.url, token, minPrefillTokens: 64 }),
    );
    await using d = await startServer([...serve, "--pd-config", `${dir}/d.json`], { env });
    await mixedLoad(d.url, { ...o, arrivals: 1, streams: 1, streamTokens: 8 });
    split = await mixedLoad(d.url, o);
    pdStats = (await (await fetch(`${d.url}/props`)).json()).pd;
    // The prefill server holds each prompt's first n-1 tokens in its cache now, computed the
    // way it sent them: its own answer is the one-server output for the same batching.
    for (let i = 0; i < 2; i++) prefillOwn.push(await greedy(p.url, prompt(o.promptTokens, i)));
  }
  await Deno.remove(dir, { recursive: true });

  const row = (name: string, r: Result) =>
    `${name.padEnd(12)} ${f(percentile(r.ttftMs, 50))} ${f(percentile(r.ttftMs, 95))} ${
      f(percentile(r.itlMs, 50))
    } ${f(percentile(r.itlMs, 99))}`;
  console.log(
    "setup        TTFT50 TTFT95  ITL50  ITL99   (ms; TTFT of the long prompts, ITL of the running streams)",
  );
  console.log(row("one server", one));
  console.log(row("pd split", split));
  // llama.cpp is not batch-invariant: a prompt computed in other step shapes (chunks beside
  // other sequences, the last token in a step of its own) can end in other low bits, and on
  // random weights a greedy tie flips after a few tokens. The cells themselves move exactly.
  console.log(
    `greedy outputs: split = prefill server with the same prefix cached: ${
      JSON.stringify(prefillOwn) === JSON.stringify(split.outputs)
    }; split = one server under the load above: ${
      JSON.stringify(one.outputs) === JSON.stringify(split.outputs)
    }`,
  );
  console.log(`decode server's pd counters: ${JSON.stringify(pdStats)}`);
  const out = `bench/results/pd-${new Date().toISOString().replace(/[:.]/g, "-")}.json`;
  await Deno.writeTextFile(
    out,
    JSON.stringify({ opts: o, one, split, prefillOwn, pd: pdStats }, null, 1),
  );
  console.log(`wrote ${out}`);
}
