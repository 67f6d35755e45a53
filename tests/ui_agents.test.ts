/**
 * The agents page in real Chromium against a real `main.ts serve` whose agents are the fixture CLI
 * (tests/fixtures/agents/bin/fake_agent.ts): a Claude-style transcript with tool steps, and an
 * echo agent. One server and one browser for the file.
 *
 * - A session is created from the page ("Agent" combobox, "New session"), a message sent: its
 *   tool step listitems go running -> done (and the failing test run -> error), one per stepRef,
 *   and the final answer appears.
 * - The server killed for 3 s: no "Disconnected" notice. Killed for 12 s: the `status` region
 *   says "Disconnected" after 8 s (not before) and clears once the server is back. The restarted
 *   server counts its event ids from 1 again: the page gets `replay_gap`, reloads from the API,
 *   and the next run is shown as usual.
 * - No script errors on the page (failed loads while the server is down are network errors).
 *
 * Screenshots: test-artifacts/ui/agents-run.png, agents-disconnected.png, agents-reconnected.png.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { launchBrowser, type TestBrowser } from "./support/browser.ts";
import { startWorker, type WorkerProcess } from "./support/workers.ts";

const root = new URL("..", import.meta.url).pathname;
const fakeAgent = `${root}tests/fixtures/agents/bin/fake_agent.ts`;
const claudeBasic = `${root}tests/fixtures/agents/transcripts/claude-basic.jsonl`;
const READ_REF = "toolu_01Xf5GhT2kLp9wQ4rNz7mVcE";
const BASH_REF = "toolu_01Bq8XnJ4mR2vK7wYzP3sLdT";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function writeAgents(dir: string): Promise<string> {
  const echo = `${dir}/echo.jsonl`;
  await Deno.writeTextFile(
    echo,
    '{"type":"output","text":"echo: {{prompt}}"}\n{"type":"result"}\n',
  );
  const agent = (provider: string, args: string[]) => ({
    provider,
    command: Deno.execPath(),
    args: ["run", "-A", fakeAgent, ...args],
  });
  const path = `${dir}/agents.json`;
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      roots: [dir],
      agents: {
        // Slow enough (43 lines, 120 ms apart) that each step is seen running before it ends.
        claude: agent("claude", ["--transcript", claudeBasic, "--delay-ms", "120"]),
        echo: agent("jsonl", ["--transcript", echo, "--delay-ms", "1"]),
      },
    }),
  );
  return path;
}

/** The status region's text, trimmed. */
async function noticeText(page: Page): Promise<string> {
  return ((await page.getByRole("status").textContent()) ?? "").trim();
}

/** Polls `check` every `every` ms until it holds; fails after `timeout` ms. */
async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  opts: { timeout?: number; every?: number } = {},
) {
  const deadline = Date.now() + (opts.timeout ?? 10_000);
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(opts.every ?? 50);
  }
}

/** The channel state agents.js mirrors on `<main data-channel>`. */
function channelOf(page: Page) {
  return page.locator("main").getAttribute("data-channel");
}

/** How many times the page reloaded after a `replay_gap` (`<main data-reloads>`). */
async function reloadsOf(page: Page) {
  return Number(await page.locator("main").getAttribute("data-reloads") ?? 0);
}

async function channelOpen(page: Page, timeout = 10_000) {
  await waitUntil("the channel to open", async () => (await channelOf(page)) === "open", {
    timeout,
  });
}

Deno.test("agents page: a run's steps and answer, quiet reconnects, the 8 s notice", async (t) => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "hearth-ui-agents-" }));
  let worker: WorkerProcess | undefined;
  let browser: TestBrowser | undefined;
  try {
    worker = await startWorker({ agentsConfig: await writeAgents(dir), dataDir: `${dir}/data` });
    browser = await launchBrowser();
    const { page, scriptErrors, networkErrors } = await browser.open(`${worker.url}/ui/agents`);
    const w = worker;
    const b = browser;

    await t.step("create a session, send a message, see steps go running -> done", async () => {
      const sessions = page.getByRole("list", { name: "Sessions" });
      await page.getByText("No sessions yet — create one").waitFor();
      assert.equal(await sessions.getByRole("listitem").count(), 0);
      assert.equal(await noticeText(page), "");

      const agent = page.getByRole("combobox", { name: "Agent" });
      const options = agent.locator("option");
      assert.deepEqual(
        await Promise.all([0, 1].map((i) => options.nth(i).getAttribute("value"))),
        ["claude", "echo"],
      );
      assert.equal(await options.count(), 2);
      await agent.selectOption("claude");
      await page.getByRole("button", { name: "New session" }).click();
      await sessions.getByRole("listitem").first().waitFor();
      assert.equal(await sessions.getByRole("listitem").count(), 1);
      assert.match((await sessions.getByRole("listitem").textContent()) ?? "", /claude/);

      await page.getByRole("textbox", { name: "Message" }).fill("why does the stock test fail?");
      await page.getByRole("button", { name: "Send" }).click();

      const steps = page.getByRole("list", { name: "Tool steps" });
      const read = steps.locator(`li[data-step-ref*="${READ_REF}"]`);
      const bash = steps.locator(`li[data-step-ref*="${BASH_REF}"]`);
      // The same listitem goes running -> done (one item per stepRef).
      await read.and(page.getByRole("listitem")).filter({ hasText: "running" }).waitFor({
        timeout: 15_000,
      });
      assert.match((await read.textContent()) ?? "", /^running.*Read/);
      await read.filter({ hasText: "done" }).waitFor({ timeout: 15_000 });
      assert.equal(await read.count(), 1);
      assert.match((await read.textContent()) ?? "", /^done.*Read/);
      // The transcript's test run fails: that step ends in error.
      await bash.filter({ hasText: "error" }).waitFor();
      assert.equal(await bash.count(), 1);
      assert.match((await bash.textContent()) ?? "", /^error\s*command/);

      const transcriptResult = (await Deno.readTextFile(claudeBasic)).trim().split("\n")
        .map((l) => JSON.parse(l)).find((l) => l.type === "result").result as string;
      const final = page.getByRole("region", { name: "Final answer" });
      await final.waitFor({ timeout: 15_000 });
      // Rendered as Markdown: the backticked spans become code elements.
      assert.ok(((await final.textContent()) ?? "").includes(transcriptResult.replaceAll("`", "")));
      assert.equal(await final.locator("code").first().textContent(), "reserve");
      // Thinking is shown too (a step of its own), and the run ends "done".
      await steps.getByText("Thinking").first().waitFor();
      const run = page.getByRole("article", { name: "assistant" }).last();
      await run.locator(".run-head .badge.done").waitFor();
      // Each stepRef appears once, whatever the number of updates it had.
      const items = steps.getByRole("listitem");
      const refs: (string | null)[] = [];
      for (let i = 0; i < await items.count(); i++) {
        refs.push(await items.nth(i).getAttribute("data-step-ref"));
      }
      assert.equal(new Set(refs).size, refs.length, refs.join(" "));
      assert.equal(await noticeText(page), "");
      await b.screenshot(page, "agents-run");
      assert.deepEqual(scriptErrors, []);
    });

    /** Creates a session of `agent` from the page and waits for it in the list. */
    const newSession = async (agent: string) => {
      const items = page.getByRole("list", { name: "Sessions" }).getByRole("listitem");
      const before = await items.count();
      await page.getByRole("combobox", { name: "Agent" }).selectOption(agent);
      await page.getByRole("button", { name: "New session" }).click();
      await items.nth(before).waitFor();
    };
    /** Sends `text` and waits for the run's final answer. */
    const sendAndSee = async (text: string, answer: string) => {
      await page.getByRole("textbox", { name: "Message" }).fill(text);
      await page.getByRole("button", { name: "Send" }).click();
      await page.getByRole("region", { name: "Final answer" }).filter({ hasText: answer })
        .waitFor({ timeout: 15_000 });
    };

    await t.step("server down 3 s: no notice; the restart's replay_gap reloads", async () => {
      await channelOpen(page);
      const seen: string[] = [];
      await w.kill();
      const start = Date.now();
      while (Date.now() - start < 3000) {
        seen.push(await noticeText(page));
        await sleep(200);
      }
      await w.restart();
      const restarted = Date.now();
      while ((await channelOf(page)) !== "open") {
        seen.push(await noticeText(page));
        assert.ok(Date.now() - restarted < 5000, "reconnected within 5 s of the restart");
        await sleep(100);
      }
      const downFor = Date.now() - start;
      assert.ok(seen.every((s) => s === ""), `a notice showed while down ${downFor} ms: ${seen}`);
      // The restarted server's ids start again: the cursor is ahead of it -> replay_gap -> reload.
      await waitUntil("a reload after replay_gap", async () => (await reloadsOf(page)) >= 1);
      await page.getByRole("region", { name: "Final answer" }).waitFor();
      // Its events (ids from 1 again, below the old cursor) are taken: a new run shows as usual.
      await newSession("echo");
      await sendAndSee("hello after a restart", "echo: hello after a restart");
      assert.equal(await noticeText(page), "");
      assert.deepEqual(scriptErrors, []);
    });

    await t.step("server down 12 s: 'Disconnected' after 8 s, cleared when back", async () => {
      await channelOpen(page);
      // From before the kill: the page may see the connection drop before `kill` resolves, so a
      // clock started after it ran late and read 7988 ms for a notice the page showed at 8 s.
      const start = Date.now();
      await w.kill();
      await sleep(Math.max(0, 7000 - (Date.now() - start)));
      assert.equal(await noticeText(page), "", "no notice 7 s into the outage");
      await waitUntil(
        "the Disconnected notice",
        async () => (await noticeText(page)) === "Disconnected",
        { timeout: 4000 },
      );
      const shownAfter = Date.now() - start;
      assert.ok(shownAfter >= 8000 && shownAfter < 9500, `shown after ${shownAfter} ms`);
      await b.screenshot(page, "agents-disconnected");
      await sleep(Math.max(0, 12_000 - (Date.now() - start)));
      assert.equal(await noticeText(page), "Disconnected", "still shown at 12 s");

      await w.restart();
      const back = Date.now();
      await waitUntil("the notice to clear", async () => (await noticeText(page)) === "", {
        timeout: 6000,
      });
      const clearedAfter = Date.now() - back;
      assert.ok(clearedAfter < 4000, `cleared ${clearedAfter} ms after the server was back`);
      await channelOpen(page);
      await waitUntil("a second reload", async () => (await reloadsOf(page)) >= 2);
      await sendAndSee("and after another one", "echo: and after another one");
      assert.equal(await noticeText(page), "");
      await b.screenshot(page, "agents-reconnected");
    });

    await t.step(
      "a goal and an orchestration started through the API show on the page",
      async () => {
        const post = async (path: string, body: unknown) => {
          const r = await fetch(`${w.url}${path}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
          });
          const json = await r.json();
          assert.ok(r.ok, `${path}: ${JSON.stringify(json)}`);
          return json;
        };
        const s = await post("/api/sessions", { agent: "echo" });
        // One turn of budget: the echo agent's answer has no directive, so the goal pauses.
        await post(`/api/sessions/${s.id}/goal`, { objective: "say hello", maxTurns: 1 });
        const run = await post(`/api/sessions/${s.id}/orchestrate`, {
          task: "greet",
          maxRounds: 1,
        });
        await waitUntil("the goal and the run to settle", async () => {
          const g = await (await fetch(`${w.url}/api/sessions/${s.id}/goal`)).json();
          const o = await (await fetch(`${w.url}/api/orchestrations/${run.runId}`)).json();
          return g.status === "paused" && (o.state === "done" || o.state === "failed");
        }, { timeout: 20_000 });
        // Opened afresh: the panels come from the API, not from events seen live.
        await page.goto(`${w.url}/ui/agents#${encodeURIComponent(s.id)}`);
        await page.reload();
        const goal = page.getByRole("region", { name: "Goal" });
        await goal.filter({ hasText: "paused" }).waitFor({ timeout: 10_000 });
        assert.match((await goal.textContent()) ?? "", /say hello.*turns 1 of 1.*reason: budget/s);
        const orc = page.getByRole("region", { name: "Orchestration" });
        await orc.filter({ hasText: /done|failed/ }).waitFor({ timeout: 10_000 });
        assert.match((await orc.textContent()) ?? "", /greet/);
        await b.screenshot(page, "agents-goal");
      },
    );

    await t.step("no script errors on the page", () => {
      assert.deepEqual(scriptErrors, []);
      // Failed loads while the server was down are expected, and kept apart.
      if (networkErrors.length) console.log(`network errors while down: ${networkErrors.length}`);
    });
  } finally {
    await browser?.close();
    await worker?.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
