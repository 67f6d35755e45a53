// The chat page's Markdown renderer (ui/assets/markdown.js), as the tree its pure parser builds:
// blocks and inlines, partial input as it arrives mid-stream, and hostile input (raw HTML,
// script URLs) that must come out as text, never as elements or links.
import assert from "node:assert/strict";
import { inlineText, parseInline, parseMarkdown, safeHref } from "../ui/assets/markdown.js";

type Node = { type: string; [k: string]: unknown };
// Trees are read field by field here; their precise types live in markdown.js's JSDoc.
// deno-lint-ignore no-explicit-any
type Loose = any;

const blocks = (src: string): Loose[] => parseMarkdown(src).children;
const types = (src: string) => blocks(src).map((b) => b.type);

/** Every node of a tree, depth first. */
function walk(node: unknown, out: Node[] = []): Node[] {
  if (Array.isArray(node)) {
    for (const n of node) walk(n, out);
  } else if (node && typeof node === "object") {
    const n = node as Node;
    if (typeof n.type === "string") out.push(n);
    for (const v of Object.values(n)) if (typeof v === "object") walk(v, out);
  }
  return out;
}

Deno.test("markdown: paragraphs, headings, emphasis, inline code, line breaks", () => {
  assert.deepEqual(parseMarkdown("# Title\n\nSome **bold**, *em* and `x < y`.\nNext"), {
    type: "root",
    children: [
      { type: "heading", level: 1, children: [{ type: "text", value: "Title" }] },
      {
        type: "paragraph",
        children: [
          { type: "text", value: "Some " },
          { type: "strong", children: [{ type: "text", value: "bold" }] },
          { type: "text", value: ", " },
          { type: "em", children: [{ type: "text", value: "em" }] },
          { type: "text", value: " and " },
          { type: "code", value: "x < y" },
          { type: "text", value: "." },
          { type: "break" },
          { type: "text", value: "Next" },
        ],
      },
    ],
  });
  assert.deepEqual(types("Title\n===\n\nSub\n---\n\n###### six"), [
    "heading",
    "heading",
    "heading",
  ]);
  assert.equal(blocks("###### six")[0].level, 6);
  assert.deepEqual(types("#hashtag"), ["paragraph"], "a heading needs a space");
  // Nested emphasis, triple markers, strike, and the intraword underscore left alone.
  assert.deepEqual(parseInline("***a*** snake_case_name ~~gone~~ *x **y** z*"), [
    { type: "strong", children: [{ type: "em", children: [{ type: "text", value: "a" }] }] },
    { type: "text", value: " snake_case_name " },
    { type: "del", children: [{ type: "text", value: "gone" }] },
    { type: "text", value: " " },
    {
      type: "em",
      children: [
        { type: "text", value: "x " },
        { type: "strong", children: [{ type: "text", value: "y" }] },
        { type: "text", value: " z" },
      ],
    },
  ]);
  assert.deepEqual(parseInline("2 * 3 * 4 and \\*not em\\*"), [
    { type: "text", value: "2 * 3 * 4 and *not em*" },
  ]);
  assert.deepEqual(parseInline("``a ` b``"), [{ type: "code", value: "a ` b" }]);
});

Deno.test("markdown: fenced code, lists, blockquotes, tables, rules", () => {
  assert.deepEqual(blocks("```ts\nconst a = `<b>`;\n\n**not bold**\n```\nafter"), [
    { type: "codeblock", lang: "ts", value: "const a = `<b>`;\n\n**not bold**", open: false },
    { type: "paragraph", children: [{ type: "text", value: "after" }] },
  ]);
  assert.deepEqual(blocks("~~~\nx\n~~~")[0], {
    type: "codeblock",
    lang: "",
    value: "x",
    open: false,
  });

  const [ul] = blocks("- a\n- b\n  - c\n  - d\n- e");
  assert.equal(ul.type, "list");
  assert.equal(ul.ordered, false);
  assert.equal(ul.loose, false);
  assert.equal(ul.items.length, 3);
  assert.deepEqual(ul.items[1].map((b: Node) => b.type), ["paragraph", "list"]);
  assert.equal(ul.items[1][1].items.length, 2);

  const [ol] = blocks("3. three\n4. four\n   more\n\n5. five");
  assert.equal(ol.ordered, true);
  assert.equal(ol.start, 3);
  assert.equal(ol.loose, true);
  assert.equal(ol.items.length, 3);
  assert.equal(inlineText(ol.items[1][0].children), "four\nmore");
  // A nested list indented short of the content column still nests.
  const [nested] = blocks("1. a\n  - b\n2. c");
  assert.equal(nested.items.length, 2);
  assert.deepEqual(nested.items[0].map((b: Node) => b.type), ["paragraph", "list"]);

  assert.deepEqual(types("> quoted\n> > deeper\n\nplain"), ["blockquote", "paragraph"]);
  assert.deepEqual(types("one\n\n---\n\n* * *\n\n___"), ["paragraph", "hr", "hr", "hr"]);

  const [table] = blocks("| a | b | c |\n|:--|:-:|--:|\n| 1 | `x|y` | 3 |\n| 4 |");
  assert.equal(table.type, "table");
  assert.deepEqual(table.align, ["left", "center", "right"]);
  assert.deepEqual(table.head.map((c: Loose) => inlineText(c)), ["a", "b", "c"]);
  assert.deepEqual(table.rows[0][1], [{ type: "code", value: "x|y" }], "pipes in code spans");
  assert.deepEqual(table.rows[1].map((c: Loose) => inlineText(c)), ["4", "", ""], "short rows pad");
  assert.deepEqual(types("a | b\nno delimiter row"), ["paragraph"]);
});

Deno.test("markdown: partial input mid-stream renders sensibly", () => {
  // An unclosed fence runs to the end, marked open.
  assert.deepEqual(blocks("Here:\n\n```python\nprint('hi')\nfor x in"), [
    { type: "paragraph", children: [{ type: "text", value: "Here:" }] },
    { type: "codeblock", lang: "python", value: "print('hi')\nfor x in", open: true },
  ]);
  assert.deepEqual(blocks("```"), [{ type: "codeblock", lang: "", value: "", open: true }]);
  // Unclosed markers stay literal until their closer arrives.
  assert.deepEqual(parseInline("some **bold tex"), [{ type: "text", value: "some **bold tex" }]);
  assert.deepEqual(parseInline("a `code"), [{ type: "text", value: "a `code" }]);
  assert.deepEqual(parseInline("[link](https://exa"), [{
    type: "text",
    value: "[link](https://exa",
  }]);
  assert.deepEqual(types("| a | b |\n|--|--"), ["table"]);
  assert.deepEqual(types("- item\n- "), ["list"]);
  // Nothing at all, or only whitespace.
  assert.deepEqual(blocks(""), []);
  assert.deepEqual(blocks("\n\n  \n"), []);
});

Deno.test("markdown: links keep only http, https and mailto targets", () => {
  assert.deepEqual(parseInline('[docs](https://example.com/a_(b) "t")'), [
    {
      type: "link",
      href: "https://example.com/a_(b)",
      children: [{ type: "text", value: "docs" }],
    },
  ]);
  assert.deepEqual(parseInline("<mailto:a@b.c> and https://x.y/z."), [
    { type: "link", href: "mailto:a@b.c", children: [{ type: "text", value: "mailto:a@b.c" }] },
    { type: "text", value: " and " },
    { type: "link", href: "https://x.y/z", children: [{ type: "text", value: "https://x.y/z" }] },
    { type: "text", value: "." },
  ]);
  for (
    const bad of [
      "javascript:alert(1)",
      "JavaScript:alert(1)",
      " javascript:alert(1)",
      "java\tscript:alert(1)",
      "data:text/html,<script>alert(1)</script>",
      "vbscript:msgbox",
      "/relative",
      "//evil.example/x",
      "#top",
      "file:///etc/passwd",
    ]
  ) {
    assert.equal(safeHref(bad), null, bad);
  }
  assert.equal(safeHref("https://ok.example/?q=1"), "https://ok.example/?q=1");
  assert.equal(safeHref("MAILTO:x@y.z"), "MAILTO:x@y.z");
});

Deno.test("markdown: hostile input comes out as text only", () => {
  const hostile = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(document.cookie))",
    "[click](JAVASCRIPT:alert(1))",
    "![pic](javascript:alert(1))",
    "<javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "<iframe src=https://evil.example></iframe>",
    "<style>body{display:none}</style>",
  ].join("\n\n");
  const nodes = walk(parseMarkdown(hostile));
  const kinds = new Set(nodes.map((n) => n.type));
  assert.deepEqual([...kinds].sort(), ["paragraph", "root", "text"], "only paragraphs of text");
  const text = nodes.filter((n) => n.type === "text").map((n) => n.value).join("\n");
  assert.ok(text.includes("<script>alert(1)</script>"), "the markup is shown as written");
  assert.ok(text.includes('<img src=x onerror="alert(1)">'));
  assert.ok(text.includes("[click](javascript:alert(document.cookie))"));

  // An image with a safe URL becomes a link to it (never an <img>); a link's label cannot nest one.
  assert.deepEqual(parseInline("![a cat](https://img.example/cat.png)"), [
    {
      type: "link",
      href: "https://img.example/cat.png",
      children: [{ type: "text", value: "a cat" }],
    },
  ]);
  const nested = walk(parseInline("[see [inner](https://a.b) here](https://c.d)"));
  assert.equal(nested.filter((n) => n.type === "link").length, 1);

  // Pathological nesting and long marker runs stay bounded.
  const deep = ">".repeat(500) + " x\n" + "- ".repeat(300) + "y\n" + "*a ".repeat(5000);
  const t0 = performance.now();
  parseMarkdown(deep);
  assert.ok(performance.now() - t0 < 2000, "bounded time on pathological input");
});
