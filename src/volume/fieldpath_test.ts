import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import {
  DownwardApiError,
  extractContainerResourceValue,
  extractFieldPathAsString,
  extractResourceValueByContainerNameAndNodeAllocatable,
  formatMap,
  splitMaybeSubscriptedPath,
} from "./fieldpath.ts";

const pod: V1Pod = {
  metadata: {
    name: "web",
    namespace: "shop",
    uid: "0b7c",
    labels: { tier: "front", app: "web" },
    annotations: { "example.com/Owner": "ops" },
  },
  spec: {
    containers: [{
      name: "main",
      resources: { requests: { cpu: "250m", memory: "64Mi" }, limits: { memory: "128Mi" } },
    }, {
      name: "huge",
      resources: { limits: { "hugepages-2Mi": "4Mi" }, requests: { "hugepages-2Mi": "4Mi" } },
    }],
    initContainers: [{ name: "init", resources: { limits: { cpu: "0" } } }],
  },
};

const allocatable = { cpu: "4", memory: "8Gi", "ephemeral-storage": "100Gi" };

Deno.test("formatMap sorts keys and quotes values as Go's %q", () => {
  assert.equal(formatMap(undefined), "");
  assert.equal(formatMap({ b: "2", a: "1" }), 'a="1"\nb="2"');
  assert.equal(
    formatMap({ k: 'say "hi"\\\n\t\x00\x7fé日本\u00a0\u{1f600}' }),
    'k="say \\"hi\\"\\\\\\n\\t\\x00\\x7fé日本\\u00a0\u{1f600}"',
  );
  // Go orders by bytes: upper case before lower case, and astral after BMP.
  assert.equal(
    formatMap({ b: "", B: "", "\u{1f600}": "", "\uffff": "" }),
    [
      'B=""',
      'b=""',
      '\uffff=""',
      '\u{1f600}=""',
    ].join("\n"),
  );
});

Deno.test("splitMaybeSubscriptedPath splits a subscripted path only", () => {
  assert.deepEqual(splitMaybeSubscriptedPath("metadata.labels['a/b']"), [
    "metadata.labels",
    "a/b",
  ]);
  assert.equal(splitMaybeSubscriptedPath("metadata.labels"), undefined);
  assert.equal(splitMaybeSubscriptedPath("['a']"), undefined);
  assert.equal(splitMaybeSubscriptedPath("metadata.labels[a']"), undefined);
});

Deno.test("extractFieldPathAsString resolves metadata fields", () => {
  assert.equal(extractFieldPathAsString(pod, "metadata.name"), "web");
  assert.equal(extractFieldPathAsString(pod, "metadata.namespace"), "shop");
  assert.equal(extractFieldPathAsString(pod, "metadata.uid"), "0b7c");
  assert.equal(extractFieldPathAsString(pod, "metadata.labels"), 'app="web"\ntier="front"');
  assert.equal(extractFieldPathAsString(pod, "metadata.annotations"), 'example.com/Owner="ops"');
  assert.equal(extractFieldPathAsString(pod, "metadata.labels['tier']"), "front");
  assert.equal(extractFieldPathAsString(pod, "metadata.labels['gone']"), "");
  assert.equal(extractFieldPathAsString(pod, "metadata.annotations['example.com/Owner']"), "ops");
});

Deno.test("extractFieldPathAsString rejects what volumes do not support", () => {
  assert.throws(
    () => extractFieldPathAsString(pod, "spec.nodeName"),
    new DownwardApiError("unsupported fieldPath: spec.nodeName"),
  );
  assert.throws(
    () => extractFieldPathAsString(pod, "metadata.name['x']"),
    new DownwardApiError(`fieldPath "metadata.name['x']" does not support subscript`),
  );
  assert.throws(
    () => extractFieldPathAsString(pod, "metadata.labels['-bad']"),
    new DownwardApiError(
      "invalid key subscript in metadata.labels['-bad']: name part must consist of alphanumeric " +
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character " +
        "(e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is " +
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    ),
  );
  assert.throws(
    () => extractFieldPathAsString(pod, "metadata.labels['Ex.com/a']"),
    /invalid key subscript in metadata\.labels\['Ex\.com\/a'\]: prefix part a lowercase RFC 1123/,
  );
});

Deno.test("extractResourceValueByContainerNameAndNodeAllocatable defaults missing limits", () => {
  const get = (resource: string, containerName = "main", divisor?: string) =>
    extractResourceValueByContainerNameAndNodeAllocatable(
      { resource, divisor },
      pod,
      containerName,
      allocatable,
    );
  assert.equal(get("requests.cpu", "main", "1m"), "250");
  assert.equal(get("requests.cpu"), "1"); // 0.25 cores, rounded up
  assert.equal(get("limits.cpu"), "4"); // node allocatable
  assert.equal(get("limits.memory", "main", "1Mi"), "128");
  assert.equal(get("limits.ephemeral-storage", "main", "1Gi"), "100");
  assert.equal(get("requests.ephemeral-storage"), "0");
  assert.equal(get("limits.hugepages-2Mi", "huge", "1Mi"), "4");
  assert.equal(get("limits.cpu", "init"), "4"); // a zero limit is defaulted too, in init containers
  assert.throws(() => get("limits.cpu", "nope"), new DownwardApiError("container nope not found"));
  assert.throws(
    () => get("limits.gpu"),
    new DownwardApiError("unsupported container resource : limits.gpu"),
  );
});

Deno.test("extractContainerResourceValue treats a zero divisor as 1", () => {
  const c = { name: "c", resources: { limits: { memory: "1500" } } };
  assert.equal(
    extractContainerResourceValue({ resource: "limits.memory", divisor: "0" }, c),
    "1500",
  );
  assert.equal(extractContainerResourceValue({ resource: "limits.memory", divisor: "1k" }, c), "2");
});
