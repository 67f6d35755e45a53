/**
 * The prefill server's side of the prefill/decode split: `POST /internal/pd/prefill` takes
 * `{fingerprint, tokens}` from the decode server (authenticated by the pair's shared token in
 * `x-hearth-pd-token`), computes the tokens and answers the sequence's KV cells as
 * `application/octet-stream`, with their token count in `x-hearth-kv-tokens`. Errors are
 * OpenAI-shaped JSON; the decode server logs them and computes the prompt itself.
 *
 * @example
 * ```ts
 * import { pdRoutes } from "./prefill_decode.ts";
 * const counters = { role: "prefill" as const, remotePrefills: 0, fallbacks: 0 };
 * app.route("/", pdRoutes(state, cfg, counters, () => modelFingerprint(modelPath)));
 * ```
 * @module
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import type { ServerState } from "./state.ts";
import {
  exportPrefill,
  PD_TOKEN_HEADER,
  PD_TOKENS_HEADER,
  type PdConfig,
  type PdStats,
  tokenMatches,
} from "../lib/engine/prefill_decode.ts";
import { isRefusal } from "../lib/engine/scheduler.ts";
import { openaiError, parseBody } from "./errors.ts";
import { mountRoutes, routesOf, SERVE_ROUTES } from "./table.ts";

const bodySchema = z.strictObject({
  fingerprint: z.string(),
  tokens: z.array(z.number().int().min(0)).min(1),
});

/**
 * The prefill route (routes/table.ts, group `pd`) on its own app, which `createApp` mounts.
 * `counters` (shown in `/props`): prompts served, and failed with the last reason.
 */
export function pdRoutes(
  state: ServerState,
  cfg: PdConfig,
  counters: PdStats,
  fingerprint: () => Promise<string>,
): Hono {
  return mountRoutes(
    new Hono(),
    routesOf(SERVE_ROUTES, "pd"),
    pdHandlers(state, cfg, counters, fingerprint),
  );
}

/** The handler of the `pd` row of routes/table.ts (its path is PD_PATH). */
export function pdHandlers(
  state: ServerState,
  cfg: PdConfig,
  counters: PdStats,
  fingerprint: () => Promise<string>,
) {
  const prefill = async (c: Context) => {
    if (cfg.token && !tokenMatches(c.req.header(PD_TOKEN_HEADER), cfg.token)) {
      return openaiError(c, 401, `missing or wrong ${PD_TOKEN_HEADER}`, {
        type: "authentication_error",
      });
    }
    const body = await parseBody(c, bodySchema);
    if (!body.ok) return body.response;
    const engine = state.engine;
    if (!engine) return openaiError(c, 503, "the model is still loading");
    const mine = await fingerprint();
    if (body.data.fingerprint !== mine) {
      return openaiError(
        c,
        409,
        `this prefill server runs another model (${mine}, asked for ${body.data.fingerprint})`,
      );
    }
    const n = engine.model.nVocab;
    if (body.data.tokens.some((t) => t >= n)) {
      return openaiError(c, 400, `a token id is outside the vocabulary (0..${n - 1})`);
    }
    try {
      const kv = await exportPrefill(engine, Int32Array.from(body.data.tokens), c.req.raw.signal);
      counters.remotePrefills++;
      return c.body(kv.state as Uint8Array<ArrayBuffer>, 200, {
        "content-type": "application/octet-stream",
        [PD_TOKENS_HEADER]: String(kv.tokens),
      });
    } catch (e) {
      counters.fallbacks++;
      counters.lastError = (e as Error).message;
      if (isRefusal(e)) {
        const status = e.kind === "busy" ? 503 : e.kind === "too_long" ? 413 : 400;
        return openaiError(c, status, e.message);
      }
      return openaiError(c, 500, `prefill failed: ${(e as Error).message}`);
    }
  };
  return { prefill };
}
