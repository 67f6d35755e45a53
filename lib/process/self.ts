/**
 * How Hearth starts another copy of itself (the GPU probe, the smoke decode, a build): the same
 * Deno binary and `main.ts`, from a source checkout (`deno task ...`) and from the single
 * executable alike (its launcher runs `deno run -A --cached-only --config ... main.ts`, and sets
 * `HEARTH_RUNTIME_DIR`, so the child runs from the unpacked copy without touching the network).
 *
 * @example
 * ```ts
 * import { selfCommand } from "./self.ts";
 * const [cmd, ...args] = selfCommand(["gpu-check", "--json"]);
 * const out = await new Deno.Command(cmd, { args, stdout: "piped" }).output();
 * ```
 * @module
 */

const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

/** argv that runs `main.ts <args>` in a new process. */
export function selfCommand(args: string[]): string[] {
  const cached = Deno.env.get("HEARTH_RUNTIME_DIR") ? ["--cached-only"] : [];
  return [
    Deno.execPath(),
    "run",
    "-A",
    ...cached,
    "--config",
    `${ROOT}/deno.json`,
    `${ROOT}/main.ts`,
    ...args,
  ];
}
