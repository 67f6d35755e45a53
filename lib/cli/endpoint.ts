/**
 * `HOST:PORT` endpoints as flags take them (`--master-addr`, `hearth rpc-server --host/--port`):
 * an IPv4 address or name, or a bracketed IPv6 address, and a port from 1 to 65535.
 *
 * @example
 * ```ts
 * import { endpointList } from "./endpoint.ts";
 * endpointList.parse("127.0.0.1:50052,[::1]:50053"); // ["127.0.0.1:50052", "[::1]:50053"]
 * ```
 * @module
 */
import { z } from "zod";

const ENDPOINT = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

/** One `HOST:PORT`, or the reason it is not one. */
export function checkEndpoint(raw: string): string | undefined {
  const m = ENDPOINT.exec(raw);
  if (!m) return `${JSON.stringify(raw)} is not HOST:PORT`;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return `${raw}: port must be 1 to 65535`;
  return undefined;
}

/** A comma-separated list of distinct endpoints. */
export const endpointList = z.string().transform((raw, ctx) => {
  const list = raw.split(",").map((s) => s.trim());
  for (const e of list) {
    const problem = checkEndpoint(e);
    if (problem) {
      ctx.addIssue({ code: "custom", message: problem });
      return z.NEVER;
    }
  }
  if (new Set(list).size !== list.length) {
    ctx.addIssue({ code: "custom", message: "an endpoint is listed twice" });
    return z.NEVER;
  }
  return list;
});
