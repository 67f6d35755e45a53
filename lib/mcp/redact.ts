/**
 * Keeps MCP secrets out of logs, `/health` and errors. A server's `env` values, `headers` values and
 * URL credentials / query values are secrets; error texts come from places we do not control (a
 * server's stderr, an HTTP 401 body that echoes a header, a fetch error quoting the URL), so every
 * string that leaves `lib/mcp/` is passed through the server's {@link Redactor} rather than trusting
 * each source to be careful.
 *
 * @example
 * ```ts
 * import { redactorFor } from "./redact.ts";
 * const r = redactorFor({ url: "https://u:pw@h.example/mcp?key=k123", headers: { A: "Bearer tok-9" } });
 * r.redact("fetch https://u:pw@h.example/mcp?key=k123 failed, sent Bearer tok-9");
 * // → "fetch https://h.example/mcp?… failed, sent ***"
 * r.url; // "https://h.example/mcp?…" (safe to show)
 * ```
 * @module
 */
import type { McpServerConfig } from "./config.ts";

/** Shortest value treated as a secret: one or two characters cannot hide anything, and replacing
 * every "1" or "on" in a message would make it unreadable. */
const MIN_SECRET = 3;

export type Redactor = {
  redact(text: string): string;
  /** The server's URL without credentials or query values (http servers only). */
  url?: string;
};

/** A URL safe to show: no user info, the query replaced by `?…`, no fragment. */
export function displayUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}${u.search ? "?…" : ""}`;
  } catch {
    return "(invalid url)";
  }
}

function variants(value: string): string[] {
  const out = [value];
  // A secret may show up URL-encoded (in a URL) or decoded (from one); cover both spellings.
  try {
    out.push(encodeURIComponent(value));
  } catch { /* lone surrogate: nothing to add */ }
  try {
    out.push(decodeURIComponent(value));
  } catch { /* not percent-encoded */ }
  return out;
}

/** Builds the redactor for one server's configuration. */
export function redactorFor(config: McpServerConfig): Redactor {
  const secrets = new Set<string>();
  const add = (value: string | undefined) => {
    if (!value) return;
    for (const v of variants(value)) if (v.length >= MIN_SECRET) secrets.add(v);
    // "Bearer abc…": the token alone may be quoted back without its scheme.
    for (const part of value.split(/\s+/)) {
      if (part.length >= 6 && part !== value) { for (const v of variants(part)) secrets.add(v); }
    }
  };
  let url: string | undefined;
  const whole: string[] = [];
  if ("command" in config) {
    for (const v of Object.values(config.env ?? {})) add(v);
  } else {
    for (const v of Object.values(config.headers ?? {})) add(v);
    url = displayUrl(config.url);
    whole.push(config.url);
    try {
      const u = new URL(config.url);
      whole.push(u.href);
      add(u.username);
      add(u.password);
      for (const v of u.searchParams.values()) add(v);
    } catch { /* validated by parseMcpConfig; nothing to add */ }
  }
  // Longest first, so a secret that contains another is replaced whole.
  const list = [...secrets].sort((a, b) => b.length - a.length);
  const safeUrl = url;
  return {
    url,
    redact(text: string): string {
      let out = text;
      if (safeUrl) { for (const w of whole) out = out.split(w).join(safeUrl); }
      for (const s of list) out = out.split(s).join("***");
      return out;
    },
  };
}
