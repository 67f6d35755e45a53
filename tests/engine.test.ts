// Engine behaviour in-process: stop-string holding, cancellation freeing the sequence, and
// batched decoding giving the same tokens as a solo run with the same seed.
import assert from "node:assert/strict";
import { flushText, newStopMatcher, pushText } from "../lib/engine/stop.ts";
import { defaultSampling } from "../lib/engine/sampling/sampling.ts";
import type { GenEvent } from "../lib/engine/scheduler.ts";
import { inProcessApp, inProcessState } from "./support/app.ts";

Deno.test("stop matcher holds back a possible stop prefix and cuts at the stop", () => {
  const m = newStopMatcher(["END", "\n\n"]);
  assert.deepEqual(pushText(m, "abc E"), { emit: "abc ", stopped: false });
  assert.deepEqual(pushText(m, "N"), { emit: "", stopped: false });
  assert.deepEqual(pushText(m, "X"), { emit: "ENX", stopped: false });
  assert.deepEqual(pushText(m, "tail\n"), { emit: "tail", stopped: false });
  assert.deepEqual(pushText(m, "\nmore"), { emit: "", stopped: true, stop: "\n\n" });
  const n = newStopMatcher(["xyz"]);
  assert.deepEqual(pushText(n, "axy"), { emit: "a", stopped: false });
  assert.equal(flushText(n), "xy");
  const none = newStopMatcher([]);
  assert.deepEqual(pushText(none, "anything"), { emit: "anything", stopped: false });
  // The earliest stop wins when two match.
  const two = newStopMatcher(["cd", "b"]);
  assert.deepEqual(pushText(two, "abcd"), { emit: "a", stopped: true, stop: "b" });
  // Of two starting at the same place, the shorter one matched first.
  const same = newStopMatcher(["abc", "ab"]);
  assert.deepEqual(pushText(same, "xabcd"), { emit: "x", stopped: true, stop: "ab" });
});

async function collect(events: AsyncIterable<GenEvent>): Promise<string> {
  let text = "";
  for await (const ev of events) if (ev.type === "text") text += ev.text;
  return text;
}

Deno.test("a client that disconnects mid-stream frees its sequence", async () => {
  const app = await inProcessApp();
  const state = await inProcessState();
  const engine = state.engine!;
  const ac = new AbortController();
  const r = await app.request("/v1/completions", {
    method: "POST",
    body: JSON.stringify({ prompt: "Hello", max_tokens: 2000, stream: true, ignore_eos: true }),
    signal: ac.signal,
  });
  const reader = r.body!.getReader();
  await reader.read();
  await reader.read();
  assert.equal(engine.stats().running, 1);
  await reader.cancel();
  await engine.idle();
  assert.equal(engine.stats().running, 0);
  assert.equal(engine.stats().waiting, 0);
  // And the engine still answers.
  const ok = await app.request("/v1/completions", {
    method: "POST",
    body: JSON.stringify({ prompt: "Hello", max_tokens: 2 }),
  });
  assert.equal(ok.status, 200);
});

Deno.test("an aborted request signal drops the sequence before the next step", async () => {
  const engine = (await inProcessState()).engine!;
  const ac = new AbortController();
  const prompt = Int32Array.from([128000, 9906]);
  const events = engine.submit({
    prompt,
    maxTokens: 5000,
    sampling: defaultSampling(),
    stop: [],
    ignoreEos: true,
    signal: ac.signal,
  });
  const it = events[Symbol.asyncIterator]();
  await it.next();
  ac.abort();
  await engine.idle();
  assert.equal(engine.stats().running, 0);
});

Deno.test("batched generation equals solo generation for the same seed", async () => {
  const engine = (await inProcessState()).engine!;
  const req = (seed: number, prompt: number[]) => ({
    prompt: Int32Array.from(prompt),
    maxTokens: 12,
    sampling: { ...defaultSampling(), seed, temperature: 0.9 },
    stop: [],
    ignoreEos: true,
  });
  const prompts = [[128000, 9906, 1917], [128000, 791, 6864, 315], [128000, 13347]];
  const solo: string[] = [];
  for (const [i, p] of prompts.entries()) solo.push(await collect(engine.submit(req(i + 1, p))));
  const batched = await Promise.all(
    prompts.map((p, i) => collect(engine.submit(req(i + 1, p)))),
  );
  assert.deepEqual(batched, solo);
  assert.ok(solo.every((s) => s.length > 0));
});
