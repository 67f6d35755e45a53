/**
 * `allOf` as one schema: the keywords of every branch merged so the compiler sees a plain schema
 * (types intersected, bounds tightened, `required` united, `properties` and `items` merged
 * pairwise, `anyOf`/`oneOf` crossed). Top-level `$ref`s and nested `allOf`s are expanded first.
 *
 * @example
 * ```ts
 * import { mergeAll } from "./schema_merge.ts";
 * declare const hooks: import("./schema_merge.ts").MergeHooks;
 * mergeAll(hooks, [{ type: "integer", minimum: 0 }, { maximum: 9 }], "#/allOf");
 * // { type: "integer", minimum: 0, maximum: 9 }
 * ```
 * @module
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Schema = boolean | { [k: string]: Json };
export type JsonType = "null" | "boolean" | "object" | "array" | "number" | "integer" | "string";

/** What merging needs from the compiler. */
export type MergeHooks = {
  /** The schema a `$ref` names (throws when it cannot be followed). */
  resolve(ref: string, path: string): Schema;
  typesOf(s: { [k: string]: Json }, path: string): JsonType[];
  /** A malformed keyword: throws. */
  fail(keyword: string, message: string, path: string): never;
  /** Two values of a keyword that cannot be merged: throws, or records it and keeps the first. */
  unsupported(keyword: string, path: string, why: string): void;
  annotations: ReadonlySet<string>;
};

/** More combinations than this from crossing two `anyOf`s is refused. */
export const MAX_BRANCHES = 256;

function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function canonical(v: Json): string {
  return JSON.stringify(v);
}

/** Both schemas, without merging them (for properties, items and crossed branches). */
export function and(h: MergeHooks, a: Schema, b: Schema): Schema {
  if (a === true) return b;
  if (b === true) return a;
  if (a === false || b === false) return false;
  const bare = (s: { [k: string]: Json }) => Object.keys(s).every((k) => h.annotations.has(k));
  if (bare(a)) return b;
  if (bare(b)) return a;
  return { allOf: [a, b] };
}

/** `parts` merged into one schema (`false` when they contradict each other). */
export function mergeAll(h: MergeHooks, parts: Schema[], path: string): Schema {
  return parts.reduce((a, b) => merge(h, a, b, path), true as Schema);
}

/** One schema equivalent to `a` and `b` both holding, or a ConstraintError. */
function merge(h: MergeHooks, a: Schema, b: Schema, path: string, depth = 0): Schema {
  if (a === true) return b === true ? true : expand(h, b, path, depth);
  if (b === true) return expand(h, a, path, depth);
  if (a === false || b === false) return false;
  if (depth > 32) h.fail("allOf", "allOf/$ref nesting too deep to merge", path);
  const x = expand(h, a, path, depth);
  const y = expand(h, b, path, depth);
  if (x === false || y === false) return false;
  if (x === true) return y;
  if (y === true) return x;
  const out: { [k: string]: Json } = {};
  const keys = [...new Set([...Object.keys(x), ...Object.keys(y)])];
  const pick = (k: string) => (k in x ? x[k] : y[k]);
  for (const k of keys) {
    if (h.annotations.has(k)) continue;
    if (!(k in x && k in y)) {
      if (
        ["properties", "additionalProperties", "items", "prefixItems", "additionalItems"].includes(
          k,
        )
      ) {
        continue;
      }
      out[k] = pick(k);
      continue;
    }
    const u = x[k];
    const v = y[k];
    switch (k) {
      case "type": {
        const tu = h.typesOf(x, path);
        const tv = h.typesOf(y, path);
        const meet = new Set<JsonType>();
        for (const t of tu) {
          if (tv.includes(t)) meet.add(t);
          else if (t === "integer" && tv.includes("number")) meet.add("integer");
          else if (t === "number" && tv.includes("integer")) meet.add("integer");
        }
        if (meet.size === 0) return false;
        out.type = [...meet];
        break;
      }
      case "enum": {
        if (!Array.isArray(u) || !Array.isArray(v)) h.fail("enum", "enum must be an array", path);
        const keep = new Set(v.map(canonical));
        out.enum = u.filter((e) => keep.has(canonical(e)));
        break;
      }
      case "const":
        if (canonical(u) !== canonical(v)) return false;
        out.const = u;
        break;
      case "required":
        if (!Array.isArray(u) || !Array.isArray(v)) h.fail(k, "required must be an array", path);
        out.required = [...new Set([...u, ...v])];
        break;
      case "minimum":
      case "exclusiveMinimum":
      case "minLength":
      case "minItems":
      case "minProperties":
        out[k] = typeof u === "number" && typeof v === "number" ? Math.max(u, v) : u;
        break;
      case "maximum":
      case "exclusiveMaximum":
      case "maxLength":
      case "maxItems":
      case "maxProperties":
        out[k] = typeof u === "number" && typeof v === "number" ? Math.min(u, v) : u;
        break;
      case "anyOf":
      case "oneOf": {
        if (!Array.isArray(u) || !Array.isArray(v)) h.fail(k, `${k} must be an array`, path);
        const us = u as Schema[];
        const vs = v as Schema[];
        if (us.length * vs.length > MAX_BRANCHES) {
          h.unsupported(k, path, `allOf of two ${k} lists has too many combinations`);
          out[k] = u;
          break;
        }
        // oneOf is compiled as alternation, so crossing it is the same treatment.
        out[k] = us.flatMap((p) => vs.map((q) => and(h, p, q))) as Json[];
        break;
      }
      default:
        if (canonical(u) !== canonical(v) && (k === "pattern" || k === "format")) {
          h.unsupported(k, path, `allOf with two different ${k}s`);
        }
        // Other unsupported keywords are reported when the merged schema is compiled.
        out[k] = u;
    }
  }
  mergeObjects(h, x, y, out);
  mergeArrays(h, x, y, out);
  return out;
}

// Resolves a top-level $ref and flattens a nested allOf so merge sees plain keywords.
function expand(h: MergeHooks, s: Schema, path: string, depth: number): Schema {
  if (typeof s === "boolean") return s;
  if (!isObject(s)) h.fail("schema", "a schema must be an object or a boolean", path);
  let out: Schema = s;
  if ("$ref" in s) {
    const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref"));
    out = merge(h, h.resolve(String(s.$ref), path), rest, path, depth + 1);
  }
  if (typeof out !== "boolean" && "allOf" in out) {
    const rest = Object.fromEntries(Object.entries(out).filter(([k]) => k !== "allOf"));
    if (!Array.isArray(out.allOf)) h.fail("allOf", "allOf must be an array", path);
    out = (out.allOf as Schema[]).reduce(
      (acc, b) => merge(h, acc, b, path, depth + 1),
      rest as Schema,
    );
  }
  return out;
}

function mergeObjects(
  h: MergeHooks,
  x: { [k: string]: Json },
  y: { [k: string]: Json },
  out: { [k: string]: Json },
): void {
  const touches = (s: { [k: string]: Json }) => "properties" in s || "additionalProperties" in s;
  if (!touches(x) && !touches(y)) return;
  const px = (isObject(x.properties) ? x.properties : {}) as { [k: string]: Json };
  const py = (isObject(y.properties) ? y.properties : {}) as { [k: string]: Json };
  const ax = ("additionalProperties" in x ? x.additionalProperties : true) as Schema;
  const ay = ("additionalProperties" in y ? y.additionalProperties : true) as Schema;
  const props: { [k: string]: Json } = {};
  for (const name of new Set([...Object.keys(px), ...Object.keys(py)])) {
    const sx = (Object.hasOwn(px, name) ? px[name] : ax) as Schema;
    const sy = (Object.hasOwn(py, name) ? py[name] : ay) as Schema;
    props[name] = and(h, sx, sy) as Json;
  }
  if (Object.keys(props).length) out.properties = props;
  const add = and(h, ax, ay);
  if (add !== true) out.additionalProperties = add as Json;
}

function mergeArrays(
  h: MergeHooks,
  x: { [k: string]: Json },
  y: { [k: string]: Json },
  out: { [k: string]: Json },
): void {
  const shape = (s: { [k: string]: Json }) => {
    if ("prefixItems" in s) {
      return { prefix: s.prefixItems as Schema[], rest: ("items" in s ? s.items : true) as Schema };
    }
    if (Array.isArray(s.items)) {
      return {
        prefix: s.items as Schema[],
        rest: ("additionalItems" in s ? s.additionalItems : true) as Schema,
      };
    }
    return { prefix: [] as Schema[], rest: ("items" in s ? s.items : true) as Schema };
  };
  const touches = (s: { [k: string]: Json }) =>
    "prefixItems" in s || "items" in s || "additionalItems" in s;
  if (!touches(x) && !touches(y)) return;
  const sx = shape(x);
  const sy = shape(y);
  const n = Math.max(sx.prefix.length, sy.prefix.length);
  const prefix: Schema[] = [];
  for (let i = 0; i < n; i++) {
    prefix.push(and(h, sx.prefix[i] ?? sx.rest, sy.prefix[i] ?? sy.rest));
  }
  if (n) out.prefixItems = prefix as Json[];
  const rest = and(h, sx.rest, sy.rest);
  if (rest !== true) out.items = rest as Json;
}
