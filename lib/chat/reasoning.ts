/**
 * Splits a model's streamed output into reasoning (between the family's think markers, e.g.
 * `<think>` and `</think>`) and answer text. Chunks may end anywhere, also inside a marker: a
 * possible partial marker is held back until the next chunk shows what it is, so marker text never
 * leaks into either stream. Whitespace right inside the markers and right after the closing one
 * is dropped (the templates put newlines there; they are layout, not content).
 *
 * @example
 * ```ts
 * import { newReasoningSplitter } from "./reasoning.ts";
 * const s = newReasoningSplitter({ start: "<think>", end: "</think>", open: false });
 * s.push("<think>\nhmm</th"); // [{ type: "reasoning", text: "hmm" }]
 * s.push("ink>\n\nHello");     // [{ type: "text", text: "Hello" }]
 * s.end();                      // []
 * ```
 * @module
 */
import { charClass, charSet, literal } from "../constrain/gbnf.ts";

/** The markers around reasoning in a family's output. */
export type ReasoningMarkers = { start: string; end: string };

export type ReasoningSegment = { type: "reasoning"; text: string } | { type: "text"; text: string };

export type ReasoningSplitter = {
  push(text: string): ReasoningSegment[];
  /** Everything still held back; call once when generation ends. */
  end(): ReasoningSegment[];
};

/** Length of the longest suffix of `text` that is a proper prefix of `marker`. */
export function partialMarkerLength(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}

/**
 * A streaming splitter. `open`: the prompt already opened a think block (its generation prompt
 * ends inside one), so the output starts as reasoning.
 */
export function newReasoningSplitter(o: ReasoningMarkers & { open: boolean }): ReasoningSplitter {
  let inside = o.open;
  // Text not yet classified: a possible partial marker, or whitespace that may turn out to be
  // layout around a marker.
  let held = "";
  // At the start of a segment (just after a marker, or at the very start of reasoning), leading
  // whitespace is dropped.
  let atSegmentStart = o.open;

  function step(final: boolean): ReasoningSegment[] {
    const out: ReasoningSegment[] = [];
    const emit = (type: "reasoning" | "text", text: string) => {
      if (!text) return;
      const last = out[out.length - 1];
      if (last?.type === type) last.text += text;
      else out.push({ type, text });
    };
    for (;;) {
      if (atSegmentStart) {
        const trimmed = held.replace(/^[ \t\r\n]+/, "");
        held = trimmed;
        if (held === "" && !final) return out;
        atSegmentStart = false;
      }
      const marker = inside ? o.end : o.start;
      const type = inside ? "reasoning" : "text";
      const at = held.indexOf(marker);
      if (at >= 0) {
        // Whitespace just before a marker is layout too.
        emit(type, held.slice(0, at).replace(/[ \t\r\n]+$/, inside ? "" : "$&"));
        held = held.slice(at + marker.length);
        inside = !inside;
        atSegmentStart = true;
        continue;
      }
      if (final) {
        emit(type, inside ? held.replace(/[ \t\r\n]+$/, "") : held);
        held = "";
        return out;
      }
      // Keep a possible partial marker, and inside reasoning also trailing whitespace (it is
      // dropped if the end marker follows).
      let keep = partialMarkerLength(held, marker);
      if (inside) {
        const body = held.slice(0, held.length - keep);
        const ws = body.length - body.replace(/[ \t\r\n]+$/, "").length;
        keep += ws;
      }
      emit(type, held.slice(0, held.length - keep));
      held = held.slice(held.length - keep);
      return out;
    }
  }

  return {
    push(text) {
      held += text;
      return step(false);
    },
    end() {
      return step(true);
    },
  };
}

/** Whether a rendered prompt ends inside an open think block (the output starts as reasoning). */
export function endsInsideReasoning(prompt: string, m: ReasoningMarkers): boolean {
  const open = prompt.lastIndexOf(m.start);
  return open >= 0 && prompt.indexOf(m.end, open + m.start.length) < 0;
}

/** How much reasoning a forced call may be preceded by when the reply starts inside reasoning. */
export const FORCED_REASONING_MAX_CHARS = 256;

/**
 * A call grammar (GBNF, `root ::= ...` first) for a reply that starts inside an open think block:
 * some reasoning (bounded, and without the first character of the end marker, so it cannot
 * write the marker or run on forever), the end marker, layout, then the call. Without this the
 * forced call would be written inside the reasoning and read as thoughts.
 */
export function grammarAfterReasoning(
  gbnf: string,
  m: ReasoningMarkers,
  maxChars = FORCED_REASONING_MAX_CHARS,
): string {
  const nl = gbnf.indexOf("\n");
  const first = nl < 0 ? gbnf : gbnf.slice(0, nl);
  const rest = nl < 0 ? "" : gbnf.slice(nl + 1);
  if (!first.startsWith("root ::= ")) throw new Error("grammar does not start with its root");
  let base = "reasoning-before-call";
  while (new RegExp(`^${base}(-call)? ::=`, "m").test(gbnf)) base += "-x";
  const stop = [...m.end][0];
  const thought = `${charClass(charSet(stop), true)}{0,${maxChars}}`;
  return `root ::= ${base} ${literal(m.end)} [ \\t\\n]{0,4} ${base}-call\n` +
    `${base} ::= ${thought}\n` +
    `${base}-call ::= ${first.slice("root ::= ".length)}\n${rest}`;
}
