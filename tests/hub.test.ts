// Hub downloads against a local fake hub that speaks the Hugging Face protocol: a JSON listing
// at /api/models/{id}, /{id}/resolve/{rev}/{file} answering 302 to a separate blob path (as the
// real hub redirects to its CDN), 401 for private repos without the right token, and 404s. A
// second, raw-TCP "CDN" sends a body shorter than its Content-Length to test interrupted
// downloads. Every test runs its own hub on a free port and passes the endpoint through an
// `env` object, so the file is safe to run in parallel. Also covers resolveModel's local cases.
import assert from "node:assert/strict";
import {
  downloadHubModel,
  hubCacheDir,
  hubEndpoint,
  hubToken,
  listRepoFiles,
  parseHubId,
  pickGguf,
  shardSiblings,
} from "../lib/models/hub.ts";
import { resolveModel } from "../lib/models/resolve.ts";
import { testDataDir, tinyModelPath } from "./support/models.ts";

type Repo = {
  files: Record<string, Uint8Array<ArrayBuffer>>;
  /** Bearer token the repo requires; public when absent. */
  token?: string;
  /** Listed but not downloadable: resolve answers 404. */
  ghosts?: string[];
  /** Blobs go to the truncating CDN while this is true. */
  flaky?: boolean;
  revisions?: Record<string, Record<string, Uint8Array<ArrayBuffer>>>;
};

type FakeHub = {
  url: string;
  /** `METHOD path` of every request, in order (CDN requests included). */
  requests: string[];
  /** Authorization header of every request ("" when absent). */
  auth: string[];
  repos: Record<string, Repo>;
  close(): Promise<void>;
};

function startHub(repos: Record<string, Repo>): FakeHub {
  const requests: string[] = [];
  const auth: string[] = [];
  const blobs = new Map<string, Uint8Array<ArrayBuffer>>();

  // The flaky CDN: full Content-Length, half the body, then the connection closes.
  const cdn = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const cdnLoop = (async () => {
    for await (const conn of cdn) {
      try {
        const buf = new Uint8Array(8192);
        let req = "";
        while (!req.includes("\r\n\r\n")) {
          const n = await conn.read(buf);
          if (n === null) break;
          req += new TextDecoder().decode(buf.subarray(0, n));
        }
        const path = req.split(" ")[1] ?? "";
        requests.push(`GET cdn${path}`);
        const body = blobs.get(path.slice("/blobs/".length)) ?? new Uint8Array(0);
        const head = `HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n` +
          `content-length: ${body.length}\r\nconnection: close\r\n\r\n`;
        await conn.write(new TextEncoder().encode(head));
        let off = 0;
        const half = Math.floor(body.length / 2);
        while (off < half) off += await conn.write(body.subarray(off, half));
      } catch {
        // the client gave up: fine
      } finally {
        conn.close();
      }
    }
  })();
  const cdnUrl = `http://127.0.0.1:${(cdn.addr as Deno.NetAddr).port}`;

  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    requests.push(`${req.method} ${path}`);
    auth.push(req.headers.get("authorization") ?? "");
    const denied = (repo: Repo) =>
      repo.token !== undefined && req.headers.get("authorization") !== `Bearer ${repo.token}`;

    let m = /^\/api\/models\/([^/]+\/[^/]+)(?:\/revision\/([^/]+))?$/.exec(path);
    if (m) {
      const repo = repos[m[1]];
      if (!repo) return Response.json({ error: "Repository not found" }, { status: 404 });
      if (denied(repo)) return Response.json({ error: "Invalid credentials" }, { status: 401 });
      const files = m[2] ? repo.revisions?.[m[2]] : repo.files;
      if (!files) return Response.json({ error: "Revision not found" }, { status: 404 });
      const names = [...Object.keys(files), ...(repo.ghosts ?? [])];
      return Response.json({ id: m[1], siblings: names.map((rfilename) => ({ rfilename })) });
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m) {
      const repo = repos[m[1]];
      if (!repo) return new Response("Repository not found", { status: 404 });
      if (denied(repo)) return new Response("Invalid credentials", { status: 401 });
      const files = m[2] === "main" ? repo.files : repo.revisions?.[m[2]];
      const body = files?.[m[3]];
      if (!body) return new Response("Entry not found", { status: 404 });
      const id = crypto.randomUUID();
      blobs.set(id, body);
      const location = repo.flaky ? `${cdnUrl}/blobs/${id}` : `/blobs/${id}`;
      return new Response(null, { status: 302, headers: { location } });
    }
    m = /^\/blobs\/(.+)$/.exec(path);
    if (m && blobs.has(m[1])) {
      const body = blobs.get(m[1])!;
      return new Response(body, { headers: { "content-length": String(body.length) } });
    }
    return new Response("not found", { status: 404 });
  });

  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests,
    auth,
    repos,
    async close() {
      await server.shutdown();
      cdn.close();
      await cdnLoop;
    },
  };
}

const quiet = () => {};

function bytes(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(text);
}

/** Every path under `dir`, relative, sorted. */
async function tree(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, prefix: string) => {
    for await (const e of Deno.readDir(d)) {
      if (e.isDirectory) await walk(`${d}/${e.name}`, `${prefix}${e.name}/`);
      else out.push(`${prefix}${e.name}`);
    }
  };
  await walk(dir, "").catch((e) => {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  });
  return out.sort();
}

async function withHub(
  repos: Record<string, Repo>,
  fn: (hub: FakeHub, dataDir: string) => Promise<void>,
): Promise<void> {
  const hub = startHub(repos);
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-hub-" });
  try {
    await fn(hub, dataDir);
  } finally {
    await hub.close();
    await Deno.remove(dataDir, { recursive: true });
  }
}

Deno.test("hub ids, endpoint and token precedence", () => {
  assert.deepEqual(parseHubId("Qwen/Qwen2.5-0.5B-Instruct-GGUF"), {
    owner: "Qwen",
    repo: "Qwen2.5-0.5B-Instruct-GGUF",
  });
  for (const bad of ["model.gguf", "a/b/c", "/abs", "./x/y", "a--b/c", "a/b..c", "-a/b", "a/"]) {
    assert.equal(parseHubId(bad), undefined, bad);
  }
  assert.equal(hubEndpoint({}), "https://huggingface.co");
  assert.equal(hubEndpoint({ HF_ENDPOINT: "http://mirror:8080/" }), "http://mirror:8080");
  assert.equal(hubToken({}), undefined);
  assert.equal(hubToken({ HUB_TOKEN: "c", HUGGING_FACE_HUB_TOKEN: "b" }), "b");
  assert.equal(hubToken({ HUB_TOKEN: "c", HUGGING_FACE_HUB_TOKEN: "b", HF_TOKEN: "a" }), "a");
});

Deno.test("pickGguf: the only model, split models, projectors, and clear errors", () => {
  assert.equal(pickGguf(["README.md", "m.gguf"], undefined, "r"), "m.gguf");
  assert.equal(pickGguf(["m.gguf", "mmproj-m-f16.gguf"], undefined, "r"), "m.gguf");
  const split = ["m-00002-of-00002.gguf", "m-00001-of-00002.gguf"];
  assert.equal(pickGguf(split, undefined, "r"), "m-00001-of-00002.gguf");
  assert.deepEqual(shardSiblings("m-00001-of-00002.gguf"), ["m-00002-of-00002.gguf"]);
  assert.throws(
    () => pickGguf(["b.gguf", "a.gguf"], undefined, "hub repo x/y"),
    {
      message: "hub repo x/y has several .gguf files (a.gguf, b.gguf); pick one with " +
        "--model-file NAME",
    },
  );
  assert.throws(() => pickGguf(["config.json", "model.safetensors"], undefined, "r"), {
    message: "r has no .gguf file; Hearth loads GGUF models only",
  });
  assert.throws(() => pickGguf(["a.gguf"], "b.gguf", "r"), {
    message: "r has no file b.gguf; its .gguf files: a.gguf",
  });
});

Deno.test("hub download, then a cache hit with no request at all", async () => {
  const model = await Deno.readFile(await tinyModelPath());
  await withHub({
    "acme/tiny-GGUF": { files: { "tiny.gguf": model, "README.md": bytes("# tiny") } },
  }, async (hub, dataDir) => {
    const env = { HF_ENDPOINT: hub.url };
    const progress: number[] = [];
    const first = await resolveModel({ model: "acme/tiny-GGUF", dtype: "auto", dataDir }, {
      env,
      onProgress: (p) => progress.push(p.done),
    });
    assert.deepEqual(first, {
      path: `${dataDir}/hub/acme--tiny-GGUF/main/tiny.gguf`,
      id: "acme/tiny-GGUF",
      source: "hub",
    });
    assert.deepEqual(await Deno.readFile(first.path), model);
    assert.equal(progress.at(-1), model.length);
    assert.equal(hub.requests.length, 3, hub.requests.join("\n"));
    assert.equal(hub.requests[0], "GET /api/models/acme/tiny-GGUF");
    assert.equal(hub.requests[1], "GET /acme/tiny-GGUF/resolve/main/tiny.gguf");
    assert.match(hub.requests[2], /^GET \/blobs\//);
    assert.deepEqual(await tree(`${dataDir}/hub`), [
      "acme--tiny-GGUF/main/.hearth-files.json",
      "acme--tiny-GGUF/main/tiny.gguf",
    ]);

    // Offline-safe: neither form of the second start talks to the hub.
    const again = await resolveModel({ model: "acme/tiny-GGUF", dtype: "auto", dataDir }, { env });
    assert.equal(again.path, first.path);
    const named = await downloadHubModel({
      repo: "acme/tiny-GGUF",
      modelFile: "tiny.gguf",
      dataDir,
      env: { HF_ENDPOINT: "http://127.0.0.1:1" },
    });
    assert.equal(named, first.path);
    assert.equal(hub.requests.length, 3);
  });
});

Deno.test("private repo: 401 without HF_TOKEN, the token is sent as a Bearer header", async () => {
  await withHub({
    "acme/secret": { files: { "s.gguf": bytes("GGUF secret") }, token: "hf_right" },
  }, async (hub, dataDir) => {
    const opts = { repo: "acme/secret", dataDir, onProgress: quiet };
    await assert.rejects(downloadHubModel({ ...opts, env: { HF_ENDPOINT: hub.url } }), {
      message: "hub refused access to repo acme/secret (HTTP 401): it may be private or " +
        "gated: set HF_TOKEN to a token that can read it",
    });
    await assert.rejects(
      downloadHubModel({ ...opts, env: { HF_ENDPOINT: hub.url, HF_TOKEN: "hf_wrong" } }),
      /HTTP 401\): the token in HF_TOKEN was refused/,
    );
    assert.deepEqual(await tree(`${dataDir}/hub`), []);
    const path = await downloadHubModel({
      ...opts,
      env: { HF_ENDPOINT: hub.url, HUB_TOKEN: "hf_wrong", HF_TOKEN: "hf_right" },
    });
    assert.equal(await Deno.readTextFile(path), "GGUF secret");
    assert.deepEqual(hub.auth.slice(-3, -1), ["Bearer hf_right", "Bearer hf_right"]);
  });
});

Deno.test("several .gguf files: an error listing them, --model-file picks one", async () => {
  await withHub({
    "acme/multi": {
      files: { "m-q8_0.gguf": bytes("q8"), "m-f16.gguf": bytes("f16"), "README.md": bytes("") },
    },
  }, async (hub, dataDir) => {
    const env = { HF_ENDPOINT: hub.url };
    await assert.rejects(
      resolveModel({ model: "acme/multi", dtype: "auto", dataDir }, { env }),
      {
        message: "hub repo acme/multi has several .gguf files (m-f16.gguf, m-q8_0.gguf); " +
          "pick one with --model-file NAME",
      },
    );
    await assert.rejects(
      resolveModel({ model: "acme/multi", modelFile: "m-q4.gguf", dtype: "auto", dataDir }, {
        env,
      }),
      {
        message: "hub repo acme/multi has no file m-q4.gguf; its .gguf files: m-f16.gguf, " +
          "m-q8_0.gguf",
      },
    );
    assert.ok(hub.requests.every((r) => r.startsWith("GET /api/")), hub.requests.join("\n"));
    const path = await downloadHubModel({
      repo: "acme/multi",
      modelFile: "m-f16.gguf",
      dataDir,
      env,
      onProgress: quiet,
    });
    assert.equal(path, `${dataDir}/hub/acme--multi/main/m-f16.gguf`);
    assert.equal(await Deno.readTextFile(path), "f16");
    // The cached listing still asks for --model-file rather than guessing among cached files.
    const before = hub.requests.length;
    await assert.rejects(downloadHubModel({ repo: "acme/multi", dataDir, env }), /--model-file/);
    assert.equal(hub.requests.length, before);
  });
});

Deno.test("404s name the missing repo, revision or file", async () => {
  await withHub({
    "acme/ghost": { files: { "README.md": bytes("") }, ghosts: ["gone.gguf"] },
    "acme/safetensors": { files: { "model.safetensors": bytes("") } },
  }, async (hub, dataDir) => {
    const env = { HF_ENDPOINT: hub.url };
    await assert.rejects(downloadHubModel({ repo: "acme/nope", dataDir, env }), {
      message: `repo acme/nope not found on ${hub.url}`,
    });
    await assert.rejects(downloadHubModel({ repo: "acme/ghost", revision: "v9", dataDir, env }), {
      message: `repo acme/ghost or its revision v9 not found on ${hub.url}`,
    });
    await assert.rejects(downloadHubModel({ repo: "acme/ghost", dataDir, env }), {
      message: `file gone.gguf not found in hub repo acme/ghost on ${hub.url}`,
    });
    await assert.rejects(downloadHubModel({ repo: "acme/safetensors", dataDir, env }), {
      message: "hub repo acme/safetensors has no .gguf file; Hearth loads GGUF models only",
    });
    assert.deepEqual(
      (await tree(`${dataDir}/hub`)).filter((f) => !f.endsWith(".hearth-files.json")),
      [],
    );
  });
});

Deno.test("an interrupted download leaves nothing that looks like a model", async () => {
  const model = bytes("GGUF" + "x".repeat(200_000));
  await withHub(
    { "acme/flaky": { files: { "f.gguf": model }, flaky: true } },
    async (hub, dataDir) => {
      const env = { HF_ENDPOINT: hub.url };
      await assert.rejects(
        downloadHubModel({ repo: "acme/flaky", dataDir, env, onProgress: quiet }),
        /^Error: download of acme\/flaky\/f\.gguf (was interrupted|is incomplete)/,
      );
      assert.ok(hub.requests.some((r) => r.startsWith("GET cdn/blobs/")), hub.requests.join("\n"));
      const dir = hubCacheDir(dataDir, "acme/flaky");
      assert.deepEqual(await tree(dir), [".hearth-files.json"]);

      // Once the CDN behaves, the next start downloads it whole.
      hub.repos["acme/flaky"].flaky = false;
      const path = await downloadHubModel({ repo: "acme/flaky", dataDir, env, onProgress: quiet });
      assert.deepEqual(await Deno.readFile(path), model);
      assert.deepEqual(await tree(dir), [".hearth-files.json", "f.gguf"]);
    },
  );
});

Deno.test("concurrent starts download a file once; revisions cache apart", async () => {
  await withHub({
    "acme/rev": {
      files: { "r.gguf": bytes("GGUF main".repeat(10_000)) },
      revisions: { v1: { "r.gguf": bytes("GGUF v1") } },
    },
  }, async (hub, dataDir) => {
    const env = { HF_ENDPOINT: hub.url };
    const opts = { repo: "acme/rev", dataDir, env, onProgress: quiet };
    const [a, b] = await Promise.all([downloadHubModel(opts), downloadHubModel(opts)]);
    assert.equal(a, b);
    assert.equal(hub.requests.filter((r) => r.startsWith("GET /blobs/")).length, 1);
    assert.equal(await Deno.readTextFile(a), "GGUF main".repeat(10_000));

    const v1 = await downloadHubModel({ ...opts, revision: "v1" });
    assert.equal(v1, `${dataDir}/hub/acme--rev/v1/r.gguf`);
    assert.equal(await Deno.readTextFile(v1), "GGUF v1");
    assert.ok(hub.requests.includes("GET /api/models/acme/rev/revision/v1"));
    assert.deepEqual(await listRepoFiles("acme/rev", { env, revision: "v1" }), ["r.gguf"]);
  });
});

Deno.test("an unreachable hub is named in the error", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const endpoint = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  listener.close();
  const dataDir = await Deno.makeTempDir({ prefix: "hearth-hub-" });
  try {
    await assert.rejects(
      resolveModel({ model: "acme/tiny", dtype: "auto", dataDir }, {
        env: { HF_ENDPOINT: endpoint },
      }),
      (e: Error) => e.message.startsWith(`cannot reach the hub at ${endpoint}: `),
    );
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("resolveModel: local files and directories", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-resolve-" });
  const env = { HF_ENDPOINT: "http://127.0.0.1:1" }; // any hub call would fail loudly
  const resolve = (model?: string, modelFile?: string) =>
    resolveModel({ model, modelFile, dtype: "auto", dataDir: `${dir}/data` }, { env });
  try {
    await Deno.mkdir(`${dir}/one`);
    await Deno.writeTextFile(`${dir}/one/only.gguf`, "GGUF");
    await Deno.writeTextFile(`${dir}/one/notes.txt`, "");
    await Deno.mkdir(`${dir}/two`);
    await Deno.writeTextFile(`${dir}/two/a.gguf`, "GGUF");
    await Deno.writeTextFile(`${dir}/two/b.gguf`, "GGUF");
    await Deno.writeTextFile(`${dir}/blob`, "GGUF...");
    await Deno.writeTextFile(`${dir}/notes.txt`, "hello");

    assert.deepEqual(await resolve(`${dir}/one/only.gguf`), {
      path: `${dir}/one/only.gguf`,
      id: "only",
      source: "file",
    });
    assert.deepEqual(await resolve(`${dir}/blob`), {
      path: `${dir}/blob`,
      id: "blob",
      source: "file",
    });
    assert.deepEqual(await resolve(`${dir}/one/`), {
      path: `${dir}/one/only.gguf`,
      id: "one",
      source: "dir",
    });
    assert.deepEqual(await resolve(`${dir}/two`, "b.gguf"), {
      path: `${dir}/two/b.gguf`,
      id: "two",
      source: "dir",
    });
    await assert.rejects(resolve(`${dir}/two`), {
      message: `directory ${dir}/two has several .gguf files (a.gguf, b.gguf); pick one with ` +
        "--model-file NAME",
    });
    await assert.rejects(resolve(`${dir}/two`, "c.gguf"), {
      message: `directory ${dir}/two has no file c.gguf; its .gguf files: a.gguf, b.gguf`,
    });
    await assert.rejects(resolve(`${dir}/notes.txt`), {
      message: `--model ${dir}/notes.txt is not a GGUF file`,
    });
    await assert.rejects(resolve(`${dir}/missing.gguf`), {
      message: `--model ${dir}/missing.gguf: no such file or directory, and not a hub id ` +
        "owner/repo",
    });
    await assert.rejects(resolve(undefined, "x.gguf"), /--model-file needs --model/);
    // No --model: the demo model (the shared test cache already holds it, so nothing is written).
    const demo = await resolveModel({ dtype: "auto", dataDir: testDataDir() }, { env });
    assert.deepEqual(demo, { path: await tinyModelPath(), id: "hearth-demo", source: "demo" });
    await assert.rejects(
      resolveModel({ model: `${dir}/one`, isq: "q4k", dtype: "f16", dataDir: dir }),
      /give only one of them/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
