import assert from "node:assert/strict";
import { defaultRouteInterface, detectNodeIP } from "./node_address.ts";

Deno.test("defaultRouteInterface finds the interface of the default route", () => {
  const routes = [
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT",
    "kts0\t0000580A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0",
    "eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0",
  ].join("\n");
  assert.equal(defaultRouteInterface(routes), "eth0");
  assert.equal(defaultRouteInterface(routes.split("\n").slice(0, 2).join("\n")), undefined);
});

Deno.test("detectNodeIP returns an address of this machine", async () => {
  const ip = await detectNodeIP();
  assert.ok(ip === undefined || Deno.networkInterfaces().some((i) => i.address === ip));
});
