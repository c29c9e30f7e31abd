/**
 * @module
 * The node's InternalIP when --node-ip is not given: the IPv4 address of the interface that
 * holds the default route, as upstream's utilnet.ChooseHostInterface picks it (falling back to
 * the first non-loopback IPv4 address). Reads /proc/net/route, which needs no privileges.
 */

import { hostPath } from "../privilege/host_root.ts";

/** The interface of the IPv4 default route in a /proc/net/route text, if any. */
export function defaultRouteInterface(routes: string): string | undefined {
  for (const line of routes.split("\n").slice(1)) {
    const [iface, destination, , flags] = line.trim().split(/\s+/);
    // RTF_UP (0x1) and a zero destination make the default route.
    if (iface && destination === "00000000" && (Number.parseInt(flags ?? "0", 16) & 1) === 1) {
      return iface;
    }
  }
  return undefined;
}

/** Chooses the node IP from the default route's interface, or the first usable IPv4. */
export async function detectNodeIP(): Promise<string | undefined> {
  const interfaces = Deno.networkInterfaces().filter((i) =>
    i.family === "IPv4" && !i.address.startsWith("127.")
  );
  let iface: string | undefined;
  try {
    iface = defaultRouteInterface(await Deno.readTextFile(hostPath("/proc/net/route")));
  } catch {
    iface = undefined;
  }
  return (interfaces.find((i) => i.name === iface) ?? interfaces[0])?.address;
}
