/**
 * @module
 * Smoke tests of the generated CRI bindings (`proto/runtime/v1/api.ts`): messages survive a
 * binary round trip, int64 fields are bigint (CRI timestamps are nanoseconds, past
 * Number.MAX_SAFE_INTEGER), field numbers match the published wire format, and the generated
 * service definitions, through the kubelet's CRI connection, talk to a real containerd over
 * its unix socket. The last test needs root and containerd; without them it is skipped loudly,
 * or fails when CI=true.
 */

import assert from "node:assert/strict";
import {
  ContainerConfig,
  ContainerState,
  ContainerStatus,
  ContainerStatusRequest,
  ListContainersRequest,
  MountPropagation,
  PodSandboxConfig,
  Protocol,
  RuntimeServiceDefinition,
  Signal,
  VersionRequest,
} from "./runtime/v1/api.ts";
import { startContainerd } from "../tests/containerd_harness.ts";
import { CriConnection, criMethods, GrpcCode, isCriCode } from "../src/cri/connection.ts";
import { requireRoot } from "../tests/requirements.ts";

const gate = await requireRoot("CRI client tests against containerd", [
  "containerd",
  "ctr",
  "runc",
]);

/** Encodes and decodes with the message's own codec. */
function roundTrip<T>(
  codec: { encode(m: T): { finish(): Uint8Array }; decode(b: Uint8Array): T },
  m: T,
): T {
  return codec.decode(codec.encode(m).finish());
}

Deno.test("PodSandboxConfig keeps metadata, labels, annotations and ports through a round trip", () => {
  const config = PodSandboxConfig.create({
    metadata: {
      name: "web-0",
      uid: "6f1c2a9e-0000-4000-8000-000000000001",
      namespace: "default",
      attempt: 2,
    },
    hostname: "web-0",
    logDirectory: "/var/log/pods/default_web-0_6f1c2a9e-0000-4000-8000-000000000001",
    dnsConfig: {
      servers: ["10.96.0.10"],
      searches: ["default.svc.cluster.local"],
      options: ["ndots:5"],
    },
    portMappings: [{
      protocol: Protocol.UDP,
      containerPort: 53,
      hostPort: 5353,
      hostIp: "127.0.0.1",
    }],
    labels: { "app": "web", "io.kubernetes.pod.namespace": "default" },
    annotations: { "kubernetes.io/config.source": "api", "empty": "" },
    linux: {
      cgroupParent: "/kubepods/burstable/pod6f1c2a9e",
      sysctls: { "net.ipv4.ip_forward": "1" },
    },
  });

  const decoded = roundTrip(PodSandboxConfig, config);

  assert.deepEqual(decoded, config);
  assert.deepEqual(decoded.labels, { "app": "web", "io.kubernetes.pod.namespace": "default" });
  assert.equal(decoded.annotations["kubernetes.io/config.source"], "api");
  assert.equal(decoded.annotations["empty"], "");
  assert.equal(decoded.metadata?.attempt, 2);
  assert.equal(decoded.portMappings[0]?.protocol, Protocol.UDP);
  assert.equal(decoded.linux?.sysctls["net.ipv4.ip_forward"], "1");
  assert.equal(decoded.windows, undefined, "an unset message field stays unset");
});

Deno.test("ContainerConfig keeps mounts and LinuxContainerResources with int64 as bigint", () => {
  const beyondSafe = 2n ** 62n + 1n; // not representable as a JS number
  const config = ContainerConfig.create({
    metadata: { name: "app", attempt: 1 },
    image: { image: "sha256:0123abcd", userSpecifiedImage: "busybox:1.36" },
    command: ["/bin/sh", "-c"],
    args: ["sleep 3600"],
    envs: [{ key: "GREETING", value: new TextEncoder().encode("héllo") }],
    mounts: [
      {
        containerPath: "/data",
        hostPath: "/var/lib/kubelet/pods/uid/volumes/kubernetes.io~empty-dir/data",
        propagation: MountPropagation.PROPAGATION_HOST_TO_CONTAINER,
        uidMappings: [{ hostId: 100000, containerId: 0, length: 65536 }],
      },
      {
        containerPath: "/etc/config",
        hostPath: "/tmp/config",
        readonly: true,
        recursiveReadOnly: true,
      },
    ],
    labels: { "io.kubernetes.container.name": "app" },
    logPath: "app/1.log",
    linux: {
      resources: {
        cpuPeriod: 100_000n,
        cpuQuota: 50_000n,
        cpuShares: 512n,
        memoryLimitInBytes: beyondSafe,
        oomScoreAdj: -997n,
        cpusetCpus: "0-1",
        hugepageLimits: [{ pageSize: "2MB", limit: 2n ** 63n + 5n }],
        unified: { "memory.high": "max" },
      },
      securityContext: { runAsUser: { value: 1000n }, supplementalGroups: [3000n, 4000n] },
    },
    stopSignal: Signal.SIGTERM,
  });

  const decoded = roundTrip(ContainerConfig, config);

  assert.deepEqual(decoded, config);
  const mounts = decoded.mounts;
  assert.equal(mounts.length, 2);
  assert.equal(mounts[0]?.propagation, MountPropagation.PROPAGATION_HOST_TO_CONTAINER);
  assert.deepEqual(mounts[0]?.uidMappings, [{ hostId: 100000, containerId: 0, length: 65536 }]);
  assert.equal(mounts[1]?.readonly, true);
  assert.equal(mounts[1]?.recursiveReadOnly, true);
  assert.equal(new TextDecoder().decode(decoded.envs[0]?.value), "héllo");

  const resources = decoded.linux?.resources;
  assert.ok(resources);
  for (
    const field of [
      "cpuPeriod",
      "cpuQuota",
      "cpuShares",
      "memoryLimitInBytes",
      "oomScoreAdj",
    ] as const
  ) {
    assert.equal(typeof resources[field], "bigint", `${field} is a bigint`);
  }
  assert.equal(resources.memoryLimitInBytes, beyondSafe);
  assert.equal(resources.oomScoreAdj, -997n);
  assert.equal(resources.hugepageLimits[0]?.limit, 2n ** 63n + 5n, "uint64 above int64 range");
  assert.deepEqual(decoded.linux?.securityContext?.supplementalGroups, [3000n, 4000n]);
  assert.equal(decoded.linux?.securityContext?.runAsUser?.value, 1000n);
  assert.equal(decoded.stopSignal, Signal.SIGTERM);
});

Deno.test("ListContainersRequest keeps its label and state filter through a round trip", () => {
  const request = ListContainersRequest.create({
    filter: {
      podSandboxId: "5a1f",
      state: { state: ContainerState.CONTAINER_EXITED },
      labelSelector: { "io.kubernetes.pod.uid": "6f1c2a9e", "tier": "backend" },
    },
  });

  const decoded = roundTrip(ListContainersRequest, request);

  assert.deepEqual(decoded, request);
  assert.deepEqual(decoded.filter?.labelSelector, {
    "io.kubernetes.pod.uid": "6f1c2a9e",
    "tier": "backend",
  });
  assert.equal(decoded.filter?.state?.state, ContainerState.CONTAINER_EXITED);
  assert.equal(decoded.filter?.id, "", "unset scalars decode to their proto3 default");
});

Deno.test("ContainerStatus keeps nanosecond timestamps exactly", () => {
  const createdAt = 1_767_225_600_123_456_789n; // 2026-01-01T00:00:00.123456789Z
  const status = ContainerStatus.create({
    id: "c1",
    state: ContainerState.CONTAINER_EXITED,
    createdAt,
    startedAt: createdAt + 1n,
    finishedAt: createdAt + 1_000_000_007n,
    exitCode: 137,
    reason: "OOMKilled",
  });

  const decoded = roundTrip(ContainerStatus, status);

  assert.equal(typeof decoded.createdAt, "bigint");
  assert.equal(decoded.createdAt, createdAt);
  assert.equal(decoded.startedAt, createdAt + 1n);
  assert.equal(decoded.finishedAt - decoded.createdAt, 1_000_000_007n);
  assert.equal(decoded.exitCode, 137);
});

Deno.test("generated codecs use the published field numbers", () => {
  // VersionRequest.version is field 1 (string): tag 0x0a, length 2, "v1".
  assert.deepEqual([...VersionRequest.encode({ version: "v1" }).finish()], [0x0a, 2, 0x76, 0x31]);
  // ContainerStatus.exit_code is field 7 (varint): tag 0x38.
  assert.deepEqual([...ContainerStatus.encode(ContainerStatus.create({ exitCode: 1 })).finish()], [
    0x38,
    1,
  ]);
  // A field this version does not know (number 99) is skipped, not an error.
  const withUnknown = Uint8Array.of(0x0a, 2, 0x76, 0x31, 0x98, 0x06, 0x01);
  assert.deepEqual(VersionRequest.decode(withUnknown), { version: "v1" });
});

Deno.test({
  name: "the generated service definitions call containerd over its unix socket",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "cri-client-" });
    try {
      await using containerd = await startContainerd({ dir, signal: AbortSignal.timeout(120_000) });
      const conn = new CriConnection({ endpoint: containerd.endpoint });
      const runtime = criMethods(RuntimeServiceDefinition);
      try {
        const version = await conn.unary(
          runtime.version,
          VersionRequest.create({ version: "v1" }),
          { timeoutMs: 10_000 },
        );
        assert.equal(version.runtimeApiVersion, "v1");
        assert.equal(version.runtimeName, "containerd");
        assert.notEqual(version.runtimeVersion, "");

        const listed = await conn.unary(
          runtime.listContainers,
          ListContainersRequest.create({
            filter: { labelSelector: { "io.kubernetes.pod.uid": "none" } },
          }),
          { timeoutMs: 10_000 },
        );
        assert.deepEqual(listed.containers, []);

        // A failed call: grpc-go puts the status in the response headers.
        await assert.rejects(
          conn.unary(
            runtime.containerStatus,
            ContainerStatusRequest.create({ containerId: "nope" }),
            {
              timeoutMs: 10_000,
            },
          ),
          (e: unknown) =>
            isCriCode(e, GrpcCode.NOT_FOUND) && e.rpc === "RuntimeService/ContainerStatus" &&
            /nope/.test(e.details),
        );
        // A method the runtime does not have.
        await assert.rejects(
          conn.unary(
            { ...runtime.version, path: "/runtime.v1.RuntimeService/NoSuchMethod" },
            VersionRequest.create({}),
            { timeoutMs: 10_000 },
          ),
          (e: unknown) => isCriCode(e, GrpcCode.UNIMPLEMENTED),
        );
      } finally {
        conn.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
