/**
 * The lines an agent speaks to its goal with (docs/ARCHITECTURE.md, "Goals, orchestration, memory"), read out of a finished answer in order:
 * `/goal checkpoint SUMMARY [evidence: PATH, ...]`, `/goal done`, `/goal pause REASON`,
 * `/goal cancel REASON`. A directive must stand on a line of its own (leading spaces, list
 * bullets, `>` quotes and backticks around it are tolerated, since models put them there); text
 * that merely mentions `/goal` mid-sentence is not a directive.
 *
 * @example
 * ```ts
 * import { parseGoalLines } from "./goal_lines.ts";
 * parseGoalLines("Wrote it.\n/goal checkpoint parser works [evidence: src/p.ts, test.log]\n/goal done");
 * // [{ kind: "checkpoint", summary: "parser works", evidence: ["src/p.ts", "test.log"] },
 * //  { kind: "done" }]
 * ```
 * @module
 */

export type GoalLine =
  | { kind: "checkpoint"; summary: string; evidence: string[] }
  | { kind: "done" }
  | { kind: "pause"; reason: string }
  | { kind: "cancel"; reason: string };

const DIRECTIVE = /^(?:[-*>]\s*)?`*\s*\/goal\s+(checkpoint|done|pause|cancel)\b\s*(.*?)\s*`*\s*$/i;
const EVIDENCE = /^(.*?)\s*\[?\s*evidence\s*:\s*(.*?)\s*\]?\s*$/i;
/** Bounds on what one answer can put in the goal record. */
const MAX_SUMMARY_CHARS = 2000;
const MAX_EVIDENCE = 20;
const MAX_LINES = 50;

/** Splits an evidence list: commas, with paths that are quoted or in backticks unwrapped. */
export function splitEvidence(list: string): string[] {
  return list.split(",")
    .map((p) => p.trim().replace(/^[`'"]+|[`'"]+$/g, "").trim())
    .filter((p) => p.length > 0)
    .slice(0, MAX_EVIDENCE);
}

/** The goal directives of one answer, in the order they were written. */
export function parseGoalLines(text: string): GoalLine[] {
  const out: GoalLine[] = [];
  for (const raw of text.split("\n")) {
    const m = DIRECTIVE.exec(raw.trim());
    if (!m) continue;
    const kind = m[1].toLowerCase() as GoalLine["kind"];
    const rest = m[2];
    if (kind === "checkpoint") {
      const e = EVIDENCE.exec(rest);
      const summary = (e ? e[1] : rest).slice(0, MAX_SUMMARY_CHARS);
      out.push({ kind, summary, evidence: e ? splitEvidence(e[2]) : [] });
    } else if (kind === "done") {
      out.push({ kind });
    } else {
      out.push({ kind, reason: rest.slice(0, MAX_SUMMARY_CHARS) });
    }
    if (out.length >= MAX_LINES) break;
  }
  return out;
}
