/**
 * The web UI's static files (`ui/`: HTML pages, ES modules, CSS), read once into memory with a
 * gzip copy and an ETag each, and served by {@link uiRoutes}: on the API port under `/ui/`, on
 * `--ui-port` at the root (docs/ARCHITECTURE.md, "Web UI"), and by `hearth manager` for its one page. Pages use
 * relative asset paths (`./assets/...`), so the same files work under either prefix; API calls use
 * absolute paths (`/v1/...`), which the UI port hands to the API app in this process.
 *
 * Every UI response carries a strict Content-Security-Policy (scripts and styles from this origin
 * only, no inline script), so even a rendering bug cannot run HTML a model produced.
 *
 * @example
 * ```ts
 * import { loadUiAssets, uiRoutes, uiServerHandler } from "./ui.ts";
 * const assets = await loadUiAssets();
 * app.route("/ui", uiRoutes(assets, { pages: SERVER_PAGES }));
 * Deno.serve({ port: 8001 }, uiServerHandler(assets, app)); // UI at /, the API behind it
 * ```
 * @module
 */
import { type Context, Hono } from "hono";

export type UiAsset = {
  body: Uint8Array;
  gzip: Uint8Array;
  type: string;
  etag: string;
};

/** Files by their path under `ui/` (e.g. `assets/chat.js`, `index.html`). */
export type UiAssets = ReadonlyMap<string, UiAsset>;

/** A page's URL path (relative to the mount point, "" = the root) and its HTML file. */
export type UiPage = { path: string; file: string };

/** The pages of `hearth serve` (chat, agents, video). */
export const SERVER_PAGES: readonly UiPage[] = [
  { path: "", file: "index.html" },
  { path: "agents", file: "agents.html" },
  { path: "video", file: "video.html" },
];

/** The page of `hearth manager`, at its root and at `/manager`. */
export const MANAGER_PAGES: readonly UiPage[] = [
  { path: "", file: "manager.html" },
  { path: "manager", file: "manager.html" },
];

const TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  json: "application/json",
  png: "image/png",
  ico: "image/x-icon",
};

export const UI_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  // Generated videos are fetched through the API's signed URLs (possibly another port of this host).
  "media-src 'self' blob: http: https:",
  "connect-src 'self' ws: wss:",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'self'",
].join("; ");

export const uiDir = new URL("../ui/", import.meta.url);

async function gzip(data: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function digest(data: Uint8Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", data as BufferSource));
  return Array.from(hash.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Reads every file under `dir` (default: the project's `ui/`). */
export async function loadUiAssets(dir: URL = uiDir): Promise<UiAssets> {
  const out = new Map<string, UiAsset>();
  const walk = async (sub: string) => {
    for await (const entry of Deno.readDir(new URL(sub, dir))) {
      const rel = `${sub}${entry.name}`;
      if (entry.isDirectory) {
        await walk(`${rel}/`);
        continue;
      }
      const ext = entry.name.slice(entry.name.lastIndexOf(".") + 1);
      const type = TYPES[ext];
      // Only files the browser loads; notes (README.md) and tests stay out.
      if (!entry.isFile || !type) continue;
      const body = await Deno.readFile(new URL(rel, dir));
      out.set(rel, { body, gzip: await gzip(body), type, etag: `"${await digest(body)}"` });
    }
  };
  await walk("");
  return out;
}

function send(c: Context, asset: UiAsset): Response {
  const headers: Record<string, string> = {
    "content-type": asset.type,
    "cache-control": "no-cache",
    etag: asset.etag,
    vary: "accept-encoding",
    "x-content-type-options": "nosniff",
    "content-security-policy": UI_CSP,
    "referrer-policy": "no-referrer",
  };
  if (c.req.header("if-none-match") === asset.etag) {
    return new Response(null, { status: 304, headers });
  }
  const gz = /\bgzip\b/.test(c.req.header("accept-encoding") ?? "") &&
    asset.gzip.length < asset.body.length;
  if (gz) headers["content-encoding"] = "gzip";
  const body = gz ? asset.gzip : asset.body;
  return new Response(c.req.method === "HEAD" ? null : body as BodyInit, { headers });
}

export type UiRouteOptions = {
  pages: readonly UiPage[];
  /** Extra JSON documents served beside the pages (e.g. `video-rules.json`). */
  json?: Record<string, () => unknown>;
};

/** The pages, their assets and the JSON documents under `prefix` ("" or e.g. "/ui"). */
export function uiRoutes(assets: UiAssets, opts: UiRouteOptions, prefix = ""): Hono {
  const app = new Hono();
  for (const page of opts.pages) {
    const asset = assets.get(page.file);
    if (!asset) throw new Error(`ui/${page.file} is missing`);
    app.on(["GET", "HEAD"], `${prefix}/${page.path}`, (c) => send(c, asset));
  }
  for (const [name, doc] of Object.entries(opts.json ?? {})) {
    app.get(`${prefix}/${name}`, (c) => c.json(doc(), 200, { "cache-control": "no-cache" }));
  }
  app.on(["GET", "HEAD"], `${prefix}/assets/*`, (c) => {
    const rel = c.req.path.slice(c.req.path.indexOf("/assets/") + 1);
    const asset = assets.get(rel);
    if (!asset) return c.text(`no UI file ${rel}`, 404);
    return send(c, asset);
  });
  return app;
}

/** Mounts the UI under `/ui/` of the API app (`/ui` redirects there, so relative paths resolve). */
export function mountUi(api: Hono, assets: UiAssets, opts: UiRouteOptions): void {
  api.get("/ui", (c) => c.redirect("/ui/", 301));
  api.route("/", uiRoutes(assets, opts, "/ui"));
}

/**
 * The `--ui-port` server: the UI at the root; every other path (the API, `/api/events`, `/ws`,
 * `/v1beta`) goes to the API app of this process, so pages talk to one origin.
 */
export function uiServerHandler(
  assets: UiAssets,
  api: { fetch: (req: Request, info?: Deno.ServeHandlerInfo) => Response | Promise<Response> },
  opts: UiRouteOptions,
): (req: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response> {
  const ui = uiRoutes(assets, opts);
  const pagePaths = new Set(opts.pages.map((p) => `/${p.path}`));
  const docs = new Set(Object.keys(opts.json ?? {}).map((n) => `/${n}`));
  return (req, info) => {
    const path = new URL(req.url).pathname;
    if (pagePaths.has(path) || docs.has(path) || path.startsWith("/assets/")) {
      return ui.fetch(req, info);
    }
    return api.fetch(req, info);
  };
}

/** Bytes of a page: its HTML and every asset it loads (found by following imports), raw and gzip. */
export function pageWeight(
  assets: UiAssets,
  file: string,
): { raw: number; gzip: number; files: string[] } {
  const seen = new Set<string>();
  const visit = (rel: string) => {
    if (seen.has(rel)) return;
    const asset = assets.get(rel);
    if (!asset) return;
    seen.add(rel);
    const text = new TextDecoder().decode(asset.body);
    const base = rel.includes("/") ? rel.slice(0, rel.lastIndexOf("/") + 1) : "";
    const refs = [
      ...text.matchAll(/(?:src|href)="\.\/([^"]+)"/g),
      ...text.matchAll(/(?:from|import)\s*\(?\s*"\.\/([^"]+)"/g),
    ].map((m) => m[1]);
    for (const ref of refs) visit(rel.endsWith(".html") ? ref : `${base}${ref}`);
  };
  visit(file);
  let raw = 0, gz = 0;
  for (const f of seen) {
    raw += assets.get(f)!.body.length;
    gz += assets.get(f)!.gzip.length;
  }
  return { raw, gzip: gz, files: [...seen].sort() };
}
