// Expected values marked "upstream" were printed by a throwaway Go program (kept outside the
// repo) built against k8s.io/kubernetes v1.37.2, which called the real kubelet functions:
// kubecontainer.HashContainer directly, and kuberuntime's unexported newPodLabels,
// newContainerLabels, newContainerAnnotations and getContainerInfoFromAnnotations through
// //go:linkname, on the same pod and container as below. 0x8e45cbd0 is also the constant of
// upstream's own TestConsistentHashContainer.

import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  CONTAINER_HASH_LABEL,
  CONTAINER_PORTS_LABEL,
  CONTAINER_PRE_STOP_HANDLER_LABEL,
  CONTAINER_RESTART_COUNT_LABEL,
  getContainerInfoFromAnnotations,
  getContainerInfoFromLabels,
  getPodSandboxInfoFromAnnotations,
  getPodSandboxInfoFromLabels,
  hashContainer,
  newContainerAnnotations,
  newContainerLabels,
  newPodAnnotations,
  newPodLabels,
  POD_DELETION_GRACE_PERIOD_LABEL,
  POD_TERMINATION_GRACE_PERIOD_LABEL,
} from "./labels.ts";

const UID = "0b6f2c1e-3f4a-4c5d-9e8f-1a2b3c4d5e6f";

const CONTAINER: V1Container = {
  name: "web",
  image: "nginx:1.27",
  terminationMessagePath: "/dev/termination-log",
  terminationMessagePolicy: "File",
  ports: [
    { name: "http", containerPort: 80, protocol: "TCP" },
    { name: "https", hostPort: 443, containerPort: 8443, protocol: "TCP", hostIP: "0.0.0.0" },
  ],
  lifecycle: {
    preStop: {
      httpGet: {
        path: "/quit?a=1&b=<2>",
        port: "http",
        scheme: "HTTP",
        httpHeaders: [{ name: "X-Why", value: 'café\u2028"q"\t' }],
      },
    },
  },
};

const POD: V1Pod = {
  metadata: {
    name: "web-7d9f",
    namespace: "shop",
    uid: UID,
    labels: { app: "web", tier: "front&end", "io.kubernetes.pod.name": "spoofed" },
    annotations: { note: "x" },
    deletionGracePeriodSeconds: 30,
  },
  spec: { terminationGracePeriodSeconds: 45, containers: [CONTAINER] },
};

const DEVICE_ANNOTATIONS = {
  annotations: [
    { name: "vendor.example/device", value: "gpu0" },
    { name: CONTAINER_HASH_LABEL, value: "plugin" },
  ],
};

/** upstream */
const EXPECTED_CONTAINER_ANNOTATIONS = {
  "io.kubernetes.container.hash": "e220f96",
  "io.kubernetes.container.ports":
    '[{"name":"http","containerPort":80,"protocol":"TCP"},{"name":"https","hostPort":443,"containerPort":8443,"protocol":"TCP","hostIP":"0.0.0.0"}]',
  "io.kubernetes.container.preStopHandler":
    '{"httpGet":{"path":"/quit?a=1\\u0026b=\\u003c2\\u003e","port":"http","scheme":"HTTP","httpHeaders":[{"name":"X-Why","value":"café\\u2028\\"q\\"\\t"}]}}',
  "io.kubernetes.container.restartCount": "3",
  "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
  "io.kubernetes.container.terminationMessagePolicy": "File",
  "io.kubernetes.pod.deletionGracePeriod": "30",
  "io.kubernetes.pod.terminationGracePeriod": "45",
  "vendor.example/device": "gpu0",
};

Deno.test("newPodLabels copies the pod's labels and overrides the identity labels", () => {
  // upstream
  assert.deepEqual(newPodLabels(POD), {
    app: "web",
    "io.kubernetes.pod.name": "web-7d9f",
    "io.kubernetes.pod.namespace": "shop",
    "io.kubernetes.pod.uid": UID,
    tier: "front&end",
  });
  assert.deepEqual(newPodLabels({}), {
    "io.kubernetes.pod.name": "",
    "io.kubernetes.pod.namespace": "",
    "io.kubernetes.pod.uid": "",
  });
});

Deno.test("newPodAnnotations returns a copy of the pod's annotations", () => {
  const annotations = newPodAnnotations(POD);
  assert.deepEqual(annotations, { note: "x" });
  annotations.note = "changed";
  assert.equal(POD.metadata?.annotations?.note, "x");
  assert.deepEqual(newPodAnnotations({}), {});
});

Deno.test("newContainerLabels holds only the pod identity and the container name", () => {
  // upstream
  assert.deepEqual(newContainerLabels(CONTAINER, POD), {
    "io.kubernetes.container.name": "web",
    "io.kubernetes.pod.name": "web-7d9f",
    "io.kubernetes.pod.namespace": "shop",
    "io.kubernetes.pod.uid": UID,
  });
});

Deno.test("newContainerAnnotations matches upstream byte for byte", () => {
  assert.deepEqual(
    newContainerAnnotations(CONTAINER, POD, 3, DEVICE_ANNOTATIONS),
    EXPECTED_CONTAINER_ANNOTATIONS,
  );
});

Deno.test("newContainerAnnotations leaves out unset grace periods, preStop and ports", () => {
  assert.deepEqual(newContainerAnnotations({ name: "x" }, {}, 0), {
    "io.kubernetes.container.hash": hashContainer({ name: "x" }).toString(16),
    "io.kubernetes.container.restartCount": "0",
    "io.kubernetes.container.terminationMessagePath": "",
    "io.kubernetes.container.terminationMessagePolicy": "",
  });
  const noPorts = newContainerAnnotations({ name: "x", ports: [] }, {}, 0);
  assert.equal(CONTAINER_PORTS_LABEL in noPorts, false);
});

Deno.test("newContainerAnnotations encodes preStop handlers as Go's encoding/json does", () => {
  const preStopOf = (preStop: NonNullable<V1Container["lifecycle"]>["preStop"]) =>
    newContainerAnnotations({ name: "x", lifecycle: { preStop } }, {}, 0)[
      CONTAINER_PRE_STOP_HANDLER_LABEL
    ];
  // upstream
  assert.equal(
    preStopOf({ exec: { command: ["/bin/sh", "-c", 'sleep 5 && echo "done" > /x\n\x01\b\f'] } }),
    '{"exec":{"command":["/bin/sh","-c","sleep 5 \\u0026\\u0026 echo \\"done\\" \\u003e /x\\n\\u0001\\b\\f"]}}',
  );
  assert.equal(preStopOf({ exec: {} }), '{"exec":{}}');
  assert.equal(preStopOf({ sleep: { seconds: 7 } }), '{"sleep":{"seconds":7}}');
  assert.equal(
    preStopOf({ tcpSocket: { port: 8080, host: "10.0.0.1" } }),
    '{"tcpSocket":{"port":8080,"host":"10.0.0.1"}}',
  );
  assert.equal(preStopOf({ httpGet: { port: 0 } }), '{"httpGet":{"port":0}}');
  // upstream (json.Marshal of v1.LifecycleHandler): `protocol` is new in v1.37 and not yet in
  // the client-node types.
  const h2 = { httpGet: { port: 8080, host: "h", protocol: "HTTP2" }, sleep: { seconds: 0 } };
  assert.equal(
    preStopOf(h2 as Parameters<typeof preStopOf>[0]),
    '{"httpGet":{"port":8080,"host":"h","protocol":"HTTP2"},"sleep":{"seconds":0}}',
  );
  assert.equal(preStopOf({}), "{}");
  // Fields Go's struct does not have are dropped, as a Go kubelet would never see them.
  const extra = { exec: { command: ["a"], shell: "bash" } } as unknown as Parameters<
    typeof preStopOf
  >[0];
  assert.equal(preStopOf(extra), '{"exec":{"command":["a"]}}');
  // upstream
  assert.equal(
    newContainerAnnotations({ name: "x", ports: [{ containerPort: 0 }] }, {}, 0)[
      CONTAINER_PORTS_LABEL
    ],
    '[{"containerPort":0}]',
  );
});

Deno.test("getPodSandboxInfoFromLabels reads back what newPodLabels wrote", () => {
  assert.deepEqual(getPodSandboxInfoFromLabels(newPodLabels(POD)), {
    labels: { app: "web", tier: "front&end" },
    podName: "web-7d9f",
    podNamespace: "shop",
    podUid: UID,
  });
  assert.deepEqual(getPodSandboxInfoFromLabels({}), {
    labels: {},
    podName: "",
    podNamespace: "",
    podUid: "",
  });
});

Deno.test("getPodSandboxInfoFromAnnotations returns the pod's annotations", () => {
  assert.deepEqual(getPodSandboxInfoFromAnnotations(newPodAnnotations(POD)), {
    annotations: { note: "x" },
  });
});

Deno.test("getContainerInfoFromLabels reads back what newContainerLabels wrote", () => {
  assert.deepEqual(getContainerInfoFromLabels(newContainerLabels(CONTAINER, POD)), {
    containerName: "web",
    podName: "web-7d9f",
    podNamespace: "shop",
    podUid: UID,
  });
  // Inherited properties are not labels.
  assert.equal(getContainerInfoFromLabels({}).containerName, "");
  assert.equal(getContainerInfoFromLabels({ constructor: "c" }).podName, "");
});

Deno.test("getContainerInfoFromAnnotations reads back what newContainerAnnotations wrote", () => {
  // upstream
  assert.deepEqual(getContainerInfoFromAnnotations(EXPECTED_CONTAINER_ANNOTATIONS), {
    info: {
      hash: 0xe220f96,
      restartCount: 3,
      podDeletionGracePeriod: 30,
      podTerminationGracePeriod: 45,
      terminationMessagePath: "/dev/termination-log",
      terminationMessagePolicy: "File",
      preStopHandler: CONTAINER.lifecycle?.preStop,
      containerPorts: CONTAINER.ports,
    },
    problems: [],
  });
  assert.deepEqual(getContainerInfoFromAnnotations({}), {
    info: { hash: 0, restartCount: 0, terminationMessagePath: "", terminationMessagePolicy: "" },
    problems: [],
  });
});

Deno.test("getContainerInfoFromAnnotations zeroes numbers strconv rejects and reports them", () => {
  // upstream: all four are errors, all four read as 0 or absent.
  const { info, problems } = getContainerInfoFromAnnotations({
    [CONTAINER_HASH_LABEL]: "0x10",
    [CONTAINER_RESTART_COUNT_LABEL]: "1.0",
    [POD_DELETION_GRACE_PERIOD_LABEL]: "abc",
    [POD_TERMINATION_GRACE_PERIOD_LABEL]: "9223372036854775808",
  });
  assert.deepEqual(info, {
    hash: 0,
    restartCount: 0,
    terminationMessagePath: "",
    terminationMessagePolicy: "",
  });
  assert.deepEqual(problems, [
    {
      label: CONTAINER_HASH_LABEL,
      value: "0x10",
      error: 'strconv.ParseUint: parsing "0x10": invalid syntax',
    },
    {
      label: CONTAINER_RESTART_COUNT_LABEL,
      value: "1.0",
      error: 'strconv.Atoi: parsing "1.0": invalid syntax',
    },
    {
      label: POD_DELETION_GRACE_PERIOD_LABEL,
      value: "abc",
      error: 'strconv.ParseInt: parsing "abc": invalid syntax',
    },
    {
      label: POD_TERMINATION_GRACE_PERIOD_LABEL,
      value: "9223372036854775808",
      error: 'strconv.ParseInt: parsing "9223372036854775808": value out of range',
    },
  ]);

  // upstream: signs, leading zeros and the full uint64 range are accepted; "" and spaces are not.
  const odd = getContainerInfoFromAnnotations({
    [CONTAINER_HASH_LABEL]: "FFFFFFFFFFFFFFFF",
    [CONTAINER_RESTART_COUNT_LABEL]: "+007",
    [POD_DELETION_GRACE_PERIOD_LABEL]: "-5",
    [POD_TERMINATION_GRACE_PERIOD_LABEL]: "",
  });
  assert.equal(odd.info.hash, Number(2n ** 64n - 1n));
  assert.equal(odd.info.restartCount, 7);
  assert.equal(odd.info.podDeletionGracePeriod, -5);
  assert.equal(odd.info.podTerminationGracePeriod, undefined);
  assert.deepEqual(odd.problems.map((p) => p.label), [POD_TERMINATION_GRACE_PERIOD_LABEL]);

  const tooBig = getContainerInfoFromAnnotations({
    [CONTAINER_HASH_LABEL]: "10000000000000000",
    [CONTAINER_RESTART_COUNT_LABEL]: " 1",
  });
  assert.deepEqual(tooBig.problems.map((p) => p.label), [
    CONTAINER_HASH_LABEL,
    CONTAINER_RESTART_COUNT_LABEL,
  ]);
  assert.match(tooBig.problems[0]?.error ?? "", /value out of range/);
});

Deno.test("getContainerInfoFromAnnotations drops JSON json.Unmarshal would reject", () => {
  // upstream: each pair below is two errors and leaves preStop and ports unset.
  for (
    const [preStop, ports] of [
      ["{bad", '{"a":1}'],
      ['{"exec":{"command":"x"}}', '[{"containerPort":"80"}]'],
      ['{"sleep":{"seconds":1.5}}', '[{"containerPort":1.5}]'],
      ['{"tcpSocket":{"port":"http"},"httpGet":{"port":true}}', '[{"containerPort":2147483648}]'],
    ]
  ) {
    const { info, problems } = getContainerInfoFromAnnotations({
      [CONTAINER_PRE_STOP_HANDLER_LABEL]: preStop ?? "",
      [CONTAINER_PORTS_LABEL]: ports ?? "",
    });
    assert.equal(info.preStopHandler, undefined, preStop);
    assert.equal(info.containerPorts, undefined, ports);
    assert.deepEqual(problems.map((p) => p.label), [
      CONTAINER_PRE_STOP_HANDLER_LABEL,
      CONTAINER_PORTS_LABEL,
    ]);
  }
});

Deno.test("getContainerInfoFromAnnotations decodes JSON with Go's leniency", () => {
  // upstream: null is an empty handler and no ports.
  const nulls = getContainerInfoFromAnnotations({
    [CONTAINER_PRE_STOP_HANDLER_LABEL]: "null",
    [CONTAINER_PORTS_LABEL]: "null",
  });
  assert.deepEqual(nulls.info.preStopHandler, {});
  assert.equal(nulls.info.containerPorts, undefined);
  assert.deepEqual(nulls.problems, []);

  // upstream: keys match case-insensitively, unknown keys are ignored, null is a zero value.
  const folded = getContainerInfoFromAnnotations({
    [CONTAINER_PRE_STOP_HANDLER_LABEL]:
      '{"Exec":{"COMMAND":["a"]},"unknown":1,"httpGet":{"port":null,"httpHeaders":null}}',
    [CONTAINER_PORTS_LABEL]: '[{"containerport":80,"Name":"x","protocol":null},null]',
  });
  assert.deepEqual(folded.info.preStopHandler, {
    exec: { command: ["a"] },
    httpGet: { port: 0 },
  });
  assert.deepEqual(folded.info.containerPorts, [
    { name: "x", containerPort: 80 },
    { containerPort: 0 },
  ]);
  assert.deepEqual(folded.problems, []);
});

Deno.test("hashContainer matches upstream HashContainer", () => {
  // upstream
  const cases: [name: string, image: string, hash: number][] = [
    ["test_container", "foo/image:v1", 0x8e45cbd0],
    ["web", "nginx:1.27", 0xe220f96],
    ["", "", 0xedd67cc4],
    ["c", "registry.example.com/a&b<c>:v\u2028\u2029", 0xc20b94c4],
    ["容器", "imagé@sha256:ab", 0x3230aa4b],
    ['ctl\x01\t\n"\\', "\x7f/", 0x47d3d2d9],
    // Go's JSON decoder turns a lone surrogate into U+FFFD before the kubelet hashes it.
    ["lone", "\ud800", 0xa4d5a321],
    ["lone", "\ufffd", 0xa4d5a321],
  ];
  for (const [name, image, hash] of cases) {
    assert.equal(hashContainer({ name, image }), hash, `${name}|${image}`);
  }
});

Deno.test("hashContainer changes with name or image and with nothing else", () => {
  const base = hashContainer(CONTAINER);
  assert.equal(hashContainer({ ...CONTAINER }), base);
  assert.equal(hashContainer({ name: "web", image: "nginx:1.27" }), base);
  const changed: V1Container = { ...CONTAINER, args: ["-g", "daemon off;"], ports: [] };
  assert.equal(hashContainer(changed), base);
  assert.notEqual(hashContainer({ ...CONTAINER, image: "nginx:1.28" }), base);
  assert.notEqual(hashContainer({ ...CONTAINER, name: "web2" }), base);
  assert.equal(hashContainer({ name: "x" }), hashContainer({ name: "x", image: "" }));
});
