/**
 * What the HTTP layer may know about the running engine: the served model's id and limits, the
 * scheduler once loading has finished, and the chat template. Routes read it; `main.ts` fills it.
 *
 * @example
 * ```ts
 * import { newServerState } from "./state.ts";
 * const state = newServerState("hearth-demo");
 * state.engine; // undefined until the model is loaded (health answers 503)
 * ```
 * @module
 */
import type { CompiledTemplate } from "../chat/template.ts";
import type { Scheduler } from "./scheduler.ts";

export type ServerState = {
  modelId: string;
  created: number;
  engine?: Scheduler;
  template?: CompiledTemplate;
  /** Set when loading failed; health reports it. */
  loadError?: string;
  apiKey?: string;
};

export function newServerState(modelId: string, apiKey?: string): ServerState {
  return { modelId, created: Math.floor(Date.now() / 1000), apiKey };
}
