/**
 * Hearth's own generic protocol for any CLI that prints JSON lines: a script or a wrapper around
 * some other agent only has to print one JSON object per line on stdout.
 *
 * Launch: the prompt is the last argument (`CMD ...args PROMPT`). To resume, `--resume ID PROMPT`
 * is passed, and only with an id the CLI itself printed in a `session` line, so a CLI that never
 * prints one never sees the flag. Nothing is written to stdin.
 *
 * Lines (unknown fields are ignored; a line of an unknown type, a line that is not JSON, or one
 * whose fields have the wrong types is traced and skipped):
 * - `{"type":"session","id":"..."}`: the CLI's session id, handed back with `--resume`.
 * - `{"type":"output","text":"..."}`: a chunk of the answer, shown as it comes (chunks are
 *   concatenated as they are; send the separators you want).
 * - `{"type":"thinking","text":"...","id"?:"..."}`: a finished thinking note, shown as a
 *   `thinking` step (`jsonl:thinking:<id>`, or a counter).
 * - `{"type":"tool","id":"...","name":"...","status":"running|done|error","detail"?:"...",
 *   "toolType"?:"tool|thinking|search|command|subagent","label"?:"..."}`: a tool step, updated by
 *   id (`jsonl:tool:<id>`): `running` first, then `done` or `error` (a step first seen finished is
 *   shown as running, then finished). `toolType` and `label` given once stick to the step;
 *   `toolType` defaults from the name (`bash`/`shell` ->
 *   command, `web_search`/`webfetch` -> search, `task`/`agent` -> subagent, else tool); `label`
 *   defaults to the name.
 * - `{"type":"status","status":"running|evaluating"}`: the CLI is busy (e.g. retrying).
 * - `{"type":"result","text"?:"..."}`: the run succeeded; `text` is the final answer (default:
 *   all output chunks).
 * - `{"type":"error","message":"...","kind"?:"rate_limit|connection|auth|agent|..."}`: the run
 *   failed; without a valid `kind` the message is classified (429 -> rate_limit, ...).
 * A run should end with one `result` or `error` line; exiting without one is a crash.
 *
 * @example
 * ```ts
 * import { jsonlAdapter } from "./jsonl.ts";
 * const parse = jsonlAdapter.createParser();
 * parse('{"type":"output","text":"Hello"}'); // [{ kind: "output", text: "Hello" }]
 * parse('{"type":"result"}'); // [{ kind: "final", text: "Hello" }]
 * ```
 * @module
 */

import type { AgentEmit, ErrorKind, ProviderAdapter, StepStatus, ToolType } from "../types.ts";
import { TOOL_TYPES } from "../types.ts";
import {
  classifyError,
  compactJson,
  createStepTracker,
  DETAIL_MAX,
  jsonLineParser,
  oneLine,
  str,
  toolTypeFor,
  trace,
  truncate,
} from "./common.ts";

const STATUSES: ReadonlySet<string> = new Set(["running", "done", "error"]);
const ERROR_KINDS: ReadonlySet<string> = new Set<ErrorKind>([
  "rate_limit",
  "connection",
  "auth",
  "agent",
  "crash",
  "timeout",
  "stalled",
  "cancelled",
  "spawn",
]);

function createJsonlParser(): (line: string) => AgentEmit[] {
  const steps = createStepTracker();
  const tools = new Map<string, { label: string; toolType: ToolType }>();
  let output = "";
  let thoughts = 0;

  return jsonLineParser((event, line) => {
    switch (event.type) {
      case "session": {
        const id = str(event, "id");
        return id ? [{ kind: "session", id }] : [trace(line, "session without a string id")];
      }
      case "output": {
        const text = str(event, "text");
        if (text === undefined) return [trace(line, "output without a string text")];
        if (text === "") return [trace(line, "empty output")];
        output += text;
        return [{ kind: "output", text }];
      }
      case "thinking": {
        const text = str(event, "text");
        if (text === undefined) return [trace(line, "thinking without a string text")];
        const id = str(event, "id") ?? String(thoughts++);
        return steps.update({
          kind: "tool",
          toolType: "thinking",
          label: "Thinking",
          ...(text === "" ? {} : { detail: truncate(text, DETAIL_MAX) }),
          stepRef: `jsonl:thinking:${id}`,
          status: "done",
        });
      }
      case "tool": {
        const id = str(event, "id");
        const name = str(event, "name");
        const status = str(event, "status");
        if (!id || !name || !status || !STATUSES.has(status)) {
          return [trace(line, "tool needs string id and name and status running|done|error")];
        }
        // Label and type stick to the step: an update need not repeat them.
        const known = tools.get(id);
        const given = str(event, "toolType");
        const toolType = given && (TOOL_TYPES as readonly string[]).includes(given)
          ? given as ToolType
          : known?.toolType ?? toolTypeFor(name);
        const givenLabel = str(event, "label");
        const label = givenLabel ? oneLine(givenLabel, 120) : known?.label ?? name;
        tools.set(id, { label, toolType });
        const detail = event.detail === undefined ? undefined : compactJson(event.detail);
        return steps.update({
          kind: "tool",
          toolType,
          label,
          ...(detail ? { detail: truncate(detail, DETAIL_MAX) } : {}),
          stepRef: `jsonl:tool:${id}`,
          status: status as StepStatus,
        });
      }
      case "status": {
        const status = str(event, "status");
        if (status !== "running" && status !== "evaluating") {
          return [trace(line, "status must be running or evaluating")];
        }
        return [{ kind: "status", status }];
      }
      case "result": {
        const text = str(event, "text");
        return [{ kind: "final", text: text ?? output }];
      }
      case "error": {
        const message = str(event, "message") ?? "the agent reported an error";
        const kind = str(event, "kind");
        const errorKind = kind && ERROR_KINDS.has(kind)
          ? kind as ErrorKind
          : classifyError(message);
        return [{ kind: "final", text: output, error: truncate(message, DETAIL_MAX), errorKind }];
      }
      default:
        return [trace(line, `unknown type ${compactJson(event.type ?? null)}`)];
    }
  });
}

export const jsonlAdapter: ProviderAdapter = {
  provider: "jsonl",
  launch(prompt, opts = {}) {
    return { args: opts.resume ? ["--resume", opts.resume, prompt] : [prompt] };
  },
  createParser: createJsonlParser,
  classifyError,
};
