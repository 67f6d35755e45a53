/**
 * A small, safe Markdown renderer for model output. {@link parseMarkdown} turns text into a tree
 * of plain objects (pure: no DOM, testable anywhere); {@link renderMarkdown} builds DOM nodes from
 * it with `createElement` and text nodes only. Raw HTML is never interpreted: `<script>` in the
 * input stays the literal text `<script>`. Links keep only `http:`, `https:` and `mailto:` targets
 * (anything else stays text) and open in a new tab with `rel="noopener noreferrer"`; images are
 * shown as links, never loaded.
 *
 * Supported: paragraphs (a newline is a line break), ATX and setext headings, `*`/`_` emphasis,
 * strong, `~~strike~~`, inline code, fenced code blocks (an unclosed fence, as mid-stream, runs to
 * the end), ordered and unordered lists (nested by indentation), blockquotes, links, autolinks,
 * GFM tables, thematic breaks, backslash escapes.
 *
 * @example
 * ```js
 * import { parseMarkdown, renderMarkdown } from "./markdown.js";
 * parseMarkdown("# Hi"); // { type: "root", children: [{ type: "heading", level: 1, children: [...] }] }
 * el.replaceChildren(renderMarkdown("**bold** and `code`"));
 * ```
 * @module
 */

/**
 * @typedef {{ type: "text", value: string }
 *   | { type: "code", value: string }
 *   | { type: "break" }
 *   | { type: "em" | "strong" | "del", children: Inline[] }
 *   | { type: "link", href: string, children: Inline[] }} Inline
 * @typedef {"left" | "center" | "right" | null} Align
 * @typedef {{ type: "paragraph", children: Inline[] }
 *   | { type: "heading", level: number, children: Inline[] }
 *   | { type: "codeblock", lang: string, value: string, open: boolean }
 *   | { type: "list", ordered: boolean, start: number, loose: boolean, items: Block[][] }
 *   | { type: "blockquote", children: Block[] }
 *   | { type: "table", align: Align[], head: Inline[][], rows: Inline[][][] }
 *   | { type: "hr" }} Block
 * @typedef {{ type: "root", children: Block[] }} Root
 */

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;
const TABLE_DELIM = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;
const BLANK = /^[ \t]*$/;

/**
 * Parses Markdown into a tree of plain objects.
 * @param {string} text
 * @returns {Root}
 */
export function parseMarkdown(text) {
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").replace(/\t/g, "    ").split("\n");
  return { type: "root", children: parseBlocks(lines, 0) };
}

/** Lines this deep in nested containers are kept as text (a guard against pathological input). */
const MAX_DEPTH = 12;

/**
 * @param {string} line
 * @returns {boolean} whether the line starts a block that ends a paragraph
 */
function interrupts(line) {
  if (FENCE.test(line) || HEADING.test(line) || HR.test(line) || QUOTE.test(line)) return true;
  const m = ITEM.exec(line);
  // An ordered item interrupts a paragraph only when it starts at 1, and no item is empty.
  return !!m && m[3] !== "" && (/^[-*+]$/.test(m[2]) || parseInt(m[2], 10) === 1);
}

/**
 * @param {string[]} lines
 * @param {number} depth
 * @returns {Block[]}
 */
function parseBlocks(lines, depth) {
  /** @type {Block[]} */
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const indent = line.length - line.trimStart().length;
      const body = [];
      let open = true;
      i++;
      while (i < lines.length) {
        const l = lines[i];
        const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(l);
        if (close && close[1][0] === marker[0] && close[1].length >= marker.length) {
          open = false;
          i++;
          break;
        }
        body.push(l.replace(new RegExp(`^ {0,${indent}}`), ""));
        i++;
      }
      out.push({ type: "codeblock", lang: fence[2] ?? "", value: body.join("\n"), open });
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      out.push({
        type: "heading",
        level: heading[1].length,
        children: parseInline(heading[2] ?? ""),
      });
      i++;
      continue;
    }
    if (HR.test(line)) {
      out.push({ type: "hr" });
      i++;
      continue;
    }
    if (QUOTE.test(line) && depth < MAX_DEPTH) {
      const inner = [];
      while (i < lines.length) {
        const l = lines[i];
        if (QUOTE.test(l)) inner.push(l.replace(QUOTE, ""));
        else if (
          !BLANK.test(l) && !interrupts(l) && inner.length && !BLANK.test(inner.at(-1) ?? "")
        ) {
          inner.push(l); // lazy continuation of a quoted paragraph
        } else break;
        i++;
      }
      out.push({ type: "blockquote", children: parseBlocks(inner, depth + 1) });
      continue;
    }
    const item = ITEM.exec(line);
    if (item && depth < MAX_DEPTH) {
      i = parseList(lines, i, depth, out);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_DELIM.test(lines[i + 1])) {
      const head = splitRow(line);
      const align = splitRow(lines[i + 1]).map(alignOf);
      if (head.length === align.length) {
        i += 2;
        /** @type {Inline[][][]} */
        const rows = [];
        while (i < lines.length && !BLANK.test(lines[i]) && lines[i].includes("|")) {
          const cells = splitRow(lines[i]);
          rows.push(align.map((_, k) => parseInline(cells[k] ?? "")));
          i++;
        }
        out.push({ type: "table", align, head: head.map((c) => parseInline(c)), rows });
        continue;
      }
    }
    // A paragraph: up to a blank line or a line that starts another block.
    const para = [line.trim()];
    i++;
    let setext = 0;
    while (i < lines.length && !BLANK.test(lines[i])) {
      const l = lines[i];
      const st = SETEXT.exec(l);
      if (st) {
        setext = st[1][0] === "=" ? 1 : 2;
        i++;
        break;
      }
      if (interrupts(l)) break;
      if (l.includes("|") && i + 1 < lines.length && TABLE_DELIM.test(lines[i + 1])) break;
      para.push(l.trim());
      i++;
    }
    const children = parseInline(para.join("\n"));
    out.push(
      setext ? { type: "heading", level: setext, children } : { type: "paragraph", children },
    );
  }
  return out;
}

/**
 * Parses a list starting at `lines[start]` into `out`; returns the index after it.
 * @param {string[]} lines
 * @param {number} start
 * @param {number} depth
 * @param {Block[]} out
 */
function parseList(lines, start, depth, out) {
  const first = /** @type {RegExpExecArray} */ (ITEM.exec(lines[start]));
  const ordered = !/^[-*+]$/.test(first[2]);
  const kind = ordered ? first[2].slice(-1) : first[2];
  /** @type {Block[][]} */
  const items = [];
  let loose = false;
  let i = start;
  let sawBlank = false;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || (ordered ? m[2].slice(-1) : m[2]) !== kind || HR.test(lines[i])) break;
    if (sawBlank) loose = true;
    const spaces = m[3].length;
    // Content indent: marker width plus its spaces (one space when followed by 5 or more).
    const width = m[1].length + m[2].length + (spaces > 4 || spaces === 0 ? 1 : spaces);
    const body = [lines[i].slice(m[0].length - (spaces > 4 ? spaces - 1 : 0))];
    i++;
    sawBlank = false;
    while (i < lines.length) {
      const l = lines[i];
      if (BLANK.test(l)) {
        body.push("");
        sawBlank = true;
        i++;
        continue;
      }
      const indent = l.length - l.trimStart().length;
      // Indented enough to belong to the item; a nested item may sit short of the content column.
      if (indent >= width || (indent > m[1].length && indent >= 2 && ITEM.test(l))) {
        if (sawBlank) loose = true;
        body.push(l.slice(Math.min(indent, width)));
        sawBlank = false;
        i++;
        continue;
      }
      // A lazy continuation line of the item's paragraph.
      if (!sawBlank && !interrupts(l) && !ITEM.test(l)) {
        body.push(l.trim());
        i++;
        continue;
      }
      break;
    }
    while (body.length && BLANK.test(body.at(-1) ?? "")) body.pop();
    items.push(parseBlocks(body, depth + 1));
  }
  out.push({
    type: "list",
    ordered,
    start: ordered ? parseInt(first[2], 10) : 1,
    loose,
    items,
  });
  // Blank lines after the list belong to nobody; step back over none (the caller skips them).
  return i;
}

/**
 * Splits a table row on unescaped pipes outside code spans.
 * @param {string} line
 * @returns {string[]}
 */
function splitRow(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const cells = [];
  let cur = "";
  let tick = 0;
  for (let k = 0; k < s.length; k++) {
    const ch = s[k];
    if (ch === "\\" && s[k + 1] === "|") {
      cur += "|";
      k++;
    } else if (ch === "`") {
      let n = 1;
      while (s[k + n] === "`") n++;
      tick = tick === 0 ? n : tick === n ? 0 : tick;
      cur += "`".repeat(n);
      k += n - 1;
    } else if (ch === "|" && tick === 0) {
      cells.push(cur.trim());
      cur = "";
    } else cur += ch;
  }
  cells.push(cur.trim());
  return cells;
}

/** @param {string} cell @returns {Align} */
function alignOf(cell) {
  const l = cell.startsWith(":"), r = cell.endsWith(":");
  return l && r ? "center" : r ? "right" : l ? "left" : null;
}

/**
 * A link target this renderer will make clickable, or null: absolute `http:`, `https:` and
 * `mailto:` URLs only.
 * @param {string} href
 * @returns {string | null}
 */
export function safeHref(href) {
  const raw = String(href).trim();
  // Control characters and spaces can hide a scheme from naive checks; refuse them outright.
  // deno-lint-ignore no-control-regex
  if (!raw || /[\u0000-\u0020\u007f]/.test(raw)) return null;
  if (!/^(https?:\/\/|mailto:)/i.test(raw)) return null;
  try {
    const url = new URL(raw);
    return ["http:", "https:", "mailto:"].includes(url.protocol) ? raw : null;
  } catch {
    return null;
  }
}

const PUNCT = /[!-/:-@[-`{-~]/;

/**
 * Parses inline Markdown into text, code, emphasis, links and line breaks.
 * @param {string} src
 * @param {number} [depth]
 * @returns {Inline[]}
 */
export function parseInline(src, depth = 0) {
  /** @type {Inline[]} */
  const out = [];
  let text = "";
  /** @type {Map<string, number>} per marker run: no closer before this index (see parseEmphasis) */
  const noCloser = new Map();
  const flush = () => {
    if (text) out.push({ type: "text", value: text });
    text = "";
  };
  /** @param {Inline} node */
  const push = (node) => {
    flush();
    out.push(node);
  };
  let i = 0;
  while (i < src.length) {
    const ch = src[i];
    const rest = src.slice(i);
    if (ch === "\\") {
      const next = src[i + 1];
      if (next === "\n") {
        push({ type: "break" });
        i += 2;
        continue;
      }
      if (next !== undefined && PUNCT.test(next)) {
        text += next;
        i += 2;
        continue;
      }
    }
    if (ch === "\n") {
      text = text.replace(/ +$/, "");
      push({ type: "break" });
      i++;
      while (src[i] === " ") i++;
      continue;
    }
    if (ch === "`") {
      const run = /^`+/.exec(rest)?.[0] ?? "`";
      const end = findRun(src, i + run.length, run);
      if (end >= 0) {
        let code = src.slice(i + run.length, end).replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        push({ type: "code", value: code });
        i = end + run.length;
      } else {
        text += run;
        i += run.length;
      }
      continue;
    }
    if (ch === "<") {
      const auto = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(rest);
      const href = auto && safeHref(auto[1]);
      if (auto && href) {
        push({ type: "link", href, children: [{ type: "text", value: auto[1] }] });
        i += auto[0].length;
        continue;
      }
    }
    // A bare URL starts a word (not an attribute value, not the target of a `](` being typed).
    const prev = text ? text.at(-1) : " ";
    if (
      ch === "h" && /^https?:\/\//.test(rest) && /[\s(*_~]/.test(prev ?? "") && !/\]\($/.test(text)
    ) {
      const m = /^https?:\/\/[^\s<>]*[^\s<>.,:;"'!?)\]*_~]/.exec(rest);
      let url = m?.[0] ?? "";
      // Keep a closing paren when the URL opened one (Wikipedia-style links).
      while (url && count(url, "(") > count(url, ")") && rest[url.length] === ")") url += ")";
      const href = url && safeHref(url);
      if (href) {
        push({ type: "link", href, children: [{ type: "text", value: url }] });
        i += url.length;
        continue;
      }
    }
    if (ch === "[" || (ch === "!" && src[i + 1] === "[")) {
      const link = parseLink(src, ch === "!" ? i + 1 : i);
      if (link) {
        const href = safeHref(link.href);
        if (href && depth < MAX_DEPTH) {
          const label = ch === "!"
            ? [{ type: "text", value: link.label || link.href }]
            : parseInline(
              link.label,
              depth + 1,
            ).filter((n) => n.type !== "link");
          push({ type: "link", href, children: /** @type {Inline[]} */ (label) });
        } else text += src.slice(i, link.end); // not a safe target: the source, as text
        i = link.end;
        continue;
      }
    }
    if ((ch === "*" || ch === "_" || ch === "~") && depth < MAX_DEPTH) {
      const em = parseEmphasis(src, i, text, depth, noCloser);
      if (em) {
        push(em.node);
        i = em.end;
        continue;
      }
      const run = /^(\*+|_+|~+)/.exec(rest)?.[0] ?? ch;
      text += run;
      i += run.length;
      continue;
    }
    text += ch;
    i++;
  }
  flush();
  return out;
}

/** @param {string} s @param {string} ch */
function count(s, ch) {
  return s.split(ch).length - 1;
}

/**
 * Index of the next backtick run exactly equal to `run` at or after `from`, or -1.
 * @param {string} src
 * @param {number} from
 * @param {string} run
 */
function findRun(src, from, run) {
  let k = from;
  while (k < src.length) {
    const at = src.indexOf(run, k);
    if (at < 0) return -1;
    let end = at + run.length;
    if (src[at - 1] !== "`" && src[end] !== "`") return at;
    while (src[end] === "`") end++;
    k = end;
  }
  return -1;
}

const URL_RUN = /[^\s()]+/y;

/**
 * `[label](href "title")` starting at `src[i] === "["`.
 * @param {string} src
 * @param {number} i
 * @returns {{ label: string, href: string, end: number } | null}
 */
function parseLink(src, i) {
  let depth = 0;
  let k = i;
  // Labels and targets are bounded, so text full of brackets stays linear.
  const end = Math.min(src.length, i + 1000);
  for (; k < end; k++) {
    const c = src[k];
    if (c === "\\") {
      k++;
      continue;
    }
    if (c === "`") {
      const run = /^`+/.exec(src.slice(k))?.[0] ?? "`";
      const end = findRun(src, k + run.length, run);
      if (end >= 0) k = end + run.length - 1;
      continue;
    }
    if (c === "[") depth++;
    else if (c === "]" && --depth === 0) break;
  }
  if (k >= end || src[k + 1] !== "(") return null;
  const label = src.slice(i + 1, k);
  let j = k + 2;
  while (src[j] === " ") j++;
  let href = "";
  if (src[j] === "<") {
    const close = src.indexOf(">", j);
    if (close < 0) return null;
    href = src.slice(j + 1, close);
    j = close + 1;
  } else {
    let parens = 0;
    const from = j;
    const stop = Math.min(src.length, j + 2048);
    while (j < stop) {
      URL_RUN.lastIndex = j;
      if (URL_RUN.exec(src)) j = URL_RUN.lastIndex;
      const c = src[j];
      if (c === "(") {
        if (++parens > 32) return null; // as CommonMark implementations bound it
      } else if (c === ")" && parens > 0) parens--;
      else break;
      j++;
    }
    if (j >= stop && stop < src.length) return null;
    href = src.slice(from, j);
  }
  while (src[j] === " ") j++;
  const title = /^("[^"]*"|'[^']*'|\([^)]*\))\s*/.exec(src.slice(j));
  if (title) j += title[0].length;
  if (src[j] !== ")") return null;
  return { label, href, end: j + 1 };
}

/**
 * Emphasis (`*x*`, `_x_`), strong (`**x**`, `__x__`), both (`***x***`) or strike (`~~x~~`) at
 * `src[i]`, closed later in `src` by the same run; null when it does not open or never closes.
 * @param {string} src
 * @param {number} i
 * @param {string} before text just before, for the word-boundary rule of `_`
 * @param {number} depth
 * @param {Map<string, number>} noCloser where an earlier search for each run gave up: closers do
 *   not depend on their opener, so a later opener resumes there (linear time, not quadratic)
 * @returns {{ node: Inline, end: number } | null}
 */
function parseEmphasis(src, i, before, depth, noCloser) {
  const ch = src[i];
  let n = 0;
  while (src[i + n] === ch) n++;
  if (ch === "~" && n !== 2) return null;
  if (n > 3) return null;
  const after = src[i + n];
  if (after === undefined || /\s/.test(after)) return null;
  const prev = before.at(-1) ?? src[i - 1] ?? "";
  if (ch === "_" && /[\p{L}\p{N}]/u.test(prev)) return null;
  const run = ch.repeat(n);
  let k = Math.max(i + n, noCloser.get(run) ?? 0);
  // Emphasis rarely spans pages; a bound keeps many unclosed markers from going quadratic.
  const limit = Math.min(src.length, i + 4000);
  let tick = src.indexOf("`", k);
  while (k < limit) {
    const at = src.indexOf(run, k);
    if (at < 0 || at >= limit) {
      noCloser.set(run, at < 0 ? Infinity : limit);
      return null;
    }
    // Skip over code spans between the delimiters.
    if (tick >= 0 && tick < k) tick = src.indexOf("`", k);
    if (tick >= 0 && tick < at) {
      const r = /^`+/.exec(src.slice(tick))?.[0] ?? "`";
      const end = findRun(src, tick + r.length, r);
      if (end >= 0 && end + r.length > at) {
        k = end + r.length;
        continue;
      }
    }
    const closeOk = at > i + n && !/\s/.test(src[at - 1]) && src[at + n] !== ch &&
      src[at - 1] !== ch && !(ch === "_" && /[\p{L}\p{N}]/u.test(src[at + n] ?? ""));
    if (!closeOk) {
      k = at + 1;
      continue;
    }
    const inner = parseInline(src.slice(i + n, at), depth + 1);
    /** @type {Inline} */
    let node;
    if (ch === "~") node = { type: "del", children: inner };
    else if (n === 1) node = { type: "em", children: inner };
    else if (n === 2) node = { type: "strong", children: inner };
    else node = { type: "strong", children: [{ type: "em", children: inner }] };
    return { node, end: at + n };
  }
  noCloser.set(run, limit);
  return null;
}

/**
 * Plain text of inline nodes (for tests and titles).
 * @param {Inline[]} nodes
 * @returns {string}
 */
export function inlineText(nodes) {
  return nodes.map((n) =>
    n.type === "text" || n.type === "code"
      ? n.value
      : n.type === "break"
      ? "\n"
      : inlineText(n.children)
  ).join("");
}

/**
 * DOM nodes for Markdown text (or an already parsed tree), built without any HTML parsing.
 * @param {string | Root} src
 * @param {Document} [doc]
 * @returns {DocumentFragment}
 */
export function renderMarkdown(src, doc = document) {
  const tree = typeof src === "string" ? parseMarkdown(src) : src;
  const frag = doc.createDocumentFragment();
  for (const b of tree.children) frag.appendChild(renderBlock(b, doc, false));
  return frag;
}

/**
 * @param {Document} doc
 * @param {string} tag
 * @param {Node[]} [children]
 * @returns {HTMLElement}
 */
function el(doc, tag, children = []) {
  const e = doc.createElement(tag);
  for (const c of children) e.appendChild(c);
  return e;
}

/**
 * @param {Block} b
 * @param {Document} doc
 * @param {boolean} tight paragraphs of a tight list item render without `<p>`
 * @returns {Node}
 */
function renderBlock(b, doc, tight) {
  switch (b.type) {
    case "paragraph":
      if (tight) {
        const frag = doc.createDocumentFragment();
        for (const n of renderInlines(b.children, doc)) frag.appendChild(n);
        return frag;
      }
      return el(doc, "p", renderInlines(b.children, doc));
    case "heading":
      return el(doc, `h${Math.min(6, Math.max(1, b.level))}`, renderInlines(b.children, doc));
    case "codeblock": {
      const code = el(doc, "code", [doc.createTextNode(b.value)]);
      const lang = b.lang.replace(/[^\w+#.-]/g, "");
      if (lang) {
        code.className = `language-${lang}`;
        code.dataset.lang = lang;
      }
      const pre = el(doc, "pre", [code]);
      if (b.open) pre.className = "open";
      return pre;
    }
    case "list": {
      const list = el(doc, b.ordered ? "ol" : "ul");
      if (b.ordered && b.start !== 1) list.setAttribute("start", String(b.start));
      for (const item of b.items) {
        list.appendChild(el(doc, "li", item.map((c) => renderBlock(c, doc, !b.loose))));
      }
      return list;
    }
    case "blockquote":
      return el(doc, "blockquote", b.children.map((c) => renderBlock(c, doc, false)));
    case "table": {
      /** @param {Inline[]} cell @param {number} k @param {string} tag */
      const cellEl = (cell, k, tag) => {
        const c = el(doc, tag, renderInlines(cell, doc));
        const a = b.align[k];
        if (a) c.className = `align-${a}`;
        return c;
      };
      const head = el(doc, "thead", [el(doc, "tr", b.head.map((c, k) => cellEl(c, k, "th")))]);
      const body = el(
        doc,
        "tbody",
        b.rows.map((r) => el(doc, "tr", r.map((c, k) => cellEl(c, k, "td")))),
      );
      const table = el(doc, "table", b.rows.length ? [head, body] : [head]);
      const wrap = el(doc, "div", [table]);
      wrap.className = "table-wrap";
      return wrap;
    }
    case "hr":
      return el(doc, "hr");
  }
  return doc.createTextNode("");
}

/**
 * @param {Inline[]} nodes
 * @param {Document} doc
 * @returns {Node[]}
 */
function renderInlines(nodes, doc) {
  return nodes.map((n) => {
    switch (n.type) {
      case "text":
        return doc.createTextNode(n.value);
      case "code":
        return el(doc, "code", [doc.createTextNode(n.value)]);
      case "break":
        return el(doc, "br");
      case "em":
      case "strong":
      case "del":
        return el(doc, n.type, renderInlines(n.children, doc));
      case "link": {
        const href = safeHref(n.href);
        if (!href) return doc.createTextNode(inlineText(n.children));
        const a = el(doc, "a", renderInlines(n.children, doc));
        a.setAttribute("href", href);
        a.setAttribute("rel", "noopener noreferrer");
        a.setAttribute("target", "_blank");
        return a;
      }
    }
    return doc.createTextNode("");
  });
}
