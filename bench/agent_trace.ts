/**
 * `deno task bench --agent-trace FILE [--sessions N]`: replays a recorded agent session (JSON
 * lines `{"t", "route", "body"}`, written by `tools/record_trace.ts`) against a Hearth server and
 * measures how much of each turn's prompt the server serves from its cache.
 *
 * `--sessions N` copies of the trace run concurrently, each with a line `session k` put in front
 * of its system prompt so that no copy can reuse another's prefix; a session's turns go in order,
 * each after the previous response ended. Generation is capped (`--max-tokens`, default 16) so a
 * random model's output does not dominate. Per turn: prompt, cached and new tokens (from the
 * response's usage) and the client-side TTFT (first delta event). Overall: the share of prompt
 * tokens served from cache on turns after each session's first, and warm-turn TTFT next to the
 * time the server needs to prefill just the new tokens, at a prefill speed measured once before
 * the replay by uncached requests of known length. `--serial` sends one request at a time, the
 * sessions taking turns, so no turn waits behind another. A reference replay follows (one more
 * session, alone: its warm turns find their prefix in their slot), and each warm turn's TTFT is
 * set against the same turn's there: the goal is within 1.5x plus 100 ms.
 *
 * @example
 * ```ts
 * import { agentTraceMain } from "./agent_trace.ts";
 * await agentTraceMain(["--agent-trace", "bench/traces/codex-fix-add.jsonl", "--sessions", "4"]);
 * ```
 * @module
 */
import { startServer } from "../tools/server_process.ts";
import type { TraceLine } from "../tools/record_trace.ts";

export type { TraceLine };

/** A trace's lines, validated. Blank lines are skipped; anything else malformed is an error. */
export function parseTrace(text: string): TraceLine[] {
  const out: TraceLine[] = [];
  for (const [i, raw] of text.split("\n").entries()) {
    if (!raw.trim()) continue;
    let v: unknown;
    try {
      v = JSON.parse(raw);
    } catch (e) {
      throw new Error(`trace line ${i + 1}: not JSON (${(e as Error).message})`);
    }
    const l = v as Partial<TraceLine>;
    if (
      !l || typeof l !== "object" || typeof l.t !== "number" || !(l.t >= 0) ||
      typeof l.route !== "string" || !l.route.startsWith("/") || typeof l.body !== "object" ||
      l.body === null
    ) {
      throw new Error(
        `trace line ${i + 1}: expected {"t": seconds, "route": "/...", "body": {...}}`,
      );
    }
    out.push({ t: l.t, route: l.route, body: l.body });
  }
  if (!out.length) throw new Error("the trace holds no requests");
  return out;
}

type Json = Record<string, unknown>;

/** `text` with the session line in front. */
function tag(session: number, text: string): string {
  return `session ${session}\n${text}`;
}

/** The first text block of `content` prefixed, or a text block added in front. */
function tagBlocks(session: number, blocks: Json[], textType: string): Json[] {
  const i = blocks.findIndex((b) => b.type === textType && typeof b.text === "string");
  if (i < 0) return [{ type: textType, text: tag(session, "") }, ...blocks];
  return blocks.map((b, j) => j === i ? { ...b, text: tag(session, b.text as string) } : b);
}

/**
 * `body` (of `route`) with `session k` at the start of its system prompt: Anthropic `system`,
 * Responses `instructions`, the chat's first system/developer message, a completion's prompt.
 */
export function prefixSession(route: string, body: Json, session: number): Json {
  if (route === "/v1/messages") {
    const s = body.system;
    if (typeof s === "string") return { ...body, system: tag(session, s) };
    if (Array.isArray(s)) return { ...body, system: tagBlocks(session, s, "text") };
    return { ...body, system: tag(session, "") };
  }
  if (route === "/v1/responses") {
    const s = typeof body.instructions === "string" ? body.instructions : "";
    return { ...body, instructions: tag(session, s) };
  }
  if (route === "/v1/chat/completions") {
    const msgs = Array.isArray(body.messages) ? body.messages as Json[] : [];
    const first = msgs[0];
    if (first && (first.role === "system" || first.role === "developer")) {
      const c = first.content;
      const content = typeof c === "string"
        ? tag(session, c)
        : Array.isArray(c)
        ? tagBlocks(session, c, "text")
        : tag(session, "");
      return { ...body, messages: [{ ...first, content }, ...msgs.slice(1)] };
    }
    return { ...body, messages: [{ role: "system", content: tag(session, "") }, ...msgs] };
  }
  if (route === "/v1/completions" && typeof body.prompt === "string") {
    return { ...body, prompt: tag(session, body.prompt) };
  }
  throw new Error(`cannot give ${route} a session prefix`);
}

/** `body` streamed, with its output capped at `maxTokens` and usage in the stream. */
export function replayBody(
  route: string,
  body: Json,
  session: number,
  maxTokens: number,
  model?: string,
): Json {
  const b: Json = { ...prefixSession(route, body, session), stream: true };
  if (model) b.model = model;
  if (route === "/v1/responses") {
    b.max_output_tokens = maxTokens;
    // Replays never read a stored response back.
    b.store = false;
  } else {
    delete b.max_completion_tokens;
    b.max_tokens = maxTokens;
  }
  if (route === "/v1/chat/completions" || route === "/v1/completions") {
    b.stream_options = { include_usage: true };
  }
  return b;
}

/** One replayed turn. */
export type TurnResult = {
  session: number;
  turn: number;
  route: string;
  status: number;
  promptTokens: number;
  cachedTokens: number;
  newTokens: number;
  outputTokens: number;
  ttftMs: number | null;
  totalMs: number;
  error?: string;
};

type Usage = { prompt: number; cached: number; output: number };

/** Prompt, cached and output tokens from any of the three dialects' usage objects. */
export function readUsage(u: Json): Usage | undefined {
  if (typeof u.input_tokens === "number" && "cache_read_input_tokens" in u) {
    const cached = Number(u.cache_read_input_tokens ?? 0);
    return { prompt: u.input_tokens + cached, cached, output: Number(u.output_tokens ?? 0) };
  }
  if (typeof u.input_tokens === "number") {
    const d = u.input_tokens_details as Json | undefined;
    return {
      prompt: u.input_tokens,
      cached: Number(d?.cached_tokens ?? 0),
      output: Number(u.output_tokens ?? 0),
    };
  }
  if (typeof u.prompt_tokens === "number") {
    const d = u.prompt_tokens_details as Json | undefined;
    return {
      prompt: u.prompt_tokens,
      cached: Number(d?.cached_tokens ?? 0),
      output: Number(u.completion_tokens ?? 0),
    };
  }
  return undefined;
}

/** Whether an SSE payload carries generated output (the TTFT event). */
function isDelta(ev: Json): boolean {
  const type = typeof ev.type === "string" ? ev.type : "";
  // A block starts with its first output (a tool_use block as soon as the call's name is known).
  if (type === "content_block_delta" || type === "content_block_start") return true;
  if (type.startsWith("response.") && type.endsWith(".delta")) return true;
  const choices = ev.choices as Json[] | undefined;
  if (Array.isArray(choices) && choices.length) {
    const c = choices[0];
    if (typeof c.text === "string" && c.text) return true;
    const d = c.delta as Json | undefined;
    return !!d && Object.entries(d).some(([k, v]) => k !== "role" && v !== null && v !== "");
  }
  return false;
}

/** The usage objects an SSE payload carries (Anthropic's sit in `message` or at the top). */
function usagesIn(ev: Json): Json[] {
  const out: Json[] = [];
  for (const holder of [ev, ev.message, ev.response] as (Json | undefined)[]) {
    const u = holder?.usage;
    if (u && typeof u === "object") out.push(u as Json);
  }
  return out;
}

/** Sends one streamed turn and reads it to the end. */
export async function runTurn(
  url: string,
  route: string,
  body: Json,
  ids: { session: number; turn: number },
  headers: Record<string, string> = {},
): Promise<TurnResult> {
  const t0 = performance.now();
  const base = { ...ids, route, promptTokens: 0, cachedTokens: 0, newTokens: 0, outputTokens: 0 };
  const res = await fetch(`${url}${route}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  if (!res.ok || !res.body) {
    const error = (await res.text()).slice(0, 300);
    return { ...base, status: res.status, ttftMs: null, totalMs: performance.now() - t0, error };
  }
  let ttft: number | null = null;
  let usage: Usage | undefined;
  let error: string | undefined;
  let buf = "";
  const dec = new TextDecoder();
  const take = (line: string) => {
    if (!line.startsWith("data:")) return;
    const data = line.slice(5).trim();
    if (!data || data === "[DONE]") return;
    let ev: Json;
    try {
      ev = JSON.parse(data);
    } catch {
      return;
    }
    if (ttft === null && isDelta(ev)) ttft = performance.now() - t0;
    if (ev.type === "error" || ev.type === "response.failed") error = JSON.stringify(ev);
    for (const u of usagesIn(ev)) usage = readUsage(u) ?? usage;
  };
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      take(buf.slice(0, nl).replace(/\r$/, ""));
      buf = buf.slice(nl + 1);
    }
  }
  take(buf);
  const u = usage ?? { prompt: 0, cached: 0, output: 0 };
  const problem = error ?? (usage ? undefined : "no usage in the stream");
  return {
    ...base,
    status: res.status,
    promptTokens: u.prompt,
    cachedTokens: u.cached,
    newTokens: u.prompt - u.cached,
    outputTokens: u.output,
    ttftMs: ttft,
    totalMs: performance.now() - t0,
    ...(problem ? { error: problem } : {}),
  };
}

/** What `replayTrace` needs. */
export type ReplayOptions = {
  url: string;
  trace: TraceLine[];
  sessions: number;
  maxTokens: number;
  /** Wait for each line's recorded `t` (from the session's start) before sending it. */
  honourGaps?: boolean;
  /**
   * One request at a time, the sessions taking turns (turn 0 of each, then turn 1 of each...):
   * every session's prefix leaves the slots between its turns when sessions outnumber them, and
   * no turn waits in the queue behind another.
   */
  serial?: boolean;
  /** The first session's number (the `session k` line), so several replays stay apart. */
  firstSession?: number;
  /** The served model's id, put in each body (a trace names the model it was recorded with). */
  model?: string;
  headers?: Record<string, string>;
  /** Called as each turn ends. */
  onTurn?: (r: TurnResult) => void;
};

/** Replays `sessions` interleaved copies of the trace; the turns in the order they ended. */
export async function replayTrace(o: ReplayOptions): Promise<TurnResult[]> {
  const done: TurnResult[] = [];
  const first = o.firstSession ?? 0;
  if (o.serial) {
    for (const [turn, line] of o.trace.entries()) {
      for (let k = 0; k < o.sessions; k++) {
        const body = replayBody(line.route, line.body as Json, first + k, o.maxTokens, o.model);
        const r = await runTurn(o.url, line.route, body, { session: first + k, turn }, o.headers);
        done.push(r);
        o.onTurn?.(r);
      }
    }
    return done;
  }
  const one = async (session: number) => {
    const start = performance.now();
    for (const [turn, line] of o.trace.entries()) {
      if (o.honourGaps) {
        const wait = line.t * 1000 - (performance.now() - start);
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      const body = replayBody(line.route, line.body as Json, session, o.maxTokens, o.model);
      const r = await runTurn(o.url, line.route, body, { session, turn }, o.headers);
      done.push(r);
      o.onTurn?.(r);
    }
  };
  await Promise.all(Array.from({ length: o.sessions }, (_, k) => one(first + k)));
  return done;
}

/** A prefill speed: prompt tokens and the TTFT of one uncached streamed request. */
export type PrefillProbe = { promptTokens: number; ttftMs: number; tokensPerSecond: number };

/**
 * The server's prefill speed for this model: uncached `/v1/completions` requests of about
 * `words` words (a random prefix each, so nothing is reused), one token generated; the best
 * of `runs` after one warm-up.
 */
export async function probePrefill(
  url: string,
  words = 2000,
  runs = 2,
  headers: Record<string, string> = {},
): Promise<PrefillProbe> {
  let best: PrefillProbe | undefined;
  for (let i = 0; i <= runs; i++) {
    const salt = crypto.randomUUID();
    const prompt = `${salt}\n` + Array.from({ length: words }, (_, j) => `w${j % 97}`).join(" ");
    const r = await runTurn(
      url,
      "/v1/completions",
      { prompt, max_tokens: 1, stream: true, stream_options: { include_usage: true } },
      { session: -1, turn: i },
      headers,
    );
    if (r.error) throw new Error(`prefill probe failed: ${r.error}`);
    // A single token can be text-less (part of a UTF-8 character): then the whole request, which
    // is the prefill and one decode step, stands for its TTFT.
    const ms = r.ttftMs ?? r.totalMs;
    const p = { promptTokens: r.newTokens, ttftMs: ms, tokensPerSecond: r.newTokens / (ms / 1000) };
    if (i > 0 && (!best || p.tokensPerSecond > best.tokensPerSecond)) best = p;
  }
  return best!;
}

function quantile(xs: number[], q: number): number | null {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

/** The overall figures of a replay. */
export function summarize(
  turns: TurnResult[],
  prefill?: PrefillProbe,
  reference?: TurnResult[],
) {
  const ok = turns.filter((t) => !t.error);
  const warm = ok.filter((t) => t.turn > 0);
  const prompt = warm.reduce((n, t) => n + t.promptTokens, 0);
  const cached = warm.reduce((n, t) => n + t.cachedTokens, 0);
  const ttft = warm.map((t) => t.ttftMs).filter((x): x is number => x !== null);
  // What the warm turns' TTFT would be if the server prefilled only their new tokens.
  const timed = warm.filter((t) => t.ttftMs !== null);
  const newPrefill = prefill ? timed.map((t) => t.newTokens / prefill.tokensPerSecond * 1000) : [];
  const mean = (xs: number[]) => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
  const ttftMean = mean(ttft);
  const newMean = mean(newPrefill);
  return {
    turns: turns.length,
    failedTurns: turns.length - ok.length,
    warmTurns: warm.length,
    warmPromptTokens: prompt,
    warmCachedTokens: cached,
    cacheShare: prompt ? cached / prompt : null,
    allPromptTokens: ok.reduce((n, t) => n + t.promptTokens, 0),
    allCachedTokens: ok.reduce((n, t) => n + t.cachedTokens, 0),
    warmTtftP50Ms: quantile(ttft, 0.5),
    warmTtftP95Ms: quantile(ttft, 0.95),
    warmTtftMeanMs: ttftMean,
    warmNewPrefillP50Ms: quantile(newPrefill, 0.5),
    warmNewPrefillMeanMs: newMean,
    warmTtftOverNewPrefill: ttftMean !== null && newMean ? ttftMean / newMean : null,
    ...(reference ? { reference: againstReference(warm, reference) } : {}),
  };
}

/**
 * Each warm turn's TTFT against the same turn's in the reference replay (one session alone,
 * its prefix always in its slot, so only its new tokens are computed), and the goal of issue 27:
 * within 1.5x that time plus 100 ms.
 */
function againstReference(warm: TurnResult[], reference: TurnResult[]) {
  const refTtft = new Map<number, number>();
  for (const r of reference) if (r.turn > 0 && r.ttftMs !== null) refTtft.set(r.turn, r.ttftMs);
  const pairs = warm.flatMap((t) => {
    const ref = refTtft.get(t.turn);
    return t.ttftMs !== null && ref !== undefined ? [{ ttft: t.ttftMs, ref }] : [];
  });
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const ttft = sum(pairs.map((p) => p.ttft));
  const ref = sum(pairs.map((p) => p.ref));
  return {
    turns: pairs.length,
    refTtftMeanMs: pairs.length ? ref / pairs.length : null,
    ttftMeanMs: pairs.length ? ttft / pairs.length : null,
    ttftOverRef: ref ? ttft / ref : null,
    // The goal on the means, and how many single turns meet it.
    meanWithinGoal: pairs.length > 0 && ttft / pairs.length <= 1.5 * ref / pairs.length + 100,
    turnsWithinGoal: pairs.filter((p) => p.ttft <= 1.5 * p.ref + 100).length,
  };
}

const USAGE = `usage: deno task bench --agent-trace FILE [options]   replay a recorded agent session
  --sessions N          interleaved copies of the trace, each with its own prefix (default 1)
  --max-tokens N        output cap per turn, replacing the recorded one (default 16)
  --gaps                wait for each request's recorded time t before sending it
  --serial              one request at a time, the sessions taking turns (no queueing; each
                        prefix leaves the slots between its turns when sessions > --max-batch)
  --no-reference        skip the reference replay (one more session alone, whose warm turns
                        find their prefix in their slot: the time to compute new tokens only)
  --url URL             replay against this server instead of starting one
  --api-key KEY         with --url: the server's key
  --model PATH          GGUF for the started server (default: the server's demo model)
  --server-arg ARG      one more \`hearth serve\` argument (repeatable; e.g. --cache-ram=4)
                        (defaults: --max-batch = sessions, --max-seq-len 32768)
  --probe-words N       length of the prefill-speed probe's prompt, in words (default 2000)
  --no-prefill-probe    skip measuring the prefill speed
  --json-out FILE       write the JSON here instead of bench/results/agent-trace-<date>.json`;

type Args = {
  trace: string;
  sessions: number;
  maxTokens: number;
  gaps: boolean;
  serial: boolean;
  reference: boolean;
  url?: string;
  apiKey?: string;
  model?: string;
  serverArgs: string[];
  probe: boolean;
  probeWords: number;
  jsonOut?: string;
};

function parseArgs(argv: string[]): Args {
  const a: Partial<Args> & { serverArgs: string[] } = {
    sessions: 1,
    maxTokens: 16,
    gaps: false,
    serial: false,
    reference: true,
    serverArgs: [],
    probe: true,
    probeWords: 2000,
  };
  const int = (flag: string, v: string | undefined) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} "${v}": a positive integer`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const eq = argv[i].indexOf("=");
    const flag = eq > 0 && argv[i].startsWith("--") ? argv[i].slice(0, eq) : argv[i];
    const value = () => eq > 0 ? argv[i].slice(eq + 1) : argv[++i];
    switch (flag) {
      case "--agent-trace":
        a.trace = value();
        break;
      case "--sessions":
        a.sessions = int(flag, value());
        break;
      case "--max-tokens":
        a.maxTokens = int(flag, value());
        break;
      case "--gaps":
        a.gaps = true;
        break;
      case "--serial":
        a.serial = true;
        break;
      case "--no-reference":
        a.reference = false;
        break;
      case "--url":
        a.url = value().replace(/\/+$/, "");
        break;
      case "--api-key":
        a.apiKey = value();
        break;
      case "--model":
        a.model = value();
        break;
      case "--server-arg":
        a.serverArgs.push(value());
        break;
      case "--probe-words":
        a.probeWords = int(flag, value());
        break;
      case "--no-prefill-probe":
        a.probe = false;
        break;
      case "--json-out":
        a.jsonOut = value();
        break;
      case "--help":
      case "-h":
        console.log(USAGE);
        Deno.exit(0);
        break;
      default:
        throw new Error(`unknown argument ${argv[i]}\n${USAGE}`);
    }
  }
  if (!a.trace) throw new Error(`--agent-trace FILE is required\n${USAGE}`);
  return a as Args;
}

/** The server's arguments: the user's, plus defaults for the flags they did not give. */
function serveArgs(a: Args): string[] {
  const given = (f: string) => a.serverArgs.some((s) => s === f || s.startsWith(`${f}=`));
  const out = [...a.serverArgs];
  if (a.model && !given("--model")) out.push("--model", a.model);
  if (!given("--max-batch")) out.push("--max-batch", String(a.sessions));
  if (!given("--max-seq-len")) out.push("--max-seq-len", "32768");
  return out;
}

const fmt = (x: number | null, d = 0) => x === null ? "-" : x.toFixed(d);

/** `deno task bench --agent-trace FILE ...`: replay, print, and write the JSON. */
export async function agentTraceMain(args: string[]): Promise<void> {
  const a = parseArgs(args);
  const trace = parseTrace(await Deno.readTextFile(a.trace));
  const headers: Record<string, string> = a.apiKey
    ? { authorization: `Bearer ${a.apiKey}`, "x-api-key": a.apiKey }
    : {};
  const server = a.url ? undefined : await startServer(serveArgs(a), { timeoutMs: 300_000 });
  const url = a.url ?? server!.url;
  try {
    const prefill = a.probe ? await probePrefill(url, a.probeWords, 2, headers) : undefined;
    if (prefill) {
      console.log(
        `prefill: ${prefill.promptTokens} uncached tokens in ${prefill.ttftMs.toFixed(0)} ms ` +
          `(${prefill.tokensPerSecond.toFixed(0)} tok/s)`,
      );
    }
    console.log(
      `replaying ${a.trace}: ${trace.length} turns x ${a.sessions} sessions, ` +
        `max ${a.maxTokens} tokens each`,
    );
    console.log("session turn route                  prompt  cached     new  ttft_ms");
    const t0 = performance.now();
    // Served by whatever model the server has, whichever the trace was recorded with.
    const models = await (await fetch(`${url}/v1/models`, { headers })).json();
    const model = String(models.data?.[0]?.id ?? "");
    const turns = await replayTrace({
      url,
      model,
      trace,
      sessions: a.sessions,
      maxTokens: a.maxTokens,
      honourGaps: a.gaps,
      serial: a.serial,
      headers,
      onTurn: (r) =>
        console.log(
          `${String(r.session).padStart(7)} ${String(r.turn).padStart(4)} ${r.route.padEnd(20)} ${
            String(r.promptTokens).padStart(8)
          } ${String(r.cachedTokens).padStart(7)} ${String(r.newTokens).padStart(7)} ${
            fmt(r.ttftMs).padStart(8)
          }${r.error ? `  ERROR ${r.status} ${r.error}` : ""}`,
        ),
    });
    const wallMs = performance.now() - t0;
    // The reference: one more session, alone, so every warm turn finds its prefix in its slot.
    const reference = a.reference
      ? await replayTrace({
        url,
        trace,
        sessions: 1,
        model,
        maxTokens: a.maxTokens,
        serial: true,
        firstSession: a.sessions,
        headers,
      })
      : undefined;
    const summary = summarize(turns, prefill, reference);
    console.log(
      `warm turns: ${summary.warmTurns}, prompt tokens ${summary.warmPromptTokens}, from cache ` +
        `${summary.warmCachedTokens} (${fmt((summary.cacheShare ?? 0) * 100, 1)}%); ` +
        `TTFT p50 ${fmt(summary.warmTtftP50Ms)} ms, p95 ${fmt(summary.warmTtftP95Ms)} ms; ` +
        `mean ${fmt(summary.warmTtftMeanMs)} ms against ${fmt(summary.warmNewPrefillMeanMs)} ms ` +
        `to prefill the new tokens alone (x${fmt(summary.warmTtftOverNewPrefill, 2)}); ` +
        `${summary.failedTurns} failed; wall ${(wallMs / 1000).toFixed(1)} s`,
    );
    const ref = summary.reference;
    if (ref) {
      console.log(
        `against one session alone (prefix in its slot: only new tokens computed): warm TTFT ` +
          `mean ${fmt(ref.ttftMeanMs)} ms vs ${fmt(ref.refTtftMeanMs)} ms ` +
          `(x${fmt(ref.ttftOverRef, 2)}); goal (<= 1.5x + 100 ms) ` +
          `${ref.meanWithinGoal ? "met" : "missed"} on the mean, by ${ref.turnsWithinGoal} ` +
          `of ${ref.turns} turns`,
      );
    }
    const stamp = new Date().toISOString().replaceAll(":", "-").replace(".", "-");
    const out = a.jsonOut ??
      new URL(`./results/agent-trace-${stamp}.json`, import.meta.url).pathname;
    await Deno.mkdir(out.slice(0, out.lastIndexOf("/")) || ".", { recursive: true });
    await Deno.writeTextFile(
      out,
      JSON.stringify(
        {
          date: new Date().toISOString(),
          trace: a.trace,
          sessions: a.sessions,
          maxTokens: a.maxTokens,
          gaps: a.gaps,
          serial: a.serial,
          server: a.url ? { url: a.url } : { args: serveArgs(a) },
          loadavg: Deno.loadavg(),
          prefill,
          wallMs,
          summary,
          turns,
          ...(reference ? { reference } : {}),
        },
        null,
        2,
      ) + "\n",
    );
    console.log(`wrote ${out}`);
    if (summary.failedTurns) throw new Error(`${summary.failedTurns} turns failed`);
  } finally {
    await server?.stop();
  }
}

if (import.meta.main) {
  try {
    await agentTraceMain(Deno.args);
  } catch (e) {
    console.error(`agent-trace: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
