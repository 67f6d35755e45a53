/**
 * Turns a sequence's token pieces (raw bytes, which may end mid-character) into text that is safe
 * to emit: UTF-8 is decoded in streaming mode so a character split across tokens is held until it
 * is whole, and stop strings are matched on the decoded text so they are never split or leaked.
 *
 * @example
 * ```ts
 * import { endText, newTextStream, pushPiece } from "./text_stream.ts";
 * const t = newTextStream(["\n"]);
 * pushPiece(t, new Uint8Array([0xf0, 0x9f])); // { emit: "", stopped: false }
 * pushPiece(t, new Uint8Array([0xa6, 0x99])); // { emit: "🦙", stopped: false }
 * endText(t); // ""
 * ```
 * @module
 */
import { flushText, newStopMatcher, type Pushed, pushText, type StopMatcher } from "./stop.ts";

export type TextStream = { utf8: TextDecoder; stop: StopMatcher };

export function newTextStream(stops: string[]): TextStream {
  return { utf8: new TextDecoder("utf-8"), stop: newStopMatcher(stops) };
}

export function pushPiece(t: TextStream, piece: Uint8Array): Pushed {
  return pushText(t.stop, t.utf8.decode(piece, { stream: true }));
}

/** Everything still held when generation ends for a reason other than a stop string. */
export function endText(t: TextStream): string {
  const { emit } = pushText(t.stop, t.utf8.decode());
  return emit + flushText(t.stop);
}
