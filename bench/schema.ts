/**
 * The JSON Schema of the constrained benchmarks and tests: an open list of records, so the model
 * keeps writing structure (objects, keys, strings, integers, booleans) for as long as it is let.
 *
 * @example
 * ```ts
 * import { BENCH_SCHEMA } from "./schema.ts";
 * await fetch(url, { method: "POST", body: JSON.stringify({ structured_outputs: { json: BENCH_SCHEMA } }) });
 * ```
 * @module
 */
export const BENCH_SCHEMA = {
  type: "object",
  properties: {
    items: {
      type: "array",
      items: {
        type: "object",
        properties: {
          name: { type: "string" },
          count: { type: "integer" },
          ok: { type: "boolean" },
        },
        required: ["name", "count", "ok"],
        additionalProperties: false,
      },
    },
  },
  required: ["items"],
  additionalProperties: false,
};
