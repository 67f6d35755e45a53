/**
 * The real agent CLIs from npm, pinned (`@anthropic-ai/claude-code`, `@openai/codex`), installed
 * once per machine into the source cache (npm's own cache serves repeats), and the environment
 * that runs them hermetically: a HOME of their own, nothing but PATH and a locale inherited.
 * The test setup installs them before the suite; a file run on its own installs them itself,
 * under a lock, so parallel files never run two `npm install`s into one directory.
 *
 * @example
 * ```ts
 * import { agentCliBin, isolatedCliEnv } from "./agent_clis.ts";
 * const bin = await agentCliBin(); // .../node_modules/.bin with `claude` and `codex`
 * const env = isolatedCliEnv(await Deno.makeTempDir());
 * await new Deno.Command(`${bin}/claude`, { args: ["--version"], env, clearEnv: true }).output();
 * ```
 * @module
 */
import { sourceCacheDir } from "./llama_source.ts";

/** The pinned CLI packages, `name@version`. */
export const AGENT_CLIS = ["@anthropic-ai/claude-code@2.1.330", "@openai/codex@0.169.0"];

async function installed(dir: string): Promise<boolean> {
  try {
    await Deno.stat(`${dir}/node_modules/.bin/claude`);
    await Deno.stat(`${dir}/node_modules/.bin/codex`);
    for (const spec of AGENT_CLIS) {
      const at = spec.lastIndexOf("@");
      const pkg = JSON.parse(
        await Deno.readTextFile(`${dir}/node_modules/${spec.slice(0, at)}/package.json`),
      );
      if (pkg.version !== spec.slice(at + 1)) return false;
    }
    return true;
  } catch {
    return false;
  }
}

/**
 * The `node_modules/.bin` directory holding `claude` and `codex`, installing the pinned versions
 * first when they are missing (or another version is there). One process installs at a time
 * (an exclusive lock on `agent-clis.lock`); the others wait and find them installed.
 */
export async function agentCliBin(): Promise<string> {
  const dir = `${sourceCacheDir()}/agent-clis`;
  const bin = `${dir}/node_modules/.bin`;
  if (await installed(dir)) return bin;
  await Deno.mkdir(dir, { recursive: true });
  using lock = await Deno.open(`${dir}.lock`, { create: true, write: true });
  await lock.lock(true);
  if (await installed(dir)) return bin;
  await Deno.writeTextFile(`${dir}/package.json`, '{"private": true}\n');
  const out = await new Deno.Command("npm", {
    args: ["install", "--no-audit", "--no-fund", "--loglevel=error", ...AGENT_CLIS],
    cwd: dir,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `npm install ${AGENT_CLIS.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
  return bin;
}

/** A minimal environment for a CLI run with `clearEnv`: its own HOME, PATH and a locale. */
export function isolatedCliEnv(home: string): Record<string, string> {
  return {
    HOME: home,
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    LANG: "C.UTF-8",
  };
}
