/**
 * Hearth's command-line entry: `serve` (the HTTP server) and `make-model` (writes a GGUF test
 * model). Bad flags exit with status 2 and one line; so does a flag this build cannot honour.
 *
 * @example
 * ```sh
 * deno run -A main.ts serve --port 8000 --model ./model.gguf
 * deno run -A main.ts make-model --preset tiny --out /tmp/tiny.gguf
 * ```
 * @module
 */
import {
  DEFAULT_CACHE_DISK_GIB,
  defaultCacheRamBytes,
  graphBatchFor,
  helpText,
  isLoopback,
  parseServeArgs,
  type ServeConfig,
  unsupportedFlag,
} from "./lib/cli/flags.ts";
import { type AgentFeatures, openAgents } from "./lib/agents/mod.ts";
import { loadAgentsConfig } from "./lib/agents/config.ts";
import { localBaseUrl } from "./lib/agents/local.ts";
import { runManager } from "./lib/manager/main.ts";
import { runRpcServer } from "./lib/cli/rpc_server.ts";
import { tokenizeText } from "./lib/engine/tokens.ts";
import { createVideoService, readBlocklist, type VideoService } from "./lib/video/operations.ts";
import type { ServerState } from "./routes/state.ts";
import { newSurfaces } from "./routes/app.ts";
import { agentRoutes } from "./routes/agents.ts";
import { videoRoutes } from "./routes/video.ts";
import { managerRoutes } from "./routes/manager.ts";
import { parseMakeModelArgs } from "./lib/cli/make_model_args.ts";
import { createChatLogger } from "./lib/chat/logger.ts";
import { compileTemplate } from "./lib/chat/template.ts";
import { loadEngineModel } from "./lib/engine/model.ts";
import { describeFit, hostMemAvailable } from "./lib/engine/fit.ts";
import { describeDevices, onAccelerator, pickRankDevices } from "./lib/engine/devices.ts";
import {
  loadPdConfig,
  modelFingerprint,
  type PdStats,
  withRemotePrefill,
} from "./lib/engine/pd.ts";
import { pdRoutes } from "./routes/pd.ts";
import { describePromptCache } from "./lib/engine/prompt_cache.ts";
import { chooseLlamaLibrary, libraryLogLine } from "./lib/gpu/select.ts";
import { buildOnStart } from "./lib/cli/build_on_start.ts";
import { runBuildCuda } from "./lib/cli/build_cuda.ts";
import { runGpuCheck } from "./lib/cli/gpu_check.ts";
import { runLaunch } from "./lib/cli/launch.ts";
import { startupNotes } from "./lib/cli/startup_notes.ts";
import { readCudaDriver } from "./ffi/cuda_driver.ts";
import { lastLoadStackBytes } from "./ffi/load_thread.ts";
import { runSmokeDecode } from "./lib/gpu/smoke.ts";
import { probeDriver } from "./lib/gpu/probe.ts";
import { startWorkerEngine } from "./lib/engine/worker_host.ts";
import { newServerState } from "./routes/state.ts";
import { makeModel } from "./lib/gguf/mod.ts";
import { resolveModel } from "./lib/models/resolve.ts";
import { createApp } from "./routes/app.ts";
import { sseBufferLimitFromEnv } from "./routes/sse.ts";
import { loadUiAssets, SERVER_PAGES, uiServerHandler } from "./routes/ui.ts";
import { videoRulesDocument } from "./lib/video/rules_document.ts";
import { loadMcpConfig, type McpRegistry, startMcpRegistry } from "./lib/mcp/registry.ts";

function die(message: string, code = 2): never {
  console.error(`hearth: ${message}`);
  Deno.exit(code);
}

/** `HEARTH_EVENTS_PING_MS` (heartbeat interval of /api/events; tests shorten it). */
function pingMsFromEnv(): number | undefined {
  const raw = Deno.env.get("HEARTH_EVENTS_PING_MS");
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) < 10) {
    die(`HEARTH_EVENTS_PING_MS=${raw}: must be a whole number of milliseconds, at least 10`);
  }
  return Number(raw);
}

/** Video API keys: `HEARTH_VIDEO_API_KEYS` (comma-separated) plus `--video-keys-file` lines. */
async function videoKeys(config: ServeConfig): Promise<string[]> {
  const keys = (Deno.env.get("HEARTH_VIDEO_API_KEYS") ?? "").split(",");
  if (config.videoKeysFile) {
    try {
      keys.push(...(await Deno.readTextFile(config.videoKeysFile)).split("\n"));
    } catch (e) {
      die(`--video-keys-file ${config.videoKeysFile}: ${(e as Error).message}`);
    }
  }
  return [...new Set(keys.map((k) => k.trim()).filter((k) => k && !k.startsWith("#")))];
}

/** Prompt tokens as the served model counts them; the video rules cap prompts at 1,024. */
function promptTokenCounter(state: ServerState): (text: string) => number {
  return (text) => {
    const engine = state.engine;
    // Before the model is loaded the tokenizer is unknown; one token per byte is an upper bound.
    if (!engine) return new TextEncoder().encode(text).length;
    return tokenizeText(engine.model, text, false).length;
  };
}

async function serve(argv: string[]): Promise<void> {
  const parsed = parseServeArgs(argv, Deno.env.toObject());
  if (!parsed.ok) die(parsed.message);
  const config = parsed.config;
  if (config.help) {
    console.log(helpText());
    return;
  }
  const unsupported = unsupportedFlag(config);
  if (unsupported) die(unsupported);
  let sseBufferLimit: number | undefined;
  try {
    sseBufferLimit = sseBufferLimitFromEnv(Deno.env.toObject());
  } catch (e) {
    die((e as Error).message);
  }

  let template;
  if (config.chatTemplate) {
    let source: string;
    try {
      source = await Deno.readTextFile(config.chatTemplate);
    } catch (e) {
      die(`--chat-template ${config.chatTemplate}: ${(e as Error).message}`);
    }
    try {
      template = compileTemplate(source);
    } catch (e) {
      die(
        `--chat-template ${config.chatTemplate}: not a valid Jinja template: ${
          (e as Error).message
        }`,
      );
    }
  }

  let mcpConfig;
  if (config.mcpConfig) {
    mcpConfig = await loadMcpConfig(config.mcpConfig).catch((e) => die((e as Error).message));
  }

  const pd = config.pdConfig
    ? await loadPdConfig(config.pdConfig).catch((e) => die((e as Error).message))
    : undefined;
  if (pd?.role === "prefill" && !pd.token && !isLoopback(config.host)) {
    die(
      `--pd-config ${config.pdConfig}: a prefill server on a non-loopback --host ` +
        `(${config.host}) needs a token: anyone reaching it could use its compute`,
    );
  }

  // A GPU build that passes the facts and the smoke decode, else the CPU build; the log says why.
  const log = (line: string) => console.error(`hearth: ${line}`);
  const library = await chooseLlamaLibrary({
    cacheRoot: config.dataDir,
    log,
    build: (arch) => buildOnStart(arch, config, log),
  });
  const graph = graphBatchFor(config, library.devices.length > 0);
  if (graph.note) log(graph.note);
  const graphBatch = graph.sizes;
  const ranks = {
    numRanks: config.numRanks,
    localNumRanks: config.localNumRanks,
    rankOffset: config.rankOffset,
  };
  if (library.kind === "cpu" && !config.masterAddr) {
    // No GPU and no RPC server: a rank layout beyond one device is refused before anything starts.
    try {
      pickRankDevices([], ranks);
    } catch (e) {
      die((e as Error).message);
    }
  }

  let resolved;
  try {
    resolved = await resolveModel(config);
  } catch (e) {
    die((e as Error).message);
  }
  if (resolved.source === "demo") {
    console.error(
      "hearth: no --model given: serving the built-in demo model (random weights: its output is noise)",
    );
  }

  const agentsFile = config.agentsConfig
    ? await loadAgentsConfig(config.agentsConfig).catch((e) => die((e as Error).message))
    : undefined;
  const keys = await videoKeys(config);
  let blocklist: string[] | undefined;
  if (config.videoBlocklist) {
    blocklist = await readBlocklist(config.videoBlocklist).catch((e) =>
      die(`--video-blocklist ${config.videoBlocklist}: ${(e as Error).message}`)
    );
  }

  for (const note of startupNotes(config, Deno.env.toObject())) log(`warning: ${note}`);
  const state = newServerState(resolved.id, config.apiKey);
  state.library = library;
  console.error(`hearth: ${libraryLogLine(library)}`);
  state.template = template;
  state.sseBufferLimit = sseBufferLimit;
  state.threads = config.threads;
  state.dataDir = config.dataDir;
  if (Deno.env.get("HEARTH_CHAT_LOGGER") === "1") {
    state.chatLog = createChatLogger(`${config.dataDir}/logs`);
  }
  // MCP servers connect in the background: a slow or broken one never delays or stops start-up.
  const mcp: McpRegistry | undefined = mcpConfig
    ? startMcpRegistry(mcpConfig, { log: (line) => console.error(`hearth: ${line}`) })
    : undefined;
  state.mcp = mcp;
  const surfaces = newSurfaces({ pingMs: pingMsFromEnv(), bufferLimit: sseBufferLimit });
  const uiAssets = await loadUiAssets();
  const uiOptions = {
    pages: SERVER_PAGES,
    json: {
      "video-rules.json": () =>
        videoRulesDocument(config.videoRegion, { keyRequired: keys.length > 0 }),
    },
  };
  surfaces.ui = { assets: uiAssets, options: uiOptions };
  if (pd?.role === "prefill") {
    const counters: PdStats = { role: "prefill", peer: pd.peer, remotePrefills: 0, fallbacks: 0 };
    let fingerprint: Promise<string> | undefined;
    surfaces.pd = pdRoutes(
      state,
      pd,
      counters,
      () => fingerprint ??= modelFingerprint(resolved.path),
    );
    state.pd = () => ({ ...counters });
  }
  const app = createApp(state, surfaces);
  let agents: AgentFeatures | undefined;
  if (agentsFile) {
    agents = await openAgents({
      bus: surfaces.bus,
      dataDir: config.dataDir,
      config: agentsFile,
      // "model": "local" agents talk to this very server, over loopback.
      local: {
        baseUrl: localBaseUrl(config.host, config.port),
        apiKey: config.apiKey,
        modelId: resolved.id,
        // Read at each launch: with `--max-seq-len auto` it is known once the model has loaded.
        get contextWindow() {
          return state.engine?.model.nCtxSeq ??
            (config.maxSeqLen === "auto" ? undefined : config.maxSeqLen);
        },
      },
    }).catch((e) => die((e as Error).message));
    surfaces.sessions = agentRoutes(agents);
  }
  let video: VideoService | undefined;
  if (keys.length === 0 && !isLoopback(config.host) && config.videoBackend === "local") {
    surfaces.videoDisabled = `the video API is off: no API keys are configured ` +
      `(HEARTH_VIDEO_API_KEYS or --video-keys-file) and --host ${config.host} is not loopback`;
    console.error(`hearth: ${surfaces.videoDisabled}`);
  } else {
    video = await createVideoService({
      dataDir: config.dataDir,
      region: config.videoRegion,
      blocklist,
      backend: config.videoBackend,
      upstreamUrl: config.videoUpstream,
      workers: config.videoWorkers,
      keys,
      countTokens: promptTokenCounter(state),
    });
    surfaces.video = videoRoutes(video);
  }
  const server = Deno.serve({
    hostname: config.host,
    port: config.port,
    onListen: ({ hostname, port }) =>
      console.error(`hearth: listening on http://${hostname}:${port} (model ${resolved.id})`),
  }, app.fetch);
  const uiServer = config.uiServer
    ? Deno.serve({
      hostname: config.host,
      port: config.uiPort,
      onListen: ({ hostname, port }) =>
        console.error(
          `hearth: web UI on http://${hostname}:${port}/ (also under /ui/ on the API port)`,
        ),
    }, uiServerHandler(uiAssets, app, uiOptions))
    : undefined;

  const stop = async () => {
    // Open event streams would hold shutdown() forever; end them first.
    surfaces.fanout.closeAll();
    await Promise.all([agents?.close(), video?.close(), mcp?.close()]);
    await Promise.all([server.shutdown(), uiServer?.shutdown()]);
    // Prompt-cache states on their way to --cache-dir are for the next start: let them land
    // (bounded, so a slow disk cannot hold the exit).
    await Promise.race([
      state.engine?.flushCache?.(),
      new Promise((r) => setTimeout(r, 30_000)),
    ]);
    // Queued chat-log lines belong to replies already sent; write them before leaving.
    await state.chatLog?.flush();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);

  try {
    const model = await loadEngineModel({
      libDir: library.dir,
      ranks,
      path: resolved.path,
      maxBatch: config.maxBatch,
      maxSeqLen: config.maxSeqLen,
      kvType: config.kvcacheDtype,
      threads: config.threads,
      mtpHeads: config.mtp > 0,
      rpcServers: config.masterAddr,
      graphBatch,
    });
    if (!state.template && model.info.chatTemplate) {
      try {
        state.template = compileTemplate(model.info.chatTemplate);
      } catch (e) {
        console.error(`hearth: the model's chat template does not parse: ${(e as Error).message}`);
      }
    }
    // Draft verification samples every row on the CPU (`--mtp` turns backend sampling off).
    state.backendSampling = config.mtp === 0 &&
      (config.backendSampling === "auto"
        ? onAccelerator(model.devices)
        : config.backendSampling === "on");
    const promptCache = {
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
    const engine = await startWorkerEngine(model, {
      maxWaiting: config.maxQueue ?? model.maxBatch * 8,
      draftTokens: config.mtp,
      backendSampling: state.backendSampling,
      promptCache,
    });
    state.threadStacks = { load: lastLoadStackBytes(), engine: engine.threadStackBytes };
    if (pd?.role === "decode") {
      const split = withRemotePrefill(engine, pd, await modelFingerprint(model.path));
      state.engine = split;
      state.pd = split.pdStats;
      console.error(
        `hearth: prompts of ${pd.minPrefillTokens}+ tokens are prefilled by ${pd.peer}`,
      );
    } else {
      state.engine = engine;
    }
    console.error(
      `hearth: llama.cpp from ${model.llama.dir}; devices: ${describeDevices(model.devices)}; ` +
        `backend sampling ${state.backendSampling ? "on" : "off"}`,
    );
    console.error(
      `hearth: model ready: ${model.info.description}, context ${model.nCtxSeq} per sequence, ` +
        `${model.maxBatch} sequences` +
        (model.graphBatch
          ? `, decode steps padded to ${model.graphBatch.sizes.join("/")} rows (--graph-batch)`
          : "") +
        (config.mtp > 0
          ? `, speculative decoding: ${config.mtp} drafts per step from ` +
            (model.mtp ? "the model's MTP heads" : "prompt lookup")
          : ""),
    );
    if (model.fit) console.error(`hearth: context: ${describeFit(model.fit)}`);
    console.error(`hearth: prompt cache: ${describePromptCache(promptCache, model.stateTrim)}`);
  } catch (e) {
    state.loadError = (e as Error).message;
    await Promise.all([server.shutdown(), uiServer?.shutdown()]);
    // A rank layout this host cannot give, or a context that cannot fit, is a usage error.
    if (/^--(num-ranks|local-num-ranks|max-seq-len|max-batch)/.test(state.loadError)) {
      die(state.loadError);
    }
    console.error(`hearth: could not load the model: ${state.loadError}`);
    Deno.exit(1);
  }
}

async function makeModelCommand(argv: string[]): Promise<void> {
  const parsed = parseMakeModelArgs(argv);
  if (!parsed.ok) die(parsed.message);
  const t0 = performance.now();
  await makeModel(parsed.options);
  const size = (await Deno.stat(parsed.options.out)).size;
  console.error(
    `hearth: wrote ${parsed.options.out} (${parsed.options.preset}, ${
      (size / 1e6).toFixed(1)
    } MB) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
}

function defaultDataDir(): string {
  return `${Deno.env.get("HOME") ?? "."}/.cache/hearth`;
}

/** `build-cuda --arch native`: the visible GPUs' compute capabilities (`90`, `80,90`). */
async function nativeArch(): Promise<string | undefined> {
  const d = await probeDriver();
  const archs = [...new Set(d.devices.map((g) => g.compute.replace(".", "")))];
  return archs.length ? archs.join(",") : undefined;
}

if (import.meta.main) {
  const [command, ...rest] = Deno.args;
  switch (command) {
    case "serve":
      await serve(rest);
      break;
    case "make-model":
      await makeModelCommand(rest);
      break;
    case "manager":
      await runManager(rest, managerRoutes);
      break;
    case "gpu-check":
      Deno.exit(await runGpuCheck(rest, { defaultDataDir: defaultDataDir() }));
      break;
    case "build-cuda":
      Deno.exit(
        await runBuildCuda(rest, { defaultDataDir: defaultDataDir(), nativeArch }),
      );
      break;
    case "launch":
      Deno.exit(await runLaunch(rest));
      break;
    case "gpu-probe":
      // Internal: the driver's facts for `lib/gpu/probe.ts`, asked in this child process.
      try {
        console.log(JSON.stringify(readCudaDriver()));
      } catch (e) {
        console.log(JSON.stringify({ error: (e as Error).message }));
      }
      break;
    case "smoke-decode": {
      // Internal: the smoke decode of `lib/gpu/smoke.ts`, run with the build under test loaded.
      const model = rest[rest.indexOf("--model") + 1];
      if (!rest.includes("--model") || !model) die("smoke-decode needs --model PATH");
      const lib = Deno.env.get("HEARTH_LLAMA_LIB_DIR") || undefined;
      console.log(JSON.stringify(await runSmokeDecode(lib, model)));
      break;
    }
    case "rpc-server": {
      const r = await runRpcServer(rest);
      if (r.message) console.error(`hearth: ${r.message}`);
      Deno.exit(r.code);
      break;
    }
    case undefined:
    case "-h":
    case "--help":
    case "help":
      console.log(helpText());
      break;
    default:
      die(
        `unknown command ${
          JSON.stringify(command)
        } (commands: serve, launch, manager, rpc-server, make-model, gpu-check, build-cuda; see --help)`,
      );
  }
}
