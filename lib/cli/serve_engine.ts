/**
 * `serve`'s model load: the GGUF into llama.cpp on the chosen build and devices, the prompt-cache
 * tiers sized from the flags and the host, the engine worker started on it, and (with a decode-side
 * `--pd-config`) long prompts routed to the prefill peer. The start-up log lines say what was
 * chosen and why. It runs after the HTTP server listens, so `/health` answers 503 meanwhile.
 *
 * @example
 * ```ts ignore
 * const started = await startServeEngine({ config, libDir, path, graphBatch, ranks, pd, log });
 * state.engine = started.engine;
 * ```
 * @module
 */
import { DEFAULT_CACHE_DISK_GIB, defaultCacheRamBytes, type ServeConfig } from "./flags.ts";
import { lastLoadStackBytes } from "../../ffi/load_thread.ts";
import { describeDevices, onAccelerator, type RankOptions } from "../engine/devices.ts";
import { describeFit, hostMemAvailable } from "../engine/fit.ts";
import { type EngineModel, loadEngineModel } from "../engine/model.ts";
import {
  modelFingerprint,
  type PdConfig,
  type PdStats,
  withRemotePrefill,
} from "../engine/prefill_decode.ts";
import { describePromptCache, type PromptCacheOptions } from "../engine/cache/prompt_cache.ts";
import type { Scheduler } from "../engine/scheduler.ts";
import { startWorkerEngine } from "../engine/worker_host.ts";

/** What `startServeEngine` needs beyond the flags. */
export interface ServeEngineOptions {
  config: ServeConfig;
  /** The llama.cpp build chosen by `lib/gpu/select.ts`. */
  libDir: string;
  /** The resolved GGUF. */
  path: string;
  graphBatch?: number[];
  ranks: RankOptions;
  pd?: PdConfig;
  log: (line: string) => void;
}

/** The loaded model and the engine serving it. */
export interface ServeEngine {
  model: EngineModel;
  engine: Scheduler;
  backendSampling: boolean;
  threadStacks: { load: number; engine: number };
  /** The decode side's prefill/decode counters (`--pd-config` with role decode). */
  pdStats?: () => PdStats;
}

/** Loads the model and starts its engine worker; throws what the load refused. */
export async function startServeEngine(o: ServeEngineOptions): Promise<ServeEngine> {
  const { config, log } = o;
  const model = await loadEngineModel({
    libDir: o.libDir,
    ranks: o.ranks,
    path: o.path,
    maxBatch: config.maxBatch,
    maxSeqLen: config.maxSeqLen,
    kvType: config.kvcacheDtype,
    threads: config.threads,
    mtpHeads: config.mtp > 0,
    rpcServers: config.masterAddr,
    graphBatch: o.graphBatch,
  });
  // Draft verification samples every row on the CPU (`--mtp` turns backend sampling off).
  const backendSampling = config.mtp === 0 &&
    (config.backendSampling === "auto"
      ? onAccelerator(model.devices)
      : config.backendSampling === "on");
  const promptCache = await promptCacheOptions(config, model);
  const worker = await startWorkerEngine(model, {
    maxWaiting: config.maxQueue ?? model.maxBatch * 8,
    draftTokens: config.mtp,
    backendSampling,
    promptCache,
  });
  const started: ServeEngine = {
    model,
    engine: worker,
    backendSampling,
    threadStacks: { load: lastLoadStackBytes(), engine: worker.threadStackBytes },
  };
  if (o.pd?.role === "decode") {
    const split = withRemotePrefill(worker, o.pd, await modelFingerprint(model.path));
    started.engine = split;
    started.pdStats = split.pdStats;
    log(`prompts of ${o.pd.minPrefillTokens}+ tokens are prefilled by ${o.pd.peer}`);
  }
  log(
    `llama.cpp from ${model.llama.dir}; devices: ${describeDevices(model.devices)}; ` +
      `backend sampling ${backendSampling ? "on" : "off"}`,
  );
  log(
    `model ready: ${model.info.description}, context ${model.nCtxSeq} per sequence, ` +
      `${model.maxBatch} sequences` +
      (model.graphBatch
        ? `, decode steps padded to ${model.graphBatch.sizes.join("/")} rows (--graph-batch)`
        : "") +
      (config.mtp > 0
        ? `, speculative decoding: ${config.mtp} drafts per step from ` +
          (model.mtp ? "the model's MTP heads" : "prompt lookup")
        : ""),
  );
  if (model.fit) log(`context: ${describeFit(model.fit)}`);
  log(`prompt cache: ${describePromptCache(promptCache, model.stateTrim)}`);
  return started;
}

/** The prompt-cache tiers: `--cache-ram` (or a share of the host), `--cache-dir`/`--cache-disk`. */
async function promptCacheOptions(
  config: ServeConfig,
  model: EngineModel,
): Promise<PromptCacheOptions> {
  return {
    ramBytes: Math.floor(
      config.cacheRam !== undefined
        ? config.cacheRam * 2 ** 30
        : defaultCacheRamBytes(Deno.systemMemoryInfo().total, hostMemAvailable()),
    ),
    ...(config.cacheDir
      ? {
        dir: config.cacheDir,
        diskBytes: Math.floor((config.cacheDisk ?? DEFAULT_CACHE_DISK_GIB) * 2 ** 30),
      }
      : {}),
    // A state is only loaded into the model and cache type it was made with.
    fingerprint: `${await modelFingerprint(model.path)}-${
      config.kvcacheDtype === "auto" ? "f16" : config.kvcacheDtype
    }`,
  };
}
