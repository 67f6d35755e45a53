/**
 * Hearth's command-line entry: every command of `lib/cli/commands.ts` (`serve`, `launch`,
 * `manager`, `rpc-server`, `make-model`, `gpu-check`, `build-cuda`, and the internal children
 * `gpu-probe` and `smoke-decode`) runs from the `RUN` table below. Bad flags exit with status 2
 * and one line; so does a flag this build cannot honour.
 *
 * `serve` in order: flags and the files they name (`lib/cli/serve_inputs.ts`), the llama.cpp
 * build (`lib/gpu/select.ts`), the model's path (`lib/models/resolve.ts`), the HTTP surfaces
 * (`mountSurfaces`), listening, then the model load (`lib/cli/serve_engine.ts`): `/health`
 * answers 503 until it is ready.
 *
 * @example
 * ```sh
 * deno run -A main.ts serve --port 8000 --model ./model.gguf
 * deno run -A main.ts make-model --preset tiny --out /tmp/tiny.gguf
 * ```
 * @module
 */
import {
  graphBatchFor,
  helpText,
  isLoopback,
  parseServeArgs,
  type ServeConfig,
  unsupportedFlag,
} from "./lib/cli/flags.ts";
import { type CommandName, findCommand, unknownCommand } from "./lib/cli/commands.ts";
import { readServeInputs, type ServeInputs } from "./lib/cli/serve_inputs.ts";
import { startServeEngine } from "./lib/cli/serve_engine.ts";
import { type AgentFeatures, openAgents } from "./lib/agents/mod.ts";
import { localBaseUrl } from "./lib/agents/local.ts";
import { runManager } from "./lib/manager/main.ts";
import { runRpcServer } from "./lib/cli/rpc_server.ts";
import { tokenizeText } from "./lib/engine/tokens.ts";
import { createVideoService, type VideoService } from "./lib/video/operations.ts";
import type { ServerState } from "./routes/state.ts";
import { createApp, newSurfaces, type Surfaces } from "./routes/app.ts";
import { agentRoutes } from "./routes/agents.ts";
import { videoRoutes } from "./routes/video.ts";
import { managerRoutes } from "./routes/manager.ts";
import { parseMakeModelArgs } from "./lib/cli/make_model_args.ts";
import { createChatLogger } from "./lib/chat/logger.ts";
import { compileTemplate } from "./lib/chat/template.ts";
import { pickRankDevices } from "./lib/engine/devices.ts";
import { modelFingerprint, type PdStats } from "./lib/engine/prefill_decode.ts";
import { pdRoutes } from "./routes/prefill_decode.ts";
import { chooseLlamaLibrary, libraryLogLine } from "./lib/gpu/select.ts";
import { buildOnStart } from "./lib/cli/build_on_start.ts";
import { runBuildCuda } from "./lib/cli/build_cuda.ts";
import { runGpuCheck } from "./lib/cli/gpu_check.ts";
import { runLaunch } from "./lib/cli/launch.ts";
import { startupNotes } from "./lib/cli/startup_notes.ts";
import { readCudaDriver } from "./ffi/cuda_driver.ts";
import { runSmokeDecode } from "./lib/gpu/smoke.ts";
import { probeDriver } from "./lib/gpu/probe.ts";
import { newServerState } from "./routes/state.ts";
import { makeModel } from "./lib/gguf/mod.ts";
import { resolveModel } from "./lib/models/resolve.ts";
import { oneModelToServe } from "./lib/models/model_set.ts";
import { sseBufferLimitFromEnv } from "./routes/sse.ts";
import { loadUiAssets, SERVER_PAGES, uiServerHandler } from "./routes/ui.ts";
import { videoRulesDocument } from "./lib/video/rules_document.ts";
import { type McpRegistry, startMcpRegistry } from "./lib/mcp/registry.ts";

function die(message: string, code = 2): never {
  console.error(`hearth: ${message}`);
  Deno.exit(code);
}

const log = (line: string) => console.error(`hearth: ${line}`);

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
  if (parsed.config.help) {
    console.log(helpText());
    return;
  }
  const unsupported = unsupportedFlag(parsed.config);
  if (unsupported) die(unsupported);
  // The set of models (`--model`s, `--models-dir`, `--models-config`), served one at a time for now.
  const one = await oneModelToServe(parsed.config);
  if (!one.ok) die(one.message);
  const config = one.config;
  let sseBufferLimit: number | undefined;
  try {
    sseBufferLimit = sseBufferLimitFromEnv(Deno.env.toObject());
  } catch (e) {
    die((e as Error).message);
  }
  const read = await readServeInputs(config, Deno.env.toObject());
  if (!read.ok) die(read.message);
  const inputs = read.inputs;

  // A GPU build that passes the facts and the smoke decode, else the CPU build; the log says why.
  const library = await chooseLlamaLibrary({
    cacheRoot: config.dataDir,
    log,
    build: (arch) => buildOnStart(arch, config, log),
  });
  const graph = graphBatchFor(config, library.devices.length > 0);
  if (graph.note) log(graph.note);
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
    resolved = { ...await resolveModel(config), ...(one.id ? { id: one.id } : {}) };
  } catch (e) {
    die((e as Error).message);
  }
  if (resolved.source === "demo") {
    log("no --model given: serving the built-in demo model (random weights: its output is noise)");
  }

  for (const note of startupNotes(config, Deno.env.toObject())) log(`warning: ${note}`);
  const state = newServerState(resolved.id, config.apiKey);
  state.library = library;
  log(libraryLogLine(library));
  state.template = inputs.template;
  state.sseBufferLimit = sseBufferLimit;
  state.threads = config.threads;
  state.dataDir = config.dataDir;
  if (Deno.env.get("HEARTH_CHAT_LOGGER") === "1") {
    state.chatLog = createChatLogger(`${config.dataDir}/logs`);
  }
  const mounted = await mountSurfaces(config, inputs, state, resolved, sseBufferLimit);
  const { surfaces } = mounted;
  const app = createApp(state, surfaces);
  const server = Deno.serve({
    hostname: config.host,
    port: config.port,
    onListen: ({ hostname, port }) =>
      log(`listening on http://${hostname}:${port} (model ${resolved.id})`),
  }, app.fetch);
  const uiServer = config.uiServer
    ? Deno.serve({
      hostname: config.host,
      port: config.uiPort,
      onListen: ({ hostname, port }) =>
        log(`web UI on http://${hostname}:${port}/ (also under /ui/ on the API port)`),
    }, uiServerHandler(surfaces.ui!.assets, app, surfaces.ui!.options))
    : undefined;

  const stop = async () => {
    // Open event streams would hold shutdown() forever; end them first.
    surfaces.fanout.closeAll();
    await Promise.all([mounted.agents?.close(), mounted.video?.close(), mounted.mcp?.close()]);
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
    const started = await startServeEngine({
      config,
      libDir: library.dir,
      path: resolved.path,
      graphBatch: graph.sizes,
      ranks,
      pd: inputs.pd,
      log,
    });
    if (!state.template && started.model.info.chatTemplate) {
      try {
        state.template = compileTemplate(started.model.info.chatTemplate);
      } catch (e) {
        log(`the model's chat template does not parse: ${(e as Error).message}`);
      }
    }
    state.backendSampling = started.backendSampling;
    state.threadStacks = started.threadStacks;
    if (started.pdStats) state.pd = started.pdStats;
    state.engine = started.engine;
  } catch (e) {
    state.loadError = (e as Error).message;
    await Promise.all([server.shutdown(), uiServer?.shutdown()]);
    // A rank layout this host cannot give, or a context that cannot fit, is a usage error.
    if (/^--(num-ranks|local-num-ranks|max-seq-len|max-batch)/.test(state.loadError)) {
      die(state.loadError);
    }
    log(`could not load the model: ${state.loadError}`);
    Deno.exit(1);
  }
}

/** The surfaces beside inference: UI assets, prefill peer, MCP, agents and video; each by its flag. */
async function mountSurfaces(
  config: ServeConfig,
  inputs: ServeInputs,
  state: ServerState,
  resolved: { id: string; path: string },
  sseBufferLimit: number | undefined,
): Promise<
  { surfaces: Surfaces; mcp?: McpRegistry; agents?: AgentFeatures; video?: VideoService }
> {
  const { pd, videoKeys: keys } = inputs;
  // MCP servers connect in the background: a slow or broken one never delays or stops start-up.
  const mcp: McpRegistry | undefined = inputs.mcpConfig
    ? startMcpRegistry(inputs.mcpConfig, { log })
    : undefined;
  state.mcp = mcp;
  const surfaces = newSurfaces({ pingMs: inputs.pingMs, bufferLimit: sseBufferLimit });
  surfaces.ui = {
    assets: await loadUiAssets(),
    options: {
      pages: SERVER_PAGES,
      json: {
        "video-rules.json": () =>
          videoRulesDocument(config.videoRegion, { keyRequired: keys.length > 0 }),
      },
    },
  };
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
  let agents: AgentFeatures | undefined;
  if (inputs.agentsFile) {
    agents = await openAgents({
      bus: surfaces.bus,
      dataDir: config.dataDir,
      config: inputs.agentsFile,
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
    log(surfaces.videoDisabled);
  } else {
    video = await createVideoService({
      dataDir: config.dataDir,
      region: config.videoRegion,
      blocklist: inputs.blocklist,
      backend: config.videoBackend,
      upstreamUrl: config.videoUpstream,
      workers: config.videoWorkers,
      keys,
      countTokens: promptTokenCounter(state),
    });
    surfaces.video = videoRoutes(video);
  }
  return { surfaces, mcp, agents, video };
}

async function makeModelCommand(argv: string[]): Promise<void> {
  const parsed = parseMakeModelArgs(argv);
  if (!parsed.ok) die(parsed.message);
  const t0 = performance.now();
  await makeModel(parsed.options);
  const size = (await Deno.stat(parsed.options.out)).size;
  log(
    `wrote ${parsed.options.out} (${parsed.options.preset}, ${(size / 1e6).toFixed(1)} MB) in ${
      ((performance.now() - t0) / 1000).toFixed(1)
    } s`,
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

/** One runner per command of `COMMANDS`; a number is the exit status. */
const RUN: Record<CommandName, (rest: string[]) => Promise<number | void>> = {
  "serve": serve,
  "launch": runLaunch,
  "manager": (rest) => runManager(rest, managerRoutes),
  "rpc-server": async (rest) => {
    const r = await runRpcServer(rest);
    if (r.message) log(r.message);
    return r.code;
  },
  "make-model": makeModelCommand,
  "gpu-check": (rest) => runGpuCheck(rest, { defaultDataDir: defaultDataDir() }),
  "build-cuda": (rest) => runBuildCuda(rest, { defaultDataDir: defaultDataDir(), nativeArch }),
  "gpu-probe": () => {
    try {
      console.log(JSON.stringify(readCudaDriver()));
    } catch (e) {
      console.log(JSON.stringify({ error: (e as Error).message }));
    }
    return Promise.resolve();
  },
  "smoke-decode": async (rest) => {
    const model = rest[rest.indexOf("--model") + 1];
    if (!rest.includes("--model") || !model) die("smoke-decode needs --model PATH");
    const lib = Deno.env.get("HEARTH_LLAMA_LIB_DIR") || undefined;
    console.log(JSON.stringify(await runSmokeDecode(lib, model)));
  },
};

if (import.meta.main) {
  const [command, ...rest] = Deno.args;
  if (command === undefined || ["-h", "--help", "help"].includes(command)) {
    console.log(helpText());
  } else {
    const name = findCommand(command);
    if (!name) die(unknownCommand(command));
    const code = await RUN[name](rest);
    if (typeof code === "number") Deno.exit(code);
  }
}
