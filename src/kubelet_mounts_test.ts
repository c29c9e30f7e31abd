import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { createLogger } from "./klog/klog.ts";
import {
  etcHostsPath,
  KubeletMounts,
  type KubeletMountsOptions,
  type MakeMountsRequest,
  managedHostsFileContent,
  MountsError,
  nodeHostsFileContent,
  runtimeClassSupportsRecursiveReadOnlyMounts,
  safeMakeDir,
  serveSubPathCall,
  shouldMountHostsFile,
} from "./kubelet_mounts.ts";
import { serveHostCall } from "./privilege/launcher_calls.ts";
import type { MountedVolume } from "./volume/plugin.ts";

const UID = "uid-1";
const quiet = createLogger({ write: () => {} });

interface Env extends AsyncDisposable {
  readonly root: string;
  readonly pods: string;
  /** The host path of volume "data", a directory inside `root`. */
  readonly data: string;
  /** A directory outside every volume. */
  readonly outside: string;
  readonly volumes: Map<string, MountedVolume>;
  mounts(opts?: Partial<KubeletMountsOptions>): KubeletMounts;
}

async function env(): Promise<Env> {
  const root = await Deno.makeTempDir({ prefix: "kubelet_mounts_test_" });
  const pods = join(root, "pods");
  const data = join(root, "volumes", "data");
  const outside = join(root, "outside");
  await Deno.mkdir(data, { recursive: true });
  await Deno.mkdir(outside);
  const volumes = new Map<string, MountedVolume>([
    ["data", { hostPath: data, readOnly: false, selinuxRelabel: true }],
    ["config", {
      hostPath: join(root, "volumes", "config"),
      readOnly: true,
      selinuxRelabel: false,
    }],
  ]);
  await Deno.mkdir(join(root, "volumes", "config"));
  return {
    root,
    pods,
    data,
    outside,
    volumes,
    mounts: (opts = {}) =>
      new KubeletMounts({
        podsDirectory: pods,
        podVolumes: (uid) => uid === UID ? volumes : new Map(),
        logger: quiet,
        ...opts,
      }),
    async [Symbol.asyncDispose]() {
      await Deno.remove(root, { recursive: true });
    },
  };
}

function pod(container: V1Container, spec: Partial<V1PodSpec> = {}): V1Pod {
  return {
    metadata: { name: "web", namespace: "shop", uid: UID },
    spec: { containers: [container], ...spec },
  };
}

function request(
  container: V1Container,
  overrides: Partial<MakeMountsRequest> = {},
  spec: Partial<V1PodSpec> = {},
): MakeMountsRequest {
  return {
    pod: pod(container, spec),
    container,
    podIPs: [],
    hostname: "web",
    domain: "",
    envs: [],
    ...overrides,
  };
}

function rejectsWith(p: Promise<unknown>, message: string | RegExp): Promise<void> {
  return assert.rejects(p, (e: Error) => {
    assert.ok(e instanceof MountsError, `${e.name}: ${e.message}`);
    if (typeof message === "string") assert.equal(e.message, message);
    else assert.match(e.message, message);
    return true;
  });
}

Deno.test("KubeletMounts maps each volumeMount to a CRI mount", async () => {
  await using e = await env();
  const c: V1Container = {
    name: "app",
    volumeMounts: [
      { name: "data", mountPath: "/data" },
      { name: "data", mountPath: "relative/dir/", readOnly: true },
      { name: "config", mountPath: "/config" },
    ],
  };
  const mounts = await e.mounts().makeMounts(request(c));
  assert.deepEqual(mounts, [
    api.Mount.create({
      containerPath: "/data",
      hostPath: e.data,
      readonly: false,
      selinuxRelabel: true,
      propagation: api.MountPropagation.PROPAGATION_PRIVATE,
    }),
    // Every mount of a volume asks for the relabel, as upstream's (its makeMounts marks a copy
    // of the volume as labelled); a relative mountPath becomes absolute.
    api.Mount.create({
      containerPath: "/relative/dir",
      hostPath: e.data,
      readonly: true,
      selinuxRelabel: true,
    }),
    // The volume's own read-only wins over the volumeMount.
    api.Mount.create({
      containerPath: "/config",
      hostPath: join(e.root, "volumes", "config"),
      readonly: true,
    }),
  ]);
});

Deno.test("KubeletMounts mounts an image volume as the pulled image, subPath for the runtime", async () => {
  await using e = await env();
  e.volumes.set("img", { hostPath: "", readOnly: true, selinuxRelabel: false });
  const image = api.ImageSpec.create({
    image: "sha256:0123",
    userSpecifiedImage: "registry.local/data:1",
  });
  const c: V1Container = {
    name: "app",
    env: [{ name: "SUB", value: "etc" }],
    volumeMounts: [
      { name: "img", mountPath: "/volume" },
      { name: "img", mountPath: "/etc-only", subPath: "etc" },
      { name: "img", mountPath: "/expr", subPathExpr: "$(SUB)", readOnly: true },
    ],
  };
  const spec = { volumes: [{ name: "img", image: { reference: "registry.local/data:1" } }] };
  const mounts = await e.mounts().makeMounts(
    request(
      c,
      { imageVolumes: new Map([["img", image]]), envs: [{ name: "SUB", value: "etc" }] },
      spec,
    ),
  );
  const want = (containerPath: string, imageSubPath: string) =>
    api.Mount.create({
      containerPath,
      hostPath: "",
      readonly: true,
      propagation: api.MountPropagation.PROPAGATION_PRIVATE,
      image,
      imageSubPath,
    });
  assert.deepEqual(mounts, [want("/volume", ""), want("/etc-only", "etc"), want("/expr", "etc")]);
  // Nothing is made on the node for the subPath: the runtime resolves it in the image.
  assert.deepEqual([...Deno.readDirSync(e.root)].map((d) => d.name).sort(), ["outside", "volumes"]);

  // A bad subPath is refused before the runtime sees it, as for any volume.
  await rejectsWith(
    e.mounts().makeMounts(request(
      { name: "app", volumeMounts: [{ name: "img", mountPath: "/v", subPath: "../etc" }] },
      { imageVolumes: new Map([["img", image]]) },
      spec,
    )),
    "unable to provision SubPath `../etc`: must not contain '..'",
  );
  // Without the pulled image the mount would be of nothing: refused, naming the volume.
  await rejectsWith(
    e.mounts().makeMounts(request(
      { name: "app", volumeMounts: [{ name: "img", mountPath: "/v" }] },
      {},
      spec,
    )),
    'cannot mount image volume "img" into container "app": its image "registry.local/data:1" ' +
      "was not pulled",
  );
});

Deno.test("KubeletMounts refuses a volume that is not mounted", async () => {
  await using e = await env();
  const c: V1Container = { name: "app", volumeMounts: [{ name: "cache", mountPath: "/cache" }] };
  await rejectsWith(
    e.mounts().makeMounts(request(c)),
    'cannot find volume "cache" to mount into container "app"',
  );
});

Deno.test("KubeletMounts maps mount propagation and keeps Bidirectional for privileged containers", async () => {
  await using e = await env();
  const modes = [
    [undefined, api.MountPropagation.PROPAGATION_PRIVATE],
    ["None", api.MountPropagation.PROPAGATION_PRIVATE],
    ["HostToContainer", api.MountPropagation.PROPAGATION_HOST_TO_CONTAINER],
    ["Bidirectional", api.MountPropagation.PROPAGATION_BIDIRECTIONAL],
  ] as const;
  for (const [mode, want] of modes) {
    const c: V1Container = {
      name: "app",
      securityContext: { privileged: true },
      volumeMounts: [{ name: "data", mountPath: "/data", mountPropagation: mode }],
    };
    const [m] = await e.mounts().makeMounts(request(c));
    assert.equal(m?.propagation, want, `mountPropagation ${mode}`);
  }
  const bad: V1Container = {
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/data", mountPropagation: "Sideways" }],
  };
  await rejectsWith(
    e.mounts().makeMounts(request(bad)),
    'invalid MountPropagation mode: "Sideways"',
  );
});

Deno.test("KubeletMounts refuses Bidirectional propagation in a non-privileged container", async () => {
  await using e = await env();
  const c: V1Container = {
    name: "app",
    volumeMounts: [
      { name: "config", mountPath: "/config" },
      { name: "data", mountPath: "/data", mountPropagation: "Bidirectional" },
    ],
  };
  await rejectsWith(
    e.mounts().makeMounts(request(c, {}, { initContainers: [{ name: "init" }] })),
    "spec.containers[0].volumeMounts[1].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers",
  );
});

Deno.test("KubeletMounts resolves recursiveReadOnly as upstream", async () => {
  await using e = await env();
  const mount = (recursiveReadOnly: string, readOnly = true): V1Container => ({
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/data", readOnly, recursiveReadOnly }],
  });
  // IfPossible falls back to a plain read-only mount when the runtime cannot do better.
  const [plain] = await e.mounts().makeMounts(request(mount("IfPossible")));
  assert.equal(plain?.readonly, true);
  assert.equal(plain?.recursiveReadOnly, false);
  const supported = e.mounts({ supportsRecursiveReadOnly: () => true });
  const [rro] = await supported.makeMounts(request(mount("IfPossible")));
  assert.equal(rro?.recursiveReadOnly, true);
  const [enabled] = await supported.makeMounts(request(mount("Enabled")));
  assert.equal(enabled?.recursiveReadOnly, true);
  const [disabled] = await supported.makeMounts(request(mount("Disabled")));
  assert.equal(disabled?.recursiveReadOnly, false);
  await rejectsWith(
    e.mounts().makeMounts(request(mount("Enabled"))),
    'failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, but it is not supported by the runtime',
  );
  await rejectsWith(
    supported.makeMounts(request(mount("Enabled", false))),
    'failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, but it is not read-only',
  );
  await rejectsWith(
    supported.makeMounts(request(mount("Always"))),
    'failed to resolve recursive read-only mode: unknown recursive read-only mode "Always"',
  );
});

Deno.test("KubeletMounts creates a missing subPath with the volume's mode", async () => {
  await using e = await env();
  await Deno.chmod(e.data, 0o1777);
  const c: V1Container = {
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/logs", subPath: "a/b/c" }],
  };
  const [m] = await e.mounts().makeMounts(request(c));
  const real = await Deno.realPath(e.data);
  assert.equal(m?.hostPath, join(real, "a/b/c"));
  for (const dir of ["a", "a/b", "a/b/c"]) {
    const st = await Deno.stat(join(e.data, dir));
    assert.ok(st.isDirectory, dir);
    // mkdir takes no sticky bit: it comes from the explicit chmod, as upstream's fchmod.
    assert.equal((st.mode ?? 0) & 0o7777, 0o1777, dir);
  }
  // An existing subPath (here a file) is mounted as it is.
  await Deno.writeTextFile(join(e.data, "a", "file.txt"), "x");
  const file: V1Container = {
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/f", subPath: "a/./file.txt" }],
  };
  const [f] = await e.mounts().makeMounts(request(file));
  assert.equal(f?.hostPath, join(real, "a", "file.txt"));
});

Deno.test("KubeletMounts refuses absolute and backstepping subPaths", async () => {
  await using e = await env();
  const sub = (subPath: string): V1Container => ({
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/x", subPath }],
  });
  await rejectsWith(
    e.mounts().makeMounts(request(sub("/etc"))),
    "error SubPath `/etc` must not be an absolute path",
  );
  await rejectsWith(
    e.mounts().makeMounts(request(sub("a/../../outside"))),
    "unable to provision SubPath `a/../../outside`: must not contain '..'",
  );
  // `..` inside a name is no backstep.
  const [m] = await e.mounts().makeMounts(request(sub("a..b")));
  assert.equal(m?.hostPath, join(await Deno.realPath(e.data), "a..b"));
});

Deno.test("KubeletMounts refuses a subPath whose symlink leads out of the volume", async () => {
  await using e = await env();
  await Deno.symlink(e.outside, join(e.data, "escape"));
  const sub = (subPath: string): V1Container => ({
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/x", subPath }],
  });
  await assert.rejects(e.mounts().makeMounts(request(sub("escape"))), (err: Error) => {
    assert.ok(err instanceof MountsError);
    assert.equal(
      err.message,
      'failed to prepare subPath for volumeMount "data" of container "app"',
    );
    assert.match((err.cause as Error).message, /^subpath ".*\/outside" not within volume path /);
    return true;
  });
  await assert.rejects(e.mounts().makeMounts(request(sub("escape/new"))), (err: Error) => {
    assert.ok(err instanceof MountsError);
    assert.equal(
      err.message,
      'failed to create subPath directory for volumeMount "data" of container "app"',
    );
    assert.match((err.cause as Error).message, /\/outside is outside of allowed base /);
    return true;
  });
  await assert.rejects(Deno.stat(join(e.outside, "new")), Deno.errors.NotFound);
  // A symlink to /etc is refused the same way, and /etc is left alone.
  await Deno.symlink("/etc", join(e.data, "etc"));
  await rejectsWith(
    e.mounts().makeMounts(request(sub("etc"))),
    'failed to prepare subPath for volumeMount "data" of container "app"',
  );
});

Deno.test("KubeletMounts accepts a symlink that stays inside the volume", async () => {
  await using e = await env();
  await Deno.mkdir(join(e.data, "real"));
  await Deno.symlink("real", join(e.data, "alias"));
  const c: V1Container = {
    name: "app",
    volumeMounts: [
      { name: "data", mountPath: "/x", subPath: "alias" },
      { name: "data", mountPath: "/y", subPath: "alias/made" },
    ],
  };
  const [x, y] = await e.mounts().makeMounts(request(c));
  assert.equal(x?.hostPath, join(await Deno.realPath(e.data), "real"));
  assert.equal(y?.hostPath, join(await Deno.realPath(e.data), "real", "made"));
  assert.ok((await Deno.stat(join(e.data, "real", "made"))).isDirectory);
});

Deno.test("safeMakeDir does not follow a symlink out of its base", async () => {
  await using e = await env();
  await Deno.symlink(e.outside, join(e.data, "link"));
  await assert.rejects(
    safeMakeDir("link/a/b", e.data, 0o755),
    /\/outside is outside of allowed base /,
  );
  await assert.rejects(Deno.stat(join(e.outside, "a")), Deno.errors.NotFound);
  // A dangling symlink as the last element is neither followed nor chmod-ed.
  await Deno.symlink(join(e.outside, "made"), join(e.data, "dangling"));
  await assert.rejects(safeMakeDir("dangling", e.data, 0o777), /^Error: cannot open /);
  await assert.rejects(Deno.stat(join(e.outside, "made")), Deno.errors.NotFound);
  await safeMakeDir("plain/a", e.data, 0o700);
  assert.equal(((await Deno.stat(join(e.data, "plain", "a"))).mode ?? 0) & 0o777, 0o700);
});

Deno.test("KubeletMounts expands subPathExpr from the container's environment", async () => {
  await using e = await env();
  const c: V1Container = {
    name: "app",
    volumeMounts: [{ name: "data", mountPath: "/logs", subPathExpr: "$(POD_NAME)/$$(KEEP)" }],
  };
  const [m] = await e.mounts().makeMounts(
    request(c, { envs: [{ name: "POD_NAME", value: "web-0" }] }),
  );
  assert.equal(m?.hostPath, join(await Deno.realPath(e.data), "web-0", "$(KEEP)"));
  await rejectsWith(
    e.mounts().makeMounts(request({
      name: "app",
      volumeMounts: [{ name: "data", mountPath: "/logs", subPathExpr: "$(B)/$(A)/$(C)" }],
    }, { envs: [{ name: "C", value: "c" }, { name: "A", value: "" }] })),
    "missing value for A, B",
  );
  // The expansion is checked like a subPath.
  await rejectsWith(
    e.mounts().makeMounts(request({
      name: "app",
      volumeMounts: [{ name: "data", mountPath: "/logs", subPathExpr: "$(UP)/x" }],
    }, { envs: [{ name: "UP", value: ".." }] })),
    "unable to provision SubPath `../x`: must not contain '..'",
  );
  await rejectsWith(
    e.mounts().makeMounts(request({
      name: "app",
      volumeMounts: [{ name: "data", mountPath: "/logs", subPathExpr: "$(ROOT)" }],
    }, { envs: [{ name: "ROOT", value: "/etc" }] })),
    "error SubPath `/etc` must not be an absolute path",
  );
});

const LOCAL = "# Kubernetes-managed hosts file.\n" +
  "127.0.0.1\tlocalhost\n" +
  "::1\tlocalhost ip6-localhost ip6-loopback\n" +
  "fe00::0\tip6-localnet\n" +
  "fe00::0\tip6-mcastprefix\n" +
  "fe00::1\tip6-allnodes\n" +
  "fe00::2\tip6-allrouters\n";

Deno.test("managedHostsFileContent writes upstream's hosts file", () => {
  assert.equal(managedHostsFileContent(["10.0.0.5"], "web", "", []), `${LOCAL}10.0.0.5\tweb\n`);
  assert.equal(
    managedHostsFileContent(["10.0.0.5", "fd00::5"], "db-0", "db.shop.svc.cluster.local", [
      { ip: "10.1.1.1", hostnames: ["foo.local", "bar.local"] },
      { ip: "10.1.1.2", hostnames: ["baz"] },
    ]),
    LOCAL +
      "10.0.0.5\tdb-0.db.shop.svc.cluster.local\tdb-0\n" +
      "fd00::5\tdb-0.db.shop.svc.cluster.local\tdb-0\n" +
      "\n# Entries added by HostAliases.\n" +
      "10.1.1.1\tfoo.local\tbar.local\n" +
      "10.1.1.2\tbaz\n",
  );
  assert.equal(
    nodeHostsFileContent("127.0.0.1 localhost\n", [{ ip: "1.2.3.4", hostnames: ["a"] }]),
    "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n" +
      "\n# Entries added by HostAliases.\n1.2.3.4\ta\n",
  );
});

Deno.test("KubeletMounts mounts the managed hosts file last", async () => {
  await using e = await env();
  const c: V1Container = { name: "app", volumeMounts: [{ name: "data", mountPath: "/data" }] };
  const mounts = await e.mounts().makeMounts(request(c, {
    podIPs: ["fd00::7"],
    hostname: "db-0",
    domain: "db.shop.svc.cluster.local",
  }, { hostAliases: [{ ip: "10.1.1.1", hostnames: ["foo"] }] }));
  const file = etcHostsPath(e.pods, UID);
  assert.equal(file, join(e.pods, UID, "etc-hosts"));
  assert.deepEqual(mounts.map((m) => m.containerPath), ["/data", "/etc/hosts"]);
  assert.deepEqual(
    mounts[1],
    api.Mount.create({
      containerPath: "/etc/hosts",
      hostPath: file,
      readonly: false,
      selinuxRelabel: true,
    }),
  );
  assert.equal(
    await Deno.readTextFile(file),
    LOCAL + "fd00::7\tdb-0.db.shop.svc.cluster.local\tdb-0\n" +
      "\n# Entries added by HostAliases.\n10.1.1.1\tfoo\n",
  );
  assert.equal(((await Deno.stat(file)).mode ?? 0) & 0o777, 0o644);

  // Unchanged content is not rewritten, but the mode is put back to 0644.
  await Deno.chmod(file, 0o600);
  await Deno.utime(file, 1000, 1000);
  await e.mounts().makeMounts(request(c, {
    podIPs: ["fd00::7"],
    hostname: "db-0",
    domain: "db.shop.svc.cluster.local",
  }, { hostAliases: [{ ip: "10.1.1.1", hostnames: ["foo"] }] }));
  assert.equal((await Deno.stat(file)).mtime?.getTime(), 1_000_000);
  assert.equal(((await Deno.stat(file)).mode ?? 0) & 0o777, 0o644);

  // A later container sees new content written into the same inode (running ones mount it).
  const before = (await Deno.stat(file)).ino;
  await e.mounts().makeMounts(request({ name: "app" }, { podIPs: ["10.0.0.9"] }));
  assert.equal(await Deno.readTextFile(file), `${LOCAL}10.0.0.9\tweb\n`);
  assert.equal((await Deno.stat(file)).ino, before);
});

Deno.test("KubeletMounts leaves /etc/hosts alone without a pod IP or when the container mounts it", async () => {
  await using e = await env();
  assert.equal(shouldMountHostsFile(pod({ name: "app" }), []), false);
  assert.deepEqual(await e.mounts().makeMounts(request({ name: "app" })), []);
  const own: V1Container = {
    name: "app",
    volumeMounts: [{ name: "config", mountPath: "/etc/hosts", subPath: "hosts" }],
  };
  await Deno.writeTextFile(join(e.root, "volumes", "config", "hosts"), "1.1.1.1 mine\n");
  const mounts = await e.mounts().makeMounts(request(own, { podIPs: ["10.0.0.5"] }));
  assert.deepEqual(mounts.map((m) => m.containerPath), ["/etc/hosts"]);
  assert.equal(
    mounts[0]?.hostPath,
    join(await Deno.realPath(e.root), "volumes", "config", "hosts"),
  );
  await assert.rejects(Deno.stat(etcHostsPath(e.pods, UID)), Deno.errors.NotFound);
});

Deno.test("KubeletMounts copies the node's hosts file for a host-network pod", async () => {
  await using e = await env();
  const nodeHosts = join(e.root, "node-hosts");
  await Deno.writeTextFile(nodeHosts, "127.0.0.1\tlocalhost\n192.168.1.10\tnode-1\n");
  const mounter = e.mounts({ nodeHostsFile: nodeHosts });
  // Host-network pods get it even before they have an IP (upstream shouldMountHostsFile).
  const mounts = await mounter.makeMounts(
    request({ name: "app" }, {}, {
      hostNetwork: true,
      hostAliases: [{ ip: "1.2.3.4", hostnames: ["x", "y"] }],
    }),
  );
  assert.deepEqual(mounts.map((m) => [m.containerPath, m.hostPath]), [
    ["/etc/hosts", etcHostsPath(e.pods, UID)],
  ]);
  assert.equal(
    await Deno.readTextFile(etcHostsPath(e.pods, UID)),
    "# Kubernetes-managed hosts file (host network).\n" +
      "127.0.0.1\tlocalhost\n192.168.1.10\tnode-1\n" +
      "\n# Entries added by HostAliases.\n1.2.3.4\tx\ty\n",
  );
  await rejectsWith(
    e.mounts({ nodeHostsFile: join(e.root, "missing") }).makeMounts(
      request({ name: "app" }, {}, { hostNetwork: true }),
    ),
    /missing/,
  );
});

Deno.test("serveSubPathCall runs a subPath's steps in the launcher: exists, make inside the volume, resolve refusing an escape", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-calls-subpath-" });
  try {
    const volume = join(dir, "volume");
    await Deno.mkdir(volume, { mode: 0o750 });
    await Deno.chmod(volume, 0o750);
    await Deno.symlink(dir, join(volume, "escape"));
    const call = (step: "exists" | "make" | "resolve", path: string, subPath = "") =>
      serveHostCall({ call: 1, op: "subPath", step, path, volumePath: volume, subPath }, [], {
        subPath: serveSubPathCall,
      });
    assert.equal((await call("exists", join(volume, "a/b"))).text, "false");
    assert.deepEqual(await call("make", "", "a/b"), { call: 1, text: "" });
    assert.equal((await Deno.stat(join(volume, "a/b"))).mode! & 0o777, 0o750, "the volume's mode");
    assert.equal((await call("exists", join(volume, "a/b"))).text, "true");
    assert.equal(
      (await call("resolve", join(volume, "a/b"))).text,
      join(await Deno.realPath(volume), "a/b"),
    );
    const out = await call("resolve", join(volume, "escape"));
    assert.match(out.error?.message ?? "", /not within volume path/);
    const made = await call("make", "", "escape/x");
    assert.match(made.error?.message ?? "", /outside of allowed base/);
    await assert.rejects(Deno.stat(join(dir, "x")), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("runtimeClassSupportsRecursiveReadOnlyMounts asks the pod's handler, as upstream", () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  const handlers: api.RuntimeHandler[] = [
    { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: false } },
    { name: "runc-old", features: { recursiveReadOnlyMounts: false, userNamespaces: false } },
  ];
  const classes = new Map([["old", "runc-old"], ["gone", "runc-gone"]]);
  const runtimeClasses = {
    lookupRuntimeHandler: (name: string | null | undefined) => {
      if (!name) return "";
      const h = classes.get(name);
      if (h === undefined) throw new Error(`runtimeclass.node.k8s.io "${name}" not found`);
      return h;
    },
  };
  const pod = (runtimeClassName?: string): V1Pod => ({
    spec: { containers: [], runtimeClassName },
  });
  const ask = (p: V1Pod, o: { handlers?: api.RuntimeHandler[]; classes?: boolean } = {}) =>
    runtimeClassSupportsRecursiveReadOnlyMounts(p, {
      ...(o.classes === false ? {} : { runtimeClasses }),
      handlers: o.handlers ?? handlers,
      logger,
    });
  assert.equal(ask(pod()), true);
  assert.equal(ask(pod("old")), false);
  // Standalone (no RuntimeClass manager), or a runtime that lists no handlers: never.
  assert.equal(ask(pod(), { classes: false }), false);
  assert.equal(ask(pod(), { handlers: [] }), false);
  assert.deepEqual(lines, []);
  assert.equal(ask(pod("missing")), false);
  assert.match(
    lines[0]!,
    /"failed to look up the runtime handler" err=.*not found.* runtimeClassName="missing"/,
  );
  assert.equal(ask(pod("gone")), false);
  assert.match(lines[1]!, /"Unknown runtime handler" runtimeHandlerName="runc-gone"/);
});
