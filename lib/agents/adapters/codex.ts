/**
 * OpenAI Codex CLI in JSON mode: `exec --json -- PROMPT`, or `exec --json resume ID -- PROMPT` to
 * continue a session (openai/codex docs/exec.md). The `--` keeps a prompt that starts with `-` (or
 * is the word `resume`) from being read as a flag or subcommand. The runner must give Codex an
 * empty stdin: with piped stdin and a prompt argument, Codex appends stdin to the prompt.
 *
 * Line types: `thread.started` (the thread id, used to resume), `turn.started`, `turn.completed`
 * (usage; the end of a successful run: emits `final` with the last `agent_message` text),
 * `turn.failed` (the end of a failed run: `final` with the error), `error` (a stream error; it is
 * traced and, when Codex says it is reconnecting, reported as a `running` status), and
 * `item.started|updated|completed` whose item types map to:
 * - `agent_message` -> output (only what an earlier update of the same item did not show);
 * - `reasoning` -> a `thinking` step labelled with the summary's first line;
 * - `command_execution` -> a `command` step; failed, declined or a non-zero exit -> `error`;
 * - `file_change` -> `Edit: paths`; `mcp_tool_call` -> `server.tool: arg`; `web_search` ->
 *   `search` step; `todo_list` -> `Todo (n/m)` with the items as detail; `collab_tool_call` ->
 *   `subagent` step; `plan` -> `Plan` step (its text is the final text when no message came);
 * - `error` items are Codex's non-fatal warnings: traced.
 * Step refs are `codex:item:<item id>`.
 *
 * @example
 * ```ts
 * import { codexAdapter } from "./codex.ts";
 * codexAdapter.launch("fix it", { resume: "0199a213" }).args;
 * // ["exec", "--json", "resume", "0199a213", "--", "fix it"]
 * ```
 * @module
 */

import type { AgentEmit, ProviderAdapter, StepStatus, ToolType } from "../types.ts";
import {
  arr,
  classifyError,
  compactJson,
  createOutput,
  createStepTracker,
  DETAIL_MAX,
  detailOf,
  isObject,
  jsonLineParser,
  type JsonObject,
  keyArg,
  obj,
  oneLine,
  str,
  type TextBlock,
  toolTypeFor,
  trace,
  truncate,
} from "./common.ts";

type Step = { toolType: ToolType; label: string; detail?: string; status: StepStatus };

/** `bash -lc 'ls -la'` -> `ls -la`: the shell wrapper Codex puts around every command is noise. */
export function unwrapShell(command: string): string {
  const m = /^(?:\/\S*\/)?(?:ba|z)?sh\s+-l?c\s+([\s\S]+)$/.exec(command.trim());
  if (!m) return command;
  const inner = m[1].trim();
  const q = inner[0];
  if ((q === "'" || q === '"') && inner.endsWith(q) && inner.length >= 2) return inner.slice(1, -1);
  return inner;
}

const lifecycle = (status: string | undefined, done: boolean): StepStatus => {
  if (status === "failed" || status === "declined") return "error";
  if (status === "completed") return "done";
  return done ? "done" : "running";
};

function mcpResultText(item: JsonObject): string | undefined {
  const error = str(obj(item, "error"), "message");
  if (error) return error;
  const result = obj(item, "result");
  if (!result) return undefined;
  const texts = arr(result, "content").map((c) =>
    isObject(c) && typeof c.text === "string" ? c.text : compactJson(c)
  );
  if (texts.length > 0) return texts.join("\n");
  return result.structured_content === undefined
    ? undefined
    : compactJson(result.structured_content);
}

/** How one item of a given type looks as a tool step; undefined for non-step items. */
function itemStep(item: JsonObject, completed: boolean): Step | undefined {
  const type = str(item, "type");
  const status = str(item, "status");
  switch (type) {
    case "reasoning": {
      const text = str(item, "text") ?? "";
      const head = oneLine(text.replace(/\*\*/g, ""));
      return {
        toolType: "thinking",
        label: head ? `Thinking: ${head}` : "Thinking",
        detail: text === "" ? undefined : truncate(text, DETAIL_MAX),
        status: completed ? "done" : "running",
      };
    }
    case "command_execution": {
      const command = str(item, "command") ?? "";
      const exit = typeof item.exit_code === "number" ? item.exit_code : undefined;
      let st = lifecycle(status, completed);
      if (st === "done" && exit !== undefined && exit !== 0) st = "error";
      const output = str(item, "aggregated_output") ?? "";
      const tail = exit !== undefined && exit !== 0 ? `\n[exit code ${exit}]` : "";
      return {
        toolType: "command",
        label: `Shell: ${oneLine(unwrapShell(command))}`,
        detail: output + tail === "" ? undefined : truncate(output + tail, DETAIL_MAX),
        status: st,
      };
    }
    case "file_change": {
      const changes = arr(item, "changes").filter(isObject);
      const paths = changes.map((c) => str(c, "path") ?? "?");
      return {
        toolType: "tool",
        label: paths.length ? `Edit: ${oneLine(paths.join(", "))}` : "Edit",
        detail: changes.length
          ? truncate(
            changes.map((c) => `${str(c, "kind") ?? "update"} ${str(c, "path")}`).join("\n"),
            DETAIL_MAX,
          )
          : undefined,
        status: lifecycle(status, completed),
      };
    }
    case "mcp_tool_call": {
      const tool = str(item, "tool") ?? "tool";
      const name = `${str(item, "server") ?? "mcp"}.${tool}`;
      const arg = keyArg(item.arguments);
      const st = lifecycle(status, completed);
      const result = st === "running" ? undefined : mcpResultText(item);
      return {
        toolType: toolTypeFor(tool),
        label: arg ? `${name}: ${oneLine(arg)}` : name,
        detail: result === undefined ? detailOf(item.arguments) : truncate(result, DETAIL_MAX),
        status: st,
      };
    }
    case "web_search": {
      const query = str(item, "query") ?? "";
      return {
        toolType: "search",
        label: query ? `Search: ${oneLine(query)}` : "Search",
        detail: query ? detailOf(item.action ?? query) : undefined,
        status: completed ? "done" : "running",
      };
    }
    case "todo_list": {
      const items = arr(item, "items").filter(isObject);
      const done = items.filter((t) => t.completed === true).length;
      return {
        toolType: "tool",
        label: `Todo (${done}/${items.length})`,
        detail: items.length
          ? truncate(
            items.map((t) => `[${t.completed === true ? "x" : " "}] ${str(t, "text") ?? ""}`).join(
              "\n",
            ),
            DETAIL_MAX,
          )
          : undefined,
        status: completed ? "done" : "running",
      };
    }
    case "collab_tool_call": {
      const prompt = str(item, "prompt");
      const tool = str(item, "tool") ?? "agent";
      return {
        toolType: "subagent",
        label: prompt ? `Agent ${tool}: ${oneLine(prompt)}` : `Agent ${tool}`,
        detail: prompt ? truncate(prompt, DETAIL_MAX) : undefined,
        status: lifecycle(status, completed),
      };
    }
    case "plan": {
      const text = str(item, "text") ?? "";
      return {
        toolType: "tool",
        label: "Plan",
        detail: text === "" ? undefined : truncate(text, DETAIL_MAX),
        status: completed ? "done" : "running",
      };
    }
    default:
      return undefined;
  }
}

function createCodexParser(): (line: string) => AgentEmit[] {
  const output = createOutput();
  const steps = createStepTracker();
  const messages = new Map<string, TextBlock & { emitted: string }>();
  let lastMessage: string | undefined;
  let lastPlan: string | undefined;
  let lastError: string | undefined;

  const onItem = (item: JsonObject, completed: boolean, line: string): AgentEmit[] => {
    const id = str(item, "id") ?? "";
    const type = str(item, "type");
    if (type === "agent_message") {
      const text = str(item, "text") ?? "";
      let m = messages.get(id);
      if (!m) {
        m = { started: false, emitted: "" };
        messages.set(id, m);
      }
      lastMessage = text;
      // Later updates of one message extend it; a rewrite cannot be unsaid, so it is not resent.
      if (!text.startsWith(m.emitted) || text.length === m.emitted.length) return [];
      const add = text.slice(m.emitted.length);
      m.emitted = text;
      return output.push(m, add);
    }
    if (type === "error") return [trace(line, `codex warning: ${str(item, "message") ?? ""}`)];
    if (type === "plan" && completed) lastPlan = str(item, "text");
    const step = itemStep(item, completed);
    if (!step) return [trace(line, `item type ${type ?? "?"} not shown`)];
    return steps.update({
      kind: "tool",
      toolType: step.toolType,
      label: step.label,
      ...(step.detail === undefined ? {} : { detail: step.detail }),
      stepRef: `codex:item:${id}`,
      status: step.status,
    });
  };

  return jsonLineParser((event, line) => {
    const type = str(event, "type");
    switch (type) {
      case "thread.started": {
        const id = str(event, "thread_id");
        return id ? [{ kind: "session", id }] : [trace(line, "thread.started without thread_id")];
      }
      case "turn.started":
        return [trace(line, "turn started")];
      case "turn.completed":
        return [{ kind: "final", text: lastMessage ?? lastPlan ?? "" }];
      case "turn.failed": {
        const error = str(obj(event, "error"), "message") ?? lastError ?? "turn failed";
        return [{
          kind: "final",
          text: lastMessage ?? "",
          error: truncate(error, DETAIL_MAX),
          errorKind: classifyError(error),
        }];
      }
      case "error": {
        const message = str(event, "message") ?? "";
        lastError = message;
        const t = trace(line, `codex error: ${truncate(message, 200)}`);
        return /reconnect|retry/i.test(message) ? [{ kind: "status", status: "running" }, t] : [t];
      }
      case "item.started":
      case "item.updated":
      case "item.completed": {
        const item = obj(event, "item");
        if (!item) return [trace(line, `${type} without item`)];
        return onItem(item, type === "item.completed", line);
      }
      default:
        return [trace(line, `unknown type ${compactJson(event.type ?? null)}`)];
    }
  });
}

export const codexAdapter: ProviderAdapter = {
  provider: "codex",
  launch(prompt, opts = {}) {
    const args = ["exec", "--json"];
    if (opts.resume) args.push("resume", opts.resume);
    args.push("--", prompt);
    return { args };
  },
  createParser: createCodexParser,
  classifyError,
};
