/**
 * `deno task bench tools`: what the real tool schemas of the corpus (`tests/fixtures/tools/`) cost
 * a turn. For each family: the call grammar of each tool set compiled cold (what the first turn of
 * an agent pays), the same turn warm (what every later turn pays: the cache hit and the checks),
 * llama.cpp's own parse of that grammar (what llama-server pays on every request that carries
 * tools, and Hearth once per grammar), and the validators of what the grammar relaxed. Then a real
 * server on the tiny model takes the recorded Claude Code turn twice: time to the response's
 * headers (the turn planned: rendered, tokenized, grammar ready) cold and warm.
 *
 * Prints tables and writes JSON to `bench/results/tool-schemas-<ISO time>.json`.
 *
 * @example
 * ```sh
 * deno task bench tools
 * deno task bench tools --families hermes,gemma4 --rounds 5
 * ```
 * @module
 */
import { loadModel, modelVocab, openLlama, samplers } from "../ffi/mod.ts";
import { TOOL_FORMATS, type ToolFamily } from "../lib/chat/formats/mod.ts";
import type { ToolSpec } from "../lib/chat/conversation.ts";
import { callGrammarFor, toolChecks } from "../lib/chat/tool_checks.ts";
import { chatFormatModelPath } from "../tests/support/models.ts";
import { loadToolCorpus } from "../tests/support/tool_corpus.ts";
import { startServer } from "../tools/server_process.ts";

type Args = { families: ToolFamily[]; rounds: number; server: boolean; jsonOut?: string };

function parseArgs(argv: string[]): Args {
  const a: Args = { families: Object.keys(TOOL_FORMATS) as ToolFamily[], rounds: 3, server: true };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    switch (argv[i]) {
      case "--families":
        a.families = v.split(",") as ToolFamily[];
        for (const f of a.families) {
          if (!(f in TOOL_FORMATS)) throw new Error(`bench tools: unknown family ${f}`);
        }
        i++;
        break;
      case "--rounds":
        a.rounds = Number(v);
        i++;
        break;
      case "--no-server":
        a.server = false;
        break;
      case "--json-out":
        a.jsonOut = v;
        i++;
        break;
      default:
        throw new Error(`bench tools: unknown option ${argv[i]}`);
    }
  }
  return a;
}

type Row = {
  family: string;
  set: string;
  tools: number;
  grammarKB: number;
  /** Relaxed keywords: checked on the finished call / enforced by nothing. */
  checked: number;
  relaxed: number;
  /** The first compile in this process (nothing cached); then the median of the others. */
  firstMs: number;
  coldMs: number;
  warmMs: number;
  llamaParseMs: number;
};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function time(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

async function compileRows(a: Args): Promise<Row[]> {
  const llama = openLlama();
  const vocabModel = await loadModel(
    llama,
    new URL("../lib/gguf/assets/llama-bpe.vocab.gguf", import.meta.url).pathname,
    { vocab_only: true },
  );
  const vocab = modelVocab(llama, vocabModel);
  const corpus = await loadToolCorpus();
  const all: ToolSpec[] = corpus.flatMap((s) =>
    s.tools.map((t) => ({
      name: `${s.file.replace(/\W/g, "_")}_${t.name}`.slice(0, 128),
      description: t.description ?? "",
      parameters: t.inputSchema,
    }))
  );
  const sets = [
    ...corpus.map((s) => ({
      name: s.file.replace(/\.json$/, ""),
      tools: s.tools.map((t) => ({
        name: t.name,
        description: t.description ?? "",
        parameters: t.inputSchema,
      })),
    })),
    { name: "ALL (every corpus tool)", tools: all },
  ];
  const rows: Row[] = [];
  for (const family of a.families) {
    const format = TOOL_FORMATS[family];
    for (const set of sets) {
      const cold: number[] = [];
      const warm: number[] = [];
      const parse: number[] = [];
      let gbnf = "";
      let checked = 0;
      let relaxed = 0;
      for (let r = 0; r < a.rounds; r++) {
        // A fresh copy of the tools: a new request's objects, so nothing is cached by identity.
        const fresh = () => structuredClone(set.tools);
        cold.push(time(() => {
          const tools = fresh();
          const built = { gbnf: "", relaxed: new Map() };
          built.gbnf = format.callGrammar(tools, {
            parallel: true,
            relax: (i, rx) => void built.relaxed.set(i, [...(built.relaxed.get(i) ?? []), rx]),
          });
          gbnf = built.gbnf;
          const checks = toolChecks(tools, built.relaxed, (i) => `tools[${i}]`, "parameters");
          checked = checks.checked.length;
          relaxed = checks.relaxed.length;
        }));
        callGrammarFor(format, set.tools, { parallel: true });
        warm.push(time(() => {
          const tools = fresh();
          const built = callGrammarFor(format, tools, { parallel: true });
          toolChecks(tools, built.relaxed, (i) => `tools[${i}]`, "parameters");
        }));
        parse.push(time(() => {
          const s = samplers(llama).grammar(vocab, gbnf, "root");
          if (!s) throw new Error(`llama.cpp refused the ${family} grammar of ${set.name}`);
          llama.sym.llama_sampler_free(s);
        }));
      }
      rows.push({
        family,
        set: set.name,
        tools: set.tools.length,
        grammarKB: Math.round(gbnf.length / 102.4) / 10,
        checked,
        relaxed,
        firstMs: cold[0],
        coldMs: median(cold.slice(1).length ? cold.slice(1) : cold),
        warmMs: median(warm),
        llamaParseMs: median(parse),
      });
    }
  }
  return rows;
}

type ServerRow = { turn: string; headersMs: number; firstTokenMs: number; promptTokens?: number };

/** The recorded Claude Code turn (its first request: 12 tools), twice on a real server. */
async function serverRows(rounds: number): Promise<ServerRow[]> {
  const trace = await Deno.readTextFile(
    new URL("./traces/claude-code-fix-add.jsonl", import.meta.url),
  );
  const first = JSON.parse(trace.split("\n")[0]) as {
    route: string;
    body: Record<string, unknown>;
  };
  await using srv = await startServer([
    "--model",
    await chatFormatModelPath("hermes", { replyLength: 40 }),
    "--max-batch",
    "1",
    "--max-seq-len",
    "32768",
    "--threads",
    "2",
  ]);
  const model = (await (await fetch(`${srv.url}/v1/models`)).json()).data[0].id as string;
  const rows: ServerRow[] = [];
  for (let r = 0; r < rounds + 1; r++) {
    const t0 = performance.now();
    const res = await fetch(`${srv.url}${first.route}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...first.body, model, max_tokens: 8, stream: true }),
    });
    const headersMs = performance.now() - t0;
    const reader = res.body!.getReader();
    let firstTokenMs = 0;
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      if (!firstTokenMs && /content_block_delta|"delta"/.test(text)) {
        firstTokenMs = performance.now() - t0;
      }
    }
    const usage = /"input_tokens":(\d+)/.exec(text);
    rows.push({
      turn: r === 0 ? "cold (first turn)" : `warm ${r}`,
      headersMs,
      firstTokenMs,
      ...(usage ? { promptTokens: Number(usage[1]) } : {}),
    });
  }
  return rows;
}

if (import.meta.main) {
  const a = parseArgs(Deno.args.filter((x) => x !== "tools"));
  const rows = await compileRows(a);
  const f1 = (x: number) => x.toFixed(1);
  console.log(
    "\nTool-call grammars of the corpus (median of " + a.rounds + " rounds, ms):\n" +
      "| family | tool set | tools | grammar KB | checked / relaxed | first compile | cold compile | warm turn | llama.cpp parse |\n" +
      "|---|---|---|---|---|---|---|---|---|\n" +
      rows.map((r) =>
        `| ${r.family} | ${r.set} | ${r.tools} | ${r.grammarKB} | ${r.checked} / ${r.relaxed} | ` +
        `${f1(r.firstMs)} | ${f1(r.coldMs)} | ${r.warmMs.toFixed(2)} | ${f1(r.llamaParseMs)} |`
      ).join("\n"),
  );
  const server = a.server ? await serverRows(a.rounds) : [];
  if (server.length) {
    console.log(
      "\nThe recorded Claude Code turn (12 tools, /v1/messages) on a real server (tiny hermes " +
        "model, max_tokens 8):\n| turn | headers ms | first token ms | prompt tokens |\n" +
        "|---|---|---|---|\n" +
        server.map((r) =>
          `| ${r.turn} | ${f1(r.headersMs)} | ${f1(r.firstTokenMs)} | ${r.promptTokens ?? ""} |`
        ).join("\n"),
    );
  }
  const out = a.jsonOut ??
    `bench/results/tool-schemas-${new Date().toISOString().replace(/[:.]/g, "-")}.json`;
  await Deno.mkdir(out.slice(0, out.lastIndexOf("/")), { recursive: true });
  await Deno.writeTextFile(
    out,
    JSON.stringify({ date: new Date().toISOString(), rows, server }, null, 2),
  );
  console.log(`\nwrote ${out}`);
}
