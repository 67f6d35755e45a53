/**
 * The Hono app over the tiny model, in this test process (one per process, loaded lazily), for
 * route tests that need no separate server process.
 *
 * @example
 * ```ts
 * import { inProcessApp } from "./app.ts";
 * const app = await inProcessApp();
 * await app.request("/health");
 * ```
 * @module
 */
import type { Hono } from "hono";
import { compileTemplate } from "../../lib/chat/template.ts";
import { loadEngineModel } from "../../lib/engine/model.ts";
import { startWorkerEngine } from "../../lib/engine/worker_host.ts";
import { newServerState, type ServerState } from "../../routes/state.ts";
import { createApp } from "../../routes/app.ts";
import { tinyModelPath } from "./models.ts";

let shared: Promise<{ app: Hono; state: ServerState }> | undefined;

async function build(): Promise<{ app: Hono; state: ServerState }> {
  const model = await loadEngineModel({
    path: await tinyModelPath(),
    maxBatch: 4,
    maxSeqLen: 2048,
    threads: 1,
  });
  const state = newServerState("hearth-tiny");
  // One thread: spinning ggml threads on a busy 2-core machine stall each other.
  state.threads = 1;
  state.engine = await startWorkerEngine(model);
  if (model.info.chatTemplate) state.template = compileTemplate(model.info.chatTemplate);
  return { app: createApp(state), state };
}

export async function inProcessApp(): Promise<Hono> {
  shared ??= build();
  return (await shared).app;
}

export async function inProcessState(): Promise<ServerState> {
  shared ??= build();
  return (await shared).state;
}
