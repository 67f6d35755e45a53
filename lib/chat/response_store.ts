/**
 * Stored responses for the Responses API (`store: true`, the default): each response is one JSON
 * file under `<data-dir>/responses/`, holding the response object and the thread's input items,
 * so `GET /v1/responses/{id}` returns it and `previous_response_id` continues the thread after a
 * restart too. Files are written to a temporary name and renamed, so a crash never leaves half a
 * record behind. Responses are kept 30 days, as OpenAI keeps them: older files are swept at start
 * and every few hundred writes.
 *
 * @example
 * ```ts
 * import { createResponseStore } from "./response_store.ts";
 * const store = createResponseStore("/home/me/.cache/hearth/responses");
 * await store.put({ response: { id: "resp_1", object: "response" }, items: [] });
 * (await store.get("resp_1"))?.response.object; // "response"
 * ```
 * @module
 */
import type { ResponseItem } from "./responses.ts";

export type StoredResponse = {
  response: Record<string, unknown> & { id: string };
  /** The thread's input items up to this response (its own output not included). */
  items: ResponseItem[];
};

export type ResponseStore = {
  put(r: StoredResponse): Promise<void>;
  get(id: string): Promise<StoredResponse | undefined>;
  delete(id: string): Promise<boolean>;
};

// Ids become file names: only what this server mints (or a look-alike) is ever a path.
const ID = /^resp_[A-Za-z0-9]{1,64}$/;

/** How long a stored response is kept. */
export const RETENTION_MS = 30 * 24 * 3600 * 1000;
const SWEEP_EVERY = 256;

/** Removes stored responses (and stray temporary files) older than `maxAgeMs`; returns how many. */
export async function sweepResponses(
  dir: string,
  maxAgeMs = RETENTION_MS,
  now = Date.now(),
): Promise<number> {
  let removed = 0;
  try {
    for await (const e of Deno.readDir(dir)) {
      if (!e.isFile || !/^resp_.*\.(json|tmp)$/.test(e.name)) continue;
      const path = `${dir}/${e.name}`;
      const st = await Deno.stat(path).catch(() => undefined);
      if (st?.mtime && now - st.mtime.getTime() > maxAgeMs) {
        await Deno.remove(path).then(() => removed++, () => {});
      }
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return removed;
}

export function createResponseStore(dir: string, maxAgeMs = RETENTION_MS): ResponseStore {
  const ready = Deno.mkdir(dir, { recursive: true }).then(() => sweepResponses(dir, maxAgeMs));
  const file = (id: string) => `${dir}/${id}.json`;
  let writes = 0;
  return {
    async put(r) {
      await ready;
      if (++writes % SWEEP_EVERY === 0) void sweepResponses(dir, maxAgeMs).catch(() => {});
      if (!ID.test(r.response.id)) throw new Error(`bad response id ${r.response.id}`);
      const tmp = `${file(r.response.id)}.${crypto.randomUUID()}.tmp`;
      await Deno.writeTextFile(tmp, JSON.stringify(r));
      await Deno.rename(tmp, file(r.response.id));
    },
    async get(id) {
      if (!ID.test(id)) return undefined;
      await ready;
      try {
        return JSON.parse(await Deno.readTextFile(file(id))) as StoredResponse;
      } catch (e) {
        if (e instanceof Deno.errors.NotFound) return undefined;
        throw e;
      }
    },
    async delete(id) {
      if (!ID.test(id)) return false;
      await ready;
      try {
        await Deno.remove(file(id));
        return true;
      } catch (e) {
        if (e instanceof Deno.errors.NotFound) return false;
        throw e;
      }
    },
  };
}
