/**
 * opencode in JSON mode: `run --format json [--session ID] -- PROMPT` (packages/opencode/src/cli/
 * cmd/run.ts). Every line is `{type, timestamp, sessionID, ...}`; the first `sessionID` seen is
 * the session (resumed with `--session`). Note that opencode itself wraps a message argument that
 * contains spaces in double quotes before sending it to the model.
 *
 * Line types: `step_start` (one model call begins), `text` (a finished text part: `part.text`,
 * deduplicated by part id), `reasoning` (a finished reasoning part, printed with `--thinking` ->
 * a `thinking` step), `tool_use` (a tool part, printed when it completed or failed: `part.tool`,
 * `part.state.{status,input,output,error,title}` -> a step, `running` then `done|error`),
 * `step_finish` (`part.reason`; any reason but `tool-calls` ends the run), `error` (a session
 * error: `error.name`, `error.data.message`) and `done` (the session went idle; newer versions).
 * The run's `final` comes from the first of: an `error`, a `step_finish` that ends the run, or
 * `done`; its text is the text of the last step that produced any. Step refs are
 * `opencode:part:<part id>` (the call id when a part has no id).
 *
 * @example
 * ```ts
 * import { opencodeAdapter } from "./opencode.ts";
 * opencodeAdapter.launch("fix it", { resume: "ses_1" }).args;
 * // ["run", "--format", "json", "--session", "ses_1", "--", "fix it"]
 * ```
 * @module
 */

import type { AgentEmit, ProviderAdapter, StepStatus } from "../types.ts";
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
  oneLine,
  str,
  type TextBlock,
  toolLabel,
  toolTypeFor,
  trace,
  truncate,
} from "./common.ts";

function createOpencodeParser(): (line: string) => AgentEmit[] {
  const output = createOutput();
  const steps = createStepTracker();
  const texts = new Map<string, TextBlock & { emitted: string; step: string[]; slot: number }>();
  let sessionId = "";
  let stepText: string[] = [];
  let lastStepText = "";
  let finalSent = false;

  const final = (line: string, emit: Omit<Extract<AgentEmit, { kind: "final" }>, "kind">) => {
    if (finalSent) return [trace(line, "after the final event")];
    finalSent = true;
    return [{ kind: "final" as const, ...emit }];
  };

  const joined = (parts: string[]) => parts.filter((t) => t.trim() !== "").join("\n\n");
  const currentText = () => joined(stepText) || lastStepText;

  const onText = (part: JsonObject): AgentEmit[] => {
    const id = str(part, "id") ?? "";
    const text = str(part, "text") ?? "";
    let t = texts.get(id);
    if (!t) {
      t = { started: false, emitted: "", step: stepText, slot: stepText.push("") - 1 };
      texts.set(id, t);
    }
    if (text.trim() === "" || !text.startsWith(t.emitted) || text === t.emitted) return [];
    const add = text.slice(t.emitted.length);
    t.emitted = text;
    t.step[t.slot] = text;
    return output.push(t, add);
  };

  const onTool = (part: JsonObject): AgentEmit[] => {
    const name = str(part, "tool") ?? "tool";
    const state = obj(part, "state");
    const s = str(state, "status");
    const status: StepStatus = s === "completed" ? "done" : s === "error" ? "error" : "running";
    const title = str(state, "title");
    let label = toolLabel(name, state?.input);
    if (label === name && title) label = `${name}: ${oneLine(title)}`;
    // An edit's output is empty; its diff says what it did.
    const text = status === "done"
      ? str(state, "output") || str(obj(state, "metadata"), "diff")
      : status === "error"
      ? str(state, "error")
      : undefined;
    const detail = text ? truncate(text, DETAIL_MAX) : detailOf(state?.input);
    return steps.update({
      kind: "tool",
      toolType: toolTypeFor(name),
      label,
      ...(detail === undefined ? {} : { detail }),
      stepRef: `opencode:part:${str(part, "id") ?? str(part, "callID") ?? ""}`,
      status,
    });
  };

  const onReasoning = (part: JsonObject): AgentEmit[] => {
    const text = str(part, "text") ?? "";
    return steps.update({
      kind: "tool",
      toolType: "thinking",
      label: "Thinking",
      ...(text.trim() === "" ? {} : { detail: truncate(text, DETAIL_MAX) }),
      stepRef: `opencode:part:${str(part, "id") ?? ""}`,
      status: "done",
    });
  };

  const onError = (event: JsonObject, line: string): AgentEmit[] => {
    const error = obj(event, "error");
    const data = obj(error, "data");
    const name = str(error, "name") ?? "Error";
    const message = str(data, "message") ?? (error ? compactJson(error) : name);
    const status = typeof data?.statusCode === "number" ? ` ${data.statusCode}` : "";
    return final(line, {
      text: currentText(),
      error: truncate(message, DETAIL_MAX),
      errorKind: classifyError(`${name}${status}: ${message}`),
    });
  };

  return jsonLineParser((event, line) => {
    const out: AgentEmit[] = [];
    const sid = str(event, "sessionID");
    if (sid && !sessionId) {
      sessionId = sid;
      out.push({ kind: "session", id: sid });
    }
    const part = obj(event, "part");
    switch (event.type) {
      case "step_start":
        lastStepText = joined(stepText) || lastStepText;
        stepText = [];
        break;
      case "text":
        if (part) out.push(...onText(part));
        break;
      case "reasoning":
        if (part) out.push(...onReasoning(part));
        break;
      case "tool_use":
        if (part) out.push(...onTool(part));
        break;
      case "step_finish": {
        lastStepText = joined(stepText) || lastStepText;
        const reason = str(part, "reason");
        if (reason !== "tool-calls") out.push(...final(line, { text: lastStepText }));
        break;
      }
      case "error":
        out.push(...onError(event, line));
        break;
      case "done":
        out.push(...final(line, { text: currentText() }));
        break;
      default:
        out.push(trace(line, `unknown type ${compactJson(event.type ?? null)}`));
    }
    return out;
  });
}

export const opencodeAdapter: ProviderAdapter = {
  provider: "opencode",
  launch(prompt, opts = {}) {
    const args = ["run", "--format", "json"];
    if (opts.resume) args.push("--session", opts.resume);
    args.push("--", prompt);
    return { args };
  },
  createParser: createOpencodeParser,
  classifyError,
};
