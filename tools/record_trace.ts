/**
 * Records an agent session for `bench/agent_trace.ts`: a small HTTP proxy in front of a Hearth
 * server that forwards every request unchanged (streamed responses pass through as they come)
 * and appends one JSON line per inference request, `{"t", "route", "body"}`: seconds since the
 * first recorded request, the path, and the body as the client sent it. Headers are never
 * recorded (they carry API keys).
 *
 * Only generating requests are recorded (`POST /v1/messages`, `/v1/chat/completions`,
 * `/v1/responses`, `/v1/completions`): `count_tokens` and GETs never touch the KV cache, so a
 * replay that measures prompt caching has nothing to learn from them.
 *
 * `--steer FILE` is a recording aid for random-weight models, which never call a tool on their
 * own: a JSON list of `{"tool", "input"}` steps; a request whose conversation already holds n
 * tool calls gets step n (when it offers that tool), forwarded with `tool_choice` naming it and
 * that tool's schema narrowed to `const` values, so the grammar makes the model call it with
 * exactly `input`. The trace still holds the body the CLI sent; after the last step requests
 * pass unchanged and the model may end the turn.
 *
 * @example
 * ```ts
 * import { recordingProxy, type TraceLine } from "./record_trace.ts";
 * const lines: TraceLine[] = [];
 * const write = (l: TraceLine) => void lines.push(l);
 * const proxy = recordingProxy({ upstream: "http://127.0.0.1:8000", write });
 * await using srv = Deno.serve({ port: 0, onListen() {} }, proxy);
 * ```
 * @module
 */

/** One recorded request. */
export type TraceLine = { t: number; route: string; body: unknown };

/** One forced tool call for `--steer`. */
export type SteerStep = { tool: string; input: Record<string, unknown> };

/** The paths whose POSTs are recorded. */
export const RECORDED_ROUTES: readonly string[] = [
  "/v1/messages",
  "/v1/chat/completions",
  "/v1/responses",
  "/v1/completions",
];

/** Whether a request is one a trace holds. */
export function isRecorded(method: string, path: string): boolean {
  return method === "POST" && RECORDED_ROUTES.includes(path);
}

// Hop-by-hop headers and those `fetch` rewrites (it decodes compressed bodies itself).
const DROP = ["host", "connection", "content-length", "content-encoding", "transfer-encoding"];

function forwardHeaders(h: Headers): Headers {
  const out = new Headers(h);
  for (const k of DROP) out.delete(k);
  return out;
}

type Json = Record<string, unknown>;

/** A schema that admits exactly `input`: every property a `const`. */
function constSchema(input: Record<string, unknown>): Json {
  return {
    type: "object",
    properties: Object.fromEntries(Object.entries(input).map(([k, v]) => [k, { const: v }])),
    required: Object.keys(input),
    additionalProperties: false,
  };
}

/**
 * The tool calls already in the conversation `body` carries. The step a request gets is the one
 * after them, so side requests that share the history (Claude Code's summaries) take the same
 * step as the main loop instead of using one up.
 */
export function callsSoFar(route: string, body: Json): number {
  if (route === "/v1/responses") {
    const input = Array.isArray(body.input) ? body.input as Json[] : [];
    return input.filter((i) => /(^|_)call$/.test(String(i.type))).length;
  }
  const msgs = Array.isArray(body.messages) ? body.messages as Json[] : [];
  let n = 0;
  for (const m of msgs) {
    if (m.role !== "assistant") continue;
    if (Array.isArray(m.tool_calls)) n += m.tool_calls.length;
    if (Array.isArray(m.content)) {
      n += (m.content as Json[]).filter((b) => b.type === "tool_use").length;
    }
  }
  return n;
}

/**
 * `body` with the tool named by `step` forced and its arguments fixed, in the body's own dialect;
 * `undefined` when the body does not offer that tool.
 */
export function steerBody(route: string, body: Json, step: SteerStep): Json | undefined {
  const tools = Array.isArray(body.tools) ? body.tools as Json[] : [];
  const schema = constSchema(step.input);
  if (route === "/v1/messages") {
    const i = tools.findIndex((t) => t.name === step.tool);
    if (i < 0) return undefined;
    const next = tools.map((t, j) => j === i ? { ...t, input_schema: schema } : t);
    return { ...body, tools: next, tool_choice: { type: "tool", name: step.tool } };
  }
  if (route === "/v1/chat/completions") {
    const i = tools.findIndex((t) => (t.function as Json | undefined)?.name === step.tool);
    if (i < 0) return undefined;
    const next = tools.map((t, j) =>
      j === i ? { ...t, function: { ...(t.function as Json), parameters: schema } } : t
    );
    return {
      ...body,
      tools: next,
      tool_choice: { type: "function", function: { name: step.tool } },
    };
  }
  if (route === "/v1/responses") {
    const i = tools.findIndex((t) => t.type === "function" && t.name === step.tool);
    if (i < 0) return undefined;
    const next = tools.map((t, j) => j === i ? { ...t, parameters: schema } : t);
    return { ...body, tools: next, tool_choice: { type: "function", name: step.tool } };
  }
  return undefined;
}

/** What `recordingProxy` needs. */
export type ProxyOptions = {
  /** Base URL of the server the requests go to, e.g. `http://127.0.0.1:8000`. */
  upstream: string;
  /** Called once per recorded request, in arrival order, before it is forwarded. */
  write: (line: TraceLine) => void | Promise<void>;
  /** Forced tool calls, for random-weight models (see the module doc). */
  steer?: SteerStep[];
  /** Clock in milliseconds (tests). */
  now?: () => number;
};

/** A `Deno.serve` handler that records and forwards. */
export function recordingProxy(opts: ProxyOptions): (req: Request) => Promise<Response> {
  const upstream = opts.upstream.replace(/\/+$/, "");
  const now = opts.now ?? (() => performance.now());
  const steps = opts.steer ?? [];
  let start: number | undefined;
  // Writes stay in arrival order even when the sink is async.
  let queue: Promise<void> = Promise.resolve();
  return async (req) => {
    const url = new URL(req.url);
    const raw = req.body ? new Uint8Array(await req.arrayBuffer()) : undefined;
    let sent: BodyInit | undefined = raw;
    if (raw && isRecorded(req.method, url.pathname)) {
      const text = new TextDecoder().decode(raw);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        // Not JSON: the server answers it with a 400; keep it as text so the replay can too.
        body = text;
      }
      start ??= now();
      const line = { t: Math.round(now() - start) / 1000, route: url.pathname, body };
      queue = queue.then(() => opts.write(line));
      await queue;
      const at = body && typeof body === "object" ? callsSoFar(url.pathname, body as Json) : -1;
      if (at >= 0 && at < steps.length) {
        const steered = steerBody(url.pathname, body as Json, steps[at]);
        if (steered) sent = JSON.stringify(steered);
      }
    }
    const res = await fetch(`${upstream}${url.pathname}${url.search}`, {
      method: req.method,
      headers: forwardHeaders(req.headers),
      body: sent,
      signal: req.signal,
      redirect: "manual",
    });
    return new Response(res.body, {
      status: res.status,
      statusText: res.statusText,
      headers: forwardHeaders(res.headers),
    });
  };
}

/** Appends each line to `path` as JSON lines. */
export function appendTo(path: string): (line: TraceLine) => Promise<void> {
  return (line) => Deno.writeTextFile(path, JSON.stringify(line) + "\n", { append: true });
}

const USAGE =
  `usage: deno run -A tools/record_trace.ts --upstream URL --listen PORT --out FILE [--steer FILE]
  --upstream URL   the Hearth server requests go to (e.g. http://127.0.0.1:8000)
  --listen PORT    loopback port the proxy listens on; point the agent CLI at it
  --out FILE       the trace, JSON lines (appended to)
  --steer FILE     JSON list of {"tool", "input"}: force these tool calls, in order (random models)`;

function parseArgs(argv: string[]) {
  const o: { upstream?: string; listen?: number; out?: string; steer?: string } = {};
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = () => inline ?? argv[++i];
    if (flag === "--upstream") o.upstream = value();
    else if (flag === "--listen") o.listen = Number(value());
    else if (flag === "--out") o.out = value();
    else if (flag === "--steer") o.steer = value();
    else if (flag === "--help" || flag === "-h") {
      console.log(USAGE);
      Deno.exit(0);
    } else throw new Error(`unknown argument ${argv[i]}\n${USAGE}`);
  }
  if (!o.upstream || !o.out || !(o.listen! >= 0 && o.listen! < 65536)) {
    throw new Error(`--upstream, --listen and --out are required\n${USAGE}`);
  }
  return o as { upstream: string; listen: number; out: string; steer?: string };
}

if (import.meta.main) {
  let args;
  try {
    args = parseArgs(Deno.args);
  } catch (e) {
    console.error((e as Error).message);
    Deno.exit(2);
  }
  const steer = args.steer
    ? JSON.parse(await Deno.readTextFile(args.steer)) as SteerStep[]
    : undefined;
  Deno.serve(
    {
      hostname: "127.0.0.1",
      port: args.listen,
      onListen: ({ port }) =>
        console.error(`recording ${args.upstream} on http://127.0.0.1:${port} into ${args.out}`),
    },
    recordingProxy({ upstream: args.upstream, write: appendTo(args.out), steer }),
  );
}
