// The chat page (ui/index.html + ui/assets/chat.js) in real Chromium against one real `hearth
// serve` (the tiny random-weight model; the UI on --ui-port): a reply streams into an article
// "assistant" and Stop ends it with no sequence left running (GET /metrics); tokens and tokens/s
// under a finished reply; structured output settings (choice, JSON Schema) constrain the reply; an
// API error shows in the API's words, and a schema that is not JSON never leaves the page;
// conversations survive a reload and can be switched and deleted; model output with HTML stays
// text; the Model combobox only with several models; and no script errors anywhere. The request
// building in conversations.js is unit-tested first, without a browser.
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { launchBrowser, waitInPage } from "./support/browser.ts";
import { tinyModelPath } from "./support/models.ts";
import { freePort, startServer } from "./support/server.ts";
import {
  buildRequest,
  defaultSettings,
  loadConversations,
  requestMessages,
  saveConversations,
} from "../ui/assets/conversations.js";

// deno-lint-ignore no-explicit-any
type Loose = any;

Deno.test("chat page: request bodies from the settings", () => {
  const user = { role: "user" as const, content: "hi" };
  const base = defaultSettings();
  assert.deepEqual(buildRequest(base, [user], "m"), {
    body: {
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
      model: "m",
    },
  });
  const choice: Loose = buildRequest(
    { ...base, mode: "choice", choices: " red\n\ngreen \r\nblue", temperature: "0.5" },
    [user],
  );
  assert.deepEqual(choice.body.structured_outputs, { choice: ["red", "green", "blue"] });
  assert.equal(choice.body.temperature, 0.5);
  assert.equal(choice.body.model, undefined, "no model when the page knows none");
  const json: Loose = buildRequest({ ...base, mode: "json", schema: '{"type":"boolean"}' }, [user]);
  assert.deepEqual(json.body.response_format, {
    type: "json_schema",
    json_schema: { name: "output", schema: { type: "boolean" }, strict: true },
  });
  const bad: Loose = buildRequest({ ...base, mode: "json", schema: "{nope" }, [user]);
  assert.equal(bad.field, "schema");
  assert.match(bad.error, /^JSON Schema is not valid JSON/);
  assert.equal((buildRequest({ ...base, maxTokens: "1.5" }, [user]) as Loose).field, "maxTokens");
  const regex: Loose = buildRequest({ ...base, mode: "regex", regex: "[a-z]+", maxTokens: "9" }, [
    user,
  ]);
  assert.deepEqual(regex.body.structured_outputs, { regex: "[a-z]+" });
  assert.equal(regex.body.max_tokens, 9);
  // History: system prompt first, failed exchanges left out, reasoning not sent back.
  const ask2 = { role: "user" as const, content: "again" };
  assert.deepEqual(
    requestMessages([
      user,
      { role: "assistant", content: "", error: "boom" },
      ask2,
      { role: "assistant", content: "yes", reasoning: "hmm" },
      user,
      { role: "assistant", content: "", stopped: true },
      ask2,
    ], "Be brief."),
    [{ role: "system", content: "Be brief." }, ask2, { role: "assistant", content: "yes" }, ask2],
  );
  // Storage round trip; a reply cut off by a reload comes back marked stopped.
  const mem = new Map<string, string>();
  const storage = {
    getItem: (k: string) => mem.get(k) ?? null,
    setItem: (k: string, v: string) => void mem.set(k, v),
    removeItem: (k: string) => void mem.delete(k),
  };
  const conv = {
    id: "c1",
    title: "t",
    created: 1,
    updated: 2,
    messages: [user, { role: "assistant" as const, content: "par", pending: true }],
  };
  assert.ok(saveConversations(storage, [conv, { junk: true } as Loose]));
  const back = loadConversations(storage);
  assert.equal(back.length, 1);
  assert.deepEqual(back[0].messages[1], { role: "assistant", content: "par", stopped: true });
});

/** `hearth_sequences_running` from the server's `/metrics`. */
async function sequencesRunning(api: string): Promise<number> {
  const text = await (await fetch(`${api}/metrics`)).text();
  const m = /^hearth_sequences_running (\d+)$/m.exec(text);
  assert.ok(m, "metrics have hearth_sequences_running");
  return Number(m[1]);
}

async function waitFor(what: string, check: () => Promise<boolean>, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

type SettingsInput = {
  temperature?: string;
  maxTokens?: string;
  system?: string;
  mode?: "none" | "json" | "choice" | "regex";
  schema?: string;
  choices?: string;
  regex?: string;
  screenshot?: string;
};

/** Opens Settings, fills what is given, and closes it with "Done". */
async function setSettings(page: Page, s: SettingsInput, shot?: (name: string) => Promise<void>) {
  await page.getByRole("button", { name: "Settings", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "Settings" });
  await dialog.waitFor();
  if (s.temperature !== undefined) {
    await dialog.getByRole("spinbutton", { name: "Temperature" }).fill(s.temperature);
  }
  if (s.maxTokens !== undefined) {
    await dialog.getByRole("spinbutton", { name: "Max tokens" }).fill(s.maxTokens);
  }
  if (s.system !== undefined) {
    await dialog.getByRole("textbox", { name: "System prompt" }).fill(s.system);
  }
  if (s.mode !== undefined) {
    await dialog.getByRole("combobox", { name: "Structured output" }).selectOption(s.mode);
  }
  if (s.schema !== undefined) {
    // By label on the page, not the dialog: no other control may answer to it (strict mode).
    await page.getByLabel("JSON Schema").fill(s.schema);
  }
  if (s.choices !== undefined) {
    await page.getByLabel("Choices").fill(s.choices);
  }
  if (s.regex !== undefined) await page.getByLabel("Regex").fill(s.regex);
  if (s.screenshot && shot) await shot(s.screenshot);
  await dialog.getByRole("button", { name: "Done" }).click();
  await dialog.waitFor({ state: "hidden" });
}

/** Polls an expression in the page until it is truthy (see `waitInPage`: the CSP forbids eval). */
const until = (page: Page, expr: string, ms = 20_000) =>
  waitInPage(page, expr, { timeout: ms, interval: 50 });

const replies = (page: Page) => page.getByRole("article", { name: "assistant", exact: true });

/** Sends a message with Enter and waits until its reply has finished streaming. */
async function ask(page: Page, text: string) {
  const before = await replies(page).count();
  const box = page.getByRole("textbox", { name: "Message" });
  await box.fill(text);
  await box.press("Enter");
  await until(
    page,
    `document.querySelectorAll('article[aria-label="assistant"]').length > ${before} &&
      !document.querySelector('article[aria-busy]')`,
    30_000,
  );
  return replies(page).last();
}

Deno.test("chat page: streaming, Stop, stats, structured output, errors, storage, safety", async (t) => {
  const uiPort = freePort();
  const srv = await startServer([
    "--model",
    await tinyModelPath(),
    "--threads",
    "1",
    "--max-batch",
    "2",
    "--max-seq-len",
    "8192",
    "--ui-server",
    "--ui-port",
    String(uiPort),
  ]);
  const browser = await launchBrowser();
  try {
    const { page, scriptErrors } = await browser.open(`http://127.0.0.1:${uiPort}/`);
    const shot = async (name: string) => void await browser.screenshot(page, name);
    const box = page.getByRole("textbox", { name: "Message" });
    const stop = page.getByRole("button", { name: "Stop" });
    await box.waitFor();
    await page.getByRole("button", { name: "Send" }).waitFor();
    assert.equal(await stop.isVisible(), false, "no Stop while nothing streams");

    await t.step(
      "a reply streams into an article and Stop ends it, freeing the sequence",
      async () => {
        await setSettings(page, { maxTokens: "100000", temperature: "1" });
        await box.fill("Tell me a very long story.");
        await box.press("Enter");
        const reply = replies(page).last();
        await stop.waitFor({ state: "visible" });
        await until(
          page,
          `(document.querySelector('article[aria-label="assistant"] .md')?.textContent ?? "")
          .length > 200`,
        );
        assert.equal(
          await sequencesRunning(srv.url),
          1,
          "the reply holds a sequence while it streams",
        );
        assert.equal(await reply.getAttribute("aria-busy"), "true");
        assert.equal(await page.getByRole("article", { name: "user" }).count(), 1);
        await shot("chat-streaming");
        await stop.click();
        await stop.waitFor({ state: "hidden" });
        await waitFor(
          "no running sequence",
          async () => await sequencesRunning(srv.url) === 0,
          5000,
        );
        const stats = await reply.locator(".stats").innerText();
        assert.match(stats, /stopped/);
        assert.match(stats, /\d+ tokens/, "a stopped reply still counts its tokens");
        const length = (await reply.locator(".md").innerText()).length;
        await new Promise((r) => setTimeout(r, 300));
        assert.equal((await reply.locator(".md").innerText()).length, length, "nothing after Stop");
      },
    );

    await t.step(
      "tokens and tokens/s under a finished reply; Shift+Enter is a newline",
      async () => {
        await page.getByRole("button", { name: "New chat" }).click();
        await setSettings(page, { maxTokens: "40" });
        await box.fill("line one");
        await box.press("Shift+Enter");
        await box.pressSequentially("line two");
        assert.equal(await box.inputValue(), "line one\nline two");
        assert.equal(await replies(page).count(), 0, "Shift+Enter did not send");
        const reply = await ask(page, "Say hello.");
        const stats = await reply.locator(".stats").innerText();
        // 40 unless the random weights happened upon an end-of-turn token first.
        const tokens = Number(/(?:^|\s)(\d+) tokens?\b/.exec(stats)?.[1]);
        assert.ok(tokens >= 1 && tokens <= 40, stats);
        assert.match(stats, /\d+(\.\d)? tokens\/s/, stats);
        if (tokens === 40) assert.match(stats, /max tokens reached/);
        assert.ok((await reply.locator(".md").innerText()).length > 0);
        assert.equal(await box.inputValue(), "", "the composer is cleared after sending");
        await shot("chat-done");
      },
    );

    await t.step("structured output: choice and JSON Schema constrain the reply", async () => {
      const choices = ["red", "green", "blue"];
      await setSettings(page, {
        maxTokens: "20",
        mode: "choice",
        choices: choices.join("\n"),
        screenshot: "chat-settings",
      }, shot);
      assert.match(await page.locator("#settings-summary").innerText(), /Choice/);
      for (let k = 0; k < 2; k++) {
        const reply = await ask(page, "Pick a colour.");
        const text = await reply.locator(".raw").innerText();
        assert.ok(choices.includes(text), `reply ${JSON.stringify(text)} is one of the choices`);
      }
      await setSettings(page, { mode: "json", schema: '{"type": "boolean"}' });
      const reply = await ask(page, "True or false?");
      assert.equal(typeof JSON.parse(await reply.locator(".raw").innerText()), "boolean");
    });

    await t.step(
      "API errors in the API's words; a schema that is not JSON is caught here",
      async () => {
        await setSettings(page, { mode: "regex", regex: "(abc" });
        // The words the API itself uses for this request.
        const direct = await fetch(`${srv.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            messages: [{ role: "user", content: "x" }],
            structured_outputs: { regex: "(abc" },
          }),
        });
        assert.equal(direct.status, 400);
        const message = (await direct.json()).error.message as string;
        assert.match(message, /regex/);
        const reply = await ask(page, "Match this.");
        const alert = reply.getByRole("alert");
        assert.equal(await alert.innerText(), message);
        await shot("chat-error");

        // Invalid JSON never reaches the server: Settings opens with the problem named.
        await setSettings(page, { mode: "json", schema: '{"type": "object",' });
        const count = await replies(page).count();
        await box.fill("Another one");
        await box.press("Enter");
        const dialog = page.getByRole("dialog", { name: "Settings" });
        await dialog.waitFor();
        assert.match(await dialog.locator("#schema-error").innerText(), /not valid JSON/);
        assert.equal(
          await dialog.getByRole("textbox", { name: "JSON Schema" }).getAttribute("aria-invalid"),
          "true",
        );
        await dialog.getByRole("combobox", { name: "Structured output" }).selectOption("none");
        await dialog.getByRole("button", { name: "Done" }).click();
        assert.equal(await replies(page).count(), count, "nothing was sent");
        assert.equal(await box.inputValue(), "Another one", "the message is kept");
        await box.fill("");
      },
    );

    await t.step("conversations survive a reload, switch and delete", async () => {
      const sidebar = page.getByRole("list", { name: "Conversations" });
      const items = sidebar.getByRole("listitem");
      assert.equal(await items.count(), 2);
      const here = await replies(page).count();
      const userTexts = await page.getByRole("article", { name: "user" }).allInnerTexts();
      await page.reload();
      await box.waitFor();
      assert.equal(await replies(page).count(), here);
      assert.deepEqual(
        await page.getByRole("article", { name: "user" }).allInnerTexts(),
        userTexts,
      );
      assert.equal(await items.count(), 2);
      // The first conversation (the stopped story) is one click away, and back again.
      await sidebar.getByRole("button", { name: "Tell me a very long story.", exact: true })
        .click();
      assert.equal(await replies(page).count(), 1);
      assert.match(await replies(page).first().locator(".stats").innerText(), /stopped/);
      await sidebar.getByRole("button", { name: "Say hello.", exact: true }).click();
      assert.equal(await replies(page).count(), here);
      await sidebar.getByRole("button", { name: "Delete Tell me a very long story." }).click();
      assert.equal(await items.count(), 1);
      await page.reload();
      await box.waitFor();
      assert.equal(await items.count(), 1, "the deletion was saved");
    });

    await t.step("HTML in model output is shown as text, never run", async () => {
      const hostile = [
        'Look: <img src=x onerror="window.pwned=1"> and <script>window.pwned=2</script>',
        "",
        "[click me](javascript:window.pwned=3) and [a real link](https://example.com/docs)",
        "",
        '<iframe src="https://evil.example"></iframe>',
        "",
        "```html",
        "<b>bold?</b>",
        "```",
        "",
        "| a | b |",
        "|---|---|",
        "| `x` | **y** |",
      ].join("\n");
      const conv = {
        id: "seeded",
        title: "Seeded",
        created: Date.now(),
        updated: Date.now() + 1000,
        messages: [
          { role: "user", content: '<b>hi</b> <img src=x onerror="window.pwned=4">' },
          {
            role: "assistant",
            content: hostile,
            reasoning: "The user wants <script>alert(1)</script> so I should not run it.",
            toolCalls: [{ id: "c1", name: "get_weather", arguments: '{"city":"Paris"}' }],
            stats: { tokens: 57, tps: 123.4 },
          },
        ],
      };
      await page.evaluate(`(() => {
        const list = JSON.parse(localStorage.getItem("hearth.chat.conversations") || "[]");
        list.unshift(${JSON.stringify(conv)});
        localStorage.setItem("hearth.chat.conversations", JSON.stringify(list));
        localStorage.setItem("hearth.chat.current", "seeded");
      })()`);
      await page.reload();
      const reply = replies(page).last();
      await reply.waitFor();
      const count = (sel: string) => page.locator(`#messages ${sel}`).count();
      assert.equal(await count("img"), 0);
      assert.equal(await count("script"), 0);
      assert.equal(await count("iframe"), 0);
      assert.equal(await count("b"), 0);
      assert.equal(await count('a[href^="javascript"]'), 0);
      assert.equal(await page.evaluate("window.pwned === undefined"), true);
      const text = await reply.innerText();
      assert.ok(text.includes('<img src=x onerror="window.pwned=1">'), text);
      assert.ok(text.includes("<script>window.pwned=2</script>"));
      assert.ok(text.includes("[click me](javascript:window.pwned=3)"));
      const link = reply.getByRole("link", { name: "a real link" });
      assert.equal(await link.getAttribute("href"), "https://example.com/docs");
      assert.equal(await link.getAttribute("rel"), "noopener noreferrer");
      assert.equal(await link.getAttribute("target"), "_blank");
      assert.equal(await reply.locator(".md pre code").innerText(), "<b>bold?</b>");
      assert.equal(await reply.locator("table td strong").innerText(), "y");
      assert.ok(
        (await page.getByRole("article", { name: "user" }).innerText()).includes("<b>hi</b>"),
      );
      // Reasoning folded under "Thinking", tool calls with name and arguments.
      const thinking = reply.locator("details.reasoning");
      assert.equal(await thinking.locator("summary").innerText(), "Thinking");
      assert.equal(await thinking.getAttribute("open"), null, "folded");
      await thinking.locator("summary").click();
      assert.match(await thinking.innerText(), /<script>alert\(1\)<\/script>/);
      assert.match(
        await reply.locator(".tool-call").innerText(),
        /get_weather[\s\S]*"city": "Paris"/,
      );
      await shot("chat-markdown");
    });

    await t.step("the Model combobox appears only with several models", async () => {
      const model = page.getByRole("combobox", { name: "Model" });
      assert.equal(await model.isVisible(), false, "one model: no combobox");
      await page.route("**/v1/models", (route) =>
        route.fulfill({
          contentType: "application/json",
          body: JSON.stringify({
            object: "list",
            data: [{ id: "alpha", object: "model" }, { id: "beta", object: "model" }],
          }),
        }));
      await page.reload();
      await model.waitFor();
      assert.deepEqual(await model.locator("option").allInnerTexts(), ["alpha", "beta"]);
      await model.selectOption("beta");
      await page.unroute("**/v1/models");
    });

    await t.step("the page under /ui/ on the API port works too", async () => {
      const other = await browser.open(`${srv.url}/ui/`);
      await other.page.getByRole("textbox", { name: "Message" }).waitFor();
      await other.page.getByRole("button", { name: "Settings" }).waitFor();
      assert.deepEqual(other.scriptErrors, []);
      await other.page.context().close();
    });

    assert.deepEqual(scriptErrors, [], "no script errors on the chat page");
  } finally {
    await browser.close();
    await srv.stop();
  }
});
