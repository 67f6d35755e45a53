// The video page in real Chromium against real `hearth serve` processes (the UI on --ui-port, the
// video API behind it): a 4 s video generated from the form (progress bar while polling, then a
// <video> whose metadata says 4 s), the options the form offers per model, API errors worded as
// the API words them (a prompt over the token limit, the operator's blocklist), the "API key"
// textbox of a server with keys, and no script errors anywhere.
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import type { Page } from "playwright-core";
import { launchBrowser, type OpenedPage, waitInPage } from "./support/browser.ts";
import { tinyModelPath } from "./support/models.ts";
import { freePort, type RunningServer, startServer } from "./support/server.ts";

const KEY = "ui-video-key";
const FAST = "veo-3.1-fast-generate-preview";
const LITE = "veo-3.1-lite-generate-preview";
const VEO2 = "veo-2.0-generate-001";
const BLOCKED = "forbidden thing";
/** A 1x1 PNG: a real image, so the renderer can use it as the first frame. */
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==",
  "base64",
);

type UiServer = { server: RunningServer; ui: string };

async function startUiServer(dir: string, env: Record<string, string> = {}): Promise<UiServer> {
  const uiPort = freePort();
  const server = await startServer([
    "--model",
    await tinyModelPath(),
    "--threads",
    "1",
    "--max-batch",
    "1",
    "--max-seq-len",
    "2048",
    "--ui-server",
    "--ui-port",
    String(uiPort),
    "--data-dir",
    dir,
    "--video-blocklist",
    `${dir}/blocklist.txt`,
  ], { env });
  return { server, ui: `http://127.0.0.1:${uiPort}` };
}

/** Records, in the page, whether a progressbar was ever shown (however briefly). */
async function watchProgress(page: Page) {
  // Page code as strings: this file is type-checked without the DOM library.
  await page.evaluate(`(() => {
    globalThis.sawProgress = false;
    new MutationObserver(() => {
      if (document.querySelector("[role=progressbar], progress")) globalThis.sawProgress = true;
    }).observe(document.body, { childList: true, subtree: true });
  })()`);
}

/** Waits for the result's <video> to load its metadata and returns its duration. */
async function videoDuration(page: Page): Promise<number> {
  const video = page.locator(".video-result video").first();
  await video.waitFor({ state: "visible", timeout: 60_000 });
  await waitInPage(
    page,
    `(() => {
      const v = document.querySelector(".video-result video");
      if (v && v.error) throw new Error("video error " + v.error.code + ": " + v.error.message);
      return v !== null && v.readyState >= 2 && Number.isFinite(v.duration) && v.duration > 0;
    })()`,
    { timeout: 20_000 },
  );
  return await video.evaluate((v) => (v as unknown as { duration: number }).duration);
}

const optionTexts = (page: Page, name: string) =>
  page.getByRole("combobox", { name, exact: true }).locator("option").allTextContents();

Deno.test("video page: generate from the form, options per model, API errors, API key", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-ui-video-" });
  await Deno.mkdir(`${dir}/open`);
  await Deno.mkdir(`${dir}/keyed`);
  for (const sub of ["open", "keyed"]) {
    await Deno.writeTextFile(`${dir}/${sub}/blocklist.txt`, `${BLOCKED}\n`);
  }
  const browser = await launchBrowser();
  const servers: UiServer[] = [];
  const pages: OpenedPage[] = [];
  try {
    const started = await Promise.allSettled([
      startUiServer(`${dir}/open`),
      startUiServer(`${dir}/keyed`, { HEARTH_VIDEO_API_KEYS: `other,${KEY}` }),
    ]);
    for (const r of started) if (r.status === "fulfilled") servers.push(r.value);
    for (const r of started) if (r.status === "rejected") throw r.reason;
    const [open, keyed] = servers;

    await t.step(
      "a 4 s video from the form: progress while polling, then 4 s of <video>",
      async () => {
        const p = await browser.open(`${open.ui}/video`);
        pages.push(p);
        const { page } = p;
        const model = page.getByRole("combobox", { name: "Model", exact: true });
        await model.selectOption(FAST);
        await page.getByRole("textbox", { name: "Prompt", exact: true }).fill(
          "A red kite over a beach at dawn, slow pan",
        );
        await page.getByRole("combobox", { name: "Duration", exact: true }).selectOption("4");
        assert.equal(await page.getByRole("textbox", { name: "API key" }).count(), 0);
        assert.equal(
          await page.getByRole("combobox", { name: "Person generation" }).inputValue(),
          "allow_all",
        );
        await browser.screenshot(page, "video-form");
        await watchProgress(page);
        await page.getByRole("button", { name: "Generate", exact: true }).click();
        const bar = page.getByRole("progressbar");
        try {
          await bar.waitFor({ state: "visible", timeout: 10_000 });
          await browser.screenshot(page, "video-polling");
        } catch {
          // Rendering beat the screenshot; the observer below still proves the bar was shown.
        }
        const duration = await videoDuration(page);
        assert.ok(Math.abs(duration - 4) <= 0.1, `the video lasts ${duration} s`);
        assert.equal(
          await page.evaluate("globalThis.sawProgress"),
          true,
          "a progressbar was shown while polling",
        );
        assert.equal(await bar.count(), 0, "the progressbar is gone once the video is there");
        const src = await page.locator(".video-result video").getAttribute("src");
        assert.match(src ?? "", /\/v1beta\/files\/[a-z0-9]{12}:download\?alt=media$/);
        // The recent list has it, done.
        const recent = page.getByRole("list", { name: "Recent operations" });
        assert.match(await recent.innerText(), /done[\s\S]*Veo 3\.1 Fast · 4 s/);
        // Best effort: let the player buffer, so the screenshot shows a frame, not a spinner.
        await waitInPage(page, `document.querySelector(".video-result video").readyState >= 4`, {
          timeout: 5000,
        }).catch(() => {});
        await browser.screenshot(page, "video-done");
        assert.deepEqual(p.scriptErrors, []);
      },
    );

    await t.step(
      "a first frame from a file: previewed, changes the mode, sent and rendered",
      async () => {
        const { page } = pages[0];
        await page.getByLabel("First frame", { exact: true }).setInputFiles({
          name: "frame.png",
          mimeType: "image/png",
          buffer: PNG,
        });
        await page.getByRole("img", { name: "first frame preview" }).waitFor();
        assert.match(await page.locator(".mode-line").innerText(), /Image to video/);
        assert.deepEqual(await optionTexts(page, "Person generation"), ["allow_adult"]);
        assert.equal(await page.getByLabel("Last frame", { exact: true }).isEnabled(), true);
        assert.equal(await page.getByLabel("Reference images", { exact: true }).isDisabled(), true);
        await page.getByRole("textbox", { name: "Prompt", exact: true }).fill(
          "The frame comes alive",
        );
        await page.getByRole("combobox", { name: "Duration", exact: true }).selectOption("4");
        await page.getByRole("button", { name: "Generate", exact: true }).click();
        // Accepted and rendered: this proves the image went out, since the only person generation
        // offered now (allow_adult) is refused for text-to-video on 3.1.
        await page.locator(".video-result:has(video)", { hasText: "The frame comes alive" })
          .waitFor({
            timeout: 60_000,
          });
        const duration = await videoDuration(page);
        assert.ok(Math.abs(duration - 4) <= 0.1, `the video lasts ${duration} s`);

        await page.getByRole("button", { name: "Remove first frame" }).click();
        assert.match(await page.locator(".mode-line").innerText(), /Text to video/);
        assert.equal(await page.getByLabel("Last frame", { exact: true }).isDisabled(), true);

        // Extending it: 720p, the video's aspect ratio, 8 s; no images beside it.
        await page.getByRole("button", { name: "Extend", exact: true }).click();
        assert.match(await page.locator(".mode-line").innerText(), /Extend a video/);
        assert.deepEqual(await optionTexts(page, "Resolution"), ["720p"]);
        assert.deepEqual(await optionTexts(page, "Aspect ratio"), ["16:9"]);
        assert.deepEqual(await optionTexts(page, "Duration"), ["8"]);
        assert.equal(await page.getByLabel("First frame", { exact: true }).isDisabled(), true);
        await page.getByRole("button", { name: "Remove video" }).click();
        assert.match(await page.locator(".mode-line").innerText(), /Text to video/);
        assert.deepEqual(pages[0].scriptErrors, []);
      },
    );

    await t.step("each model's options: Lite has no 4k, Veo 2 offers 5, 6, 8 s", async () => {
      const { page } = pages[0];
      const model = page.getByRole("combobox", { name: "Model", exact: true });
      await model.selectOption(FAST);
      assert.deepEqual(await optionTexts(page, "Resolution"), ["720p", "1080p", "4k"]);
      await page.getByRole("combobox", { name: "Resolution", exact: true }).selectOption("1080p");
      assert.deepEqual(await optionTexts(page, "Duration"), ["8"], "1080p on 3.1: 8 s only");
      await model.selectOption(LITE);
      assert.deepEqual(await optionTexts(page, "Resolution"), ["720p", "1080p"]);
      await model.selectOption(VEO2);
      assert.deepEqual(await optionTexts(page, "Duration"), ["5", "6", "8"]);
      const resolution = page.getByRole("combobox", { name: "Resolution", exact: true });
      assert.deepEqual(await optionTexts(page, "Resolution"), ["720p"]);
      assert.equal(await resolution.isDisabled(), true, "Veo 2 takes no resolution parameter");
      assert.deepEqual(await optionTexts(page, "Person generation"), [
        "allow_adult",
        "allow_all",
        "dont_allow",
      ]);
      assert.equal(await page.getByRole("spinbutton", { name: "Seed" }).isVisible(), false);
      assert.equal(
        await page.getByRole("combobox", { name: "Sample count" }).isVisible(),
        true,
        "Veo 2 makes up to 2 videos",
      );
      assert.equal(await page.getByLabel("Last frame").isVisible(), false);
      assert.equal(await page.getByLabel("First frame").isVisible(), true);
      await model.selectOption(FAST);
      assert.equal(await page.getByLabel("Reference images").isVisible(), true);
      assert.equal(await page.getByRole("spinbutton", { name: "Seed" }).isVisible(), true);
      assert.deepEqual(pages[0].scriptErrors, []);
    });

    await t.step("API errors are shown as the API words them", async () => {
      const { page } = pages[0];
      await page.getByRole("combobox", { name: "Model", exact: true }).selectOption(FAST);
      await page.getByRole("combobox", { name: "Resolution", exact: true }).selectOption("720p");
      const long = "lighthouse ".repeat(1100).trim();
      // What the API itself says about this prompt.
      const direct = await fetch(`${open.server.url}/v1beta/models/${FAST}:predictLongRunning`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ instances: [{ prompt: long }] }),
      });
      assert.equal(direct.status, 400);
      const expected = (await direct.json()).error.message as string;
      assert.match(expected, /maximum is 1024 tokens/);
      await page.getByRole("textbox", { name: "Prompt", exact: true }).fill(long);
      await page.getByRole("button", { name: "Generate", exact: true }).click();
      const alert = page.getByRole("alert");
      await alert.waitFor({ state: "visible" });
      assert.equal((await alert.textContent())?.trim(), expected);
      await browser.screenshot(page, "video-error");

      // The operator's blocklist: the operation ends at once, filtered, with the API's reason.
      await page.getByRole("textbox", { name: "Prompt", exact: true }).fill(
        `A ${BLOCKED} at noon`,
      );
      await page.getByRole("button", { name: "Generate", exact: true }).click();
      await page.getByRole("alert").filter({ hasText: "usage guidelines" }).waitFor();
      const reason = (await page.getByRole("alert").textContent())?.trim();
      assert.match(reason ?? "", /^Veo could not generate videos because the prompt violates/);
      assert.match(
        await page.getByRole("list", { name: "Recent operations" }).innerText(),
        /blocked/,
      );
      assert.deepEqual(pages[0].scriptErrors, []);
    });

    await t.step("the same page under /ui/ on the API port", async () => {
      const p = await browser.open(`${open.server.url}/ui/video`);
      pages.push(p);
      const model = p.page.getByRole("combobox", { name: "Model", exact: true });
      await waitInPage(p.page, `!document.querySelector("select[name=model]").disabled`);
      assert.deepEqual(await model.locator("option").evaluateAll((o) => o.length), 6);
      assert.match(await p.page.getByRole("list", { name: "Recent operations" }).innerText(), /^$/);
      assert.deepEqual(p.scriptErrors, []);
    });

    await t.step(
      "a server with keys: the API key textbox, and the request works with it",
      async () => {
        const p = await browser.open(`${keyed.ui}/video`);
        pages.push(p);
        const { page } = p;
        const keyBox = page.getByRole("textbox", { name: "API key", exact: true });
        await keyBox.waitFor({ state: "visible" });
        await page.getByRole("textbox", { name: "Prompt", exact: true }).fill("Rain on a tin roof");
        await page.getByRole("combobox", { name: "Duration", exact: true }).selectOption("4");
        const generate = page.getByRole("button", { name: "Generate", exact: true });
        await generate.click();
        await page.getByRole("alert").filter({ hasText: "unregistered callers" }).waitFor();
        assert.match(
          (await page.getByRole("alert").textContent()) ?? "",
          /^Method doesn't allow unregistered callers/,
        );
        await keyBox.fill("wrong-key");
        await generate.click();
        await page.getByRole("alert").filter({ hasText: "API key not valid" }).waitFor();
        assert.equal(
          (await page.getByRole("alert").textContent())?.trim(),
          "API key not valid. Please pass a valid API key.",
        );
        await keyBox.fill(KEY);
        await generate.click();
        const duration = await videoDuration(page);
        assert.ok(Math.abs(duration - 4) <= 0.1, `the video lasts ${duration} s`);
        // The key is kept in this browser.
        await page.reload();
        await keyBox.waitFor({ state: "visible" });
        assert.equal(await keyBox.inputValue(), KEY);
        assert.deepEqual(p.scriptErrors, []);
      },
    );
  } finally {
    for (const p of pages) await p.page.context().close().catch(() => {});
    await browser.close();
    await Promise.all(servers.map((s) => s.server.stop()));
    await Deno.remove(dir, { recursive: true });
  }
});
