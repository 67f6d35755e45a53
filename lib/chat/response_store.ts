/**
 * Stored responses for the Responses API (`store: true`, the default): each response is one JSON
 * file under `<data-dir>/responses/`, holding the response object and the thread's input items,
 * so `GET /v1/responses/{id}` returns it and `previous_response_id` continues the thread after a
 * restart too. Files are written to a temporary name and renamed, so a crash never leaves half a
 * record behind.
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

export function createResponseStore(dir: string): ResponseStore {
  const ready = Deno.mkdir(dir, { recursive: true });
  const file = (id: string) => `${dir}/${id}.json`;
  return {
    async put(r) {
      await ready;
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
