/**
 * `hearth rpc-server`: serves this host's compute devices (its GPUs, else its CPU) to another
 * Hearth over llama.cpp's RPC protocol, so one model can be split over several machines
 * (`hearth serve --master-addr H:P,...`). It is llama.cpp's own RPC server (ggml-rpc, built by
 * `deno task build:rpc`), started through the backend registry as `rpc-server` does.
 *
 * The protocol has no authentication or encryption: anyone who reaches the port can run graphs
 * and read or write device memory. Loopback is the default, and another host needs
 * `--allow-remote`.
 *
 * @example
 * ```sh
 * deno task build:rpc
 * deno run -A main.ts rpc-server --host 127.0.0.1 --port 50052 --threads 2
 * ```
 * @module
 */
import { z } from "zod";
import { parseFlags } from "./argv.ts";
import { isLoopback } from "./flags.ts";
import { listDevices, openLlama, rpcStartServer } from "../../ffi/mod.ts";
import { loadRpcBackend } from "../engine/devices.ts";

export type RpcServerConfig = {
  host: string;
  port: number;
  threads: number;
  cache?: string;
  allowRemote: boolean;
  help: boolean;
};

const FLAGS = [
  { key: "host", names: ["--host"], schema: z.string().min(1), meta: "HOST" },
  {
    key: "port",
    names: ["--port"],
    schema: z.string().regex(/^\d+$/, "must be a whole number").transform(Number).pipe(
      z.number().int().min(1, "must be 1 to 65535").max(65535, "must be 1 to 65535"),
    ),
    meta: "PORT",
  },
  {
    key: "threads",
    names: ["--threads", "-t"],
    schema: z.string().regex(/^\d+$/, "must be a whole number").transform(Number).pipe(
      z.number().int().min(1, "must be at least 1").max(1024, "must be at most 1024"),
    ),
    meta: "N",
  },
  { key: "cache", names: ["--cache"], schema: z.string().min(1), meta: "DIR" },
  { key: "allowRemote", names: ["--allow-remote"] },
  { key: "help", names: ["--help", "-h"] },
];

export const RPC_SERVER_HELP = [
  "Usage: hearth rpc-server [--host 127.0.0.1] [--port 50052] [--threads N] [--cache DIR]",
  "                         [--allow-remote]",
  "",
  "Serves this host's GPUs (or its CPU when it has none) to `hearth serve --master-addr H:P`.",
  "  --host HOST       address to listen on (default 127.0.0.1)",
  "  --port PORT       port (default 50052)",
  "  --threads N       CPU threads for the CPU device (default: the machine's cores)",
  "  --cache DIR       keep large tensors in DIR, so a restarted client sends them once",
  "  --allow-remote    listen on a non-loopback address. The RPC protocol has no",
  "                    authentication: only do this on a network you trust.",
  "Needs the RPC backend: `deno task build:rpc`.",
].join("\n");

export function parseRpcServerArgs(
  argv: string[],
): { ok: true; config: RpcServerConfig } | { ok: false; message: string } {
  const r = parseFlags(argv, FLAGS, {
    host: "127.0.0.1",
    port: 50052,
    threads: navigator.hardwareConcurrency,
    allowRemote: false,
    help: false,
  }, "hearth rpc-server --help");
  if (!r.ok) return r;
  const c = r.values as RpcServerConfig;
  if (!c.help && !isLoopback(c.host) && !c.allowRemote) {
    return {
      ok: false,
      message: `--host ${c.host} is not loopback: the RPC protocol is unauthenticated, so ` +
        "serving it to a network needs --allow-remote",
    };
  }
  return { ok: true, config: c };
}

/** Runs the command; resolves only when the server could not start (the message says why). */
export async function runRpcServer(argv: string[]): Promise<{ code: number; message?: string }> {
  const parsed = parseRpcServerArgs(argv);
  if (!parsed.ok) return { code: 2, message: parsed.message };
  const c = parsed.config;
  if (c.help) {
    console.log(RPC_SERVER_HELP);
    return { code: 0 };
  }
  const llama = openLlama();
  try {
    await loadRpcBackend(llama);
  } catch (e) {
    return { code: 2, message: (e as Error).message };
  }
  const all = listDevices(llama);
  const gpus = all.filter((d) => d.type === "gpu" || d.type === "igpu");
  const served = gpus.length > 0 ? gpus : all.filter((d) => d.type === "cpu");
  if (served.length === 0) return { code: 1, message: "this host has no device to serve" };
  const host = c.host.includes(":") && !c.host.startsWith("[") ? `[${c.host}]` : c.host;
  const endpoint = `${host}:${c.port}`;
  console.error(
    `hearth: rpc-server on ${endpoint} serving ${
      served.map((d) => `${d.name} (${d.description})`).join(", ")
    }` + (isLoopback(c.host) ? "" : " — unauthenticated, reachable from the network"),
  );
  await rpcStartServer(llama, {
    endpoint,
    cacheDir: c.cache,
    threads: c.threads,
    devices: served.map((d) => d.index),
  });
  return { code: 1, message: `rpc-server stopped: could not listen on ${endpoint} (in use?)` };
}
