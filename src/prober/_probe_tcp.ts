/**
 * @module
 * The tcpSocket probe: a TCP connection opened and closed within the probe's deadline. Private
 * helper of `prober.ts`. Corresponds to upstream `pkg/probe/tcp/tcp.go`.
 */

import { joinHostPort } from "./probe_http.ts";

/** The outcome of a TCP probe. */
export interface TcpProbeOutcome {
  readonly result: "Success" | "Failure";
  readonly output: string;
}

/**
 * upstream DoTCPProbe: Success once connected (output ""), else Failure with Go's dial error
 * text (`dial tcp <addr>: i/o timeout` when the deadline passes). Rethrows when `signal` aborts.
 */
export async function doTcpProbe(
  host: string,
  port: number,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<TcpProbeOutcome> {
  const addr = joinHostPort(host, port);
  const deadline = AbortSignal.timeout(timeoutMs);
  const both = signal ? AbortSignal.any([deadline, signal]) : deadline;
  const connecting = Deno.connect({ hostname: host, port, transport: "tcp" });
  let fire = () => {};
  const aborted = new Promise<never>((_, reject) => {
    fire = () => reject(both.reason);
    if (both.aborted) fire();
    else both.addEventListener("abort", fire, { once: true });
  });
  aborted.catch(() => {});
  try {
    const conn = await Promise.race([connecting, aborted]);
    try {
      conn.close();
    } catch {
      // upstream only logs a failed close
    }
    return { result: "Success", output: "" };
  } catch (e) {
    // A connection that arrives after the deadline must not leak.
    connecting.then((c) => c.close(), () => {});
    if (signal?.aborted) throw signal.reason;
    if (deadline.aborted) return { result: "Failure", output: `dial tcp ${addr}: i/o timeout` };
    return { result: "Failure", output: `dial tcp ${addr}: ${dialErrorText(e)}` };
  } finally {
    both.removeEventListener("abort", fire);
  }
}

function dialErrorText(e: unknown): string {
  if (e instanceof Deno.errors.ConnectionRefused) return "connect: connection refused";
  const message = e instanceof Error ? e.message : String(e);
  if (/unreachable/i.test(message)) {
    return /host/i.test(message) ? "connect: no route to host" : "connect: network is unreachable";
  }
  return message;
}
