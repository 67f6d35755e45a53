/**
 * `$ref` resolution inside one JSON Schema document: JSON pointers (`#/$defs/x`, `#/definitions/x`,
 * `#`), anchors (`#name`, from `$anchor` or a draft-07 `$id: "#name"`), and references to the
 * document's own `$id`. A reference that leaves the document (another URL) or points to nothing
 * is a {@link RefProblem}, which the compiler turns into an error or a relaxation.
 *
 * @example
 * ```ts
 * import { resolveRef } from "./schema_refs.ts";
 * const doc = { $defs: { n: { type: "integer" } }, properties: { a: { $ref: "#/$defs/n" } } };
 * resolveRef(doc, "#/$defs/n"); // { key: "#/$defs/n", schema: { type: "integer" } }
 * ```
 * @module
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Schema = boolean | { [k: string]: Json };

/** Why a reference cannot be followed; `external` ones are not the schema's fault. */
export type RefProblem = { problem: string; external: boolean };

function isObject(x: unknown): x is { [k: string]: Json } {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/** Every subschema carrying an anchor or a fragment `$id`, by name (`#name`). */
function anchors(root: Json): Map<string, { key: string; schema: Schema }> {
  const out = new Map<string, { key: string; schema: Schema }>();
  const walk = (node: Json, path: string, depth: number) => {
    if (depth > 64) return;
    if (Array.isArray(node)) {
      node.forEach((x, i) => walk(x, `${path}/${i}`, depth + 1));
      return;
    }
    if (!isObject(node)) return;
    for (const k of ["$anchor", "$dynamicAnchor"]) {
      if (typeof node[k] === "string") out.set(`#${node[k]}`, { key: path, schema: node });
    }
    if (typeof node.$id === "string" && node.$id.startsWith("#")) {
      out.set(node.$id, { key: path, schema: node });
    }
    for (const [k, v] of Object.entries(node)) {
      // `const`, `enum` and `examples` hold data, not schemas.
      if (k === "const" || k === "enum" || k === "examples" || k === "default") continue;
      walk(v, `${path}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`, depth + 1);
    }
  };
  walk(root, "#", 0);
  return out;
}

const anchorCache = new WeakMap<object, Map<string, { key: string; schema: Schema }>>();

/** The schema `ref` points to inside `root`, keyed by its pointer, or why it cannot be found. */
export function resolveRef(root: Json, ref: string): { key: string; schema: Schema } | RefProblem {
  let text = ref;
  // A reference to the document's own `$id` (with or without a fragment) stays inside it.
  const id = isObject(root) && typeof root.$id === "string" ? root.$id.replace(/#$/, "") : "";
  if (id && text.startsWith(id)) text = text.slice(id.length) || "#";
  if (!text.startsWith("#")) {
    return { problem: `references outside the schema are not followed (${ref})`, external: true };
  }
  let frag: string;
  try {
    frag = decodeURIComponent(text.slice(1));
  } catch {
    return { problem: `malformed $ref ${JSON.stringify(ref)}`, external: false };
  }
  if (frag !== "" && !frag.startsWith("/")) {
    if (!isObject(root)) return { problem: `no anchor ${ref}`, external: false };
    let table = anchorCache.get(root);
    if (!table) anchorCache.set(root, table = anchors(root));
    return table.get(`#${frag}`) ??
      { problem: `$ref ${JSON.stringify(ref)} names no anchor`, external: false };
  }
  let node: Json = root;
  for (const raw of frag === "" ? [] : frag.slice(1).split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(node) && /^\d+$/.test(key) && Number(key) < node.length) {
      node = node[Number(key)];
    } else if (isObject(node) && Object.hasOwn(node, key)) node = node[key];
    else return { problem: `$ref ${JSON.stringify(ref)} points to nothing`, external: false };
  }
  if (typeof node !== "boolean" && !isObject(node)) {
    return { problem: `$ref ${JSON.stringify(ref)} does not point to a schema`, external: false };
  }
  return { key: "#" + frag, schema: node };
}

export function isRefProblem(x: unknown): x is RefProblem {
  return isObject(x) && typeof x.problem === "string";
}
