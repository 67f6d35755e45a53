// The manager page in real Chromium: `hearth manager` (main.ts manager, a process) watching a real
// worker with fixture agents. The page loads without the manager's key, asks for it on 401, then
// shows the worker up with its latest message after a session run, follows new messages and the
// worker going down live (no reload; the manager's own polling is off, so only its event stream
// can bring the news), and logs no script errors.
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { launchBrowser, type OpenedPage } from "./support/browser.ts";
import { freePort, mainTs, type RunningServer, superviseServer } from "./support/server.ts";
import { startWorker, type WorkerProcess, writeFakeAgents } from "./support/workers.ts";

const MANAGER_KEY = "ui-manager-key";

async function workerApi(w: WorkerProcess, method: string, path: string, body?: unknown) {
  const res = await fetch(`${w.url}${path}`, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/** The card of the worker at `url`. */
const card = (page: Page, url: string) =>
  page.getByRole("article", { name: `Worker ${url}`, exact: true });

Deno.test("manager page: workers, status and latest message, live", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "hearth-ui-manager-" });
  const agents = await writeFakeAgents(dir);
  const browser = await launchBrowser();
  let worker: WorkerProcess | undefined;
  let manager: RunningServer | undefined;
  let opened: OpenedPage | undefined;
  try {
    worker = await startWorker({ agentsConfig: agents.path, dataDir: `${dir}/w1` });
    const session = (await workerApi(worker, "POST", "/api/sessions", { agent: "fake" })).id;
    const port = freePort();
    manager = await superviseServer({
      name: "manager",
      cmd: [
        Deno.execPath(),
        "run",
        "-A",
        mainTs,
        "manager",
        "--workers",
        worker.url,
        "--port",
        String(port),
        "--api-key",
        MANAGER_KEY,
        // Far beyond the test: the page must be kept current by the event streams alone.
        "--poll-ms",
        "600000",
      ],
      url: `http://127.0.0.1:${port}`,
    });
    const w = worker;
    const m = manager;

    await t.step("the page and its assets load without the key; the API asks for it", async () => {
      for (const path of ["/", "/manager", "/assets/manager.js", "/assets/style.css"]) {
        const r = await fetch(`${m.url}${path}`);
        assert.equal(r.status, 200, path);
        await r.body?.cancel();
      }
      const denied = await fetch(`${m.url}/api/manager/events`);
      assert.equal(denied.status, 401);
      await denied.body?.cancel();
      const res = await fetch(`${m.url}/api/manager/events`, {
        headers: { authorization: `Bearer ${MANAGER_KEY}` },
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      while (!text.includes("\n\ndata: ") || !text.endsWith("\n\n")) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      await reader.cancel();
      assert.ok(text.startsWith(": connected\n\n"), text.slice(0, 40));
      const doc = JSON.parse(text.split("\n\ndata: ")[1]);
      assert.equal(doc.instances[0].url, w.url);
    });

    await t.step("key entered: the worker up with its latest message, updated live", async () => {
      opened = await browser.open(`${m.url}/`);
      const { page } = opened;
      const key = page.getByRole("textbox", { name: "API key", exact: true });
      await key.waitFor({ state: "visible" });
      await key.fill(MANAGER_KEY);
      await page.getByRole("button", { name: "Save key" }).click();
      const c = card(page, w.url);
      await c.getByText("up", { exact: true }).waitFor();
      assert.match(await c.innerText(), /1 session\b/);
      await page.evaluate("globalThis.sameDocument = true");

      await workerApi(w, "POST", `/api/sessions/${session}/messages`, { text: "hello manager" });
      await c.getByText("echo: hello manager", { exact: true }).waitFor({ timeout: 15_000 });
      const text = await c.innerText();
      assert.match(text, /assistant/i);
      assert.match(text, new RegExp(`session ${session}`));
      assert.ok(await c.locator("time").getAttribute("datetime"));
      assert.match(await page.getByRole("status").innerText(), /Live/);
      await browser.screenshot(page, "manager");

      await workerApi(w, "POST", `/api/sessions/${session}/messages`, { text: "second" });
      await c.getByText("echo: second", { exact: true }).waitFor({ timeout: 15_000 });
      assert.equal(await page.evaluate("globalThis.sameDocument"), true, "no reload");
      assert.deepEqual(opened.scriptErrors, []);
    });

    await t.step("the worker stops: down with its last error, last message kept", async () => {
      const { page } = opened!;
      await w.stop();
      const c = card(page, w.url);
      await c.locator(".badge.down").waitFor({ timeout: 15_000 });
      assert.match(await c.innerText(), /Last error: event stream: /);
      assert.match(await c.innerText(), /echo: second/);
      await browser.screenshot(page, "manager-down");
      assert.deepEqual(opened!.scriptErrors, []);
    });
  } finally {
    await opened?.page.context().close().catch(() => {});
    await browser.close();
    await manager?.stop();
    await worker?.stop();
    await Deno.remove(dir, { recursive: true });
  }
  assert.equal((await manager!.child.status).code, 0, "the manager stops cleanly with a page open");
});
