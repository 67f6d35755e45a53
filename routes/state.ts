/**
 * What the HTTP layer knows about the running engine: the served model's id and limits, the
 * scheduler once loading has finished, the chat template, metrics, and per-server options
 * (API key, SSE buffer bound, chat logger). Routes read it; `main.ts` fills it.
 *
 * @example
 * ```ts
 * import { newServerState } from "./state.ts";
 * const state = newServerState("hearth-demo");
 * state.engine; // undefined until the model is loaded (health answers 503)
 * ```
 * @module
 */
import type { ChatLogger } from "../lib/chat/logger.ts";
import type { CompiledTemplate } from "../lib/chat/template.ts";
import { type ChannelCounters, type Metrics, newMetrics } from "../lib/engine/metrics.ts";
import type { Scheduler } from "../lib/engine/scheduler.ts";
import type { PdStats } from "../lib/engine/prefill_decode.ts";
import type { LibraryChoice } from "../lib/gpu/select.ts";
import type { McpRegistry } from "../lib/mcp/registry.ts";

export type ServerState = {
  modelId: string;
  created: number;
  engine?: Scheduler;
  /** Stack sizes of the threads llama.cpp runs on (model load, engine), as glibc reports them. */
  threadStacks?: { load: number; engine: number };
  template?: CompiledTemplate;
  /** Set when loading failed; health reports it. */
  loadError?: string;
  apiKey?: string;
  metrics: Metrics;
  /** Bytes a streaming client may fall behind before it is dropped. */
  sseBufferLimit?: number;
  chatLog?: ChatLogger;
  /** CPU threads for llama.cpp contexts made after start-up (embeddings). */
  threads?: number;
  /** Where stored state lives (`--data-dir`): stored Responses API responses, logs. */
  dataDir?: string;
  /** MCP servers of `--mcp-config`, whose tools requests may attach. */
  mcp?: McpRegistry;
  /** Which llama.cpp build was chosen and why (CPU, CUDA, `HEARTH_LLAMA_LIB_DIR`), for /props. */
  library?: LibraryChoice;
  /** Whether requests that allow it sample in the decode graph (`--backend-sampling`), for /props. */
  backendSampling?: boolean;
  /** The prefill/decode split's role and counters (`--pd-config`), for /props. */
  pd?: () => PdStats;
  /** Event-channel counters for /metrics (set when the app mounts the channel). */
  channel?: () => ChannelCounters;
};

export function newServerState(modelId: string, apiKey?: string): ServerState {
  return { modelId, created: Math.floor(Date.now() / 1000), apiKey, metrics: newMetrics() };
}
