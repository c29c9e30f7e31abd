import assert from "node:assert/strict";
import * as api from "../../proto/runtime/v1/api.ts";
import { isEmptyFilter, ReusingListCodec } from "./_list_reuse.ts";

function container(id: string, state = api.ContainerState.CONTAINER_RUNNING): api.Container {
  return api.Container.create({
    id,
    podSandboxId: `sb-${id}`,
    metadata: { name: `c-${id}`, attempt: 0 },
    state,
    createdAt: 1_700_000_000_000_000_000n + BigInt(id.length),
    labels: { "io.kubernetes.pod.uid": `uid-${id}`, "io.kubernetes.container.name": `c-${id}` },
    annotations: { "io.kubernetes.container.hash": "1a2b3c4d" },
  });
}

function codec() {
  return new ReusingListCodec({
    response: api.ListContainersResponse,
    entry: api.Container,
    field: 1,
    wrap: (containers) => ({ containers }),
  });
}

const bytesOf = (containers: api.Container[]) =>
  api.ListContainersResponse.encode({ containers }).finish();

Deno.test("ReusingListCodec decodes as the generated decoder and reuses unchanged entries", () => {
  const c = codec();
  const first = [container("a"), container("b"), container("c")];
  const one = c.decode(bytesOf(first));
  assert.deepEqual(one, api.ListContainersResponse.decode(bytesOf(first)));
  assert.deepEqual([c.decoded, c.reused], [3, 0]);

  // Reordered (containerd lists in map order), b exited, d new.
  const second = [
    container("c"),
    container("b", api.ContainerState.CONTAINER_EXITED),
    container("a"),
    container("d"),
  ];
  const two = c.decode(bytesOf(second));
  assert.deepEqual(two, api.ListContainersResponse.decode(bytesOf(second)));
  assert.equal(two.containers[0], one.containers[2], "c: the same object");
  assert.equal(two.containers[2], one.containers[0], "a: the same object");
  assert.notEqual(two.containers[1], one.containers[1], "b changed: decoded again");
  assert.deepEqual([c.decoded, c.reused], [5, 2]);

  // Only the previous response's entries are kept: b's old bytes are gone.
  const three = c.decode(bytesOf(first));
  assert.notEqual(three.containers[1], one.containers[1]);
  assert.equal(three.containers[1]!.state, api.ContainerState.CONTAINER_RUNNING);
  assert.deepEqual(c.decode(new Uint8Array()), { containers: [] });
});

Deno.test("ReusingListCodec leaves responses it does not know to the generated decoder", () => {
  const c = codec();
  const list = bytesOf([container("a")]);
  c.decode(list);
  // An unknown field 7 (varint 1) after the entries: decoded whole, as grpc-go would.
  const odd = new Uint8Array([...list, 7 << 3, 1]);
  assert.deepEqual(c.decode(odd), api.ListContainersResponse.decode(odd));
  assert.equal(c.reused, 0);
  // A length past the end: the generated decoder's error.
  const cut = list.slice(0, list.length - 3);
  assert.throws(() => api.ListContainersResponse.decode(cut));
  assert.throws(() => c.decode(cut));
});

Deno.test("isEmptyFilter takes no filter and the zero filter, and nothing that selects", () => {
  assert.equal(isEmptyFilter(undefined), true);
  assert.equal(isEmptyFilter(api.ContainerFilter.create()), true);
  assert.equal(isEmptyFilter(api.PodSandboxFilter.create()), true);
  assert.equal(isEmptyFilter(api.ContainerFilter.create({ id: "x" })), false);
  assert.equal(isEmptyFilter(api.ContainerFilter.create({ state: { state: 0 } })), false);
  assert.equal(isEmptyFilter(api.PodSandboxFilter.create({ labelSelector: { a: "b" } })), false);
});
