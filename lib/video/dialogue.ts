/**
 * Spoken dialogue for audio-capable models: the prompt's quoted lines (straight "…", curly “…”,
 * „…“, «…», and ‘…’ when the marks stand at word edges so apostrophes are not mistaken for
 * quotes), synthesised with espeak-ng into a WAV the renderer mixes over its tone bed. The text
 * goes to espeak-ng as one argv element after `--`, never through a shell. Speech is an
 * embellishment: a missing or failing espeak-ng means no dialogue, never a failed render.
 *
 * @example
 * ```ts
 * import { extractDialogue, synthesizeDialogue } from "./dialogue.ts";
 * const lines = extractDialogue('A man says "Hello there." and she replies “Hi!”');
 * // ["Hello there.", "Hi!"]
 * const ok = await synthesizeDialogue(lines, "/tmp/d.wav", { espeak: "/usr/bin/espeak-ng", seconds: 4 });
 * ```
 * @module
 */

// One alternation so matches come out in prompt order and never overlap; `""` is consumed as an
// empty pair so a later lone mark cannot pair with its closing half.
const QUOTED =
  /"([^"]*)"|“([^”]+)”|„([^“”]+)[“”]|«([^»]+)»|(?<![\p{L}\p{N}])‘(.+?)’(?![\p{L}\p{N}])/gu;

/** Longest text handed to espeak-ng: a clip is at most a few seconds long. */
export const MAX_DIALOGUE_CHARS = 400;

/** The quoted lines of a prompt, in order, trimmed, whitespace collapsed, empty ones dropped. */
export function extractDialogue(prompt: string): string[] {
  const lines: string[] = [];
  for (const m of prompt.matchAll(QUOTED)) {
    const text = (m.slice(1).find((g) => g !== undefined) ?? "").replace(/\s+/g, " ").trim();
    if (/[\p{L}\p{N}]/u.test(text)) lines.push(text);
  }
  return lines;
}

/** The lines as one utterance: each ends in punctuation so espeak-ng pauses between them. */
export function dialogueScript(lines: string[]): string {
  const script = lines.map((l) => /[.!?…,;:]$/.test(l) ? l : `${l}.`).join(" ");
  if (script.length <= MAX_DIALOGUE_CHARS) return script;
  const cut = script.slice(0, MAX_DIALOGUE_CHARS);
  const space = cut.lastIndexOf(" ");
  return `${space > MAX_DIALOGUE_CHARS / 2 ? cut.slice(0, space) : cut}.`;
}

/** espeak-ng's default speed, words per minute. */
const BASE_WPM = 165;

/**
 * Words per minute so the script fits in `seconds` (less the lead-in and a tail), never slower
 * than the default and never faster than espeak-ng stays intelligible.
 */
export function speechRate(script: string, seconds: number): number {
  const words = script.split(/\s+/).filter(Boolean).length;
  const available = Math.max(0.5, seconds - 1);
  // espeak-ng's pauses at punctuation cost about 15% more than the nominal rate.
  const needed = (words / available) * 60 * 1.15;
  return Math.round(Math.min(320, Math.max(BASE_WPM, needed)));
}

/**
 * Synthesises `lines` into `outWav`. Returns false (and says why through `log`) when there is
 * nothing to say or espeak-ng fails; throws only when `signal` aborts.
 */
export async function synthesizeDialogue(
  lines: string[],
  outWav: string,
  opts: {
    espeak: string;
    seconds: number;
    seed?: number;
    signal?: AbortSignal;
    log?: (line: string) => void;
  },
): Promise<boolean> {
  if (lines.length === 0) return false;
  const script = dialogueScript(lines);
  // A seeded pitch so different clips do not all share one voice.
  const pitch = 35 + Math.abs(Math.trunc(opts.seed ?? 0)) % 30;
  const args = [
    "-w",
    outWav,
    "-s",
    String(speechRate(script, opts.seconds)),
    "-p",
    String(pitch),
    "--",
    script,
  ];
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(opts.espeak, {
      args,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
      signal: opts.signal,
    }).output();
  } catch (e) {
    if (opts.signal?.aborted) throw opts.signal.reason;
    opts.log?.(`video: espeak-ng could not run (${(e as Error).message}); no dialogue`);
    return false;
  }
  if (opts.signal?.aborted) throw opts.signal.reason;
  const size = await Deno.stat(outWav).then((s) => s.size, () => 0);
  // espeak-ng exits 0 even when it wrote nothing (e.g. an unknown voice), so check the file.
  if (!out.success || size <= 44) {
    const err = new TextDecoder().decode(out.stderr).trim().slice(-300);
    opts.log?.(`video: espeak-ng produced no speech (${err || `exit ${out.code}`}); no dialogue`);
    return false;
  }
  return true;
}
