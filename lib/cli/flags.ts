/**
 * The `serve` flags (docs/ARCHITECTURE.md, "Commands and flags"): one table drives parsing, validation (Zod), `--help`
 * and the start-up refusal of flags whose feature this build cannot do. Parsing never exits; it
 * returns a one-line message that `main.ts` prints before exiting with status 2.
 *
 * @example
 * ```ts
 * import { parseServeArgs } from "./flags.ts";
 * const r = parseServeArgs(["--port", "9000", "--model", "tiny.gguf"], {});
 * if (r.ok) r.config.port; // 9000
 * ```
 * @module
 */
import { z } from "zod";
import { commandUsage } from "./commands.ts";
import { endpointList } from "./endpoint.ts";
import { graphBatchLayout } from "../engine/graph_batch.ts";
import { DEFAULT_BATCH } from "../engine/fit.ts";
import { parseFlags } from "./argv.ts";
import {
  MODEL_SET_FLAGS,
  type ModelSetFlags,
  type RepeatableFlag,
  takeRepeated,
} from "./model_set_flags.ts";

export const ISQ_TYPES = ["q2k", "q3k", "q4k", "q5k", "q6k", "q8_0"] as const;
export const KV_DTYPES = [
  "auto",
  "f32",
  "f16",
  "bf16",
  "q8_0",
  "q4_0",
  "q4_1",
  "q5_0",
  "q5_1",
  "iq4_nl",
] as const;
export const DTYPES = ["auto", "bf16", "f16", "f32"] as const;
export const VIDEO_REGIONS = ["global", "eu", "uk", "ch", "mena"] as const;

const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z.string().regex(/^-?\d+$/, "must be an integer").transform(Number).pipe(
    z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`),
  );
const text = z.string().min(1, "must not be empty");
/** A size in GiB: 0, 4, 0.5. */
const gib = z.string().regex(/^\d+(\.\d+)?$/, "must be a number of GiB").transform(Number);
/** `auto` (fitted to memory at start-up, `lib/engine/fit.ts`) or an integer in range. */
const intOrAuto = (min: number, max?: number) =>
  z.union([z.literal("auto"), int(min, max)], { error: "must be auto or an integer" });
/** `off` is the empty list: no padding even where the model sits on a GPU. */
const graphSizes = z.string().regex(
  /^(off|\d+(,\d+)*)$/,
  "must be off or a comma-separated list of integers",
).transform((s) => s === "off" ? [] : s.split(",").map(Number));

/** `--graph-batch`'s default where the model sits on a GPU (the seed's). */
export const GPU_GRAPH_BATCH = [1, 2, 4, 8, 16, 32];

/** `--cache-disk`'s default where `--cache-dir` is given, in GiB. */
export const DEFAULT_CACHE_DISK_GIB = 16;

/**
 * `--cache-ram`'s default: the smaller of 8 GiB and a quarter of the host's memory, in bytes, and
 * no more than half of what is still available once the model and its context are in place (the
 * cache fills over hours; it must not take what the process or the host needs).
 */
export function defaultCacheRamBytes(totalMemBytes: number, availableBytes?: number): number {
  const cap = Math.min(8 * 2 ** 30, Math.floor(totalMemBytes / 4));
  return availableBytes === undefined ? cap : Math.min(cap, Math.floor(availableBytes / 2));
}

/** One flag of `serve`, with its help line; `repeatable` ones may be given several times. */
type FlagSpec = RepeatableFlag<keyof ServeConfig>;

export type { ModelAliasFlag } from "./model_set_flags.ts";

export type ServeConfig = ModelSetFlags & {
  /** The first `--model`: the one model a single-model server loads, as before issue 34. */
  model?: string;
  /** Every `--model`, in the order given (empty when none). */
  models: string[];
  modelFile?: string;
  isq?: (typeof ISQ_TYPES)[number];
  kvcacheDtype: (typeof KV_DTYPES)[number];
  dtype: (typeof DTYPES)[number];
  chatTemplate?: string;
  mtp: number;
  port: number;
  host: string;
  uiServer: boolean;
  uiPort: number;
  /** `auto`: fitted to memory at start-up (up to 32). */
  maxBatch: number | "auto";
  /** `auto`: the longest context (up to the model's) that fits in memory. */
  maxSeqLen: number | "auto";
  maxQueue?: number;
  /** Host-memory prompt cache in GiB; undefined: the smaller of 8 and a quarter of RAM; 0: off. */
  cacheRam?: number;
  /** The prompt cache's disk tier (off when undefined), bounded by `cacheDisk` GiB. */
  cacheDir?: string;
  cacheDisk?: number;
  /** Undefined: the default (`GPU_GRAPH_BATCH` on a GPU, off on a CPU); `[]`: off. */
  graphBatch?: number[];
  backendSampling: "auto" | "on" | "off";
  /** Never build llama.cpp from source at start-up, even where no GPU build can run. */
  noBuild: boolean;
  numRanks: number;
  localNumRanks?: number;
  rankOffset: number;
  masterAddr?: string[];
  pdConfig?: string;
  mcpConfig?: string;
  apiKey?: string;
  dataDir: string;
  agentsConfig?: string;
  threads?: number;
  videoRegion: (typeof VIDEO_REGIONS)[number];
  videoBlocklist?: string;
  videoBackend: "local" | "upstream";
  videoUpstream?: string;
  videoWorkers: number;
  videoKeysFile?: string;
  help: boolean;
};

export const FLAGS: FlagSpec[] = [
  {
    key: "models",
    names: ["--m", "--model"],
    schema: text,
    meta: "ID|DIR|FILE",
    repeatable: true,
    help: "hub id owner/repo, a local directory, or a .gguf path (default: built-in demo model); " +
      "repeatable",
  },
  {
    key: "modelFile",
    names: ["--f", "--model-file"],
    schema: text,
    meta: "NAME",
    help: "GGUF file name inside the repo or directory",
  },
  ...MODEL_SET_FLAGS,
  {
    key: "isq",
    names: ["--isq"],
    schema: z.enum(ISQ_TYPES),
    meta: ISQ_TYPES.join("|"),
    help: "quantize an F16/BF16/F32 model at load (cached)",
  },
  {
    key: "kvcacheDtype",
    names: ["--kvcache-dtype"],
    schema: z.enum(KV_DTYPES),
    meta: "auto|f16|bf16|q8_0|q4_0|...",
    help: "KV cache type (llama.cpp type_k/type_v); auto = f16",
  },
  {
    key: "dtype",
    names: ["--dtype"],
    schema: z.enum(DTYPES),
    meta: DTYPES.join("|"),
    help: "weight dtype to load an unquantized model as; auto = as stored",
  },
  {
    key: "chatTemplate",
    names: ["--chat-template"],
    schema: text,
    meta: "FILE",
    help: "Jinja chat template file (overrides the model's)",
  },
  {
    key: "mtp",
    names: ["--mtp"],
    schema: int(0, 64),
    meta: "N",
    help: "draft tokens per step for speculative decoding; 0 = off",
  },
  { key: "port", names: ["--port"], schema: int(1, 65535), meta: "PORT", help: "HTTP port (8000)" },
  { key: "host", names: ["--host"], schema: text, meta: "ADDR", help: "bind address (0.0.0.0)" },
  { key: "uiServer", names: ["--ui-server"], help: "also serve the web UI on --ui-port" },
  {
    key: "uiPort",
    names: ["--ui-port"],
    schema: int(1, 65535),
    meta: "PORT",
    help: "web UI port (8001)",
  },
  {
    key: "maxBatch",
    names: ["--max-batch"],
    schema: intOrAuto(1, 256),
    meta: "N|auto",
    help: "concurrent sequences; auto = up to 32, as many as fit in memory (auto)",
  },
  {
    key: "maxSeqLen",
    names: ["--max-seq-len"],
    schema: intOrAuto(16),
    meta: "N|auto",
    help: "context per sequence; auto = the model's, or the longest that fits in memory (auto)",
  },
  {
    key: "maxQueue",
    names: ["--max-queue"],
    schema: int(0, 1_000_000),
    meta: "N",
    help: "requests that may wait for a free sequence before 503 (8 x --max-batch)",
  },
  {
    key: "cacheRam",
    names: ["--cache-ram"],
    schema: gib,
    meta: "GIB",
    help: "prompt cache in host memory (min(8, RAM/4, free/2)); 0 = off",
  },
  {
    key: "cacheDir",
    names: ["--cache-dir"],
    schema: text,
    meta: "DIR",
    help: "prompt cache on disk too (survives restarts; bounded by --cache-disk)",
  },
  {
    key: "cacheDisk",
    names: ["--cache-disk"],
    schema: gib.pipe(z.number().positive("must be more than 0")),
    meta: "GIB",
    help: `bound of the disk prompt cache (${DEFAULT_CACHE_DISK_GIB}); needs --cache-dir`,
  },
  {
    key: "graphBatch",
    names: ["--graph-batch"],
    schema: graphSizes,
    meta: "N,N,...|off",
    help: "pad decode steps to these sizes so CUDA graphs are reused (1,2,4,8,16,32 on a GPU)",
  },
  {
    key: "noBuild",
    names: ["--no-build"],
    help: "on a GPU host where no prebuilt llama.cpp can run, do not build one from source",
  },
  {
    key: "backendSampling",
    names: ["--backend-sampling"],
    schema: z.enum(["auto", "on", "off"]),
    meta: "auto|on|off",
    help: "sample in the decode graph; auto = on when the model sits on a GPU or RPC device",
  },
  { key: "numRanks", names: ["--num-ranks"], schema: int(1, 1024), meta: "N", help: "GPUs in all" },
  {
    key: "localNumRanks",
    names: ["--local-num-ranks"],
    schema: int(0, 1024),
    meta: "N",
    help: "GPUs on this node",
  },
  {
    key: "rankOffset",
    names: ["--rank-offset"],
    schema: int(0, 1024),
    meta: "N",
    help: "first rank of this node",
  },
  {
    key: "masterAddr",
    names: ["--master-addr"],
    schema: endpointList,
    meta: "HOST:PORT[,...]",
    help: "add the devices of these `hearth rpc-server`s to the model (llama.cpp RPC)",
  },
  {
    key: "pdConfig",
    names: ["--pd-config"],
    schema: text,
    meta: "FILE",
    help: "prefill/decode split: {role, peer, token?} (see README)",
  },
  {
    key: "mcpConfig",
    names: ["--mcp-config"],
    schema: text,
    meta: "FILE",
    help: 'MCP servers (JSON {"mcpServers": {...}})',
  },
  {
    key: "apiKey",
    names: ["--api-key"],
    schema: text,
    meta: "KEY",
    help: "require Bearer or x-api-key on inference routes",
  },
  {
    key: "dataDir",
    names: ["--data-dir"],
    schema: text,
    meta: "DIR",
    help: "cache, state and files (~/.cache/hearth)",
  },
  {
    key: "agentsConfig",
    names: ["--agents-config"],
    schema: text,
    meta: "FILE",
    help: "agents for the event channel (JSON)",
  },
  {
    key: "threads",
    names: ["--threads"],
    schema: int(1, 1024),
    meta: "N",
    help: "CPU threads for llama.cpp (default: all cores)",
  },
  {
    key: "videoRegion",
    names: ["--video-region"],
    schema: z.string().transform((s) => s.toLowerCase()).pipe(z.enum(VIDEO_REGIONS)),
    meta: VIDEO_REGIONS.join("|"),
    help: "region whose personGeneration rules the video API applies (global)",
  },
  {
    key: "videoBlocklist",
    names: ["--video-blocklist"],
    schema: text,
    meta: "FILE",
    help: "video safety policy: blocked terms, one per line",
  },
  {
    key: "videoBackend",
    names: ["--video-backend"],
    schema: z.enum(["local", "upstream"]),
    meta: "local|upstream",
    help: "render videos here, or forward to --video-upstream (local)",
  },
  {
    key: "videoUpstream",
    names: ["--video-upstream"],
    schema: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }),
    meta: "URL",
    help: "base URL of the real video API for --video-backend upstream",
  },
  {
    key: "videoWorkers",
    names: ["--video-workers"],
    schema: int(1, 64),
    meta: "N",
    help: "videos rendered at once (1)",
  },
  {
    key: "videoKeysFile",
    names: ["--video-keys-file"],
    schema: text,
    meta: "FILE",
    help: "video API keys, one per line (also HEARTH_VIDEO_API_KEYS)",
  },
  { key: "help", names: ["-h", "--help"], help: "show this help" },
];

export function defaultConfig(env: Record<string, string | undefined>): ServeConfig {
  return {
    models: [],
    modelAlias: [],
    kvcacheDtype: "auto",
    dtype: "auto",
    mtp: 0,
    port: 8000,
    host: "0.0.0.0",
    uiServer: false,
    uiPort: 8001,
    maxBatch: "auto",
    maxSeqLen: "auto",
    backendSampling: "auto",
    noBuild: false,
    numRanks: 1,
    rankOffset: 0,
    dataDir: `${env.HOME ?? "."}/.cache/hearth`,
    videoRegion: "global",
    videoBackend: "local",
    videoWorkers: 1,
    help: false,
  };
}

export type ParseResult = { ok: true; config: ServeConfig } | { ok: false; message: string };

/** Parses `serve` argv (`--flag value` or `--flag=value`). */
export function parseServeArgs(
  argv: string[],
  env: Record<string, string | undefined>,
): ParseResult {
  const repeated = takeRepeated(argv, FLAGS, "--help");
  if (!repeated.ok) return repeated;
  const r = parseFlags(repeated.rest, FLAGS, defaultConfig(env), "--help");
  if (!r.ok) return r;
  const config = { ...r.values, ...repeated.values } as ServeConfig;
  config.model = config.models[0];
  return { ok: true, config };
}

/**
 * `--graph-batch` in effect: as given (`off` is none), else the seed's sizes where the model sits
 * on a GPU (captured CUDA graphs are replayed instead of built again), else none. `note` says why
 * the GPU default was left off (a `--max-batch` too large for the padding sequences).
 */
export function graphBatchFor(
  c: ServeConfig,
  onGpu: boolean,
): { sizes?: number[]; note?: string } {
  if (c.graphBatch) return { sizes: c.graphBatch.length ? c.graphBatch : undefined };
  if (!onGpu) return {};
  try {
    graphBatchLayout(GPU_GRAPH_BATCH, mostSequences(c));
    return { sizes: GPU_GRAPH_BATCH };
  } catch (e) {
    return { note: `--graph-batch ${GPU_GRAPH_BATCH.join(",")} left off: ${(e as Error).message}` };
  }
}

/** The most sequences `--max-batch` may become (`auto` fits at most 32). */
function mostSequences(c: ServeConfig): number {
  return c.maxBatch === "auto" ? DEFAULT_BATCH : c.maxBatch;
}

/**
 * The first flag this build cannot honour, as a one-line reason, or undefined. Checked at start-up
 * so an unsupported request is refused loudly instead of being ignored.
 */
export function unsupportedFlag(c: ServeConfig): string | undefined {
  if (c.cacheDisk !== undefined && !c.cacheDir) {
    return "--cache-disk bounds the disk prompt cache: it needs --cache-dir DIR";
  }
  if (c.graphBatch?.length) {
    try {
      graphBatchLayout(c.graphBatch, mostSequences(c));
    } catch (e) {
      return (e as Error).message;
    }
  }
  if (c.uiServer && c.uiPort === c.port) {
    return `--ui-port ${c.uiPort} is also --port: the web UI needs a port of its own`;
  }
  if (c.videoBackend === "upstream" && !c.videoUpstream) {
    return "--video-backend upstream needs --video-upstream URL";
  }
  if (c.videoUpstream && c.videoBackend !== "upstream") {
    return "--video-upstream is only used with --video-backend upstream";
  }
  if (c.agentsConfig && !c.apiKey && !isLoopback(c.host)) {
    return `--agents-config on a non-loopback --host (${c.host}) needs --api-key: ` +
      "the agent routes run commands on this machine";
  }
  return undefined;
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" ||
    /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** `--help` text, generated from the table so it never drifts from the parser. */
export function helpText(): string {
  const rows = FLAGS.map((f) => {
    const left = `  ${f.names.join(", ")}${f.meta ? ` ${f.meta}` : ""}`;
    return `${left.padEnd(40)} ${f.help}`;
  });
  return [
    ...commandUsage(),
    "",
    "Flags of serve:",
    ...rows,
    "",
    "Environment: HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, HF_HUB_OFFLINE, HEARTH_LLAMA_LIB_DIR, HEARTH_CHAT_LOGGER, " +
    "HEARTH_SSE_BUFFER_SIZE, HEARTH_EVENTS_PING_MS, HEARTH_VIDEO_API_KEYS, CUDA_VISIBLE_DEVICES",
  ].join("\n");
}
