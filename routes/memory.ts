/**
 * The memory endpoints (docs/ARCHITECTURE.md, "Goals, orchestration, memory") over the agent memory: list, search, read, write
 * and delete markdown notes. Bodies are strict JSON objects checked with Zod; every refusal is
 * `{"error": CODE, "message": "..."}` with its status (400 `BAD_REQUEST`, 404 `NOT_FOUND`, 409
 * `LIMIT`, 413 `TOO_LARGE`), the same shape as the session endpoints.
 *
 * - `GET /api/memory` -> `{notes}`
 * - `GET /api/memory/search?q=&limit=` -> `{query, hits}`
 * - `GET /api/memory/:name` -> the note with its text
 * - `PUT /api/memory/:name {text}` -> 201 created / 200 replaced, the note's info
 * - `DELETE /api/memory/:name` -> 204
 *
 * @example
 * ```ts
 * import { memoryRoutes } from "./memory.ts";
 * app.route("/", memoryRoutes(await createMemory({ dir: `${dataDir}/agents/memory`, bus })));
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import {
  MAX_NOTE_BYTES,
  MAX_SEARCH_LIMIT,
  type Memory,
  MemoryError,
  noteName,
} from "../lib/agents/memory.ts";
import { parseBody } from "./errors.ts";
import { apiError } from "./sessions.ts";
import { mountRoutes, type ParamContext, routesOf, SERVE_ROUTES } from "./table.ts";

// Size and NUL are the memory's rules (413 vs 400), so the schema checks only the shape.
const putSchema = z.strictObject({ text: z.string() });

/**
 * JSON escapes can make a body several times its text (`\u0001` is six bytes for one), so this
 * only stops bodies no valid note could be, before they are read whole.
 */
const MAX_BODY_BYTES = 8 * MAX_NOTE_BYTES;

/** Runs `f`, turning the memory's refusals into their HTTP error. */
async function guard(c: Context, f: () => Promise<Response> | Response): Promise<Response> {
  try {
    return await f();
  } catch (err) {
    if (err instanceof MemoryError) return apiError(c, err.status, err.code, err.message);
    throw err;
  }
}

/** The memory routes (routes/table.ts, group `memory`) on their own app. */
export function memoryRoutes(memory: Memory): Hono {
  const app = mountRoutes(new Hono(), routesOf(SERVE_ROUTES, "memory"), memoryHandlers(memory));
  // Used when this router serves requests itself (the app may mount it with its own handlers).
  app.notFound((c) => apiError(c, 404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    console.error(`hearth: ${c.req.method} ${c.req.path} failed:`, err);
    return apiError(c, 500, "INTERNAL", `internal error: ${err.message}`);
  });
  return app;
}

/**
 * The handlers of the `memory` rows of routes/table.ts. The table puts `search` before `:name`,
 * which would otherwise take "search" as a name (also reserved).
 */
export function memoryHandlers(memory: Memory) {
  const listNotes = (c: Context) => c.json({ notes: memory.list() });

  const searchNotes = (c: Context) =>
    guard(c, () => {
      const q = c.req.query("q");
      if (q === undefined || q.trim() === "") {
        return apiError(c, 400, "BAD_REQUEST", "q is required: the words to search for");
      }
      const raw = c.req.query("limit");
      let limit: number | undefined;
      if (raw !== undefined) {
        limit = /^\d{1,3}$/.test(raw) ? Number(raw) : NaN;
        if (!(limit >= 1 && limit <= MAX_SEARCH_LIMIT)) {
          return apiError(
            c,
            400,
            "BAD_REQUEST",
            `limit must be an integer from 1 to ${MAX_SEARCH_LIMIT}, got ${JSON.stringify(raw)}`,
          );
        }
      }
      return c.json({ query: q, hits: memory.search(q, limit) });
    });

  const getNote = (c: ParamContext<"name">) =>
    guard(c, () => c.json(memory.get(c.req.param("name"))));

  const noteBodyLimit = bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: (c) =>
      apiError(
        c,
        413,
        "TOO_LARGE",
        `request body is over ${MAX_BODY_BYTES} bytes; a note holds at most ${MAX_NOTE_BYTES}`,
      ),
  });

  const putNote = (c: ParamContext<"name">) =>
    guard(c, async () => {
      const name = noteName(c.req.param("name")); // a bad name is the first thing to report
      const b = await parseBody(
        c,
        putSchema,
        (status, message) => apiError(c, status, "BAD_REQUEST", message),
      );
      if (!b.ok) return b.response;
      const { note, created } = memory.put(name, b.data.text);
      return c.json(note, created ? 201 : 200);
    });

  const deleteNote = (c: ParamContext<"name">) =>
    guard(c, () => {
      memory.remove(c.req.param("name"));
      return c.body(null, 204);
    });

  return { listNotes, searchNotes, getNote, noteBodyLimit, putNote, deleteNote };
}
