/**
 * `HEARTH_CHAT_LOGGER=1`: each request and its reply as one JSON line in
 * `<data-dir>/logs/chat-YYYY-MM-DD.jsonl`. Writes are chained so lines never interleave, and a
 * failing disk never fails the request that is being logged.
 *
 * @example
 * ```ts
 * import { createChatLogger } from "./logger.ts";
 * const log = createChatLogger("/home/me/.cache/hearth/logs");
 * log({ route: "/v1/completions", request: { prompt: "Hi" }, response: { text: "Hello" } });
 * await log.flush();
 * ```
 * @module
 */

export type ChatLogEntry = {
  route: string;
  request: unknown;
  response?: unknown;
  status?: number;
  error?: string;
};

export type ChatLogger = ((entry: ChatLogEntry) => void) & { flush(): Promise<void> };

export function createChatLogger(dir: string, now: () => Date = () => new Date()): ChatLogger {
  let chain: Promise<void> = Deno.mkdir(dir, { recursive: true }).catch(() => {});
  const log = (entry: ChatLogEntry) => {
    const t = now();
    const line = JSON.stringify({ time: t.toISOString(), ...entry }) + "\n";
    const file = `${dir}/chat-${t.toISOString().slice(0, 10)}.jsonl`;
    chain = chain.then(() => Deno.writeTextFile(file, line, { append: true })).catch((e) => {
      console.error(`hearth: chat logger could not write ${file}: ${(e as Error).message}`);
    });
  };
  return Object.assign(log, { flush: () => chain });
}
