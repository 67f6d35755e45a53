// Hub downloads against a local fake hub that speaks the Hugging Face protocol: the revision API
// (`sha` + `siblings`), `resolve/{commit}/{file}` answering HEAD and GET with X-Repo-Commit,
// X-Linked-Etag (the sha256), X-Linked-Size and a 302 to a separate "CDN" for LFS files, errors
// with X-Error-Code (401 private, 403 gated, 404 repo/revision/entry). The CDN is raw TCP so it
// can honour or ignore `Range`, cut a body mid-way and corrupt bytes. Every test runs its own hub
// and its own cache dir, passed through an `env` object, so the file is safe to run in parallel.
// Also covers resolveModel's local cases.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  downloadHubModel,
  type DownloadProgress,
  ggufQuant,
  hubCacheRoot,
  hubEndpoint,
  hubOffline,
  hubToken,
  listRepoFiles,
  parseHubId,
  pickGguf,
  progressReporter,
  repoFolderName,
  repoInfo,
  shardSiblings,
} from "../lib/models/hub.ts";
import { resolveModel } from "../lib/models/resolve.ts";
import { testDataDir, tinyModelPath } from "./support/models.ts";
import { freePort } from "./support/server.ts";

type Files = Record<string, Uint8Array<ArrayBuffer>>;

type Repo = {
  files: Files;
  /** main's commit; default derived from the repo name. */
  commit?: string;
  /** Bearer token the repo requires: private, 401 without it (as the hub, RepoNotFound). */
  token?: string;
  /** Listing public, files 403 GatedRepo. */
  gated?: boolean;
  /** Listed but not downloadable: resolve answers 404 EntryNotFound. */
  ghosts?: string[];
  /** Stored in git rather than LFS: served by the hub itself, ETag the git blob sha1. */
  inGit?: string[];
  revisions?: Record<string, { commit: string; files: Files }>;
};

type FakeHub = {
  url: string;
  /** `METHOD path` of every hub request and `GET cdn/{sha}[ range]` of every CDN one. */
  requests: string[];
  /** Authorization header of every hub request ("" when absent). */
  auth: string[];
  /** Authorization header of every CDN request. */
  cdnAuth: string[];
  repos: Record<string, Repo>;
  /** CDN behaviour, per blob sha256 where keyed: cut mid-body, corrupt, or send slowly. */
  cdn: { cut: Map<string, number>; corrupt: Set<string>; slow: Set<string>; ignoreRange: boolean };
  close(): Promise<void>;
};

function sha256(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

function gitSha1(b: Uint8Array): string {
  return createHash("sha1").update(`blob ${b.length}\0`).update(b).digest("hex");
}

function commitOf(name: string): string {
  return createHash("sha1").update(name).digest("hex");
}

function bytes(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(text);
}

/** Tiny fake GGUF: the magic, then filler that differs per name so blobs differ. */
function gguf(name: string, size = 64): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(size);
  out.set(bytes("GGUF"));
  const seed = bytes(name);
  for (let i = 4; i < size; i++) out[i] = seed[i % seed.length] ^ (i & 0xff);
  return out;
}

function startHub(repos: Record<string, Repo>): FakeHub {
  const requests: string[] = [];
  const auth: string[] = [];
  const cdnAuth: string[] = [];
  const blobs = new Map<string, Uint8Array>();
  const cdn = {
    cut: new Map<string, number>(),
    corrupt: new Set<string>(),
    slow: new Set<string>(),
    ignoreRange: false,
  };
  const dec = new TextDecoder();
  const enc = new TextEncoder();

  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const cdnLoop = (async () => {
    for await (const conn of listener) {
      try {
        const buf = new Uint8Array(8192);
        let req = "";
        while (!req.includes("\r\n\r\n")) {
          const n = await conn.read(buf);
          if (n === null) break;
          req += dec.decode(buf.subarray(0, n));
        }
        const [line, ...head] = req.split("\r\n");
        const path = line.split(" ")[1] ?? "";
        const header = (name: string) =>
          head.find((h) => h.toLowerCase().startsWith(`${name}:`))?.slice(name.length + 1).trim();
        const range = header("range");
        cdnAuth.push(header("authorization") ?? "");
        const sha = /^\/cdn\/([0-9a-f]{64})/.exec(path)?.[1] ?? "";
        requests.push(`GET cdn/${sha}${range ? ` ${range}` : ""}`);
        let body = blobs.get(sha);
        if (!body) {
          await conn.write(enc.encode("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"));
          continue;
        }
        if (cdn.corrupt.has(sha)) {
          body = body.slice();
          body[body.length - 1] ^= 0xff;
        }
        const from = Number(/^bytes=(\d+)-$/.exec(range ?? "")?.[1] ?? 0);
        const partial = from > 0 && !cdn.ignoreRange;
        const part = partial ? body.subarray(from) : body;
        const status = partial ? "206 Partial Content" : "200 OK";
        const contentRange = partial
          ? `content-range: bytes ${from}-${body.length - 1}/${body.length}\r\n`
          : "";
        await conn.write(enc.encode(
          `HTTP/1.1 ${status}\r\ncontent-type: application/octet-stream\r\n${contentRange}` +
            `content-length: ${part.length}\r\nconnection: close\r\n\r\n`,
        ));
        const cuts = cdn.cut.get(sha) ?? 0;
        if (cuts > 0) cdn.cut.set(sha, cuts - 1);
        // A cut: the announced length, then half the body, then the connection closes.
        const end = cuts > 0 ? Math.floor(part.length / 2) : part.length;
        const step = cdn.slow.has(sha) ? Math.ceil(end / 10) : end;
        for (let off = 0; off < end;) {
          off += await conn.write(part.subarray(off, Math.min(end, off + step)));
          if (step < end) await new Promise((r) => setTimeout(r, 20));
        }
      } catch {
        // the client gave up: fine
      } finally {
        conn.close();
      }
    }
  })();
  const cdnUrl = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;

  const lookup = (repo: Repo, rev: string) => {
    const main = { commit: repo.commit ?? "", files: repo.files };
    if (rev === "main" || rev === main.commit) return main;
    return Object.entries(repo.revisions ?? {}).find(([name, r]) =>
      name === rev || r.commit === rev
    )?.[1];
  };
  const error = (status: number, code: string) =>
    new Response(JSON.stringify({ error: code }), {
      status,
      headers: { "x-error-code": code, "content-type": "application/json" },
    });

  const server = Deno.serve({ hostname: "127.0.0.1", port: freePort(), onListen() {} }, (req) => {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    requests.push(`${req.method} ${path}`);
    auth.push(req.headers.get("authorization") ?? "");
    const denied = (repo: Repo) =>
      repo.token !== undefined && req.headers.get("authorization") !== `Bearer ${repo.token}`;

    let m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(path);
    if (m) {
      const repo = repos[m[1]];
      if (!repo) return error(404, "RepoNotFound");
      if (denied(repo)) return error(401, "RepoNotFound");
      const rev = lookup(repo, m[2]);
      if (!rev) return error(404, "RevisionNotFound");
      const names = [...Object.keys(rev.files), ...(repo.ghosts ?? [])];
      return Response.json({
        id: m[1],
        sha: rev.commit,
        siblings: names.map((rfilename) => ({ rfilename })),
      });
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m) {
      const repo = repos[m[1]];
      if (!repo) return error(404, "RepoNotFound");
      if (denied(repo)) return error(401, "RepoNotFound");
      if (repo.gated) return error(403, "GatedRepo");
      const rev = lookup(repo, m[2]);
      if (!rev) return error(404, "RevisionNotFound");
      const body = rev.files[m[3]];
      if (!body) return error(404, "EntryNotFound");
      if (repo.inGit?.includes(m[3])) {
        return new Response(req.method === "HEAD" ? null : body, {
          headers: {
            etag: `"${gitSha1(body)}"`,
            "x-repo-commit": rev.commit,
            "content-length": String(body.length),
          },
        });
      }
      const sha = sha256(body);
      blobs.set(sha, body);
      return new Response(null, {
        status: 302,
        headers: {
          location: `${cdnUrl}/cdn/${sha}?X-Amz-Signature=signed`,
          etag: `"${gitSha1(bytes(`pointer ${sha}`))}"`,
          "x-linked-etag": `"${sha}"`,
          "x-linked-size": String(body.length),
          "x-repo-commit": rev.commit,
        },
      });
    }
    return new Response("not found", { status: 404 });
  });

  for (const [name, repo] of Object.entries(repos)) repo.commit ??= commitOf(name);
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests,
    auth,
    cdnAuth,
    repos,
    cdn,
    async close() {
      await server.shutdown();
      listener.close();
      await cdnLoop;
    },
  };
}

/** Every path under `dir`, relative, sorted; symlinks as `path -> target`. */
async function tree(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, prefix: string) => {
    for await (const e of Deno.readDir(d)) {
      const p = `${d}/${e.name}`;
      if (e.isDirectory) await walk(p, `${prefix}${e.name}/`);
      else if (e.isSymlink) out.push(`${prefix}${e.name} -> ${await Deno.readLink(p)}`);
      else out.push(`${prefix}${e.name}`);
    }
  };
  await walk(dir, "").catch((e) => {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  });
  return out.sort();
}

type Ctx = {
  hub: FakeHub;
  cache: string;
  env: Record<string, string>;
  logs: string[];
  /** downloadHubModel with this test's env, a quiet progress and the log collected. */
  download: (opts: { repo: string; modelFile?: string; revision?: string }) => Promise<string>;
};

async function withHub(repos: Record<string, Repo>, fn: (c: Ctx) => Promise<void>) {
  const hub = startHub(repos);
  const tmp = await Deno.makeTempDir({ prefix: "hearth-hub-" });
  const cache = `${tmp}/hf/hub`;
  const env = { HF_ENDPOINT: hub.url, HF_HUB_CACHE: cache };
  const logs: string[] = [];
  const download = (opts: { repo: string; modelFile?: string; revision?: string }) =>
    downloadHubModel({ ...opts, env, onProgress: () => {}, log: (l) => logs.push(l) });
  try {
    await fn({ hub, cache, env, logs, download });
  } finally {
    await hub.close();
    await Deno.remove(tmp, { recursive: true });
  }
}

/** A closed loopback port: connecting fails at once. */
function deadEndpoint(): string {
  return `http://127.0.0.1:${freePort()}`;
}

Deno.test("hub ids, endpoint, offline flag and token sources", async () => {
  assert.deepEqual(parseHubId("Qwen/Qwen2.5-0.5B-Instruct-GGUF"), {
    owner: "Qwen",
    repo: "Qwen2.5-0.5B-Instruct-GGUF",
  });
  for (const bad of ["model.gguf", "a/b/c", "/abs", "./x/y", "a--b/c", "a/b..c", "-a/b", "a/"]) {
    assert.equal(parseHubId(bad), undefined, bad);
  }
  assert.equal(repoFolderName("acme/tiny-GGUF"), "models--acme--tiny-GGUF");
  assert.equal(hubEndpoint({}), "https://huggingface.co");
  assert.equal(hubEndpoint({ HF_ENDPOINT: "http://mirror:8080/" }), "http://mirror:8080");
  assert.equal(hubOffline({}), false);
  assert.equal(hubOffline({ HF_HUB_OFFLINE: "0" }), false);
  for (const v of ["1", "true", "YES", "on"]) assert.equal(hubOffline({ HF_HUB_OFFLINE: v }), true);

  assert.equal(hubToken({}), undefined);
  assert.equal(hubToken({ HUB_TOKEN: "c", HUGGING_FACE_HUB_TOKEN: "b" }), "b");
  assert.equal(hubToken({ HUB_TOKEN: "c", HUGGING_FACE_HUB_TOKEN: "b", HF_TOKEN: "a" }), "a");
  // The file `hf auth login` writes, when no variable is set.
  const home = await Deno.makeTempDir({ prefix: "hearth-hfhome-" });
  try {
    await Deno.writeTextFile(`${home}/token`, "hf_from_file\n");
    assert.equal(hubToken({ HF_HOME: home }), "hf_from_file");
    assert.equal(hubToken({ HF_HOME: home, HF_TOKEN: "hf_var" }), "hf_var");
    await Deno.writeTextFile(`${home}/other`, "hf_other");
    assert.equal(hubToken({ HF_HOME: home, HF_TOKEN_PATH: `${home}/other` }), "hf_other");
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

Deno.test("cache root: HF_HUB_CACHE, then HF_HOME/hub, XDG_CACHE_HOME, ~/.cache", () => {
  const all = { HF_HUB_CACHE: "/c", HF_HOME: "/h", XDG_CACHE_HOME: "/x", HOME: "/home/u" };
  assert.equal(hubCacheRoot(all), "/c");
  assert.equal(hubCacheRoot({ ...all, HF_HUB_CACHE: undefined }), "/h/hub");
  assert.equal(hubCacheRoot({ XDG_CACHE_HOME: "/x", HOME: "/home/u" }), "/x/huggingface/hub");
  assert.equal(hubCacheRoot({ HOME: "/home/u" }), "/home/u/.cache/huggingface/hub");
  assert.equal(hubCacheRoot({ HF_HOME: "~/hf", HOME: "/home/u" }), "/home/u/hf/hub");
  assert.equal(hubCacheRoot({ HUGGINGFACE_HUB_CACHE: "/old" }), "/old");
  assert.equal(hubCacheRoot({}, "/data"), "/data/huggingface/hub");
  assert.throws(() => hubCacheRoot({}), /set HF_HUB_CACHE, HF_HOME or HOME/);
});

Deno.test("pickGguf: the preference order, split sets once, projectors, clear errors", () => {
  assert.equal(pickGguf(["README.md", "m.gguf"], undefined, "r"), "m.gguf");
  assert.equal(pickGguf(["m.gguf", "mmproj-m-f16.gguf"], undefined, "r"), "m.gguf");
  const split = ["m-00002-of-00002.gguf", "m-00001-of-00002.gguf"];
  assert.equal(pickGguf(split, undefined, "r"), "m-00001-of-00002.gguf");
  assert.deepEqual(shardSiblings("m-00001-of-00002.gguf"), ["m-00002-of-00002.gguf"]);

  assert.equal(ggufQuant("Model-Q4_K_M.gguf"), "Q4_K_M");
  assert.equal(ggufQuant("model.q4_k_s.gguf"), "Q4_K_S");
  assert.equal(ggufQuant("m-BF16-00001-of-00002.gguf"), "BF16");
  assert.equal(ggufQuant("Q8_0/m-00001-of-00002.gguf"), "Q8_0");
  assert.equal(ggufQuant("m-UD-Q4_K_XL.gguf"), undefined);

  const logs: string[] = [];
  const files = [
    "m-F16.gguf",
    "m-Q8_0.gguf",
    "m-Q4_K_M-00001-of-00002.gguf",
    "m-Q4_K_M-00002-of-00002.gguf",
    "m-Q4_K_S.gguf",
    "mmproj-m-F16.gguf",
    "README.md",
  ];
  assert.equal(pickGguf(files, undefined, "hub repo x/y", (l) => logs.push(l)), files[2]);
  assert.equal(logs.length, 1);
  assert.match(logs[0], /^hub repo x\/y: chose m-Q4_K_M-00001-of-00002\.gguf \(Q4_K_M\) among 4 /);
  assert.match(logs[0], /--model-file NAME picks another/);
  assert.equal(
    pickGguf(["m-F32.gguf", "m-Q8_0.gguf", "m-bf16.gguf"], undefined, "r"),
    "m-Q8_0.gguf",
  );
  assert.equal(pickGguf(["m-F32.gguf", "m-BF16.gguf", "m-x.gguf"], undefined, "r"), "m-BF16.gguf");

  // Names that do not settle it: an error rather than a guess between two different models.
  assert.throws(() => pickGguf(["b.gguf", "a.gguf"], undefined, "hub repo x/y"), {
    message: "hub repo x/y has several .gguf files (a.gguf, b.gguf); pick one with " +
      "--model-file NAME",
  });
  assert.throws(() => pickGguf(["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"], undefined, "r"), /several/);
  assert.throws(() => pickGguf(["config.json", "model.safetensors"], undefined, "r"), {
    message: "r has no .gguf file; Hearth loads GGUF models only",
  });
  assert.throws(() => pickGguf(["a.gguf"], "b.gguf", "r"), {
    message: "r has no file b.gguf; its .gguf files: a.gguf",
  });
});

Deno.test("progress: a bar on a terminal, lines every 5 s or 10% in logs", () => {
  const out: string[] = [];
  const report = progressReporter({ terminal: false, write: (t) => out.push(t) });
  const p = (done: number, seconds: number, final?: boolean): DownloadProgress => ({
    file: "a/b/m.gguf",
    done,
    total: 1000e6,
    seconds,
    final,
  });
  report(p(10e6, 1)); // first: printed
  report(p(20e6, 2)); // 1%, 1 s later: quiet
  report(p(60e6, 3)); // 5%: quiet
  report(p(120e6, 4)); // +11%: printed
  report(p(130e6, 9.5)); // 5.5 s later: printed
  report(p(1000e6, 20, true));
  assert.deepEqual(out, [
    "hearth: downloading a/b/m.gguf: 10.0 MB of 1000.0 MB (1%), 10.0 MB/s\n",
    "hearth: downloading a/b/m.gguf: 120.0 MB of 1000.0 MB (12%), 30.0 MB/s\n",
    "hearth: downloading a/b/m.gguf: 130.0 MB of 1000.0 MB (13%), 13.7 MB/s\n",
    "hearth: downloaded a/b/m.gguf: 1000.0 MB in 20.0s\n",
  ]);

  const tty: string[] = [];
  const bar = progressReporter({ terminal: true, write: (t) => tty.push(t) });
  bar({ ...p(500e6, 10), resumed: 400e6 });
  bar(p(1000e6, 20, true));
  assert.equal(
    tty[0],
    "\r\x1b[2Khearth: a/b/m.gguf [############------------] 50% 500.0 MB / 1000.0 MB 10.0 MB/s",
  );
  assert.ok(tty[1].startsWith("\r\x1b[2Khearth: a/b/m.gguf [########################] 100%"));
  assert.ok(tty[1].endsWith("\n"));
});

Deno.test("download: the hub cache layout exactly, then cache hits with no request", async () => {
  const q4 = gguf("q4", 4096);
  await withHub({
    "acme/tiny-GGUF": {
      files: {
        "tiny-Q8_0.gguf": gguf("q8"),
        "tiny-Q4_K_M.gguf": q4,
        "tiny-F16.gguf": gguf("f16"),
        "nested/deeper/extra-Q4_0.gguf": gguf("nested"),
        "README.md": bytes("# tiny"),
      },
    },
  }, async ({ hub, cache, env, logs }) => {
    const commit = hub.repos["acme/tiny-GGUF"].commit!;
    const sha = sha256(q4);
    const withToken = { ...env, HF_TOKEN: "hf_secret_value" };
    const progress: DownloadProgress[] = [];
    const first = await resolveModel({ model: "acme/tiny-GGUF", dtype: "auto", dataDir: "/x" }, {
      env: withToken,
      onProgress: (p) => progress.push(p),
      log: (l) => logs.push(l),
    });
    const repoDir = `${cache}/models--acme--tiny-GGUF`;
    assert.deepEqual(first, {
      path: `${repoDir}/snapshots/${commit}/tiny-Q4_K_M.gguf`,
      id: "acme/tiny-GGUF",
      source: "hub",
    });
    assert.deepEqual(await Deno.readFile(first.path), q4);
    assert.deepEqual(await tree(cache), [
      `.locks/models--acme--tiny-GGUF/${sha}.lock`,
      `models--acme--tiny-GGUF/blobs/${sha}`,
      "models--acme--tiny-GGUF/refs/main",
      `models--acme--tiny-GGUF/snapshots/${commit}/tiny-Q4_K_M.gguf -> ../../blobs/${sha}`,
    ]);
    assert.equal(await Deno.readTextFile(`${repoDir}/refs/main`), commit);
    assert.deepEqual(hub.requests, [
      "GET /api/models/acme/tiny-GGUF/revision/main",
      `HEAD /acme/tiny-GGUF/resolve/${commit}/tiny-Q4_K_M.gguf`,
      `GET cdn/${sha}`,
    ]);
    // The token goes to the hub, never to the CDN (its URL is signed), never into a log.
    assert.deepEqual(hub.auth, ["Bearer hf_secret_value", "Bearer hf_secret_value"]);
    assert.deepEqual(hub.cdnAuth, [""]);
    assert.ok(logs.some((l) => /chose tiny-Q4_K_M\.gguf \(Q4_K_M\) among 4 GGUF models/.test(l)));
    assert.ok(logs.every((l) => !l.includes("hf_secret_value")), logs.join("\n"));
    assert.deepEqual(progress.at(-1), {
      file: "acme/tiny-GGUF/tiny-Q4_K_M.gguf",
      done: q4.length,
      total: q4.length,
      seconds: progress.at(-1)!.seconds,
      resumed: 0,
      final: true,
    });

    // A nested file: its link climbs out of the extra folders.
    const nested = await downloadHubModel({
      repo: "acme/tiny-GGUF",
      modelFile: "nested/deeper/extra-Q4_0.gguf",
      env,
      onProgress: () => {},
      log: () => {},
    });
    assert.equal(nested, `${repoDir}/snapshots/${commit}/nested/deeper/extra-Q4_0.gguf`);
    assert.equal(
      await Deno.readLink(nested),
      `../../../../blobs/${sha256(gguf("nested"))}`,
    );
    assert.deepEqual(await Deno.readFile(nested), gguf("nested"));

    // Cached: neither form of a second start talks to the hub, even when it is gone.
    const before = hub.requests.length;
    logs.length = 0;
    const again = await resolveModel({ model: "acme/tiny-GGUF", dtype: "auto", dataDir: "/x" }, {
      env: { ...env, HF_ENDPOINT: deadEndpoint() },
      log: (l) => logs.push(l),
    });
    assert.equal(again.path, first.path);
    assert.match(logs.at(-1)!, /using cached acme\/tiny-GGUF\/tiny-Q4_K_M\.gguf .*no network/);
    const named = await downloadHubModel({
      repo: "acme/tiny-GGUF",
      modelFile: "tiny-Q4_K_M.gguf",
      env: { ...env, HF_ENDPOINT: deadEndpoint() },
      onProgress: () => {},
      log: () => {},
    });
    assert.equal(named, first.path);
    assert.equal(hub.requests.length, before);
  });
});

Deno.test("a cache written the way huggingface_hub writes it is used with the hub stopped", async () => {
  const home = await Deno.makeTempDir({ prefix: "hearth-hfhome-" });
  try {
    // What `hf download acme/other-GGUF` leaves behind, built by hand.
    const commit = commitOf("other");
    const repoDir = `${home}/hub/models--acme--other-GGUF`;
    const files: Record<string, Uint8Array> = {
      "other-Q8_0.gguf": gguf("other q8"),
      "other-Q4_K_M-00001-of-00002.gguf": gguf("other q4 1"),
      "other-Q4_K_M-00002-of-00002.gguf": gguf("other q4 2"),
      "README.md": bytes("# other"),
    };
    await Deno.mkdir(`${repoDir}/blobs`, { recursive: true });
    await Deno.mkdir(`${repoDir}/snapshots/${commit}`, { recursive: true });
    await Deno.mkdir(`${repoDir}/refs`, { recursive: true });
    await Deno.mkdir(`${home}/hub/.locks/models--acme--other-GGUF`, { recursive: true });
    for (const [name, body] of Object.entries(files)) {
      const blob = name.endsWith(".gguf") ? sha256(body) : gitSha1(body);
      await Deno.writeFile(`${repoDir}/blobs/${blob}`, body);
      await Deno.symlink(`../../blobs/${blob}`, `${repoDir}/snapshots/${commit}/${name}`);
    }
    await Deno.writeTextFile(`${repoDir}/refs/main`, commit);

    const logs: string[] = [];
    const env = { HF_HOME: home, HF_ENDPOINT: deadEndpoint() };
    const m = await resolveModel({ model: "acme/other-GGUF", dtype: "auto", dataDir: "/x" }, {
      env,
      log: (l) => logs.push(l),
    });
    assert.equal(m.path, `${repoDir}/snapshots/${commit}/other-Q4_K_M-00001-of-00002.gguf`);
    assert.deepEqual(await Deno.readFile(m.path), files["other-Q4_K_M-00001-of-00002.gguf"]);
    assert.ok(logs.some((l) => /chose other-Q4_K_M-00001-of-00002\.gguf \(Q4_K_M\)/.test(l)));
    assert.match(logs.at(-1)!, /^using cached acme\/other-GGUF\/.*no network/);

    const q8 = await downloadHubModel({
      repo: "acme/other-GGUF",
      modelFile: "other-Q8_0.gguf",
      env: { ...env, HF_HUB_OFFLINE: "1" },
      log: (l) => logs.push(l),
    });
    assert.equal(q8, `${repoDir}/snapshots/${commit}/other-Q8_0.gguf`);
    assert.match(logs.at(-1)!, /^HF_HUB_OFFLINE is set: using cached acme\/other-GGUF\/other-Q8_0/);
    // A revision given as a commit needs no ref.
    const byCommit = await downloadHubModel({
      repo: "acme/other-GGUF",
      revision: commit,
      modelFile: "other-Q8_0.gguf",
      env,
      log: () => {},
    });
    assert.equal(byCommit, q8);
    // The second shard of a split model gives back the first, which llama.cpp loads.
    const shard2 = await downloadHubModel({
      repo: "acme/other-GGUF",
      modelFile: "other-Q4_K_M-00002-of-00002.gguf",
      env,
      log: () => {},
    });
    assert.equal(shard2, m.path);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

Deno.test("HF_HUB_OFFLINE: the cache or a clear error, never the network", async () => {
  await withHub({ "acme/off": { files: { "off-Q4_K_M.gguf": gguf("off") } } }, async (c) => {
    const offline = { ...c.env, HF_HUB_OFFLINE: "1" };
    const repoDir = `${c.cache}/models--acme--off`;
    await assert.rejects(downloadHubModel({ repo: "acme/off", env: offline, log: () => {} }), {
      message: `HF_HUB_OFFLINE is set and hub repo acme/off has no GGUF model in the cache at ` +
        `${repoDir}; unset HF_HUB_OFFLINE to download it`,
    });
    assert.deepEqual(c.hub.requests, []);
    const path = await c.download({ repo: "acme/off" });
    const n = c.hub.requests.length;
    const logs: string[] = [];
    assert.equal(
      await downloadHubModel({ repo: "acme/off", env: offline, log: (l) => logs.push(l) }),
      path,
    );
    assert.match(logs[0], /^HF_HUB_OFFLINE is set: using cached acme\/off\/off-Q4_K_M\.gguf/);
    await assert.rejects(
      downloadHubModel({ repo: "acme/off", modelFile: "x.gguf", env: offline, log: () => {} }),
      /^Error: HF_HUB_OFFLINE is set and x\.gguf of hub repo acme\/off is not in the cache/,
    );
    assert.equal(c.hub.requests.length, n);
  });
});

Deno.test("an interrupted download resumes with a Range request; the sha256 checks out", async () => {
  const big = gguf("flaky", 300_000);
  const other = gguf("flaky two", 300_000);
  await withHub({
    "acme/flaky": { files: { "flaky-Q4_K_M.gguf": big, "two-Q8_0.gguf": other } },
  }, async ({ hub, cache, logs, download }) => {
    const sha = sha256(big);
    const blobs = `${cache}/models--acme--flaky/blobs`;
    hub.cdn.cut.set(sha, 1);
    await assert.rejects(download({ repo: "acme/flaky" }), (e: Error) => {
      assert.match(
        e.message,
        /^download of acme\/flaky\/flaky-Q4_K_M\.gguf was interrupted at [\d.]+ MB of 0\.3 MB \(.*\); start again to resume it$/,
      );
      return true;
    });
    const kept = (await Deno.stat(`${blobs}/${sha}.incomplete`)).size;
    assert.ok(kept > 0 && kept < big.length, `kept ${kept}`);
    // Nothing that looks like a model: no blob, no snapshot, no ref.
    assert.deepEqual(await tree(`${cache}/models--acme--flaky`), [`blobs/${sha}.incomplete`]);

    const path = await download({ repo: "acme/flaky" });
    assert.equal(hub.requests.at(-1), `GET cdn/${sha} bytes=${kept}-`);
    assert.deepEqual(await Deno.readFile(path), big);
    assert.equal(sha256(await Deno.readFile(`${blobs}/${sha}`)), sha);
    assert.ok(
      logs.some((l) => l.startsWith("resuming acme/flaky/flaky-Q4_K_M.gguf at ")),
      logs.join("\n"),
    );
    assert.ok(!(await tree(blobs)).some((f) => f.endsWith(".incomplete")));

    // A server that ignores Range answers 200: the file starts over and still checks out.
    const sha2 = sha256(other);
    hub.cdn.cut.set(sha2, 1);
    await assert.rejects(download({ repo: "acme/flaky", modelFile: "two-Q8_0.gguf" }), /resume/);
    hub.cdn.ignoreRange = true;
    const two = await download({ repo: "acme/flaky", modelFile: "two-Q8_0.gguf" });
    assert.match(hub.requests.at(-1)!, new RegExp(`^GET cdn/${sha2} bytes=\\d+-$`));
    assert.deepEqual(await Deno.readFile(two), other);
    assert.ok(logs.some((l) => l.includes("the server cannot resume; downloading from the start")));
  });
});

Deno.test("a download whose sha256 is not the hub's is refused and deleted", async () => {
  const body = gguf("bad", 10_000);
  await withHub({ "acme/bad": { files: { "bad-Q4_K_M.gguf": body } } }, async (c) => {
    const sha = sha256(body);
    c.hub.cdn.corrupt.add(sha);
    await assert.rejects(c.download({ repo: "acme/bad" }), (e: Error) => {
      assert.match(
        e.message,
        new RegExp(
          `^download of acme/bad/bad-Q4_K_M\\.gguf is corrupt: its sha256 [0-9a-f]{64} is not ` +
            `the hub's ${sha}; deleted it, start again to retry$`,
        ),
      );
      return true;
    });
    assert.deepEqual(await tree(`${c.cache}/models--acme--bad`), []);
    c.hub.cdn.corrupt.clear();
    assert.deepEqual(await Deno.readFile(await c.download({ repo: "acme/bad" })), body);
  });
});

Deno.test("split GGUF: every shard downloaded, the first returned, the set counted once", async () => {
  const shards = [1, 2, 3].map((i) => gguf(`shard ${i}`, 1000 + i));
  const name = (i: number) => `big-Q4_K_M-0000${i}-of-00003.gguf`;
  await withHub({
    "acme/split": {
      files: {
        [name(1)]: shards[0],
        [name(2)]: shards[1],
        [name(3)]: shards[2],
        "big-Q8_0.gguf": gguf("q8"),
        "big-F16.gguf": gguf("f16"),
      },
    },
    "acme/broken": { files: { "x-00001-of-00002.gguf": gguf("x") } },
  }, async ({ hub, cache, logs, download }) => {
    const commit = hub.repos["acme/split"].commit!;
    const path = await download({ repo: "acme/split" });
    const snap = `${cache}/models--acme--split/snapshots/${commit}`;
    assert.equal(path, `${snap}/${name(1)}`);
    assert.ok(logs.some((l) => l.includes(`chose ${name(1)} (Q4_K_M) among 3 GGUF models`)));
    for (const i of [1, 2, 3]) {
      assert.equal(
        await Deno.readLink(`${snap}/${name(i)}`),
        `../../blobs/${sha256(shards[i - 1])}`,
      );
      assert.deepEqual(await Deno.readFile(`${snap}/${name(i)}`), shards[i - 1]);
    }
    assert.equal(hub.requests.filter((r) => r.startsWith("GET cdn/")).length, 3);
    await assert.rejects(download({ repo: "acme/broken" }), {
      message: "hub repo acme/broken lacks shards of split model x-00001-of-00002.gguf: " +
        "x-00002-of-00002.gguf",
    });
  });
});

Deno.test("errors: 401, 403 and 404 say what to do, in one line naming repo and file", async () => {
  await withHub({
    "acme/secret": { files: { "s.gguf": gguf("secret") }, token: "hf_right" },
    "acme/gated": { files: { "g-Q4_K_M.gguf": gguf("gated") }, gated: true },
    "acme/ghost": { files: { "real-Q8_0.gguf": gguf("real") }, ghosts: ["gone.gguf"] },
    "acme/safetensors": { files: { "model.safetensors": bytes("") } },
  }, async ({ hub, cache, env }) => {
    const get = (repo: string, extra: Record<string, string> = {}, more = {}) =>
      downloadHubModel({
        repo,
        env: { ...env, ...extra },
        onProgress: () => {},
        log: () => {},
        ...more,
      });
    await assert.rejects(get("acme/secret"), {
      message: "hub repo acme/secret needs a token (HTTP 401): the repo is private, gated or " +
        "does not exist; set HF_TOKEN to a token that can read it",
    });
    await assert.rejects(get("acme/secret", { HF_TOKEN: "hf_wrong_value" }), (e: Error) => {
      assert.equal(
        e.message,
        "hub repo acme/secret: the hub refused the token from HF_TOKEN (HTTP 401): it is " +
          "invalid or expired, or cannot read this repo; set HF_TOKEN to a valid read token",
      );
      return true;
    });
    const ok = await get("acme/secret", { HUB_TOKEN: "hf_wrong", HF_TOKEN: "hf_right" });
    assert.deepEqual(await Deno.readFile(ok), gguf("secret"));
    assert.deepEqual(hub.auth.slice(-2), ["Bearer hf_right", "Bearer hf_right"]);

    await assert.rejects(get("acme/gated"), {
      message: `g-Q4_K_M.gguf in hub repo acme/gated is gated (HTTP 403): accept its terms at ` +
        `${hub.url}/acme/gated then set HF_TOKEN to a token of that account`,
    });
    await assert.rejects(get("acme/gated", { HF_TOKEN: "hf_someone" }), {
      message: `g-Q4_K_M.gguf in hub repo acme/gated is gated (HTTP 403): accept its terms at ` +
        `${hub.url}/acme/gated with the account whose token is in HF_TOKEN`,
    });

    await assert.rejects(get("acme/nope"), {
      message: `hub repo acme/nope not found on ${hub.url}`,
    });
    await assert.rejects(get("acme/ghost", {}, { revision: "v9" }), {
      message: `hub repo acme/ghost has no revision v9 on ${hub.url}`,
    });
    await assert.rejects(get("acme/ghost", {}, { modelFile: "gone.gguf" }), {
      message: "file gone.gguf not found in hub repo acme/ghost; its .gguf files: gone.gguf, " +
        "real-Q8_0.gguf",
    });
    await assert.rejects(get("acme/ghost", {}, { modelFile: "q4.gguf" }), {
      message:
        "hub repo acme/ghost has no file q4.gguf; its .gguf files: gone.gguf, real-Q8_0.gguf",
    });
    await assert.rejects(get("acme/safetensors"), {
      message: "hub repo acme/safetensors has no .gguf file; Hearth loads GGUF models only",
    });
    // Nothing half-made was left in the cache by any of them.
    assert.deepEqual(
      (await tree(cache)).filter((f) => f.startsWith("models--") && !f.includes("acme--secret")),
      [],
    );
  });
});

Deno.test({
  name: "a full disk keeps the partial download and names the directory",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const body = gguf("full", 50_000);
    await withHub({ "acme/full": { files: { "full-Q4_K_M.gguf": body } } }, async (c) => {
      // `.incomplete` pointing at /dev/full: every write fails with ENOSPC, as on a full disk.
      const blobs = `${c.cache}/models--acme--full/blobs`;
      const partial = `${blobs}/${sha256(body)}.incomplete`;
      await Deno.mkdir(blobs, { recursive: true });
      await Deno.symlink("/dev/full", partial);
      await assert.rejects(c.download({ repo: "acme/full" }), {
        message: `no space left on the disk holding ${blobs} while downloading ` +
          `acme/full/full-Q4_K_M.gguf (0.0 MB kept in ${partial}); free space and start again ` +
          "to resume",
      });
      assert.equal(await Deno.readLink(partial), "/dev/full");
    });
  },
});

Deno.test("an unreachable hub with nothing cached is named in the error", async () => {
  const endpoint = deadEndpoint();
  const cache = await Deno.makeTempDir({ prefix: "hearth-hub-" });
  try {
    await assert.rejects(
      resolveModel({ model: "acme/tiny", dtype: "auto", dataDir: "/x" }, {
        env: { HF_ENDPOINT: endpoint, HF_HUB_CACHE: cache },
        onProgress: () => {},
        log: () => {},
      }),
      (e: Error) => {
        assert.ok(e.message.startsWith(`cannot reach the hub at ${endpoint}: `), e.message);
        assert.ok(
          e.message.endsWith(
            `; acme/tiny is not in the cache at ${cache}/models--acme--tiny (check the network ` +
              "or HF_ENDPOINT)",
          ),
          e.message,
        );
        return true;
      },
    );
  } finally {
    await Deno.remove(cache, { recursive: true });
  }
});

Deno.test("HF_HUB_CACHE wins over HF_HOME, HF_HOME over HOME; a bare env uses the data dir", async () => {
  const body = gguf("where");
  await withHub({ "acme/where": { files: { "w-Q4_K_M.gguf": body } } }, async ({ hub }) => {
    const tmp = await Deno.makeTempDir({ prefix: "hearth-hub-" });
    const commit = hub.repos["acme/where"].commit!;
    const file = `models--acme--where/snapshots/${commit}/w-Q4_K_M.gguf`;
    const get = (env: Record<string, string>) =>
      downloadHubModel({
        repo: "acme/where",
        env,
        dataDir: `${tmp}/data`,
        onProgress: () => {},
        log: () => {},
      });
    try {
      const base = { HF_ENDPOINT: hub.url, HOME: `${tmp}/home` };
      assert.equal(
        await get({ ...base, HF_HOME: `${tmp}/hfhome`, HF_HUB_CACHE: `${tmp}/hubcache` }),
        `${tmp}/hubcache/${file}`,
      );
      assert.equal(await get({ ...base, HF_HOME: `${tmp}/hfhome` }), `${tmp}/hfhome/hub/${file}`);
      assert.equal(await get(base), `${tmp}/home/.cache/huggingface/hub/${file}`);
      assert.equal(await get({ HF_ENDPOINT: hub.url }), `${tmp}/data/huggingface/hub/${file}`);
      // Four caches, four downloads: none of them looked in another's.
      assert.equal(hub.requests.filter((r) => r.startsWith("GET cdn/")).length, 4);
    } finally {
      await Deno.remove(tmp, { recursive: true });
    }
  });
});

Deno.test("concurrent starts download a file once; revisions share unchanged blobs", async () => {
  const main = gguf("main", 400_000);
  await withHub({
    "acme/rev": {
      files: { "r-Q4_K_M.gguf": main, "notes.gguf": gguf("notes"), "README.md": bytes("hi") },
      inGit: ["notes.gguf"],
      revisions: {
        v1: { commit: commitOf("v1"), files: { "r-Q4_K_M.gguf": main } },
        v2: { commit: commitOf("v2"), files: { "r-Q4_K_M.gguf": gguf("v2") } },
      },
    },
  }, async ({ hub, cache, download }) => {
    // Sent over ~200 ms, so the second start finds the download under way and waits for it.
    hub.cdn.slow.add(sha256(main));
    const [a, b] = await Promise.all([
      download({ repo: "acme/rev" }),
      download({ repo: "acme/rev" }),
    ]);
    assert.equal(a, b);
    assert.equal(hub.requests.filter((r) => r.startsWith("GET cdn/")).length, 1);
    assert.deepEqual(await Deno.readFile(a), main);

    // v1 has the same bytes: a new snapshot and ref, the same blob, no download.
    const v1 = await download({ repo: "acme/rev", revision: "v1" });
    const repoDir = `${cache}/models--acme--rev`;
    assert.equal(v1, `${repoDir}/snapshots/${commitOf("v1")}/r-Q4_K_M.gguf`);
    assert.equal(await Deno.realPath(v1), await Deno.realPath(a));
    assert.equal(await Deno.readTextFile(`${repoDir}/refs/v1`), commitOf("v1"));
    assert.equal(hub.requests.filter((r) => r.startsWith("GET cdn/")).length, 1);
    const v2 = await download({ repo: "acme/rev", revision: "v2" });
    assert.deepEqual(await Deno.readFile(v2), gguf("v2"));
    assert.deepEqual(
      await repoInfo("acme/rev", { env: { HF_ENDPOINT: hub.url }, revision: "v2" }),
      {
        commit: commitOf("v2"),
        files: ["r-Q4_K_M.gguf"],
      },
    );
    assert.deepEqual(await listRepoFiles("acme/rev", { env: { HF_ENDPOINT: hub.url } }), [
      "r-Q4_K_M.gguf",
      "notes.gguf",
      "README.md",
    ]);

    // A file kept in git rather than LFS: served by the hub itself, its blob named by git sha1.
    const notes = await download({ repo: "acme/rev", modelFile: "notes.gguf" });
    assert.equal(await Deno.readLink(notes), `../../blobs/${gitSha1(gguf("notes"))}`);
    assert.deepEqual(await Deno.readFile(notes), gguf("notes"));
    assert.ok(
      hub.requests.includes(`GET /acme/rev/resolve/${hub.repos["acme/rev"].commit}/notes.gguf`),
    );
  });
});

Deno.test("resolveModel: local files and directories", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-resolve-" });
  // Any hub call would fail loudly.
  const env = { HF_ENDPOINT: deadEndpoint(), HF_HUB_CACHE: `${dir}/hub` };
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
