/**
 * The evidence of a goal's checkpoint (goals.ts): paths the agent or the user names, each resolved
 * against the session's cwd and refused when it leads outside it; an agent's `/goal done` counts
 * only when every path of the last checkpoint exists there (symlinks may not lead out of it).
 *
 * @example
 * ```ts
 * import { evidencePath, missingEvidence } from "./goal_evidence.ts";
 * evidencePath("/work/repo", "test.log"); // "/work/repo/test.log"
 * missingEvidence("/work/repo", undefined); // "no checkpoint has been recorded yet"
 * ```
 * @module
 */
import { isAbsolute, relative, resolve } from "node:path";
import type { Checkpoint } from "./goals_store.ts";
import { AgentServiceError } from "./sessions.ts";

const bad = (message: string) => new AgentServiceError("BAD_REQUEST", 400, message);

/** Resolves `path` against `cwd` and refuses one that leads outside it. */
export function evidencePath(cwd: string, path: string): string {
  if (!path || path.includes("\0")) throw bad("evidence paths must be non-empty, without NUL");
  const abs = resolve(cwd, path);
  const rel = relative(cwd, abs);
  if (rel.startsWith("..") || isAbsolute(rel)) {
    throw bad(`evidence path ${path} is outside the session's cwd ${cwd}`);
  }
  return abs;
}

/** Why a checkpoint's evidence does not hold (null: every path exists inside `cwd`). */
export function missingEvidence(cwd: string, checkpoint: Checkpoint | undefined): string | null {
  if (!checkpoint) return "no checkpoint has been recorded yet";
  if (checkpoint.evidence.length === 0) {
    return `the last checkpoint ("${checkpoint.summary}") names no evidence files`;
  }
  let realCwd: string;
  try {
    realCwd = Deno.realPathSync(cwd);
  } catch {
    return `the session's cwd ${cwd} no longer exists`;
  }
  const missing: string[] = [];
  for (const p of checkpoint.evidence) {
    try {
      const real = Deno.realPathSync(evidencePath(cwd, p));
      const rel = relative(realCwd, real);
      if (rel.startsWith("..") || isAbsolute(rel)) missing.push(`${p} (outside the cwd)`);
    } catch (err) {
      missing.push(err instanceof AgentServiceError ? `${p} (outside the cwd)` : p);
    }
  }
  return missing.length
    ? `evidence of the last checkpoint does not exist: ${missing.join(", ")}`
    : null;
}
