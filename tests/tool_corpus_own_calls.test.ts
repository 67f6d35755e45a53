// Every tool of the real corpus (tests/fixtures/tools/), forced in each family with a syntax of
// its own (Gemma 4's `<|"|>` notation, XML parameters, key/value tags, DSML, XTML, MiniMax-M3
// elements), with the family's real template from llama.cpp's bundle: seeded calls drawn from
// the call grammar, accepted by llama.cpp's matcher, read back by the parser, valid under the
// whole schema (ajv, the schema's own draft), and written the same way by the template: Gemma's
// whole call, and every string argument written raw where the template writes it raw.
import { corpusCallTests } from "./support/corpus_calls.ts";

const NS = "]<]minimax[>[";
const DSML = "｜DSML｜";

await corpusCallTests({ label: "Gemma 4", file: "google-gemma-4-31B-it.jinja", exact: true });
await corpusCallTests({
  label: "Qwen3-Coder",
  file: "Qwen3-Coder.jinja",
  rawArg: (k, v) => `<parameter=${k}>\n${v}\n</parameter>`,
});
await corpusCallTests({
  label: "GLM-4.6",
  file: "GLM-4.6.jinja",
  rawArg: (_k, v) => `<arg_value>${v}</arg_value>`,
});
await corpusCallTests({
  label: "MiniMax-M2",
  file: "MiniMax-M2.jinja",
  rawArg: (k, v) => `<parameter name="${k}">${v}</parameter>`,
});
for (
  const [label, file] of [
    ["DeepSeek V3.2", "deepseek-ai-DeepSeek-V3.2.jinja"],
    ["DeepSeek V4", "deepseek-ai-DeepSeek-V4.jinja"],
  ]
) {
  await corpusCallTests({
    label,
    file,
    rawArg: (k, v) => `<${DSML}parameter name="${k}" string="true">${v}</${DSML}parameter>`,
  });
}
await corpusCallTests({
  label: "Kimi-K3",
  file: "Kimi-K3.jinja",
  rawArg: (k, v) => `<|open|>argument key="${k}" type="string"<|sep|>${v}<|close|>argument<|sep|>`,
});
await corpusCallTests({
  label: "MiniMax-M3",
  file: "MiniMax-M3.jinja",
  rawArg: (k, v) => `${NS}<${k}>${v}${NS}</${k}>`,
});
