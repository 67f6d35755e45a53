/**
 * A video service behind `videoRoutes` on a loopback port, for the video API tests: word-count
 * tokens, a one-term blocklist, one key, and a clock the test can move (`skew.ms`).
 *
 * @example
 * ```ts
 * import { startVideoServer } from "./video.ts";
 * await using srv = await startVideoServer({ keys: ["k"] });
 * await fetch(`${srv.url}/v1beta/models/veo-2.0-generate-001/operations?key=k`);
 * ```
 * @module
 */
import { Hono } from "hono";
import { createVideoService, type VideoServiceConfig } from "../../lib/video/operations.ts";
import { videoRoutes } from "../../routes/video.ts";
import { freePort } from "./server.ts";

export type VideoServer = {
  url: string;
  dataDir: string;
  /** Milliseconds added to the service clock. */
  skew: { ms: number };
  sweep: () => Promise<{ ops: number; files: number }>;
  [Symbol.asyncDispose]: () => Promise<void>;
};

/** Starts one; a `dataDir` given by the caller is kept, a temporary one is removed at dispose. */
export async function startVideoServer(
  cfg: Partial<VideoServiceConfig> & { keys: string[] },
): Promise<VideoServer> {
  const dataDir = cfg.dataDir ?? await Deno.makeTempDir({ prefix: "hearth-video-" });
  const skew = { ms: 0 };
  const service = await createVideoService({
    region: "global",
    backend: "local",
    workers: 1,
    countTokens: (t) => t.split(/\s+/).filter(Boolean).length,
    now: () => Date.now() + skew.ms,
    blocklist: ["forbidden thing"],
    ...cfg,
    dataDir,
  });
  const app = new Hono();
  app.route("/", videoRoutes(service));
  const port = freePort();
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, app.fetch);
  return {
    url: `http://127.0.0.1:${port}`,
    dataDir,
    skew,
    sweep: () => service.sweep(),
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await service.close();
      if (!cfg.dataDir) await Deno.remove(dataDir, { recursive: true });
    },
  };
}
