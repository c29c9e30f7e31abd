import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { CriConnection } from "./connection.ts";
import { RemoteRuntimeService } from "./remote_runtime.ts";
import { startFakeRuntime } from "../testing/fake_remote_runtime.ts";

const IMAGE = "docker.io/library/busybox:1.36";

Deno.test("RemoteRuntimeService's unfiltered lists give the unchanged entries' objects again", async () => {
  const dir = await Deno.makeTempDir({ prefix: "remote-runtime-" });
  const fake = await startFakeRuntime({ preloadImages: [IMAGE], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  try {
    const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
    const sandbox = api.PodSandboxConfig.create({
      metadata: { name: "p", namespace: "default", uid: "uid-p", attempt: 0 },
    });
    const pod = await runtime.runPodSandbox(sandbox, "");
    const ids: string[] = [];
    for (const name of ["a", "b"]) {
      const config = api.ContainerConfig.create({
        metadata: { name, attempt: 0 },
        image: { image: IMAGE },
        labels: { "io.kubernetes.container.name": name },
      });
      ids.push(await runtime.createContainer(pod, config, sandbox));
      await runtime.startContainer(ids.at(-1)!);
    }
    const byId = (l: api.Container[]) => new Map(l.map((c) => [c.id, c]));
    const first = byId(await runtime.listContainers());
    const again = byId(await runtime.listContainers(api.ContainerFilter.create()));
    assert.equal(again.get(ids[0]!), first.get(ids[0]!));
    assert.equal(again.get(ids[1]!), first.get(ids[1]!));
    const [sb] = await runtime.listPodSandbox();
    assert.equal((await runtime.listPodSandbox())[0], sb);

    // A container that changed is a new object; a filtered list shares nothing.
    await runtime.stopContainer(ids[1]!, 0);
    const after = byId(await runtime.listContainers());
    assert.equal(after.get(ids[0]!), first.get(ids[0]!));
    assert.notEqual(after.get(ids[1]!), first.get(ids[1]!));
    assert.equal(after.get(ids[1]!)?.state, api.ContainerState.CONTAINER_EXITED);
    const [filtered] = await runtime.listContainers(api.ContainerFilter.create({ id: ids[0]! }));
    assert.deepEqual(filtered, after.get(ids[0]!));
    assert.notEqual(filtered, after.get(ids[0]!));
  } finally {
    connection.close();
    await fake.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
