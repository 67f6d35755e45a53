// The command line: every bad flag or value exits 2 with one clear line; flags whose feature this
// build cannot do are refused at start-up, never ignored; --help lists every flag.
import assert from "node:assert/strict";
import { FLAGS, parseServeArgs } from "../lib/cli/flags.ts";
import { mainTs, runCommand, startServer } from "./support/server.ts";
import { tinyModelPath } from "./support/models.ts";
import { startupNotes } from "../lib/cli/startup_notes.ts";

const deno = Deno.execPath();

async function hearth(...args: string[]) {
  return await runCommand([deno, "run", "-A", mainTs, ...args], {
    env: { HEARTH_DATA_DIR_UNUSED: "1" },
  });
}

const exitsTwo: [string[], RegExp][] = [
  [["serve", "--bogus"], /unknown flag --bogus/],
  [["serve", "--port", "abc"], /--port "abc": must be an integer/],
  [["serve", "--port", "70000"], /--port "70000": must be at most 65535/],
  [["serve", "--port"], /--port needs a value/],
  [["serve", "--max-batch", "0"], /--max-batch "0": must be at least 1/],
  [["serve", "--isq", "q9"], /--isq "q9": must be one of q2k\|q3k/],
  [["serve", "--kvcache-dtype", "int3"], /--kvcache-dtype "int3": must be one of/],
  [["serve", "--ui-server=yes"], /--ui-server takes no value/],
  [["serve", "--port", "9000", "--port", "9001"], /--port given twice/],
  [["serve", "stray"], /unexpected argument "stray"/],
  [["serve", "--graph-batch", "1,2,1024"], /--graph-batch size 1024 is larger than a ubatch/],
  [
    ["serve", "--graph-batch", "0,4"],
    /--graph-batch "0,4": |--graph-batch sizes must be >= 1/,
  ],
  [
    ["serve", "--max-batch", "250", "--graph-batch", "8,16"],
    /needs 15 padding sequences besides --max-batch 250, more than llama.cpp's 256/,
  ],
  [
    ["serve", "--num-ranks", "2"],
    /--num-ranks 2: 2 local GPUs from GPU 0 are needed but this host/,
  ],
  [["serve", "--local-num-ranks", "3", "--num-ranks", "2"], /--local-num-ranks 3 is more than/],
  [["serve", "--master-addr", "10.0.0.1"], /--master-addr "10.0.0.1": "10.0.0.1" is not HOST:PORT/],
  [["rpc-server", "--host", "10.0.0.1"], /is not loopback: the RPC protocol is unauthenticated/],
  [["rpc-server", "--port", "0"], /--port "0": must be 1 to 65535/],
  [["serve", "--pd-config", "pd.json"], /--pd-config pd.json: /],
  [["serve", "--ui-server", "--ui-port", "8000"], /--ui-port 8000 is also --port/],
  [
    ["serve", "--agents-config", "a.json"],
    /--agents-config on a non-loopback --host .* needs --api-key/,
  ],
  [["serve", "--video-region", "mars"], /--video-region "mars": must be one of global\|eu/],
  [["serve", "--video-backend", "upstream"], /--video-backend upstream needs --video-upstream/],
  [
    ["serve", "--video-upstream", "ftp://x"],
    /--video-upstream "ftp:\/\/x": must be an http\(s\) URL/,
  ],
  [["serve", "--video-workers", "0"], /--video-workers "0": must be at least 1/],
  [["serve", "--mcp-config", "/nonexistent/m.json"], /\/nonexistent\/m.json/],
  [["serve", "--model", "/nonexistent/dir/model.gguf"], /nonexistent/],
  [["serve", "--chat-template", "/nonexistent.jinja"], /--chat-template \/nonexistent.jinja/],
  [["frobnicate"], /unknown command "frobnicate"/],
  [["make-model", "--preset", "huge", "--out", "x.gguf"], /--preset must be tiny, small or 1b/],
  [["make-model", "--preset", "tiny"], /--out PATH is required/],
  [["make-model", "--preset", "tiny", "--out", "x", "--wat"], /unknown argument --wat/],
];

for (const [args, want] of exitsTwo) {
  Deno.test(`hearth ${args.join(" ")} exits 2 with one line`, async () => {
    const r = await hearth(...args);
    assert.equal(r.code, 2, `exit code; stderr: ${r.stderr}`);
    const lines = r.stderr.trim().split("\n");
    assert.equal(lines.length, 1, `one line, got: ${r.stderr}`);
    assert.match(lines[0], want);
    assert.match(lines[0], /^hearth: /);
  });
}

Deno.test("a bad HEARTH_SSE_BUFFER_SIZE exits 2 with one line", async () => {
  const r = await runCommand([deno, "run", "-A", mainTs, "serve", "--model", "/nonexistent.gguf"], {
    env: { HEARTH_SSE_BUFFER_SIZE: "lots" },
  });
  assert.equal(r.code, 2);
  assert.match(r.stderr.trim(), /^hearth: HEARTH_SSE_BUFFER_SIZE=lots: must be a whole number/);
});

Deno.test("--help lists every flag and exits 0", async () => {
  const r = await hearth("serve", "--help");
  assert.equal(r.code, 0);
  for (const f of FLAGS) for (const n of f.names) assert.ok(r.stdout.includes(n), n);
  for (const n of ["--m", "--f", "--isq", "--kvcache-dtype", "--max-batch", "--data-dir"]) {
    assert.ok(r.stdout.includes(n), n);
  }
});

Deno.test("parseServeArgs: defaults, aliases and = syntax", () => {
  const r = parseServeArgs(["--m=x.gguf", "--f", "y.gguf", "--max-seq-len", "4096"], {
    HOME: "/h",
  });
  assert.ok(r.ok);
  if (!r.ok) return;
  assert.equal(r.config.model, "x.gguf");
  assert.equal(r.config.modelFile, "y.gguf");
  assert.equal(r.config.maxSeqLen, 4096);
  assert.equal(r.config.port, 8000);
  assert.equal(r.config.host, "0.0.0.0");
  assert.equal(r.config.maxBatch, "auto");
  assert.equal(r.config.uiPort, 8001);
  assert.equal(r.config.dataDir, "/h/.cache/hearth");
  const g = parseServeArgs(["--graph-batch", "1,2,8"], {});
  assert.ok(g.ok && g.config.graphBatch?.join() === "1,2,8");
});

Deno.test("start-up notes: an open non-loopback listener, and the seed's variables without effect", () => {
  const open = startupNotes({ host: "0.0.0.0" }, {});
  assert.equal(open.length, 1);
  assert.match(
    open[0],
    /^listening on 0\.0\.0\.0 with no --api-key: the inference routes are open/,
  );
  assert.deepEqual(startupNotes({ host: "0.0.0.0", apiKey: "k" }, {}), []);
  assert.deepEqual(startupNotes({ host: "127.0.0.1" }, {}), []);
  assert.deepEqual(startupNotes({ host: "::1" }, {}), []);
  const seed = startupNotes({ host: "127.0.0.1" }, {
    ENGINE_NVFP4_FORCE_LUT: "1",
    SM90_LOWER_PRECISION_GDN_PREFILL: "0",
    COMM_SOCKET_IFNAME: "eth0",
    COMM_IB_DISABLE: "1",
    COMM_DEBUG: "INFO",
    NCCL_DEBUG: "INFO",
  });
  assert.deepEqual(seed.map((n) => n.split(" ")[0]), [
    "ENGINE_NVFP4_FORCE_LUT",
    "SM90_LOWER_PRECISION_GDN_PREFILL",
    "COMM_SOCKET_IFNAME",
    "COMM_IB_DISABLE",
    "COMM_DEBUG",
  ]);
  for (const n of seed) assert.match(n, /is set but has no effect with llama\.cpp: it /);
});

Deno.test("serve says at start-up that a seed variable has no effect", async () => {
  const args = ["--model", await tinyModelPath(), "--max-batch", "2", "--max-seq-len", "256"];
  const srv = await startServer(args, { env: { COMM_IB_DISABLE: "1" } });
  try {
    assert.match(srv.stderr(), /hearth: warning: COMM_IB_DISABLE is set but has no effect/);
  } finally {
    await srv.stop();
  }
});
