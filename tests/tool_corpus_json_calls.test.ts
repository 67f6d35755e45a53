// Every tool of the real corpus (tests/fixtures/tools/), forced in each family that writes its
// arguments as JSON, with the family's real template from llama.cpp's bundle: seeded calls drawn
// from the call grammar, accepted by llama.cpp's matcher, read back by the parser, valid under
// the whole schema (ajv, the schema's own draft), and written the same way by the template.
import { corpusAutoTests, corpusCallTests } from "./support/corpus_calls.ts";

const both = async (f: Parameters<typeof corpusCallTests>[0]) => {
  await corpusCallTests(f);
  await corpusAutoTests(f);
};

await both({ label: "Llama 3.1", file: "meta-llama-Llama-3.1-8B-Instruct.jinja" });
await both({
  label: "Hermes 3",
  file: "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
});
await both({
  label: "Mistral Nemo",
  file: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
});
await both({ label: "DeepSeek V3.1", file: "deepseek-ai-DeepSeek-V3.1.jinja" });
await both({ label: "Devstral", file: "unsloth-mistral-Devstral-Small-2507.jinja" });
await both({
  label: "Mistral Small 3.2",
  file: "Mistral-Small-3.2-24B-Instruct-2506.jinja",
});
await both({ label: "gpt-oss", file: "openai-gpt-oss-120b.jinja" });
await both({ label: "Kimi-K2", file: "Kimi-K2-Instruct.jinja" });
await both({ label: "generic", file: "google-gemma-2-2b-it.jinja", noRender: true });
