/**
 * Debian's Chromium driven by playwright-core, for the web UI tests: one headless browser per
 * test file, pages that record every script error (uncaught exceptions and `console.error`), and
 * screenshots saved as test artifacts under `test-artifacts/ui/` (or `$HEARTH_TEST_ARTIFACTS`).
 *
 * Failed network loads ("Failed to load resource", e.g. while a test has stopped the server) are
 * kept apart from script errors: they are the network's doing, not the page's.
 *
 * @example
 * ```ts
 * import { launchBrowser } from "./browser.ts";
 * await using b = await launchBrowser();
 * const { page, scriptErrors } = await b.open("http://127.0.0.1:8001/");
 * await page.getByRole("textbox", { name: "Message" }).fill("hi");
 * await b.screenshot(page, "chat-typed");
 * assertEquals(scriptErrors, []);
 * ```
 * @module
 */
import { type Browser, chromium, type Page } from "playwright-core";

export const CHROMIUM = Deno.env.get("HEARTH_CHROMIUM") ?? "/usr/bin/chromium";

export const artifactsDir = Deno.env.get("HEARTH_TEST_ARTIFACTS") ??
  new URL("../../test-artifacts/ui", import.meta.url).pathname;

export type OpenedPage = {
  page: Page;
  /** Uncaught exceptions and console errors of the page's own scripts. */
  scriptErrors: string[];
  /** Resources that failed to load (connection refused while the server was down, ...). */
  networkErrors: string[];
};

export type TestBrowser = {
  browser: Browser;
  /** A new page (own context: storage is not shared between pages) at `url`. */
  open(url: string, opts?: { viewport?: { width: number; height: number } }): Promise<OpenedPage>;
  /** Saves a full-page PNG as `<artifactsDir>/<name>.png` and returns its path. */
  screenshot(page: Page, name: string): Promise<string>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
};

export async function launchBrowser(): Promise<TestBrowser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"],
  });
  await Deno.mkdir(artifactsDir, { recursive: true });
  const close = async () => {
    await browser.close().catch(() => {});
  };
  return {
    browser,
    async open(url, opts = {}) {
      const context = await browser.newContext({
        viewport: opts.viewport ?? { width: 1280, height: 800 },
        colorScheme: "light",
      });
      const page = await context.newPage();
      const scriptErrors: string[] = [];
      const networkErrors: string[] = [];
      page.on("pageerror", (e) => scriptErrors.push(`pageerror: ${e.message}`));
      page.on("console", (msg) => {
        if (msg.type() !== "error") return;
        const text = msg.text();
        if (/^Failed to load resource|net::ERR_/.test(text)) networkErrors.push(text);
        else scriptErrors.push(`console.error: ${text}`);
      });
      await page.goto(url);
      return { page, scriptErrors, networkErrors };
    },
    async screenshot(page, name) {
      const path = `${artifactsDir}/${name}.png`;
      await page.screenshot({ path, fullPage: true });
      return path;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * Polls a JavaScript expression in the page until it is truthy (an exception it throws fails at
 * once). `page.waitForFunction` with a string evaluates it with `eval` inside the page, which the
 * UI's CSP forbids; `page.evaluate` goes through the debugging protocol and is not blocked.
 */
export async function waitInPage(
  page: Page,
  expression: string,
  opts: { timeout?: number; interval?: number } = {},
): Promise<unknown> {
  const deadline = Date.now() + (opts.timeout ?? 10_000);
  while (true) {
    const value = await page.evaluate(expression);
    if (value) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting in the page for: ${expression.trim().slice(0, 200)}`);
    }
    await new Promise((r) => setTimeout(r, opts.interval ?? 100));
  }
}
