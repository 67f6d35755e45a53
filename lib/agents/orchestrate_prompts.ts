/**
 * What an orchestration (orchestrate.ts) says to its agents and reads back from them: the
 * planner's, workers', fixers' and checker's prompts, each within a byte budget far below one argv
 * string, the parse of a plan (a numbered list) and of a verdict (`PASS` or `FAIL: WHY` on the
 * first line), and the short account of the steps a run ends with when there is no checker's
 * answer.
 *
 * @example
 * ```ts
 * import { parsePlan, parseVerdict } from "./orchestrate_prompts.ts";
 * parsePlan("1. write the parser\n2) test it"); // ["write the parser", "test it"]
 * parseVerdict("**FAIL**: no tests"); // { pass: false, reason: "no tests" }
 * ```
 * @module
 */
import type { OrchestrationJson, OrchestrationStep } from "./orchestrate_store.ts";
import { MAX_TEXT_BYTES } from "./sessions.ts";

export const MAX_STEPS = 20;
/** What a run keeps of a worker's or the checker's answer. */
export const ANSWER_CHARS = 4000;
export const STEP_TEXT_CHARS = 1000;

// Prompt budgets in UTF-8 bytes. A prompt may travel as one argv string (MAX_TEXT_BYTES), and
// the service may put memory notes before it, so every prompt but the planner's stays far below.
const PLANNER_TASK_BYTES = MAX_TEXT_BYTES - 4096;
const TASK_BYTES = 24 * 1024;
const PLAN_BYTES = 12 * 1024;
const ANSWERS_BYTES = 32 * 1024;
const REASON_BYTES = 2048;
const STEP_LABEL_BYTES = 200;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const cut = (s: string, n: number) => (s.length > n ? s.slice(0, n) + "…" : s);

/** Cuts `s` to at most `max` UTF-8 bytes (plus a marker), at a character boundary. */
function cutBytes(s: string, max: number): string {
  const bytes = encoder.encode(s);
  if (bytes.length <= max) return s;
  let end = max;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return `${decoder.decode(bytes.subarray(0, end))}… [cut: ${bytes.length - end} more bytes]`;
}

export const firstLine = (s: string) => s.split("\n").map((l) => l.trim()).find((l) => l) ?? "";

/** The steps of a planner's answer: lines like `1. do this` or `2) do that`, renumbered. */
export function parsePlan(answer: string): string[] {
  const steps: string[] = [];
  for (const line of answer.split("\n")) {
    const m = /^\s*(\d+)[.)]\s+(.+)$/.exec(line);
    const text = m?.[2].trim();
    if (text) steps.push(cut(text, STEP_TEXT_CHARS));
  }
  return steps;
}

/**
 * The checker's verdict from its first non-empty line: `PASS`, or `FAIL: WHY` / `FAIL WHY`
 * (markdown emphasis around it is tolerated); null when that line is neither.
 */
export function parseVerdict(answer: string): { pass: boolean; reason?: string } | null {
  const line = firstLine(answer).replace(/^[#>*_`\s]+/, "").replace(/(\*\*|__|`)+$/, "").trim();
  if (/^PASS\b/i.test(line)) return { pass: true };
  const m = /^FAIL\b\**\s*[:\-–—]?\s*(.*)$/i.exec(line);
  if (!m) return null;
  const reason = m[1].replace(/^\**\s*/, "").trim();
  return { pass: false, reason: cut(reason || "no reason given", REASON_BYTES) };
}

const planText = (r: OrchestrationJson) =>
  cutBytes(
    r.steps.filter((s) => s.round === 1).map((s) => `${s.n}. ${s.text}`).join("\n"),
    PLAN_BYTES,
  );

/** Each step's answer, the whole bounded by `budget` bytes however many steps there are. */
function answersText(steps: OrchestrationStep[], budget: number): string {
  const each = Math.max(200, Math.floor(budget / Math.max(1, steps.length)) - STEP_LABEL_BYTES);
  return steps.map((s) => {
    const label = cutBytes(s.text, STEP_LABEL_BYTES);
    const how = s.status === "done" ? "" : `, ${s.status}${s.error ? `: ${s.error}` : ""}`;
    const answer = s.answer?.trim() ? s.answer : "(no answer)";
    return cutBytes(`Step ${s.n} (${label}; by ${s.agent}${how}):\n${answer}`, each);
  }).join("\n\n");
}

export function plannerPrompt(task: string): string {
  return [
    "You are the planner of a task that other agents will carry out, each step in a session of " +
    "its own and possibly at the same time as the others.",
    "",
    "Task:",
    cutBytes(task, PLANNER_TASK_BYTES),
    "",
    `Split the task into at most ${MAX_STEPS} steps that can be done independently. Answer with ` +
    'a numbered list, one step a line (like "1. write the parser"), and nothing else.',
  ].join("\n");
}

export function workerPrompt(r: OrchestrationJson, s: OrchestrationStep): string {
  const of = r.steps.filter((x) => x.round === 1).length;
  return [
    "You are a worker on a task shared between several agents; other workers do the other steps.",
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    `Your step ${s.n} of ${of}: ${s.text}`,
    "",
    "Do this step only, in the current directory, then answer with a short summary of what you did.",
  ].join("\n");
}

export function fixPrompt(r: OrchestrationJson, s: OrchestrationStep): string {
  const earlier = r.steps.filter((x) => x.round < s.round);
  return [
    `You are fixing the work on a task (round ${s.round} of ${r.maxRounds}): a checker found ` +
    "fault with what the workers did.",
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    "The checker said:",
    cutBytes(r.verdict?.reason ?? s.text, REASON_BYTES),
    "",
    "What the workers answered before:",
    answersText(earlier, ANSWERS_BYTES),
    "",
    "Fix what the checker found, in the current directory, then answer with a short summary of " +
    "what you did.",
  ].join("\n");
}

/** The checker's prompt: task, plan and every step's answer, far below one argv string. */
export function checkerPrompt(r: OrchestrationJson): string {
  return [
    `You are the checker of a task that other agents worked on (round ${r.round} of ` +
    `${r.maxRounds}).`,
    "",
    "Task:",
    cutBytes(r.task, TASK_BYTES),
    "",
    "Plan:",
    planText(r),
    "",
    "What the workers answered:",
    answersText(r.steps, ANSWERS_BYTES),
    "",
    "Judge whether the task is done, looking at the files in the current directory. Answer PASS, " +
    "or FAIL: WHY (what is missing or wrong), on your first line; details may follow on the next " +
    "lines.",
  ].join("\n");
}

/** A short account of the steps, for `orchestrate_done` when there is no checker's answer. */
export function summary(r: { steps: OrchestrationStep[] }): string {
  if (r.steps.length === 0) return "no steps were planned";
  return cut(
    r.steps.map((s) => {
      const said = s.answer ? `: ${cut(firstLine(s.answer), 200)}` : "";
      const err = s.error ? ` (${cut(s.error, 200)})` : "";
      return `${s.n}. [${s.status}] ${cut(s.text, 200)}${said}${err}`;
    }).join("\n"),
    ANSWER_CHARS,
  );
}
