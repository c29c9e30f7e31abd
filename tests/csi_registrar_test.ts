/**
 * @module
 * Tests of tests/csi_registrar.ts: the registrar answers GetInfo as node-driver-registrar does
 * and records the kubelet's notifications, over its socket.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CriConnection, criMethods } from "../src/cri/connection.ts";
import { RegistrationDefinition } from "../proto/pluginregistration/v1/api.ts";
import { startRegistrar } from "./csi_registrar.ts";

const registration = criMethods(RegistrationDefinition);

Deno.test("startRegistrar answers GetInfo with the driver and records notifications", async () => {
  const dir = await Deno.makeTempDir({ prefix: "csi-registrar-test-" });
  try {
    const socket = join(dir, "plugins_registry", "hostpath.csi.k8s.io-reg.sock");
    await using registrar = await startRegistrar({
      socket,
      name: "hostpath.csi.k8s.io",
      endpoint: "/var/lib/kubelet/plugins/hostpath/csi.sock",
    });
    const conn = new CriConnection({ endpoint: socket });
    try {
      assert.deepEqual(await conn.unary(registration.getInfo, {}), {
        type: "CSIPlugin",
        name: "hostpath.csi.k8s.io",
        endpoint: "/var/lib/kubelet/plugins/hostpath/csi.sock",
        supportedVersions: ["1.0.0"],
      });
      await conn.unary(registration.notifyRegistrationStatus, {
        pluginRegistered: false,
        error: "no",
      });
      assert.deepEqual(registrar.notified, [{ pluginRegistered: false, error: "no" }]);
    } finally {
      conn.close();
    }
    await registrar.stop();
    await assert.rejects(Deno.stat(socket), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
