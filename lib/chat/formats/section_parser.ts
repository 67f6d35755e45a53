/**
 * The streaming machinery every family's output parser shares: plain text flows out as it
 * arrives, except a possible partial call marker (held until the next chunk decides), and once a
 * marker is seen the text is held as a call section until the family's `parse` says it is
 * complete (then it becomes `tool_call_*` events), or that it is not a call (then the marker is
 * text after all and scanning resumes after it). A section still incomplete when the output ends
 * comes back as text, so nothing the model wrote is lost. Whitespace right around a call is
 * layout and is dropped.
 *
 * @example
 * ```ts
 * import { newSectionParser } from "./section_parser.ts";
 * const p = newSectionParser({
 *   markers: ["<call>"],
 *   closers: ">",
 *   parse: (s) => {
 *     const end = s.indexOf("</call>");
 *     if (end < 0) return { kind: "more" };
 *     return { kind: "ok", length: end + 7, calls: [{ name: s.slice(6, end), arguments: "{}" }] };
 *   },
 * });
 * p.push("Hi <ca"); // [{ type: "text", text: "Hi" }]
 * p.push("ll>f</call>"); // tool_call_start, tool_call_args, tool_call_end for "f"
 * ```
 * @module
 */
import { newCallId, type ReplyEvent } from "../conversation.ts";
import { partialMarkerLength } from "../reasoning.ts";
import type { OutputParser } from "./types.ts";

/** One parsed call; `arguments` is compact JSON text of an object. */
export type ParsedCall = { name: string; arguments: string; id?: string };

export type SectionResult =
  /** Not complete yet; `recheck`: parse again on the next chunk even without a closer in it. */
  | { kind: "more"; recheck?: boolean }
  /** Not a call section: the opening marker is plain text. */
  | { kind: "bad" }
  /** `length` characters of the section (from its marker) make these calls. */
  | { kind: "ok"; calls: ParsedCall[]; length: number };

export type SectionSpec = {
  /** Markers that open a call section anywhere in the output. */
  markers: string[];
  /** A marker that opens a call section only at the very start of the output (after blanks). */
  startMarker?: string;
  /**
   * Characters that can complete a section; `parse` only runs again when new text has one, so a
   * long section is not re-parsed for every chunk.
   */
  closers: string;
  /** `section` starts with the marker; `final`: no more text will come. */
  parse(section: string, final: boolean): SectionResult;
};

const TRAILING_WS = /[ \t\r\n]+$/;
const LEADING_WS = /^[ \t\r\n]+/;

export function newSectionParser(spec: SectionSpec): OutputParser {
  let buf = "";
  let inSection = false;
  let markerLength = 0;
  let mustParse = true;
  let pendingWs = ""; // trailing whitespace of emitted text: dropped if a call follows
  let wsBefore = ""; // the whitespace before the current section, given back if it is no call
  let afterCall = false; // leading whitespace after a call is dropped
  let atStart = true; // nothing but whitespace seen so far
  let nCalls = 0;

  function step(out: ReplyEvent[], final: boolean): void {
    const text = (s: string) => {
      if (afterCall) {
        s = s.replace(LEADING_WS, "");
        if (!s) return;
        afterCall = false;
      }
      const all = pendingWs + s;
      const body = all.replace(TRAILING_WS, "");
      pendingWs = all.slice(body.length);
      if (!body) return;
      atStart = false;
      const last = out[out.length - 1];
      if (last?.type === "text") last.text += body;
      else out.push({ type: "text", text: body });
    };
    for (;;) {
      if (inSection) {
        if (!mustParse && !final) return;
        const r = spec.parse(buf, final);
        mustParse = false;
        if (r.kind === "more") {
          mustParse = r.recheck === true;
          if (!final) return;
          text(wsBefore + buf);
          buf = "";
          inSection = false;
          continue;
        }
        inSection = false;
        if (r.kind === "bad") {
          text(wsBefore + buf.slice(0, markerLength));
          atStart = false;
          buf = buf.slice(markerLength);
          continue;
        }
        pendingWs = "";
        atStart = false;
        for (const c of r.calls) {
          const index = nCalls++;
          out.push({ type: "tool_call_start", index, id: c.id ?? newCallId(), name: c.name });
          out.push({ type: "tool_call_args", index, text: c.arguments });
          out.push({ type: "tool_call_end", index, arguments: c.arguments });
        }
        afterCall = true;
        buf = buf.slice(r.length);
        continue;
      }
      // Text: find the earliest marker.
      let at = -1;
      let len = 0;
      for (const m of spec.markers) {
        const i = buf.indexOf(m);
        if (i >= 0 && (at < 0 || i < at)) at = i, len = m.length;
      }
      if (spec.startMarker && atStart) {
        const lead = buf.length - buf.replace(LEADING_WS, "").length;
        if (buf.startsWith(spec.startMarker, lead) && (at < 0 || lead < at)) {
          at = lead, len = spec.startMarker.length;
        } else if (lead === buf.length && !final) {
          // Only blanks so far: the start marker may still come.
          return;
        }
      }
      if (at >= 0) {
        text(buf.slice(0, at));
        // Layout before a call is dropped, but only once the call is sure.
        wsBefore = pendingWs;
        pendingWs = "";
        buf = buf.slice(at);
        inSection = true;
        markerLength = len;
        mustParse = true;
        continue;
      }
      if (final) {
        text(buf);
        buf = "";
        if (pendingWs && !afterCall) {
          const last = out[out.length - 1];
          if (last?.type === "text") last.text += pendingWs;
          else out.push({ type: "text", text: pendingWs });
        }
        pendingWs = "";
        return;
      }
      const hold = Math.max(0, ...spec.markers.map((m) => partialMarkerLength(buf, m)));
      text(buf.slice(0, buf.length - hold));
      buf = buf.slice(buf.length - hold);
      return;
    }
  }

  return {
    push(chunk) {
      const out: ReplyEvent[] = [];
      if (!chunk) return out;
      buf += chunk;
      if (inSection && [...spec.closers].some((c) => chunk.includes(c))) mustParse = true;
      step(out, false);
      return out;
    },
    end() {
      const out: ReplyEvent[] = [];
      step(out, true);
      return out;
    },
  };
}

/**
 * A read position in a call section, for parsers that walk it literal by literal (the
 * `<invoke name="...">` families): `expect` consumes a literal, or says the text ends inside it;
 * `cut` ends the section where the text stops (a final cut keeps the calls written so far, and
 * the cut one).
 */
export type SectionCursor = {
  pos: number;
  calls: ParsedCall[];
  skipWs(): void;
  /** Literal `l` at `pos`: true (consumed), "more" (the text ends inside it) or false. */
  expect(l: string): boolean | "more";
  cut(last?: ParsedCall): SectionResult;
};

export function sectionCursor(s: string, pos: number, final: boolean): SectionCursor {
  const c: SectionCursor = {
    pos,
    calls: [],
    skipWs() {
      while (c.pos < s.length && " \t\r\n".includes(s[c.pos])) c.pos++;
    },
    expect(l) {
      if (s.startsWith(l, c.pos)) return (c.pos += l.length), true;
      return l.startsWith(s.slice(c.pos)) ? "more" : false;
    },
    cut(last) {
      if (!final) return { kind: "more" };
      if (last) c.calls.push(last);
      return c.calls.length ? { kind: "ok", calls: c.calls, length: s.length } : { kind: "more" };
    },
  };
  return c;
}
