/**
 * What `serve` reads before anything starts: the files its flags name (chat template, MCP, agents and
 * prefill/decode configs, video keys and blocklist) and the environment knobs. Each failure is one
 * line naming the flag, which `main.ts` prints before exiting with status 2, so a typo never
 * leaves a half-started server.
 *
 * @example
 * ```ts ignore
 * const inputs = await readServeInputs(config, Deno.env.toObject());
 * if (!inputs.ok) die(inputs.message);
 * ```
 * @module
 */
import type { ServeConfig } from "./flags.ts";
import { isLoopback } from "./flags.ts";
import { type AgentsFile, loadAgentsConfig } from "../agents/config.ts";
import { compileTemplate } from "../chat/template.ts";
import { loadPdConfig, type PdConfig } from "../engine/prefill_decode.ts";
import { loadMcpConfig, type McpConfig } from "../mcp/config.ts";
import { readBlocklist } from "../video/blocklist.ts";

/** Everything `serve` loaded from its flags' files and its environment. */
export interface ServeInputs {
  template?: ReturnType<typeof compileTemplate>;
  mcpConfig?: McpConfig;
  pd?: PdConfig;
  agentsFile?: AgentsFile;
  videoKeys: string[];
  blocklist?: string[];
  /** `HEARTH_EVENTS_PING_MS`: the heartbeat interval of /api/events (tests shorten it). */
  pingMs?: number;
}

/** The inputs, or the one-line reason the first of them could not be read. */
export type ServeInputsResult = { ok: true; inputs: ServeInputs } | { ok: false; message: string };

/** Reads every file a flag names and checks the environment knobs `serve` honours. */
export async function readServeInputs(
  config: ServeConfig,
  env: Record<string, string>,
): Promise<ServeInputsResult> {
  try {
    const pd = config.pdConfig ? await loadPdConfig(config.pdConfig) : undefined;
    if (pd?.role === "prefill" && !pd.token && !isLoopback(config.host)) {
      throw new Error(
        `--pd-config ${config.pdConfig}: a prefill server on a non-loopback --host ` +
          `(${config.host}) needs a token: anyone reaching it could use its compute`,
      );
    }
    return {
      ok: true,
      inputs: {
        template: config.chatTemplate ? await readTemplate(config.chatTemplate) : undefined,
        mcpConfig: config.mcpConfig ? await loadMcpConfig(config.mcpConfig) : undefined,
        pd,
        agentsFile: config.agentsConfig ? await loadAgentsConfig(config.agentsConfig) : undefined,
        videoKeys: await videoKeys(config, env),
        blocklist: config.videoBlocklist
          ? await readBlocklist(config.videoBlocklist).catch((e) => {
            throw new Error(`--video-blocklist ${config.videoBlocklist}: ${(e as Error).message}`);
          })
          : undefined,
        pingMs: pingMs(env),
      },
    };
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
}

async function readTemplate(path: string): Promise<ReturnType<typeof compileTemplate>> {
  let source: string;
  try {
    source = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`--chat-template ${path}: ${(e as Error).message}`);
  }
  try {
    return compileTemplate(source);
  } catch (e) {
    throw new Error(`--chat-template ${path}: not a valid Jinja template: ${(e as Error).message}`);
  }
}

/** Video API keys: `HEARTH_VIDEO_API_KEYS` (comma-separated) plus `--video-keys-file` lines. */
async function videoKeys(config: ServeConfig, env: Record<string, string>): Promise<string[]> {
  const keys = (env.HEARTH_VIDEO_API_KEYS ?? "").split(",");
  if (config.videoKeysFile) {
    try {
      keys.push(...(await Deno.readTextFile(config.videoKeysFile)).split("\n"));
    } catch (e) {
      throw new Error(`--video-keys-file ${config.videoKeysFile}: ${(e as Error).message}`);
    }
  }
  return [...new Set(keys.map((k) => k.trim()).filter((k) => k && !k.startsWith("#")))];
}

function pingMs(env: Record<string, string>): number | undefined {
  const raw = env.HEARTH_EVENTS_PING_MS;
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) < 10) {
    throw new Error(
      `HEARTH_EVENTS_PING_MS=${raw}: must be a whole number of milliseconds, at least 10`,
    );
  }
  return Number(raw);
}
