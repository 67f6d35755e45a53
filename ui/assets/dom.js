/**
 * A few DOM helpers shared by the pages: `h()` builds elements from plain values (text always goes
 * in as text nodes, never as HTML), `clear()` empties a node, `onReady()` runs after parsing.
 *
 * @example
 * ```js
 * import { h } from "./dom.js";
 * document.body.append(h("button", { type: "button", onclick: () => alert(1) }, "Send"));
 * ```
 * @module
 */

/**
 * Creates an element. `attrs`: `class`, `text`, `on<event>` (listeners), `dataset` (object),
 * boolean values toggle the attribute, `null`/`undefined`/`false` skip it; anything else becomes an
 * attribute. Children: nodes, strings (as text), arrays (flattened), null/false (skipped).
 * @param {string} tag
 * @param {Record<string, unknown>} [attrs]
 * @param {...unknown} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") el.textContent = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    } else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

/**
 * @param {Node} el
 * @param {unknown[]} children
 */
function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** @param {Node} el */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/**
 * `document.querySelector` that throws when the page lacks the element (a broken page should fail
 * loudly in tests, not half-work).
 * @template {Element} T
 * @param {string} selector
 * @returns {T}
 */
export function $(selector) {
  const el = document.querySelector(selector);
  if (!el) throw new Error(`page has no ${selector}`);
  return /** @type {T} */ (el);
}

/** Formats a number of bytes for people. @param {number} n */
export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
