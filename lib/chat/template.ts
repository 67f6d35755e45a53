/**
 * Chat templates: the model's Jinja template (or `--chat-template FILE`) rendered with
 * `@huggingface/jinja`, the same way the Hugging Face tokenizers and llama.cpp's `--jinja` do:
 * `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, plus extra variables such as
 * `reasoning_effort` or `tools` passed straight through.
 *
 * Real templates are written for Python's Jinja2, and `@huggingface/jinja` lacks a few of its
 * behaviours they rely on; the interpreter is given them once, on import (see
 * {@link pythonCompat}): the list methods `append`, `pop`, `extend`, `insert`, `index`, `count`
 * and `dict.pop` (Kimi-K2 keeps a queue of call ids with `ids.append(..)` / `ids.pop(0)`), a
 * lookup with an undefined key (`map[x.type]` where `x` has no `type`) is undefined rather than
 * an error, string filters (`trim`, `lower`, ...) read an undefined value as `""` (Hermes 3
 * writes `param.description | trim` for every parameter), and `d.items()` calls the method even
 * when `d` has a key `items` (gpt-oss lists `properties.items()`, and a tool may well have a
 * property named `items`); and, as llama.cpp's own Jinja does, `+` reads none or undefined beside
 * a string as `""` (gpt-oss writes `"// " + tool.description` even for a tool without one).
 *
 * @example
 * ```ts
 * import { compileTemplate, renderChat } from "./template.ts";
 * const t = compileTemplate("{% for m in messages %}{{ m.content }}{% endfor %}");
 * renderChat(t, { messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true }); // "hi"
 * const q = compileTemplate("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append('a') %}" +
 *   "{{ ns.ids.pop(0) }}");
 * renderChat(q, { messages: [], addGenerationPrompt: false }); // "a"
 * ```
 * @module
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja";

export type ChatMessage = { role: string; content: string | null; [k: string]: unknown };

export type CompiledTemplate = { source: string; template: Template };

/** Parses a template once; a syntax error throws with the parser's reason. */
export function compileTemplate(source: string): CompiledTemplate {
  return { source, template: new Template(source) };
}

export type RenderInput = {
  messages: ChatMessage[];
  addGenerationPrompt: boolean;
  bosToken?: string;
  eosToken?: string;
  /** Extra template variables (`reasoning_effort`, `tools`, ...). */
  extra?: Record<string, unknown>;
};

/** Renders the conversation to the prompt text the model was trained on. */
export function renderChat(t: CompiledTemplate, input: RenderInput): string {
  return t.template.render({
    ...input.extra,
    messages: input.messages,
    add_generation_prompt: input.addGenerationPrompt,
    bos_token: input.bosToken ?? "",
    eos_token: input.eosToken ?? "",
  });
}

// ---------------------------------------------------------------- Python Jinja2 behaviours

/** The runtime values of `@huggingface/jinja`, as far as the additions below touch them. */
type Value = { type: string; value: unknown; builtins?: Map<string, Value>; _builtins?: unknown };
type Ctor = new (value?: unknown) => Value;
type Node = { type: string; computed?: boolean; object: Node; property: Node & { value: string } };
type InterpreterProto = {
  evaluate(node: Node, env: unknown): Value;
  evaluateMemberExpression(expr: Node, env: unknown): Value;
  evaluateCallExpression(expr: { callee: Node; args: Node[] }, env: unknown): Value;
  evaluateArguments(args: Node[], env: unknown): [Value[], Map<string, Value>];
  evaluateBinaryExpression(
    node: { operator: { value: string }; left: Node; right: Node },
    env: unknown,
  ): Value;
  evaluateFor(node: { iterable: Node }, env: unknown): Value;
  applyFilter(
    operand: Value,
    filter: { type: string; value?: string; identifier?: { value?: string } },
    env: unknown,
  ): Value;
};

/** The library's value classes, found through values it makes (it exports only the engine). */
function valueClasses(): Record<"array" | "fn" | "undef" | "none" | "str" | "int", Ctor> {
  const env = new Environment();
  env.set("a", []);
  env.set("f", () => 0);
  env.set("s", "");
  env.set("i", 0);
  env.set("n", null);
  const of = (name: string) => (env.lookupVariable(name) as unknown as Value).constructor as Ctor;
  return {
    array: of("a"),
    fn: of("f"),
    undef: of("nope"),
    none: of("n"),
    str: of("s"),
    int: of("i"),
  };
}

/** A node standing for a value already evaluated. */
const EVALUATED = "HearthEvaluated";

const STRING_FILTERS = new Set(["trim", "lower", "upper", "capitalize", "title", "string"]);

/** Adds the Jinja2 behaviours real templates need to the interpreter (once). */
function pythonCompat(): void {
  const proto = Interpreter.prototype as unknown as InterpreterProto & { hearthCompat?: true };
  if (proto.hearthCompat) return;
  proto.hearthCompat = true;
  const V = valueClasses();
  const fn = (f: (args: Value[]) => Value) => new V.fn(f);
  const none = () => new V.undef();
  // Not a type guard: every value has the one `Value` shape here.
  const isA = (x: Value, c: Ctor): boolean => x instanceof c;
  const index = (list: Value[], i: Value | undefined, from: "end" | "start") => {
    const n = typeof i?.value === "number" ? i.value : from === "end" ? -1 : 0;
    const k = n < 0 ? list.length + n : n;
    if (k < 0 || k >= list.length) throw new Error(`pop index ${n} out of range`);
    return k;
  };
  const same = (a: Value, b: Value) => a.type === b.type && a.value === b.value;
  const listMethod = (arr: Value, name: string): Value | undefined => {
    const list = arr.value as Value[];
    const changed = <T>(x: T): T => (arr._builtins = undefined, x); // its `length` is cached
    switch (name) {
      case "append":
        return fn(([x]) => changed((list.push(x ?? none()), none())));
      case "extend":
        return fn(([xs]) => changed((list.push(...(xs?.value as Value[] ?? [])), none())));
      case "insert":
        return fn(([i, x]) =>
          changed((list.splice(Math.min(Number(i.value), list.length), 0, x), none()))
        );
      case "pop":
        return fn(([i]) => changed(list.splice(index(list, i, "end"), 1)[0]));
      case "index":
        return fn(([x]) => {
          const k = list.findIndex((y) => same(x, y));
          if (k < 0) throw new Error("value is not in list");
          return new V.int(k);
        });
      case "count":
        return fn(([x]) => new V.int(list.filter((y) => same(x, y)).length));
    }
    return undefined;
  };
  const member = proto.evaluateMemberExpression;
  proto.evaluateMemberExpression = function (expr, env) {
    if (!expr.computed && expr.property.type === "Identifier") {
      const name = expr.property.value;
      if (["append", "extend", "insert", "pop", "index", "count"].includes(name)) {
        const object = this.evaluate(expr.object, env);
        if (isA(object, V.array)) return listMethod(object, name) ?? none();
        const own = object.value instanceof Map ? object.value.get(name) : undefined;
        if (own) return own;
        if (name === "pop" && object.value instanceof Map) {
          const map = object.value as Map<string, Value>;
          return fn(([k, dflt]) => {
            const v = map.get(String(k?.value));
            if (v === undefined) {
              if (dflt) return dflt;
              throw new Error(`KeyError: ${k?.value}`);
            }
            map.delete(String(k.value));
            return v;
          });
        }
        return object.builtins?.get(name) ?? none();
      }
    }
    try {
      return member.call(this, expr, env);
    } catch (e) {
      // Jinja2: a missing key (also an undefined one) is undefined, not an error.
      if ((e as Error).message.startsWith("Cannot access property with non-string")) return none();
      throw e;
    }
  };
  // `d.items()` is the method even when the mapping has a key "items" (a JSON Schema listing a
  // property named `items`): Jinja2 looks attributes up before keys.
  const call = proto.evaluateCallExpression;
  proto.evaluateCallExpression = function (expr, env) {
    const callee = expr.callee;
    const name = callee.type === "MemberExpression" && !callee.computed &&
        callee.property.type === "Identifier"
      ? callee.property.value
      : "";
    if (["items", "keys", "values", "get"].includes(name)) {
      const object = this.evaluate(callee.object, env);
      const method = object.value instanceof Map ? object.builtins?.get(name) : undefined;
      if (method) {
        const [args] = this.evaluateArguments(expr.args, env); // these take no keywords
        return (method.value as (a: Value[], e: unknown) => Value)(args, env);
      }
    }
    return call.call(this, expr, env);
  };
  // llama.cpp's Jinja (`common/jinja/runtime.cpp`) reads none or undefined beside a string in
  // `+` as "": gpt-oss writes `"// " + tool.description` for every tool, described or not.
  const evaluate = proto.evaluate;
  proto.evaluate = function (node, env) {
    return node?.type === EVALUATED
      ? (node as unknown as { value: Value }).value
      : evaluate.call(this, node, env);
  };
  const binary = proto.evaluateBinaryExpression;
  proto.evaluateBinaryExpression = function (node, env) {
    if (node.operator.value !== "+") return binary.call(this, node, env);
    const left = this.evaluate(node.left, env);
    const right = this.evaluate(node.right, env);
    const nothing = (v: Value) => isA(v, V.undef) || isA(v, V.none);
    if ((nothing(left) && isA(right, V.str)) || (nothing(right) && isA(left, V.str))) {
      return new V.str(`${nothing(left) ? "" : left.value}${nothing(right) ? "" : right.value}`);
    }
    const done = (value: Value) => ({ type: EVALUATED, value }) as unknown as Node;
    return binary.call(this, { ...node, left: done(left), right: done(right) }, env);
  };
  // Jinja2 iterates over a string's characters; the library refuses anything but a list or a
  // mapping.
  const forLoop = proto.evaluateFor;
  proto.evaluateFor = function (node, env) {
    if (node.iterable?.type === "SelectExpression") return forLoop.call(this, node, env);
    const iterable = this.evaluate(node.iterable, env);
    // And over an undefined value, nothing (Hermes 3 loops over `tools` whether given or not).
    const value = isA(iterable, V.str)
      ? new V.array([...(iterable.value as string)].map((c) => new V.str(c)))
      : isA(iterable, V.undef)
      ? new V.array([])
      : iterable;
    return forLoop.call(
      this,
      { ...node, iterable: { type: EVALUATED, value } as unknown as Node },
      env,
    );
  };
  const filter = proto.applyFilter;
  proto.applyFilter = function (operand, f, env) {
    const name = f.type === "Identifier" ? f.value : f.identifier?.value;
    if (isA(operand, V.undef) && name && STRING_FILTERS.has(name)) operand = new V.str("");
    // Jinja2's `None | string` is "None" (Qwen3-Coder writes every scalar argument that way).
    if (isA(operand, V.none) && name === "string") return new V.str("None");
    return filter.call(this, operand, f, env);
  };
}

pythonCompat();
