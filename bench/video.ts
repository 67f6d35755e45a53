/**
 * Video benchmark: how long an 8 s 720p video takes from `predictLongRunning` to `done`, measured
 * through HTTP against an in-process video service (Deno.serve on a loopback port), and how that
 * compares with the video's own length.
 *
 * Per run: `latency` is client-side, POST to the first poll that says `done` (polled every 25 ms);
 * `render` is server-side, the operation's creation to its completion (render, hash and commit;
 * the queue is empty, so no waiting). `ratio` = time / video length: below 1 renders faster than
 * real time. Results, with the load average, go to `bench/results/video-<iso>.json`.
 *
 * @example
 * ```sh
 * deno run -A bench/video.ts                       # 3 runs of veo-3.1-fast, 8 s 720p (audio)
 * deno run -A bench/video.ts --runs 5 --model veo-2.0-generate-001
 * ```
 * @module
 */
import { Hono } from "hono";
import { createVideoService } from "../lib/video/operations.ts";
import { videoRoutes } from "../routes/video.ts";

export type VideoBenchOptions = {
  runs?: number;
  model?: string;
  seconds?: number;
  resolution?: string;
};

export type VideoBenchRun = {
  latencyMs: number;
  renderMs: number;
  bytes: number;
};

export type VideoBenchResult = {
  date: string;
  model: string;
  seconds: number;
  resolution: string;
  runs: VideoBenchRun[];
  median: { latencyMs: number; renderMs: number; latencyRatio: number; renderRatio: number };
  machine: { cpus: number; cpu?: string; load1: number };
};

const KEY = "bench-key";

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

export async function runVideoBench(opts: VideoBenchOptions = {}): Promise<VideoBenchResult> {
  const model = opts.model ?? "veo-3.1-fast-generate-preview";
  const seconds = opts.seconds ?? 8;
  const resolution = opts.resolution ?? "720p";
  const runs = Math.max(1, opts.runs ?? 3);
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-video-bench-" });
  const service = await createVideoService({
    dataDir,
    region: "global",
    backend: "local",
    workers: 1,
    keys: [KEY],
    countTokens: (t) => t.split(/\s+/).length,
  });
  const app = new Hono();
  app.route("/", videoRoutes(service));
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, app.fetch);
  const url = `http://127.0.0.1:${server.addr.port}`;
  const headers = { "x-goog-api-key": KEY, "content-type": "application/json" };
  const out: VideoBenchRun[] = [];
  try {
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      const res = await fetch(`${url}/v1beta/models/${model}:predictLongRunning`, {
        method: "POST",
        headers,
        body: JSON.stringify({
          instances: [{
            prompt: `A tram crosses a bridge at dawn, take ${i}. A voice says: "Next stop."`,
          }],
          parameters: { durationSeconds: seconds, resolution },
        }),
      });
      const started = await res.json();
      if (!res.ok) throw new Error(`start failed: ${JSON.stringify(started)}`);
      let op: { done?: boolean; error?: unknown };
      do {
        await new Promise((r) => setTimeout(r, 25));
        op = await (await fetch(`${url}/v1beta/${started.name}`, { headers })).json();
      } while (!op.done);
      const latencyMs = performance.now() - t0;
      if (op.error) throw new Error(`render failed: ${JSON.stringify(op.error)}`);
      const id = started.name.split("/").at(-1);
      const rec = await service.get(id);
      if (!rec.ok) throw new Error(`operation ${id} vanished`);
      const file = service.file(rec.value.files[0]);
      out.push({
        latencyMs: Math.round(latencyMs),
        renderMs: rec.value.updatedAt - rec.value.createdAt,
        bytes: file.ok ? file.value.size : 0,
      });
    }
  } finally {
    await server.shutdown();
    await service.close();
    await Deno.remove(dataDir, { recursive: true });
  }
  const latencyMs = median(out.map((r) => r.latencyMs));
  const renderMs = median(out.map((r) => r.renderMs));
  return {
    date: new Date().toISOString(),
    model,
    seconds,
    resolution,
    runs: out,
    median: {
      latencyMs,
      renderMs,
      latencyRatio: Number((latencyMs / 1000 / seconds).toFixed(3)),
      renderRatio: Number((renderMs / 1000 / seconds).toFixed(3)),
    },
    machine: {
      cpus: navigator.hardwareConcurrency,
      cpu: cpuModel(),
      load1: Deno.loadavg()[0],
    },
  };
}

function cpuModel(): string | undefined {
  try {
    return Deno.readTextFileSync("/proc/cpuinfo").match(/^model name\s*:\s*(.*)$/m)?.[1];
  } catch {
    return undefined;
  }
}

function parseArgs(argv: string[]): VideoBenchOptions {
  const o: VideoBenchOptions = {};
  for (let i = 0; i < argv.length; i++) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    i++;
    if (flag === "--runs") o.runs = Number(value);
    else if (flag === "--model") o.model = value;
    else if (flag === "--seconds") o.seconds = Number(value);
    else if (flag === "--resolution") o.resolution = value;
    else {throw new Error(
        `unknown flag ${flag} (--runs N, --model CODE, --seconds S, --resolution R)`,
      );}
  }
  return o;
}

if (import.meta.main) {
  let opts: VideoBenchOptions;
  try {
    opts = parseArgs(Deno.args);
  } catch (e) {
    console.error(`bench/video: ${(e as Error).message}`);
    Deno.exit(2);
  }
  const r = await runVideoBench(opts);
  console.log(
    `${r.model}, ${r.seconds} s ${r.resolution}, ${r.runs.length} runs (load ${r.machine.load1})`,
  );
  console.log("run  latency ms  render ms  MB");
  r.runs.forEach((x, i) =>
    console.log(
      `${String(i + 1).padStart(3)}  ${String(x.latencyMs).padStart(10)}  ${
        String(x.renderMs).padStart(9)
      }  ${(x.bytes / 1e6).toFixed(2)}`,
    )
  );
  console.log(
    `median: start-to-done ${r.median.latencyMs} ms (${r.median.latencyRatio}x the video's length), ` +
      `render ${r.median.renderMs} ms (${r.median.renderRatio}x)`,
  );
  const dir = new URL("./results/", import.meta.url).pathname;
  await Deno.mkdir(dir, { recursive: true });
  const file = `${dir}video-${r.date.replace(/[:.]/g, "-")}.json`;
  await Deno.writeTextFile(file, JSON.stringify(r, null, 2) + "\n");
  console.log(`wrote ${file}`);
}
