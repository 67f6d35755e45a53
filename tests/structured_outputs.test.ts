// Structured outputs end to end: generated schemas, regexes and choice lists, decoded by the tiny
// (random-weight) model at temperature 1 under several seeds, every finished output checked by an
// independent validator (ajv for JSON Schema, RegExp for regexes); plus the request rules and
// every bad constraint's 400.
import assert from "node:assert/strict";
import { Ajv } from "ajv";
import { inProcessApp } from "./support/app.ts";

type Reply = { status: number; body: Record<string, unknown> };

async function complete(body: Record<string, unknown>, chat = false): Promise<Reply> {
  const app = await inProcessApp();
  const payload = chat
    ? { messages: [{ role: "user", content: "Answer." }], ...body }
    : { prompt: "Answer:", ...body };
  const r = await app.request(chat ? "/v1/chat/completions" : "/v1/completions", {
    method: "POST",
    body: JSON.stringify(payload),
  });
  return { status: r.status, body: await r.json() };
}

function output(r: Reply, chat = false): { text: string; finish: string } {
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const choice = (r.body.choices as Record<string, unknown>[])[0];
  const text = chat ? (choice.message as { content: string }).content : choice.text as string;
  return { text, finish: choice.finish_reason as string };
}

function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const SEEDS = [1, 2, 3];

Deno.test("choice: every output is exactly one of the choices", async () => {
  const r = rng(7);
  const words = ["yes", "no", "maybe", 'say "hi"', "naïve", "🦙 llama", "a\nb", "back\\slash", ""];
  for (let i = 0; i < 4; i++) {
    const choices = words.filter(() => r() < 0.5).concat(["fallback"]);
    for (const seed of SEEDS) {
      const { text, finish } = output(
        await complete({ structured_outputs: { choice: choices }, seed, max_tokens: 20 }),
      );
      assert.equal(finish, "stop");
      assert.ok(
        choices.includes(text),
        `${JSON.stringify(text)} not in ${JSON.stringify(choices)}`,
      );
    }
  }
});

Deno.test("regex: finished outputs fully match the regex", async () => {
  const regexes = [
    "[0-9]{3}-[0-9]{4}",
    "(cat|dog|bird)s?",
    "[A-Z][a-z]{1,5} [A-Z][a-z]{1,5}",
    "\\d+(\\.\\d{1,2})?",
    "(?:ab|cd){2,3}x?",
    "[^a-z\\s]{2,4}",
    "\\w{1,3}@\\w{1,3}\\.(com|org)",
    "^(yes|no)$",
    "-?(0|[1-9][0-9]{0,2})",
    "[\\u00e9\\u00e8]{1,2}z",
  ];
  let finished = 0;
  for (const re of regexes) {
    for (const seed of SEEDS.slice(0, 2)) {
      const { text, finish } = output(
        await complete({ structured_outputs: { regex: re }, seed, max_tokens: 24 }),
      );
      if (finish !== "stop") continue;
      finished++;
      assert.match(text, new RegExp(`^(?:${re})$`), `regex ${re}`);
    }
  }
  assert.ok(finished >= regexes.length, `enough outputs finished (${finished})`);
});

/** Random JSON Schemas whose outputs stay short enough to finish. */
function randomSchema(r: () => number, depth = 0): Record<string, unknown> {
  const pick = r();
  if (depth < 2 && pick < 0.3) {
    const props: Record<string, unknown> = {};
    const names = ["id", "name", "ok", "tags", "kind", "n"].filter(() => r() < 0.5);
    if (!names.length) names.push("id");
    for (const n of names) props[n] = randomSchema(r, depth + 1);
    const required = names.filter(() => r() < 0.6);
    return { type: "object", properties: props, required, additionalProperties: false };
  }
  if (pick < 0.45) return { type: "integer", minimum: -20, maximum: Math.floor(r() * 300) };
  if (pick < 0.6) return { type: "string", maxLength: 1 + Math.floor(r() * 6) };
  if (pick < 0.7) return { type: "boolean" };
  if (pick < 0.8) return { enum: ["red", "green", 3, null] };
  if (pick < 0.9) {
    return { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, maxItems: 3 };
  }
  return { type: ["string", "null"], maxLength: 3 };
}

Deno.test("json: finished outputs validate against generated schemas (ajv)", async () => {
  const ajv = new Ajv({ strict: false });
  const r = rng(11);
  let finished = 0;
  for (let i = 0; i < 10; i++) {
    const schema = randomSchema(r);
    const validate = ajv.compile(schema);
    for (const seed of SEEDS.slice(0, 2)) {
      const chat = (i + seed) % 2 === 0;
      const body = chat
        ? {
          response_format: { type: "json_schema", json_schema: { name: "t", schema } },
          seed,
          max_tokens: 60,
        }
        : { structured_outputs: { json: schema }, seed, max_tokens: 60 };
      const { text, finish } = output(await complete(body, chat), chat);
      if (finish !== "stop") continue;
      finished++;
      const value = JSON.parse(text);
      assert.ok(
        validate(value),
        `${text} vs ${JSON.stringify(schema)}: ${ajv.errorsText(validate.errors)}`,
      );
    }
  }
  assert.ok(finished >= 8, `enough outputs finished (${finished})`);
});

Deno.test("json_object and grammar pass-through; max_tokens cut is finish_reason length", async () => {
  const obj = output(
    await complete({ response_format: { type: "json_object" }, seed: 4, max_tokens: 60 }, true),
    true,
  );
  if (obj.finish === "stop") {
    const v = JSON.parse(obj.text);
    assert.equal(typeof v, "object");
    assert.ok(v !== null && !Array.isArray(v));
  }
  const g = output(
    await complete({
      structured_outputs: { grammar: 'root ::= "id-" [0-9] [0-9] [0-9]' },
      seed: 5,
      max_tokens: 10,
    }),
  );
  assert.match(g.text, /^id-[0-9]{3}$/);
  assert.equal(g.finish, "stop");
  const cut = output(
    await complete({ structured_outputs: { regex: "[a-z]{50}" }, seed: 1, max_tokens: 3 }),
  );
  assert.equal(cut.finish, "length");
  assert.match(cut.text, /^[a-z]*$/);
});

Deno.test("bad constraints are 400s that say what is wrong", async () => {
  const bad = async (body: Record<string, unknown>, re: RegExp, chat = false) => {
    const r = await complete({ max_tokens: 2, ...body }, chat);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    const e = r.body.error as { message: string; type: string };
    assert.equal(e.type, "invalid_request_error");
    assert.match(e.message, re);
  };
  await bad({ structured_outputs: { choice: ["a"], regex: "b" } }, /exactly one.*choice, regex/);
  await bad({ structured_outputs: {} }, /exactly one.*none/);
  await bad(
    { structured_outputs: { choice: ["a"] }, response_format: { type: "json_object" } },
    /not both/,
    true,
  );
  await bad({ structured_outputs: { regex: "(a)\\1" } }, /backreference/i);
  await bad({ structured_outputs: { regex: "a(?=b)" } }, /lookahead/i);
  await bad({ structured_outputs: { json: { type: "number", multipleOf: 0.5 } } }, /multipleOf/);
  await bad(
    {
      structured_outputs: {
        json: { type: "object", properties: { a: { not: { type: "string" } } } },
      },
    },
    /not.*#\/properties\/a/,
  );
  await bad({ structured_outputs: { grammar: "root ::= (" } }, /grammar/);
  await bad({ structured_outputs: { grammar: 'root ::= "a" | nowhere' } }, /grammar/);
  // Inputs that would crash llama.cpp's parser are refused before it sees them.
  await bad({ structured_outputs: { grammar: 'root ::= "x"{3,1}' } }, /maximum below its minimum/);
  await bad(
    { structured_outputs: { grammar: `root ::= ${"(".repeat(5000)}"a"${")".repeat(5000)}` } },
    /nests groups deeper/,
  );
  await bad({ structured_outputs: { choice: [] } }, /choice/);
  await bad({ response_format: { type: "json_schema" } }, /response_format/, true);
  await bad({ response_format: { type: "yaml" } }, /response_format/, true);
  // And the server still answers a good one afterwards.
  const ok = output(await complete({ structured_outputs: { choice: ["ok"] }, max_tokens: 4 }));
  assert.equal(ok.text, "ok");
});
