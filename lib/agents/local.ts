/**
 * Local agents (docs/ARCHITECTURE.md, "Local agents"): an agent configured with `"model": "local"` runs its CLI against
 * this server's own inference endpoint, so a coding agent works on Hearth's model. Any other
 * `model` string is handed to the CLI as its model flag as-is.
 *
 * {@link agentLaunch} is the one place that turns an agent's config, its adapter's protocol
 * arguments and (for a local agent) the server's {@link LocalEndpoint} into what is spawned:
 * - Claude Code: `--model <served id>`; env `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY` (the server's
 *   `--api-key`, or a placeholder when it has none), the default model aliases (opus, sonnet,
 *   haiku, subagents) pointed at the served id, and the CLI's non-essential traffic (telemetry,
 *   error reports, auto-update) off; `ANTHROPIC_AUTH_TOKEN` is removed, so a login token in the
 *   server's environment cannot win over the key.
 * - Codex: `-c` overrides only (nothing is written into the user's `~/.codex`):
 *   `model_provider="hearth"`, a `model_providers.hearth` entry (`base_url = <url>/v1`,
 *   `wire_api = "responses"`, `env_key` naming the env var that carries the key), `model`, and
 *   update checks, analytics, feedback and web search off.
 *
 * The key travels in the environment only: never in argv (visible in `ps`), events or logs.
 * The agent's own `env` may tune anything else (e.g. `CLAUDE_CODE_MAX_OUTPUT_TOKENS`), but the
 * endpoint and key of a local agent are always the server's.
 *
 * @example
 * ```ts
 * import { agentLaunch, localBaseUrl } from "./local.ts";
 * const local = { baseUrl: localBaseUrl("0.0.0.0", 8000), apiKey: "k", modelId: "hearth-tiny" };
 * const agent = { provider: "claude" as const, command: "claude", model: "local" };
 * const l = agentLaunch({ ...agent, args: [], env: {}, maxRetries: 2 }, { args: ["-p"] }, local);
 * l.args; // ["--model", "hearth-tiny", "-p"]
 * l.env.ANTHROPIC_BASE_URL; // "http://127.0.0.1:8000"
 * l.unsetEnv; // ["ANTHROPIC_AUTH_TOKEN"]
 * ```
 * @module
 */
import type { AgentConfig, LaunchSpec, Provider } from "./types.ts";

/** The `model` value that means "this server". */
export const LOCAL_MODEL = "local";
/** Providers that can run on this server's model. */
export const LOCAL_PROVIDERS: readonly Provider[] = ["claude", "codex"];
/** Providers whose CLI takes a model flag (`model` other than `local`). */
export const MODEL_PROVIDERS: readonly Provider[] = ["claude", "codex", "gemini"];
/** The command a local agent runs when its config names none (looked up on `PATH`). */
export const DEFAULT_LOCAL_COMMANDS: Readonly<Partial<Record<Provider, string>>> = {
  claude: "claude",
  codex: "codex",
};
/** `ANTHROPIC_API_KEY` / the Codex key when the server has no `--api-key` (it checks none). */
export const PLACEHOLDER_API_KEY = "hearth-local";
/** The env var that carries the key to Codex (`model_providers.hearth.env_key`). */
export const CODEX_KEY_ENV = "HEARTH_API_KEY";

/** How a local agent reaches this server. */
export type LocalEndpoint = {
  /** Base URL without `/v1`, reachable from this host (loopback), e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** The server's `--api-key`, if any. */
  apiKey?: string;
  /** The served model id (`GET /v1/models`). */
  modelId: string;
  /** The context length per sequence, when known: Codex is told it (`model_context_window`). */
  contextWindow?: number;
};

/** What to spawn for one attempt. */
export type AgentLaunch = {
  command: string;
  args: string[];
  /** Added to (and overriding) the server's environment. */
  env: Record<string, string>;
  /** Removed from the server's environment before `env` is applied. */
  unsetEnv: string[];
};

/**
 * The base URL through which this host reaches a server listening on `host`:`port`. A wildcard
 * address (`0.0.0.0`, `::`) or `localhost` is reached on loopback; a specific address as itself.
 */
export function localBaseUrl(host: string, port: number): string {
  const h = host.trim().replace(/^\[(.*)\]$/, "$1");
  let reach: string;
  if (h === "" || h === "0.0.0.0" || h === "localhost" || h === "::" || h === "::0") {
    reach = "127.0.0.1";
  } else reach = h.includes(":") ? `[${h}]` : h;
  return `http://${reach}:${port}`;
}

/** Fails on a local agent when the server gave no endpoint; see {@link agentLaunch}. */
export class LocalEndpointMissing extends Error {
  constructor(agents: string | string[]) {
    const names = typeof agents === "string" ? [agents] : agents;
    const one = names.length === 1;
    super(
      `agent${one ? "" : "s"} ${names.join(", ")} ${one ? "has" : "have"} "model": "local", ` +
        `but the agent service was started without this server's local endpoint ` +
        `(createAgentService({ local }))`,
    );
    this.name = "LocalEndpointMissing";
  }
}

/** A TOML basic string (JSON's escapes are a subset of TOML's). */
const toml = (s: string) => JSON.stringify(s);

/**
 * The `-c key=value` overrides that point Codex at this server. `envKey: false` leaves out
 * `env_key` (a server without `--api-key` needs none, and Codex refuses to start when the
 * variable `env_key` names is unset).
 */
export function codexLocalOverrides(
  local: LocalEndpoint,
  o: { envKey?: boolean } = {},
): string[] {
  const base = local.baseUrl.replace(/\/+$/, "");
  const pairs: [string, string][] = [
    ["model_provider", toml("hearth")],
    ["model_providers.hearth.name", toml("Hearth")],
    ["model_providers.hearth.base_url", toml(`${base}/v1`)],
    ["model_providers.hearth.wire_api", toml("responses")],
    ...(o.envKey === false
      ? []
      : [["model_providers.hearth.env_key", toml(CODEX_KEY_ENV)] as [string, string]]),
    ["model", toml(local.modelId)],
    ["check_for_update_on_startup", "false"],
    ["analytics.enabled", "false"],
    ["feedback.enabled", "false"],
    ["web_search", toml("disabled")],
  ];
  if (local.contextWindow !== undefined) {
    const window = Math.floor(local.contextWindow);
    pairs.push(["model_context_window", String(window)]);
    // Codex compacts only ahead of the window, from the usage it is told (an overflow inside a
    // turn ends the turn: tests/compaction.test.ts); 80% leaves its reply and the next tool
    // results room, where its default 90% overflows small local contexts.
    pairs.push(["model_auto_compact_token_limit", String(Math.floor(window * 0.8))]);
  }
  return pairs.flatMap(([k, v]) => ["-c", `${k}=${v}`]);
}

/** The environment that points Claude Code at this server (the key included). */
export function claudeLocalEnv(local: LocalEndpoint): Record<string, string> {
  const id = local.modelId;
  return {
    ANTHROPIC_BASE_URL: local.baseUrl.replace(/\/+$/, ""),
    ANTHROPIC_API_KEY: local.apiKey || PLACEHOLDER_API_KEY,
    ANTHROPIC_DEFAULT_OPUS_MODEL: id,
    ANTHROPIC_DEFAULT_SONNET_MODEL: id,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: id,
    ANTHROPIC_SMALL_FAST_MODEL: id,
    CLAUDE_CODE_SUBAGENT_MODEL: id,
  };
}

/** Claude Code settings that keep a local agent from calling anywhere but this server. */
export const CLAUDE_QUIET_ENV: Readonly<Record<string, string>> = {
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  DISABLE_AUTOUPDATER: "1",
  DISABLE_TELEMETRY: "1",
  DISABLE_ERROR_REPORTING: "1",
};

/** The CLI flags that select `model` (not `local`) for `provider`. */
export function modelArgs(provider: Provider, model: string): string[] {
  switch (provider) {
    case "claude":
    case "gemini":
      return ["--model", model];
    case "codex":
      // A root-level override reaches `exec` (and `exec resume`) wherever it stands.
      return ["-c", `model=${toml(model)}`];
    default:
      throw new Error(`provider ${provider} takes no model flag; put it in the agent's args`);
  }
}

/**
 * What to spawn for one attempt of `agent` (its config, the adapter's protocol arguments, and the
 * server's endpoint for a local agent). Arguments are the configured `args`, then the model
 * flags, then the adapter's. Throws {@link LocalEndpointMissing} for a local agent without
 * `local`.
 */
export function agentLaunch(
  agent: AgentConfig & { name?: string },
  launch: LaunchSpec,
  local?: LocalEndpoint,
): AgentLaunch {
  const base = { command: agent.command, unsetEnv: [] as string[] };
  if (agent.model === undefined) {
    return { ...base, args: [...agent.args, ...launch.args], env: { ...agent.env } };
  }
  if (agent.model !== LOCAL_MODEL) {
    return {
      ...base,
      args: [...agent.args, ...modelArgs(agent.provider, agent.model), ...launch.args],
      env: { ...agent.env },
    };
  }
  if (!local) throw new LocalEndpointMissing(agent.name ?? agent.provider);
  switch (agent.provider) {
    case "claude":
      return {
        command: agent.command,
        args: [...agent.args, "--model", local.modelId, ...launch.args],
        env: { ...CLAUDE_QUIET_ENV, ...agent.env, ...claudeLocalEnv(local) },
        unsetEnv: ["ANTHROPIC_AUTH_TOKEN"],
      };
    case "codex":
      return {
        command: agent.command,
        args: [...agent.args, ...codexLocalOverrides(local), ...launch.args],
        env: { ...agent.env, [CODEX_KEY_ENV]: local.apiKey || PLACEHOLDER_API_KEY },
        unsetEnv: [],
      };
    default:
      throw new Error(
        `agent ${agent.name ?? agent.provider}: "model": "local" is supported for providers ` +
          `${LOCAL_PROVIDERS.join(" and ")} only, not ${agent.provider}`,
      );
  }
}

/** The names of the configured agents that run on this server's model. */
export function localAgents(agents: Record<string, AgentConfig>): string[] {
  return Object.entries(agents).filter(([, a]) => a.model === LOCAL_MODEL).map(([n]) => n);
}
