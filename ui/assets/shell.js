/**
 * The frame every page shares: marks the current page in the navigation, and shows the header's
 * "API key" form when the server answers 401 (`hearth:need-key`); saving it fires
 * `hearth:key-changed` so the page retries what failed.
 *
 * @example
 * ```js
 * import { initShell } from "./shell.js";
 * initShell();
 * addEventListener("hearth:key-changed", () => reload());
 * ```
 * @module
 */
import { getApiKey, setApiKey } from "./api.js";

export function initShell() {
  const here = location.pathname.replace(/\/+$/, "").split("/").pop() ?? "";
  for (const a of document.querySelectorAll("nav.pages a")) {
    const target = (a.getAttribute("href") ?? "").replace(/^\.\//, "");
    const page = here === "ui" ? "" : here;
    if (target === page) a.setAttribute("aria-current", "page");
  }
  const form = /** @type {HTMLFormElement | null} */ (document.querySelector("form.key-form"));
  if (!form) return;
  const input = /** @type {HTMLInputElement} */ (form.querySelector("input"));
  const note = /** @type {HTMLElement} */ (form.querySelector(".key-note"));
  input.value = getApiKey();
  addEventListener("hearth:need-key", (e) => {
    form.hidden = false;
    note.textContent = /** @type {CustomEvent} */ (e).detail ?? "This server needs an API key.";
    if (document.activeElement?.tagName !== "TEXTAREA") input.focus();
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    setApiKey(input.value.trim());
    form.hidden = true;
    dispatchEvent(new CustomEvent("hearth:key-changed"));
  });
}
