// `serve` with the flags of several models (issue 34 part 1): a mistake in the set exits 2 with one
// line naming the flag, model and key; what is not built yet (several models, aliases, the
// `--models-*` bounds) exits 2 saying so rather than being ignored; one model from a folder or a
// models file is served under its id, as `--model` serves one today.
import assert from "node:assert/strict";
import { mainTs, runCommand, startServer } from "./support/server.ts";
import { tinyModelPath } from "./support/models.ts";

const deno = Deno.execPath();
const dir = await Deno.makeTempDir({ prefix: "hearth-model-set-cli-" });
const file = (name: string, text = "") => Deno.writeTextFileSync(`${dir}/${name}`, text);
Deno.mkdirSync(`${dir}/two`);
Deno.mkdirSync(`${dir}/empty`);
file("two/a.gguf");
file("two/b.gguf");
file("bad-value.json", JSON.stringify({ models: { q: { model: "x/y", "max-seq-len": 8 } } }));
file("bad-key.json", JSON.stringify({ models: { q: { model: "x/y", "max_batch": 2 } } }));
file("broken.json", "{");

const NOT_BUILT = /^hearth: serving several models is not built yet \(issue 34\): /;

// A pattern without `^` is a tail of the not-built line; one with `^` is the whole line.

const exitsTwo: [string[], RegExp][] = [
  [["--model", `${dir}/two/a.gguf`, "--model", `${dir}/two/b.gguf`], /2 models \(a, b\)/],
  [["--models-dir", `${dir}/two`], /2 models \(a, b\); serve one model per process for now$/],
  [["--models-max", "2"], /--models-max needs it/],
  [["--models-idle", "60"], /--models-idle needs it/],
  [["--models-preload", "hearth-demo"], /--models-preload needs it/],
  [["--model-alias", "claude-*=hearth-demo"], /aliases .* need it/],
  [
    ["--models-config", `${dir}/bad-value.json`],
    /^hearth: --models-config \S+bad-value\.json: model "q": "max-seq-len" 8: must be at least 16$/,
  ],
  [
    ["--models-config", `${dir}/bad-key.json`],
    /^hearth: --models-config \S+bad-key\.json: model "q": unknown key "max_batch" \(known: /,
  ],
  [["--models-config", `${dir}/broken.json`], /^hearth: --models-config \S+: not valid JSON: /],
  [["--models-config", `${dir}/none.json`], /^hearth: --models-config \S+none\.json: /],
  [["--models-dir", `${dir}/empty`], /^hearth: --models-dir \S+empty has no \.gguf model/],
  [
    ["--model-alias", "claude-*=nope"],
    /^hearth: --model-alias claude-\*=nope: no model "nope" \(models: hearth-demo\)$/,
  ],
  [["--model-alias", "claude"], /^hearth: --model-alias "claude": must be PATTERN=ID$/],
  [
    ["--default-model", "nope"],
    /^hearth: --default-model: no model "nope" \(models: hearth-demo\)$/,
  ],
  [["--models-max", "0"], /^hearth: --models-max "0": must be at least 1$/],
  [
    ["--model", "a", "--model", "a"],
    /^hearth: model id "a" is given twice \(by --model a and by --model a\)/,
  ],
];

for (const [args, want] of exitsTwo) {
  Deno.test(`hearth serve ${args.join(" ").replaceAll(dir, "DIR")} exits 2 with one line`, async () => {
    const r = await runCommand([deno, "run", "-A", mainTs, "serve", ...args]);
    assert.equal(r.code, 2, `exit code; stderr: ${r.stderr}`);
    const lines = r.stderr.trim().split("\n");
    assert.equal(lines.length, 1, `one line, got: ${r.stderr}`);
    assert.match(lines[0], /^hearth: /);
    if (!want.source.startsWith("^")) assert.match(lines[0], NOT_BUILT);
    assert.match(lines[0], want);
  });
}

Deno.test("--help lists the flags of several models", async () => {
  const r = await runCommand([deno, "run", "-A", mainTs, "serve", "--help"]);
  assert.equal(r.code, 0);
  for (
    const flag of [
      "--m, --model ID|DIR|FILE",
      "--models-dir DIR",
      "--models-config FILE",
      "--model-alias PATTERN=ID",
      "--default-model ID",
      "--models-max N",
      "--models-idle SECONDS",
      "--models-preload ID,...",
    ]
  ) {
    assert.ok(r.stdout.includes(flag), flag);
  }
});

Deno.test("one model from a models file is served under its id, with its own flags", async () => {
  const conf = `${dir}/one.json`;
  file(
    "one.json",
    JSON.stringify({
      models: { "tiny-one": { model: await tinyModelPath(), "max-seq-len": 256, "max-batch": 2 } },
    }),
  );
  await using srv = await startServer(["--models-config", conf, "--threads", "2"]);
  const list = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.deepEqual(list.data.map((m: { id: string }) => m.id), ["tiny-one"]);
  assert.equal(list.data[0].max_model_len, 256);
});

Deno.test("one model from a folder is served under its file stem", async () => {
  Deno.mkdirSync(`${dir}/one`);
  await Deno.symlink(await tinyModelPath(), `${dir}/one/tiny-stem.gguf`);
  await using srv = await startServer([
    "--models-dir",
    `${dir}/one`,
    "--max-seq-len",
    "256",
    "--max-batch",
    "2",
    "--threads",
    "2",
  ]);
  const list = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.deepEqual(list.data.map((m: { id: string }) => m.id), ["tiny-stem"]);
});

Deno.test({
  name: "(cleanup)",
  fn: async () => await Deno.remove(dir, { recursive: true }),
  sanitizeResources: false,
});
