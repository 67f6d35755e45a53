/**
 * `--agents-config FILE`: the only place agents (and so commands) come from — HTTP names an agent,
 * never a command. The file is JSON, validated with Zod into an {@link AgentsFile}: roots resolved
 * (relative to the file's directory, through symlinks) and every agent's defaults filled in. Any
 * problem throws an Error whose message is one line naming the file and the field.
 *
 * ```json
 * {
 *   "roots": ["../projects"],
 *   "stallSeconds": 120, "timeoutSeconds": 3600, "retryBaseMs": 2000, "killGraceSeconds": 5,
 *   "goalDelaySeconds": 2, "maxParallelWorkers": 3,
 *   "agents": {
 *     "claude": { "provider": "claude", "command": "claude", "fallback": "codex", "maxRetries": 2 },
 *     "codex": { "provider": "codex", "command": "codex", "env": { "CODEX_HOME": "/srv/codex" } }
 *   }
 * }
 * ```
 *
 * A `command` containing a `/` is resolved against the config file's directory; a bare name is
 * looked up on `PATH` when the agent starts.
 *
 * `"model": "local"` (providers `claude` and `codex`) runs the agent on this server's own model
 * (see local.ts); its `command` may then be left out (`claude` / `codex` on `PATH`). Any other
 * `model` string is passed to the CLI as its model flag (providers `claude`, `codex`, `gemini`).
 *
 * ```json
 * { "agents": { "local-claude": { "provider": "claude", "model": "local" } } }
 * ```
 *
 * @example
 * ```ts
 * import { loadAgentsConfig } from "./config.ts";
 * const config = await loadAgentsConfig("agents.json");
 * console.log(Object.keys(config.agents), config.roots);
 * ```
 * @module
 */
import { dirname, isAbsolute, resolve } from "node:path";
import { z } from "zod";
import { DEFAULT_LOCAL_COMMANDS, LOCAL_MODEL, LOCAL_PROVIDERS, MODEL_PROVIDERS } from "./local.ts";
import { type AgentConfig, PROVIDERS } from "./types.ts";

/** One configured agent with its supervision settings resolved. */
export type AgentSpec = AgentConfig & {
  name: string;
  /** Seconds without any output before `worker_stalled` is published. */
  stallSeconds: number;
  /** Seconds one attempt may run before it is killed (`worker_timeout`). */
  timeoutSeconds: number;
};

/** A parsed `--agents-config`. */
export type AgentsFile = {
  /** Absolute path of the file it was read from. */
  path: string;
  /** Real (symlink-free) absolute directories a session's cwd must lie in; the first is the default. */
  roots: string[];
  /** Base of the exponential retry backoff: attempt n waits `retryBaseMs * 2^(n-1)`. */
  retryBaseMs: number;
  /** Seconds between SIGTERM and SIGKILL when a run's process group is stopped. */
  killGraceSeconds: number;
  /** Seconds between a goal's finished turn and its continuation prompt. */
  goalDelaySeconds: number;
  /** How many worker runs of one orchestration go at once. */
  maxParallelWorkers: number;
  agents: Record<string, AgentSpec>;
};

export const DEFAULT_STALL_SECONDS = 120;
export const DEFAULT_TIMEOUT_SECONDS = 3600;
export const DEFAULT_RETRY_BASE_MS = 2000;
export const DEFAULT_KILL_GRACE_SECONDS = 5;
export const DEFAULT_MAX_RETRIES = 2;
export const DEFAULT_GOAL_DELAY_SECONDS = 2;
export const DEFAULT_MAX_PARALLEL_WORKERS = 3;

const seconds = z.number().positive().finite();

const agentSchema = z.strictObject({
  provider: z.enum(PROVIDERS),
  command: z.string().min(1).optional(),
  model: z.string().min(1).optional(),
  args: z.array(z.string()).optional(),
  env: z.record(z.string(), z.string()).optional(),
  fallback: z.string().min(1).optional(),
  maxRetries: z.number().int().min(0).max(20).optional(),
  stallSeconds: seconds.optional(),
  timeoutSeconds: seconds.optional(),
});

const fileSchema = z.strictObject({
  roots: z.array(z.string().min(1)).min(1).optional(),
  stallSeconds: seconds.optional(),
  timeoutSeconds: seconds.optional(),
  retryBaseMs: z.number().min(0).finite().optional(),
  killGraceSeconds: z.number().min(0).finite().optional(),
  goalDelaySeconds: z.number().min(0).max(3600).optional(),
  maxParallelWorkers: z.number().int().min(1).max(32).optional(),
  agents: z.record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/), agentSchema).refine(
    (a) => Object.keys(a).length > 0,
    "at least one agent is required",
  ),
});

function zodLine(error: z.ZodError): string {
  const issue = error.issues[0];
  const path = issue.path.map(String).join(".");
  if (issue.code === "unrecognized_keys") {
    return `${path ? path + ": " : ""}unknown field(s) ${issue.keys.join(", ")}`;
  }
  if (issue.code === "invalid_key") return `${path}: agent names are 1-64 of A-Z a-z 0-9 . _ -`;
  return path ? `${path}: ${issue.message}` : issue.message;
}

/** Validates an already-read config; `path` names the file in messages and anchors relative paths. */
export async function parseAgentsConfig(text: string, path: string): Promise<AgentsFile> {
  const file = resolve(path);
  const fail = (why: string): never => {
    throw new Error(`agents config ${file}: ${why}`);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return fail(`not valid JSON (${(e as Error).message})`);
  }
  const r = fileSchema.safeParse(raw);
  if (!r.success) return fail(zodLine(r.error));
  const data = r.data;
  const dir = dirname(file);

  const roots: string[] = [];
  for (const root of data.roots ?? [dir]) {
    const abs = resolve(dir, root);
    let real: string;
    try {
      real = await Deno.realPath(abs);
    } catch {
      return fail(`root ${root} (${abs}) does not exist`);
    }
    if (!(await Deno.stat(real)).isDirectory) fail(`root ${root} (${real}) is not a directory`);
    if (!roots.includes(real)) roots.push(real);
  }

  const agents: Record<string, AgentSpec> = {};
  for (const [name, a] of Object.entries(data.agents)) {
    if (a.fallback !== undefined) {
      if (a.fallback === name) fail(`agents.${name}.fallback: an agent cannot fall back to itself`);
      if (!(a.fallback in data.agents)) {
        fail(
          `agents.${name}.fallback: unknown agent "${a.fallback}" (configured: ${
            Object.keys(data.agents).join(", ")
          })`,
        );
      }
    }
    if (a.model === LOCAL_MODEL && !LOCAL_PROVIDERS.includes(a.provider)) {
      fail(
        `agents.${name}.model: "local" is supported for providers ${
          LOCAL_PROVIDERS.join(" and ")
        } only, not ${a.provider}`,
      );
    }
    if (a.model !== undefined && !MODEL_PROVIDERS.includes(a.provider)) {
      fail(
        `agents.${name}.model: provider ${a.provider} takes no model field; put its model flag ` +
          `in args`,
      );
    }
    const given = a.command ??
      (a.model === LOCAL_MODEL ? DEFAULT_LOCAL_COMMANDS[a.provider] : undefined);
    if (given === undefined) {
      return fail(
        `agents.${name}.command: required (only a "model": "local" agent may leave it out)`,
      );
    }
    const command = given.includes("/") && !isAbsolute(given) ? resolve(dir, given) : given;
    agents[name] = {
      name,
      provider: a.provider,
      command,
      ...(a.model !== undefined ? { model: a.model } : {}),
      args: a.args ?? [],
      env: a.env ?? {},
      fallback: a.fallback,
      maxRetries: a.maxRetries ?? DEFAULT_MAX_RETRIES,
      stallSeconds: a.stallSeconds ?? data.stallSeconds ?? DEFAULT_STALL_SECONDS,
      timeoutSeconds: a.timeoutSeconds ?? data.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS,
    };
  }
  return {
    path: file,
    roots,
    retryBaseMs: data.retryBaseMs ?? DEFAULT_RETRY_BASE_MS,
    killGraceSeconds: data.killGraceSeconds ?? DEFAULT_KILL_GRACE_SECONDS,
    goalDelaySeconds: data.goalDelaySeconds ?? DEFAULT_GOAL_DELAY_SECONDS,
    maxParallelWorkers: data.maxParallelWorkers ?? DEFAULT_MAX_PARALLEL_WORKERS,
    agents,
  };
}

/** Reads and validates `--agents-config`; throws an Error with a one-line message on any problem. */
export async function loadAgentsConfig(path: string): Promise<AgentsFile> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`agents config ${resolve(path)}: cannot read (${(e as Error).message})`);
  }
  return await parseAgentsConfig(text, path);
}
