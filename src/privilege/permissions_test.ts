import assert from "node:assert/strict";
import { checkPermissions, PermissionSetError, unixSocketPath } from "./permissions.ts";

Deno.test("checkPermissions passes granted paths", () => {
  // deno test runs with --allow-all, so every path is granted here; the denial is shown by
  // tests/permission_set_test.ts, which runs the agent under its real permission set.
  checkPermissions([{ permission: "read", path: "/etc/hostname", source: "--config" }]);
});

Deno.test("PermissionSetError names the permission, path, source and the fix", () => {
  const e = new PermissionSetError({
    permission: "read",
    path: "/etc/shadow",
    source: "--kubeconfig",
  });
  assert.match(e.message, /does not allow read access to '\/etc\/shadow' \(from --kubeconfig\)/);
  assert.match(e.message, /--allow-read=\/etc\/shadow/);
  assert.match(e.message, /permissions\.kubelet\.read/);
});

Deno.test("unixSocketPath reads unix endpoints only", () => {
  assert.equal(
    unixSocketPath("unix:///run/containerd/containerd.sock"),
    "/run/containerd/containerd.sock",
  );
  assert.equal(unixSocketPath("/run/x.sock"), "/run/x.sock");
  assert.equal(unixSocketPath("tcp://127.0.0.1:1234"), undefined);
});
