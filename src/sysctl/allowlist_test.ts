import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import {
  FORBIDDEN_REASON,
  normalizeName,
  safeSysctlAllowlist,
  SysctlAllowlist,
  SysctlAllowlistError,
} from "./allowlist.ts";

const KERNEL = "6.1.0-28-amd64";

Deno.test("SysctlAllowlist accepts and refuses patterns as upstream's NewAllowlist", () => {
  const ok = [["kernel.msg*", "kernel.sem"], ["kernel/msg*", "kernel/sem"]];
  for (const p of ok) new SysctlAllowlist([...safeSysctlAllowlist(KERNEL), ...p]);
  const bad = [" kernel.msg*", "kernel.msg* ", "net.-", "net.*.foo", "net.*/foo", "foo", "foo*"];
  for (const p of bad) {
    assert.throws(
      () => new SysctlAllowlist([...safeSysctlAllowlist(KERNEL), p]),
      SysctlAllowlistError,
      p,
    );
  }
  assert.throws(() => new SysctlAllowlist(["foo"]), {
    message: 'the sysctls "foo" are not known to be namespaced',
  });
  assert.throws(() => new SysctlAllowlist(["net.-"]), {
    message:
      'sysctl "net.-" must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]',
  });
});

Deno.test("SysctlAllowlist admits as upstream's patternAllowlist", () => {
  const w = new SysctlAllowlist([
    ...safeSysctlAllowlist(KERNEL),
    "kernel.msg*",
    "kernel.sem",
    "net.b.*",
  ]);
  const pod = (name: string, hostNet = false, hostIPC = false): V1Pod => ({
    spec: {
      containers: [],
      hostNetwork: hostNet,
      hostIPC,
      securityContext: { sysctls: [{ name, value: "1" }] },
    },
  });
  for (
    const name of [
      "kernel.shm_rmid_forced",
      "kernel/shm_rmid_forced",
      "net.ipv4.ip_local_port_range",
      "kernel.msgmax",
      "kernel.sem",
      "kernel/sem",
    ]
  ) {
    assert.deepEqual(w.admit(pod(name)), { admit: true }, name);
  }
  const rejected: [V1Pod, string][] = [
    [
      pod("kernel.shm_rmid_forced", false, true),
      '"kernel.shm_rmid_forced" not allowed with host IPC enabled',
    ],
    [
      pod("net.ipv4.ip_local_port_range", true),
      '"net.ipv4.ip_local_port_range" not allowed with host Net enabled',
    ],
    [pod("foo"), '"foo" not allowlisted'],
    [pod("net.a.b.c"), '"net.a.b.c" not allowlisted'],
    [
      pod("net.ipv4.ip_local_port_range.a.b.c"),
      '"net.ipv4.ip_local_port_range.a.b.c" not allowlisted',
    ],
    [pod("kernel.msgmax", false, true), '"kernel.msgmax" not allowed with host IPC enabled'],
    [pod("kernel.sem", false, true), '"kernel.sem" not allowed with host IPC enabled'],
    [pod("net.b.c", true), '"net.b.c" not allowed with host Net enabled'],
  ];
  for (const [p, why] of rejected) {
    assert.deepEqual(w.admit(p), {
      admit: false,
      reason: FORBIDDEN_REASON,
      message: `forbidden sysctl: ${why}`,
    });
  }
  assert.deepEqual(w.admit({ spec: { containers: [], securityContext: { sysctls: [] } } }), {
    admit: true,
  });
  assert.deepEqual(w.admit({ spec: { containers: [] } }), { admit: true });
});

Deno.test("safeSysctlAllowlist drops the sysctls an old kernel does not namespace", () => {
  const dropped: string[] = [];
  const old = safeSysctlAllowlist("4.5.0", (s) => dropped.push(s));
  assert.ok(old.includes("net.ipv4.tcp_keepalive_time"));
  assert.deepEqual(dropped, ["net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]);
  assert.equal(safeSysctlAllowlist(KERNEL).length, 12);
  assert.equal(safeSysctlAllowlist(undefined).length, 5, "an unknown kernel: only the old ones");
});

Deno.test("normalizeName swaps separators when the first one is a slash", () => {
  assert.equal(
    normalizeName("net/ipv4/conf/eno2.100/rp_filter"),
    "net.ipv4.conf.eno2/100.rp_filter",
  );
  assert.equal(
    normalizeName("net.ipv4.conf.eno2/100.rp_filter"),
    "net.ipv4.conf.eno2/100.rp_filter",
  );
  assert.equal(normalizeName("kernel"), "kernel");
  assert.equal(normalizeName(""), "");
});
