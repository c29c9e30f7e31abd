import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { CriConnection } from "../cri/connection.ts";
import { DnsConfigurer } from "../network/dns.ts";
import { startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import {
  buildPodLogsDirectory,
  generatePodSandboxConfig,
  isHostNetworkPod,
  normalizeSysctlName,
  type SandboxConfigOptions,
} from "./kuberuntime_sandbox.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { handlerSupportsUserNamespaces, UsernsManager } from "../userns/userns_manager.ts";
import { newExclusiveCpus } from "../cm/exclusive_cpus.ts";

const UID = "3f1e2d4c-0000-4000-8000-000000000001";
const quiet = createLogger({ write: () => {} });

function options(over: Partial<SandboxConfigOptions> = {}): SandboxConfigOptions {
  const dns = new DnsConfigurer({
    clusterDNS: ["10.96.0.10"],
    clusterDomain: "cluster.local",
    resolvConf: "/etc/resolv.conf",
    readFile: () => Promise.resolve("nameserver 10.0.0.2\nsearch example.com\n"),
    logger: quiet,
  });
  return {
    dns,
    podLogsDirectory: "/var/log/pods",
    nodeHostname: "node-1",
    clusterDomain: "cluster.local",
    logger: quiet,
    ...over,
  };
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-userns-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function container(name: string, extra: Partial<V1Container> = {}): V1Container {
  return { name, image: "busybox", ...extra };
}

function pod(spec: Partial<V1PodSpec> = {}, name = "web"): V1Pod {
  return {
    metadata: {
      name,
      namespace: "shop",
      uid: UID,
      labels: { app: "web" },
      annotations: { note: "x" },
    },
    spec: {
      containers: [container("main")],
      dnsPolicy: "ClusterFirst",
      securityContext: {},
      ...spec,
    },
  };
}

const linux = (c: api.PodSandboxConfig) => {
  assert.ok(c.linux);
  return c.linux;
};
const sc = (c: api.PodSandboxConfig) => {
  const s = linux(c).securityContext;
  assert.ok(s);
  return s;
};

Deno.test("buildPodLogsDirectory joins namespace, name and uid under the root", () => {
  assert.equal(buildPodLogsDirectory("/var/log/pods", "ns", "p", "u"), "/var/log/pods/ns_p_u");
  assert.equal(buildPodLogsDirectory("/logs/", "ns", "p", "u"), "/logs/ns_p_u");
});

Deno.test("isHostNetworkPod is true only for spec.hostNetwork", () => {
  assert.equal(isHostNetworkPod(pod({ hostNetwork: true })), true);
  assert.equal(isHostNetworkPod(pod()), false);
});

Deno.test("generatePodSandboxConfig fills identity, labels, log directory and DNS", async () => {
  const c = await generatePodSandboxConfig(pod(), 2, options({ cgroupParent: "/kubepods/pod1" }));
  assert.deepEqual(c.metadata, { name: "web", namespace: "shop", uid: UID, attempt: 2 });
  assert.deepEqual(c.labels, {
    app: "web",
    "io.kubernetes.pod.name": "web",
    "io.kubernetes.pod.namespace": "shop",
    "io.kubernetes.pod.uid": UID,
  });
  assert.deepEqual(c.annotations, { note: "x" });
  assert.equal(c.hostname, "web");
  assert.equal(c.logDirectory, `/var/log/pods/shop_web_${UID}`);
  assert.deepEqual(c.dnsConfig, {
    servers: ["10.96.0.10"],
    searches: ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.com"],
    options: ["ndots:5"],
  });
  assert.deepEqual(c.portMappings, []);
  assert.equal(linux(c).cgroupParent, "/kubepods/pod1");
  assert.deepEqual(linux(c).sysctls, {});
});

Deno.test("generatePodSandboxConfig sets the sandbox security context defaults", async () => {
  const s = sc(await generatePodSandboxConfig(pod(), 0, options()));
  assert.deepEqual(s.namespaceOptions, {
    network: api.NamespaceMode.POD,
    pid: api.NamespaceMode.CONTAINER,
    ipc: api.NamespaceMode.POD,
    targetId: "",
    usernsOptions: { mode: api.NamespaceMode.NODE, uids: [], gids: [] },
  });
  assert.deepEqual(s.seccomp, {
    profileType: api.SecurityProfile_ProfileType.RuntimeDefault,
    localhostRef: "",
  });
  assert.equal(s.privileged, false);
  assert.equal(s.readonlyRootfs, false);
  assert.equal(s.runAsUser, undefined);
  assert.deepEqual(s.supplementalGroups, []);
  assert.equal(s.supplementalGroupsPolicy, api.SupplementalGroupsPolicy.Merge);
});

Deno.test("generatePodSandboxConfig maps host and shared namespaces", async () => {
  const host = sc(
    await generatePodSandboxConfig(
      pod({ hostNetwork: true, hostPID: true, hostIPC: true }),
      0,
      options(),
    ),
  );
  assert.equal(host.namespaceOptions?.network, api.NamespaceMode.NODE);
  assert.equal(host.namespaceOptions?.pid, api.NamespaceMode.NODE);
  assert.equal(host.namespaceOptions?.ipc, api.NamespaceMode.NODE);
  const shared = sc(
    await generatePodSandboxConfig(pod({ shareProcessNamespace: true }), 0, options()),
  );
  assert.equal(shared.namespaceOptions?.pid, api.NamespaceMode.POD);
});

Deno.test("generatePodSandboxConfig copies users, groups and SELinux options", async () => {
  const s = sc(
    await generatePodSandboxConfig(
      pod({
        securityContext: {
          runAsUser: 1000,
          runAsGroup: 3000,
          fsGroup: 2000,
          supplementalGroups: [4000, 5000],
          supplementalGroupsPolicy: "Strict",
          seLinuxOptions: { level: "s0:c123,c456", type: "spc_t" },
          seccompProfile: { type: "Unconfined" },
        },
      }),
      0,
      options(),
    ),
  );
  assert.deepEqual(s.runAsUser, { value: 1000n });
  assert.deepEqual(s.runAsGroup, { value: 3000n });
  assert.deepEqual(s.supplementalGroups, [2000n, 4000n, 5000n]);
  assert.equal(s.supplementalGroupsPolicy, api.SupplementalGroupsPolicy.Strict);
  assert.deepEqual(s.selinuxOptions, { user: "", role: "", type: "spc_t", level: "s0:c123,c456" });
  // The sandbox itself always runs runtime/default, as upstream.
  assert.equal(s.seccomp?.profileType, api.SecurityProfile_ProfileType.RuntimeDefault);
});

Deno.test("generatePodSandboxConfig refuses an unknown supplementalGroupsPolicy", async () => {
  await assert.rejects(
    () =>
      generatePodSandboxConfig(
        pod({ securityContext: { supplementalGroupsPolicy: "Loose" } }),
        0,
        options(),
      ),
    { name: "SandboxConfigError", message: "unsupported supplementalGroupsPolicy: Loose" },
  );
});

Deno.test("generatePodSandboxConfig marks the sandbox privileged for any privileged container", async () => {
  const priv = { securityContext: { privileged: true } };
  const init = pod({ initContainers: [container("init", priv)] });
  assert.equal(sc(await generatePodSandboxConfig(init, 0, options())).privileged, true);
  const eph = pod({ ephemeralContainers: [{ name: "debug", ...priv }] });
  assert.equal(sc(await generatePodSandboxConfig(eph, 0, options())).privileged, true);
});

Deno.test("generatePodSandboxConfig passes sysctls with slash names converted to dots", async () => {
  const c = await generatePodSandboxConfig(
    pod({
      securityContext: {
        sysctls: [
          { name: "kernel.shm_rmid_forced", value: "1" },
          { name: "net/ipv4/conf/eno2.100/rp_filter", value: "1" },
        ],
      },
    }),
    0,
    options(),
  );
  assert.deepEqual(linux(c).sysctls, {
    "kernel.shm_rmid_forced": "1",
    "net.ipv4.conf.eno2/100.rp_filter": "1",
  });
  assert.equal(
    normalizeSysctlName("net.ipv4.conf.eno2/100.rp_filter"),
    "net.ipv4.conf.eno2/100.rp_filter",
  );
});

Deno.test("generatePodSandboxConfig refuses an invalid sysctl name, naming the field", async () => {
  await assert.rejects(
    () =>
      generatePodSandboxConfig(
        pod({ securityContext: { sysctls: [{ name: "Kernel..bad", value: "1" }] } }),
        0,
        options(),
      ),
    (err: unknown) => {
      assert.ok(err instanceof Error);
      assert.equal(err.name, "SandboxConfigError");
      assert.match(err.message, /'spec\.securityContext\.sysctls\[0\]\.name'.*"Kernel\.\.bad"/);
      return true;
    },
  );
});

Deno.test("generatePodSandboxConfig uses spec.hostname and truncates long names", async () => {
  const named = await generatePodSandboxConfig(pod({ hostname: "db-0" }), 0, options());
  assert.equal(named.hostname, "db-0");
  // 62 characters then '-' and more: cut at 63 leaves a trailing '-', which is trimmed.
  const longName = `${"a".repeat(62)}-tail`;
  const long = await generatePodSandboxConfig(pod({}, longName), 0, options());
  assert.equal(long.hostname, "a".repeat(62));
});

Deno.test("generatePodSandboxConfig refuses an invalid spec.hostname or subdomain", async () => {
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ hostname: "Bad_Host" }), 0, options()),
    { name: "SandboxConfigError", message: /^pod Hostname "Bad_Host" is not a valid DNS label: / },
  );
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ subdomain: "a.b" }), 0, options()),
    { name: "SandboxConfigError", message: /^pod Subdomain "a\.b" is not a valid DNS label: / },
  );
});

Deno.test("generatePodSandboxConfig sets the FQDN as hostname with setHostnameAsFQDN", async () => {
  const spec = { hostname: "db-0", subdomain: "db" };
  const plain = await generatePodSandboxConfig(pod(spec), 0, options());
  assert.equal(plain.hostname, "db-0");
  const fqdn = await generatePodSandboxConfig(
    pod({ ...spec, setHostnameAsFQDN: true }),
    0,
    options(),
  );
  assert.equal(fqdn.hostname, "db-0.db.shop.svc.cluster.local");
  // Without a subdomain there is no domain, so the short hostname stays.
  const noDomain = await generatePodSandboxConfig(
    pod({ hostname: "db-0", setHostnameAsFQDN: true }),
    0,
    options(),
  );
  assert.equal(noDomain.hostname, "db-0");
  const longDomain = options({ clusterDomain: `${"c".repeat(47)}.local` });
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ ...spec, setHostnameAsFQDN: true }), 0, longDomain),
    {
      name: "SandboxConfigError",
      message:
        /^failed to construct FQDN from pod hostname and cluster domain, FQDN .* is too long \(64 characters is the max, 70 characters requested\)$/,
    },
  );
});

Deno.test("generatePodSandboxConfig prefers spec.hostnameOverride", async () => {
  const c = await generatePodSandboxConfig(
    pod({ hostname: "db-0", subdomain: "db", hostnameOverride: "override.example.host" }),
    0,
    options(),
  );
  assert.equal(c.hostname, "override.example.host");
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ hostnameOverride: "-bad-" }), 0, options()),
    { name: "SandboxConfigError", message: /not a valid DNS subdomain/ },
  );
});

Deno.test("generatePodSandboxConfig leaves host-network sandboxes without a hostname", async () => {
  const c = await generatePodSandboxConfig(pod({ hostNetwork: true, hostname: "x" }), 0, options());
  assert.equal(c.hostname, "");
  // ClusterFirst on the host network falls back to the host's resolver.
  assert.deepEqual(c.dnsConfig?.servers, ["10.0.0.2"]);
});

Deno.test("generatePodSandboxConfig maps every regular container port", async () => {
  const c = await generatePodSandboxConfig(
    pod({
      initContainers: [container("init", { ports: [{ containerPort: 1, hostPort: 1 }] })],
      containers: [
        container("a", {
          ports: [
            { name: "http", containerPort: 80, hostPort: 8080, protocol: "TCP" },
            { name: "http", containerPort: 81, hostPort: 8081, protocol: "TCP" },
            { containerPort: 53, hostPort: 53, protocol: "UDP", hostIP: "127.0.0.1" },
            { containerPort: 9000, protocol: "SCTP" },
          ],
        }),
        container("b", { ports: [{ containerPort: 7000, hostPort: 7000, protocol: "QUIC" }] }),
      ],
    }),
    0,
    options(),
  );
  assert.deepEqual(c.portMappings, [
    { protocol: api.Protocol.TCP, containerPort: 80, hostPort: 8080, hostIp: "" },
    { protocol: api.Protocol.UDP, containerPort: 53, hostPort: 53, hostIp: "127.0.0.1" },
    { protocol: api.Protocol.SCTP, containerPort: 9000, hostPort: 0, hostIp: "" },
    { protocol: api.Protocol.TCP, containerPort: 7000, hostPort: 7000, hostIp: "" },
  ]);
});

Deno.test("generatePodSandboxConfig sums container requests and limits into resources", async () => {
  const c = await generatePodSandboxConfig(
    pod({
      containers: [
        container("a", {
          resources: { requests: { cpu: "250m" }, limits: { cpu: "500m", memory: "128Mi" } },
        }),
        container("b", {
          resources: { requests: { cpu: "100m" }, limits: { cpu: "250m", memory: "64Mi" } },
        }),
      ],
      overhead: { cpu: "100m", memory: "10Mi" },
    }),
    0,
    options(),
  );
  const r = linux(c).resources;
  assert.equal(r?.cpuShares, 358n); // 350m * 1024 / 1000
  assert.equal(r?.cpuQuota, 75000n); // 750m of a 100ms period
  assert.equal(r?.cpuPeriod, 100000n);
  assert.equal(r?.memoryLimitInBytes, 192n * 1024n * 1024n);
  const o = linux(c).overhead;
  assert.equal(o?.cpuShares, 102n);
  assert.equal(o?.cpuQuota, 10000n);
  assert.equal(o?.memoryLimitInBytes, 10n * 1024n * 1024n);
});

Deno.test("generatePodSandboxConfig gives minimal shares and no quota to unconstrained pods", async () => {
  const c = await generatePodSandboxConfig(pod(), 0, options());
  const r = linux(c).resources;
  assert.equal(r?.cpuShares, 2n);
  assert.equal(r?.cpuQuota, 0n);
  assert.equal(r?.memoryLimitInBytes, 0n);
  assert.deepEqual(r?.unified, {});
  assert.equal(linux(c).overhead?.cpuShares, 0n);
});

Deno.test("generatePodSandboxConfig takes CPU shares from the limit without a request", async () => {
  const c = await generatePodSandboxConfig(
    pod({ containers: [container("a", { resources: { limits: { cpu: "1" } } })] }),
    0,
    options(),
  );
  assert.equal(linux(c).resources?.cpuShares, 1024n);
});

Deno.test("generatePodSandboxConfig counts init containers and sidecars as upstream", async () => {
  const c = await generatePodSandboxConfig(
    pod({
      initContainers: [
        container("side", { restartPolicy: "Always", resources: { limits: { cpu: "200m" } } }),
        container("setup", { resources: { limits: { cpu: "1" } } }),
      ],
      containers: [container("a", { resources: { limits: { cpu: "300m" } } })],
    }),
    0,
    options(),
  );
  // max(300m + 200m running, 1 + 200m during setup) = 1200m.
  assert.equal(linux(c).resources?.cpuQuota, 120000n);
});

Deno.test("generatePodSandboxConfig uses pod-level resources when set", async () => {
  const c = await generatePodSandboxConfig(
    pod({
      resources: { requests: { cpu: "2" }, limits: { cpu: "4", memory: "1Gi" } },
      containers: [container("a", { resources: { limits: { cpu: "1" } } })],
    }),
    0,
    options(),
  );
  const r = linux(c).resources;
  assert.equal(r?.cpuShares, 2048n);
  assert.equal(r?.cpuQuota, 400000n);
  assert.equal(r?.memoryLimitInBytes, 1073741824n);
});

Deno.test("generatePodSandboxConfig follows the CFS quota and OOM group settings", async () => {
  const spec = { containers: [container("a", { resources: { limits: { cpu: "1" } } })] };
  const off = linux(await generatePodSandboxConfig(pod(spec), 0, options({ cpuCFSQuota: false })));
  assert.equal(off.resources?.cpuQuota, 0n);
  assert.equal(off.resources?.cpuPeriod, 0n);
  const short = linux(
    await generatePodSandboxConfig(pod(spec), 0, options({ cpuCFSQuotaPeriodMs: 50 })),
  );
  assert.equal(short.resources?.cpuPeriod, 50000n);
  assert.equal(short.resources?.cpuQuota, 50000n);
  const v2 = linux(await generatePodSandboxConfig(pod(spec), 0, options({ cgroupV2: true })));
  assert.deepEqual(v2.resources?.unified, { "memory.oom.group": "1" });
  const single = linux(
    await generatePodSandboxConfig(
      pod(spec),
      0,
      options({ cgroupV2: true, singleProcessOOMKill: true }),
    ),
  );
  assert.deepEqual(single.resources?.unified, {});
});

Deno.test("generatePodSandboxConfig gives a pod on exclusive CPUs no CFS quota, its overhead keeps one", async () => {
  const spec = {
    containers: [container("a", { resources: { requests: { cpu: "2" }, limits: { cpu: "2" } } })],
    overhead: { cpu: "100m" },
  };
  const pinned = newExclusiveCpus({ exclusiveCpus: (_uid, name) => name === "a" ? [2, 3] : [] });
  const c = linux(await generatePodSandboxConfig(pod(spec), 0, options({ exclusiveCpus: pinned })));
  assert.equal(c.resources?.cpuQuota, -1n);
  assert.equal(c.resources?.cpuPeriod, 100000n);
  assert.equal(c.resources?.cpuShares, 2048n);
  // upstream convertOverheadToLinuxResources never lifts the overhead's quota.
  assert.equal(c.overhead?.cpuQuota, 10000n);
  // With DisableCPUQuotaWithExclusiveCPUs off the quota is enforced.
  const off = newExclusiveCpus({
    exclusiveCpus: () => [2, 3],
    featureGates: { DisableCPUQuotaWithExclusiveCPUs: false },
  });
  const enforced = linux(
    await generatePodSandboxConfig(pod(spec), 0, options({ exclusiveCpus: off })),
  );
  assert.equal(enforced.resources?.cpuQuota, 200000n);
  // A pod none of whose containers is pinned keeps its quota.
  const other = newExclusiveCpus({ exclusiveCpus: () => [] });
  const shared = linux(
    await generatePodSandboxConfig(pod(spec), 0, options({ exclusiveCpus: other })),
  );
  assert.equal(shared.resources?.cpuQuota, 200000n);
});

Deno.test("generatePodSandboxConfig refuses Windows pods, and user namespaces without a manager", async () => {
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ os: { name: "windows" } }), 0, options()),
    { name: "SandboxConfigError", message: /'spec\.os\.name' "windows" is not supported yet/ },
  );
  await assert.rejects(
    () => generatePodSandboxConfig(pod({ hostUsers: false }), 0, options()),
    { name: "SandboxConfigError", message: /'spec\.hostUsers' false .* is not supported/ },
  );
  const linuxPod = await generatePodSandboxConfig(pod({ os: { name: "linux" } }), 0, options());
  assert.equal(linuxPod.hostname, "web");
});

Deno.test("generatePodSandboxConfig gives a hostUsers: false pod its allocated user namespace", async () => {
  await withTempDir(async (dir) => {
    const handlers: api.RuntimeHandler[] = [
      { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: true } },
      { name: "kata", features: { recursiveReadOnlyMounts: false, userNamespaces: false } },
    ];
    const userNamespaces = await UsernsManager.open({
      podsDirectory: dir,
      maxPods: 110,
      handlerSupportsUserNamespaces: (h) => handlerSupportsUserNamespaces(handlers, h),
      kubeletMappings: (ids) => Promise.resolve({ firstID: ids, length: ids * 200 }),
      random: () => 0,
      logger: quiet,
    });
    const lookups: (string | undefined)[] = [];
    const runtimeClasses = {
      lookupRuntimeHandler: (name: string | null | undefined) => {
        lookups.push(name ?? undefined);
        return name === "kata" ? "kata" : "";
      },
    };
    const opts = options({ userNamespaces, runtimeClasses });
    const s = sc(await generatePodSandboxConfig(pod({ hostUsers: false }), 0, opts));
    const mapping = { hostId: 65536, containerId: 0, length: 65536 };
    assert.deepEqual(s.namespaceOptions, {
      network: api.NamespaceMode.POD,
      pid: api.NamespaceMode.CONTAINER,
      ipc: api.NamespaceMode.POD,
      targetId: "",
      usernsOptions: { mode: api.NamespaceMode.POD, uids: [mapping], gids: [mapping] },
    });
    // The pod's next sandbox (or config) gets the same block back.
    const again = sc(await generatePodSandboxConfig(pod({ hostUsers: false }), 1, opts));
    assert.deepEqual(again.namespaceOptions, s.namespaceOptions);
    assert.equal(userNamespaces.allocated, 1);
    // Pods keeping the host's users name the node's namespace; their class is not looked up.
    const host = sc(await generatePodSandboxConfig(pod({ runtimeClassName: "kata" }), 0, opts));
    assert.equal(host.namespaceOptions?.usernsOptions?.mode, api.NamespaceMode.NODE);
    assert.deepEqual(lookups, [undefined, undefined]);
    // A handler without user namespaces fails the sandbox with upstream's message.
    await assert.rejects(
      () =>
        generatePodSandboxConfig(
          pod({ hostUsers: false, runtimeClassName: "kata" }, "other"),
          0,
          opts,
        ),
      {
        name: "UserNamespaceError",
        message:
          'can\'t set `spec.hostUsers: false`, RuntimeClass handler "kata" does not support user namespaces',
      },
    );
  });
});

Deno.test("generatePodSandboxConfig stops on an aborted signal", async () => {
  const ctl = new AbortController();
  ctl.abort(new Error("shutting down"));
  await assert.rejects(() => generatePodSandboxConfig(pod(), 0, options(), ctl.signal), {
    message: "shutting down",
  });
});

Deno.test("generatePodSandboxConfig output runs a sandbox on the CRI runtime unchanged", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-config-" });
  const fake = await startFakeRuntime({ socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  try {
    const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
    const config = await generatePodSandboxConfig(
      pod({
        hostNetwork: true,
        securityContext: { runAsUser: 1000, fsGroup: 2000 },
        containers: [
          container("a", {
            ports: [{ containerPort: 80, hostPort: 8080, protocol: "TCP" }],
            resources: { requests: { cpu: "250m" }, limits: { cpu: "500m", memory: "64Mi" } },
          }),
        ],
      }),
      1,
      options(),
    );
    const id = await runtime.runPodSandbox(config, "");
    const stored = fake.service.sandboxes.get(id);
    assert.ok(stored);
    assert.deepEqual(stored.config, config);
    // The runtime saw a NODE network namespace: no pod IP.
    const status = await runtime.podSandboxStatus(id);
    assert.equal(status.status?.network?.ip ?? "", "");
    assert.equal(status.status?.metadata?.attempt, 1);
  } finally {
    connection.close();
    await fake.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
