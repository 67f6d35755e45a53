/**
 * Which keywords of a schema the grammar reads: the types a schema allows (an untyped one narrowed
 * to the types its keywords talk about), the keywords that only matter for other types, and those
 * the grammar cannot hold (relaxed, or in strict mode an error); whether `oneOf` branches are
 * provably disjoint.
 *
 * @example
 * ```ts
 * import { typeMatches } from "./schema_keywords.ts";
 * typeMatches(3, "integer"); // true
 * ```
 * @module
 */
import {
  ANNOTATIONS,
  type Ctx,
  isObject,
  type Json,
  malformed,
  ptr,
  relax,
  type Schema,
  unsatisfiable,
  without,
} from "./schema_context.ts";
import { NUMBER_FORMATS } from "./schema_formats.ts";
import type { JsonType } from "./schema_merge.ts";
import { isRefProblem, resolveRef } from "./schema_refs.ts";

export const ALL_TYPES: JsonType[] = ["object", "array", "string", "number", "boolean", "null"];

export const NOT_NULL: JsonType[] = ["object", "array", "string", "number", "boolean"];

// Keywords that matter only to instances of one type, so they can be ignored for other types.
export const TYPE_OF_KEYWORD: Record<string, JsonType> = {
  properties: "object",
  required: "object",
  additionalProperties: "object",
  patternProperties: "object",
  propertyNames: "object",
  minProperties: "object",
  maxProperties: "object",
  dependentRequired: "object",
  dependentSchemas: "object",
  dependencies: "object",
  unevaluatedProperties: "object",
  items: "array",
  prefixItems: "array",
  additionalItems: "array",
  minItems: "array",
  maxItems: "array",
  contains: "array",
  minContains: "array",
  maxContains: "array",
  uniqueItems: "array",
  unevaluatedItems: "array",
  minLength: "string",
  maxLength: "string",
  pattern: "string",
  minimum: "number",
  maximum: "number",
  exclusiveMinimum: "number",
  exclusiveMaximum: "number",
  multipleOf: "number",
};

/** A branch (through `$ref`s) whose `type` names strings, or whose values are all strings. */
export function isStringBranch(ctx: Ctx, b: unknown): boolean {
  for (let i = 0; i < 8 && isObject(b) && typeof b.$ref === "string"; i++) {
    const r = resolveRef(ctx.root, b.$ref);
    if (isRefProblem(r)) return false;
    b = r.schema;
  }
  if (!isObject(b)) return false;
  const t = b.type;
  if (t === "string" || (Array.isArray(t) && t.includes("string"))) return true;
  return Array.isArray(b.enum) && b.enum.some((v) => typeof v === "string");
}

/** Whether no value can match two of `branches`: their types differ, or a `const` tells them apart. */
export function disjoint(ctx: Ctx, branches: Schema[]): boolean {
  const deref = (b: Schema): Schema => {
    for (let i = 0; i < 8 && isObject(b) && typeof b.$ref === "string"; i++) {
      const r = resolveRef(ctx.root, b.$ref);
      if (isRefProblem(r)) return b;
      b = r.schema;
    }
    return b;
  };
  const shapes = branches.map(deref);
  if (!shapes.every(isObject)) return false;
  const objs = shapes as { [k: string]: Json }[];
  // Distinct single types (integer counts as number).
  const kind = (s: { [k: string]: Json }) =>
    typeof s.type === "string" ? (s.type === "integer" ? "number" : s.type) : undefined;
  const kinds = objs.map(kind);
  if (kinds.every((k) => k) && new Set(kinds).size === kinds.length) return true;
  // Distinct constants of the whole value, or of one required discriminator property.
  const consts = objs.map((s) => ("const" in s ? JSON.stringify(s.const) : undefined));
  if (consts.every((c) => c !== undefined) && new Set(consts).size === consts.length) return true;
  const first = objs[0].properties;
  if (!isObject(first)) return false;
  for (const [name] of Object.entries(first)) {
    const tags = objs.map((s) => {
      const p = isObject(s.properties) ? deref(s.properties[name] as Schema) : undefined;
      const req = Array.isArray(s.required) && s.required.includes(name);
      return req && isObject(p) && "const" in p ? JSON.stringify(p.const) : undefined;
    });
    if (tags.every((t) => t !== undefined) && new Set(tags).size === tags.length) return true;
  }
  return false;
}

export function typesOf(ctx: Ctx, s: { [k: string]: Json }, path: string): JsonType[] {
  let types: JsonType[];
  if ("type" in s) {
    const raw = Array.isArray(s.type) ? s.type : [s.type];
    const known = raw.filter((t): t is JsonType =>
      typeof t === "string" &&
      ["null", "boolean", "object", "array", "number", "integer", "string"].includes(t)
    );
    if (known.length < raw.length) {
      const bad = raw.find((t) => !known.includes(t as JsonType));
      malformed(ctx, "type", `unknown type ${JSON.stringify(bad)}`, ptr(path, "type"));
      if (known.length === 0) return ALL_TYPES;
    }
    types = [...new Set(known)];
    if (types.length === 0) throw unsatisfiable("type", "empty type list", ptr(path, "type"));
  } else {
    // An untyped schema accepts every type, but a model given `{"properties": ...}` should write
    // an object: narrow to the types the keywords talk about (still a subset of valid values).
    const implied = new Set(Object.keys(s).map((k) => TYPE_OF_KEYWORD[k]).filter(Boolean));
    if (typeof s.format === "string" && !(s.format in NUMBER_FORMATS)) implied.add("string");
    types = implied.size ? ALL_TYPES.filter((t) => implied.has(t)) : ALL_TYPES;
  }
  if (types.includes("number")) types = types.filter((t) => t !== "integer");
  return types;
}

export function relevant(ctx: Ctx, s: { [k: string]: Json }, kw: string, path: string): boolean {
  const t = TYPE_OF_KEYWORD[kw];
  if (!t) return true;
  const types = typesOf(ctx, s, path);
  return types.includes(t) || (t === "number" && types.includes("integer"));
}

/**
 * The schema without the keywords the grammar cannot hold, each relaxed (or, in strict mode, an
 * error). Keywords that cannot matter here (no extra keys can be written, a maximum already
 * implied) are dropped silently.
 */
export function dropUnsupported(
  ctx: Ctx,
  s: { [k: string]: Json },
  path: string,
): { [k: string]: Json } {
  const drop = new Set<string>();
  const off = (kw: string, why = "", checked = true) => {
    relax(ctx, kw, path, why, checked);
    drop.add(kw);
  };
  // Whether the object can hold keys beyond `properties` (see compileObject's default).
  const extraKeys = () => {
    const add = "additionalProperties" in s ? s.additionalProperties : !("properties" in s);
    return add !== false;
  };
  for (const kw of ["$dynamicRef", "$recursiveRef"]) if (kw in s) off(kw);
  if ("not" in s) {
    // `not: {}` (zod's never) matches nothing.
    if (
      s.not === true || (isObject(s.not) && Object.keys(s.not).every((k) => ANNOTATIONS.has(k)))
    ) {
      throw unsatisfiable("not", "`not` of a schema every value satisfies", ptr(path, "not"));
    }
    off("not");
  }
  if ("if" in s && ("then" in s || "else" in s)) off("if", "if/then/else");
  const typed = [
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "minContains",
  ];
  for (const kw of typed) if (kw in s && relevant(ctx, s, kw, path)) off(kw);
  // Without extra keys, patternProperties cannot apply; `propertyNames: {type: "string"}` (what
  // zod writes for every record) says nothing.
  if ("patternProperties" in s && relevant(ctx, s, "patternProperties", path)) {
    if (extraKeys()) off("patternProperties");
    else drop.add("patternProperties");
  }
  if ("propertyNames" in s && relevant(ctx, s, "propertyNames", path)) {
    const p = s.propertyNames;
    const trivial = p === true ||
      (isObject(p) &&
        Object.keys(p).every((k) => ANNOTATIONS.has(k) || (k === "type" && p.type === "string")));
    if (trivial) drop.add("propertyNames");
    else off("propertyNames");
  }
  if ("unevaluatedProperties" in s && relevant(ctx, s, "unevaluatedProperties", path)) {
    if (s.unevaluatedProperties === false && !extraKeys()) drop.add("unevaluatedProperties");
    else off("unevaluatedProperties");
  }
  if ("unevaluatedItems" in s && relevant(ctx, s, "unevaluatedItems", path)) {
    if (s.unevaluatedItems === false && ("items" in s || "additionalItems" in s)) {
      drop.add("unevaluatedItems");
    } else off("unevaluatedItems");
  }
  if (s.uniqueItems === true && relevant(ctx, s, "uniqueItems", path)) off("uniqueItems");
  if ("minProperties" in s && relevant(ctx, s, "minProperties", path)) {
    const required = Array.isArray(s.required) ? new Set(s.required).size : 0;
    if (!(typeof s.minProperties === "number" && s.minProperties <= required)) {
      off("minProperties", "only a minimum already implied by `required` is supported");
    }
  }
  if ("maxProperties" in s && relevant(ctx, s, "maxProperties", path)) {
    const props = isObject(s.properties) ? Object.keys(s.properties) : [];
    const required = Array.isArray(s.required)
      ? s.required.filter((r) => typeof r === "string")
      : [];
    const possible = new Set([...props, ...required as string[]]).size;
    if (
      !(typeof s.maxProperties === "number" && s.additionalProperties === false &&
        possible <= s.maxProperties)
    ) {
      off(
        "maxProperties",
        "only a maximum already implied by additionalProperties: false is supported",
      );
    }
  }
  return drop.size ? without(s, (k) => drop.has(k)) : s;
}

export function typeMatches(v: Json, t: JsonType): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "boolean":
      return typeof v === "boolean";
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "integer":
      return typeof v === "number" && Number.isInteger(v);
    case "string":
      return typeof v === "string";
    case "array":
      return Array.isArray(v);
    case "object":
      return isObject(v);
  }
}
