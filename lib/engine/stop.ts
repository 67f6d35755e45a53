/**
 * Stop-string matching over streamed text: text that might be the start of a stop string is held
 * back until it is known not to be, so a stop string is never split across two emitted chunks
 * and never leaks into the output.
 *
 * @example
 * ```ts
 * import { newStopMatcher, pushText } from "./stop.ts";
 * const m = newStopMatcher(["\n\n"]);
 * pushText(m, "Hello\n"); // { emit: "Hello", stopped: false }
 * pushText(m, "\nmore");  // { emit: "", stopped: true }
 * ```
 * @module
 */

export type StopMatcher = { stops: string[]; held: string };

export function newStopMatcher(stops: string[]): StopMatcher {
  return { stops: stops.filter((s) => s.length > 0), held: "" };
}

export type Pushed = { emit: string; stopped: boolean; stop?: string };

/**
 * Adds text; returns what is safe to emit, whether a stop string was hit and which one (the
 * earliest; of two starting together, the shorter).
 */
export function pushText(m: StopMatcher, text: string): Pushed {
  if (m.stops.length === 0) return { emit: text, stopped: false };
  const buf = m.held + text;
  let cut = -1;
  let hit = "";
  for (const s of m.stops) {
    const i = buf.indexOf(s);
    if (i >= 0 && (cut < 0 || i < cut || (i === cut && s.length < hit.length))) {
      cut = i;
      hit = s;
    }
  }
  if (cut >= 0) {
    m.held = "";
    return { emit: buf.slice(0, cut), stopped: true, stop: hit };
  }
  const keep = heldSuffix(buf, m.stops);
  m.held = buf.slice(buf.length - keep);
  return { emit: buf.slice(0, buf.length - keep), stopped: false };
}

/** Whatever is still held back, released when generation ends for another reason. */
export function flushText(m: StopMatcher): string {
  const rest = m.held;
  m.held = "";
  return rest;
}

// Length of the longest suffix of `buf` that is a proper prefix of some stop string.
function heldSuffix(buf: string, stops: string[]): number {
  let best = 0;
  for (const s of stops) {
    for (let n = Math.min(s.length - 1, buf.length); n > best; n--) {
      if (buf.endsWith(s.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}
