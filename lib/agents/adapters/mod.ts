/**
 * The stdout adapter of each provider (docs/ARCHITECTURE.md, "Event channel"): how to launch its CLI for one prompt
 * and how to turn its stdout lines into public agent events.
 *
 * @example
 * ```ts
 * import { adapterFor } from "./mod.ts";
 * const adapter = adapterFor("codex");
 * const { args } = adapter.launch("fix the failing test");
 * const parse = adapter.createParser();
 * parse('{"type":"thread.started","thread_id":"0199a213"}'); // [{ kind: "session", id: "0199a213" }]
 * ```
 * @module
 */

import { type Provider, type ProviderAdapter, PROVIDERS } from "../types.ts";
import { claudeAdapter } from "./claude.ts";
import { codexAdapter } from "./codex.ts";
import { geminiAdapter } from "./gemini.ts";
import { jsonlAdapter } from "./jsonl.ts";
import { opencodeAdapter } from "./opencode.ts";

export const ADAPTERS: Readonly<Record<Provider, ProviderAdapter>> = Object.freeze({
  claude: claudeAdapter,
  codex: codexAdapter,
  gemini: geminiAdapter,
  opencode: opencodeAdapter,
  jsonl: jsonlAdapter,
});

/** The adapter of `provider`; throws a clear error for a name that is not a provider. */
export function adapterFor(provider: Provider): ProviderAdapter {
  if (!Object.hasOwn(ADAPTERS, provider)) {
    throw new Error(`unknown agent provider "${provider}" (known: ${PROVIDERS.join(", ")})`);
  }
  return ADAPTERS[provider];
}

export { classifyError } from "./common.ts";
export { claudeAdapter, codexAdapter, geminiAdapter, jsonlAdapter, opencodeAdapter };
