/**
 * `hearth launch claude|codex|opencode [--host H] [--port P] [--api-key K] [--print] [-- ARGS]`:
 * runs the user's own coding-agent CLI (from `PATH`) interactively against a running Hearth server
 * (`127.0.0.1:8000` unless told). It asks the server for its model (`GET /v1/models`: the served
 * id and `max_model_len`), builds what that CLI needs to work on it ({@link launchPlan}, pure) and
 * runs it with inherited stdio, passing `-- ARGS` through and its exit status back. `--print`
 * shows the environment (the key masked) and the command instead.
 *
 * Per CLI (the variable names are the ones the pinned versions read: Claude Code 2.1.330, Codex
 * 0.169.0, opencode's documented config):
 * - Claude Code: the local agents' environment (`lib/agents/local.ts`: base URL, every model
 *   alias on the served id, non-essential traffic off), the key as `ANTHROPIC_AUTH_TOKEN`,
 *   `ANTHROPIC_MODEL`, the real context window (`CLAUDE_CODE_MAX_CONTEXT_TOKENS`), an output
 *   budget that fits it, and request and stream timeouts long enough for a CPU prefill; other
 *   keys, login tokens and cloud-provider switches of the user's environment are removed so they
 *   cannot win.
 * - Codex: the local agents' `-c` overrides (a `hearth` provider on the Responses API, the model,
 *   `model_context_window`, updates and analytics off), `env_key` only when the server has a key,
 *   and a long `stream_idle_timeout_ms`.
 * - opencode: an inline config (`OPENCODE_CONFIG_CONTENT`): a `hearth` provider on
 *   `@ai-sdk/openai-compatible` with the model's context and output limits and long timeouts.
 *
 * Nothing reaches a shell: the CLI is spawned from an argv array. The key travels in the
 * environment only, never in argv.
 *
 * @example
 * ```ts
 * import { launchPlan, printPlan } from "./launch.ts";
 * const plan = launchPlan("codex", {
 *   baseUrl: "http://127.0.0.1:8000",
 *   modelId: "hearth-tiny",
 *   contextWindow: 32768,
 * }, ["exec", "hi"]);
 * console.log(printPlan(plan)); // export lines, then `codex -c ... exec hi`
 * ```
 * @module
 */
import { z } from "zod";
import { type FlagSpec, parseFlags } from "./argv.ts";
import {
  CLAUDE_QUIET_ENV,
  claudeLocalEnv,
  CODEX_KEY_ENV,
  codexLocalOverrides,
  localBaseUrl,
  type LocalEndpoint,
} from "../agents/local.ts";

/** The CLIs `hearth launch` knows. */
export const LAUNCH_TARGETS = ["claude", "codex", "opencode"] as const;
export type LaunchTarget = typeof LAUNCH_TARGETS[number];

const USAGE =
  "hearth launch claude|codex|opencode [--host H] [--port P] [--api-key K] [--print] [-- ARGS]";

/** Where each CLI comes from, for the error when it is not on `PATH`. */
const PACKAGES: Record<LaunchTarget, string> = {
  claude: "@anthropic-ai/claude-code",
  codex: "@openai/codex",
  opencode: "opencode-ai",
};

/**
 * How long a CLI waits for the first byte and between bytes of a streamed reply: 30 minutes, the
 * most Claude Code honours. A long prompt prefilled on a CPU sends nothing for minutes, and every
 * CLI's default (5 minutes) would abort it and retry the same prefill.
 */
export const STREAM_TIMEOUT_MS = 1_800_000;

/** The reply budget a CLI is told: a quarter of the context, at most 32,000 tokens. */
export function outputBudget(contextWindow: number): number {
  return Math.max(1, Math.min(32_000, Math.floor(contextWindow / 4)));
}

/** What to spawn, and with which environment changes. */
export type LaunchPlan = {
  target: LaunchTarget;
  command: string;
  args: string[];
  /** Added to (and overriding) the user's environment. */
  env: Record<string, string>;
  /** Removed from the user's environment before `env` is applied. */
  unsetEnv: string[];
  /** The key to mask when printing (the server's, not the placeholder). */
  secret?: string;
};

/** Variables of the user's environment that would send Claude Code elsewhere or log it in. */
const CLAUDE_UNSET = [
  "ANTHROPIC_API_KEY",
  "CLAUDE_CODE_OAUTH_TOKEN",
  "ANTHROPIC_CUSTOM_HEADERS",
  "CLAUDE_CODE_USE_BEDROCK",
  "CLAUDE_CODE_USE_VERTEX",
  "CLAUDE_CODE_USE_FOUNDRY",
];

/**
 * What runs `target` against `local` with the user's `args` last. Pure: the same input gives the
 * same plan, so `--print` shows exactly what a run would do.
 */
export function launchPlan(
  target: LaunchTarget,
  local: LocalEndpoint,
  args: string[] = [],
): LaunchPlan {
  const ctx = local.contextWindow;
  const secret = local.apiKey || undefined;
  switch (target) {
    case "claude": {
      // The key goes as ANTHROPIC_AUTH_TOKEN (a Bearer header), not ANTHROPIC_API_KEY: with the
      // latter an interactive Claude Code first checks that api.anthropic.com is reachable (and
      // stops when it is not), then asks whether to trust the key, defaulting to no.
      const { ANTHROPIC_API_KEY: key, ...endpoint } = claudeLocalEnv(local);
      const env: Record<string, string> = {
        ...CLAUDE_QUIET_ENV,
        ...endpoint,
        ANTHROPIC_AUTH_TOKEN: key,
        ANTHROPIC_MODEL: local.modelId,
        API_TIMEOUT_MS: String(STREAM_TIMEOUT_MS),
        CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS: String(STREAM_TIMEOUT_MS),
        CLAUDE_STREAM_IDLE_TIMEOUT_MS: String(STREAM_TIMEOUT_MS),
      };
      if (ctx !== undefined) {
        // A model id Claude Code does not know is assumed to have 200k tokens; this makes it
        // compact and budget for the server's real window instead. (Its other knob,
        // CLAUDE_CODE_AUTO_COMPACT_WINDOW, refuses windows under 100k.)
        env.CLAUDE_CODE_MAX_CONTEXT_TOKENS = String(ctx);
        env.CLAUDE_CODE_MAX_OUTPUT_TOKENS = String(outputBudget(ctx));
      }
      return { target, command: "claude", args, env, unsetEnv: CLAUDE_UNSET, secret };
    }
    case "codex": {
      const overrides = [
        ...codexLocalOverrides(local, { envKey: secret !== undefined }),
        "-c",
        `model_providers.hearth.stream_idle_timeout_ms=${STREAM_TIMEOUT_MS}`,
      ];
      return {
        target,
        command: "codex",
        args: [...overrides, ...args],
        env: secret ? { [CODEX_KEY_ENV]: secret } : {},
        unsetEnv: [],
        secret,
      };
    }
    case "opencode": {
      const model: Record<string, unknown> = { name: local.modelId, tool_call: true };
      if (ctx !== undefined) model.limit = { context: ctx, output: outputBudget(ctx) };
      const config = {
        $schema: "https://opencode.ai/config.json",
        provider: {
          hearth: {
            npm: "@ai-sdk/openai-compatible",
            name: "Hearth",
            options: {
              baseURL: `${local.baseUrl.replace(/\/+$/, "")}/v1`,
              ...(secret ? { apiKey: secret } : {}),
              // A CPU reply may outlast any fixed total; the waits for headers and between
              // chunks are long enough for a prefill.
              timeout: false,
              headerTimeout: STREAM_TIMEOUT_MS,
              chunkTimeout: STREAM_TIMEOUT_MS,
            },
            models: { [local.modelId]: model },
          },
        },
        model: `hearth/${local.modelId}`,
        small_model: `hearth/${local.modelId}`,
        autoupdate: false,
        share: "disabled",
      };
      return {
        target,
        command: "opencode",
        args,
        env: {
          OPENCODE_CONFIG_CONTENT: JSON.stringify(config),
          OPENCODE_DISABLE_AUTOUPDATE: "true",
          OPENCODE_DISABLE_MODELS_FETCH: "true",
        },
        unsetEnv: [],
        secret,
      };
    }
  }
}

/** Quotes for a POSIX shell where needed, so printed commands can be pasted. */
function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The key, masked: its first 3 characters and a run of stars. */
function mask(text: string, secret: string | undefined): string {
  return secret ? text.replaceAll(secret, `${secret.slice(0, 3)}***`) : text;
}

/**
 * `plan` as shell lines: `unset`, `export` per variable (the key masked), then the command with
 * each `-c` override on its own continued line.
 */
export function printPlan(plan: LaunchPlan): string {
  const lines: string[] = [];
  if (plan.unsetEnv.length) lines.push(`unset ${plan.unsetEnv.join(" ")}`);
  for (const [k, v] of Object.entries(plan.env)) {
    lines.push(`export ${k}=${shellQuote(mask(v, plan.secret))}`);
  }
  const parts: string[] = [plan.command];
  let rest = 0;
  while (plan.args[rest] === "-c" && rest + 1 < plan.args.length) {
    parts.push(`\\\n  -c ${shellQuote(mask(plan.args[rest + 1], plan.secret))}`);
    rest += 2;
  }
  const tail = plan.args.slice(rest).map((a) => shellQuote(mask(a, plan.secret)));
  if (tail.length) parts.push(rest > 0 ? `\\\n  ${tail.join(" ")}` : tail.join(" "));
  lines.push(parts.join(" "));
  return lines.join("\n");
}

/** The deepest reason of a failed fetch ("Connection refused (os error 111)", not "fetch failed"). */
function connectError(e: Error): string {
  let why = e.message;
  for (let c = e.cause; c instanceof Error; c = c.cause) why = c.message;
  return why.match(/: ([^:]+)$/)?.[1]?.trim() ?? why.split("\n")[0];
}

/** The served model as `GET /v1/models` tells it. */
export type ServedModel = { id: string; contextWindow: number };

/**
 * Asks the server at `baseUrl` for its model and checks that `apiKey` is accepted (`/v1/models`
 * is open even with `--api-key`, so a guarded route, `/metrics`, tells). Throws a one-line
 * message.
 */
export async function queryServer(
  baseUrl: string,
  apiKey: string | undefined,
  timeoutMs = 10_000,
): Promise<ServedModel> {
  const headers: Record<string, string> = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  const get = async (path: string) => {
    try {
      return await fetch(`${baseUrl}${path}`, {
        headers,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (e) {
      const why = e instanceof DOMException && e.name === "TimeoutError"
        ? `no answer in ${timeoutMs / 1000} s`
        : connectError(e as Error);
      throw new Error(
        `no Hearth server answers at ${baseUrl} (${why}): start one with \`hearth serve\`, ` +
          `or point at it with --host and --port`,
      );
    }
  };
  const r = await get("/v1/models");
  const text = await r.text();
  if (r.status !== 200) {
    throw new Error(`GET ${baseUrl}/v1/models answered ${r.status}: ${text.slice(0, 200)}`);
  }
  let first: { id?: unknown; max_model_len?: unknown } | undefined;
  try {
    first = JSON.parse(text)?.data?.[0];
  } catch {
    // handled below
  }
  if (typeof first?.id !== "string") {
    throw new Error(`GET ${baseUrl}/v1/models: no model in the answer: ${text.slice(0, 200)}`);
  }
  const ctx = first.max_model_len;
  if (typeof ctx !== "number" || !(ctx > 0)) {
    throw new Error(
      `the server at ${baseUrl} has not loaded its model yet (no max_model_len); run again ` +
        `when its log says "model ready"`,
    );
  }
  const guarded = await get("/metrics");
  await guarded.body?.cancel();
  if (guarded.status === 401) {
    throw new Error(
      apiKey
        ? `the server at ${baseUrl} refuses the key given with --api-key`
        : `the server at ${baseUrl} requires an API key: pass --api-key K (or set HEARTH_API_KEY)`,
    );
  }
  return { id: first.id, contextWindow: ctx };
}

type LaunchOptions = {
  target: LaunchTarget;
  host: string;
  port: number;
  apiKey?: string;
  print: boolean;
  help: boolean;
  args: string[];
};

const FLAGS: FlagSpec[] = [
  { key: "host", names: ["--host"], meta: "H", schema: z.string().min(1) },
  {
    key: "port",
    names: ["--port"],
    meta: "P",
    schema: z.coerce.number().int().min(1).max(65535),
  },
  { key: "apiKey", names: ["--api-key"], meta: "K", schema: z.string().min(1) },
  { key: "print", names: ["--print"] },
  { key: "help", names: ["--help", "-h"] },
];

/**
 * Parses `launch`'s argv: the CLI first, then flags, then `--` and the CLI's own arguments.
 * `HEARTH_API_KEY` from `env` is the default key. Throws a one-line message.
 */
export function parseLaunchArgs(argv: string[], env: Record<string, string> = {}): LaunchOptions {
  const dash = argv.indexOf("--");
  const own = dash < 0 ? argv : argv.slice(0, dash);
  const args = dash < 0 ? [] : argv.slice(dash + 1);
  if (own.includes("--help") || own.includes("-h")) {
    return { target: "claude", host: "", port: 0, print: false, help: true, args };
  }
  const target = own[0];
  if (!(LAUNCH_TARGETS as readonly string[]).includes(target)) {
    throw new Error(
      target === undefined || target.startsWith("-")
        ? `launch needs the CLI to run: claude, codex or opencode (usage: ${USAGE})`
        : `launch ${JSON.stringify(target)}: the CLI must be claude, codex or opencode`,
    );
  }
  const defaults = { host: "127.0.0.1", port: 8000, print: false, help: false };
  const r = parseFlags(own.slice(1), FLAGS, defaults, "hearth launch --help");
  if (!r.ok) throw new Error(r.message);
  const apiKey = (r.values.apiKey as string | undefined) ?? (env.HEARTH_API_KEY || undefined);
  return { ...r.values, apiKey, target, args } as LaunchOptions;
}

function helpText(): string {
  return [
    `Usage: ${USAGE}`,
    "",
    "Runs your installed Claude Code (claude), Codex (codex) or opencode (opencode) on the model",
    "of a running Hearth server: base URL, API key, the served model id, its real context window,",
    "no non-essential traffic, and stream timeouts long enough for a CPU prefill.",
    "",
    "  --host H       the server's address (default 127.0.0.1)",
    "  --port P       the server's port (default 8000)",
    "  --api-key K    the server's --api-key (default $HEARTH_API_KEY)",
    "  --print        print the environment and the command instead of running it",
    "  -- ARGS        passed to the CLI, e.g. `hearth launch claude -- -p 'fix the tests'`",
  ].join("\n");
}

/** `hearth launch`: returns the exit status (the CLI's own, or 2 for a usage or server error). */
export async function runLaunch(
  argv: string[],
  env: Record<string, string> = Deno.env.toObject(),
): Promise<number> {
  let o: LaunchOptions;
  try {
    o = parseLaunchArgs(argv, env);
  } catch (e) {
    console.error(`hearth: ${(e as Error).message}`);
    return 2;
  }
  if (o.help) {
    console.log(helpText());
    return 0;
  }
  const baseUrl = localBaseUrl(o.host, o.port);
  let served: ServedModel;
  try {
    served = await queryServer(baseUrl, o.apiKey);
  } catch (e) {
    console.error(`hearth: ${(e as Error).message}`);
    return 2;
  }
  const plan = launchPlan(o.target, {
    baseUrl,
    apiKey: o.apiKey,
    modelId: served.id,
    contextWindow: served.contextWindow,
  }, o.args);
  if (o.print) {
    console.log(
      `# ${o.target} on ${served.id} at ${baseUrl} (context ${served.contextWindow} tokens)`,
    );
    console.log(printPlan(plan));
    return 0;
  }
  return await spawnPlan(plan, env);
}

/** Runs the plan's CLI in the foreground; its exit status. */
async function spawnPlan(plan: LaunchPlan, env: Record<string, string>): Promise<number> {
  const childEnv = { ...env };
  for (const k of plan.unsetEnv) delete childEnv[k];
  Object.assign(childEnv, plan.env);
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(plan.command, {
      args: plan.args,
      env: childEnv,
      clearEnv: true,
      stdin: "inherit",
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      console.error(
        `hearth: \`${plan.command}\` is not on PATH: install it with ` +
          `\`npm install -g ${PACKAGES[plan.target]}\``,
      );
      return 127;
    }
    throw e;
  }
  // Ctrl-C reaches the CLI too (same process group) and is the CLI's to handle; a TERM sent to
  // hearth is passed on, so the CLI never outlives it.
  const ignore = () => {};
  const forward = () => {
    try {
      child.kill("SIGTERM");
    } catch {
      // already gone
    }
  };
  Deno.addSignalListener("SIGINT", ignore);
  Deno.addSignalListener("SIGTERM", forward);
  try {
    // Deno reports a CLI killed by a signal as 128 + its number, as a shell does.
    return (await child.status).code;
  } finally {
    Deno.removeSignalListener("SIGINT", ignore);
    Deno.removeSignalListener("SIGTERM", forward);
  }
}
