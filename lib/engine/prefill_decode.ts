/**
 * Prefill/decode split (`--pd-config FILE`): two servers with the same model, one computing
 * prompts (`role: "prefill"`) and one generating (`role: "decode"`). The decode server takes the
 * requests; for each prompt it asks the prefill server to compute every prompt token but the
 * last, receives that sequence's KV cells (`llama_state_seq_get_data`) over HTTP, loads them into
 * its own sequence and computes the last token itself, whose logits start generation. Output is
 * the same as one server's; what moves is where the prompt's compute happens, so long prompts
 * arriving do not stall the decode server's running streams.
 *
 * Any failure on the way (prefill server down, slow, another model, KV refused) falls back to
 * computing the prompt locally, counted and logged: a request never fails because of the split.
 *
 * The pair shares `token` (sent as `x-hearth-pd-token`); a prefill server without one must listen
 * on loopback.
 *
 * @example
 * ```ts
 * import { parsePdConfig, withRemotePrefill } from "./prefill_decode.ts";
 * const cfg = parsePdConfig('{"role":"decode","peer":"http://10.0.0.2:8000","token":"s3cret"}');
 * const engine = withRemotePrefill(local, cfg, await modelFingerprint(local.model.path));
 * ```
 * @module
 */
import { z } from "zod";
import { defaultSampling } from "./sampling/sampling.ts";
import {
  checkRequest,
  type GenEvent,
  type GenRequest,
  isRefusal,
  type Scheduler,
} from "./scheduler.ts";

export const PD_PATH = "/internal/pd/prefill";
export const PD_TOKEN_HEADER = "x-hearth-pd-token";
export const PD_TOKENS_HEADER = "x-hearth-kv-tokens";

const schema = z.object({
  role: z.enum(["prefill", "decode"]),
  /** The other server: the prefill server's base URL on the decode side (required there). */
  peer: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }).optional(),
  token: z.string().min(1, "must not be empty").optional(),
  /** Prompts shorter than this are computed locally: a round trip costs more than they do. */
  minPrefillTokens: z.number().int().min(1).default(32),
  /** How long the decode server waits for the cells before computing locally. */
  timeoutMs: z.number().int().min(100).max(600_000).default(30_000),
}).strict().refine((c) => c.role !== "decode" || c.peer, {
  message: "a decode server needs peer (the prefill server's URL)",
  path: ["peer"],
});

export type PdConfig = z.infer<typeof schema>;

/** Parses the file's JSON; throws one line naming the field at fault. */
export function parsePdConfig(text: string): PdConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`not JSON: ${(e as Error).message}`);
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new Error(`${i.path.join(".") || "(top level)"}: ${i.message}`);
  }
  return { ...r.data, peer: r.data.peer?.replace(/\/+$/, "") };
}

export async function loadPdConfig(path: string): Promise<PdConfig> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`--pd-config ${path}: ${(e as Error).message}`);
  }
  try {
    return parsePdConfig(text);
  } catch (e) {
    throw new Error(`--pd-config ${path}: ${(e as Error).message}`);
  }
}

/**
 * What both servers must agree on for cells to be interchangeable: the same GGUF. Hashing a
 * 50 GB file at start-up is too slow, so the hash covers its size and its first and last MiB:
 * the header (architecture, vocabulary, template, tensor shapes) and the first and last weights,
 * which any other model or fine-tune changes. llama.cpp checks the cache layout again when
 * loading the cells.
 */
export async function modelFingerprint(path: string): Promise<string> {
  const f = await Deno.open(path);
  try {
    const size = (await f.stat()).size;
    const part = Math.min(1 << 20, size);
    const buf = new Uint8Array(16 + 2 * part);
    new DataView(buf.buffer).setBigUint64(0, BigInt(size), true);
    const readAt = async (offset: number, into: Uint8Array) => {
      await f.seek(offset, Deno.SeekMode.Start);
      let got = 0;
      while (got < into.length) {
        const n = await f.read(into.subarray(got));
        if (n === null) break;
        got += n;
      }
    };
    await readAt(0, buf.subarray(16, 16 + part));
    await readAt(size - part, buf.subarray(16 + part));
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", buf));
    return Array.from(digest.subarray(0, 16), (b) => b.toString(16).padStart(2, "0")).join("");
  } finally {
    f.close();
  }
}

/** Whether `given` equals `token` without leaking where they differ through timing. */
export function tokenMatches(given: string | undefined, token: string): boolean {
  const a = new TextEncoder().encode(given ?? "");
  const b = new TextEncoder().encode(token);
  let diff = a.length ^ b.length;
  for (let i = 0; i < b.length; i++) diff |= (a[i] ?? 0) ^ b[i];
  return diff === 0;
}

export type PdStats = {
  role: "prefill" | "decode";
  peer?: string;
  /** Decode side: prompts whose cells came from the peer; prefill side: prompts computed. */
  remotePrefills: number;
  /** Decode side: prompts computed locally because the peer failed (or its cells were refused). */
  fallbacks: number;
  lastError?: string;
};

/** Prefill side: computes `tokens` and returns their cells. */
export async function exportPrefill(
  engine: Scheduler,
  tokens: Int32Array,
  signal?: AbortSignal,
): Promise<{ state: Uint8Array; tokens: number }> {
  const events = engine.submit({
    prompt: tokens,
    maxTokens: 0,
    exportKv: true,
    // Nothing is sampled; greedy keeps the chain stateless (and backend-sampled, so no logits
    // row is copied out for the last token).
    sampling: { ...defaultSampling(), temperature: 0, seed: 0 },
    stop: [],
    ignoreEos: false,
    signal,
  });
  for await (const ev of events) {
    if (ev.type === "kv") return { state: ev.state, tokens: ev.tokens };
    if (ev.type === "error") throw new Error(ev.message);
  }
  throw new Error(signal?.aborted ? "cancelled" : "the engine sent no KV cells");
}

/** Decode side: asks the peer for the cells of `tokens`. */
export async function fetchPrefill(
  cfg: PdConfig,
  fingerprint: string,
  tokens: Int32Array,
  signal?: AbortSignal,
): Promise<{ state: Uint8Array; tokens: number }> {
  const timeout = AbortSignal.timeout(cfg.timeoutMs);
  let r: Response;
  try {
    r = await fetch(`${cfg.peer}${PD_PATH}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(cfg.token ? { [PD_TOKEN_HEADER]: cfg.token } : {}),
      },
      body: JSON.stringify({ fingerprint, tokens: Array.from(tokens) }),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
  } catch (e) {
    if (timeout.aborted) {
      throw new Error(`the prefill server ${cfg.peer} did not answer within ${cfg.timeoutMs} ms`);
    }
    const cause = (e as Error & { cause?: Error }).cause?.message;
    throw new Error(
      `could not reach the prefill server ${cfg.peer}: ${cause ?? (e as Error).message}`,
    );
  }
  if (r.status !== 200) {
    const body = await r.text().catch(() => "");
    let why = body.slice(0, 300);
    try {
      why = JSON.parse(body).error?.message ?? why;
    } catch { /* not JSON */ }
    throw new Error(`the prefill server answered ${r.status}: ${why}`);
  }
  const n = Number(r.headers.get(PD_TOKENS_HEADER));
  let state: Uint8Array;
  try {
    state = new Uint8Array(await r.arrayBuffer());
  } catch (e) {
    throw new Error(`the prefill server's cells were cut off: ${(e as Error).message}`);
  }
  if (n !== tokens.length) {
    throw new Error(`the prefill server sent cells for ${n} tokens, not ${tokens.length}`);
  }
  return { state, tokens: n };
}

/**
 * The decode server's engine: `engine`, with each prompt's cells fetched from the prefill server
 * first. Refusals a request gets at once (empty, too long, bad input) still throw from `submit`.
 */
export function withRemotePrefill(
  engine: Scheduler,
  cfg: PdConfig,
  fingerprint: string,
  log: (line: string) => void = (l) => console.error(`hearth: ${l}`),
): Scheduler & { pdStats(): PdStats } {
  const pd: PdStats = { role: "decode", peer: cfg.peer, remotePrefills: 0, fallbacks: 0 };

  async function* run(req: GenRequest): AsyncGenerator<GenEvent> {
    let kv: GenRequest["kv"];
    try {
      kv = await fetchPrefill(
        cfg,
        fingerprint,
        req.prompt.subarray(0, req.prompt.length - 1),
        req.signal,
      );
    } catch (e) {
      if (req.signal?.aborted) return;
      pd.fallbacks++;
      pd.lastError = (e as Error).message;
      log(`prefill server failed, computing the prompt here: ${pd.lastError}`);
    }
    let events: AsyncIterable<GenEvent>;
    try {
      events = engine.submit({ ...req, kv });
    } catch (e) {
      yield {
        type: "error",
        message: isRefusal(e) ? `${e.kind}: ${e.message}` : (e as Error).message,
      };
      return;
    }
    for await (const ev of events) {
      // Cells are not loaded when this server's own prefix cache already holds the prompt.
      if (ev.type === "done" && kv) {
        if (ev.remoteTokens) pd.remotePrefills++;
        else if (ev.cachedTokens < kv.tokens) {
          pd.fallbacks++;
          pd.lastError =
            "llama.cpp refused the prefill server's KV cells (another model or cache type?)";
          log(pd.lastError);
        }
      }
      yield ev;
    }
  }

  function submit(req: GenRequest): AsyncIterable<GenEvent> {
    const remote = !req.kv && !req.exportKv && req.promptLogprobs === undefined &&
      req.maxTokens > 0 && req.prompt.length - 1 >= cfg.minPrefillTokens;
    if (!remote) return engine.submit(req);
    checkRequest(engine.model, req);
    return run(req);
  }

  return { ...engine, submit, pdStats: () => ({ ...pd }) };
}
