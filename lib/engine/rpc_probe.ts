/**
 * Checks that an RPC server answers llama.cpp's HELLO with a protocol this build speaks, before
 * ggml is handed the endpoint: ggml-rpc aborts the whole process when it cannot connect, so a
 * typo in `--master-addr` would otherwise kill the server with a core dump instead of a message.
 *
 * Wire format (ggml-rpc.cpp, protocol 7): the client sends the command byte 14, a little-endian
 * u64 input size (24) and 24 bytes of transport capabilities (zero: plain TCP); the server
 * answers a u64 size (28), then major, minor, patch, padding and its own 24 capability bytes.
 *
 * @example
 * ```ts
 * import { probeRpcServer } from "./rpc_probe.ts";
 * await probeRpcServer("127.0.0.1:50052"); // throws a one-line reason when it would fail
 * ```
 * @module
 */

const RPC_CMD_HELLO = 14;
const CAPS_SIZE = 24;
const HELLO_RSP_SIZE = 4 + CAPS_SIZE;
/** `RPC_PROTO_MAJOR_VERSION` / `RPC_PROTO_MINOR_VERSION` of the bundled llama.cpp. */
export const RPC_PROTOCOL = { major: 7, minor: 0 };

function splitEndpoint(endpoint: string): { hostname: string; port: number } {
  const i = endpoint.lastIndexOf(":");
  return {
    hostname: endpoint.slice(0, i).replace(/^\[(.*)\]$/, "$1"),
    port: Number(endpoint.slice(i + 1)),
  };
}

async function readExactly(conn: Deno.Conn, n: number): Promise<Uint8Array | undefined> {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = await conn.read(out.subarray(got));
    if (r === null) return undefined;
    got += r;
  }
  return out;
}

/** Resolves when the server would be accepted by ggml; throws a one-line reason otherwise. */
export async function probeRpcServer(endpoint: string, timeoutMs = 5000): Promise<void> {
  const { hostname, port } = splitEndpoint(endpoint);
  let conn: Deno.Conn | undefined;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    conn?.close();
  }, timeoutMs);
  try {
    conn = await Deno.connect({ hostname, port });
    if (timedOut) throw new Error("timed out");
    const hello = new Uint8Array(1 + 8 + CAPS_SIZE);
    hello[0] = RPC_CMD_HELLO;
    new DataView(hello.buffer).setBigUint64(1, BigInt(CAPS_SIZE), true);
    await conn.write(hello);
    const size = await readExactly(conn, 8);
    const body = size && await readExactly(conn, HELLO_RSP_SIZE);
    if (!size || !body) {
      throw new Error("closed the connection during the handshake (not a llama.cpp RPC server?)");
    }
    const n = new DataView(size.buffer).getBigUint64(0, true);
    if (n !== BigInt(HELLO_RSP_SIZE)) {
      throw new Error(`answered the handshake with ${n} bytes (another llama.cpp RPC protocol)`);
    }
    const [major, minor, patch] = body;
    if (major !== RPC_PROTOCOL.major || minor > RPC_PROTOCOL.minor) {
      throw new Error(
        `speaks RPC protocol ${major}.${minor}.${patch}; this build speaks ` +
          `${RPC_PROTOCOL.major}.${RPC_PROTOCOL.minor} (run the same Hearth release on both hosts)`,
      );
    }
  } catch (e) {
    const why = timedOut
      ? `did not answer within ${timeoutMs / 1000} s (an RPC server serves one client at a ` +
        "time: is another Hearth using it?)"
      : e instanceof Deno.errors.ConnectionRefused
      ? "refused the connection (is `hearth rpc-server` running there?)"
      : (e as Error).message;
    throw new Error(`RPC server ${endpoint} ${why}`);
  } finally {
    clearTimeout(timer);
    try {
      conn?.close();
    } catch { /* closed by the timer */ }
  }
}
