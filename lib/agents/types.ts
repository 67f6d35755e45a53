/**
 * The shapes shared by the agent runner and the per-provider stdout adapters. An adapter knows one
 * CLI's protocol (which flags make it stream, how the prompt goes in, how each stdout line maps to
 * public events); the runner knows processes (spawn, supervise, kill) and knows nothing of any
 * protocol.
 *
 * @example
 * ```ts
 * import type { ProviderAdapter } from "./types.ts";
 * declare const adapter: ProviderAdapter;
 * const parse = adapter.createParser();
 * parse('{"type":"result","result":"done"}'); // -> [{ kind: "final", text: "done" }]
 * ```
 * @module
 */

export const PROVIDERS = ["claude", "codex", "gemini", "opencode", "jsonl"] as const;
export type Provider = (typeof PROVIDERS)[number];

export const TOOL_TYPES = ["tool", "thinking", "search", "command", "subagent"] as const;
export type ToolType = (typeof TOOL_TYPES)[number];
export type StepStatus = "running" | "done" | "error";

/**
 * Why a run failed. `rate_limit` and `connection` are transient (retried with backoff, then the
 * fallback agent); the others end the run.
 */
export type ErrorKind =
  | "rate_limit"
  | "connection"
  | "auth"
  | "agent" // the CLI reported a failed run
  | "crash" // unexpected exit without a result
  | "timeout"
  | "stalled"
  | "cancelled"
  | "spawn"; // the command could not be started

export const TRANSIENT_ERRORS: ReadonlySet<ErrorKind> = new Set(["rate_limit", "connection"]);

/** What one stdout line means, in the public vocabulary. A line may mean several things. */
export type AgentEmit =
  /** A tool step: `stepRef` is stable across its running -> done|error updates. */
  | {
    kind: "tool";
    toolType: ToolType;
    label: string;
    detail?: string;
    stepRef: string;
    status: StepStatus;
  }
  /** Newly streamed assistant text (a delta, already deduplicated against full messages). */
  | { kind: "output"; text: string }
  /** The CLI's own end of the run: its final text, or its error. */
  | { kind: "final"; text: string; error?: string; errorKind?: ErrorKind }
  /** The CLI said it is working out something (e.g. a retry inside the CLI) */
  | { kind: "status"; status: "running" | "evaluating" }
  /** The CLI's own session/thread id, kept so a later run can resume it. */
  | { kind: "session"; id: string }
  /** Not part of the protocol (non-JSON, unknown type): goes to the internal `trace` topic. */
  | { kind: "trace"; line: string; reason: string };

export type LaunchSpec = {
  /** Arguments appended after the configured `args`. */
  args: string[];
  /** Bytes written to stdin at start; stdin stays open only when `streamInput` is true. */
  stdin?: string;
};

export type ProviderAdapter = {
  provider: Provider;
  /** How to start the CLI for one prompt (`resume` is the CLI session id from an earlier run). */
  launch(prompt: string, opts?: { resume?: string }): LaunchSpec;
  /**
   * Set when the CLI reads further user messages on stdin while it runs (steering): returns the
   * stdin line for one more user message. The runner closes stdin after the `final` emit.
   */
  streamInput?: (text: string) => string;
  /** A fresh parser for one run: feed it each stdout line (no trailing newline). */
  createParser(): (line: string) => AgentEmit[];
  /** Classifies an error text (stderr tail, result error) into an ErrorKind. */
  classifyError(text: string): ErrorKind;
};

/** One agent of `--agents-config`. */
export type AgentConfig = {
  provider: Provider;
  command: string;
  /**
   * `"local"`: the CLI runs on this server's model (lib/agents/local.ts); any other string is
   * passed to the CLI as its model flag. Absent: the CLI's own default.
   */
  model?: string;
  args: string[];
  env: Record<string, string>;
  fallback?: string;
  maxRetries: number;
};

/** A tool step as kept in `agent_done.toolLog` (bounded: 160 entries, 24000 detail chars). */
export type ToolLogEntry = {
  toolType: ToolType;
  label: string;
  detail?: string;
  stepRef: string;
  status: StepStatus;
};
