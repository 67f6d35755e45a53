/**
 * `bench/gpu.sh`'s last step: reads the folder's `bench-<model>-graph-<on|off>.json` runs and
 * `batched-<model>.txt` (llama-batched-bench), writes `results.json` and prints a Markdown table:
 * per model, graph-batch setting and concurrency, Hearth and llama-server tok/s, their paired
 * ratio, Hearth against llama-batched-bench's generation speed (decode only: no prefill, no
 * sampling) and against the bench's own FFI loop over the same requests (prefill and sampling
 * included, paired rounds), which is the like-for-like library limit.
 *
 * @example
 * ```sh
 * deno run -A bench/gpu_report.ts bench/results/gpu-20261126T120000Z gpu > table.md
 * ```
 * @module
 */

type Row = {
  model: string;
  graphBatch: "on" | "off";
  concurrency: number;
  hearthTps: number;
  peerTps?: number;
  vsPeer?: number;
  limitTps?: number;
  vsLimit?: number;
  /** Hearth's bench's own FFI loop on the same prompts and steps (prefill and sampling included). */
  loopTps?: number;
  vsLoop?: number;
  ttftP50Ms?: number;
};

/** llama-batched-bench's table: `| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s |...` */
export function parseBatchedBench(text: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of text.split("\n")) {
    const cells = line.split("|").map((c) => c.trim()).filter((c) => c !== "");
    if (cells.length < 8 || !/^\d+$/.test(cells[2])) continue;
    out.set(Number(cells[2]), Number(cells[7]));
  }
  return out;
}

async function main(dir: string, mode: string): Promise<void> {
  const rows: Row[] = [];
  const files = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  for (const name of files) {
    const m = name.match(/^bench-(.+)-graph-(on|off)\.json$/);
    if (!m) continue;
    const run = JSON.parse(await Deno.readTextFile(`${dir}/${name}`));
    const limits = parseBatchedBench(
      await Deno.readTextFile(`${dir}/batched-${m[1]}.txt`).catch(() => ""),
    );
    for (const r of run.concurrency ?? []) {
      const limit = limits.get(r.concurrency);
      rows.push({
        model: m[1],
        graphBatch: m[2] as "on" | "off",
        concurrency: r.concurrency,
        hearthTps: r.server.genTps,
        peerTps: r.peer?.genTps,
        vsPeer: r.ratioToPeer,
        limitTps: limit,
        vsLimit: limit ? r.server.genTps / limit : undefined,
        loopTps: r.library?.withPrefillTps,
        vsLoop: r.ratioWithPrefill,
        ttftP50Ms: r.server.ttftP50Ms,
      });
    }
  }
  const build = await Deno.readTextFile(`${dir}/build.json`).then(JSON.parse).catch(() => null);
  await Deno.writeTextFile(
    `${dir}/results.json`,
    JSON.stringify({ mode, build, date: new Date().toISOString(), rows }, null, 2) + "\n",
  );
  const f = (x: number | undefined, d = 1) =>
    x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(d);
  console.log(`# bench/gpu.sh (${mode}): Hearth vs llama-server on the same build\n`);
  console.log(
    "| model | graph-batch | c | Hearth tok/s | llama-server tok/s | vs llama-server (paired) | " +
      "llama-batched-bench TG tok/s | vs it | FFI loop tok/s | vs loop (paired) | TTFT p50 ms |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    console.log(
      `| ${r.model} | ${r.graphBatch} | ${r.concurrency} | ${f(r.hearthTps)} | ${f(r.peerTps)} | ` +
        `${f(r.vsPeer, 3)} | ${f(r.limitTps)} | ${f(r.vsLimit, 3)} | ${f(r.loopTps)} | ` +
        `${f(r.vsLoop, 3)} | ${f(r.ttftP50Ms, 0)} |`,
    );
  }
  if (rows.length === 0) throw new Error(`no bench-*.json runs in ${dir}`);
}

if (import.meta.main) await main(Deno.args[0], Deno.args[1] ?? "gpu");
