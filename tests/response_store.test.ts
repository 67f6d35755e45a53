// Stored Responses API responses: put/get/delete round trip, ids that cannot name a path, and
// the 30-day retention sweep.
import assert from "node:assert/strict";
import { createResponseStore, sweepResponses } from "../lib/chat/response_store.ts";

Deno.test("response store: round trip, safe ids, retention", async () => {
  const dir = await Deno.makeTempDir();
  const store = createResponseStore(dir);
  await store.put({
    response: { id: "resp_abc", object: "response" },
    items: [{ type: "message" }],
  });
  assert.deepEqual((await store.get("resp_abc"))?.items, [{ type: "message" }]);
  assert.equal(await store.get("resp_missing"), undefined);
  assert.equal(await store.get("../../etc/passwd"), undefined);
  await assert.rejects(store.put({ response: { id: "resp_../x" }, items: [] }));
  assert.equal(await store.delete("resp_abc"), true);
  assert.equal(await store.delete("resp_abc"), false);

  await store.put({ response: { id: "resp_old" }, items: [] });
  await store.put({ response: { id: "resp_new" }, items: [] });
  const old = new Date(Date.now() - 31 * 24 * 3600 * 1000);
  await Deno.utime(`${dir}/resp_old.json`, old, old);
  assert.equal(await sweepResponses(dir), 1);
  assert.equal(await store.get("resp_old"), undefined);
  assert.ok(await store.get("resp_new"));
  await Deno.remove(dir, { recursive: true });
});
