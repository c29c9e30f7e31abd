import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ConfigMap, V1Pod, V1Secret, V1Volume } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { Mounter } from "../util/mount.ts";
import type { ServiceAccountToken, TokenRequestSpec } from "../token/token_manager.ts";
import { podVolumeDir, VolumeSourceError } from "./plugin.ts";
import { fsUserFrom, PROJECTED_PLUGIN_NAME, ProjectedPlugin } from "./projected.ts";

const quiet = createLogger({ write: () => {} });
const CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/** True when the test may mount and chown; else skips loudly, or throws under CI=true. */
function needsRoot(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

/** The volume the ServiceAccount admission plugin injects into every pod. */
const kubeApiAccess: V1Volume = {
  name: "kube-api-access-x7k2p",
  projected: {
    defaultMode: 420,
    sources: [
      { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
      { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
      {
        downwardAPI: {
          items: [{
            path: "namespace",
            fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" },
          }],
        },
      },
    ],
  },
};

function makePod(
  volume: V1Volume,
  security: { runAsUser?: number; fsGroup?: number } = {},
): V1Pod {
  return {
    metadata: { name: "web", namespace: "shop", uid: "uid-1", labels: { app: "web" } },
    spec: {
      serviceAccountName: "builder",
      containers: [{ name: "main" }],
      volumes: [volume],
      securityContext: security,
    },
  };
}

/** A Mounter whose mount and umount only edit a fake mount table. */
function fakeMounter() {
  const mounts: string[] = [];
  const commands: string[][] = [];
  const mounter = new Mounter({
    run(cmd, args) {
      commands.push([cmd, ...args]);
      const target = args[args.length - 1] ?? "";
      if (cmd === "mount") mounts.push(target);
      if (cmd === "umount") mounts.splice(mounts.lastIndexOf(target), 1);
      return Promise.resolve("");
    },
    readMountInfo: () =>
      Promise.resolve(
        mounts.map((m, i) => `${100 + i} 1 0:${50 + i} / ${m} rw,relatime - tmpfs tmpfs rw`)
          .join("\n"),
      ),
  });
  return { mounter, mounts, commands };
}

async function fixture(opts: { mounter?: Mounter } = {}) {
  const root = await Deno.makeTempDir({ prefix: "projected_test_" });
  const configMaps = new Map<string, V1ConfigMap>([
    ["shop/kube-root-ca.crt", { data: { "ca.crt": CA_PEM } }],
  ]);
  const secrets = new Map<string, V1Secret>();
  const tokenRequests: { namespace: string; name: string; spec: TokenRequestSpec }[] = [];
  const deleted: string[] = [];
  let tokenError: Error | undefined;
  const fake = fakeMounter();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const plugin = new ProjectedPlugin({
    configMaps: { get: (ns, name) => Promise.resolve(configMaps.get(`${ns}/${name}`)) },
    secrets: { get: (ns, name) => Promise.resolve(secrets.get(`${ns}/${name}`)) },
    tokens: {
      getServiceAccountToken(namespace, name, spec): Promise<ServiceAccountToken> {
        if (tokenError !== undefined) return Promise.reject(tokenError);
        tokenRequests.push({ namespace, name, spec });
        return Promise.resolve({
          token: `jwt-${tokenRequests.length}`,
          expirationTimestamp: "2026-01-01T01:00:07Z",
        });
      },
      deleteServiceAccountToken: (uid) => void deleted.push(uid),
    },
    mounter: opts.mounter ?? fake.mounter,
    logger: quiet,
    clock,
    nodeAllocatable: () => ({ cpu: "2", memory: "4Gi" }),
  });
  const dirOf = (volume: V1Volume) =>
    podVolumeDir(join(root, "pods"), "uid-1", PROJECTED_PLUGIN_NAME, volume.name);
  return {
    root,
    plugin,
    configMaps,
    secrets,
    tokenRequests,
    deleted,
    clock,
    dirOf,
    ...fake,
    failTokens(err: Error | undefined) {
      tokenError = err;
    },
    [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }),
  };
}

const modeOf = async (path: string) => (await Deno.stat(path)).mode! & 0o7777;

Deno.test("ProjectedPlugin supports projected volumes only", async () => {
  await using f = await fixture();
  assert.equal(f.plugin.name, "kubernetes.io/projected");
  assert.equal(f.plugin.requiresRemount, true);
  assert.equal(f.plugin.canSupport(kubeApiAccess), true);
  assert.equal(f.plugin.canSupport({ name: "x", configMap: { name: "c" } }), false);
});

Deno.test("ProjectedPlugin projects the kube-api-access volume on a tmpfs", async () => {
  await using f = await fixture();
  const dir = f.dirOf(kubeApiAccess);
  const mounted = await f.plugin.setUp({ pod: makePod(kubeApiAccess), volume: kubeApiAccess, dir });
  assert.deepEqual(mounted, { hostPath: dir, readOnly: true, selinuxRelabel: true });

  assert.equal(await Deno.readTextFile(join(dir, "token")), "jwt-1");
  assert.equal(await Deno.readTextFile(join(dir, "ca.crt")), CA_PEM);
  assert.equal(await Deno.readTextFile(join(dir, "namespace")), "shop");
  for (const name of ["token", "ca.crt", "namespace"]) {
    assert.equal(await modeOf(join(dir, name)), 0o644, name);
  }
  assert.deepEqual(f.tokenRequests, [{
    namespace: "shop",
    name: "builder",
    spec: {
      audiences: undefined,
      expirationSeconds: 3607,
      boundObjectRef: { apiVersion: "v1", kind: "Pod", name: "web", uid: "uid-1" },
    },
  }]);
  assert.deepEqual(f.commands, [["mount", "-t", "tmpfs", "tmpfs", await Deno.realPath(dir)]]);
});

Deno.test("ProjectedPlugin refreshes the token on resync without mounting again", async () => {
  await using f = await fixture();
  const dir = f.dirOf(kubeApiAccess);
  const pod = makePod(kubeApiAccess);
  await f.plugin.setUp({ pod, volume: kubeApiAccess, dir });
  f.clock.step(60_000);
  await f.plugin.setUp({ pod, volume: kubeApiAccess, dir });
  assert.equal(await Deno.readTextFile(join(dir, "token")), "jwt-2");
  assert.equal(f.commands.length, 1);
  assert.equal(f.mounts.length, 1);
});

Deno.test("ProjectedPlugin sends the token source's audience and lifetime", async () => {
  await using f = await fixture();
  const volume: V1Volume = {
    name: "tokens",
    projected: {
      sources: [
        { serviceAccountToken: { path: "default" } },
        { serviceAccountToken: { path: "vault/token", audience: "vault", expirationSeconds: 600 } },
      ],
    },
  };
  const dir = f.dirOf(volume);
  await f.plugin.setUp({ pod: makePod(volume), volume, dir });
  assert.deepEqual(f.tokenRequests.map((r) => r.spec.audiences), [undefined, ["vault"]]);
  assert.deepEqual(f.tokenRequests.map((r) => r.spec.expirationSeconds), [3600, 600]);
  assert.equal(await Deno.readTextFile(join(dir, "vault/token")), "jwt-2");
});

Deno.test("ProjectedPlugin lets a later source's file win a shared path", async () => {
  await using f = await fixture();
  f.configMaps.set("shop/cfg", { data: { config: "from configmap", other: "kept" } });
  f.secrets.set("shop/sec", { data: { config: btoa("from secret") } });
  const volume: V1Volume = {
    name: "all-in-one",
    projected: {
      defaultMode: 0o440,
      sources: [
        { configMap: { name: "cfg" } },
        { secret: { name: "sec", items: [{ key: "config", path: "config", mode: 0o400 }] } },
        { secret: { name: "missing", optional: true } },
        {
          downwardAPI: { items: [{ path: "labels", fieldRef: { fieldPath: "metadata.labels" } }] },
        },
      ],
    },
  };
  const dir = f.dirOf(volume);
  await f.plugin.setUp({ pod: makePod(volume), volume, dir });
  assert.equal(await Deno.readTextFile(join(dir, "config")), "from secret");
  assert.equal(await modeOf(join(dir, "config")), 0o400);
  assert.equal(await Deno.readTextFile(join(dir, "other")), "kept");
  assert.equal(await modeOf(join(dir, "other")), 0o440);
  assert.equal(await Deno.readTextFile(join(dir, "labels")), 'app="web"');
});

Deno.test("ProjectedPlugin aggregates failed sources and creates nothing", async () => {
  await using f = await fixture();
  const volume: V1Volume = {
    name: "broken",
    projected: {
      sources: [
        { configMap: { name: "absent" } },
        { clusterTrustBundle: { name: "bundle", path: "ca.pem" } },
        {
          podCertificate: {
            signerName: "example.com/s",
            keyType: "ED25519",
            credentialBundlePath: "c",
          },
        },
        { serviceAccountToken: { path: "token" } },
      ],
    },
  };
  f.failTokens(new Error("failed to fetch token: denied"));
  const dir = f.dirOf(volume);
  await assert.rejects(
    f.plugin.setUp({ pod: makePod(volume), volume, dir }),
    new VolumeSourceError(
      '[configmap "absent" not found, ' +
        "projected volume broken: clusterTrustBundle sources are not supported yet, " +
        "projected volume broken: podCertificate sources are not supported yet, " +
        "failed to fetch token: denied]",
    ),
  );
  await assert.rejects(Deno.lstat(dir), Deno.errors.NotFound);
  assert.deepEqual(f.commands, []);
});

Deno.test("ProjectedPlugin tearDown unmounts, removes the dir and drops the pod's tokens", async () => {
  await using f = await fixture();
  const dir = f.dirOf(kubeApiAccess);
  await f.plugin.setUp({ pod: makePod(kubeApiAccess), volume: kubeApiAccess, dir });
  const real = await Deno.realPath(dir);
  const ctx = { podUid: "uid-1", volumeName: kubeApiAccess.name, dir };
  await f.plugin.tearDown(ctx);
  assert.deepEqual(f.commands.at(-1), ["umount", real]);
  assert.deepEqual(f.mounts, []);
  assert.deepEqual(f.deleted, ["uid-1"]);
  await assert.rejects(Deno.lstat(dir), Deno.errors.NotFound);
  await f.plugin.tearDown(ctx); // idempotent
});

Deno.test("fsUserFrom is the run-as user every container shares", () => {
  const pod = (
    podUser: number | undefined,
    users: (number | undefined)[],
    initUser?: number,
  ): V1Pod => ({
    spec: {
      securityContext: { runAsUser: podUser },
      initContainers: initUser === undefined
        ? []
        : [{ name: "init", securityContext: { runAsUser: initUser } }],
      containers: users.map((u, i) => ({ name: `c${i}`, securityContext: { runAsUser: u } })),
    },
  });
  assert.equal(fsUserFrom(pod(1000, [undefined, undefined])), 1000);
  assert.equal(fsUserFrom(pod(1000, [2000, 2000])), 2000);
  assert.equal(fsUserFrom(pod(undefined, [2000, undefined])), undefined);
  assert.equal(fsUserFrom(pod(1000, [1000, 2000])), undefined);
  assert.equal(fsUserFrom(pod(1000, [undefined], 0)), undefined);
  assert.equal(fsUserFrom(pod(undefined, [])), undefined);
});

Deno.test("ProjectedPlugin makes the token 0600 and the pod user's when it runs as one", async () => {
  if (!needsRoot("chowning token files")) return;
  await using f = await fixture();
  const dir = f.dirOf(kubeApiAccess);
  await f.plugin.setUp({
    pod: makePod(kubeApiAccess, { runAsUser: 1000 }),
    volume: kubeApiAccess,
    dir,
  });
  const token = await Deno.stat(join(dir, "token"));
  assert.equal(token.mode! & 0o777, 0o600);
  assert.equal(token.uid, 1000);
  const ca = await Deno.stat(join(dir, "ca.crt"));
  assert.equal(ca.mode! & 0o777, 0o644);
  assert.equal(ca.uid, 0);
});

Deno.test("ProjectedPlugin gives the token group read with fsGroup", async () => {
  if (!needsRoot("chowning token files")) return;
  await using f = await fixture();
  const dir = f.dirOf(kubeApiAccess);
  await f.plugin.setUp({
    pod: makePod(kubeApiAccess, { runAsUser: 1000, fsGroup: 2000 }),
    volume: kubeApiAccess,
    dir,
  });
  const token = await Deno.stat(join(dir, "token"));
  assert.equal(token.mode! & 0o777, 0o640);
  assert.equal(token.uid, 1000);
  assert.equal(token.gid, 2000);
  // fsGroup alone (no shared user) still keeps the token from other users.
  const other = await fixture();
  try {
    const dir2 = other.dirOf(kubeApiAccess);
    await other.plugin.setUp({
      pod: makePod(kubeApiAccess, { fsGroup: 2000 }),
      volume: kubeApiAccess,
      dir: dir2,
    });
    const t2 = await Deno.stat(join(dir2, "token"));
    assert.equal(t2.mode! & 0o777, 0o640);
    assert.equal(t2.uid, 0);
    assert.equal(t2.gid, 2000);
  } finally {
    await other[Symbol.asyncDispose]();
  }
});

Deno.test("ProjectedPlugin mounts a real tmpfs and unmounts it at teardown", async () => {
  if (!needsRoot("mounting tmpfs")) return;
  const mounter = new Mounter();
  await using f = await fixture({ mounter });
  const dir = f.dirOf(kubeApiAccess);
  let real: string | undefined;
  try {
    await f.plugin.setUp({ pod: makePod(kubeApiAccess), volume: kubeApiAccess, dir });
    real = await Deno.realPath(dir);
    assert.equal((await mounter.mountAt(real))?.fsType, "tmpfs");
    assert.equal(await Deno.readTextFile(join(dir, "namespace")), "shop");
    await f.plugin.setUp({ pod: makePod(kubeApiAccess), volume: kubeApiAccess, dir });
    assert.equal((await mounter.list()).filter((m) => m.mountPoint === real).length, 1);
    await f.plugin.tearDown({ podUid: "uid-1", volumeName: kubeApiAccess.name, dir });
    assert.equal(await mounter.mountAt(real), undefined);
    await assert.rejects(Deno.lstat(dir), Deno.errors.NotFound);
  } finally {
    // Never leave a mount behind in the temp dir, whatever failed.
    while (real !== undefined && (await mounter.mountAt(real)) !== undefined) {
      await mounter.unmount(real);
    }
  }
});
