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
