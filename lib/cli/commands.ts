/**
 * The one table of Hearth's commands: `main.ts` dispatches from it, `--help` prints its usage lines
 * and an unknown command's error lists its public names, so the three cannot drift apart (as `FLAGS`
 * does for `serve`'s flags).
 *
 * @example
 * ```ts
 * import { COMMANDS, commandUsage, unknownCommand } from "./commands.ts";
 * console.log(COMMANDS.map((c) => c.name).join(" "));
 * console.log(commandUsage().join("\n"));
 * console.log(unknownCommand("frobnicate")); // unknown command "frobnicate" (commands: serve, ...)
 * ```
 * @module
 */

/** One command: its name, its usage lines for `--help`, and whether users call it. */
export interface CommandSpec {
  name: string;
  /** Lines after `hearth ` (the first) or indented under it (the rest), as `--help` prints them. */
  usage: readonly string[];
  /** Internal commands run as child processes of Hearth itself; `--help` does not list them. */
  internal?: true;
}

/** Every command, in the order `--help` lists them. */
export const COMMANDS = [
  { name: "serve", usage: ["serve [flags]"] },
  {
    name: "launch",
    usage: [
      "launch claude|codex|opencode [--host H] [--port P] [--api-key K] [--print] [-- ARGS]",
      "  (your coding-agent CLI on this server's model; `hearth launch --help`)",
    ],
  },
  {
    name: "manager",
    usage: ["manager --workers URL,URL [--port 8002] (see `hearth manager --help`)"],
  },
  {
    name: "rpc-server",
    usage: ["rpc-server [--host 127.0.0.1] [--port 50052] (see `hearth rpc-server --help`)"],
  },
  {
    name: "make-model",
    usage: [
      "make-model --preset tiny|small|1b --out PATH [--embedding] [--dtype f32|f16|q8_0]",
      "  [--seed N] [--chat-format llama3|hermes|mistral|qwen3-coder]",
      "  [--reply-length N] (the random model ends replies after ~N tokens)",
      "  [--arch gemma2|lfm2] [--sliding-window N] (sliding-window or hybrid)",
    ],
  },
  {
    name: "gpu-check",
    usage: [
      "gpu-check [--compute X.Y] [--cuda-driver M.m] [--smoke] [--json] [--data-dir DIR]",
      "  (which llama.cpp build serve would load here, and why)",
    ],
  },
  {
    name: "build-cuda",
    usage: [
      "build-cuda [--arch native|90|80,90] [--jobs N] [--dry-run] [--data-dir DIR]",
      "  (build llama.cpp for this GPU where no prebuilt can run)",
    ],
  },
  // The driver's facts for `lib/gpu/probe.ts`, asked in a child so a broken driver cannot abort.
  { name: "gpu-probe", usage: ["gpu-probe"], internal: true },
  // The smoke decode of `lib/gpu/smoke.ts`, run in a child with the build under test loaded.
  { name: "smoke-decode", usage: ["smoke-decode --model PATH"], internal: true },
] as const satisfies readonly CommandSpec[];

/** A command's name; `main.ts` must have a runner for each (a `Record` over this type). */
export type CommandName = (typeof COMMANDS)[number]["name"];

/** The names a user may type, in `--help` order. */
export function publicCommands(): string[] {
  return COMMANDS.filter((c) => !("internal" in c)).map((c) => c.name);
}

/** `--help`'s usage block: `Usage: hearth serve [flags]` then every other public command. */
export function commandUsage(): string[] {
  const lines: string[] = [];
  for (const c of COMMANDS) {
    if ("internal" in c) continue;
    c.usage.forEach((line, i) => {
      const lead = lines.length === 0 ? "Usage: hearth " : i === 0 ? "       hearth " : "";
      lines.push(i === 0 ? `${lead}${line}` : `${" ".repeat(25)}${line.trimStart()}`);
    });
  }
  return lines;
}

/** The command with this name, if there is one. */
export function findCommand(name: string): CommandName | undefined {
  return COMMANDS.find((c) => c.name === name)?.name;
}

/** The error for a command that does not exist (exit 2). */
export function unknownCommand(name: string): string {
  return `unknown command ${JSON.stringify(name)} (commands: ${
    publicCommands().join(", ")
  }; see --help)`;
}
