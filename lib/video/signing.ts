/**
 * Signed, expiring media URLs. A download request carries the caller's API key; it is answered
 * with a redirect to `/v1beta/media/{id}.mp4?exp=..&sig=..`, which serves the bytes without a key
 * (so players, `<video>` tags and `curl -L` work) for a few minutes. The signature is HMAC-SHA256
 * over `{id}.{exp}` with a 256-bit secret created once under the data dir (mode 0600), so URLs
 * stay valid across a restart and cannot be forged or extended by editing `exp`.
 *
 * @example
 * ```ts
 * import { loadSigningKey, mediaPath, verifyMedia } from "./signing.ts";
 * const key = await loadSigningKey("/data/video");
 * const path = await mediaPath(key, "abcdefghij12", Date.now() + 300_000);
 * const u = new URL(path, "http://x");
 * await verifyMedia(key, "abcdefghij12", u.searchParams.get("exp"), u.searchParams.get("sig"),
 *   Date.now()); // "ok"
 * ```
 * @module
 */

/** How long a signed media URL stays valid. */
export const MEDIA_URL_TTL_MS = 5 * 60_000;

const SECRET_FILE = "signing.key";
const enc = new TextEncoder();

/** Reads `<dir>/signing.key` (hex), creating it with a fresh random secret on first use. */
export async function loadSigningKey(dir: string): Promise<CryptoKey> {
  const path = `${dir}/${SECRET_FILE}`;
  let hex: string;
  try {
    hex = (await Deno.readTextFile(path)).trim();
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    hex = toHex(crypto.getRandomValues(new Uint8Array(32)));
    try {
      await Deno.writeTextFile(path, hex + "\n", { createNew: true, mode: 0o600 });
    } catch (e2) {
      // Another process created it between our read and write: use theirs.
      if (!(e2 instanceof Deno.errors.AlreadyExists)) throw e2;
      hex = (await Deno.readTextFile(path)).trim();
    }
  }
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    throw new Error(`${path} is not a 64-digit hex secret; delete it to make a new one`);
  }
  return await crypto.subtle.importKey(
    "raw",
    fromHex(hex),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

/** The path and query of a signed URL for file `id`, valid until `expiresAtMs`. */
export async function mediaPath(key: CryptoKey, id: string, expiresAtMs: number): Promise<string> {
  const exp = Math.floor(expiresAtMs / 1000);
  const sig = new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(`${id}.${exp}`)));
  return `/v1beta/media/${id}.mp4?exp=${exp}&sig=${toHex(sig)}`;
}

export type MediaCheck = "ok" | "expired" | "bad";

/** Checks a signed URL's `exp` and `sig` for file `id` at time `nowMs` (constant-time compare). */
export async function verifyMedia(
  key: CryptoKey,
  id: string,
  exp: string | null | undefined,
  sig: string | null | undefined,
  nowMs: number,
): Promise<MediaCheck> {
  if (!exp || !/^\d{1,12}$/.test(exp) || !sig || !/^[0-9a-f]{64}$/.test(sig)) return "bad";
  const valid = await crypto.subtle.verify(
    "HMAC",
    key,
    fromHex(sig),
    enc.encode(`${id}.${Number(exp)}`),
  );
  if (!valid) return "bad";
  return Number(exp) * 1000 < nowMs ? "expired" : "ok";
}

function toHex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
}
