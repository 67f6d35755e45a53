/**
 * Finished values checked against a whole JSON Schema, for what a grammar relaxed: ajv (draft-07
 * or 2020-12, as the schema declares or its shape shows) with ajv-formats' full formats, the
 * validator most clients use. Keywords that cannot be enforced at all (an unknown `format`, a
 * `$ref` outside the document, a pattern no engine reads) are taken out first, by their JSON
 * pointers, so one of them does not switch the whole check off. Compiled checks are cached by
 * schema text.
 *
 * @example
 * ```ts
 * import { schemaCheck } from "./schema_check.ts";
 * const check = schemaCheck({ type: "array", items: { type: "integer" }, uniqueItems: true });
 * check.ok && check.check([1, 2, 2]); // "must NOT have duplicate items (items ## 2 and 1 are identical)"
 * check.ok && check.check([1, 2]); // undefined: valid
 * ```
 * @module
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type AnyAjv = InstanceType<typeof Ajv> | InstanceType<typeof Ajv2020>;
type Validate = ReturnType<AnyAjv["compile"]>;

/** A compiled check: `check(value)` is undefined when valid, else ajv's first errors as text. */
export type SchemaCheck =
  | { ok: true; check(value: unknown): string | undefined }
  | { ok: false; error: string };

// ajv-formats is CommonJS: its default export is the function, or holds it.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ??
  addFormatsModule) as (ajv: AnyAjv) => AnyAjv;

const CACHE_SIZE = 256;
const cache = new Map<string, SchemaCheck>();

function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/** Draft-07 when the schema says draft-04/06/07 or uses the array form of `items`. */
function isDraft07(schema: Json): boolean {
  if (isObject(schema) && typeof schema.$schema === "string") {
    return /draft-0[4-7]/.test(schema.$schema);
  }
  let tuple = false;
  const walk = (n: Json, depth: number) => {
    if (tuple || depth > 64) return;
    if (Array.isArray(n)) n.forEach((x) => walk(x, depth + 1));
    else if (isObject(n)) {
      if (Array.isArray(n.items) || "additionalItems" in n) tuple = true;
      for (const [k, v] of Object.entries(n)) if (k !== "enum" && k !== "const") walk(v, depth + 1);
    }
  };
  walk(schema, 0);
  return tuple;
}

/**
 * A copy without the keywords at `pointers` and with draft-04's boolean exclusive bounds in their
 * later form, which both drafts ajv speaks read.
 */
function prepared(schema: Json, pointers: string[]): Json {
  const copy = structuredClone(schema);
  for (const p of pointers) {
    const keys = p.replace(/^#\/?/, "").split("/").filter((k) => k !== "")
      .map((k) => k.replace(/~1/g, "/").replace(/~0/g, "~"));
    let node: Json = copy;
    for (const k of keys.slice(0, -1)) {
      node = isObject(node) ? node[k] : Array.isArray(node) ? node[Number(k)] : null;
    }
    const last = keys.at(-1);
    if (last !== undefined && isObject(node)) delete node[last];
  }
  const walk = (n: Json, depth: number) => {
    if (depth > 200) return;
    if (Array.isArray(n)) n.forEach((x) => walk(x, depth + 1));
    else if (isObject(n)) {
      for (
        const [ex, bound] of [["exclusiveMinimum", "minimum"], ["exclusiveMaximum", "maximum"]]
      ) {
        if (typeof n[ex] !== "boolean") continue;
        if (n[ex] && typeof n[bound] === "number") {
          n[ex] = n[bound];
          delete n[bound];
        } else delete n[ex];
      }
      for (const [k, v] of Object.entries(n)) if (k !== "enum" && k !== "const") walk(v, depth + 1);
    }
  };
  walk(copy, 0);
  if (isObject(copy)) {
    // A document's own `$id` would clash between compiles; references to it resolve locally.
    delete copy.$id;
    delete copy.$schema;
  }
  return copy;
}

function compileWith(schema: Json, draft07: boolean, unicode: boolean): Validate {
  const opts = { strict: false, allErrors: false, unicodeRegExp: unicode, logger: false } as const;
  const ajv = draft07 ? new Ajv(opts) : new Ajv2020(opts);
  addFormats(ajv);
  return ajv.compile(schema as object);
}

/**
 * The check of `schema`, leaving out the keywords at `unenforced` (JSON pointers). A schema ajv
 * cannot compile at all gives `{ ok: false }` with its reason.
 */
export function schemaCheck(schema: unknown, unenforced: string[] = []): SchemaCheck {
  const key = JSON.stringify([schema, unenforced]);
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  let result: SchemaCheck;
  const s = prepared(schema as Json, unenforced);
  const draft07 = isDraft07(schema as Json);
  let validate: Validate | undefined;
  let error = "";
  // Patterns written for flagless RegExp (`[\w-]`) are an error under the `u` flag.
  for (const unicode of [true, false]) {
    try {
      validate = compileWith(s, draft07, unicode);
      break;
    } catch (e) {
      error ||= (e as Error).message;
    }
  }
  if (validate) {
    const v = validate;
    result = {
      ok: true,
      check(value) {
        if (v(value)) return undefined;
        return (v.errors ?? []).slice(0, 3).map((e) => `${e.instancePath || "/"} ${e.message}`)
          .join("; ");
      },
    };
  } else result = { ok: false, error };
  cache.set(key, result);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
  return result;
}
