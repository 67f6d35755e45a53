// /metrics counts the event channel: open listeners, events published, and listeners refused.
import assert from "node:assert/strict";
import { newServerState } from "../routes/state.ts";
import { createApp, newSurfaces } from "../routes/app.ts";

const gauge = (text: string, name: string) =>
  Number(text.split("\n").find((l) => l.startsWith(`${name} `))?.split(" ")[1]);

Deno.test("/metrics reports event listeners, published events and refusals", async () => {
  const surfaces = newSurfaces({ maxListeners: 1 });
  const app = createApp(newServerState("no-model"), surfaces);
  surfaces.bus.publish("agent", "agent_output", { agentId: "a", text: "x" });
  surfaces.bus.publish("trace", "stderr", { line: "internal" });
  surfaces.bus.publish("agent", "agent_output", { agentId: "a", text: "y" });

  const sse = await app.request("/api/events");
  assert.equal(sse.status, 200);
  const full = await app.request("/api/events");
  assert.equal(full.status, 503);
  await full.body?.cancel();

  let text = await (await app.request("/metrics")).text();
  assert.equal(gauge(text, "hearth_event_listeners"), 1);
  assert.equal(gauge(text, "hearth_events_published_total"), 2, "trace is not a public event");
  assert.equal(gauge(text, "hearth_event_listeners_rejected_total"), 1);

  await sse.body?.cancel();
  text = await (await app.request("/metrics")).text();
  assert.equal(gauge(text, "hearth_event_listeners"), 0);
  surfaces.fanout.closeAll();
});
