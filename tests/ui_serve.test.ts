/**
 * Serving the web UI: the pages under `/ui/` on the API app and at the root of the `--ui-port`
 * handler (which hands every other path to the API), open even with `--api-key`, a strict CSP,
 * gzip, ETags, the video rules document, and the page weight (reported, and held under a budget).
 */
import assert from "node:assert/strict";
import { newServerState } from "../routes/state.ts";
import { videoRulesDocument } from "../lib/video/rules_document.ts";
import { createApp } from "../routes/app.ts";
import {
  loadUiAssets,
  mountUi,
  pageWeight,
  SERVER_PAGES,
  UI_CSP,
  uiServerHandler,
} from "../routes/ui.ts";

const assets = await loadUiAssets();
const opts = {
  pages: SERVER_PAGES,
  json: { "video-rules.json": () => videoRulesDocument("global", { keyRequired: false }) },
};

function apiApp(apiKey?: string) {
  const app = createApp(newServerState("hearth-test", apiKey));
  mountUi(app, assets, opts);
  return app;
}

const info = {
  remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 1 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;

Deno.test("ui: pages under /ui/ on the API port, /ui redirects, assets and rules served", async () => {
  const app = apiApp();
  const redirect = await app.request("/ui");
  assert.equal(redirect.status, 301);
  assert.equal(redirect.headers.get("location"), "/ui/");
  for (const path of ["/ui/", "/ui/agents", "/ui/video"]) {
    const r = await app.request(path);
    assert.equal(r.status, 200, path);
    assert.match(r.headers.get("content-type")!, /^text\/html/);
    assert.equal(r.headers.get("content-security-policy"), UI_CSP);
    assert.match(await r.text(), /<script type="module" src="\.\/assets\/\w+\.js"><\/script>/);
  }
  const css = await app.request("/ui/assets/style.css");
  assert.equal(css.status, 200);
  assert.match(css.headers.get("content-type")!, /^text\/css/);
  await css.body?.cancel();
  const js = await app.request("/ui/assets/dom.js");
  assert.match(js.headers.get("content-type")!, /^text\/javascript/);
  await js.body?.cancel();
  const missing = await app.request("/ui/assets/nope.js");
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
  const rules = await (await app.request("/ui/video-rules.json")).json();
  assert.deepEqual(rules.models["veo-2.0-generate-001"].durations, [5, 6, 8]);
  assert.equal(rules.models["veo-3.1-lite-generate-preview"].resolutions["4k"], undefined);
});

Deno.test("ui: gzip when asked, ETag revalidation answers 304", async () => {
  const app = apiApp();
  const plain = await app.request("/ui/assets/style.css");
  const text = await plain.text();
  const gz = await app.request("/ui/assets/style.css", { headers: { "accept-encoding": "gzip" } });
  assert.equal(gz.headers.get("content-encoding"), "gzip");
  const unzipped = await new Response(gz.body!.pipeThrough(new DecompressionStream("gzip"))).text();
  assert.equal(unzipped, text);
  const etag = plain.headers.get("etag")!;
  assert.match(etag, /^"[0-9a-f]{16}"$/);
  const again = await app.request("/ui/assets/style.css", { headers: { "if-none-match": etag } });
  assert.equal(again.status, 304);
  assert.equal(await again.text(), "");
});

Deno.test("ui: pages stay open with --api-key while the API behind them needs the key", async () => {
  const app = apiApp("sekret");
  const page = await app.request("/ui/agents");
  assert.equal(page.status, 200);
  await page.body?.cancel();
  const models = await app.request("/v1/chat/completions", { method: "POST", body: "{}" });
  assert.equal(models.status, 401);
  await models.body?.cancel();
  // The WebSocket fallback cannot send headers: `?api_key=` is accepted there, and only there.
  const ws = await app.request("/ws?api_key=wrong");
  assert.equal(ws.status, 401);
  await ws.body?.cancel();
  const sessions = await app.request("/api/sessions?api_key=sekret");
  assert.equal(sessions.status, 401);
  await sessions.body?.cancel();
});

Deno.test("ui: the --ui-port handler serves pages at the root and hands the rest to the API", async () => {
  const app = apiApp();
  const handler = uiServerHandler(assets, app, opts);
  const call = async (path: string) => await handler(new Request(`http://127.0.0.1${path}`), info);
  for (const path of ["/", "/agents", "/video", "/assets/api.js", "/video-rules.json"]) {
    const r = await call(path);
    assert.equal(r.status, 200, path);
    await r.body?.cancel();
  }
  const models = await call("/v1/models");
  assert.equal(models.status, 200);
  assert.equal((await models.json()).object, "list");
  const missing = await call("/nope");
  assert.equal(missing.status, 404);
  assert.match((await missing.json()).error.message, /no route for GET \/nope/);
});

Deno.test("ui: every asset a page references exists, and page weight stays small", () => {
  const budget = 64 * 1024; // gzip bytes per page, HTML + CSS + every module it imports
  const lines: string[] = [];
  for (const file of ["index.html", "agents.html", "video.html", "manager.html"]) {
    const w = pageWeight(assets, file);
    lines.push(
      `${file}: ${w.files.length} files, ${(w.raw / 1024).toFixed(1)} KB raw, ` +
        `${(w.gzip / 1024).toFixed(1)} KB gzip`,
    );
    assert.ok(w.files.includes("assets/style.css"), `${file} loads the stylesheet`);
    assert.ok(w.gzip < budget, `${file}: ${w.gzip} gzip bytes over the ${budget} budget`);
    // References that do not resolve would be 404s in the browser.
    for (const f of w.files) assert.ok(assets.has(f), f);
    const html = new TextDecoder().decode(assets.get(file)!.body);
    for (const m of html.matchAll(/(?:src|href)="\.\/(assets\/[^"]+)"/g)) {
      assert.ok(assets.has(m[1]), `${file} references missing ${m[1]}`);
    }
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, `${file} has an inline script`);
  }
  console.log(`page weight:\n  ${lines.join("\n  ")}`);
});

Deno.test("ui: no page or module writes HTML strings into the DOM", async () => {
  for (const [name, asset] of assets) {
    if (!name.endsWith(".js")) continue;
    const text = new TextDecoder().decode(asset.body);
    assert.doesNotMatch(
      text,
      /\.innerHTML\s*=|outerHTML\s*=|insertAdjacentHTML|document\.write/,
      name,
    );
    assert.doesNotMatch(text, /\beval\(|new Function\(/, name);
  }
  await Promise.resolve();
});
