// Every tool of the real corpus (tests/fixtures/tools/), forced in each family that writes its
// arguments as JSON, with the family's real template from llama.cpp's bundle: seeded calls drawn
// from the call grammar, accepted by llama.cpp's matcher, read back by the parser, valid under
// the whole schema (ajv, the schema's own draft), and written the same way by the template.
import { corpusCallTests } from "./support/corpus_calls.ts";

await corpusCallTests({ label: "Llama 3.1", file: "meta-llama-Llama-3.1-8B-Instruct.jinja" });
await corpusCallTests({
  label: "Hermes 3",
  file: "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
});
await corpusCallTests({
  label: "Mistral Nemo",
  file: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
});
await corpusCallTests({ label: "DeepSeek V3.1", file: "deepseek-ai-DeepSeek-V3.1.jinja" });
await corpusCallTests({ label: "Devstral", file: "unsloth-mistral-Devstral-Small-2507.jinja" });
await corpusCallTests({
  label: "Mistral Small 3.2",
  file: "Mistral-Small-3.2-24B-Instruct-2506.jinja",
});
await corpusCallTests({ label: "gpt-oss", file: "openai-gpt-oss-120b.jinja" });
await corpusCallTests({ label: "Kimi-K2", file: "Kimi-K2-Instruct.jinja" });
await corpusCallTests({ label: "generic", file: "google-gemma-2-2b-it.jinja", noRender: true });
