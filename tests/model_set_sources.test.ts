// Where the models of a set come from (issue 34 part 1): a `--models-dir` folder (files by stem,
// split files once, model folders, hub cache folders, projectors skipped) and a `--models-config`
// file whose per-model flags pass serve's own flag schemas; each mistake names the model and key.
import assert from "node:assert/strict";
import { parseServeArgs, type ServeConfig } from "../lib/cli/flags.ts";
import { scanModelsDir } from "../lib/models/set/models_dir.ts";
import { parseModelsConfig, readModelsConfig } from "../lib/models/set/models_config.ts";

/** A temp folder holding `files` (empty files; a path ending in `/` is a folder). */
async function tree(files: Record<string, string> | string[]): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "hearth-model-set-" });
  const entries = Array.isArray(files) ? files.map((f) => [f, ""]) : Object.entries(files);
  for (const [path, text] of entries) {
    if (path.endsWith("/")) {
      await Deno.mkdir(`${dir}/${path}`, { recursive: true });
      continue;
    }
    if (path.includes("/")) {
      await Deno.mkdir(`${dir}/${path.slice(0, path.lastIndexOf("/"))}`, { recursive: true });
    }
    await Deno.writeTextFile(`${dir}/${path}`, text);
  }
  return dir;
}

/** `p` fails with a message that `want` matches (anchors apply to the message itself). */
async function rejects(p: Promise<unknown>, want: RegExp): Promise<void> {
  await assert.rejects(p, (e: Error) => {
    assert.match(e.message, want);
    return true;
  });
}

function throws(f: () => unknown, want: RegExp): void {
  assert.throws(f, (e: Error) => {
    assert.match(e.message, want);
    return true;
  });
}

function config(argv: string[]): ServeConfig {
  const r = parseServeArgs(argv, { HOME: "/h" });
  if (!r.ok) throw new Error(r.message);
  return r.config;
}

// ---------------------------------------------------------------- --models-dir

Deno.test("models-dir: files by stem, split files once, folders and hub folders; mmproj skipped", async () => {
  const dir = await tree([
    "qwen3-0.6b.gguf",
    "big-00001-of-00003.gguf",
    "big-00002-of-00003.gguf",
    "big-00003-of-00003.gguf",
    "mmproj-qwen3-F16.gguf",
    "MMPROJ-other.gguf",
    ".partial.gguf",
    "notes.txt",
    "gemma-3-4b/gemma-3-4b-it-Q8_0.gguf",
    "gemma-3-4b/mmproj-F16.gguf",
    "only-projector/mmproj-F16.gguf",
    "empty/",
    "models--Qwen--Qwen3-8B-GGUF/refs/main",
    "models--Qwen--Qwen3-8B-GGUF/snapshots/0123abcd/Qwen3-8B-Q8_0.gguf",
    "models--Qwen--Qwen3-8B-GGUF/snapshots/0123abcd/Qwen3-8B-Q4_K_M.gguf",
    "models--Qwen--Qwen3-8B-GGUF/snapshots/4567ef01/old.gguf",
  ]);
  try {
    await Deno.writeTextFile(`${dir}/models--Qwen--Qwen3-8B-GGUF/refs/main`, "0123abcd\n");
    await Deno.symlink(`${dir}/qwen3-0.6b.gguf`, `${dir}/linked.gguf`);
    await Deno.symlink(`${dir}/gone.gguf`, `${dir}/dangling.gguf`);
    const found = await scanModelsDir(`${dir}/`);
    assert.deepEqual(found, [
      {
        id: "Qwen/Qwen3-8B-GGUF",
        model: `${dir}/models--Qwen--Qwen3-8B-GGUF/snapshots/0123abcd`,
        modelFile: "Qwen3-8B-Q4_K_M.gguf",
      },
      { id: "big", model: `${dir}/big-00001-of-00003.gguf` },
      { id: "gemma-3-4b", model: `${dir}/gemma-3-4b`, modelFile: "gemma-3-4b-it-Q8_0.gguf" },
      { id: "linked", model: `${dir}/linked.gguf` },
      { id: "qwen3-0.6b", model: `${dir}/qwen3-0.6b.gguf` },
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("models-dir: a hub folder without refs/main reads its newest snapshot", async () => {
  const dir = await tree([
    "models--a--b/snapshots/old/x.gguf",
    "models--a--b/snapshots/new/y.gguf",
  ]);
  try {
    await Deno.utime(`${dir}/models--a--b/snapshots/old`, 1000, 1000);
    const [m] = await scanModelsDir(dir);
    assert.deepEqual(m, {
      id: "a/b",
      model: `${dir}/models--a--b/snapshots/new`,
      modelFile: "y.gguf",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("models-dir: no model, a split model without its first part, two models in a folder", async () => {
  const cases: [string[], RegExp][] = [
    [["readme.md", "mmproj-F16.gguf", "empty/"], /^--models-dir \S+ has no \.gguf model/],
    [
      ["ok.gguf", "big-00002-of-00002.gguf"],
      /^--models-dir \S+: the split model big lacks its first part big-00001-of-00002\.gguf/,
    ],
    [
      ["mixed/llama.gguf", "mixed/qwen.gguf"],
      /^--models-dir \S+: folder mixed has several \.gguf files \(llama\.gguf, qwen\.gguf\)/,
    ],
  ];
  for (const [files, want] of cases) {
    const dir = await tree(files);
    try {
      await rejects(scanModelsDir(dir), want);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  await rejects(
    scanModelsDir("/nonexistent/models"),
    /^--models-dir \/nonexistent\/models: /,
  );
});

// ---------------------------------------------------------------- --models-config

Deno.test("models-config: per-model flags pass serve's own schemas, to the same values", () => {
  const [m] = parseModelsConfig({
    models: {
      coder: {
        "model": "Qwen/Qwen3-Coder-GGUF",
        "model-file": "q4.gguf",
        "aliases": ["gpt-*", "coder-latest", "gpt-*"],
        "max-seq-len": 8192,
        "max-batch": "auto",
        "kvcache-dtype": "q8_0",
        "chat-template": "t.jinja",
        "isq": "q4k",
        "dtype": "bf16",
        "mtp": "2",
        "graph-batch": [1, 2, 4],
      },
    },
  }, "--models-config m.json");
  assert.deepEqual(m, {
    id: "coder",
    model: "Qwen/Qwen3-Coder-GGUF",
    modelFile: "q4.gguf",
    aliases: ["gpt-*", "coder-latest"],
    flags: {
      maxSeqLen: 8192,
      maxBatch: "auto",
      kvcacheDtype: "q8_0",
      chatTemplate: "t.jinja",
      isq: "q4k",
      dtype: "bf16",
      mtp: 2,
      graphBatch: [1, 2, 4],
    },
  });
  // The same text on the command line gives the same values.
  const c = config(["--max-seq-len", "8192", "--mtp", "2", "--graph-batch", "1,2,4"]);
  assert.deepEqual([c.maxSeqLen, c.mtp, c.graphBatch], [8192, 2, [1, 2, 4]]);
  const [off] = parseModelsConfig({ models: { a: { model: "a", "graph-batch": "off" } } }, "f");
  assert.deepEqual(off.flags, { graphBatch: [] });
});

Deno.test("models-config: unknown keys and bad values name the model and the key", () => {
  const where = "--models-config m.json";
  const bad: [unknown, RegExp][] = [
    [[], /^--models-config m\.json: needs \{"models"/],
    [{ model: {} }, /^--models-config m\.json: needs \{"models"/],
    [{ models: {}, extra: 1 }, /: unknown key "extra"/],
    [{ models: {} }, /: "models" names no model$/],
    [{ models: { "": { model: "a" } } }, /: a model id must not be empty$/],
    [{ models: { q: "a.gguf" } }, /: model "q": must be an object/],
    [{ models: { q: {} } }, /: model "q": "model" must be a hub id/],
    [{ models: { q: { model: "" } } }, /: model "q": "model" must be/],
    [{ models: { q: { model: "a", "model-file": 3 } } }, /: model "q": "model-file" must be/],
    [{ models: { q: { model: "a", aliases: "x" } } }, /: model "q": "aliases" must be a list/],
    [{ models: { q: { model: "a", aliases: [""] } } }, /: model "q": "aliases" must be a list/],
    [
      { models: { q: { model: "a", max_seq_len: 4096 } } },
      /: model "q": unknown key "max_seq_len" \(known: model, model-file, aliases, max-seq-len,/,
    ],
    [{ models: { q: { model: "a", port: 1 } } }, /: model "q": unknown key "port"/],
    [
      { models: { ok: { model: "a" }, q: { model: "b", "max-seq-len": 8 } } },
      /^--models-config m\.json: model "q": "max-seq-len" 8: must be at least 16$/,
    ],
    [{ models: { q: { model: "a", "max-batch": 0 } } }, /model "q": "max-batch" 0: must be/],
    [
      { models: { q: { model: "a", isq: "q9" } } },
      /model "q": "isq" "q9": must be one of q2k\|q3k\|q4k\|q5k\|q6k\|q8_0$/,
    ],
    [
      { models: { q: { model: "a", "kvcache-dtype": "int3" } } },
      /"kvcache-dtype" "int3": must be one of/,
    ],
    [{ models: { q: { model: "a", dtype: "fp8" } } }, /model "q": "dtype" "fp8": must be one of/],
    [{ models: { q: { model: "a", mtp: 1.5 } } }, /model "q": "mtp" 1\.5: must be an integer/],
    [
      { models: { q: { model: "a", mtp: true } } },
      /model "q": "mtp" true: must be a string or a number/,
    ],
    [
      { models: { q: { model: "a", "chat-template": "" } } },
      /"chat-template" "": must not be empty/,
    ],
    [
      { models: { q: { model: "a", "graph-batch": [1, "x"] } } },
      /"graph-batch" \[1,"x"\]: must be/,
    ],
    [
      { models: { q: { model: "a", "graph-batch": "1;2" } } },
      /"graph-batch" "1;2": must be off or/,
    ],
  ];
  for (const [doc, want] of bad) {
    throws(() => parseModelsConfig(doc, where), want);
  }
});

Deno.test("models-config: a file it cannot read or parse; paths beside the file are found there", async () => {
  const dir = await tree({
    "conf/m.json": JSON.stringify({
      models: {
        here: { model: "here.gguf", "chat-template": "t.jinja" },
        hub: { model: "owner/repo" },
        abs: { model: "/abs/x.gguf" },
      },
    }),
    "conf/here.gguf": "",
    "conf/t.jinja": "",
    "conf/broken.json": "{",
  });
  try {
    const models = await readModelsConfig(`${dir}/conf/m.json`);
    assert.deepEqual(models.map((m) => m.model), [
      `${dir}/conf/here.gguf`,
      "owner/repo",
      "/abs/x.gguf",
    ]);
    assert.equal(models[0].flags.chatTemplate, `${dir}/conf/t.jinja`);
    await rejects(readModelsConfig(`${dir}/conf/broken.json`), /: not valid JSON: /);
    await rejects(readModelsConfig(`${dir}/none.json`), /^--models-config \S+none\.json: /);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
