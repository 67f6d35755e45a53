/**
 * Flags of `make-model`: `--preset tiny|small --out PATH [--embedding] [--dtype f32|f16|q8_0]
 * [--seed N] [--chat-format llama3|hermes|mistral|qwen3-coder] [--reply-length N] [--mtp-layers 1]
 * [--context-length N] [--arch llama|gemma2|lfm2] [--sliding-window N]`,
 * validated with Zod like the serve flags.
 *
 * @example
 * ```ts
 * import { parseMakeModelArgs } from "./make_model_args.ts";
 * parseMakeModelArgs(["--preset", "tiny", "--out", "t.gguf"]); // { ok: true, options: {...} }
 * ```
 * @module
 */
import { z } from "zod";
import { CHAT_FORMATS } from "../gguf/make_model_formats.ts";
import { ARCH_VARIANTS } from "../gguf/arch_variants.ts";

const schema = z.strictObject({
  preset: z.enum(["tiny", "small", "1b"], "--preset must be tiny, small or 1b"),
  out: z.string("--out PATH is required").min(1, "--out must not be empty"),
  embedding: z.boolean().optional(),
  dtype: z.enum(["f32", "f16", "q8_0"], "--dtype must be f32, f16 or q8_0").optional(),
  seed: z.string().regex(/^\d+$/, "--seed must be a non-negative integer").transform(Number)
    .optional(),
  chatFormat: z.enum(CHAT_FORMATS, `--chat-format must be ${CHAT_FORMATS.join(", ")}`).optional(),
  replyLength: z.string().regex(/^\d+$/, "--reply-length must be a whole number of tokens")
    .transform(Number).refine((n) => n >= 2 && n <= 100000, "--reply-length must be 2..100000")
    .optional(),
  mtpLayers: z.string().regex(/^1$/, "--mtp-layers must be 1 (one MTP head)").transform(Number)
    .optional(),
  contextLength: z.string().regex(/^\d+$/, "--context-length must be a whole number of tokens")
    .transform(Number).refine((n) => n >= 16 && n < 2 ** 32, "--context-length must be 16..2^32-1")
    .optional(),
  arch: z.enum(["llama", ...ARCH_VARIANTS], `--arch must be llama, ${ARCH_VARIANTS.join(", ")}`)
    .optional(),
  slidingWindow: z.string().regex(/^\d+$/, "--sliding-window must be a whole number of tokens")
    .transform(Number).refine((n) => n >= 1 && n < 2 ** 32, "--sliding-window must be 1..2^32-1")
    .optional(),
});

export type MakeModelOptions = z.output<typeof schema>;

export function parseMakeModelArgs(
  argv: string[],
): { ok: true; options: MakeModelOptions } | { ok: false; message: string } {
  const raw: Record<string, string | boolean> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [name, inline] = arg.startsWith("--") && arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg, undefined];
    const flag = name.replace(/^--/, "");
    const camel: Record<string, string> = {
      "chat-format": "chatFormat",
      "reply-length": "replyLength",
      "mtp-layers": "mtpLayers",
      "context-length": "contextLength",
      "sliding-window": "slidingWindow",
    };
    const key = camel[flag] ?? flag;
    if (
      ![
        "preset",
        "out",
        "embedding",
        "dtype",
        "seed",
        "chatFormat",
        "replyLength",
        "mtpLayers",
        "contextLength",
        "arch",
        "slidingWindow",
      ]
        .includes(key) ||
      !name.startsWith("--") || Object.values(camel).includes(flag)
    ) {
      return { ok: false, message: `make-model: unknown argument ${name}` };
    }
    if (key === "embedding") {
      raw.embedding = true;
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined) return { ok: false, message: `make-model: ${name} needs a value` };
    raw[key] = value;
  }
  const r = schema.safeParse(raw);
  if (!r.success) return { ok: false, message: `make-model: ${r.error.issues[0].message}` };
  if (r.data.slidingWindow !== undefined && (r.data.arch ?? "llama") === "llama") {
    return { ok: false, message: "make-model: --sliding-window needs --arch gemma2 or lfm2" };
  }
  return { ok: true, options: r.data };
}
