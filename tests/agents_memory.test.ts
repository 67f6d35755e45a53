/**
 * Agent memory over a real Deno.serve on loopback, real files in a temp directory and a real bus:
 * CRUD, search ranking and hostile queries, validation on every route, `memory_status` events,
 * edits made outside the server (the watcher), reopening over an existing directory (with and
 * without its index), the note limit, and the block `relevant()` hands to agents.
 */
import assert from "node:assert/strict";
import { createBus, type PublicEvent } from "../lib/events/bus.ts";
import {
  createMemory,
  MAX_NOTE_BYTES,
  MAX_NOTES,
  type Memory,
  MemoryError,
} from "../lib/agents/memory.ts";
import { memoryRoutes } from "../routes/memory.ts";
import {
  captureEvents,
  jsonApi,
  promptsOf,
  scriptedConfig,
  serveAgents,
  withAgentsTree,
} from "./support/agents.ts";
import { freePort } from "./support/server.ts";

// deno-lint-ignore no-explicit-any -- response bodies are checked field by field
type Json = any;

const T0 = Date.parse("2025-01-02T03:04:05.000Z");

type Harness = {
  url: string;
  dir: string;
  memory: Memory;
  events: PublicEvent[];
  status(reason?: string): PublicEvent[];
  waitFor(pred: (e: PublicEvent) => boolean, ms?: number): Promise<PublicEvent>;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }>;
  /** Closes the memory and the server (idempotent). */
  stop(): Promise<void>;
};

/** A memory over `dir` (a fresh temp dir when absent), served on loopback; all removed after. */
async function withMemory(
  f: (h: Harness) => Promise<void> | void,
  opts: { dir?: string; watch?: boolean; now?: () => number } = {},
) {
  const own = opts.dir === undefined;
  const dir = opts.dir ?? await Deno.makeTempDir({ prefix: "hearth-memory-" });
  const bus = createBus();
  const log = captureEvents(bus, 5000);
  const events = log.events;
  const memory = await createMemory({
    dir,
    bus,
    watch: opts.watch,
    now: opts.now ?? (() => T0),
  });
  const port = freePort();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port, onListen() {} },
    memoryRoutes(memory).fetch,
  );
  const url = `http://127.0.0.1:${port}`;
  let stopped = false;
  const h: Harness = {
    url,
    dir,
    memory,
    events,
    status: (reason) =>
      events.filter((e) => e.event === "memory_status" && (!reason || e.reason === reason)),
    waitFor: log.waitFor,
    api: jsonApi(url),
    async stop() {
      if (stopped) return;
      stopped = true;
      await memory.close();
      await server.shutdown();
      log.off();
    },
  };
  try {
    await f(h);
  } finally {
    await h.stop();
    if (own) await Deno.remove(dir, { recursive: true });
  }
}

/** Captures console.error lines while `f` runs. */
async function capturingErrors<T>(f: (lines: string[]) => Promise<T>): Promise<T> {
  const lines: string[] = [];
  const orig = console.error;
  console.error = (...args: unknown[]) => lines.push(args.map(String).join(" "));
  try {
    return await f(lines);
  } finally {
    console.error = orig;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("memory: save, get, replace, list and delete over HTTP", async () => {
  await withMemory(async (h) => {
    let r = await h.api("PUT", "/api/memory/deploy", { text: "Run make deploy.\n" });
    assert.equal(r.status, 201);
    assert.deepEqual(r.json, {
      name: "deploy",
      bytes: 17,
      updatedAt: new Date(T0).toISOString(),
    });
    assert.equal(await Deno.readTextFile(`${h.dir}/deploy.md`), "Run make deploy.\n");
    // No temporary file is left behind.
    assert.deepEqual(
      [...Deno.readDirSync(h.dir)].map((e) => e.name).filter((n) => !n.startsWith(".index.db")),
      ["deploy.md"],
    );

    r = await h.api("GET", "/api/memory/deploy");
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, {
      name: "deploy",
      bytes: 17,
      updatedAt: new Date(T0).toISOString(),
      text: "Run make deploy.\n",
    });
    // A trailing .md names the same note.
    assert.equal((await h.api("GET", "/api/memory/deploy.md")).json.text, "Run make deploy.\n");

    r = await h.api("PUT", "/api/memory/deploy.md", { text: "Run `make deploy` — never Fridays." });
    assert.equal(r.status, 200);
    assert.equal(r.json.name, "deploy");
    assert.equal(
      r.json.bytes,
      new TextEncoder().encode("Run `make deploy` — never Fridays.").length,
    );
    assert.equal((await h.api("GET", "/api/memory/deploy")).json.text.includes("Fridays"), true);

    assert.equal((await h.api("PUT", "/api/memory/Zeta_1.2-x", { text: "z" })).status, 201);
    assert.equal((await h.api("PUT", "/api/memory/alpha", { text: "" })).status, 201);
    r = await h.api("GET", "/api/memory");
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.notes.map((n: Json) => n.name), ["Zeta_1.2-x", "alpha", "deploy"]);
    assert.deepEqual(Object.keys(r.json.notes[0]).sort(), ["bytes", "name", "updatedAt"]);

    r = await h.api("DELETE", "/api/memory/deploy");
    assert.equal(r.status, 204);
    assert.equal(r.json, null);
    await assert.rejects(Deno.stat(`${h.dir}/deploy.md`), Deno.errors.NotFound);
    r = await h.api("GET", "/api/memory/deploy");
    assert.equal(r.status, 404);
    assert.deepEqual(r.json, { error: "NOT_FOUND", message: "no note named deploy" });
    r = await h.api("DELETE", "/api/memory/deploy");
    assert.equal(r.status, 404);
    assert.equal(r.json.error, "NOT_FOUND");
    assert.deepEqual(
      (await h.api("GET", "/api/memory")).json.notes.map((n: Json) => n.name),
      ["Zeta_1.2-x", "alpha"],
    );
    assert.deepEqual(h.memory.search("deploy"), []);
  }, { watch: false });
});

Deno.test("memory: search ranks name and body matches first and survives FTS5 syntax", async () => {
  await withMemory(async (h) => {
    h.memory.put("deploy", "How to deploy: run make deploy from the repository root.");
    h.memory.put(
      "journal",
      "Monday we talked about many things. Someone mentioned that we deploy on Tuesdays, " +
        "and the coffee machine is broken again. Lots of other words to dilute the match.",
    );
    h.memory.put("deploy-history", "Rollbacks happened twice last year.");
    // By bm25 alone this one would come first: the word over and over.
    h.memory.put("essay", "deploy ".repeat(500));
    h.memory.put("cafe", "Le café près du bureau ouvre à 8h.");
    h.memory.put("unrelated", "Nothing to see here.");

    let r = await h.api("GET", "/api/memory/search?q=deploy");
    assert.equal(r.status, 200);
    assert.equal(r.json.query, "deploy");
    const names = r.json.hits.map((x: Json) => x.name);
    assert.equal(names[0], "deploy");
    assert.deepEqual(names, ["deploy", "deploy-history", "essay", "journal"]);
    const top = r.json.hits[0];
    assert.deepEqual(Object.keys(top).sort(), ["bytes", "name", "score", "snippet", "updatedAt"]);
    assert.match(top.snippet, /deploy/);
    for (let i = 1; i < r.json.hits.length; i++) {
      assert.ok(r.json.hits[i - 1].score >= r.json.hits[i].score, "best first");
    }

    // Porter stemming and unicode words.
    assert.equal(h.memory.search("deploying")[0].name, "deploy");
    assert.deepEqual(h.memory.search("CAFÉ").map((x) => x.name), ["cafe"]);

    r = await h.api("GET", "/api/memory/search?q=deploy&limit=1");
    assert.equal(r.status, 200);
    assert.equal(r.json.hits.length, 1);

    const hostile = [
      '"',
      '"deploy',
      "deploy*",
      "*",
      "NEAR(deploy tacos",
      "NEAR(",
      "-deploy",
      "name:deploy",
      "body:",
      ":",
      "deploy AND OR NOT",
      "(deploy",
      "^deploy",
      "{name body}: x",
      "'; DROP TABLE notes; --",
      "\u0000",
    ];
    for (const q of hostile) {
      r = await h.api("GET", `/api/memory/search?q=${encodeURIComponent(q)}`);
      assert.equal(r.status, 200, `q=${q}: ${JSON.stringify(r.json)}`);
      assert.ok(Array.isArray(r.json.hits), q);
      if (/deploy/.test(q)) assert.equal(r.json.hits[0]?.name, "deploy", q);
    }
    // Only punctuation: nothing to look for.
    assert.deepEqual((await h.api("GET", "/api/memory/search?q=***")).json.hits, []);
    assert.equal(h.memory.list().length, 6, "the index is intact");
  }, { watch: false });
});

Deno.test("memory: every bad input is a 4xx with a clear message", async () => {
  await withMemory(async (h) => {
    await h.api("PUT", "/api/memory/ok", { text: "fine" });
    const badNames: [string, RegExp][] = [
      ["..%2Fetc", /\/|\.\./],
      ["..%2F..%2Fetc%2Fpasswd", /\/|\.\./],
      ["a%2Fb", /contains \/ or \\/],
      ["a%5Cb", /contains \/ or \\/],
      [".hidden", /starting with a letter or digit/],
      ["a..b", /".."/],
      ["x".repeat(101), /1-100 characters/],
      ["-dash", /starting with a letter or digit/],
      ["a%20b", /letters, digits/],
      ["a%00b", /letters, digits/],
      ["n%C3%A9", /letters, digits/],
      ["x.md.md", /\.md twice/],
      ["a..md", /".."/],
      ["a.", /ends in "\."/],
      [".md", /empty/],
    ];
    for (const [name, re] of badNames) {
      for (const method of ["GET", "PUT", "DELETE"]) {
        const r = await h.api(
          method,
          `/api/memory/${name}`,
          method === "PUT" ? { text: "t" } : undefined,
        );
        assert.equal(r.status, 400, `${method} ${name}: ${JSON.stringify(r.json)}`);
        assert.equal(r.json.error, "BAD_REQUEST", `${method} ${name}`);
        assert.match(r.json.message, re, `${method} ${name}`);
      }
    }
    // A client's URL parser resolves a bare ".." before the request is sent: still a 4xx.
    for (const method of ["GET", "PUT", "DELETE"]) {
      const r = await h.api(method, "/api/memory/..", method === "PUT" ? { text: "t" } : undefined);
      assert.equal(r.status, 404, method);
    }
    // 100 characters is the longest name, and the .md suffix does not count.
    assert.equal(
      (await h.api("PUT", `/api/memory/${"x".repeat(100)}.md`, { text: "t" })).status,
      201,
    );

    // "search" is reserved: its GET is the search route, the other methods refuse the name.
    for (const method of ["PUT", "DELETE"]) {
      const r = await h.api(
        method,
        "/api/memory/search",
        method === "PUT" ? { text: "t" } : undefined,
      );
      assert.equal(r.status, 400, method);
      assert.match(r.json.message, /reserved/);
    }
    assert.throws(() => h.memory.put("search.md", "x"), /reserved/);

    const badBodies: [unknown, number, RegExp][] = [
      [{ text: "a\u0000b" }, 400, /NUL/],
      [{ text: "x".repeat(MAX_NOTE_BYTES + 1) }, 413, /at most 65536/],
      [{ text: "é".repeat(MAX_NOTE_BYTES / 2 + 1) }, 413, /bytes of UTF-8/],
      [{ text: "ok", extra: 1 }, 400, /Unrecognized request argument supplied: extra/],
      [{}, 400, /text: is required/],
      [{ text: 42 }, 400, /^text: .*string/],
      [{ text: null }, 400, /^text: /],
      [[], 400, /object/],
      ["not json", 400, /not valid JSON/],
      ["{", 400, /not valid JSON/],
      ["", 400, /empty/],
      [JSON.stringify({ text: "x".repeat(9 * MAX_NOTE_BYTES) }), 413, /request body is over/],
    ];
    for (const [body, status, re] of badBodies) {
      const r = await h.api("PUT", "/api/memory/ok", body);
      const what = typeof body === "string" ? body.slice(0, 20) : JSON.stringify(body).slice(0, 40);
      assert.equal(r.status, status, `${what}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error, status === 413 ? "TOO_LARGE" : "BAD_REQUEST", what);
      assert.match(r.json.message, re, what);
    }
    assert.equal((await h.api("GET", "/api/memory/ok")).json.text, "fine", "nothing was written");
    // Exactly the limit is fine.
    assert.equal(
      (await h.api("PUT", "/api/memory/ok", { text: "x".repeat(MAX_NOTE_BYTES) })).status,
      200,
    );

    for (const qs of ["", "?q=", "?q=%20%20", "?limit=3"]) {
      const r = await h.api("GET", `/api/memory/search${qs}`);
      assert.equal(r.status, 400, qs);
      assert.match(r.json.message, /q is required/, qs);
    }
    for (const limit of ["0", "51", "-1", "1.5", "abc", "", "1e1", "99999999999"]) {
      const r = await h.api("GET", `/api/memory/search?q=ok&limit=${limit}`);
      assert.equal(r.status, 400, limit);
      assert.match(r.json.message, /limit must be an integer from 1 to 50/, limit);
    }
    assert.throws(() => h.memory.search("ok", 51), MemoryError);

    const r = await h.api("POST", "/api/memory/ok", { text: "x" });
    assert.equal(r.status, 404);
    assert.equal(r.json.error, "NOT_FOUND");
  }, { watch: false });
});

Deno.test("memory: memory_status events for startup, save and delete", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-memory-" });
  try {
    await Deno.writeTextFile(`${dir}/one.md`, "first note");
    await Deno.writeTextFile(`${dir}/two.md`, "second note");
    await withMemory(async (h) => {
      assert.deepEqual(h.status(), [
        { topic: "memory", event: "memory_status", reason: "startup", files: 2, indexed: 2 },
      ]);
      await h.api("PUT", "/api/memory/three", { text: "third" });
      await h.api("PUT", "/api/memory/three", { text: "third, again" });
      await h.api("DELETE", "/api/memory/one");
      const rest = h.status().slice(1).map(({ reason, files, indexed, name }) => ({
        reason,
        files,
        indexed,
        name,
      }));
      assert.deepEqual(rest, [
        { reason: "saved", files: 3, indexed: 3, name: "three" },
        { reason: "saved", files: 3, indexed: 3, name: "three" },
        { reason: "deleted", files: 2, indexed: 2, name: "one" },
      ]);
      // Refusals change nothing and say nothing.
      await h.api("DELETE", "/api/memory/one");
      await h.api("PUT", "/api/memory/bad", { text: "\u0000" });
      assert.equal(h.status().length, 4);
    }, { dir, watch: false });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("memory: files edited outside the server are reindexed by the watcher", async () => {
  await capturingErrors(async (errors) => {
    await withMemory(async (h) => {
      await h.waitFor((e) => e.reason === "startup");
      // The server's own writes are not mistaken for outside edits.
      h.memory.put("own", "written through the API");
      await sleep(400);
      assert.equal(h.status("external").length, 0);

      await Deno.writeTextFile(`${h.dir}/outside.md`, "zanzibar logistics written by hand");
      let e = await h.waitFor((e) => e.reason === "external" && e.name === "outside");
      assert.equal(e.files, 2);
      assert.equal(e.indexed, 2);
      let r = await h.api("GET", "/api/memory/search?q=zanzibar");
      assert.deepEqual(r.json.hits.map((x: Json) => x.name), ["outside"]);

      // An edit replaces the indexed text.
      await Deno.writeTextFile(`${h.dir}/outside.md`, "now about kilimanjaro instead");
      await h.waitFor((e) =>
        e.reason === "external" && h.memory.search("kilimanjaro").length === 1
      );
      assert.deepEqual(h.memory.search("zanzibar"), []);

      // Invalid names and oversized files are skipped, and say so once.
      await Deno.writeTextFile(`${h.dir}/bad name.md`, "zanzibar");
      await Deno.writeTextFile(`${h.dir}/big.md`, "x".repeat(MAX_NOTE_BYTES + 1));
      await Deno.writeTextFile(`${h.dir}/notes.txt`, "zanzibar");
      await Deno.writeTextFile(`${h.dir}/.hidden.md`, "zanzibar");
      const mark = h.events.length;
      await Deno.writeTextFile(`${h.dir}/third.md`, "a third one");
      await h.waitFor((e) => e.reason === "external" && h.events.indexOf(e) >= mark);
      assert.deepEqual(h.memory.list().map((n) => n.name), ["outside", "own", "third"]);
      assert.deepEqual(h.memory.search("zanzibar"), []);
      assert.ok(
        errors.some((l) => l.includes("bad name.md") && l.includes("not a valid note name")),
      );
      assert.ok(errors.some((l) => l.includes("big.md") && l.includes("65536")));
      assert.ok(!errors.some((l) => l.includes("notes.txt") || l.includes(".hidden.md")));
      assert.equal(errors.filter((l) => l.includes("big.md")).length, 1);

      // A removal drops the note from the index.
      await Deno.remove(`${h.dir}/outside.md`);
      e = await h.waitFor((e) => e.reason === "external" && e.name === "outside");
      assert.equal(e.files, 2);
      assert.equal(e.indexed, 2);
      r = await h.api("GET", "/api/memory/outside");
      assert.equal(r.status, 404);
    });
  });
});

Deno.test("memory: reopening finds the notes, with or without the index", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-memory-" });
  try {
    await withMemory((h) => {
      h.memory.put("alpha", "the quick brown fox");
      h.memory.put("beta", "jumps over the lazy dog");
    }, { dir, watch: false });
    // Edited while the server was down: found by mtime and size.
    await Deno.writeTextFile(`${dir}/beta.md`, "sleeps under the old oak tree");
    await Deno.writeTextFile(`${dir}/gamma.md`, "added while stopped");

    const check = async (h: Harness) => {
      assert.deepEqual(h.status("startup").map((e) => [e.files, e.indexed]), [[3, 3]]);
      assert.deepEqual(h.memory.list().map((n) => n.name), ["alpha", "beta", "gamma"]);
      assert.equal(h.memory.list()[0].updatedAt, new Date(T0).toISOString());
      assert.deepEqual(h.memory.search("oak").map((x) => x.name), ["beta"]);
      assert.deepEqual(h.memory.search("lazy"), []);
      assert.deepEqual(h.memory.search("fox").map((x) => x.name), ["alpha"]);
      assert.equal((await h.api("GET", "/api/memory/gamma")).json.text, "added while stopped");
    };
    await withMemory(check, { dir, watch: false });

    for (const f of [".index.db", ".index.db-wal", ".index.db-shm"]) {
      await Deno.remove(`${dir}/${f}`).catch(() => {});
    }
    await withMemory(check, { dir, watch: false });

    // A damaged index is rebuilt from the files.
    await Deno.writeTextFile(`${dir}/.index.db`, "this is not a database ".repeat(100));
    await capturingErrors(async (errors) => {
      await withMemory(check, { dir, watch: false });
      assert.ok(errors.some((l) => l.includes("rebuilding")));
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("memory: at most 1000 notes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-memory-" });
  try {
    for (let i = 0; i <= MAX_NOTES; i++) {
      Deno.writeTextFileSync(`${dir}/n${String(i).padStart(4, "0")}.md`, `note ${i}`);
    }
    await capturingErrors(async (errors) => {
      await withMemory(async (h) => {
        const [start] = h.status("startup");
        assert.equal(start.files, MAX_NOTES + 1);
        assert.equal(start.indexed, MAX_NOTES);
        assert.ok(errors.some((l) => l.includes("n1000.md") && l.includes("more than 1000")));
        let r = await h.api("PUT", "/api/memory/another", { text: "x" });
        assert.equal(r.status, 409);
        assert.equal(r.json.error, "LIMIT");
        assert.match(r.json.message, /at most 1000 notes/);
        r = await h.api("PUT", "/api/memory/n0001", { text: "replaced" });
        assert.equal(r.status, 200);
        assert.equal((await h.api("DELETE", "/api/memory/n0002")).status, 204);
        assert.equal((await h.api("DELETE", "/api/memory/n0003")).status, 204);
        assert.equal((await h.api("PUT", "/api/memory/another", { text: "x" })).status, 201);
      }, { dir, watch: false });
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("memory: relevant() is bounded, formatted and empty when nothing helps", async () => {
  await withMemory((h) => {
    const m = h.memory;
    assert.equal(m.relevant("how do we deploy the site?"), "", "no notes yet");
    m.put("deploy", "Run `make deploy` from the repository root.\nNever deploy on Fridays.");
    m.put("database", "The staging database lives on host db2; deploy migrations first.");
    m.put("lunch", "Tacos on Tuesday.");

    let block = m.relevant("How do we deploy the site?");
    assert.equal(
      block,
      "<memory>\nNotes saved in Hearth's memory that may help (most relevant first):\n\n" +
        "## deploy\nRun `make deploy` from the repository root.\nNever deploy on Fridays.\n\n" +
        "## database\nThe staging database lives on host db2; deploy migrations first.\n" +
        "</memory>\n\n",
    );

    // A note too long for what is left is cut, and the block keeps its bound.
    m.put("long-essay", "deploy ".repeat(2000).trim());
    block = m.relevant("How do we deploy the site?");
    assert.ok(block.startsWith("<memory>\n"));
    assert.ok(block.endsWith("…\n</memory>\n\n"), block.slice(-40));
    assert.equal(block.length <= 4000 && block.length > 3900, true, `${block.length}`);
    assert.ok(block.indexOf("## deploy\n") < block.indexOf("## long-essay\n"));
    assert.ok(!block.includes("## lunch"));

    for (let max = 200; max <= 5000; max += 97) {
      const b = m.relevant("deploy", max);
      assert.ok(b.length <= max, `${max}: ${b.length}`);
      assert.ok(b === "" || (b.startsWith("<memory>\n") && b.endsWith("</memory>\n\n")), `${max}`);
    }
    assert.notEqual(m.relevant("deploy", 200), "");
    assert.equal(m.relevant("deploy", 199), "");
    assert.equal(m.relevant("deploy", 0), "");
    // Stopwords and short words alone find nothing, nor does syntax.
    assert.equal(m.relevant("the of to is a on at it"), "");
    assert.equal(m.relevant('"* NEAR( - : )'), "");
    assert.equal(m.relevant(""), "");
    // A long prompt of short words still finds the one that matters.
    assert.ok(m.relevant("x ".repeat(50_000) + "tacos").includes("## lunch"));
    assert.ok(m.relevant("tacos please").includes("## lunch\nTacos on Tuesday.\n</memory>"));
  }, { watch: false });
});

Deno.test("memory: a vanished directory is logged, not fatal, and close still works", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-memory-" });
  await capturingErrors(async (errors) => {
    const memory = await createMemory({ dir, bus: createBus() });
    memory.put("a", "alpha");
    await Deno.remove(dir, { recursive: true });
    await sleep(500);
    assert.deepEqual(memory.list().map((n) => n.name), ["a"], "the index still answers");
    await memory.close();
    assert.ok(errors.every((l) => l.startsWith("hearth: memory")), errors.join("\n"));
  });
  await Deno.remove(dir, { recursive: true }).catch(() => {});
});

Deno.test("memory: an agent's run gets the relevant notes before its prompt", async () => {
  await withAgentsTree(async (dir) => {
    const config = await scriptedConfig(dir, {
      agent: { rules: [{ match: "", replies: ["noted"] }] },
    });
    await using h = await serveAgents(config, `${dir}/data`, { watchMemory: false });
    const saved = await h.api("PUT", "/api/memory/deploy", {
      text: "Deploys go through `make release`; never push to the prod branch by hand.",
    });
    assert.equal(saved.status, 201);
    await h.api("PUT", "/api/memory/cooking", { text: "Pasta wants salted water." });
    assert.equal(h.of("memory_status").at(-1)!.reason, "saved");
    assert.equal(h.of("memory_status").at(-1)!.files, 2);
    assert.equal(h.of("memory_status").at(-1)!.indexed, 2);

    const id = (await h.api("POST", "/api/sessions", { agent: "agent" })).json.id;
    await h.api("POST", `/api/sessions/${id}/messages`, { text: "How do I deploy this?" });
    await h.waitFor((e) => e.event === "new_message" && e.role === "assistant");
    const [prompt] = await promptsOf(dir, "agent");
    assert.match(prompt, /^<memory>\n/);
    assert.match(prompt, /## deploy\nDeploys go through `make release`/);
    assert.doesNotMatch(prompt, /Pasta/);
    assert.ok(prompt.endsWith("</memory>\n\nHow do I deploy this?"));
    // The history and the event keep the text as the user sent it.
    const history = (await h.api("GET", `/api/sessions/${id}`)).json.history;
    assert.equal(history[0].content, "How do I deploy this?");

    // Nothing relevant: the prompt goes as it is.
    await h.api("POST", `/api/sessions/${id}/messages`, { text: "hello there" });
    await h.waitFor(() =>
      h.of("new_message", id).filter((e) => e.role === "assistant").length >= 2
    );
    assert.equal((await promptsOf(dir, "agent"))[1], "hello there");
  });
});
