/**
 * Regenerates the corpus of real tool schemas in `tests/fixtures/tools/`: what popular MCP servers
 * answer to `tools/list`, and the tools that coding-agent CLIs put in their requests. Grammar and
 * validation code must survive the schemas agents really send (`$ref`, `anyOf`, `pattern`,
 * `format`, huge `maxLength`, `propertyNames`...), and hand-written test schemas never get that
 * messy, so the fixtures keep every schema exactly as it came over the wire.
 *
 * MCP servers are installed from npm at pinned versions into `~/.cache/hearth-tool-corpus/` and
 * listed over stdio with dummy credentials and flags that keep them off the network (nothing
 * beyond the npm registry is reachable here). Claude Code's and Codex's tools come from the
 * recorded requests in `bench/traces/`; opencode is run against a fake OpenAI-compatible server
 * started here, which records the request it sends.
 *
 * @example
 * ```sh
 * deno run -A tools/tool_corpus.ts                      # every source
 * deno run -A tools/tool_corpus.ts --only github,codex  # some, by file name
 * deno run -A tools/tool_corpus.ts --out /tmp/tools     # elsewhere
 * ```
 * @module
 */
// The SDK's `x.js` exports have no types at the mapped paths: these hints give it its real types.
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
// @ts-types="@modelcontextprotocol/sdk/client/stdio"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
// @ts-types="@modelcontextprotocol/sdk/types"
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const root = new URL("..", import.meta.url).pathname;
const cacheRoot = `${Deno.env.get("HOME") ?? "/tmp"}/.cache/hearth-tool-corpus`;
const LIST_TIMEOUT_MS = 60_000;

/** One tool as the fixtures hold it; `custom` only for Codex's free-form (grammar) tools. */
interface CorpusTool {
  name: string;
  description?: string;
  inputSchema: unknown;
  custom?: unknown;
}

interface CorpusFile {
  source: string;
  kind: "mcp" | "cli";
  how: string;
  recorded: string;
  tools: CorpusTool[];
}

/** One run of an MCP server: its flags, environment and the capabilities the client declares. */
interface McpRun {
  args: string[];
  env?: Record<string, string>;
  /** Client capabilities to declare: some servers only offer a tool to clients that can serve it. */
  capabilities?: Record<string, unknown>;
}

interface McpSource {
  file: string;
  pkg: string;
  version: string;
  /** The bin to run, when the package has more than one. */
  bin?: string;
  /** The default tool set; `{dir}` in an argument is replaced by a fresh temp dir. */
  run: McpRun;
  /** Runs whose tools are added to the default set (by name), with why, for `how`. */
  extra?: { run: McpRun; note: string }[];
  /** What to say in `how` about the default run, when it needed flags. */
  note?: string;
}

// Pinned: the newest version of each that lists its tools here (2026-12-02).
const MCP: McpSource[] = [
  {
    file: "playwright",
    pkg: "@playwright/mcp",
    version: "0.0.83",
    run: { args: ["--headless", "--isolated"] },
    extra: [{
      run: {
        args: [
          "--headless",
          "--isolated",
          "--caps=vision,pdf,devtools,network,storage,testing,config,core-install",
        ],
      },
      note:
        "plus the tools of --caps=vision,pdf,devtools,network,storage,testing,config,core-install",
    }],
  },
  {
    file: "chrome-devtools",
    pkg: "chrome-devtools-mcp",
    version: "1.11.0",
    bin: "chrome-devtools-mcp",
    run: { args: ["--headless", "--isolated", "--no-usage-statistics"] },
    extra: [{
      run: {
        args: [
          "--headless",
          "--isolated",
          "--no-usage-statistics",
          "--categoryExtensions",
          "--categoryPwa",
          "--experimentalVision",
          "--experimentalMemory",
          "--experimentalDevtools",
        ],
      },
      note: "plus the tools of --categoryExtensions --categoryPwa --experimentalVision " +
        "--experimentalMemory --experimentalDevtools",
    }, {
      run: { args: ["--headless", "--isolated", "--no-usage-statistics", "--slim"] },
      note: "plus the tools of --slim",
    }],
  },
  {
    file: "context7",
    pkg: "@upstash/context7-mcp",
    version: "4.1.1",
    run: { args: [] },
  },
  {
    file: "filesystem",
    pkg: "@modelcontextprotocol/server-filesystem",
    version: "2026.8.31",
    run: { args: ["{dir}"] },
    note: "a temp dir as its allowed root",
  },
  {
    file: "github",
    pkg: "@modelcontextprotocol/server-github",
    version: "2025.4.8",
    run: { args: [] },
  },
  {
    file: "memory",
    pkg: "@modelcontextprotocol/server-memory",
    version: "2026.8.31",
    run: { args: [], env: { MEMORY_FILE_PATH: "{dir}/memory.jsonl" } },
  },
  {
    file: "sequential-thinking",
    pkg: "@modelcontextprotocol/server-sequential-thinking",
    version: "2026.8.31",
    run: { args: [] },
  },
  {
    file: "everything",
    pkg: "@modelcontextprotocol/server-everything",
    version: "2026.8.31",
    run: { args: ["stdio"] },
    extra: [{
      run: {
        args: ["stdio"],
        capabilities: {
          roots: { listChanged: true },
          sampling: {},
          elicitation: { form: {}, url: {} },
          tasks: { requests: { sampling: { createMessage: {} }, elicitation: { create: {} } } },
        },
      },
      note: "plus the tools it offers to a client declaring the roots, sampling, elicitation " +
        "and tasks capabilities",
    }],
  },
  {
    file: "notion",
    pkg: "@notionhq/notion-mcp-server",
    version: "2.5.2",
    run: { args: [] },
  },
  {
    file: "supabase",
    pkg: "@supabase/mcp-server-supabase",
    version: "0.13.0",
    // The default feature groups but `docs`, whose one tool (search_docs) puts the docs' GraphQL
    // schema, fetched from supabase.com, in its description: it cannot be listed offline.
    run: {
      args: [
        "--access-token=dummy",
        "--features=account,database,debugging,development,functions,branching",
      ],
    },
    extra: [{
      run: {
        args: [
          "--access-token=dummy",
          "--features=account,database,debugging,development,functions,branching,storage",
        ],
      },
      note: "plus the tools of the non-default storage feature group",
    }],
    note: "without search_docs (the docs feature group), whose description needs the docs' " +
      "GraphQL schema from supabase.com",
  },
  {
    file: "firecrawl",
    pkg: "firecrawl-mcp",
    version: "3.26.0",
    run: { args: [] },
  },
  {
    file: "tavily",
    pkg: "tavily-mcp",
    version: "0.2.22",
    run: { args: [] },
  },
  {
    file: "sentry",
    pkg: "@sentry/mcp-server",
    version: "0.39.0",
    run: { args: ["--access-token=dummy"] },
    // --all-skills and --experimental list the same tools: the rest of Sentry's catalog is only
    // reachable through search_sentry_tools / execute_sentry_tool calls, never tools/list.
  },
];

/**
 * Dummy credentials (servers refuse to start without them, and never use them to list tools), and
 * switches that keep servers off the network.
 */
const DUMMY_ENV: Record<string, string> = {
  GITHUB_PERSONAL_ACCESS_TOKEN: "dummy",
  NOTION_TOKEN: "ntn_dummy",
  OPENAPI_MCP_HEADERS: '{"Authorization": "Bearer ntn_dummy", "Notion-Version": "2022-06-28"}',
  SUPABASE_ACCESS_TOKEN: "dummy",
  FIRECRAWL_API_KEY: "fc-dummy",
  TAVILY_API_KEY: "tvly-dummy",
  SENTRY_ACCESS_TOKEN: "dummy",
  // chrome-devtools-mcp's update check spawns npm in the background, which outlives the server (and its temp HOME).
  CHROME_DEVTOOLS_MCP_NO_UPDATE_CHECKS: "1",
  CHROME_DEVTOOLS_MCP_NO_USAGE_STATISTICS: "1",
};

const OPENCODE_VERSION = "1.18.33";

const TRACES = {
  claude: {
    file: "bench/traces/claude-code-fix-add.jsonl",
    cli: "@anthropic-ai/claude-code@2.1.330",
  },
  codex: { file: "bench/traces/codex-fix-add.jsonl", cli: "@openai/codex@0.169.0" },
};

function today(): string {
  return new Date().toISOString().slice(0, 10);
}

function byName(tools: CorpusTool[]): CorpusTool[] {
  return tools.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Installs `pkg@version` into its own dir under the cache (once) and returns that dir. */
async function npmInstall(pkg: string, version: string): Promise<string> {
  const dir = `${cacheRoot}/${pkg.replace("/", "+")}@${version}`;
  try {
    const pj = JSON.parse(await Deno.readTextFile(`${dir}/node_modules/${pkg}/package.json`));
    if (pj.version === version) return dir;
  } catch { /* not installed yet */ }
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(`${dir}/package.json`, '{"private": true}\n');
  const out = await new Deno.Command("npm", {
    args: ["install", "--no-audit", "--no-fund", "--loglevel=error", `${pkg}@${version}`],
    cwd: dir,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`npm install ${pkg}@${version}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return dir;
}

async function binPath(dir: string, pkg: string, bin?: string): Promise<string> {
  const pj = JSON.parse(await Deno.readTextFile(`${dir}/node_modules/${pkg}/package.json`));
  const rel = typeof pj.bin === "string" ? pj.bin : pj.bin[bin ?? Object.keys(pj.bin)[0]];
  return `${dir}/node_modules/${pkg}/${rel}`;
}

/**
 * A hermetic environment: a HOME of its own (so no user config leaks in or gets written), PATH
 * for `node`, and the dummy credentials.
 */
function isolatedEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: home,
    XDG_CONFIG_HOME: `${home}/.config`,
    XDG_CACHE_HOME: `${home}/.cache`,
    XDG_DATA_HOME: `${home}/.local/share`,
    XDG_STATE_HOME: `${home}/.local/state`,
    LANG: "C.UTF-8",
    ...DUMMY_ENV,
    ...extra,
  };
}

function fill(s: string, dir: string): string {
  return s.replaceAll("{dir}", dir);
}

/**
 * Lists a server's tools. The SDK's `listTools` re-parses each tool through its Zod schema,
 * which reorders keys (and would reject a non-conforming schema), so the result is taken as
 * `unknown`: the tools stay exactly as the server's JSON said.
 */
async function listMcpTools(
  script: string,
  run: McpRun,
  log: (s: string) => void,
): Promise<unknown[]> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-tool-corpus-" });
  const env = isolatedEnv(
    dir,
    Object.fromEntries(Object.entries(run.env ?? {}).map(([k, v]) => [k, fill(v, dir)])),
  );
  const transport = new StdioClientTransport({
    command: "node",
    args: [script, ...run.args.map((a) => fill(a, dir))],
    env,
    cwd: dir,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d: Uint8Array) => {
    stderr += new TextDecoder().decode(d);
  });
  const client = new Client({ name: "hearth-tool-corpus", version: "1.0.0" }, {
    capabilities: run.capabilities ?? {},
  });
  // A server told of roots asks for them at once; an empty list keeps it from erroring.
  if (run.capabilities?.roots) {
    client.setRequestHandler(ListRootsRequestSchema, () => ({ roots: [] }));
  }
  const timeout = { timeout: LIST_TIMEOUT_MS };
  try {
    await client.connect(transport, timeout);
    const tools: unknown[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.request(
        { method: "tools/list", params: cursor ? { cursor } : {} },
        z.unknown(),
        timeout,
      ) as { tools?: unknown[]; nextCursor?: string };
      tools.push(...(page.tools ?? []));
      cursor = page.nextCursor;
    } while (cursor);
    return tools;
  } catch (e) {
    log(stderr.trim().split("\n").slice(-15).join("\n"));
    throw e;
  } finally {
    await client.close().catch(() => {});
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

function asCorpusTool(t: unknown): CorpusTool {
  const { name, description, inputSchema } = t as Record<string, unknown>;
  const out: CorpusTool = { name: String(name), description: description as string, inputSchema };
  if (description === undefined) delete out.description;
  return out;
}

async function mcpFile(src: McpSource, log: (s: string) => void): Promise<CorpusFile> {
  const dir = await npmInstall(src.pkg, src.version);
  const script = await binPath(dir, src.pkg, src.bin);
  const nodeVersion = new TextDecoder().decode(
    (await new Deno.Command("node", { args: ["--version"] }).output()).stdout,
  ).trim();
  const tools = new Map<string, CorpusTool>();
  for (const t of await listMcpTools(script, src.run, log)) {
    const c = asCorpusTool(t);
    tools.set(c.name, c);
  }
  const notes: string[] = [];
  if (src.note) notes.push(src.note);
  for (const extra of src.extra ?? []) {
    const before = tools.size;
    for (const t of await listMcpTools(script, extra.run, log)) {
      const c = asCorpusTool(t);
      if (!tools.has(c.name)) tools.set(c.name, c);
    }
    if (tools.size > before) notes.push(`${extra.note} (${tools.size - before} more)`);
  }
  const flags = src.run.args.filter((a) => a.startsWith("-"));
  return {
    source: `npm:${src.pkg}@${src.version}`,
    kind: "mcp",
    how: [
      `tools/list over stdio (node ${nodeVersion}, MCP SDK client) with dummy credentials`,
      ...(flags.length ? [`flags ${flags.join(" ")}`] : []),
      ...notes,
    ].join("; "),
    recorded: today(),
    tools: byName([...tools.values()]),
  };
}

async function traceBodies(path: string): Promise<Record<string, unknown>[]> {
  const text = await Deno.readTextFile(`${root}${path}`);
  return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).body);
}

/** The union by name over every request (a background request may offer fewer tools). */
function unionTools(lists: CorpusTool[][]): CorpusTool[] {
  const tools = new Map<string, CorpusTool>();
  for (const list of [...lists].sort((a, b) => b.length - a.length)) {
    for (const t of list) if (!tools.has(t.name)) tools.set(t.name, t);
  }
  return byName([...tools.values()]);
}

async function claudeFile(): Promise<CorpusFile> {
  const bodies = await traceBodies(TRACES.claude.file);
  const lists = bodies.map((b) =>
    ((b.tools ?? []) as Record<string, unknown>[]).map((t) => ({
      name: String(t.name),
      description: t.description as string,
      inputSchema: t.input_schema,
    }))
  );
  return {
    source: `cli:${TRACES.claude.cli}`,
    kind: "cli",
    how:
      `tools[] (input_schema) of the /v1/messages requests recorded in ${TRACES.claude.file}, union by name`,
    recorded: today(),
    tools: unionTools(lists),
  };
}

/** Codex's Responses-API tools: functions, free-form `custom` tools, and namespaces of both. */
function codexTools(tools: Record<string, unknown>[], prefix = ""): CorpusTool[] {
  const out: CorpusTool[] = [];
  for (const t of tools) {
    const name = `${prefix}${t.name}`;
    if (t.type === "function") {
      out.push({ name, description: t.description as string, inputSchema: t.parameters });
    } else if (t.type === "custom") {
      // A custom tool's input is one free-form string (checked by its Lark grammar, in `custom`).
      out.push({
        name,
        description: t.description as string,
        inputSchema: {
          type: "object",
          properties: { input: { type: "string" } },
          required: ["input"],
        },
        custom: t.format,
      });
    } else if (t.type === "namespace") {
      out.push(...codexTools(t.tools as Record<string, unknown>[], `${name}__`));
    }
  }
  return out;
}

async function codexFile(): Promise<CorpusFile> {
  const bodies = await traceBodies(TRACES.codex.file);
  const lists = bodies.map((b) => codexTools((b.tools ?? []) as Record<string, unknown>[]));
  return {
    source: `cli:${TRACES.codex.cli}`,
    kind: "cli",
    how: `tools[] of the /v1/responses requests recorded in ${TRACES.codex.file}, union by name; ` +
      "function tools' parameters as inputSchema, namespace tools flattened as NS__TOOL, custom " +
      "tools as one string input with their format in custom",
    recorded: today(),
    tools: unionTools(lists),
  };
}

const files = {
  mcp: Object.fromEntries(MCP.map((s) => [s.file, s])),
  cli: ["claude-code", "codex", "opencode"],
};

function parseArgs(argv: string[]): { out: string; only?: string } {
  const args: { out: string; only?: string } = { out: "tests/fixtures/tools" };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = () => inline ?? argv[++i];
    if (flag === "--out") args.out = value();
    else if (flag === "--only") args.only = value();
    else throw new Error(`usage: tool_corpus.ts [--out DIR] [--only NAME,...] (got ${argv[i]})`);
  }
  return args;
}

/**
 * A stand-in OpenAI-compatible server: it records every POST body and answers each with one
 * streamed "hi" and `finish_reason: "stop"`, which is all opencode needs to finish its turn.
 */
function fakeChatServer() {
  const bodies: Record<string, unknown>[] = [];
  const chunk = (delta: Record<string, unknown>, finish: string | null) =>
    `data: ${
      JSON.stringify({
        id: "chatcmpl-corpus",
        object: "chat.completion.chunk",
        created: Math.floor(Date.now() / 1000),
        model: "m",
        choices: [{ index: 0, delta, finish_reason: finish }],
      })
    }\n\n`;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    if (req.method !== "POST") return Response.json({ object: "list", data: [] });
    const body = await req.json().catch(() => ({}));
    bodies.push({ path: new URL(req.url).pathname, ...body });
    if (!body.stream) {
      return Response.json({
        id: "chatcmpl-corpus",
        object: "chat.completion",
        created: Math.floor(Date.now() / 1000),
        model: "m",
        choices: [{
          index: 0,
          message: { role: "assistant", content: "hi" },
          finish_reason: "stop",
        }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      });
    }
    const sse = chunk({ role: "assistant", content: "hi" }, null) + chunk({}, "stop") +
      "data: [DONE]\n\n";
    return new Response(sse, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
    });
  });
  return { port: server.addr.port, bodies, close: () => server.shutdown() };
}

/** Extra tools opencode keeps behind env switches; none of them touches the network to list. */
const OPENCODE_EXTRA_ENV: Record<string, string> = {
  OPENCODE_ENABLE_EXA: "1",
  OPENCODE_ENABLE_QUESTION_TOOL: "1",
  OPENCODE_EXPERIMENTAL_LSP_TOOL: "1",
  OPENCODE_EXPERIMENTAL_PLAN_MODE: "1",
};

/** Runs `opencode run "say hi"` once against the fake provider; the bodies that offered tools. */
async function recordOpencode(
  bin: string,
  extraEnv: Record<string, string>,
  log: (s: string) => void,
): Promise<Record<string, unknown>[]> {
  const tmp = await Deno.makeTempDir({ prefix: "hearth-tool-corpus-opencode-" });
  const fake = fakeChatServer();
  try {
    const home = `${tmp}/home`;
    const project = `${tmp}/project`;
    await Deno.mkdir(home, { recursive: true });
    await Deno.mkdir(project, { recursive: true });
    const config = {
      $schema: "https://opencode.ai/config.json",
      provider: {
        local: {
          npm: "@ai-sdk/openai-compatible",
          name: "local",
          options: { baseURL: `http://127.0.0.1:${fake.port}/v1`, apiKey: "dummy" },
          models: { m: { name: "m" } },
        },
      },
      model: "local/m",
      small_model: "local/m",
      autoupdate: false,
      share: "disabled",
    };
    await Deno.writeTextFile(`${tmp}/opencode.json`, JSON.stringify(config, null, 2));
    // No models.dev catalogue, update check, share link or LSP download (nothing but npm is
    // reachable), and no default auth plugins, which add no tools.
    const env = isolatedEnv(home, {
      OPENCODE_CONFIG: `${tmp}/opencode.json`,
      OPENCODE_DISABLE_AUTOUPDATE: "1",
      OPENCODE_DISABLE_MODELS_FETCH: "1",
      OPENCODE_DISABLE_SHARE: "1",
      OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
      OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
      OPENCODE_DISABLE_CLAUDE_CODE: "1",
      ...extraEnv,
    });
    const child = new Deno.Command(bin, {
      args: ["run", "say hi"],
      cwd: project,
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
    const out = await child.output();
    clearTimeout(timer);
    const withTools = fake.bodies.filter((b) => Array.isArray(b.tools) && b.tools.length);
    if (!withTools.length) {
      const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
      log(text.trim().split("\n").slice(-20).join("\n"));
      throw new Error(
        `opencode (exit ${out.code}) sent ${fake.bodies.length} request(s), none with tools`,
      );
    }
    return withTools;
  } finally {
    await fake.close();
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

function opencodeTools(bodies: Record<string, unknown>[]): CorpusTool[] {
  return unionTools(
    bodies.map((b) =>
      (b.tools as { type: string; function: Record<string, unknown> }[])
        .filter((t) => t.type === "function")
        .map((t) => ({
          name: String(t.function.name),
          description: t.function.description as string,
          inputSchema: t.function.parameters,
        }))
    ),
  );
}

/**
 * The platform package's binary: `opencode-ai`'s own bin is a placeholder until its postinstall
 * links the binary in, and an npm that holds back install scripts never runs that.
 */
async function opencodeBin(dir: string): Promise<string> {
  const os = Deno.build.os === "windows" ? "windows" : Deno.build.os;
  const arch = Deno.build.arch === "x86_64" ? "x64" : "arm64";
  for (const variant of ["", "-baseline", "-musl", "-baseline-musl"]) {
    const bin = `${dir}/node_modules/opencode-${os}-${arch}${variant}/bin/opencode`;
    try {
      await Deno.stat(bin);
      return bin;
    } catch { /* not this variant */ }
  }
  return `${dir}/node_modules/.bin/opencode`;
}

async function opencodeFile(log: (s: string) => void): Promise<CorpusFile> {
  const bin = await opencodeBin(await npmInstall("opencode-ai", OPENCODE_VERSION));
  const first = await recordOpencode(bin, {}, log);
  const tools = opencodeTools(first);
  const names = new Set(tools.map((t) => t.name));
  const more = opencodeTools(await recordOpencode(bin, OPENCODE_EXTRA_ENV, log))
    .filter((t) => !names.has(t.name));
  return {
    source: `cli:opencode-ai@${OPENCODE_VERSION}`,
    kind: "cli",
    how: `tools[] (function.parameters) of the ${first[0].path} request that \`opencode run ` +
      `"say hi"\` sent to a local fake OpenAI-compatible provider (@ai-sdk/openai-compatible, ` +
      `hermetic HOME, default build agent); plus the tools it sends with ` +
      `${Object.keys(OPENCODE_EXTRA_ENV).join("=1 ")}=1 (${more.length} more)`,
    recorded: today(),
    tools: byName([...tools, ...more]),
  };
}

async function main() {
  const args = parseArgs(Deno.args);
  const out = args.out.startsWith("/") ? args.out : `${root}${args.out}`;
  const only = args.only ? new Set(args.only.split(",").map((s) => s.trim())) : undefined;
  const wanted = [...Object.keys(files.mcp), ...files.cli].filter((f) => !only || only.has(f));
  if (only) {
    const unknown = [...only].filter((f) => !wanted.includes(f));
    if (unknown.length) throw new Error(`unknown source(s): ${unknown.join(", ")}`);
  }
  await Deno.mkdir(out, { recursive: true });
  const failed: string[] = [];
  for (const name of wanted) {
    const log = (s: string) => s && console.error(`  ${name}: ${s.replaceAll("\n", "\n    ")}`);
    try {
      const file = name === "claude-code"
        ? await claudeFile()
        : name === "codex"
        ? await codexFile()
        : name === "opencode"
        ? await opencodeFile(log)
        : await mcpFile(files.mcp[name], log);
      await Deno.writeTextFile(`${out}/${name}.json`, JSON.stringify(file, null, 2) + "\n");
      console.log(`${name}.json: ${file.source}, ${file.tools.length} tools`);
    } catch (e) {
      failed.push(name);
      console.error(`${name}: FAILED: ${e instanceof Error ? e.message : e}`);
    }
  }
  if (failed.length) {
    console.error(`failed: ${failed.join(", ")}`);
    Deno.exit(1);
  }
}

if (import.meta.main) await main();
