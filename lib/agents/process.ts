/**
 * Agent CLI processes: spawned straight from an argv array (never a shell) as the leader of their
 * own session and process group (`detached: true` makes Deno call `setsid`), so one signal to the
 * negative pgid reaches everything the CLI started — tool subprocesses, grandchildren that forked
 * off, a dev server a tool left behind. Stdout and stderr are read as lines with a hard cap per line,
 * so a runaway line costs at most `maxLineBytes` of memory.
 *
 * The group is the run's: when the leader exits, whatever is left in the group is stopped too
 * (otherwise a lingering grandchild would also hold the stdout pipe open and the run would never
 * end).
 *
 * @example
 * ```ts
 * import { spawnAgentProcess } from "./process.ts";
 * const p = spawnAgentProcess({
 *   command: "claude", args: ["-p", "hi"], cwd: "/tmp",
 *   onStdoutLine: (l) => console.log(l), onStderrLine: (l) => console.error(l),
 * });
 * setTimeout(() => p.stop(2000), 60_000);
 * console.log(await p.exited); // { code, signal } once the whole group is gone and output drained
 * ```
 * @module
 */

const encoder = new TextEncoder();

/** Default cap on one stdout line; longer lines are cut (see `onOverlong`). */
export const MAX_LINE_BYTES = 1 << 20;
/** How much of a cut line is kept to describe it. */
const OVERLONG_HEAD_BYTES = 2000;

export type ExitInfo = { code: number; signal: Deno.Signal | null };

export type SpawnSpec = {
  command: string;
  args: string[];
  cwd: string;
  /** Added to (and overriding) the server's own environment. */
  env?: Record<string, string>;
  /** Names removed from the server's environment (before `env` is applied). */
  unsetEnv?: string[];
  /** Written to stdin at start. */
  stdin?: string;
  /** Keep stdin open after `stdin` for `write` (streamed input); otherwise it is closed at once. */
  keepStdinOpen?: boolean;
  onStdoutLine: (line: string) => void;
  onStderrLine: (line: string) => void;
  /** A stdout line over `maxLineBytes`: its first bytes and its full length. Not given: dropped. */
  onOverlong?: (head: string, bytes: number) => void;
  maxLineBytes?: number;
  /** How long leftovers of the group get after SIGTERM once the leader has exited (default 3 s). */
  graceMs?: number;
};

export type AgentProcess = {
  pid: number;
  /** Resolves once the leader has exited, its group is gone and both pipes are drained. */
  exited: Promise<ExitInfo>;
  /** Writes to stdin; false when stdin is closed or the process is gone. */
  write(text: string): Promise<boolean>;
  stdinOpen(): boolean;
  closeStdin(): Promise<void>;
  /** SIGTERM to the whole group, SIGKILL after `graceMs`; resolves with `exited`. */
  stop(graceMs: number): Promise<ExitInfo>;
};

/** Sends `signal` to every process of group `pgid`; false when none is left. */
export function signalGroup(pgid: number, signal: Deno.Signal): boolean {
  try {
    Deno.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** True while `pid` exists and is not a zombie (a killed orphan waits for PID 1 to reap it). */
export function processAlive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    if (Deno.build.os === "linux") return false;
    try {
      Deno.kill(pid, "SIGCONT");
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * The kernel's start time of `pid` (clock ticks since boot), or null where /proc is missing. With
 * the pid it names one process for good: a stored pid can be checked before it is signalled, in
 * case the number has since been reused.
 */
export function processStartTicks(pid: number): string | null {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

/** Resolves true when `p` settles within `ms`, false otherwise; never leaves a timer behind. */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<false>((r) => timer = setTimeout(() => r(false), ms));
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Reads `stream` as `\n`-separated lines (a trailing `\r` is dropped, the partial last line at EOF
 * is delivered too). A line longer than `maxLineBytes` is not buffered: only its head is kept and
 * it goes to `onOverlong` instead of `onLine`.
 */
export async function readLines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
  opts: { maxLineBytes?: number; onOverlong?: (head: string, bytes: number) => void } = {},
): Promise<void> {
  const max = opts.maxLineBytes ?? MAX_LINE_BYTES;
  const decoder = new TextDecoder();
  let parts: Uint8Array[] = [];
  let size = 0;
  let overlong: { head: Uint8Array; bytes: number } | null = null;

  const concat = (chunks: Uint8Array[], n: number) => {
    if (chunks.length === 1) return chunks[0];
    const out = new Uint8Array(n);
    let at = 0;
    for (const c of chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  };
  const add = (piece: Uint8Array) => {
    if (piece.length === 0) return;
    if (overlong) {
      overlong.bytes += piece.length;
      return;
    }
    if (size + piece.length > max) {
      const all = concat([...parts, piece], size + piece.length);
      overlong = { head: all.slice(0, OVERLONG_HEAD_BYTES), bytes: all.length };
      parts = [];
      size = 0;
      return;
    }
    parts.push(piece);
    size += piece.length;
  };
  const finish = () => {
    if (overlong) {
      const { head, bytes } = overlong;
      overlong = null;
      opts.onOverlong?.(decoder.decode(head), bytes);
      return;
    }
    let bytes = concat(parts, size);
    parts = [];
    size = 0;
    if (bytes.length && bytes[bytes.length - 1] === 13) bytes = bytes.subarray(0, -1);
    onLine(decoder.decode(bytes));
  };

  for await (const chunk of stream) {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) {
        add(chunk.subarray(start));
        break;
      }
      add(chunk.subarray(start, nl));
      finish();
      start = nl + 1;
    }
  }
  if (size > 0 || overlong) finish();
}

/**
 * Starts `command` with `args` in `cwd` as a new process group. Throws when it cannot be started
 * (no such command, not executable).
 */
export function spawnAgentProcess(spec: SpawnSpec): AgentProcess {
  const wantStdin = spec.stdin !== undefined || spec.keepStdinOpen === true;
  let env = spec.env;
  const clearEnv = (spec.unsetEnv?.length ?? 0) > 0;
  if (clearEnv) {
    const inherited = Deno.env.toObject();
    for (const name of spec.unsetEnv!) delete inherited[name];
    env = { ...inherited, ...spec.env };
  }
  const child = new Deno.Command(spec.command, {
    args: spec.args,
    cwd: spec.cwd,
    env,
    clearEnv,
    stdin: wantStdin ? "piped" : "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const pid = child.pid;

  let writer: WritableStreamDefaultWriter<Uint8Array> | null = wantStdin
    ? child.stdin.getWriter()
    : null;
  // A CLI that exits (or closes stdin) while we write makes the write reject: that is not an error
  // of the run, it only means no more input is taken.
  const writeRaw = async (text: string) => {
    const w = writer;
    if (!w) return false;
    try {
      await w.write(encoder.encode(text));
      return true;
    } catch {
      if (writer === w) writer = null;
      return false;
    }
  };
  const closeStdin = async () => {
    const w = writer;
    if (!w) return;
    writer = null;
    try {
      await w.close();
    } catch { /* already gone */ }
  };
  if (spec.stdin !== undefined) void writeRaw(spec.stdin);
  if (wantStdin && !spec.keepStdinOpen) void closeStdin();

  const stdoutDone = readLines(child.stdout, spec.onStdoutLine, {
    maxLineBytes: spec.maxLineBytes,
    onOverlong: spec.onOverlong,
  }).catch(() => {});
  const stderrDone = readLines(child.stderr, spec.onStderrLine, {
    maxLineBytes: 64 * 1024,
    onOverlong: (head) => spec.onStderrLine(head),
  }).catch(() => {});
  const pipesDone = Promise.all([stdoutDone, stderrDone]);

  let killTimer: ReturnType<typeof setTimeout> | undefined;
  let leaderExited = false;
  const status = child.status.then((s) => {
    leaderExited = true;
    return s;
  });

  const grace = spec.graceMs ?? 3000;
  const exited = (async (): Promise<ExitInfo> => {
    const s = await status;
    await closeStdin();
    // What the leader leaves behind in its group dies with it; the pipes then reach EOF. Whatever
    // is still there once they have (or after the grace period) is killed outright.
    if (signalGroup(pid, "SIGTERM")) {
      await settlesWithin(pipesDone, grace);
      signalGroup(pid, "SIGKILL");
    }
    if (!(await settlesWithin(pipesDone, 2000))) {
      // Something escaped the group (its own setsid) but holds our pipes: stop reading.
      await Promise.allSettled([child.stdout.cancel(), child.stderr.cancel()]);
      await pipesDone;
    }
    clearTimeout(killTimer);
    return { code: s.code, signal: s.signal };
  })();

  return {
    pid,
    exited,
    write: (text) => writeRaw(text),
    stdinOpen: () => writer !== null,
    closeStdin,
    stop(graceMs) {
      if (!leaderExited) {
        signalGroup(pid, "SIGTERM");
        clearTimeout(killTimer);
        killTimer = setTimeout(() => signalGroup(pid, "SIGKILL"), graceMs);
      }
      return exited;
    },
  };
}
