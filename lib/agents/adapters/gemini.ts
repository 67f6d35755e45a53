/**
 * Gemini CLI in headless stream-json mode: `-o stream-json [--resume ID] -p PROMPT`
 * (docs/cli/headless.md: headless mode is triggered by `-p`/`--prompt`). A prompt that starts
 * with `-` is passed as `--prompt=PROMPT`, so yargs cannot take it for a flag. `--resume` takes a
 * session id (as printed by `init`), `latest` or an index (docs/cli/cli-reference.md).
 *
 * Line types (packages/core/src/output/types.ts): `init` (session_id, model), `message` (role
 * `assistant` with `delta: true` chunks -> output; a non-delta assistant message is deduplicated
 * against the chunks already shown; role `user`, the prompt echoed -> trace), `tool_use`
 * (tool_name, tool_id, parameters -> running), `tool_result` (tool_id, status success|error,
 * output or error -> done|error), `error` (severity warning|error: non-fatal, traced; its message
 * is kept for a result that fails without one), `result` (status success|error, stats -> `final`
 * whose text is all assistant text of the run, blocks separated by blank lines).
 * Step refs are `gemini:toolid:<tool_id>`.
 *
 * @example
 * ```ts
 * import { geminiAdapter } from "./gemini.ts";
 * geminiAdapter.launch("explain", { resume: "c1a2" }).args;
 * // ["-o", "stream-json", "--resume", "c1a2", "-p", "explain"]
 * ```
 * @module
 */

import type { AgentEmit, ProviderAdapter, ToolType } from "../types.ts";
import {
  classifyError,
  compactJson,
  createOutput,
  createStepTracker,
  DETAIL_MAX,
  detailOf,
  jsonLineParser,
  type JsonObject,
  obj,
  str,
  type TextBlock,
  toolLabel,
  toolTypeFor,
  trace,
  truncate,
} from "./common.ts";

type Tool = { label: string; toolType: ToolType };

function createGeminiParser(): (line: string) => AgentEmit[] {
  const output = createOutput();
  const steps = createStepTracker();
  const tools = new Map<string, Tool>();
  let block: TextBlock & { text: string } = { started: false, text: "" };
  let lastError: string | undefined;
  let raw = ""; // all assistant text as Gemini printed it, without our block separators

  const onMessage = (event: JsonObject, line: string): AgentEmit[] => {
    if (str(event, "role") !== "assistant") return [trace(line, "user message")];
    const content = str(event, "content") ?? "";
    if (event.delta === true) return show(content);
    // A whole message (some versions print one before `result`): show only what is new.
    if (content === "" || raw.endsWith(content) || block.text === content) return [];
    if (block.text !== "" && content.startsWith(block.text)) {
      return show(content.slice(block.text.length));
    }
    if (raw !== "" && content.startsWith(raw)) return show(content.slice(raw.length));
    block = { started: false, text: "" };
    return show(content);
  };

  const show = (text: string): AgentEmit[] => {
    block.text += text;
    raw += text;
    return output.push(block, text);
  };

  const onToolUse = (event: JsonObject): AgentEmit[] => {
    const id = str(event, "tool_id") ?? "";
    const name = str(event, "tool_name") ?? "tool";
    const params = event.parameters;
    const tool = { label: toolLabel(name, params), toolType: toolTypeFor(name) };
    tools.set(id, tool);
    block = { started: false, text: "" }; // text after a tool call is a new block
    const detail = detailOf(params);
    return steps.update({
      kind: "tool",
      ...tool,
      ...(detail === undefined ? {} : { detail }),
      stepRef: `gemini:toolid:${id}`,
      status: "running",
    });
  };

  const onToolResult = (event: JsonObject): AgentEmit[] => {
    const id = str(event, "tool_id") ?? "";
    const tool = tools.get(id) ?? { label: "tool", toolType: "tool" as ToolType };
    const failed = str(event, "status") === "error";
    const text = failed
      ? str(obj(event, "error"), "message") ?? str(event, "output")
      : str(event, "output");
    return steps.update({
      kind: "tool",
      ...tool,
      ...(text ? { detail: truncate(text, DETAIL_MAX) } : {}),
      stepRef: `gemini:toolid:${id}`,
      status: failed ? "error" : "done",
    });
  };

  const onResult = (event: JsonObject): AgentEmit[] => {
    if (str(event, "status") !== "error") return [{ kind: "final", text: output.text() }];
    const err = obj(event, "error");
    const message = str(err, "message") ?? lastError ?? "Gemini CLI reported an error";
    const type = str(err, "type");
    return [{
      kind: "final",
      text: output.text(),
      error: truncate(message, DETAIL_MAX),
      errorKind: classifyError(type ? `${type}: ${message}` : message),
    }];
  };

  return jsonLineParser((event, line) => {
    switch (event.type) {
      case "init": {
        const id = str(event, "session_id");
        return id ? [{ kind: "session", id }] : [trace(line, "init without session_id")];
      }
      case "message":
        return onMessage(event, line);
      case "tool_use":
        return onToolUse(event);
      case "tool_result":
        return onToolResult(event);
      case "error": {
        const message = str(event, "message") ?? "";
        if (str(event, "severity") !== "warning") lastError = message;
        return [
          trace(line, `gemini ${str(event, "severity") ?? "error"}: ${truncate(message, 200)}`),
        ];
      }
      case "result":
        return onResult(event);
      default:
        return [trace(line, `unknown type ${compactJson(event.type ?? null)}`)];
    }
  });
}

export const geminiAdapter: ProviderAdapter = {
  provider: "gemini",
  launch(prompt, opts = {}) {
    const args = ["-o", "stream-json"];
    if (opts.resume) args.push("--resume", opts.resume);
    if (prompt.startsWith("-")) args.push(`--prompt=${prompt}`);
    else args.push("-p", prompt);
    return { args };
  },
  createParser: createGeminiParser,
  classifyError,
};
