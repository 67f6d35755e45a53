/**
 * The web UI's static files (`ui/`: HTML pages, ES modules, CSS), read once into memory with a
 * gzip copy and an ETag each, and served by {@link uiHandlers}: on the API port under `/ui/`, on
 * `--ui-port` at the root (docs/ARCHITECTURE.md, "Web UI"), and by `hearth manager` for its one page. Pages use
 * relative asset paths (`./assets/...`), so the same files work under either prefix; API calls use
 * absolute paths (`/v1/...`), which the UI port hands to the API app in this process.
 *
 * Every UI response carries a strict Content-Security-Policy (scripts and styles from this origin
 * only, no inline script), so even a rendering bug cannot run HTML a model produced.
 *
 * @example
 * ```ts
 * import { loadUiAssets, mountUi, uiServerHandler } from "./ui.ts";
 * const assets = await loadUiAssets();
 * mountUi(app, assets, { pages: SERVER_PAGES, json }); // the `ui` rows of routes/table.ts
 * Deno.serve({ port: 8001 }, uiServerHandler(assets, app, opts)); // UI at /, the API behind it
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { routePath } from "hono/route";
import {
  mountRoutes,
  onPaths,
  type Route,
  routesOf,
  SERVE_ROUTES,
  UI_PORT_ROUTES,
} from "./table.ts";

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

/**
 * The handlers of the `ui` rows of a route table (routes/table.ts), for the pages and documents of
 * `opts` under `prefix` ("" or "/ui"): a page or document row serves the one at its own path. The
 * rows and `opts` must name the same pages and documents (else this throws), so the table and
 * {@link SERVER_PAGES} cannot drift apart.
 */
export function uiHandlers(
  assets: UiAssets,
  opts: UiRouteOptions,
  prefix: string,
  rows: readonly Route[],
) {
  const pages = new Map<string, UiAsset>();
  for (const page of opts.pages) {
    const asset = assets.get(page.file);
    if (!asset) throw new Error(`ui/${page.file} is missing`);
    pages.set(`${prefix}/${page.path}`, asset);
  }
  const docs = new Map(Object.entries(opts.json ?? {}).map(([n, doc]) => [`${prefix}/${n}`, doc]));
  for (const [handler, served] of [["uiPage", pages], ["uiDocument", docs]] as const) {
    const listed = new Set(rows.filter((r) => r.handler === handler).map((r) => r.path));
    const apart = [...listed].filter((p) => !served.has(p))
      .concat([...served.keys()].filter((p) => !listed.has(p)));
    if (apart.length) {
      throw new Error(`routes/table.ts and the UI's pages disagree on ${apart.join(", ")}`);
    }
  }
  // The row's own path, so one handler serves each page (or document) at its place.
  const uiPage = (c: Context) => send(c, pages.get(routePath(c))!);
  const uiDocument = (c: Context) =>
    c.json(docs.get(routePath(c))!(), 200, { "cache-control": "no-cache" });
  const uiAsset = (c: Context) => {
    const rel = c.req.path.slice(c.req.path.indexOf("/assets/") + 1);
    const asset = assets.get(rel);
    if (!asset) return c.text(`no UI file ${rel}`, 404);
    return send(c, asset);
  };
  const uiRedirect = (c: Context) => c.redirect("/ui/", 301);
  return { uiPage, uiDocument, uiAsset, uiRedirect };
}

/** Mounts the UI under `/ui/` of the API app (`/ui` redirects there, so relative paths resolve). */
export function mountUi(api: Hono, assets: UiAssets, opts: UiRouteOptions): void {
  const rows = routesOf(SERVE_ROUTES, "ui");
  mountRoutes(api, rows, uiHandlers(assets, opts, "/ui", rows));
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
  const ui = mountRoutes(new Hono(), UI_PORT_ROUTES, uiHandlers(assets, opts, "", UI_PORT_ROUTES));
  const isUi = onPaths(UI_PORT_ROUTES);
  return (req, info) => {
    const path = new URL(req.url).pathname;
    return isUi(path) ? ui.fetch(req, info) : api.fetch(req, info);
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
