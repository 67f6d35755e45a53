/**
 * Operational endpoints: `GET /health` (200 `{"status":"ok"}` once the model is loaded, 503 while
 * loading or after a failed load), `GET /props` (model, context and batch settings) and
 * `GET /metrics` (Prometheus text).
 *
 * @example
 * ```ts ignore
 * import { opsHandlers } from "./ops.ts";
 * import { mountRoutes, routesOf, SERVE_ROUTES } from "./table.ts";
 * mountRoutes(app, routesOf(SERVE_ROUTES, "ops"), opsHandlers(state));
 * ```
 * @module
 */
import {
  HEARTH_SAMPLING_DEFAULTS,
  type SamplingDefaults,
} from "../lib/engine/sampling/sampling.ts";
import type { Context } from "hono";
import { renderMetrics } from "../lib/engine/metrics.ts";
import type { PromptCacheStats, TierStats } from "../lib/engine/cache/prompt_cache.ts";
import type { ServerState } from "./state.ts";

/** The handlers of the `ops` rows of routes/table.ts. */
export function opsHandlers(state: ServerState) {
  const health = (c: Context) => {
    // MCP servers are listed only where configured; one that is down never makes the server unhealthy.
    const mcp = state.mcp ? { mcp: state.mcp.states() } : {};
    if (state.engine) return c.json({ status: "ok", ...mcp });
    if (state.loadError) return c.json({ status: "error", error: state.loadError }, 503);
    return c.json({ status: "loading" }, 503);
  };
  const props = (c: Context) => {
    const e = state.engine;
    if (!e) return c.json({ status: "loading" }, 503);
    const m = e.model;
    return c.json({
      model: state.modelId,
      model_path: m.path,
      description: m.info.description,
      n_params: m.info.nParams,
      size_bytes: m.info.sizeBytes,
      file_type: m.info.fileType,
      n_ctx_train: m.info.nCtxTrain,
      n_vocab: m.nVocab,
      max_model_len: m.nCtxSeq,
      max_batch: m.maxBatch,
      // What --max-seq-len and --max-batch became, and why (lib/engine/fit.ts).
      fit: m.fit
        ? {
          max_seq_len: m.fit.maxSeqLen,
          max_batch: m.fit.maxBatch,
          bytes: m.fit.bytes,
          usable_bytes: m.fit.usableBytes,
          free_bytes: m.fit.freeBytes,
          why: m.fit.why,
        }
        : null,
      n_batch: m.nBatch,
      graph_batch: m.graphBatch?.sizes ?? null,
      backend_sampling: state.backendSampling ?? null,
      // What a request that names no sampling field gets (agents send none).
      default_sampling: samplingProps(m.samplingDefaults ?? HEARTH_SAMPLING_DEFAULTS),
      chat_template: state.template?.source ?? null,
      library: {
        kind: state.library?.kind ?? "cpu",
        build: state.library?.build ?? "cpu",
        dir: m.llama.dir,
        reason: state.library?.reason ?? null,
        gpus: state.library?.devices ?? [],
        rejected: state.library?.rejected ?? [],
      },
      thread_stack_bytes: state.threadStacks ?? null,
      // The prompt cache beyond the slots (--cache-ram, --cache-dir, --cache-disk).
      prompt_cache: promptCacheProps(e.stats().promptCache, m.stateTrim),
      ...(state.pd ? { pd: state.pd() } : {}),
      devices: m.devices.map((d) => ({
        name: d.name,
        description: d.description,
        type: d.type,
        backend: d.backend,
        memory_total: d.memoryTotal,
        memory_free: d.memoryFree,
      })),
    });
  };
  const metrics = (c: Context) =>
    c.text(
      renderMetrics(state.metrics, state.engine?.stats(), undefined, state.channel?.()),
      200,
      {
        "content-type": "text/plain; version=0.0.4; charset=utf-8",
      },
    );
  return { health, props, metrics };
}

/** The prompt cache's tiers in /props (null when it is off). */
function promptCacheProps(pc: PromptCacheStats | undefined, kvTrim: boolean) {
  if (!pc) return null;
  const tier = (t: TierStats) => ({
    capacity_bytes: t.capacity,
    bytes: t.bytes,
    entries: t.entries,
    hits: t.hits,
    misses: t.misses,
    tokens: t.tokens,
  });
  return {
    ram: tier(pc.ram),
    disk: pc.disk ? { ...tier(pc.disk), dir: pc.dir ?? null } : null,
    // Models whose cache cannot be trimmed reuse whole states only (checkpoints).
    checkpoints: !kvTrim,
  };
}

function samplingProps(d: SamplingDefaults) {
  return {
    temperature: d.temperature,
    top_k: d.topK,
    top_p: d.topP,
    min_p: d.minP,
    repetition_penalty: d.repetitionPenalty,
    penalty_last_n: d.penaltyLastN,
    from_model: d.fromModel,
  };
}
