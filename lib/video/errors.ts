/**
 * Google's error envelope (`{"error":{"code":<http>,"message","status"}}`, `status` the
 * `google.rpc.Code` name) as plain records, the API-key check every video request passes, and the
 * numeric `google.rpc.Code` values a failed operation reports. Routes turn an `ApiFailure` into a
 * response unchanged, so errors from the rules, the store and an upstream service look alike.
 *
 * @example
 * ```ts
 * import { checkApiKey, googleError } from "./errors.ts";
 * const denied = checkApiKey(["k1"], undefined); // 403 PERMISSION_DENIED
 * const missing = googleError(404, "Operation abc not found.");
 * missing.body; // { error: { code: 404, message: "Operation abc not found.", status: "NOT_FOUND" } }
 * ```
 * @module
 */

/** An error response: HTTP status plus the JSON body to send. */
export type ApiFailure = { httpStatus: number; body: { error: GoogleErrorBody } };
export type GoogleErrorBody = {
  code: number;
  message: string;
  status: string;
  details?: unknown[];
};

export type Result<T> = { ok: true; value: T } | { ok: false; failure: ApiFailure };

/** `google.rpc.Code` numbers, for `error.code` of a failed operation. */
export const RPC_CODE = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

const STATUS_BY_HTTP: Record<number, string> = {
  400: "INVALID_ARGUMENT",
  401: "UNAUTHENTICATED",
  403: "PERMISSION_DENIED",
  404: "NOT_FOUND",
  409: "ABORTED",
  416: "OUT_OF_RANGE",
  429: "RESOURCE_EXHAUSTED",
  499: "CANCELLED",
  500: "INTERNAL",
  501: "UNIMPLEMENTED",
  503: "UNAVAILABLE",
  504: "DEADLINE_EXCEEDED",
};

export function googleError(
  httpStatus: number,
  message: string,
  opts: { status?: string; details?: unknown[] } = {},
): ApiFailure {
  const error: GoogleErrorBody = {
    code: httpStatus,
    message,
    status: opts.status ?? STATUS_BY_HTTP[httpStatus] ??
      (httpStatus >= 500 ? "INTERNAL" : "UNKNOWN"),
  };
  if (opts.details) error.details = opts.details;
  return { httpStatus, body: { error } };
}

export function fail<T>(
  httpStatus: number,
  message: string,
  opts?: { status?: string },
): Result<T> {
  return { ok: false, failure: googleError(httpStatus, message, opts) };
}

export const MISSING_KEY_MESSAGE =
  "Method doesn't allow unregistered callers (callers without established identity). " +
  "Please use API Key or other form of API consumer identity to call this API.";
export const INVALID_KEY_MESSAGE = "API key not valid. Please pass a valid API key.";

/**
 * The real service's answers: no key -> 403 PERMISSION_DENIED, a wrong key -> 400
 * INVALID_ARGUMENT with an `API_KEY_INVALID` ErrorInfo. No keys configured -> every caller passes
 * (the server refuses to listen beyond loopback in that case).
 */
export function checkApiKey(
  keys: readonly string[],
  key: string | undefined,
): ApiFailure | undefined {
  if (keys.length === 0) return undefined;
  if (!key) return googleError(403, MISSING_KEY_MESSAGE);
  if (keys.some((k) => constantTimeEqual(k, key))) return undefined;
  return googleError(400, INVALID_KEY_MESSAGE, {
    details: [{
      "@type": "type.googleapis.com/google.rpc.ErrorInfo",
      reason: "API_KEY_INVALID",
      domain: "googleapis.com",
      metadata: { service: "generativelanguage.googleapis.com" },
    }],
  });
}

function constantTimeEqual(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  for (let i = 0; i < Math.max(ea.length, eb.length); i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}
