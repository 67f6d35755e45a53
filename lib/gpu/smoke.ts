/**
 * The smoke decode: before a GPU build (or any `HEARTH_LLAMA_LIB_DIR`) is trusted with the server,
 * a child process (`hearth smoke-decode`) loads a one-layer model with it, offloads every layer,
 * decodes a prompt and a few greedy tokens, and prints what it saw. A crash, an abort (the CUDA
 * 13 prebuilt on a CUDA 13.0 driver dies with "the provided PTX was compiled with an unsupported
 * toolchain" on its first decode), a hang, or output that disagrees with the CPU build's
 * (non-finite logits, or logits pointing elsewhere) rejects the build, and the caller moves on to
 * the next candidate. A user's first request never finds out that a build cannot run.
 *
 * @example
 * ```ts
 * import { smokeTest } from "./smoke.ts";
 * declare const dataDir: string;
 * const r = await smokeTest("/cache/llama-cuda-src-90-de3ff815ea7d/lib", { dataDir });
 * r.ok; // false
 * r.reason; // "the smoke decode died with SIGABRT: CUDA error: the provided PTX was ..."
 * ```
 * @module
 */
import { selfCommand } from "../process/self.ts";
import { makeModel } from "../gguf/mod.ts";
import {
  decodeSync,
  freeContext,
  freeModel,
  listDevices,
  type Llama,
  loadModel,
  logitsIth,
  modelVocab,
  newBatch,
  newContext,
  openLlama,
  setBatchSize,
  tokenize,
  vocabInfo,
} from "../../ffi/mod.ts";

/** What the child prints (one JSON line). */
export type SmokeOutput = {
  /** The greedy tokens after the prompt. */
  tokens: number[];
  /** Logits of the prompt's last position at fixed token ids (every 1000th). */
  sample: number[];
  /** The 8 best token ids of that position. */
  top: number[];
  devices: string[];
  ms: number;
};

export type SmokeResult = { ok: boolean; reason: string; output?: SmokeOutput };

const PROMPT = "The quick brown fox jumps over the lazy dog because";
const GREEDY_TOKENS = 4;
const SAMPLE_STRIDE = 1000;
const TIMEOUT_MS = 120_000;
/** Logits of the same weights on two backends agree to far better than this. */
const MIN_COSINE = 0.99;

/**
 * How long a smoke decode may take: `HEARTH_SMOKE_TIMEOUT_MS` when set (a host whose first load
 * JIT-compiles PTX for minutes; tests that hang a build on purpose), else 120 s.
 */
export function smokeTimeoutMs(value = Deno.env.get("HEARTH_SMOKE_TIMEOUT_MS")): number {
  const ms = Number(value);
  return value && Number.isFinite(ms) && ms > 0 ? ms : TIMEOUT_MS;
}

/** `<dataDir>/smoke-1layer.gguf`: the tiny preset cut to one layer, written once. */
export async function smokeModel(dataDir: string): Promise<string> {
  const path = `${dataDir}/smoke-1layer-v1.gguf`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    await Deno.mkdir(dataDir, { recursive: true });
    await makeModel({ preset: "tiny", layers: 1, out: path, name: "hearth-smoke" });
    return path;
  }
}

/**
 * The child's work: runs in `hearth smoke-decode`, with the build under test loaded, and decodes
 * on a web Worker, the same kind of thread (and stack) the engine decodes on.
 */
export async function runSmokeDecode(
  libDir: string | undefined,
  model: string,
): Promise<SmokeOutput> {
  // Backends and the logger are registered once per process, here; the worker binds the same
  // libraries and does the work on a thread like the engine's.
  const llama = openLlama(libDir);
  const worker = new Worker(new URL("./smoke_worker.ts", import.meta.url), { type: "module" });
  try {
    return await new Promise<SmokeOutput>((resolve, reject) => {
      worker.onmessage = (e: MessageEvent<{ output?: SmokeOutput; error?: string }>) =>
        e.data.output ? resolve(e.data.output) : reject(new Error(e.data.error));
      worker.onerror = (e) => {
        e.preventDefault();
        reject(new Error(e.message));
      };
      worker.postMessage({ dir: llama.dir, model });
    });
  } finally {
    worker.terminate();
  }
}

/**
 * The smoke decode on the calling thread (`smoke_worker.ts` runs it on a web Worker, the thread
 * kind and stack size the engine decodes on).
 */
export async function smokeDecodeHere(llama: Llama, model: string): Promise<SmokeOutput> {
  const t0 = performance.now();
  const m = await loadModel(llama, model, { n_gpu_layers: 999 });
  const ctx = newContext(llama, m, { n_ctx: 128, n_batch: 64, n_ubatch: 64, n_seq_max: 1 });
  try {
    const vocab = modelVocab(llama, m);
    const nVocab = vocabInfo(llama, vocab).nTokens;
    const prompt = tokenize(llama, vocab, PROMPT, true, false);
    const batch = newBatch(64);
    const feed = (tokens: ArrayLike<number>, start: number) => {
      for (let i = 0; i < tokens.length; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = start + i;
        batch.seqId[i] = 0;
        batch.logits[i] = i === tokens.length - 1 ? 1 : 0;
      }
      setBatchSize(batch, tokens.length);
      // Synchronously, as the engine decodes: not on Deno's blocking pool (2 MiB stacks).
      const rc = decodeSync(llama, ctx, batch);
      if (rc !== 0) throw new Error(`llama_decode returned ${rc}`);
      return logitsIth(llama, ctx, tokens.length - 1, nVocab);
    };
    let logits = feed(prompt, 0);
    const sample: number[] = [];
    for (let t = 0; t < nVocab; t += SAMPLE_STRIDE) sample.push(logits[t]);
    const top = [...logits.keys()].sort((a, b) => logits[b] - logits[a]).slice(0, 8);
    const tokens: number[] = [];
    for (let i = 0; i < GREEDY_TOKENS; i++) {
      let best = 0;
      for (let t = 1; t < nVocab; t++) if (logits[t] > logits[best]) best = t;
      tokens.push(best);
      logits = feed([best], prompt.length + i);
    }
    const devices = listDevices(llama).map((d) => d.name);
    return { tokens, sample, top, devices, ms: Math.round(performance.now() - t0) };
  } finally {
    freeContext(llama, ctx);
    freeModel(llama, m);
  }
}

/** Runs the child for `libDir` (undefined: the CPU prebuilt); never throws. */
export async function runSmokeChild(
  libDir: string | undefined,
  model: string,
  timeoutMs = smokeTimeoutMs(),
): Promise<SmokeResult> {
  const [cmd, ...args] = selfCommand(["smoke-decode", "--model", model]);
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(cmd, {
      args,
      // The child loads exactly this build; the CPU reference must not inherit a custom one.
      env: { HEARTH_LLAMA_LIB_DIR: libDir ?? "", HEARTH_LLAMA_LOG: "1" },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(timeoutMs),
    }).output();
  } catch (e) {
    return { ok: false, reason: `the smoke decode could not run: ${(e as Error).message}` };
  }
  const stdout = new TextDecoder().decode(out.stdout).trim();
  const stderr = new TextDecoder().decode(out.stderr).trim();
  if (!out.success) {
    const how = out.signal ? `died with ${out.signal}` : `exited with status ${out.code}`;
    const timedOut = out.signal === "SIGTERM" ? ` (no answer within ${timeoutMs / 1000} s)` : "";
    return { ok: false, reason: `the smoke decode ${how}${timedOut}${tailOf(stderr)}` };
  }
  try {
    return { ok: true, reason: "decoded", output: JSON.parse(stdout.split("\n").pop()!) };
  } catch {
    return { ok: false, reason: `the smoke decode printed no result${tailOf(stderr)}` };
  }
}

/** The lines of a child's stderr that say what went wrong (the CUDA error, the abort). */
function tailOf(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter((l) => l);
  const telling = lines.filter((l) => /error|abort|fail|assert|fault|cuda|illegal/i.test(l));
  const tail = (telling.length ? telling : lines).slice(-3).join(" | ").slice(-400);
  return tail ? `: ${tail}` : "";
}

/** Compares a candidate's smoke output with the CPU build's; undefined when they agree. */
export function disagreement(got: SmokeOutput, ref: SmokeOutput): string | undefined {
  if (!got.sample.every(Number.isFinite)) return "its logits are not finite (NaN or Inf)";
  if (got.sample.length !== ref.sample.length) return "its vocabulary differs from the CPU build's";
  let dot = 0, a2 = 0, b2 = 0;
  for (let i = 0; i < got.sample.length; i++) {
    dot += got.sample[i] * ref.sample[i];
    a2 += got.sample[i] ** 2;
    b2 += ref.sample[i] ** 2;
  }
  const cosine = dot / Math.sqrt(a2 * b2);
  if (!(cosine >= MIN_COSINE)) {
    return `its logits disagree with the CPU build's (cosine ${cosine.toFixed(3)} < ${MIN_COSINE})`;
  }
  if (!got.top.includes(ref.top[0])) {
    return `its best token is not the CPU build's (${got.top[0]} vs ${ref.top[0]})`;
  }
  return undefined;
}

/**
 * Smoke-tests `libDir` against the CPU prebuilt: both decode the same one-layer model in child
 * processes, and the candidate must finish and agree.
 */
export async function smokeTest(
  libDir: string,
  o: { dataDir: string; timeoutMs?: number },
): Promise<SmokeResult> {
  let model: string;
  try {
    model = await smokeModel(o.dataDir);
  } catch (e) {
    return { ok: false, reason: `cannot write the smoke model: ${(e as Error).message}` };
  }
  const [got, ref] = await Promise.all([
    runSmokeChild(libDir, model, o.timeoutMs),
    runSmokeChild(undefined, model, o.timeoutMs),
  ]);
  if (!got.ok || !got.output) return got;
  if (!ref.ok || !ref.output) {
    // The reference failing says nothing against the candidate; its own run finished cleanly.
    return { ...got, reason: `decoded (the CPU reference failed: ${ref.reason})` };
  }
  const wrong = disagreement(got.output, ref.output);
  if (wrong) return { ok: false, reason: `the smoke decode ran but ${wrong}`, output: got.output };
  return {
    ok: true,
    reason: `decoded ${got.output.tokens.length} tokens on ${
      got.output.devices.join(", ")
    } in ${got.output.ms} ms, matching the CPU build`,
    output: got.output,
  };
}
