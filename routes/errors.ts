/**
 * OpenAI-shaped errors (`{"error":{"message","type","param","code"}}`) and the request-body
 * helpers that produce them: malformed JSON, Zod issues (named by field path) and engine refusals
 * all become a 4xx with a message that says what is wrong. Nothing a client sends becomes a 500.
 *
 * @example
 * ```ts
 * import { parseBody, openaiError } from "./errors.ts";
 * app.post("/x", async (c) => {
 *   const body = await parseBody(c, schema);
 *   if (!body.ok) return body.response;
 *   return c.json(body.data);
 * });
 * ```
 * @module
 */
import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import { noteIgnored } from "./ignored.ts";
import type { TurnError } from "../lib/chat/turn.ts";

export type OpenAIErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "server_error"
  | "overloaded_error";

export function openaiError(
  c: Context,
  status: ContentfulStatusCode,
  message: string,
  opts: { type?: OpenAIErrorType; param?: string | null; code?: string | null } = {},
): Response {
  const type = opts.type ?? (status >= 500 ? "server_error" : "invalid_request_error");
  return c.json(
    { error: { message, type, param: opts.param ?? null, code: opts.code ?? null } },
    status,
  );
}

/** Formats the first Zod issue as `field: reason`, with the field path dotted. */
export function describeZodError(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const path = issue.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))
    .join("").replace(/^\./, "");
  let reason = issue.message;
  if (issue.code === "unrecognized_keys") {
    return {
      message: `Unrecognized request argument supplied: ${issue.keys.join(", ")}`,
      param: issue.keys[0] ?? null,
    };
  }
  if (issue.code === "invalid_type" && /received undefined/.test(reason)) reason = "is required";
  return { message: path ? `${path}: ${reason}` : reason, param: path || null };
}

export type Parsed<T> = { ok: true; data: T } | { ok: false; response: Response };

/**
 * Reads a JSON body and validates it; any failure is an OpenAI-shaped 400. Top-level keys the
 * schema does not name (it must be a loose object to let them through) are noted as ignored, so
 * the response names them in `x-hearth-ignored-fields`.
 */
export async function parseBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  fail: (status: ContentfulStatusCode, message: string, param: string | null) => Response = (
    status,
    message,
    param,
  ) => openaiError(c, status, message, { param }),
): Promise<Parsed<z.output<S>>> {
  let raw: unknown;
  try {
    const text = await c.req.text();
    if (!text.trim()) return { ok: false, response: fail(400, "request body is empty", null) };
    raw = JSON.parse(text);
  } catch (e) {
    return {
      ok: false,
      response: fail(400, `request body is not valid JSON: ${(e as Error).message}`, null),
    };
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const { message, param } = describeZodError(r.error);
    return { ok: false, response: fail(400, message, param) };
  }
  const shape = (schema as unknown as { shape?: Record<string, unknown> }).shape;
  if (shape && typeof raw === "object" && raw !== null && !Array.isArray(raw)) {
    noteIgnored(c, Object.keys(raw).filter((k) => !Object.hasOwn(shape, k)));
  }
  return { ok: true, data: r.data };
}

export type AnthropicErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "request_too_large"
  | "rate_limit_error"
  | "api_error"
  | "overloaded_error";

/**
 * Anthropic's error shape: `{"type":"error","error":{"type","message"}}`. A plain Response
 * because Anthropic's 529 "overloaded" is a status Hono's types do not know.
 */
export function anthropicError(
  status: number,
  type: AnthropicErrorType,
  message: string,
  headers: Record<string, string> = {},
): Response {
  return Response.json({ type: "error", error: { type, message } }, { status, headers });
}

/**
 * A turn that did not start, in OpenAI's shape: a full queue is a 503 with Retry-After, a model
 * still loading a 503 `loading`, the rest 400s naming the field (`promptParam` when the turn
 * named none: `messages`, `input`).
 */
export function openaiTurnError(c: Context, e: TurnError, promptParam: string): Response {
  switch (e.kind) {
    case "loading":
      return openaiError(c, 503, e.message, { code: "loading" });
    case "no_template":
      return openaiError(c, 400, `${e.message}; use /v1/completions`, { param: promptParam });
    case "overloaded": {
      const res = openaiError(c, 503, e.message, { type: "overloaded_error", param: null });
      res.headers.set("retry-after", "1");
      return res;
    }
    case "invalid_request":
      return openaiError(c, 400, e.message, { param: e.param ?? promptParam });
    case "context_length_exceeded":
      // Codex compacts its history on this code (and retries otherwise).
      return openaiError(c, 400, e.message, {
        param: e.param ?? promptParam,
        code: "context_length_exceeded",
      });
  }
}

/** A turn that did not start, in Anthropic's shape (its 529 for a full queue or a loading model). */
export function anthropicTurnError(e: TurnError): Response {
  switch (e.kind) {
    case "loading":
    case "overloaded":
      return anthropicError(529, "overloaded_error", e.message, { "retry-after": "1" });
    case "no_template":
      return anthropicError(
        400,
        "invalid_request_error",
        `${e.message}; start the server with --chat-template FILE`,
      );
    case "invalid_request":
      return anthropicError(400, "invalid_request_error", e.message);
    case "context_length_exceeded":
      // Claude Code compacts its history when it reads "prompt is too long".
      return anthropicError(
        400,
        "invalid_request_error",
        `prompt is too long: ${e.promptTokens} tokens > ${e.contextTokens} maximum`,
      );
  }
}

/** Which API a path belongs to, for errors in that API's own shape. */
export type Surface = "openai" | "anthropic" | "google" | "agents";

export function surfaceOf(path: string): Surface {
  if (path.startsWith("/v1/messages")) return "anthropic";
  if (path.startsWith("/v1beta/")) return "google";
  if (path.startsWith("/api/") || path === "/ws") return "agents";
  return "openai";
}

const GOOGLE_STATUS: Record<number, string> = {
  401: "UNAUTHENTICATED",
  403: "PERMISSION_DENIED",
  404: "NOT_FOUND",
  500: "INTERNAL",
  503: "UNAVAILABLE",
};

const AGENT_CODES: Record<number, string> = {
  401: "UNAUTHORIZED",
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  500: "INTERNAL",
  503: "UNAVAILABLE",
};

/**
 * The app-level errors (no key, no route, video off or starting, an uncaught failure) in the
 * shape of the API the path belongs to.
 */
export function surfaceError(
  c: Context,
  status: 401 | 403 | 404 | 500 | 503,
  message: string,
): Response {
  switch (surfaceOf(c.req.path)) {
    case "anthropic":
      return anthropicError(
        status,
        status === 401
          ? "authentication_error"
          : status === 403
          ? "permission_error"
          : status === 404
          ? "not_found_error"
          : status === 503
          ? "overloaded_error"
          : "api_error",
        message,
      );
    case "google":
      return c.json({ error: { code: status, message, status: GOOGLE_STATUS[status] } }, status);
    case "agents":
      return c.json({ error: AGENT_CODES[status], message }, status);
    case "openai":
      return status === 401
        ? openaiError(c, 401, message, { type: "authentication_error", code: "invalid_api_key" })
        : status === 404
        ? openaiError(c, 404, message, { type: "not_found_error" })
        : openaiError(c, status, message);
  }
}
