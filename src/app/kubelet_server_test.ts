import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import type { Dependencies, OSInterface } from "../dependencies.ts";
import { createLogger } from "../klog/klog.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";
import { newKubeletFlags } from "../apis/flags.ts";
import { nodeHostname, parseNodeIPs, run, StartError } from "./kubelet_server.ts";
import { pathNeeds } from "../privilege/permissions.ts";
import type { KubeletServer } from "../apis/flags.ts";
import { startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { KERNEL_TUNABLES } from "../cm/kernel_tunables.ts";

async function server(
  flags: Partial<ReturnType<typeof newKubeletFlags>> = {},
  endpoint = "unix:///run/test/cri.sock",
): Promise<KubeletServer> {
  const { config } = await loadKubeletConfiguration({
    configFile: "",
    dropinDir: "",
    flags: [],
    cgroupV1: false,
  });
  config.healthzPort = 0;
  // The kubelet API has tests of its own; standalone, its default webhook auth cannot start.
  config.enableServer = false;
  config.containerRuntimeEndpoint = endpoint;
  return { flags: { ...newKubeletFlags(), rootDirectory: "/srv/kubelet", ...flags }, config };
}

function fakeDeps(
  lines: string[],
  os: Partial<OSInterface> = {},
  applied: string[] = [],
  overcommit = 1,
): Dependencies {
  return {
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    clock: new FakeClock(0),
    recorder: { event() {} },
    os: {
      hostname: () => "Node-A.Example",
      mkdirAll: () => Promise.resolve(),
      ...os,
    },
    // Never the test process's or the host's own.
    processSettings: {
      applyOOMScoreAdj: (v) => Promise.resolve(void applied.push(`oom_score_adj=${v}`)),
      setNoFileLimit: (soft, hard) => (applied.push(`nofile=${soft}:${hard}`), 1),
      sysctl: {
        get: (name) =>
          Promise.resolve(
            name === "vm/overcommit_memory"
              ? overcommit
              : KERNEL_TUNABLES.find(([n]) => n === name)![1],
          ),
        set: (name, value) => Promise.resolve(void applied.push(`${name}=${value}`)),
      },
    },
  };
}

Deno.test("nodeHostname lower-cases the override or the hostname", () => {
  assert.equal(nodeHostname("", () => "Node-A"), "node-a");
  assert.equal(nodeHostname(" Other ", () => "Node-A"), "other");
  assert.throws(() => nodeHostname("", () => ""), StartError);
});

Deno.test("parseNodeIPs accepts one IP or a dual-stack pair", () => {
  assert.deepEqual(parseNodeIPs(""), []);
  assert.deepEqual(parseNodeIPs("10.0.0.5"), ["10.0.0.5"]);
  assert.deepEqual(parseNodeIPs("10.0.0.5,fd00::5"), ["10.0.0.5", "fd00::5"]);
  assert.throws(() => parseNodeIPs("10.0.0.5,10.0.0.6"), /dual-stack pair/);
  assert.throws(() => parseNodeIPs("node-a"), /'node-a' is not an IP address/);
});

Deno.test("pathNeeds lists the runtime socket for read and write", async () => {
  const needs = pathNeeds(await server());
  assert.ok(needs.some((n) => n.permission === "write" && n.path === "/run/test/cri.sock"));
  assert.ok(
    needs.some((n) =>
      n.permission === "write" && n.path === "/srv/kubelet" && n.source === "--root-dir"
    ),
  );
});

Deno.test("run uses the injected OS and negotiates CRI v1 with the runtime", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-server-" });
  await using fake = await startFakeRuntime({ socket: `${dir}/cri.sock` });
  const lines: string[] = [];
  const made: string[] = [];
  const deps = fakeDeps(lines, { mkdirAll: (p) => Promise.resolve(void made.push(p)) });
  const ctl = new AbortController();
  const done = run(await server({}, fake.endpoint), deps, ctl.signal);
  while (!lines.some((l) => l.includes("Started kubelet"))) {
    await new Promise((r) => setTimeout(r, 1));
  }
  ctl.abort();
  await done;
  await Deno.remove(dir, { recursive: true });
  assert.deepEqual(made.slice(0, 8), [
    "/srv/kubelet",
    "/srv/kubelet/pods",
    "/srv/kubelet/plugins",
    "/srv/kubelet/plugins_registry",
    "/srv/kubelet/pod-resources",
    "/srv/kubelet/checkpoints",
    // The log directories, once the runtime is up (upstream initializeModules).
    "/var/log/containers",
    "/var/log/pods",
  ]);
  // The plugin watcher makes its directory again when it finds none (the injected mkdirAll
  // makes nothing), as upstream's does.
  assert.deepEqual(made.slice(8).filter((p) => p !== "/srv/kubelet/plugins_registry"), []);
  assert.ok(
    lines.some((l) =>
      l.includes('"Container runtime initialized" containerRuntime="fake-runtime"') &&
      l.includes('apiVersion="v1"')
    ),
    lines.join("\n"),
  );
  assert.ok(
    lines.some((l) => l.includes('"Started kubelet" nodeName="node-a.example" mode="standalone"')),
    lines.join("\n"),
  );
});

Deno.test("run applies the process settings itself unless the launcher has", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-server-" });
  try {
    await using fake = await startFakeRuntime({ socket: `${dir}/cri.sock` });
    // protectKernelDefaults: a tunable unlike upstream's stops the start.
    const lines: string[] = [];
    const applied: string[] = [];
    const s = await server({}, fake.endpoint);
    s.config.protectKernelDefaults = true;
    s.config.maxOpenFiles = 4096;
    await assert.rejects(
      run(s, fakeDeps(lines, {}, applied, 0), new AbortController().signal),
      { message: "invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0" },
    );
    assert.deepEqual(applied, ["oom_score_adj=-999", "nofile=4096:4096"]);
    assert.ok(
      lines.some((l) =>
        l.includes('"Failed to set rlimit on max file handles" err="operation not permitted"')
      ),
      lines.join("\n"),
    );
    assert.ok(
      lines.some((l) => l.includes('"Failed to start ContainerManager" err="invalid kernel flag')),
      lines.join("\n"),
    );
    // Under the launcher nothing is applied here (and the differing tunable is not seen).
    const ctl = new AbortController();
    const more: string[] = [];
    const started: string[] = [];
    const done = run(
      s,
      { ...fakeDeps(started, {}, more, 0), processSettings: "launcher" },
      ctl.signal,
    );
    while (!started.some((l) => l.includes("Started kubelet"))) {
      await new Promise((r) => setTimeout(r, 1));
    }
    ctl.abort();
    await done;
    assert.deepEqual(more, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("run refuses what is not supported or cannot be read, loudly", async () => {
  const deps = fakeDeps([]);
  const signal = new AbortController().signal;
  await assert.rejects(
    run(
      await server({
        kubeConfig: "/nonexistent/kubelet.conf",
        bootstrapKubeconfig: "/nonexistent/bootstrap-kubelet.conf",
      }),
      deps,
      signal,
    ),
    /unable to load bootstrap kubeconfig: .*\/nonexistent\/bootstrap-kubelet\.conf: cannot read kubeconfig/,
  );
  await assert.rejects(
    run(await server({ kubeConfig: "/nonexistent/kubelet.conf" }), deps, signal),
    /\/nonexistent\/kubelet\.conf: cannot read kubeconfig/,
  );
  await assert.rejects(
    run(await server({ cloudProvider: "aws" }), deps, signal),
    /--cloud-provider=aws is not supported/,
  );
});
