import assert from "node:assert/strict";
import { join } from "node:path";
import { openHostView } from "./host_view.ts";
import { loadKubeletConfiguration } from "../app/kubelet_config.ts";
import { newKubeletFlags } from "../apis/flags.ts";
import type { KubeletServer } from "../apis/flags.ts";
import { type AgentPermissions, agentPermissions, INSPECTOR_SYS } from "./permission_set.ts";
import type { ProbeAnswer, ProbeOp } from "../testing/permission_probe.ts";
import { testCA, testServerCert } from "../testing/cert_fixtures.ts";
import https from "node:https";

/** True when the test may mount; else skips loudly, or throws under CI=true. */
function canMount(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

async function server(dir: string): Promise<KubeletServer> {
  const { config } = await loadKubeletConfiguration({
    configFile: "",
    dropinDir: "",
    flags: [],
    cgroupV1: false,
  });
  config.podLogsDir = join(dir, "pod-logs");
  config.staticPodPath = join(dir, "manifests");
  config.containerRuntimeEndpoint = `unix://${join(dir, "cri.sock")}`;
  const flags = {
    ...newKubeletFlags(),
    rootDirectory: join(dir, "root"),
    certDirectory: join(dir, "root", "pki"),
    kubeConfig: join(dir, "kubeconfig"),
    kubeletConfigFile: join(dir, "kubelet.yaml"),
  };
  return { flags, config };
}

/** Runs `ops` in a Worker under `perms` (or this test's own) and answers what each did. */
async function probe(
  perms: AgentPermissions | "inherit",
  ops: ProbeOp[],
): Promise<ProbeAnswer[]> {
  const worker = new Worker(new URL("../testing/permission_probe.ts", import.meta.url), {
    type: "module",
    deno: { permissions: perms },
  } as WorkerOptions);
  try {
    const answer = Promise.withResolvers<ProbeAnswer[]>();
    worker.onmessage = (e) => answer.resolve(e.data);
    worker.onerror = (e) => {
      e.preventDefault();
      answer.reject(new Error(e.message));
    };
    worker.postMessage(ops);
    return await answer.promise;
  } finally {
    worker.terminate();
  }
}

Deno.test("agentPermissions lists the configured paths, the host view and the programs", async () => {
  const s = await server("/srv/t");
  const perms = agentPermissions({
    server: s,
    view: {
      root: "/run/kubelet-ts/view",
      mounted: [
        { path: "/proc", kind: "dir", writable: false, recursive: false },
        { path: "/sys/fs/cgroup", kind: "dir", writable: true, recursive: true },
      ],
    },
    codeDir: "/opt/kubelet",
  });
  for (const p of ["/srv/t/root", "/srv/t/pod-logs", "/srv/t/cri.sock", "/var/log/containers"]) {
    assert.ok(perms.write.includes(p), `write ${p}`);
    assert.ok(perms.read.includes(p), `read ${p}`);
  }
  for (const p of ["/srv/t/kubelet.yaml", "/srv/t/manifests", "/srv/t/kubeconfig", "/var/log"]) {
    assert.ok(perms.read.includes(p), `read ${p}`);
    assert.ok(!perms.write.includes(p), `no write ${p}`);
  }
  assert.ok(perms.read.includes("/run/kubelet-ts/view"));
  assert.ok(!perms.write.includes("/run/kubelet-ts/view/proc"), "/proc is read-only");
  assert.ok(perms.write.includes("/run/kubelet-ts/view/sys/fs/cgroup"));
  assert.ok(perms.read.includes("/opt/kubelet"));
  assert.ok(!perms.read.some((p) => p === "/" || p === "/etc" || p.startsWith("/proc")));
  assert.deepEqual(perms.run, [
    "mount",
    "umount",
    "losetup",
    "df",
    "systemd-inhibit",
    "iptables",
    "ip6tables",
  ]);
  assert.equal(perms.ffi, false);
  // The profilers of /debug/pprof/ (served by default, as upstream's), and only while served.
  assert.ok(perms.sys.includes(INSPECTOR_SYS), String(perms.sys));
  for (const off of ["enableProfilingHandler", "enableDebuggingHandlers"] as const) {
    const t = await server("/srv/t");
    t.config[off] = false;
    const without = agentPermissions({
      server: t,
      view: { root: "/run/kubelet-ts/view", mounted: [] },
      codeDir: "/opt/kubelet",
    });
    assert.ok(!without.sys.includes(INSPECTOR_SYS), off);
  }
  // Node shutdown adds logind's bus socket and drop-in directory, and only then.
  assert.ok(!perms.write.includes("/run/dbus/system_bus_socket"));
  s.config.shutdownGracePeriod = 30_000;
  const withShutdown = agentPermissions({ server: s, view: { root: "/v", mounted: [] } });
  assert.ok(withShutdown.write.includes("/run/dbus/system_bus_socket"));
  assert.ok(withShutdown.write.includes("/etc/systemd/logind.conf.d"));
  // The bus address from the environment; the systemd cgroup driver needs the bus too.
  s.config.shutdownGracePeriod = 0;
  s.config.cgroupDriver = "systemd";
  const systemd = agentPermissions({
    server: s,
    view: { root: "/v", mounted: [] },
    busAddress: "unix:path=/tmp/bus/socket,guid=1",
  });
  assert.ok(systemd.read.includes("/tmp/bus/socket") && systemd.write.includes("/tmp/bus/socket"));
  assert.ok(!systemd.write.includes("/etc/systemd/logind.conf.d"));
});

Deno.test("an agent under its permission set reads its view and writes its dirs, and nothing else", async () => {
  if (!canMount("the sandbox probe")) return;
  const dir = await Deno.makeTempDir({ prefix: "sandbox-test-" });
  const viewDir = `/run/kubelet-ts-test/view-${crypto.randomUUID().slice(0, 8)}`;
  const view = await openHostView({ dir: viewDir });
  try {
    const s = await server(dir);
    for (const d of ["root", "pod-logs", "manifests"]) await Deno.mkdir(join(dir, d));
    await Deno.writeTextFile(join(dir, "kubelet.yaml"), "kind: KubeletConfiguration\n");
    await Deno.writeTextFile(join(dir, "outside"), "not for the agent\n");
    const perms = agentPermissions({
      server: s,
      view,
      containerLogsDir: join(dir, "containers"),
      nodeLogDir: join(dir, "varlog"),
    });
    const cgroupFile = (await Array.fromAsync(Deno.readDir(join(viewDir, "sys/fs/cgroup"))))
      .map((e) => e.name).sort()[0]!;
    const ops: ProbeOp[] = [
      // What the agent needs.
      { op: "read", path: join(viewDir, "proc/meminfo") },
      { op: "read", path: join(viewDir, "proc/self/mountinfo") },
      { op: "read", path: join(viewDir, "sys/fs/cgroup", cgroupFile) },
      { op: "read", path: join(dir, "kubelet.yaml") },
      { op: "write", path: join(dir, "root", "state") },
      { op: "write", path: join(dir, "pod-logs", "x.log") },
      { op: "run", program: "mount", args: ["--version"] },
      // What it must not do.
      { op: "read", path: "/etc/shadow" },
      // Through the view: /proc/<pid>/root would be the whole filesystem, so it is not there.
      { op: "read", path: join(viewDir, "proc/self/root/etc/shadow") },
      { op: "read", path: join(viewDir, "proc/1/root/etc/shadow") },
      { op: "read", path: join(viewDir, `proc/${Deno.pid}/root/etc/shadow`) },
      { op: "read", path: "/proc/meminfo" },
      { op: "read", path: "/sys/fs/cgroup" },
      { op: "read", path: join(dir, "outside") },
      { op: "write", path: join(dir, "outside") },
      { op: "write", path: "/etc/kubelet-ts-sandbox-probe" },
      { op: "write", path: join(viewDir, "proc/sys/vm/drop_caches") },
      { op: "run", program: "sh", args: ["-c", "true"] },
      { op: "run", program: "cat", args: ["/etc/shadow"] },
    ];
    const answers = await probe(perms, ops);
    const allowed = answers.slice(0, 7);
    const denied = answers.slice(7);
    allowed.forEach((a, i) => assert.ok(a.ok, `${JSON.stringify(ops[i])}: ${a.error}`));
    denied.forEach((a, i) => {
      const op = ops[i + 7];
      assert.ok(!a.ok, `${JSON.stringify(op)} must fail`);
      // A read-only mount refuses the write itself, and what the view lacks is not found; every
      // other denial is Deno's permission.
      if (op?.op === "write" && op.path.startsWith(viewDir)) {
        assert.match(a.error!, /NotCapable|Read-only file system/);
      } else if (op?.op === "read" && op.path.startsWith(viewDir)) {
        assert.match(a.error!, /^NotFound/, a.error);
      } else {
        assert.match(a.error!, /^NotCapable: Requires (read|write|run|all) access/, a.error);
      }
    });
    assert.equal(await Deno.readTextFile(join(dir, "outside")), "not for the agent\n");
  } finally {
    await view.remove();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a pod's HTTP and HTTPS probes work under the agent's permission set as outside it", async () => {
  // An HTTPS probe once failed in the sandbox only: node:tls loaded the system trust store,
  // which needs a sys permission the set does not grant.
  const ca = await testCA();
  const dir = await Deno.makeTempDir({ prefix: "sandbox-probe-" });
  const { certPem, keyPem } = await testServerCert(ca);
  const servers = [
    https.createServer({ cert: certPem, key: keyPem }, (_, res) => res.end("ok")),
  ];
  try {
    const httpsPort = await new Promise<number>((resolve) => {
      servers[0]!.listen(
        0,
        "127.0.0.1",
        () => resolve((servers[0]!.address() as { port: number }).port),
      );
    });
    await using plain = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      () => new Response("ok"),
    );
    const perms = agentPermissions({
      server: await server(dir),
      view: { root: join(dir, "view"), mounted: [] },
    });
    const ops: ProbeOp[] = [
      { op: "httpGetProbe", scheme: "HTTPS", port: httpsPort, path: "/healthz" },
      { op: "httpGetProbe", scheme: "HTTP", port: plain.addr.port, path: "/healthz" },
    ];
    const inside = await probe(perms, ops);
    const outside = await probe("inherit", ops);
    assert.deepEqual(inside, [{ ok: true }, { ok: true }]);
    assert.deepEqual(outside, inside);
  } finally {
    for (const s of servers) s.close();
    await ca.remove();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the sandbox's logind drop-in directory is the node shutdown manager's", async () => {
  const { LOGIND_CONFIG_DIRECTORY } = await import("../nodeshutdown/logind.ts");
  const { LOGIND_DROPIN_DIRECTORY } = await import("./permission_set.ts");
  assert.equal(LOGIND_DROPIN_DIRECTORY, LOGIND_CONFIG_DIRECTORY);
});

Deno.test("planLaunch lets the agent run the configured credential provider plugins, and no other file of their directory", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-cp-" });
  try {
    const bin = join(dir, "plugins");
    await Deno.mkdir(bin);
    for (const name of ["ecr-credential-provider", "not-configured"]) {
      await Deno.writeTextFile(join(bin, name), "#!/bin/sh\necho ran\n", { mode: 0o755 });
    }
    const cpConfig = join(dir, "credential-provider.yaml");
    await Deno.writeTextFile(
      cpConfig,
      [
        "apiVersion: kubelet.config.k8s.io/v1",
        "kind: CredentialProviderConfig",
        "providers:",
        "  - name: ecr-credential-provider",
        '    matchImages: ["*.dkr.ecr.*.amazonaws.com"]',
        "    defaultCacheDuration: 12h",
        "    apiVersion: credentialprovider.kubelet.k8s.io/v1",
      ].join("\n"),
    );
    const kubeletConfig = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(
      kubeletConfig,
      [
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        "failCgroupV1: false",
        `containerRuntimeEndpoint: unix://${dir}/cri.sock`,
        `podLogsDir: ${dir}/pod-logs`,
      ].join("\n"),
    );
    const { planLaunch } = await import("./permission_set.ts");
    const args = [
      ...["--config", kubeletConfig, "--root-dir", join(dir, "root")],
      ...["--image-credential-provider-config", cpConfig],
      ...["--image-credential-provider-bin-dir", bin],
    ];
    const plan = await planLaunch({ args, cgroupV1: true, root: true, runDir: "/run/test-views" });
    assert.equal(plan.kind, "sandbox");
    if (plan.kind !== "sandbox") return;
    const { permissions } = plan;
    assert.deepEqual(permissions.run, [
      "mount",
      "umount",
      "losetup",
      "df",
      "systemd-inhibit",
      join(bin, "ecr-credential-provider"),
      "iptables",
      "ip6tables",
    ]);
    assert.ok(permissions.read.includes(cpConfig) && permissions.read.includes(bin));
    const answers = await probe(permissions, [
      { op: "run", program: join(bin, "ecr-credential-provider") },
      { op: "read", path: cpConfig },
      { op: "run", program: join(bin, "not-configured") },
    ]);
    assert.deepEqual(answers.slice(0, 2), [{ ok: true }, { ok: true }]);
    assert.match(answers[2]?.error ?? "", /^NotCapable: Requires run access/);

    // A configuration that does not load: the kubelet reports it from its sandbox, which runs no
    // plugin (a check that fails never turns the sandbox off).
    await Deno.writeTextFile(cpConfig, "kind: Nope\n");
    const broken = await planLaunch({
      args,
      cgroupV1: true,
      root: true,
      runDir: "/run/test-views",
    });
    assert.equal(broken.kind, "sandbox");
    assert.ok(
      broken.kind === "sandbox" &&
        !broken.permissions.run.includes(join(bin, "ecr-credential-provider")),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("agentPermissions lets the agent run journalctl only when enableSystemLogQuery is on", async () => {
  const { JOURNALCTL } = await import("../server/journal_copy.ts");
  const { LOG_QUERY_PROGRAM } = await import("./permission_set.ts");
  assert.equal(LOG_QUERY_PROGRAM, JOURNALCTL);
  const dir = await Deno.makeTempDir({ prefix: "sandbox-journal-" });
  try {
    const s = await server(dir);
    const view = { root: join(dir, "view"), mounted: [] };
    const off = agentPermissions({ server: s, view });
    assert.ok(!off.run.includes("journalctl"));
    s.config.enableSystemLogHandler = true;
    s.config.enableSystemLogQuery = true;
    const on = agentPermissions({ server: s, view });
    assert.deepEqual(on.run, [...off.run, "journalctl"]);
    // The journal's units, as the node log query asks for them.
    const ops: ProbeOp[] = [{
      op: "run",
      program: "journalctl",
      args: ["--field", "_SYSTEMD_UNIT"],
    }];
    const [denied] = await probe(off, ops);
    assert.match(denied?.error ?? "", /^NotCapable: Requires run access to "journalctl"/);
    const [allowed] = await probe(on, ops);
    // Where journalctl is not installed, the permission still lets the agent try.
    assert.ok(allowed?.ok || /^NotFound/.test(allowed?.error ?? ""), allowed?.error);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("agentPermissions lets the agent run iptables and ip6tables only when makeIPTablesUtilChains is on", async () => {
  const { IPTABLES, IP6TABLES } = await import("../util/iptables.ts");
  const { IPTABLES_PROGRAMS } = await import("./permission_set.ts");
  assert.deepEqual(IPTABLES_PROGRAMS, [IPTABLES, IP6TABLES]);
  const dir = await Deno.makeTempDir({ prefix: "sandbox-iptables-" });
  try {
    const s = await server(dir);
    const view = { root: join(dir, "view"), mounted: [] };
    assert.equal(s.config.makeIPTablesUtilChains, true, "upstream's default");
    const on = agentPermissions({ server: s, view });
    s.config.makeIPTablesUtilChains = false;
    const off = agentPermissions({ server: s, view });
    assert.ok(!off.run.includes("iptables") && !off.run.includes("ip6tables"));
    assert.deepEqual(on.run, [...off.run, "iptables", "ip6tables"]);
    const ops: ProbeOp[] = [
      { op: "run", program: "iptables", args: ["--version"] },
      { op: "run", program: "ip6tables", args: ["--version"] },
    ];
    for (const denied of await probe(off, ops)) {
      assert.match(denied.error ?? "", /^NotCapable: Requires run access to "ip6?tables"/);
    }
    // Where iptables is not installed, the permission still lets the agent try.
    for (const allowed of await probe(on, ops)) {
      assert.ok(allowed.ok || /^NotFound/.test(allowed.error ?? ""), allowed.error);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
