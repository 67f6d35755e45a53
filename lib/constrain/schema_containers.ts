/**
 * Arrays (tuples, items, bounds) and objects (listed properties in schema or sorted order,
 * required ones always, extra keys that cannot reuse a listed name), in the notation's syntax.
 *
 * @example
 * ```ts
 * import { compileObject } from "./schema_containers.ts";
 * declare const ctx: import("./schema_context.ts").Ctx;
 * compileObject(ctx, { properties: { a: { type: "integer" } }, required: ["a"] }, "#");
 * ```
 * @module
 */
import {
  alt,
  ANY_CHAR,
  charSet,
  EMPTY,
  type Expr,
  isEmpty as isEmptyExpr,
  lit,
  NEVER,
  opt,
  rep,
  ruleRef,
  seq,
  subtractSets,
} from "./gbnf.ts";
import {
  anyValue,
  baseName,
  type Ctx,
  isObject,
  type Json,
  lengthKeyword,
  malformed,
  NEST,
  ptr,
  relax,
  type Schema,
  std,
  unsatisfiable,
  ws,
} from "./schema_context.ts";

export function compileArray(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  let prefix: Schema[] = [];
  let prefixPath = ptr(path, "prefixItems");
  let rest: Schema = true;
  let restPath = ptr(path, "items");
  if ("prefixItems" in s) {
    if (Array.isArray(s.prefixItems)) prefix = s.prefixItems as Schema[];
    else malformed(ctx, "prefixItems", "prefixItems must be an array", prefixPath);
    if ("items" in s) rest = s.items as Schema;
  } else if (Array.isArray(s.items)) {
    // Draft 2019-09 and older: array-form items is a tuple, additionalItems the rest.
    prefix = s.items as Schema[];
    prefixPath = restPath;
    if ("additionalItems" in s) {
      rest = s.additionalItems as Schema, restPath = ptr(path, "additionalItems");
    }
  } else if ("items" in s) rest = s.items as Schema;
  // `unevaluatedItems: false` with nothing else about the rest: only the tuple.
  if (s.unevaluatedItems === false && !("items" in s) && "prefixItems" in s) rest = false;
  const minItems = lengthKeyword(ctx, s, "minItems", path) ?? 0;
  let maxItems = lengthKeyword(ctx, s, "maxItems", path) ?? Infinity;
  // An item that cannot exist caps the length (JSON Schema allows shorter arrays).
  const prefixValues: Expr[] = [];
  for (let i = 0; i < prefix.length && i < maxItems; i++) {
    const v = ctx.childOrNever(prefix[i], ptr(prefixPath, i));
    if (v.k === "never") maxItems = i;
    else prefixValues.push(v);
  }
  const restValue = maxItems > prefix.length ? ctx.childOrNever(rest, restPath) : NEVER;
  if (restValue.k === "never") maxItems = Math.min(maxItems, prefix.length);
  if (minItems > maxItems) {
    throw unsatisfiable(
      "minItems",
      "minItems exceeds the items the array may hold",
      ptr(path, "minItems"),
    );
  }

  const w = ws(ctx);
  const a = ctx.notation.array;
  const item = (i: number, v: Expr) => i === 0 ? a.item(v, w) : seq(lit(a.sep), w, a.item(v, w));
  const tail = (i: number): Expr => {
    if (i < prefixValues.length && i < maxItems) {
      const after = tail(i + 1);
      // A named rule now and then keeps long tuples from nesting parentheses without end.
      const rest = i % NEST === NEST - 1
        ? ruleRef(ctx.g, `${baseName(path)}-from-${i + 1}`, after)
        : after;
      return alt(i >= minItems ? EMPTY : NEVER, seq(item(i, prefixValues[i]), rest));
    }
    const lo = Math.max(0, minItems - i);
    const hi = maxItems - i;
    if (hi === 0) return EMPTY;
    if (i > 0) return rep(item(1, restValue), lo, hi);
    const more = rep(item(1, restValue), Math.max(0, lo - 1), hi - 1);
    return lo === 0 ? opt(seq(item(0, restValue), more)) : seq(item(0, restValue), more);
  };
  return seq(lit(a.open), w, tail(0), lit(a.close));
}

export function compileObject(ctx: Ctx, s: { [k: string]: Json }, path: string): Expr {
  const n = ctx.notation;
  const propsPath = ptr(path, "properties");
  let props: { [k: string]: Json } = {};
  if ("properties" in s) {
    if (isObject(s.properties)) props = s.properties;
    else malformed(ctx, "properties", "properties must be an object", propsPath);
  }
  let requiredList: string[] = [];
  if ("required" in s) {
    if (Array.isArray(s.required) && s.required.every((r) => typeof r === "string")) {
      requiredList = s.required as string[];
    } else {malformed(
        ctx,
        "required",
        "required must be an array of strings",
        ptr(path, "required"),
      );}
  }
  const required = new Set(requiredList);
  // Without `additionalProperties`, an object that declares `properties` admits only those, as
  // llama.cpp's and xgrammar's converters do: otherwise a forced call of a tool made from a zod
  // shape (which leaves the keyword out) may invent keys for ever and never close.
  const additional: Schema = "additionalProperties" in s
    ? s.additionalProperties as Schema
    : !("properties" in s);
  const addPath = ptr(path, "additionalProperties");

  // An additionalProperties schema nothing satisfies is the same as false; a notation that cannot
  // write other keys writes only the listed ones (still valid).
  const extraValue = additional === false || !n.object.extraKeys
    ? NEVER
    : ctx.childOrNever(additional, addPath);

  // Properties in schema order (or the notation's sorted order), then required names that only
  // additionalProperties covers. A property whose schema nothing satisfies may only be absent.
  const list: { name: string; key: string; value: Expr; required: boolean }[] = [];
  const add = (name: string, given: Expr, at: string) => {
    let value = given;
    const key = n.key(name);
    if (key === undefined) {
      if (required.has(name)) {
        relax(ctx, "required", path, `"${name}" cannot be written as a key here`);
      }
      return;
    }
    if (value.k === "never") {
      if (!required.has(name)) return;
      if (!ctx.relax) {
        throw unsatisfiable(
          "required",
          `required property "${name}" has a schema no value satisfies`,
          at,
        );
      }
      relax(ctx, "required", path, `required property "${name}" has a schema no value satisfies`);
      value = anyValue(ctx);
    }
    list.push({ name, key, value, required: required.has(name) });
  };
  for (const [name, schema] of Object.entries(props)) {
    add(name, ctx.childOrNever(schema, ptr(propsPath, name)), ptr(path, "required"));
  }
  for (const name of required) {
    if (Object.hasOwn(props, name)) continue;
    if (extraValue.k === "never" && !ctx.relax) {
      throw unsatisfiable(
        "required",
        `required property "${name}" is not allowed by additionalProperties`,
        ptr(path, "required"),
      );
    }
    add(name, extraValue, ptr(path, "required"));
  }
  if (n.sortKeys) {
    list.sort((a, b) => {
      const x = a.name.toLowerCase();
      const y = b.name.toLowerCase();
      return x < y ? -1 : x > y ? 1 : 0;
    });
  }

  const w = ws(ctx);
  const kv = (p: (typeof list)[number]) => n.object.member(lit(p.key), p.value, w);
  const next = (kvExpr: Expr) => seq(lit(n.object.sep), w, kvExpr);

  // Extra keys are any name except the listed ones, so a value cannot dodge its schema by
  // reusing a name.
  let extraFirst: Expr = EMPTY;
  let extraRest: Expr = EMPTY;
  if (extraValue.k !== "never") {
    const known = Object.keys(props).concat([...required]);
    const q = lit(n.keyQuote);
    const extra = n.object.member(seq(q, keyExcept(ctx, known), q), extraValue, w);
    extraRest = ruleRef(ctx.g, `${baseName(path)}-extra`, rep(next(extra), 0, Infinity));
    extraFirst = opt(seq(extra, extraRest));
  }

  // rest: properties i.. after something was written (each needs a comma); firstE: the same
  // before anything was written. first_i is only reachable when every property before i is
  // optional, and then rest_{i+1} has two users: it becomes a rule so the size stays linear.
  let rest = extraRest;
  let firstE = extraFirst;
  let nested = 0;
  const leadingOptional = list.findIndex((p) => p.required) === -1
    ? list.length
    : list.findIndex((p) => p.required);
  for (let i = list.length - 1; i >= 0; i--) {
    const p = list[i];
    const k = kv(p);
    const shared = i >= 1 && i <= leadingOptional && rest.k !== "ref" && !isEmptyExpr(rest);
    const r = shared ? ruleRef(ctx.g, `${baseName(path)}-from-${i + 1}`, rest) : rest;
    if (!p.required && ++nested % NEST === 0) {
      firstE = ruleRef(ctx.g, `${baseName(path)}-first-${i + 1}`, firstE);
    }
    firstE = p.required ? seq(k, r) : alt(seq(k, r), firstE);
    rest = p.required ? seq(next(k), r) : seq(opt(next(k)), r);
  }
  return seq(lit(n.object.open), w, firstE, lit(n.object.close));
}

// Keys that are none of `names`: a trie of the names walked in parallel with the key. Each
// character has one spelling (the notation's keyChar), so "not this name" is decidable on the text.
function keyExcept(ctx: Ctx, names: string[]): Expr {
  type Node = { end: boolean; kids: Map<number, Node> };
  const char = ctx.notation.keyChar;
  const rootNode: Node = { end: false, kids: new Map() };
  for (const name of names) {
    let n = rootNode;
    for (const ch of name) {
      const c = ch.codePointAt(0)!;
      let k = n.kids.get(c);
      if (!k) n.kids.set(c, k = { end: false, kids: new Map() });
      n = k;
    }
    n.end = true;
  }
  const anyChar = std(ctx, "key-char", () => char(ANY_CHAR));
  const anyRest = rep(anyChar, 0, ctx.notation.quote === '"' ? Infinity : 63);
  const walk = (n: Node, depth: number): Expr => {
    const e = alt(
      n.end ? NEVER : depth === 0 && ctx.notation.keyQuote === "" ? NEVER : EMPTY,
      ...[...n.kids].map(([c, k]) => seq(char(charSet(c)), walk(k, depth + 1))),
      seq(char(subtractSets(ANY_CHAR, charSet(...n.kids.keys()))), anyRest),
    );
    return depth % NEST === NEST - 1 ? ruleRef(ctx.g, "key", e) : e;
  };
  return walk(rootNode, 0);
}
