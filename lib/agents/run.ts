/**
 * One agent run: the configured CLI is started for a prompt, each stdout line goes through the
 * provider adapter's parser, and what it means is published on the bus (topic `agent`):
 * `agent_status`, `agent_tool`, `agent_output`, then one `agent_done`. Unparsed lines, cut lines
 * and stderr go to the internal `trace` topic.
 *
 * Supervision, per attempt: no output for `stallSeconds` -> `worker_stalled` (once per silence);
 * over `timeoutSeconds` -> `worker_timeout` and the process group is killed; an exit without a
 * final result, or with a non-zero status -> `worker_disconnected` and an error classified by the
 * adapter from the CLI's own error or its stderr tail. Transient errors (`TRANSIENT_ERRORS`) are
 * retried with exponential backoff (`agent_retry`); once `maxRetries` are spent the agent's
 * `fallback` takes over (`agent_fallback`), each agent at most once per run.
 *
 * Every agent_* and worker_* payload carries `agentId` (the session id), `sessionId` and `agent`
 * (the config name of the agent that is running).
 *
 * @example
 * ```ts
 * import { startRun } from "./run.ts";
 * import { adapterFor } from "./adapters/mod.ts";
 * const run = startRun({ bus, config, agent: "claude", prompt: "fix the tests", cwd: "/src/app",
 *   sessionId: "s1", adapterFor });
 * const result = await run.done; // { ok, text, error?, errorKind?, toolLog, ... }
 * ```
 * @module
 */
import type { EventBus } from "../events/bus.ts";
import type { AgentsFile, AgentSpec } from "./config.ts";
import { type AgentLaunch, agentLaunch, type LocalEndpoint } from "./local.ts";
import {
  type AgentProcess,
  type ExitInfo,
  MAX_LINE_BYTES,
  processStartTicks,
  spawnAgentProcess,
} from "./process.ts";
import {
  type AgentEmit,
  type ErrorKind,
  type Provider,
  type ProviderAdapter,
  type ToolLogEntry,
  TRANSIENT_ERRORS,
} from "./types.ts";

export const TOOL_LOG_MAX_ENTRIES = 160;
export const TOOL_LOG_MAX_DETAIL_CHARS = 24000;
/** Cap on `detail` in one `agent_tool` event and on a trace line. */
const EVENT_DETAIL_CHARS = 8000;
const TRACE_LINE_CHARS = 2000;
const STDERR_TAIL_CHARS = 2000;
/** Backoff never waits longer than this, whatever `retryBaseMs` and the attempt. */
const MAX_RETRY_DELAY_MS = 5 * 60_000;

export type RunOptions = {
  bus: EventBus;
  config: AgentsFile;
  /** Config name of the agent to start with. */
  agent: string;
  prompt: string;
  cwd: string;
  sessionId: string;
  adapterFor: (provider: Provider) => ProviderAdapter;
  /** This server's endpoint, for agents with `"model": "local"` (lib/agents/local.ts). */
  local?: LocalEndpoint;
  /** CLI session ids from earlier runs of this session, by agent name: the CLI resumes them. */
  resume?: Record<string, string>;
  /** The CLI announced its own session id. */
  onCliSession?: (agent: string, id: string) => void;
  /** The output streamed so far changed (the newest attempt's, or an earlier one's if it has none). */
  onOutput?: (partial: string) => void;
  /** A process was started (or ended: null), for records that outlive the server. */
  onProcess?: (proc: { pid: number; startTicks: string | null } | null) => void;
  /**
   * The `agent_status` published when the run starts: `evaluating` for a run that judges others'
   * work (an orchestration's checker), `running` otherwise.
   */
  status?: "running" | "evaluating";
};

export type RunResult = {
  ok: boolean;
  /** The agent that produced this outcome (differs from the requested one after a fallback). */
  agent: string;
  /** The final text, or the partial output of a failed run. */
  text: string;
  error?: string;
  errorKind?: ErrorKind;
  /** True when the run failed after producing some output. */
  partial: boolean;
  toolLog: ToolLogEntry[];
};

export type RunHandle = {
  /** Sends more user input to the running CLI; false when it takes none now (queue it instead). */
  steer(text: string): Promise<boolean>;
  /** Stops the run (its whole process tree); `done` then resolves with errorKind `cancelled`. */
  cancel(reason?: string): void;
  done: Promise<RunResult>;
};

type AttemptResult = {
  ok: boolean;
  text: string;
  output: string;
  error?: string;
  errorKind?: ErrorKind;
};

const cut = (s: string, n: number) => (s.length > n ? s.slice(0, n) + "…" : s);

/** The tool log as sent in `agent_done`: the newest 160 steps, 24000 detail chars over all. */
export function boundToolLog(entries: Iterable<ToolLogEntry>): ToolLogEntry[] {
  const all = [...entries];
  const kept = all.slice(Math.max(0, all.length - TOOL_LOG_MAX_ENTRIES));
  let budget = TOOL_LOG_MAX_DETAIL_CHARS;
  return kept.map((e) => {
    const out: ToolLogEntry = {
      toolType: e.toolType,
      label: e.label,
      stepRef: e.stepRef,
      status: e.status,
    };
    if (e.detail !== undefined && budget > 0) {
      out.detail = e.detail.length > budget ? e.detail.slice(0, budget) : e.detail;
      budget -= out.detail.length;
    }
    return out;
  });
}

/** Starts a run; see the module doc for the events it publishes. */
export function startRun(opts: RunOptions): RunHandle {
  const { bus, config, sessionId } = opts;
  let agentName = opts.agent;
  const base = () => ({ agentId: sessionId, sessionId, agent: agentName });
  const publish = (event: string, fields: Record<string, unknown>) =>
    bus.publish("agent", event, { ...base(), ...fields });
  const trace = (fields: Record<string, unknown>) =>
    bus.publish("trace", "agent_trace", { ...base(), ...fields });

  const toolLog = new Map<string, ToolLogEntry>();
  let cancelled: string | null = null;
  let current: { proc: AgentProcess; adapter: ProviderAdapter; finalSeen: boolean } | null = null;
  let wakeRetry: (() => void) | null = null;
  let partial = "";

  const recordTool = (e: Extract<AgentEmit, { kind: "tool" }>) => {
    const prev = toolLog.get(e.stepRef);
    const entry: ToolLogEntry = {
      toolType: e.toolType,
      label: e.label,
      stepRef: e.stepRef,
      status: e.status,
    };
    const detail = e.detail ?? prev?.detail;
    if (detail !== undefined) entry.detail = cut(detail, TOOL_LOG_MAX_DETAIL_CHARS);
    toolLog.set(e.stepRef, entry);
    // Only the newest entries are ever sent, so older ones need not be kept either.
    if (toolLog.size > TOOL_LOG_MAX_ENTRIES) toolLog.delete(toolLog.keys().next().value!);
  };

  async function attempt(spec: AgentSpec, adapter: ProviderAdapter): Promise<AttemptResult> {
    const parse = adapter.createParser();
    const launch = adapter.launch(opts.prompt, { resume: opts.resume?.[spec.name] });
    let output = "";
    let final: Extract<AgentEmit, { kind: "final" }> | undefined;
    let stderrTail = "";
    let timedOut = false;
    const graceMs = config.killGraceSeconds * 1000;

    // Stall watch: one timer, re-armed lazily from the last activity, so a busy stream does not
    // reset a timer per line.
    const stallMs = spec.stallSeconds * 1000;
    let lastActivity = performance.now();
    let stallTimer: ReturnType<typeof setTimeout> | undefined;
    let ended = false;
    const checkStall = () => {
      stallTimer = undefined;
      if (ended) return;
      const silent = performance.now() - lastActivity;
      if (silent < stallMs) {
        stallTimer = setTimeout(checkStall, stallMs - silent);
        return;
      }
      // Not re-armed: the next activity starts a new silence.
      publish("worker_stalled", { silentSeconds: Math.round(silent / 100) / 10 });
    };
    const activity = () => {
      lastActivity = performance.now();
      if (!stallTimer && !ended) stallTimer = setTimeout(checkStall, stallMs);
    };

    const handle = (e: AgentEmit) => {
      switch (e.kind) {
        case "tool":
          recordTool(e);
          publish("agent_tool", {
            toolType: e.toolType,
            label: e.label,
            ...(e.detail !== undefined ? { detail: cut(e.detail, EVENT_DETAIL_CHARS) } : {}),
            stepRef: e.stepRef,
            status: e.status,
          });
          break;
        case "output":
          if (!e.text) break;
          output += e.text;
          partial = output;
          publish("agent_output", { text: e.text });
          opts.onOutput?.(partial);
          break;
        case "final":
          final ??= e;
          // The CLI is done; with streamed input it waits for EOF before it exits.
          if (current) {
            current.finalSeen = true;
            void current.proc.closeStdin();
          }
          break;
        case "status":
          publish("agent_status", { status: e.status });
          break;
        case "session":
          opts.onCliSession?.(spec.name, e.id);
          break;
        case "trace":
          trace({ stream: "stdout", reason: e.reason, line: cut(e.line, TRACE_LINE_CHARS) });
          break;
      }
    };

    let proc: AgentProcess;
    let cli: AgentLaunch;
    try {
      cli = agentLaunch(spec, launch, opts.local);
    } catch (err) {
      ended = true;
      return { ok: false, text: "", output, error: (err as Error).message, errorKind: "spawn" };
    }
    try {
      proc = spawnAgentProcess({
        command: cli.command,
        args: cli.args,
        cwd: opts.cwd,
        env: cli.env,
        unsetEnv: cli.unsetEnv,
        stdin: launch.stdin,
        keepStdinOpen: adapter.streamInput !== undefined,
        graceMs,
        maxLineBytes: MAX_LINE_BYTES,
        onStdoutLine(line) {
          activity();
          if (!line.trim()) return;
          let emits: AgentEmit[];
          try {
            emits = parse(line);
          } catch (err) {
            emits = [{ kind: "trace", line, reason: `parser failed: ${(err as Error).message}` }];
          }
          for (const e of emits) handle(e);
        },
        onOverlong(head, bytes) {
          activity();
          trace({
            stream: "stdout",
            reason: `line of ${bytes} bytes exceeds the ${MAX_LINE_BYTES}-byte limit; cut`,
            line: cut(head, TRACE_LINE_CHARS),
          });
        },
        onStderrLine(line) {
          activity();
          trace({ stream: "stderr", line: cut(line, TRACE_LINE_CHARS) });
          if (line.trim()) stderrTail = (stderrTail + "\n" + line).slice(-STDERR_TAIL_CHARS);
        },
      });
    } catch (err) {
      ended = true;
      const error = `cannot start agent ${spec.name} (${spec.command}): ${(err as Error).message}`;
      return { ok: false, text: "", output, error, errorKind: "spawn" };
    }
    current = { proc, adapter, finalSeen: false };
    opts.onProcess?.({ pid: proc.pid, startTicks: processStartTicks(proc.pid) });
    activity();
    const timeoutTimer = setTimeout(() => {
      timedOut = true;
      publish("worker_timeout", { timeoutSeconds: spec.timeoutSeconds });
      void proc.stop(graceMs);
    }, spec.timeoutSeconds * 1000);
    if (cancelled !== null) void proc.stop(graceMs);

    let exit: ExitInfo;
    try {
      exit = await proc.exited;
    } finally {
      ended = true;
      clearTimeout(timeoutTimer);
      clearTimeout(stallTimer);
      current = null;
      opts.onProcess?.(null);
    }

    if (cancelled !== null) {
      return { ok: false, text: "", output, error: cancelled, errorKind: "cancelled" };
    }
    if (timedOut) {
      return {
        ok: false,
        text: "",
        output,
        error: `agent ${spec.name} timed out after ${spec.timeoutSeconds} s and was stopped`,
        errorKind: "timeout",
      };
    }
    const unexpected = !final || exit.code !== 0 || exit.signal !== null;
    if (unexpected) {
      publish("worker_disconnected", { exitCode: exit.code, signal: exit.signal });
    }
    if (final && !final.error && !unexpected) {
      return { ok: true, text: final.text || output, output };
    }
    const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
    const tail = stderrTail.trim();
    let error: string;
    let errorKind: ErrorKind;
    if (final?.error) {
      error = final.error;
      errorKind = final.errorKind ?? adapter.classifyError(final.error);
    } else {
      error = final
        ? `agent ${spec.name} ${how} after its result`
        : `agent ${spec.name} ${how} without a result`;
      if (tail) error += `: ${tail}`;
      errorKind = adapter.classifyError(tail);
      if (!final && errorKind === "agent") errorKind = "crash";
    }
    return { ok: false, text: "", output, error, errorKind };
  }

  const waitRetry = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        wakeRetry = null;
        resolve();
      }, ms);
      wakeRetry = () => {
        clearTimeout(t);
        wakeRetry = null;
        resolve();
      };
    });

  /** Attempts of one agent: transient failures are retried up to its `maxRetries`. */
  async function withRetries(spec: AgentSpec): Promise<AttemptResult> {
    let adapter: ProviderAdapter;
    try {
      adapter = opts.adapterFor(spec.provider);
    } catch (err) {
      return { ok: false, text: "", output: "", error: (err as Error).message, errorKind: "spawn" };
    }
    let n = 0;
    while (true) {
      const result = await attempt(spec, adapter);
      if (result.ok || cancelled !== null || !TRANSIENT_ERRORS.has(result.errorKind!)) {
        return result;
      }
      if (n >= spec.maxRetries) return result;
      const delay = Math.min(config.retryBaseMs * 2 ** n, MAX_RETRY_DELAY_MS);
      n++;
      publish("agent_retry", {
        attempt: n,
        maxRetries: spec.maxRetries,
        delay,
        reason: result.error,
      });
      await waitRetry(delay);
      if (cancelled !== null) return { ...result, error: cancelled, errorKind: "cancelled" };
    }
  }

  async function run(): Promise<RunResult> {
    publish("agent_status", { status: opts.status ?? "running" });
    const tried = new Set<string>();
    let last: AttemptResult;
    while (true) {
      const spec = config.agents[agentName];
      tried.add(agentName);
      last = await withRetries(spec);
      // Only a transient failure that outlived its retries hands over to the fallback.
      if (last.ok || cancelled !== null || !TRANSIENT_ERRORS.has(last.errorKind!)) break;
      const next = spec.fallback;
      if (!next || tried.has(next) || !(next in config.agents)) break;
      publish("agent_fallback", { from: agentName, to: next, reason: last.error });
      agentName = next;
    }

    const result: RunResult = last.ok
      ? { ok: true, agent: agentName, text: last.text, partial: false, toolLog: [] }
      : {
        ok: false,
        agent: agentName,
        text: partial,
        error: last.error,
        errorKind: last.errorKind,
        partial: partial.length > 0,
        toolLog: [],
      };
    result.toolLog = boundToolLog(toolLog.values());
    publish("agent_done", {
      text: result.text,
      ...(result.ok ? {} : { error: result.error, errorKind: result.errorKind }),
      toolLog: result.toolLog,
    });
    publish("agent_status", { status: result.ok ? "done" : "error" });
    return result;
  }

  const done = run();
  return {
    done,
    async steer(text) {
      const c = current;
      if (!c || c.finalSeen || !c.adapter.streamInput || !c.proc.stdinOpen()) return false;
      return await c.proc.write(c.adapter.streamInput(text));
    },
    cancel(reason = "cancelled") {
      if (cancelled !== null) return;
      cancelled = reason;
      if (current) void current.proc.stop(config.killGraceSeconds * 1000);
      wakeRetry?.();
    },
  };
}
