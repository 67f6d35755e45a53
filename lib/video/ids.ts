/**
 * Ids of video operations and files: 12 characters of `[a-z0-9]` drawn from the platform's
 * cryptographic random source (62 bits), the shape the real service uses and the one the official
 * SDK's uri parsing (`files/([a-z0-9]+)`) expects. Rejection sampling keeps every character
 * equally likely.
 *
 * @example
 * ```ts
 * import { isVideoId, newVideoId } from "./ids.ts";
 * const id = newVideoId(); // e.g. "k3v9q0x7m2ab"
 * isVideoId(id); // true
 * ```
 * @module
 */

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";
export const ID_LENGTH = 12;
// 252 = 7 * 36: bytes at or above it would make the first 4 characters more likely.
const LIMIT = 252;

const ID_RE = /^[a-z0-9]{12}$/;

export function newVideoId(): string {
  let out = "";
  while (out.length < ID_LENGTH) {
    const bytes = crypto.getRandomValues(new Uint8Array(ID_LENGTH * 2));
    for (const b of bytes) {
      if (b >= LIMIT) continue;
      out += ALPHABET[b % ALPHABET.length];
      if (out.length === ID_LENGTH) break;
    }
  }
  return out;
}

export function isVideoId(s: string): boolean {
  return ID_RE.test(s);
}
