// Constraint compilers (choice, regex, JSON Schema → GBNF), checked against llama.cpp itself: every
// grammar is parsed by llama.cpp's grammar sampler and candidate texts are fed through its matcher
// token by token. Expected answers come from JS RegExp (full match) and ajv (2020-12).
//
// How acceptance is checked without risking the process: `llama_sampler_accept` on a token the
// grammar rejects throws a C++ exception across the FFI boundary (std::terminate), and accepting
// an end-of-generation token before the grammar is complete hits GGML_ABORT. So each token is
// first offered alone to `llama_sampler_apply` in a one-candidate `llama_token_data_array`; the
// grammar sets a rejected candidate's logit to -INFINITY. Only allowed tokens are accepted. At the
// end the EOS token is offered the same way: llama_grammar_apply_impl allows an end-of-generation
// token only when some parse stack is empty, i.e. the grammar is complete.
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import {
  loadModel,
  modelVocab,
  openLlama,
  samplers,
  tokenData,
  tokenDataArray,
  tokenize,
  vocabInfo,
  writeStruct,
} from "../ffi/mod.ts";
import {
  charClass,
  charSet,
  choiceToGbnf,
  clearConstraintCache,
  compileConstraint,
  constraintCacheSize,
  isConstraintError,
  jsonObjectGbnf,
  jsonSchemaToGbnf,
  literal,
  regexToGbnf,
} from "../lib/constrain/mod.ts";
import { integerRange } from "../lib/constrain/numeric.ts";
import { newGrammar, render } from "../lib/constrain/gbnf.ts";

// ---------------------------------------------------------------- llama.cpp harness

const VOCAB = new URL("../lib/gguf/assets/llama-bpe.vocab.gguf", import.meta.url).pathname;
const llama = openLlama();
const model = await loadModel(llama, VOCAB, { vocab_only: true });
const vocab = modelVocab(llama, model);
const EOS = vocabInfo(llama, vocab).eos;

// One llama_token_data and the array struct pointing at it; off the V8 heap so the address holds.
const candidate = new Uint8Array(new ArrayBuffer(tokenData.size));
const candidateView = new DataView(candidate.buffer);
const candidates = new Uint8Array(new ArrayBuffer(tokenDataArray.size));
writeStruct(tokenDataArray, candidates, {
  data: Deno.UnsafePointer.value(Deno.UnsafePointer.of(candidate)),
  size: 1n,
  selected: -1n,
  sorted: false,
});
const LOGIT = tokenData.fields.find((f) => f.name === "logit")!.offset;

function tokenAllowed(sampler: Deno.PointerValue, token: number): boolean {
  candidateView.setInt32(0, token, true);
  candidateView.setFloat32(LOGIT, 0, true);
  llama.sym.llama_sampler_apply(sampler, candidates);
  return candidateView.getFloat32(LOGIT, true) !== -Infinity;
}

/** Whether llama.cpp's parser takes the grammar (a null sampler means it refused). */
function grammarParses(gbnf: string): boolean {
  const s = samplers(llama).grammar(vocab, gbnf, "root");
  if (s) llama.sym.llama_sampler_free(s);
  return s !== null;
}

/** Whether llama.cpp's grammar matcher accepts `text` as a complete output. */
function grammarAccepts(gbnf: string, text: string): boolean {
  const s = samplers(llama).grammar(vocab, gbnf, "root");
  if (!s) throw new Error(`llama.cpp rejected the grammar:\n${gbnf}`);
  try {
    for (const t of tokenize(llama, vocab, text, false, false)) {
      if (!tokenAllowed(s, t)) return false;
      llama.sym.llama_sampler_accept(s, t);
    }
    return tokenAllowed(s, EOS);
  } finally {
    llama.sym.llama_sampler_free(s);
  }
}

function expectAccepts(gbnf: string, text: string, want: boolean, why = ""): void {
  assert.equal(
    grammarAccepts(gbnf, text),
    want,
    `${want ? "should accept" : "should reject"} ${JSON.stringify(text)} ${why}\n${gbnf}`,
  );
}

function throwsConstraint(fn: () => unknown, keyword: string | RegExp, path?: string): void {
  try {
    fn();
  } catch (e) {
    assert.ok(isConstraintError(e), `not a ConstraintError: ${e}`);
    if (typeof keyword === "string") assert.equal(e.keyword, keyword, e.message);
    else assert.match(e.keyword, keyword, e.message);
    if (path !== undefined) assert.equal(e.path, path, e.message);
    return;
  }
  assert.fail(`expected a ConstraintError (${keyword})`);
}

// ---------------------------------------------------------------- seeded randomness

type Rng = {
  next(): number;
  int(lo: number, hi: number): number;
  pick<T>(xs: readonly T[]): T;
  chance(p: number): boolean;
};

function rng(seed: number): Rng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const r: Rng = {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
  };
  return r;
}

// BMP only: flagless JS regexes count UTF-16 units, the grammar counts code points.
const POOL = Array.from("abcxyzAZ019-_ .,é\n\t*\\/\"'[]^$(){}|?+~€中");

function mutateString(r: Rng, s: string): string {
  const chars = Array.from(s);
  const i = r.int(0, chars.length);
  switch (r.int(0, 3)) {
    case 0:
      chars.splice(i, 1);
      break;
    case 1:
      chars.splice(i, 0, r.pick(POOL));
      break;
    case 2:
      chars.splice(i, 1, r.pick(POOL));
      break;
    default:
      chars.splice(i, 0, ...chars.slice(r.int(0, i), i));
  }
  return chars.join("");
}

// ---------------------------------------------------------------- basic behaviour

Deno.test("harness: EOS is allowed only when the grammar is complete; bad grammars are refused", () => {
  const g = 'root ::= "ab" "c"?\n';
  expectAccepts(g, "ab", true);
  expectAccepts(g, "abc", true);
  expectAccepts(g, "a", false);
  expectAccepts(g, "", false);
  expectAccepts(g, "abcc", false);
  assert.equal(grammarParses("root ::= (\n"), false);
  assert.equal(grammarParses("root ::= undefined-rule\n"), false);
  assert.equal(grammarParses('root ::= root "a"\n'), false); // left recursion
});

Deno.test("literal and charClass escape everything llama.cpp reads specially", () => {
  const nasty = [
    'quote " backslash \\ end',
    "tab\tnewline\ncr\r",
    "\x01\x1f\x7f\x80\xa0",
    "[]-^#|()*+?{}",
    "é中€ 😀 \u2028\u2029\ufeff",
    "",
  ];
  const g = `root ::= ${nasty.map(literal).join(" | ")}\n`;
  for (const s of nasty) expectAccepts(g, s, true);
  expectAccepts(g, 'quote " backslash \\ en', false);
  expectAccepts(g, "tab\tnewline\ncr", false);

  const set = charSet(']-^\\"[', ["a", "c"], 0x0a, 0x4e2d);
  const cg = `root ::= ${charClass(set)}+\n`;
  for (const c of ["]", "-", "^", "\\", '"', "[", "a", "b", "c", "\n", "中"]) {
    expectAccepts(cg, c, true);
  }
  for (const c of ["d", "x", " ", "é"]) expectAccepts(cg, c, false);
  const ng = `root ::= ${charClass(set, true)}+\n`;
  for (const c of ["d", "x", " ", "é"]) expectAccepts(ng, c, true);
  for (const c of ["]", "-", "^", "\\", "a"]) expectAccepts(ng, c, false);
  assert.throws(() => charClass([]), /empty/);
});

Deno.test("choice: exact strings only", () => {
  const choices = ["yes", "no", "yes please", 'say "hi"\n', "é😀", ""];
  const g = choiceToGbnf(choices);
  for (const c of choices) expectAccepts(g, c, true);
  for (const c of ["ye", "yess", "no ", "yes pleas", 'say "hi"', "é"]) expectAccepts(g, c, false);
  throwsConstraint(() => choiceToGbnf([]), "choice");
});

Deno.test("choice: random lists", () => {
  const r = rng(7);
  for (let n = 0; n < 40; n++) {
    const list = Array.from(
      { length: r.int(1, 6) },
      () => Array.from({ length: r.int(0, 6) }, () => r.pick(POOL)).join(""),
    );
    const g = choiceToGbnf(list);
    for (const c of list) expectAccepts(g, c, true);
    for (let k = 0; k < 3; k++) {
      const m = mutateString(r, r.pick(list));
      expectAccepts(g, m, list.includes(m));
    }
  }
});

// ---------------------------------------------------------------- regex

type RegexGen = { src: string; prec: number; sample: (r: Rng) => string };

const ESCAPES: [string, string][] = [
  ["\\.", "."],
  ["\\*", "*"],
  ["\\n", "\n"],
  ["\\t", "\t"],
  ["\\x41", "A"],
  ["\\u00e9", "é"],
  ["\\/", "/"],
  ["\\\\", "\\"],
  ["\\(", "("],
  ["\\[", "["],
  ["\\{", "{"],
  ["\\$", "$"],
  ["\\^", "^"],
  ["\\|", "|"],
  ["\\?", "?"],
  ["\\]", "]"],
  ["\\-", "-"],
];
const LITERALS = Array.from("abcxy-_ é19,");

function fromPool(r: Rng, re: RegExp): string {
  const ok = POOL.filter((c) => re.test(c));
  return ok.length ? r.pick(ok) : "";
}

function genClass(r: Rng): RegexGen {
  const parts: string[] = [];
  for (let i = r.int(1, 4); i > 0; i--) {
    parts.push(
      r.pick([
        "a",
        "b-e",
        "0-5",
        "\\d",
        "\\s",
        "\\w",
        "\\]",
        "\\-",
        "\\\\",
        "\\^",
        '"',
        "é",
        "x-z",
        "\\n",
        ".",
        "*",
        "$",
      ]),
    );
  }
  const src = `[${r.chance(0.3) ? "^" : ""}${parts.join("")}]`;
  const re = new RegExp(`^${src}$`);
  return { src, prec: 2, sample: (r2) => fromPool(r2, re) };
}

let groupNames = 0;

function genAtom(r: Rng, depth: number): RegexGen {
  const k = r.int(0, depth > 0 ? 9 : 6);
  if (k <= 1) {
    const c = r.pick(LITERALS);
    return { src: c, prec: 2, sample: () => c };
  }
  if (k === 2) {
    const [src, c] = r.pick(ESCAPES);
    return { src, prec: 2, sample: () => c };
  }
  if (k === 3) {
    const src = r.pick(["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "."]);
    const re = new RegExp(`^${src}$`);
    return { src, prec: 2, sample: (r2) => fromPool(r2, re) };
  }
  if (k <= 6) return genClass(r);
  const inner = genAlt(r, depth - 1);
  const open = r.pick(["(", "(?:", `(?<g${groupNames++}>`]);
  return { src: `${open}${inner.src})`, prec: 2, sample: inner.sample };
}

function genTerm(r: Rng, depth: number): RegexGen {
  const atom = genAtom(r, depth);
  if (!r.chance(0.35)) return atom;
  const [q, min, max] = r.pick<[string, number, number]>([
    ["*", 0, 3],
    ["+", 1, 3],
    ["?", 0, 1],
    ["{2}", 2, 2],
    ["{0,2}", 0, 2],
    ["{1,3}", 1, 3],
    ["{2,}", 2, 4],
    ["{0}", 0, 0],
  ]);
  const lazy = r.chance(0.2) ? "?" : "";
  return {
    src: atom.src + q + lazy,
    prec: 2,
    sample: (r2) => Array.from({ length: r2.int(min, max) }, () => atom.sample(r2)).join(""),
  };
}

function genSeq(r: Rng, depth: number): RegexGen {
  const terms = Array.from({ length: r.int(1, 4) }, () => genTerm(r, depth));
  return {
    src: terms.map((t) => t.src).join(""),
    prec: 1,
    sample: (r2) => terms.map((t) => t.sample(r2)).join(""),
  };
}

function genAlt(r: Rng, depth: number): RegexGen {
  const alts = Array.from({ length: r.chance(0.3) ? r.int(2, 3) : 1 }, () => genSeq(r, depth));
  return {
    src: alts.map((a) => a.src).join("|"),
    prec: 0,
    sample: (r2) => r2.pick(alts).sample(r2),
  };
}

Deno.test("regex: random patterns agree with RegExp full match", () => {
  const r = rng(20240601);
  let checks = 0;
  for (let n = 0; n < 400; n++) {
    const gen = genAlt(r, 2);
    const src = gen.src;
    const re = new RegExp(`^(?:${src})$`);
    const g = regexToGbnf(src);
    const texts = new Set<string>();
    for (let i = 0; i < 3; i++) texts.add(gen.sample(r));
    for (const t of [...texts]) for (let i = 0; i < 2; i++) texts.add(mutateString(r, t));
    texts.add("");
    for (const t of texts) {
      expectAccepts(g, t, re.test(t), `for /${src}/`);
      checks++;
    }
  }
  assert.ok(checks > 1500, `${checks} checks`);
});

Deno.test("regex: hand-picked semantics", () => {
  const cases: [string, string[], string[]][] = [
    ["^abc$", ["abc"], ["ab", "abcd", "^abc$"]],
    ["a|^b$|c", ["a", "b", "c"], ["", "ab"]],
    ["(a|b?c?)+x", ["x", "ax", "bcx", "cbx"], ["", "a"]],
    ["(?:a*)*b", ["b", "aaab"], ["a"]],
    ["[]a|b", ["b"], ["a", ""]],
    ["[^]", ["\n", "a", "中"], ["", "ab"]],
    ["a{,2}", ["a{,2}"], ["a", "aa"]],
    ["x{1500,}", ["x".repeat(1500), "x".repeat(2100)], ["x".repeat(1499)]],
    [".{0,2500}", ["", "y".repeat(999), "y".repeat(1000), "y".repeat(2500)], [
      "y".repeat(2501),
      "\n",
    ]],
    ["\\cJ\\0?z", ["\nz"], ["z"]],
    ["[\\b]", ["\b"], ["b"]],
    ["[\\d-z]+", ["1-z", "z"], ["a"]],
    ["\\uD83D\\uDE00", ["😀"], ["\uD83D"]],
    ["a+?b*?", ["a", "aab"], ["b"]],
    ["(?<year>\\d{4})-(?<m>0[1-9]|1[0-2])", ["2024-01", "1999-12"], ["2024-13", "24-01"]],
  ];
  for (const [src, yes, no] of cases) {
    const g = regexToGbnf(src);
    for (const t of yes) expectAccepts(g, t, true, `for /${src}/`);
    for (const t of no) expectAccepts(g, t, false, `for /${src}/`);
  }
});

Deno.test("regex: unsupported constructs are named", () => {
  const cases: [string, string | RegExp][] = [
    ["(a)\\1", "backreference \\1"],
    ["(?<n>a)\\k<n>", "backreference \\k<name>"],
    ["a(?=b)", "lookahead (?="],
    ["a(?!b)", "negative lookahead (?!"],
    ["(?<=a)b", "lookbehind (?<="],
    ["(?<!a)b", "negative lookbehind (?<!"],
    ["\\bword", "word boundary \\b"],
    ["a\\B", "non-word boundary \\B"],
    ["\\p{L}", /unicode property escape/],
    ["\\P{L}", /unicode property escape/],
    ["(?i:a)", /inline modifiers/],
    ["a^b", "^"],
    ["a$b", "$"],
    ["(^a)", "^"],
    ["*a", "quantifier"],
    ["a**", "quantifier"],
    ["a{3,1}", "quantifier"],
    ["[z-a]", "["],
    ["(a", "("],
    ["a)", ")"],
    ["\\q", "\\q"],
    ["\\u{1F600}", /\\u\{/],
    ["\\01", /octal/],
    ["a{200000}", "quantifier"],
    ["[]", "regex"],
    ["(?<n>a)(?<n>b)", "(?<"],
  ];
  for (const [src, kw] of cases) throwsConstraint(() => regexToGbnf(src), kw);
  throwsConstraint(() => regexToGbnf("a", "i"), "flags");
  for (const [src] of cases.slice(0, 10)) {
    try {
      regexToGbnf(src);
    } catch (e) {
      assert.match((e as Error).message, /unsupported construct/);
    }
  }
});

// ---------------------------------------------------------------- integers and decimals

Deno.test("integer ranges: exhaustive over -300..300", () => {
  const bounds: [bigint | null, bigint | null][] = [
    [0n, 255n],
    [-10n, 10n],
    [5n, null],
    [null, -17n],
    [-123n, 45n],
    [-250n, -100n],
    [7n, 7n],
    [0n, 0n],
    [null, null],
    [99n, 101n],
    [-9n, 200n],
    [1n, 9n],
  ];
  for (const [lo, hi] of bounds) {
    const g = render(newGrammar(), integerRange(lo, hi));
    for (let i = -300; i <= 300; i++) {
      const want = (lo === null || BigInt(i) >= lo) && (hi === null || BigInt(i) <= hi);
      expectAccepts(g, String(i), want, `in [${lo}, ${hi}]`);
    }
    for (const bad of ["-0", "00", "007", "+5", "1.0", "", "-", "1e2"]) {
      expectAccepts(g, bad, false, `in [${lo}, ${hi}]`);
    }
  }
});

Deno.test("integer schema bounds (incl. exclusive and fractional bounds)", () => {
  const cases: [Record<string, number>, number, number][] = [
    [{ minimum: 0, maximum: 255 }, 0, 255],
    [{ exclusiveMinimum: -11, exclusiveMaximum: 11 }, -10, 10],
    [{ minimum: 2.5, maximum: 7.9 }, 3, 7],
    [{ exclusiveMinimum: 2.5 }, 3, Infinity],
    [{ minimum: -5, exclusiveMinimum: -3, maximum: 100, exclusiveMaximum: 50 }, -2, 49],
    [{ maximum: -1 }, -Infinity, -1],
  ];
  for (const [kw, lo, hi] of cases) {
    const g = jsonSchemaToGbnf({ type: "integer", ...kw });
    for (let i = -120; i <= 300; i++) {
      expectAccepts(g, String(i), i >= lo && i <= hi, JSON.stringify(kw));
    }
  }
  throwsConstraint(() => jsonSchemaToGbnf({ type: "integer", minimum: 5, maximum: 4 }), "minimum");
  const big = jsonSchemaToGbnf({ type: "integer", minimum: 1e20 });
  expectAccepts(big, "100000000000000000000", true);
  expectAccepts(big, "99999999999999999999", false);
});

Deno.test("number bounds: plain decimals compared exactly", () => {
  const ajv = new Ajv2020({ strict: false });
  const r = rng(99);
  const boundsList: Record<string, number>[] = [
    { minimum: 0, maximum: 1 },
    { exclusiveMinimum: 0, exclusiveMaximum: 1 },
    { minimum: -2.5, maximum: 0.125 },
    { exclusiveMinimum: -1.75 },
    { maximum: -0.3 },
    { minimum: 0.1, exclusiveMaximum: 0.30000000000000004 },
    { minimum: 10, maximum: 10 },
    { minimum: -3.05, exclusiveMaximum: 12 },
  ];
  for (const kw of boundsList) {
    const schema = { type: "number", ...kw };
    const g = jsonSchemaToGbnf(schema);
    const validate = ajv.compile(schema);
    const texts = new Set([
      "0",
      "1",
      "-0.5",
      "0.0",
      "1.000",
      "0.3",
      "-2.5",
      "0.125",
      "-3.05",
      "12",
      "10",
    ]);
    for (let i = 0; i < 60; i++) {
      const v = Math.round((r.next() * 30 - 15) * 10 ** r.int(0, 3)) / 10 ** r.int(0, 3);
      texts.add(String(v));
      texts.add(v.toFixed(r.int(0, 4)));
    }
    for (const t of texts) {
      // Exponents and negative zero are valid JSON numbers the grammar does not write.
      if (/e/.test(t) || /^-0(\.0*)?$/.test(t)) continue;
      expectAccepts(g, t, validate(JSON.parse(t)) as boolean, JSON.stringify(kw));
    }
    for (const bad of ["-0", "01", ".5", "1.", "+1", "1e0"]) expectAccepts(g, bad, false);
  }
  // The double nearest the bound is what counts: 0.1 + 0.2 rounds to 0.30000000000000004.
  const g = jsonSchemaToGbnf({ type: "number", exclusiveMaximum: 0.30000000000000004 });
  expectAccepts(g, "0.3", true);
  expectAccepts(g, "0.30000000000000004", false);
  expectAccepts(g, "0.30000000000000003", false); // parses to the bound itself
});

// ---------------------------------------------------------------- strings

Deno.test("string length bounds count characters, not bytes or escapes", () => {
  const g = jsonSchemaToGbnf({ type: "string", minLength: 2, maxLength: 4 });
  const cases: [string, boolean][] = [
    ['"ab"', true],
    ['"a"', false],
    ['"abcd"', true],
    ['"abcde"', false],
    ['"é中"', true],
    ['"😀😀😀😀"', true],
    ['"😀😀😀😀😀"', false],
    ['"\\n\\t"', true],
    ['"\\u00e9x"', true],
    ['"\\"\\\\\\/\\b\\f"', false],
    ['"\\"\\\\\\/"', true],
    ['"\\ud83d\\ude00"', false], // surrogate escapes are not produced at all
    ['"a\nb"', false], // raw control character
    ['""', false],
  ];
  for (const [t, want] of cases) expectAccepts(g, t, want);
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "string", minLength: 3, maxLength: 2 }),
    "minLength",
  );
});

Deno.test("string pattern: anchored exact, unanchored means contains, lengths combine", () => {
  const ajv = new Ajv2020({ strict: false });
  const r = rng(5);
  const schemas = [
    { type: "string", pattern: "^[a-z]+$" },
    { type: "string", pattern: "ab" },
    { type: "string", pattern: "^x|y$" },
    { type: "string", pattern: '^["\\\\\\n]*$' },
    { type: "string", pattern: "^[a-c]+$", minLength: 2, maxLength: 4 },
    { type: "string", pattern: "b", maxLength: 3 },
    { type: "string", pattern: "^\\d{3}-\\d{2}$", maxLength: 6 },
    { type: "string", pattern: "^(foo|ba[rz])?\\d*$", minLength: 3 },
    { type: "string", pattern: "^[a-z]{1,2}-\\d*$", minLength: 4, maxLength: 6 },
  ];
  for (const schema of schemas) {
    const g = jsonSchemaToGbnf(schema);
    const validate = ajv.compile(schema);
    const seeds = [
      "",
      "abc",
      "xay",
      "ab",
      "b",
      "123-45",
      "foo12",
      "baz",
      '"\\\n',
      "yy",
      "x",
      "xab",
    ];
    const texts = new Set(seeds);
    for (const s of seeds) for (let i = 0; i < 4; i++) texts.add(mutateString(r, s));
    for (const t of texts) {
      expectAccepts(g, JSON.stringify(t), validate(t) as boolean, JSON.stringify(schema));
    }
  }
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "string", pattern: "^\\d{3}$", minLength: 4 }),
    "pattern",
  );
  // A long bound on a simple pattern stays small (the one repetition takes the bound).
  const long = jsonSchemaToGbnf({ type: "string", pattern: "^\\S+$", maxLength: 5000 });
  assert.ok(long.length < 2000, `${long.length} chars`);
  expectAccepts(long, JSON.stringify("x".repeat(5000)), true);
  expectAccepts(long, JSON.stringify("x".repeat(5001)), false);
  expectAccepts(long, JSON.stringify("x y"), false);
  // Anything else goes through the automaton × length product, which has a size limit.
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "string", pattern: "a|bc*", maxLength: 50000 }),
    "maxLength",
    "#/maxLength",
  );
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "string", pattern: "(?=a)" }),
    "pattern",
    "#/pattern",
  );
});

Deno.test("formats: date, time, date-time, uuid, email, ipv4", () => {
  const g = (format: string) => jsonSchemaToGbnf({ type: "string", format });
  const date = g("date");
  // Every day number of every month in a leap, a non-leap, a century and a 400-year year.
  for (const year of [2024, 2023, 1900, 2000]) {
    for (let m = 1; m <= 12; m++) {
      for (let d = 0; d <= 32; d++) {
        const text = `${year}-${String(m).padStart(2, "0")}-${String(d).padStart(2, "0")}`;
        const dt = new Date(Date.UTC(year, m - 1, d));
        const real = d >= 1 && dt.getUTCMonth() === m - 1 && dt.getUTCDate() === d;
        expectAccepts(date, JSON.stringify(text), real);
      }
    }
  }
  for (const bad of ["2024-1-01", "24-01-01", "2024-13-01", "2024-00-10", "2024/01/01"]) {
    expectAccepts(date, JSON.stringify(bad), false);
  }
  const time = g("time");
  for (const ok of ["00:00:00Z", "23:59:59+01:00", "12:30:45.123Z", "08:00:00-05:30"]) {
    expectAccepts(time, JSON.stringify(ok), true);
  }
  for (const bad of ["24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00Z", "1:00:00Z"]) {
    expectAccepts(time, JSON.stringify(bad), false);
  }
  const dt = g("date-time");
  expectAccepts(dt, '"2024-02-29T23:59:59.5+14:00"', true);
  expectAccepts(dt, '"2023-02-29T23:59:59Z"', false);
  expectAccepts(dt, '"2024-02-28 23:59:59Z"', false);
  const uuid = g("uuid");
  expectAccepts(uuid, `"${crypto.randomUUID()}"`, true);
  expectAccepts(uuid, '"123e4567-E89B-12d3-a456-426614174000"', true);
  expectAccepts(uuid, '"123e4567-e89b-12d3-a456-42661417400"', false);
  expectAccepts(uuid, '"123e4567e89b12d3a456426614174000"', false);
  const email = g("email");
  for (const ok of ["a@b.co", "first.last+tag@mail.example.org", "x_y@a-b.io"]) {
    expectAccepts(email, JSON.stringify(ok), true);
  }
  for (const bad of ["a@b", "@b.co", "a@-b.co", "a@b-.co", "a..b@c.de", "a b@c.de", "a@b..co"]) {
    expectAccepts(email, JSON.stringify(bad), false);
  }
  const ip = g("ipv4");
  for (const ok of ["0.0.0.0", "255.255.255.255", "192.168.1.10"]) {
    expectAccepts(ip, `"${ok}"`, true);
  }
  for (const bad of ["256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1"]) {
    expectAccepts(ip, `"${bad}"`, false);
  }
  const dateLen = jsonSchemaToGbnf({ type: "string", format: "date", maxLength: 10 });
  expectAccepts(dateLen, '"2024-01-31"', true);
  throwsConstraint(() => g("color"), "format", "#/format");
});

// ---------------------------------------------------------------- JSON Schema, random

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type SchemaGen = { schema: Record<string, Json>; valid: (r: Rng) => Json };

const KEYS = ["a", "b", "name", "x y", 'q"t', "é", "n1"];
const EXTRA_KEYS = ["extra", "zz", "k9"];

function typeOf(v: Json): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

function randomLeaf(r: Rng): Json {
  return r.pick<Json>([null, true, false, 0, 3, -2.5, "", "s", 'é"\n', [], {}, [1], { a: 1 }]);
}

function genSchema(r: Rng, depth: number, defs: Record<string, Json>): SchemaGen {
  const kinds = [
    "integer",
    "number",
    "string",
    "pattern",
    "boolean",
    "null",
    "enum",
    "const",
    "types",
  ];
  if (depth > 0) {
    kinds.push("array", "tuple", "object", "object", "anyOf", "ref", "allOf", "nullable", "tree");
  }
  const kind = r.pick(kinds);
  switch (kind) {
    case "integer": {
      const lo = r.chance(0.6) ? r.int(-50, 50) : undefined;
      const hi = r.chance(0.6) ? (lo ?? -50) + r.int(2, 80) : undefined;
      const schema: Record<string, Json> = { type: "integer" };
      if (lo !== undefined) schema[r.chance(0.5) ? "minimum" : "exclusiveMinimum"] = lo;
      if (hi !== undefined) schema[r.chance(0.5) ? "maximum" : "exclusiveMaximum"] = hi;
      const a = lo === undefined ? -1000 : lo + 1;
      const b = hi === undefined ? 1000 : hi - 1;
      return { schema, valid: (r2) => r2.int(a, b) };
    }
    case "number": {
      const lo = r.chance(0.6) ? r.int(-500, 500) / 100 : undefined;
      const hi = r.chance(0.6) ? (lo ?? -5) + r.int(1, 800) / 100 : undefined;
      const schema: Record<string, Json> = { type: "number" };
      if (lo !== undefined) schema[r.chance(0.5) ? "minimum" : "exclusiveMinimum"] = lo;
      if (hi !== undefined) schema[r.chance(0.5) ? "maximum" : "exclusiveMaximum"] = hi;
      const a = lo ?? -20;
      const b = hi ?? 20;
      return {
        schema,
        valid: (r2) =>
          Math.min(b, Math.max(a, Math.round((a + (b - a) * r2.next()) * 1000) / 1000)),
      };
    }
    case "string": {
      const min = r.int(0, 3);
      const max = r.chance(0.5) ? min + r.int(0, 4) : undefined;
      const schema: Record<string, Json> = { type: "string", minLength: min };
      if (max !== undefined) schema.maxLength = max;
      return {
        schema,
        valid: (r2) =>
          Array.from({ length: r2.int(min, max ?? min + 5) }, () => r2.pick(POOL)).join(""),
      };
    }
    case "pattern": {
      const [pattern, sample] = r.pick<[string, (r2: Rng) => string]>([
        ["^[a-z]+$", (r2) => "abcxyz".slice(r2.int(0, 3), r2.int(4, 6))],
        ["^\\d{3}-\\d{2}$", (r2) => `${r2.int(100, 999)}-${r2.int(10, 99)}`],
        ["ab", (r2) => r2.pick(["ab", "xaby", '"ab\\'])],
        ["^(foo|bar)\\d?$", (r2) => r2.pick(["foo", "bar1", "foo9"])],
        ['^["\\\\\\n ]+$', (r2) => r2.pick(['"', "\\ \n", '""'])],
      ]);
      const schema: Record<string, Json> = { type: "string", pattern };
      // Lengths on top of a pattern go through the automaton × length construction.
      if (r.chance(0.3)) schema.minLength = r.int(0, 4);
      if (r.chance(0.3)) schema.maxLength = r.int(4, 8);
      return { schema, valid: sample };
    }
    case "boolean":
      return { schema: { type: "boolean" }, valid: (r2) => r2.chance(0.5) };
    case "null":
      return { schema: { type: "null" }, valid: () => null };
    case "types": {
      const types = r.pick([["integer", "null"], ["string", "boolean"], ["number", "integer"]]);
      return {
        schema: { type: types },
        valid: (r2) =>
          r2.pick<Json>([null, 3, "s", true, 2.5].filter((v) => types.includes(typeOf(v)))),
      };
    }
    case "nullable": {
      // oneOf is compiled as alternation, which is exact when the branches cannot overlap.
      const inner = genSchema(r, depth - 1, defs);
      const t = inner.schema.type;
      if (t === undefined || t === "null" || (Array.isArray(t) && t.includes("null"))) return inner;
      return {
        schema: { oneOf: [{ type: "null" }, inner.schema] },
        valid: (r2) => (r2.chance(0.3) ? null : inner.valid(r2)),
      };
    }
    case "tree": {
      const leaf = genSchema(r, 0, defs);
      const name = `t${Object.keys(defs).length}`;
      defs[name] = {
        type: "object",
        properties: {
          v: leaf.schema,
          kids: { type: "array", items: { $ref: `#/$defs/${name}` }, maxItems: 2 },
        },
        required: ["v"],
        additionalProperties: false,
      };
      const grow = (r2: Rng, d: number): Json =>
        d === 0 || r2.chance(0.4) ? { v: leaf.valid(r2) } : {
          v: leaf.valid(r2),
          kids: Array.from({ length: r2.int(0, 2) }, () => grow(r2, d - 1)),
        };
      return { schema: { $ref: `#/$defs/${name}` }, valid: (r2) => grow(r2, 3) };
    }
    case "enum": {
      const values = Array.from({ length: r.int(1, 4) }, () => randomLeaf(r));
      return { schema: { enum: values }, valid: (r2) => r2.pick(values) };
    }
    case "const": {
      const v = randomLeaf(r);
      return { schema: { const: v }, valid: () => v };
    }
    case "array": {
      const item = genSchema(r, depth - 1, defs);
      const min = r.int(0, 2);
      const max = r.chance(0.5) ? min + r.int(0, 3) : undefined;
      const schema: Record<string, Json> = { type: "array", items: item.schema, minItems: min };
      if (max !== undefined) schema.maxItems = max;
      return {
        schema,
        valid: (r2) => Array.from({ length: r2.int(min, max ?? min + 3) }, () => item.valid(r2)),
      };
    }
    case "tuple": {
      const prefix = Array.from({ length: r.int(1, 3) }, () => genSchema(r, depth - 1, defs));
      const rest = r.chance(0.5) ? genSchema(r, depth - 1, defs) : undefined;
      const closed = !rest && r.chance(0.5);
      const min = r.int(0, prefix.length);
      const schema: Record<string, Json> = {
        type: "array",
        prefixItems: prefix.map((p) => p.schema),
        minItems: min,
      };
      if (rest) schema.items = rest.schema;
      if (closed) schema.items = false;
      return {
        schema,
        valid: (r2) => {
          const n = r2.int(min, prefix.length + (closed ? 0 : 2));
          return Array.from(
            { length: n },
            (_, i) =>
              i < prefix.length ? prefix[i].valid(r2) : rest ? rest.valid(r2) : randomLeaf(r2),
          );
        },
      };
    }
    case "object":
    case "allOf": {
      const make = (names: string[]) => {
        const props = names.map((name) => ({
          name,
          gen: genSchema(r, depth - 1, defs),
          req: r.chance(0.5),
        }));
        const schema: Record<string, Json> = {
          type: "object",
          properties: Object.fromEntries(props.map((p) => [p.name, p.gen.schema])),
          required: props.filter((p) => p.req).map((p) => p.name),
        };
        return { props, schema };
      };
      const names = KEYS.filter(() => r.chance(0.4)).slice(0, 4);
      if (kind === "allOf") {
        const cut = r.int(0, names.length);
        const a = make(names.slice(0, cut));
        const b = make(names.slice(cut));
        // A closed first branch forbids the second branch's properties (they are "additional").
        if (r.chance(0.3)) a.schema.additionalProperties = false;
        const props = a.schema.additionalProperties === false ? a.props : [...a.props, ...b.props];
        return {
          schema: { allOf: [a.schema, b.schema] },
          valid: (r2) =>
            Object.fromEntries(
              props.filter((p) => p.req || r2.chance(0.5)).map((p) => [p.name, p.gen.valid(r2)]),
            ),
        };
      }
      const { props, schema } = make(names);
      const mode = r.pick(["closed", "open", "schema"]);
      const extra = mode === "schema" ? genSchema(r, depth - 1, defs) : undefined;
      if (mode === "closed") schema.additionalProperties = false;
      if (extra) schema.additionalProperties = extra.schema;
      return {
        schema,
        valid: (r2) => {
          const out: Record<string, Json> = {};
          for (const p of props) if (p.req || r2.chance(0.5)) out[p.name] = p.gen.valid(r2);
          if (mode !== "closed" && r2.chance(0.4)) {
            out[r2.pick(EXTRA_KEYS)] = extra ? extra.valid(r2) : randomLeaf(r2);
          }
          return out;
        },
      };
    }
    case "anyOf": {
      const a = genSchema(r, depth - 1, defs);
      const b = genSchema(r, depth - 1, defs);
      return {
        schema: { anyOf: [a.schema, b.schema] },
        valid: (r2) => (r2.chance(0.5) ? a : b).valid(r2),
      };
    }
    default: {
      const target = genSchema(r, depth - 1, defs);
      const name = `d${Object.keys(defs).length}`;
      defs[name] = target.schema;
      return { schema: { $ref: `#/$defs/${name}` }, valid: target.valid };
    }
  }
}

function mutateJson(r: Rng, v: Json): Json {
  if (Array.isArray(v)) {
    if (v.length && r.chance(0.6)) {
      const i = r.int(0, v.length - 1);
      const copy = [...v];
      if (r.chance(0.3)) copy.splice(i, 1);
      else copy[i] = mutateJson(r, v[i]);
      return copy;
    }
    return [...v, randomLeaf(r)];
  }
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v);
    if (keys.length && r.chance(0.6)) {
      const k = r.pick(keys);
      if (r.chance(0.3)) {
        const { [k]: _, ...rest } = v;
        return rest;
      }
      return { ...v, [k]: mutateJson(r, v[k]) };
    }
    const k = r.pick(EXTRA_KEYS);
    return k in v ? v : { ...v, [k]: randomLeaf(r) };
  }
  if (typeof v === "number" && r.chance(0.7)) {
    return r.pick([v + 1, v - 1, v + 0.5, -v, v * 10, Math.round(v)]);
  }
  if (typeof v === "string" && r.chance(0.7)) return mutateString(r, v);
  return randomLeaf(r);
}

/**
 * `additionalProperties: false` wherever an object schema declares properties without it. The
 * branches of an `allOf` are merged by the compiler before that default applies (properties are
 * pooled), which JSON Schema says with `unevaluatedProperties: false` on the node that holds them.
 */
function closeDeclaredObjects(v: Json, inAllOf = false): Json {
  if (Array.isArray(v)) return v.map((x) => closeDeclaredObjects(x, inAllOf));
  if (typeof v !== "object" || v === null) return v;
  const out: Record<string, Json> = {};
  for (const [k, x] of Object.entries(v)) {
    // A `properties` map's keys are names, not keywords: only its values are schemas.
    out[k] = k === "properties" && typeof x === "object" && x !== null && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x).map(([n, y]) => [n, closeDeclaredObjects(y)]))
      : closeDeclaredObjects(x, k === "allOf");
  }
  const declares = (o: Json) =>
    typeof o === "object" && o !== null && !Array.isArray(o) && typeof o.properties === "object";
  if (!inAllOf && declares(out) && !("additionalProperties" in out)) {
    out.additionalProperties = false;
  }
  const branches = Array.isArray(out.allOf) ? out.allOf : [];
  if (
    branches.some(declares) &&
    !branches.some((b) => typeof b === "object" && b !== null && "additionalProperties" in b)
  ) out.unevaluatedProperties = false;
  return out;
}

Deno.test("JSON Schema: random schemas agree with ajv on canonical JSON text", () => {
  const ajv = new Ajv2020({ strict: false, validateFormats: false });
  const r = rng(424242);
  let checks = 0;
  let validSeen = 0;
  let unsatisfiable = 0;
  for (let n = 0; n < 400; n++) {
    const defs: Record<string, Json> = {};
    const gen = genSchema(r, 2, defs);
    const schema = Object.keys(defs).length ? { ...gen.schema, $defs: defs } : gen.schema;
    // The compiler closes objects that declare properties and leave additionalProperties out
    // (as llama.cpp does); ajv judges the same schema with that made explicit.
    const validate = ajv.compile(closeDeclaredObjects(schema) as Record<string, Json>);
    const values: Json[] = [];
    for (let i = 0; i < 3; i++) values.push(gen.valid(r));
    for (const v of values.slice()) for (let i = 0; i < 2; i++) values.push(mutateJson(r, v));
    values.push(randomLeaf(r));
    let g: string;
    try {
      g = jsonSchemaToGbnf(schema);
    } catch (e) {
      // The compiler may prove a schema unsatisfiable; then ajv must agree on every sample.
      assert.ok(isConstraintError(e) && /no value can satisfy/.test(e.message), String(e));
      for (const v of values) assert.equal(validate(v), false, `${JSON.stringify(v)} is valid`);
      unsatisfiable++;
      continue;
    }
    for (const v of values) {
      const want = validate(v) as boolean;
      const text = JSON.stringify(v);
      assert.equal(
        grammarAccepts(g, text),
        want,
        `${text} with ${JSON.stringify(schema)}: ajv says ${want}\n${g}`,
      );
      if (want) {
        validSeen++;
        // Pretty-printed output is fine too.
        const pretty = JSON.stringify(v, null, 2);
        if (pretty.split("\n").every((l) => l.length - l.trimStart().length <= 20)) {
          assert.ok(
            grammarAccepts(g, pretty),
            `pretty ${pretty} with ${JSON.stringify(schema)}\n${g}`,
          );
        }
      }
      checks++;
    }
  }
  assert.ok(
    checks >= 2000 && validSeen >= 800 && unsatisfiable < 20,
    `${checks} checks, ${validSeen} valid, ${unsatisfiable} unsatisfiable schemas`,
  );
});

// ---------------------------------------------------------------- JSON Schema, by hand

Deno.test("objects: order, optional subsets, additionalProperties", () => {
  const closed = jsonSchemaToGbnf({
    type: "object",
    properties: {
      a: { type: "integer" },
      b: { type: "string" },
      c: { type: "boolean" },
      d: { type: "null" },
    },
    required: ["b"],
    additionalProperties: false,
  });
  // Every subset of the optional ones, in order.
  for (let mask = 0; mask < 8; mask++) {
    const v: Record<string, Json> = {};
    if (mask & 1) v.a = 1;
    v.b = "x";
    if (mask & 2) v.c = true;
    if (mask & 4) v.d = null;
    expectAccepts(closed, JSON.stringify(v), true);
    const { b: _, ...noB } = v;
    expectAccepts(closed, JSON.stringify(noB), false);
  }
  expectAccepts(closed, '{"b":"x","a":1}', false); // out of schema order
  expectAccepts(closed, '{"b":"x","e":1}', false);
  expectAccepts(closed, '{ "a": 1, "b": "x" }', true);
  expectAccepts(closed, '{\n  "b": "x"\n}', true);
  expectAccepts(closed, '{"b":"x"}  ', false);
  expectAccepts(closed, '{"b":"x"' + " ".repeat(3) + "}", false); // no whitespace runs

  // Many optional properties stay linear in size.
  const many = Object.fromEntries(
    Array.from({ length: 60 }, (_, i) => [`p${i}`, { type: "integer" }]),
  );
  const big = jsonSchemaToGbnf({ type: "object", properties: many, additionalProperties: false });
  assert.ok(big.length < 40_000, `grammar for 60 optional properties is ${big.length} chars`);
  expectAccepts(big, '{"p3":1,"p40":2,"p59":3}', true);
  expectAccepts(big, '{"p40":2,"p3":1}', false);

  // Declared properties without additionalProperties: only those (llama.cpp's and xgrammar's
  // reading; a forced call of a zod-made MCP tool must be able to end).
  const declared = jsonSchemaToGbnf({ type: "object", properties: { a: { type: "integer" } } });
  expectAccepts(declared, '{"a":1}', true);
  expectAccepts(declared, "{}", true);
  expectAccepts(declared, '{"a":1,"zz":1}', false);
  expectAccepts(declared, '{"zz":"x"}', false);
  // An object with no declared properties stays open.
  expectAccepts(jsonSchemaToGbnf({ type: "object" }), '{"zz":[1,{"q":null}]}', true);

  const open = jsonSchemaToGbnf({
    type: "object",
    properties: { a: { type: "integer" } },
    additionalProperties: true,
  });
  expectAccepts(open, '{"a":1,"zz":[1,{"q":null}]}', true);
  expectAccepts(open, '{"zz":"x"}', true);
  expectAccepts(open, '{"a":1,"a":"dup"}', false); // extra keys never reuse a listed name
  expectAccepts(open, '{"a":"x"}', false);

  const typed = jsonSchemaToGbnf({
    type: "object",
    properties: { a: { type: "integer" } },
    required: ["a", "b"],
    additionalProperties: { type: "string" },
  });
  expectAccepts(typed, '{"a":1,"b":"x","c":"y"}', true);
  expectAccepts(typed, '{"a":1,"b":2}', false);
  expectAccepts(typed, '{"a":1}', false);
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "object", required: ["x"], additionalProperties: false }),
    "required",
  );
});

Deno.test("arrays: items, prefixItems, min/max, legacy tuple form", () => {
  const tuple = jsonSchemaToGbnf({
    type: "array",
    prefixItems: [{ type: "integer" }, { type: "string" }],
    items: { type: "boolean" },
    minItems: 1,
    maxItems: 4,
  });
  const cases: [string, boolean][] = [
    ["[]", false],
    ["[1]", true],
    ['[1,"a"]', true],
    ['[1,"a",true,false]', true],
    ['[1,"a",true,false,true]', false],
    ['["a"]', false],
    ['[1,"a",3]', false],
    ['[ 1, "a" ]', true],
  ];
  for (const [t, want] of cases) expectAccepts(tuple, t, want);
  const closed = jsonSchemaToGbnf({
    type: "array",
    items: [{ type: "null" }],
    additionalItems: false,
  });
  expectAccepts(closed, "[null]", true);
  expectAccepts(closed, "[]", true);
  expectAccepts(closed, "[null,null]", false);
  const counted = jsonSchemaToGbnf({
    type: "array",
    items: { const: 0 },
    minItems: 2,
    maxItems: 3000,
  });
  expectAccepts(counted, "[0]", false);
  expectAccepts(counted, `[${Array(3000).fill(0).join(",")}]`, true);
  expectAccepts(counted, `[${Array(3001).fill(0).join(",")}]`, false);
  throwsConstraint(
    () => jsonSchemaToGbnf({ type: "array", items: false, minItems: 1 }),
    "minItems",
  );
});

Deno.test("enum, const, anyOf, oneOf, allOf, type lists", () => {
  const e = jsonSchemaToGbnf({ enum: ["a", 1, null, { x: [true] }, 'q"'] });
  for (const t of ['"a"', "1", "null", '{"x":[true]}', '{ "x": [ true ] }', '"q\\""']) {
    expectAccepts(e, t, true);
  }
  for (const t of ['"b"', "2", '{"x":[false]}', '{"x":[true,true]}', "{}"]) {
    expectAccepts(e, t, false);
  }
  const filtered = jsonSchemaToGbnf({
    enum: ["a", "abc", "xyz", 5, 50, [1], [1, 2, 3]],
    minLength: 2,
    pattern: "^a",
    maximum: 10,
    maxItems: 2,
  });
  for (const t of ['"abc"', "5", "[1]"]) expectAccepts(filtered, t, true);
  for (const t of ['"a"', '"xyz"', "50", "[1,2,3]"]) expectAccepts(filtered, t, false);
  const typedEnum = jsonSchemaToGbnf({ type: "string", enum: ["a", 1] });
  expectAccepts(typedEnum, "1", false);
  expectAccepts(typedEnum, '"a"', true);
  expectAccepts(jsonSchemaToGbnf({ const: 1.5 }), "1.5", true);
  const types = jsonSchemaToGbnf({ type: ["integer", "null"] });
  for (const [t, want] of [["1", true], ["null", true], ["1.5", false], ['"1"', false]] as const) {
    expectAccepts(types, t, want);
  }
  const any = jsonSchemaToGbnf({
    anyOf: [{ type: "string", maxLength: 1 }, { type: "integer", minimum: 10 }],
  });
  for (const [t, want] of [['"a"', true], ['"ab"', false], ["10", true], ["9", false]] as const) {
    expectAccepts(any, t, want);
  }
  const withSiblings = jsonSchemaToGbnf({
    type: "object",
    properties: { kind: { type: "string" }, n: { type: "integer" } },
    oneOf: [{ required: ["kind"] }, { required: ["n"] }],
    additionalProperties: false,
  });
  expectAccepts(withSiblings, '{"kind":"x"}', true);
  expectAccepts(withSiblings, '{"n":1}', true);
  expectAccepts(withSiblings, "{}", false);
  const all = jsonSchemaToGbnf({
    allOf: [
      { type: "object", properties: { a: { type: "integer", minimum: 0 } }, required: ["a"] },
      { properties: { a: { maximum: 5 }, b: { type: "string" } }, required: ["b"] },
    ],
  });
  expectAccepts(all, '{"a":3,"b":"x"}', true);
  expectAccepts(all, '{"a":6,"b":"x"}', false);
  expectAccepts(all, '{"a":3}', false);
  const closedAll = jsonSchemaToGbnf({
    allOf: [
      { type: "object", properties: { a: { type: "integer" } }, additionalProperties: false },
      { type: "object", properties: { a: true, b: { type: "string" } } },
    ],
  });
  expectAccepts(closedAll, '{"a":1}', true);
  expectAccepts(closedAll, '{"a":1,"b":"x"}', false); // b is "additional" for the first branch
  throwsConstraint(
    () => jsonSchemaToGbnf({ allOf: [{ type: "string" }, { type: "integer" }] }),
    "allOf",
  );
  throwsConstraint(
    () => jsonSchemaToGbnf({ allOf: [{ pattern: "a" }, { pattern: "b" }] }),
    "pattern",
  );
});

Deno.test("$ref: $defs, definitions, root recursion, mutual recursion, bad cycles", () => {
  const tree = jsonSchemaToGbnf({
    $defs: {
      node: {
        type: "object",
        properties: {
          v: { type: "integer" },
          kids: { type: "array", items: { $ref: "#/$defs/node" } },
        },
        required: ["v"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  });
  expectAccepts(tree, '{"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]}', true);
  expectAccepts(tree, '{"v":1,"kids":[{"kids":[]}]}', false);
  const list = jsonSchemaToGbnf({
    type: "object",
    properties: { head: { type: "string" }, tail: { anyOf: [{ type: "null" }, { $ref: "#" }] } },
    required: ["head", "tail"],
    additionalProperties: false,
  });
  expectAccepts(list, '{"head":"a","tail":{"head":"b","tail":null}}', true);
  expectAccepts(list, '{"head":"a","tail":{"head":"b"}}', false);
  const mutual = jsonSchemaToGbnf({
    definitions: {
      a: { type: "array", items: { $ref: "#/definitions/b" }, maxItems: 2 },
      b: { anyOf: [{ type: "integer" }, { $ref: "#/definitions/a" }] },
    },
    $ref: "#/definitions/a",
  });
  expectAccepts(mutual, "[1,[2,[3,[]]]]", true);
  expectAccepts(mutual, "[1,2,3]", false);
  const withSibling = jsonSchemaToGbnf({
    $defs: { s: { type: "string" } },
    $ref: "#/$defs/s",
    maxLength: 2,
  });
  expectAccepts(withSibling, '"ab"', true);
  expectAccepts(withSibling, '"abc"', false);
  throwsConstraint(
    () =>
      jsonSchemaToGbnf({
        $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } },
        $ref: "#/$defs/a",
      }),
    "$ref",
  );
  throwsConstraint(() => jsonSchemaToGbnf({ anyOf: [{ $ref: "#" }, { type: "null" }] }), "$ref");
  throwsConstraint(
    () => jsonSchemaToGbnf({ $ref: "https://example.com/s.json" }),
    "$ref",
    "#/$ref",
  );
  throwsConstraint(() => jsonSchemaToGbnf({ $ref: "#/$defs/missing" }), "$ref");
});

Deno.test("any value, boolean schemas, annotations, json_object", () => {
  for (const schema of [true, {}, { title: "x", description: "y", $schema: "z", examples: [1] }]) {
    const g = jsonSchemaToGbnf(schema);
    for (const t of ['{"a":[1,2.5e-3,"x",null,true,false,{}]}', "[]", '"s"', "-0.5", "null"]) {
      expectAccepts(g, t, true);
    }
    for (const t of ["{", "[1,]", "'s'", "01", "nul", '{"a" 1}']) expectAccepts(g, t, false);
  }
  throwsConstraint(() => jsonSchemaToGbnf(false), "false", "#");
  throwsConstraint(
    () => jsonSchemaToGbnf({ properties: { a: false }, required: ["a"] }),
    "required",
  );
  const obj = jsonObjectGbnf();
  expectAccepts(obj, '{"k":{"n":[1,2]}}', true);
  expectAccepts(obj, "{}", true);
  expectAccepts(obj, "[]", false);
  expectAccepts(obj, '"s"', false);
});

Deno.test("unsupported keywords are named with their JSON pointer", () => {
  const cases: [unknown, string, string][] = [
    [{ type: "integer", minimum: 5, multipleOf: 3 }, "multipleOf", "#/multipleOf"],
    [
      { type: "object", properties: { a: { type: "number", multipleOf: 0.5 } } },
      "multipleOf",
      "#/properties/a/multipleOf",
    ],
    [
      { type: "object", patternProperties: { "^x": {} } },
      "patternProperties",
      "#/patternProperties",
    ],
    [
      { type: "object", dependentRequired: { a: ["b"] } },
      "dependentRequired",
      "#/dependentRequired",
    ],
    [{ if: { type: "string" }, then: { minLength: 1 } }, "if", "#/if"],
    [{ not: { type: "string" } }, "not", "#/not"],
    [{ type: "array", uniqueItems: true }, "uniqueItems", "#/uniqueItems"],
    [{ type: "array", contains: { type: "string" } }, "contains", "#/contains"],
    [{ type: "object", minProperties: 1 }, "minProperties", "#/minProperties"],
    [{ type: "object", maxProperties: 1 }, "maxProperties", "#/maxProperties"],
    [{ type: "object", propertyNames: { maxLength: 3 } }, "propertyNames", "#/propertyNames"],
    [
      { type: "object", unevaluatedProperties: false },
      "unevaluatedProperties",
      "#/unevaluatedProperties",
    ],
    [
      { type: "array", items: { type: "object", dependentSchemas: {} } },
      "dependentSchemas",
      "#/items/dependentSchemas",
    ],
    [{ $dynamicRef: "#meta" }, "$dynamicRef", "#/$dynamicRef"],
    [{ type: "string", format: "color" }, "format", "#/format"],
    [{ type: "string", pattern: "a(?<=b)" }, "pattern", "#/pattern"],
    [{ enum: ["a"], format: "color" }, "format", "#/format"],
    [{ type: "integer", minimum: true }, "minimum", "#/minimum"],
  ];
  for (const [schema, kw, path] of cases) {
    throwsConstraint(() => jsonSchemaToGbnf(schema), kw, path);
  }
  // Harmless forms and keywords for other types are fine.
  for (
    const ok of [
      { type: "array", uniqueItems: false },
      { type: "string", multipleOf: 3 },
      { type: "integer", multipleOf: 1 },
      { type: "object", properties: { a: {} }, required: ["a"], minProperties: 1 },
      { type: "object", properties: { a: {} }, additionalProperties: false, maxProperties: 1 },
      { type: "object", if: { type: "object" } },
      { type: "string", "x-custom": 1, readOnly: true, deprecated: true },
    ]
  ) {
    assert.ok(grammarParses(jsonSchemaToGbnf(ok)), JSON.stringify(ok));
  }
});

// ---------------------------------------------------------------- compileConstraint

Deno.test("compileConstraint: exactly one key, cached", () => {
  clearConstraintCache();
  throwsConstraint(() => compileConstraint({}), "constraint");
  try {
    compileConstraint({ regex: "a", choice: ["b"] });
  } catch (e) {
    assert.ok(isConstraintError(e));
    assert.match(e.message, /choice, regex/);
  }
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"] };
  const t0 = performance.now();
  const first = compileConstraint({ json: schema });
  const cold = performance.now() - t0;
  const t1 = performance.now();
  for (let i = 0; i < 100; i++) assert.equal(compileConstraint({ json: schema }), first);
  const warm = (performance.now() - t1) / 100;
  assert.ok(warm <= cold, `cached ${warm}ms vs cold ${cold}ms`);
  assert.equal(compileConstraint({ regex: "ab?" }), regexToGbnf("ab?"));
  assert.equal(compileConstraint({ choice: ["x", "y"] }), choiceToGbnf(["x", "y"]));
  assert.equal(compileConstraint({ grammar: 'root ::= "z"' }), 'root ::= "z"');
  // Same keys in another order are a different schema (property order is meaningful).
  const swapped = compileConstraint({
    json: { required: ["a"], properties: { a: { type: "integer" } }, type: "object" },
  });
  assert.ok(grammarParses(swapped));
  throwsConstraint(() => compileConstraint({ regex: "(?=x)" }), "lookahead (?=");
  throwsConstraint(() => compileConstraint({ regex: "(?=x)" }), "lookahead (?=");
  for (let i = 0; i < 100; i++) compileConstraint({ regex: `a{${i}}` });
  assert.ok(constraintCacheSize() <= 64);
  for (const c of [{ choice: ["x"] }, { regex: "a+" }, { json: { type: "string" } }]) {
    assert.ok(grammarParses(compileConstraint(c)));
  }
});
