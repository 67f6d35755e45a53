/**
 * What every provider adapter shares: bounded text (`truncate`), a line parser that never throws
 * (garbage, non-objects and adapter bugs become `trace` emits), error classification, the mapping
 * from tool names to public tool types and labels, a tracker that keeps each tool step's status
 * sequence well formed, and the assembly of streamed output text.
 *
 * @example
 * ```ts
 * import { classifyError, jsonLineParser, toolLabel, toolTypeFor } from "./common.ts";
 * classifyError("429 Too Many Requests"); // "rate_limit"
 * toolTypeFor("Bash"); // "command"
 * toolLabel("Read", { file_path: "src/a.ts" }); // "Read: src/a.ts"
 * const parse = jsonLineParser((event, line) => [{ kind: "trace", line, reason: String(event.type) }]);
 * parse("not json"); // [{ kind: "trace", line: "not json", reason: "not JSON: ..." }]
 * ```
 * @module
 */

import type { AgentEmit, ErrorKind, StepStatus, ToolType } from "../types.ts";

/** Most characters of a stdout line kept in a `trace` emit. */
export const TRACE_LINE_MAX = 2000;
/** Most characters of a tool step's `detail`. */
export const DETAIL_MAX = 4000;
/** Most characters of a tool step's `label`'s argument part. */
export const LABEL_ARG_MAX = 80;

export type JsonObject = Record<string, unknown>;
export type ToolEmit = Extract<AgentEmit, { kind: "tool" }>;
export type FinalEmit = Extract<AgentEmit, { kind: "final" }>;

/** Cuts `text` to at most `max` characters (an ellipsis included), never inside a surrogate pair. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 1) return text.slice(0, Math.max(0, max));
  let end = max - 1;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--; // keep a high surrogate with its pair
  return text.slice(0, end) + "…";
}

/** The first non-blank line of `text`, trimmed and cut to `max`. */
export function oneLine(text: string, max = LABEL_ARG_MAX): string {
  const first = text.split("\n").find((l) => l.trim() !== "") ?? "";
  return truncate(first.trim(), max);
}

export function trace(line: string, reason: string): AgentEmit {
  return { kind: "trace", line: truncate(line, TRACE_LINE_MAX), reason };
}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function str(o: JsonObject | undefined, key: string): string | undefined {
  const v = o?.[key];
  return typeof v === "string" ? v : undefined;
}

export function obj(o: JsonObject | undefined, key: string): JsonObject | undefined {
  const v = o?.[key];
  return isObject(v) ? v : undefined;
}

export function arr(o: JsonObject | undefined, key: string): unknown[] {
  const v = o?.[key];
  return Array.isArray(v) ? v : [];
}

/** `JSON.stringify` that cannot throw (cycles and BigInts cannot come from JSON.parse anyway). */
export function compactJson(v: unknown): string {
  try {
    return typeof v === "string" ? v : JSON.stringify(v) ?? "";
  } catch {
    return String(v);
  }
}

/**
 * Wraps a handler of parsed JSON objects into the `createParser()` contract: every line yields at
 * least one emit, and nothing a CLI prints (a 5 MB line, control bytes, a JSON array, a shape the
 * handler did not expect) can throw out of it.
 */
export function jsonLineParser(
  handle: (event: JsonObject, line: string) => AgentEmit[],
): (line: string) => AgentEmit[] {
  return (raw) => {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") return [trace(line, "empty line")];
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      return [trace(line, `not JSON: ${truncate((err as Error).message, 200)}`)];
    }
    if (!isObject(value)) return [trace(line, "not a JSON object")];
    try {
      const out = handle(value, line);
      if (out.length > 0) return out;
      return [trace(line, `no public event (type ${JSON.stringify(value.type ?? null)})`)];
    } catch (err) {
      // A bug or an unforeseen shape must cost one line, not the run.
      return [trace(line, `adapter error: ${truncate(String(err), 200)}`)];
    }
  };
}

const RATE_LIMIT =
  /\b429\b|rate[ _-]?limit|too many requests|overloaded|quota|resource[ _]exhausted|usage limit/i;
const CONNECTION =
  /ECONNRESET|ETIMEDOUT|ECONNREFUSED|ECONNABORTED|EAI_AGAIN|ENOTFOUND|EPIPE|socket hang up|connection|network|fetch failed|timed out|\b50[234]\b/i;
const AUTH =
  /\b40[13]\b|api[ _-]?key|unauthori[sz]ed|authenticat|auth[ _]?error|forbidden|permission[ _]denied|not logged in|please run \/login/i;

/**
 * Rate limits (429, "rate limit", "overloaded", "quota") -> `rate_limit`; network trouble
 * (ECONNRESET, ETIMEDOUT, "connection", "network", 502/503/504) -> `connection`; 401/403, API key,
 * "unauthorized" -> `auth`; anything else -> `agent`. Checked in that order: a 429 that mentions
 * its connection is still a rate limit.
 */
export function classifyError(text: string): ErrorKind {
  if (RATE_LIMIT.test(text)) return "rate_limit";
  if (CONNECTION.test(text)) return "connection";
  if (AUTH.test(text)) return "auth";
  return "agent";
}

const COMMAND_TOOLS = new Set([
  "bash",
  "shell",
  "command_execution",
  "run_shell_command",
  "local_shell",
  "exec_command",
  "execute_command",
]);
const SEARCH_TOOLS = new Set([
  "web_search",
  "websearch",
  "webfetch",
  "web_fetch",
  "google_web_search",
]);
const SUBAGENT_TOOLS = new Set(["task", "agent", "invoke_agent"]);

/** The public tool type of a tool name (thinking blocks are typed by their callers). */
export function toolTypeFor(name: string): ToolType {
  const n = name.toLowerCase();
  if (COMMAND_TOOLS.has(n)) return "command";
  if (SEARCH_TOOLS.has(n)) return "search";
  if (SUBAGENT_TOOLS.has(n)) return "subagent";
  return "tool";
}

// The argument that says what a call does, in the order tools put it first.
const KEY_ARGS = [
  "command",
  "cmd",
  "file_path",
  "filePath",
  "absolute_path",
  "notebook_path",
  "pattern",
  "path",
  "url",
  "query",
  "description",
  "prompt",
];

/** The argument of a tool input that best says what the call does, if any. */
export function keyArg(input: unknown): string | undefined {
  if (!isObject(input)) return undefined;
  for (const k of KEY_ARGS) {
    const v = input[k];
    if (typeof v === "string" && v.trim() !== "") return v;
    if (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === "string")) {
      return v.join(" ");
    }
  }
  return undefined;
}

/** `Name: key arg` (e.g. `Bash: ls -la`, `Read: src/a.ts`), or the bare name. */
export function toolLabel(name: string, input?: unknown): string {
  const arg = keyArg(input);
  return arg ? `${name}: ${oneLine(arg)}` : name;
}

export function detailOf(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  const s = compactJson(v);
  return s === "" || s === "{}" ? undefined : truncate(s, DETAIL_MAX);
}

/**
 * Keeps each step's emitted statuses well formed: the first emit of a step is always `running`
 * (a step first seen finished gets a synthetic `running` before it), and a finished step takes no
 * further updates (they yield nothing, so the line becomes a trace).
 */
export function createStepTracker() {
  const states = new Map<string, StepStatus>();
  return {
    update(step: ToolEmit): AgentEmit[] {
      const prev = states.get(step.stepRef);
      if (prev === "done" || prev === "error") return [];
      states.set(step.stepRef, step.status);
      if (prev === undefined && step.status !== "running") {
        const { detail: _detail, ...rest } = step;
        return [{ ...rest, status: "running" }, step];
      }
      return [step];
    },
    status(stepRef: string): StepStatus | undefined {
      return states.get(stepRef);
    },
  };
}

/** A run of assistant text that is shown as one block (one content block, one message item). */
export type TextBlock = { started: boolean };

/**
 * Assembles streamed output text. Each block's first chunk is separated from earlier output by a
 * blank line, so two assistant messages never run together ("Let me look.Here is..."); the
 * separator is part of the emitted text, so the concatenated `output` emits equal `text()`.
 */
export function createOutput() {
  let all = "";
  return {
    push(block: TextBlock, text: string): AgentEmit[] {
      if (text === "") return [];
      let chunk = text;
      if (!block.started) {
        block.started = true;
        if (all !== "") {
          chunk = (all.endsWith("\n\n") ? "" : all.endsWith("\n") ? "\n" : "\n\n") + text;
        }
      }
      all += chunk;
      return [{ kind: "output", text: chunk }];
    },
    text(): string {
      return all;
    },
  };
}
