/**
 * The shared CRI client suite against the fake runtime: the fake must answer the kubelet's
 * calls the way containerd does (tests/cri_containerd_test.ts runs the same cases there).
 */

import { join } from "node:path";
import { CriConnection } from "../src/cri/connection.ts";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { RemoteImageService } from "../src/cri/remote_image.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { registerCriSuite } from "./cri_suite.ts";

const IMAGE = "docker.io/library/busybox:1.36";

registerCriSuite("fake runtime:", {
  ignore: false,
  async setup() {
    const dir = await Deno.makeTempDir({ prefix: "cri-fake-" });
    const fake = await startFakeRuntime({ socket: join(dir, "cri.sock"), preloadImages: [IMAGE] });
    const conn = new CriConnection({ endpoint: fake.endpoint });
    return {
      runtime: new RemoteRuntimeService({ connection: conn, timeoutMs: 10_000 }),
      image: new RemoteImageService({ connection: conn, timeoutMs: 10_000 }),
      imageName: IMAGE,
      logRoot: join(dir, "pods"),
      longRunning: ["sleep", "3600"],
      async [Symbol.asyncDispose]() {
        conn.close();
        await fake.stop();
        await Deno.remove(dir, { recursive: true });
      },
    };
  },
});
