/**
 * The agent service's vocabulary (sessions.ts re-exports all of it): the records it hands out
 * (sessions, messages), the `AgentService` contract and its options, the limits on a message's
 * text, and `AgentServiceError`, the refusal the HTTP layer turns into `{"error", "message"}`.
 *
 * @example
 * ```ts
 * import { AgentServiceError, checkText } from "./sessions_api.ts";
 * try {
 *   checkText("");
 * } catch (err) {
 *   if (err instanceof AgentServiceError) console.log(err.status, err.message); // 400 ...
 * }
 * ```
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import type { EventBus } from "../events/bus.ts";
import type { AgentsFile } from "./config.ts";
import type { LocalEndpoint } from "./local.ts";
import type { RunResult } from "./run.ts";
import type { StoredMessage } from "./store.ts";
import type { ErrorKind, Provider, ProviderAdapter } from "./types.ts";

export const INTERRUPTED_ERROR = "interrupted by restart";
/** Longest message text: a prompt may travel as one argv string, which Linux caps at 128 KiB. */
export const MAX_TEXT_CHARS = 100_000;
export const MAX_TEXT_BYTES = 128 * 1024 - 1;
export const MAX_SCHEDULE_SECONDS = 30 * 24 * 3600;

export type MessageJson = {
  role: "user" | "assistant";
  content: string;
  at: string;
  error?: string;
  errorKind?: ErrorKind;
  partial?: boolean;
  fromQueue?: boolean;
};

export type SessionJson = {
  id: string;
  agent: string;
  cwd: string;
  status: "idle" | "running";
  /** Texts waiting for the current run to end, first in line first. */
  queue: string[];
  latestMessage: MessageJson | null;
  createdAt: string;
  updatedAt: string;
};

export type SessionDetail = SessionJson & { history: MessageJson[] };

export type ServiceErrorCode =
  | "BAD_REQUEST"
  | "NOT_FOUND"
  | "NOT_RUNNING"
  | "AGENT_UNAVAILABLE"
  | "CONFLICT"
  | "SHUTTING_DOWN";

/** A refusal the HTTP layer turns into `{"error": code, "message"}` with `status`. */
export class AgentServiceError extends Error {
  constructor(
    readonly code: ServiceErrorCode,
    readonly status: 400 | 404 | 409 | 503,
    message: string,
  ) {
    super(message);
    this.name = "AgentServiceError";
  }
}

export type AgentService = {
  readonly config: AgentsFile;
  /**
   * The store's database, for the tables of goals and orchestrations that live beside sessions.
   * Closed by `close`: close what uses it first.
   */
  readonly db: DatabaseSync;
  createSession(input: { agent: string; cwd?: string }): Promise<SessionJson>;
  listSessions(): SessionJson[];
  /** The session last activated, if it still exists. */
  activeSessionId(): string | null;
  getSession(id: string): SessionDetail;
  /**
   * Starts a run, or queues the text behind the running one. `goalId` marks a goal's continuation
   * prompt (carried in its `new_message`).
   */
  sendMessage(
    id: string,
    text: string,
    meta?: TurnMeta,
  ): { sessionId: string; queued: boolean; pending: number };
  /**
   * Like `sendMessage`, and resolves with the outcome of that very turn once it ends (a turn that
   * never runs — session deleted, server stopping — resolves as cancelled).
   */
  runTurn(id: string, text: string, meta?: TurnMeta): Promise<RunResult>;
  /** True while the session runs or has anything queued. */
  isBusy(id: string): boolean;
  /**
   * Called after every turn that ended with a result (not one stopped by `close`), once the
   * history holds its answer and the next queued text (if any) has started.
   */
  onTurnEnd(listener: (end: TurnEnd) => void): () => void;
  /**
   * Called by `cancel` before it stops the session's own run: a listener returns true when it
   * stopped something of the session's (an orchestration), so a session with no run of its own is
   * not refused.
   */
  onCancel(listener: (sessionId: string) => boolean): () => void;
  /** Streams the text into the running CLI, or queues it first in line. */
  steer(
    id: string,
    text: string,
  ): Promise<{ sessionId: string; steered: boolean; queued: boolean; pending: number }>;
  cancel(
    id: string,
    opts?: { clearQueue?: boolean },
  ): { sessionId: string; cancelled: true; pending: number };
  activate(id: string): { sessionId: string };
  /** Stops the session's run and removes it with its history and queue. */
  deleteSession(id: string): Promise<void>;
  /** The newest history entry of one session, or over all sessions. */
  latestMessage(sessionId?: string): { sessionId: string | null; message: MessageJson | null };
  schedule(
    id: string,
    delaySeconds: number,
    text: string,
  ): { sessionId: string; scheduleId: number; dueAt: string };
  /** Stops every run (kept as interrupted for the next start), clears timers, closes the store. */
  close(): Promise<void>;
};

/** What a turn is for, beyond its text. */
export type TurnMeta = {
  /** The goal whose continuation prompt this is. */
  goalId?: string;
  /** `agent_status` at the start of the run (`evaluating` for a checker). */
  status?: "running" | "evaluating";
};

export type TurnEnd = { sessionId: string; result: RunResult; meta: TurnMeta };

export type AgentServiceOptions = {
  bus: EventBus;
  dataDir: string;
  config: AgentsFile;
  /** Clock for timestamps and due times (ms since the epoch). */
  now?: () => number;
  /** Adapter lookup; defaults to the provider adapters of ./adapters. */
  adapterFor?: (provider: Provider) => ProviderAdapter;
  /**
   * How agents with `"model": "local"` reach this server (loopback URL, `--api-key`, served model
   * id). Required when the config has such an agent: the service refuses to start without it.
   */
  local?: LocalEndpoint;
  /**
   * What the CLI is given for a user's text: e.g. the text with the relevant memory notes before
   * it. The history keeps the text as sent.
   */
  promptFor?: (session: { id: string; agent: string; cwd: string }, text: string) => string;
};

export const iso = (ms: number) => new Date(ms).toISOString();

export function messageJson(m: StoredMessage): MessageJson {
  const out: MessageJson = { role: m.role, content: m.content, at: iso(m.at) };
  if (m.error !== undefined) out.error = m.error;
  if (m.errorKind !== undefined) out.errorKind = m.errorKind;
  if (m.partial) out.partial = true;
  if (m.fromQueue) out.fromQueue = true;
  return out;
}

export const bad = (message: string) => new AgentServiceError("BAD_REQUEST", 400, message);
const encoder = new TextEncoder();

/** A prompt may travel as one argv string: not empty, no NUL, within Linux's 128 KiB. */
export function checkText(text: string) {
  if (!text) throw bad("text must not be empty");
  if (text.includes("\0")) throw bad("text must not contain NUL characters");
  if (text.length > MAX_TEXT_CHARS || encoder.encode(text).length > MAX_TEXT_BYTES) {
    throw bad(`text must be at most ${MAX_TEXT_CHARS} characters and ${MAX_TEXT_BYTES} bytes`);
  }
}
