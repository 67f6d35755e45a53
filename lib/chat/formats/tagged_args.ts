/**
 * Calls whose arguments are written one per tag pair, as Qwen3-Coder (`<parameter=K>\nV\n
 * </parameter>`), GLM (`<arg_key>K</arg_key><arg_value>V</arg_value>`), MiniMax-M2 and DSML
 * (`<parameter name="K">V</parameter>`) do: a value whose schema only admits strings is written raw
 * (anything but the closing tag, its length, pattern and format held by the grammar in raw
 * notation), every other value as JSON, the way their templates render history (`v | tojson if v
 * is not string else v`). The top-level properties are read through a top-level `$ref`, merged
 * from an `allOf`, or taken per branch of an `anyOf`/`oneOf`; the grammar writes them in schema
 * order, required ones always and optional ones maybe; the parser reads them in any order.
 *
 * @example
 * ```ts
 * import { argsObject } from "./tagged_args.ts";
 * const tool = { name: "f", parameters: { type: "object", properties: {
 *   path: { type: "string", pattern: "^/" }, n: { type: "integer" } } } };
 * argsObject(tool, [["path", "/a b"], ["n", "3"]]); // '{"path":"/a b","n":3}'
 * ```
 * @module
 */
import type { ToolSpec } from "../conversation.ts";
import { alt, type Expr, lit, opt, seq } from "../../constrain/gbnf.ts";
import { newSchemaSet, type Relaxation, type SchemaSet } from "../../constrain/json_schema.ts";
import { LARK_KEYWORD } from "../../constrain/lark.ts";
import { type Notation, rawNotation } from "../../constrain/notation.ts";
import { isRefProblem, resolveRef } from "../../constrain/schema_refs.ts";
import { argumentsSchema, forTool, type ToolRelax } from "./grammar.ts";
import { parseJson } from "./json_calls.ts";

type Json = Record<string, unknown>;

function isRecord(x: unknown): x is Json {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

const ptr = (p: string, ...keys: string[]) =>
  p + keys.map((k) => "/" + k.replace(/~/g, "~0").replace(/\//g, "~1")).join("");

/** A schema followed through `$ref`s, with the pointer it was found at. */
function deref(root: unknown, schema: unknown, at: string): { s: unknown; at: string } {
  for (let i = 0; i < 16 && isRecord(schema) && typeof schema.$ref === "string"; i++) {
    const r = resolveRef(root as never, schema.$ref);
    if (isRefProblem(r)) break;
    schema = r.schema;
    at = r.key;
  }
  return { s: schema, at };
}

/**
 * Whether every value `schema` admits is a string (so the template writes it raw): `type:
 * "string"`, an enum or const of strings, or a union (or intersection) of such, through `$ref`s.
 * A Lark-derived string (a custom tool's input) stays JSON.
 */
export function stringOnly(root: unknown, schema: unknown, depth = 0): boolean {
  const { s } = deref(root, schema, "#");
  if (!isRecord(s) || depth > 16 || LARK_KEYWORD in s) return false;
  for (const k of ["anyOf", "oneOf"]) {
    if (Array.isArray(s[k])) {
      return (s[k] as unknown[]).every((b) => stringOnly(root, b, depth + 1));
    }
  }
  if (Array.isArray(s.allOf) && s.allOf.some((b) => stringOnly(root, b, depth + 1))) return true;
  const t = s.type;
  if (t === "string" || (Array.isArray(t) && t.length > 0 && t.every((x) => x === "string"))) {
    return true;
  }
  if (t !== undefined) return false;
  if (Array.isArray(s.enum)) return s.enum.length > 0 && s.enum.every((v) => typeof v === "string");
  return "const" in s && typeof s.const === "string";
}

/** One way of writing a tool's arguments: its properties (with pointers) and required names. */
export type TagBranch = { props: [name: string, pointer: string][]; required: Set<string> };

/** A tool's top-level arguments as tag pairs: its branches, and the names written raw. */
export type TagLayout = { root: Json; branches: TagBranch[]; raw: Set<string> };

const layouts = new WeakMap<ToolSpec, TagLayout>();

/**
 * The tag-pair layout of `t`'s arguments: one branch for a plain object schema (or one reached by
 * `$ref`, or merged from `allOf` branches), one per `anyOf`/`oneOf` alternative. A name is raw
 * when every branch that lists it admits only strings there.
 */
export function tagLayout(t: ToolSpec): TagLayout {
  const have = layouts.get(t);
  if (have) return have;
  const root = argumentsSchema(t);
  const branches: TagBranch[] = [];
  const collect = (schema: unknown, at: string, into: TagBranch, depth: number) => {
    const d = deref(root, schema, at);
    if (!isRecord(d.s) || depth > 8) return;
    const s = d.s;
    if (isRecord(s.properties)) {
      for (const name of Object.keys(s.properties)) {
        if (!into.props.some(([n]) => n === name)) {
          into.props.push([name, ptr(d.at, "properties", name)]);
        }
      }
    }
    if (Array.isArray(s.required)) {
      for (const r of s.required) if (typeof r === "string") into.required.add(r);
    }
    if (Array.isArray(s.allOf)) {
      s.allOf.forEach((b, i) => collect(b, ptr(d.at, "allOf", String(i)), into, depth + 1));
    }
  };
  const top = deref(root, root, "#");
  const union = isRecord(top.s)
    ? (["anyOf", "oneOf"] as const).find((k) => Array.isArray((top.s as Json)[k]))
    : undefined;
  if (union) {
    ((top.s as Json)[union] as unknown[]).forEach((b, i) => {
      const branch: TagBranch = { props: [], required: new Set() };
      collect({ ...(top.s as Json), [union]: undefined }, top.at, branch, 0);
      collect(b, ptr(top.at, union, String(i)), branch, 0);
      branches.push(branch);
    });
  } else {
    const branch: TagBranch = { props: [], required: new Set() };
    collect(root, "#", branch, 0);
    branches.push(branch);
  }
  const at = (pointer: string) => resolveRef(root as never, pointer);
  const raw = new Set<string>();
  const names = new Set(branches.flatMap((b) => b.props.map(([n]) => n)));
  for (const name of names) {
    const all = branches.flatMap((b) => b.props.filter(([n]) => n === name));
    if (
      all.every(([, p]) => {
        const r = at(p);
        return !isRefProblem(r) && stringOnly(root, r.schema);
      })
    ) raw.add(name);
  }
  const layout = { root, branches, raw };
  layouts.set(t, layout);
  return layout;
}

/** The schema at `pointer` inside a tool's arguments schema (undefined when it is not there). */
export function schemaAt(root: unknown, pointer: string): unknown {
  const r = resolveRef(root as never, pointer);
  return isRefProblem(r) ? undefined : deref(root, r.schema, r.key).s;
}

export type TagSyntax = {
  family: string;
  /** The text before a value: the key's tags (`open(name)`). */
  open(name: string, raw: boolean): Expr;
  /** The closing tag after a value; a raw value can hold anything but it. */
  close: string;
  /** Text the template writes just before a raw value, which may begin `close` (a newline). */
  before?: string;
  /** Between two arguments (layout). */
  sep: Expr;
};

const notations = new Map<string, Notation>();

/** The raw-string notation of a closing tag (shared, so its rules are made once per grammar). */
export function rawFor(close: string, before = ""): Notation {
  const key = `${close}\u0000${before}`;
  let n = notations.get(key);
  if (!n) notations.set(key, n = rawNotation(close, before));
  return n;
}

/**
 * Every argument of `t` as tag pairs, in schema order (optional ones may be left out), one
 * alternative per branch of its layout. `relax` receives what the grammar cannot hold.
 */
export function argsExpr(
  set: SchemaSet,
  t: ToolSpec,
  syn: TagSyntax,
  relax?: (r: Relaxation) => void,
): Expr {
  const layout = tagLayout(t);
  const raw = rawFor(syn.close, syn.before);
  return alt(...layout.branches.map((b) =>
    seq(
      ...b.props.map(([name, pointer]) => {
        const isRaw = layout.raw.has(name);
        // A null argument would be printed as Python's `None` by the template: never written.
        const value = set.compile(layout.root, `${t.name}-${name}`, pointer, {
          ...(isRaw ? { notation: raw } : { notNull: true }),
          ...(relax ? { relax } : {}),
        });
        const p = seq(syn.open(name, isRaw), value, lit(syn.close), syn.sep);
        return b.required.has(name) ? p : opt(p);
      }),
    )
  ));
}

/**
 * The grammar preamble the tag-pair families share: one schema set, and any one of the tools'
 * calls, each `call(name, args)` around that tool's tag-pair arguments (an empty tool list or a
 * schema that cannot compile is refused naming the tool). The family adds only its own block
 * markers around the result.
 */
export function taggedCalls(
  tools: ToolSpec[],
  syn: TagSyntax,
  relax: ToolRelax | undefined,
  call: (name: string, args: Expr) => Expr,
): { set: SchemaSet; call: Expr } {
  if (tools.length === 0) throw new Error("a call grammar needs at least one tool");
  const set = newSchemaSet();
  const calls = tools.map((t, i) =>
    forTool(t, i, () => call(t.name, argsExpr(set, t, syn, relaxFor(relax, i))))
  );
  return { set, call: alt(...calls) };
}

/** `relax` for tool `i`, or undefined. */
export function relaxFor(relax: ToolRelax | undefined, i: number) {
  return relax && ((r: Relaxation) => relax(i, r));
}

/** Compact JSON arguments from `[key, written value]` pairs, each read by its schema. */
export function argsObject(t: ToolSpec | undefined, pairs: [string, string][]): string {
  const raw = t ? safeLayout(t)?.raw ?? new Set<string>() : new Set<string>();
  const args: Json = {};
  for (const [key, text] of pairs) {
    const json = raw.has(key) ? undefined : parseJson(text);
    const parsed = raw.has(key) || json !== undefined ? json : pythonScalar(text);
    args[key] = parsed === undefined ? text : parsed;
  }
  return JSON.stringify(args);
}

/** `None`, `True` and `False` as a template's `| string` prints them (models trained on it do). */
function pythonScalar(text: string): null | boolean | undefined {
  const t = text.trim();
  return t === "None" ? null : t === "True" ? true : t === "False" ? false : undefined;
}

function safeLayout(t: ToolSpec): TagLayout | undefined {
  try {
    return tagLayout(t);
  } catch {
    return undefined;
  }
}

/** Whether argument `key` of `t` is written raw (a string), so a cut value still counts. */
export function isRawArg(t: ToolSpec, key: string): boolean {
  return safeLayout(t)?.raw.has(key) ?? false;
}
