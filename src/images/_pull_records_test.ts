import assert from "node:assert/strict";
import { join } from "node:path";
import type * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import {
  allowlistPattern,
  cacheFilename,
  credentialHash,
  decodeIntent,
  decodePulledRecord,
  type ImagePulledRecord,
  ImagePullManager,
  mergePulledRecord,
  PullRecordDecodeError,
  PullRecordsStore,
  type RequireVerification,
  verificationPolicy,
  VerificationPolicyError,
} from "./_pull_records.ts";

// Files from upstream pkg/kubelet/images/pullmanager/testdata, as the Go kubelet writes them.
const UPSTREAM_PULLED =
  '{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1",' +
  '"lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref","credentialMapping":' +
  '{"docker.io/testing/test":{"kubernetesSecrets":[{"uid":"testsecretuid","namespace":"default",' +
  '"name":"pull-secret","credentialHash":"testsecrethash"}]}}}';
const UPSTREAM_INTENT = '{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1alpha1",' +
  '"image":"repo.repo/test/test:v1"}';

interface Env extends AsyncDisposable {
  readonly dir: string;
  readonly lines: string[];
  readonly logger: Logger;
  readonly clock: FakeClock;
  open(opts?: { intents?: number; pulled?: number }): Promise<PullRecordsStore>;
  manager(store: PullRecordsStore, require?: RequireVerification): ImagePullManager;
}

async function env(): Promise<Env> {
  const dir = await Deno.makeTempDir({ prefix: "pull-records-" });
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  const clock = new FakeClock();
  return {
    dir,
    lines,
    logger,
    clock,
    open: (o) =>
      PullRecordsStore.open({
        directory: dir,
        logger,
        intentsCacheSize: o?.intents,
        pulledRecordsCacheSize: o?.pulled,
      }),
    manager: (store, require = (_, pulled) => pulled) =>
      new ImagePullManager({ store, requireVerification: require, clock, logger }),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function record(imageRef: string, mapping: ImagePulledRecord["credentialMapping"] = {}) {
  return { lastUpdatedTime: "2026-01-01T00:00:00Z", imageRef, credentialMapping: mapping };
}

const secret = (name: string, hash: string, uid = `${name}-uid`) => ({
  uid,
  namespace: "default",
  name,
  credentialHash: hash,
});

Deno.test("cacheFilename names files as upstream: sha256- and the hex SHA-256 of the key", () => {
  assert.equal(
    cacheFilename("testimageref"),
    "sha256-b3c0cc4278800b03a308ceb2611161430df571ca733122f0a40ac8b9792a9064",
  );
  assert.equal(
    cacheFilename("repo.repo/test/test:v1"),
    "sha256-ee81caca15454863449fb55a1d942904d56d5ed9f9b20a7cb3453944ea2c7e11",
  );
});

Deno.test("credentialHash matches upstream's hash of the same credentials", () => {
  // From upstream credentialprovider/secrets tests: user "user", password "password".
  assert.equal(
    credentialHash({ username: "user", password: "password" }),
    "a55436fc140d516560d072c5fe8700385ce9f41629abf65c1edcbcb39fac691d",
  );
  assert.notEqual(
    credentialHash({ username: "user", password: "other" }),
    credentialHash({ username: "user", password: "password" }),
  );
});

Deno.test("decodePulledRecord and decodeIntent read upstream's files", () => {
  assert.deepEqual(decodePulledRecord(UPSTREAM_PULLED), {
    lastUpdatedTime: "2024-10-21T12:26:40Z",
    imageRef: "testimageref",
    credentialMapping: {
      "docker.io/testing/test": {
        kubernetesSecrets: [{
          uid: "testsecretuid",
          namespace: "default",
          name: "pull-secret",
          credentialHash: "testsecrethash",
        }],
      },
    },
  });
  assert.deepEqual(decodeIntent(UPSTREAM_INTENT), { image: "repo.repo/test/test:v1" });
});

Deno.test("decodePulledRecord rejects garbage, another kind and unknown fields", () => {
  assert.throws(() => decodePulledRecord("{not json"), PullRecordDecodeError);
  assert.throws(() => decodePulledRecord(UPSTREAM_INTENT), /expected kind ImagePulledRecord/);
  assert.throws(
    () => decodePulledRecord(UPSTREAM_PULLED.replace('"imageRef"', '"extra":1,"imageRef"')),
    /unknown field "extra"/,
  );
  assert.throws(
    () => decodePulledRecord(UPSTREAM_PULLED.replace('"testsecrethash"', "42")),
    /credentialHash: expected a string/,
  );
});

Deno.test("PullRecordsStore writes upstream's layout and reads it back after a reopen", async () => {
  await using e = await env();
  const store = await e.open();
  await store.writeIntent("quay.io/app:1");
  await store.writePulledRecord(
    record("sha256:abc", { "quay.io/app": { nodePodsAccessible: true } }),
  );

  const intentPath = join(e.dir, "pulling", cacheFilename("quay.io/app:1"));
  assert.deepEqual(JSON.parse(await Deno.readTextFile(intentPath)), {
    kind: "ImagePullIntent",
    apiVersion: "kubelet.config.k8s.io/v1alpha1",
    image: "quay.io/app:1",
  });
  const pulledPath = join(e.dir, "pulled", cacheFilename("sha256:abc"));
  assert.equal(
    await Deno.readTextFile(pulledPath),
    '{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1",' +
      '"lastUpdatedTime":"2026-01-01T00:00:00Z","imageRef":"sha256:abc",' +
      '"credentialMapping":{"quay.io/app":{"nodePodsAccessible":true}}}',
  );
  assert.equal((await Deno.stat(pulledPath)).mode! & 0o777, 0o600);
  assert.equal((await Deno.stat(join(e.dir, "pulled"))).mode! & 0o777, 0o700);

  const reopened = await e.open();
  assert.equal(await reopened.intentExists("quay.io/app:1"), true);
  assert.equal(await reopened.intentExists("quay.io/app:2"), false);
  assert.deepEqual(await reopened.getPulledRecord("sha256:abc"), {
    exists: true,
    record: record("sha256:abc", { "quay.io/app": { nodePodsAccessible: true } }),
  });
  await reopened.deleteIntent("quay.io/app:1");
  await reopened.deleteIntent("quay.io/app:1"); // already gone: not an error
  assert.deepEqual(await Array.fromAsync(Deno.readDir(join(e.dir, "pulling"))), []);
});

Deno.test("PullRecordsStore reads a record written by upstream's kubelet", async () => {
  await using e = await env();
  await Deno.mkdir(join(e.dir, "pulled"), { recursive: true });
  await Deno.writeTextFile(join(e.dir, "pulled", cacheFilename("testimageref")), UPSTREAM_PULLED);
  const store = await e.open();
  const found = await store.getPulledRecord("testimageref");
  assert.equal(
    found.record?.credentialMapping["docker.io/testing/test"]?.kubernetesSecrets?.[0]
      ?.name,
    "pull-secret",
  );
});

Deno.test("PullRecordsStore logs a corrupted record and reports it as existing without content", async () => {
  await using e = await env();
  await Deno.mkdir(join(e.dir, "pulled"), { recursive: true });
  const path = join(e.dir, "pulled", cacheFilename("sha256:bad"));
  await Deno.writeTextFile(path, "{truncated");
  // Neither a temporary file nor a foreign file is a record.
  await Deno.writeTextFile(path + ".tmp", "{}");
  await Deno.writeTextFile(join(e.dir, "pulled", "README"), "not a record");

  const store = await e.open();
  assert.deepEqual(await store.listPulledRecords(), []);
  assert.ok(e.lines.some((l) => l.includes("Failed to read an image pull record")));
  e.lines.length = 0;
  assert.deepEqual(await store.getPulledRecord("sha256:bad"), { exists: true });
  assert.ok(
    e.lines.some((l) =>
      l.startsWith("E") && l.includes("Failed to read an image pulled record") &&
      l.includes("sha256:bad")
    ),
    e.lines.join("\n"),
  );
  // A good write replaces it.
  await store.writePulledRecord(record("sha256:bad"));
  assert.deepEqual(
    (await (await e.open()).getPulledRecord("sha256:bad")).record,
    record("sha256:bad"),
  );
});

Deno.test("PullRecordsStore trusts its cache for misses only while it holds every record", async () => {
  await using e = await env();
  const store = await e.open({ pulled: 2 });
  const behindItsBack = async (ref: string) => {
    const other = await e.open({ pulled: 2 });
    await other.writePulledRecord(record(ref));
  };
  await behindItsBack("sha256:x");
  // Authoritative (everything fitted when it opened): a miss does not read the disk.
  assert.deepEqual(await store.getPulledRecord("sha256:x"), { exists: false });

  // Three records in a cache of two: one is evicted, so misses go to disk from now on.
  for (const ref of ["sha256:1", "sha256:2", "sha256:3"]) {
    await store.writePulledRecord(record(ref));
  }
  for (const ref of ["sha256:1", "sha256:2", "sha256:3", "sha256:x"]) {
    assert.equal((await store.getPulledRecord(ref)).record?.imageRef, ref);
  }
  // A full list that does not fit leaves it non-authoritative.
  assert.equal((await store.listPulledRecords()).length, 4);
  await behindItsBack("sha256:y");
  assert.equal((await store.getPulledRecord("sha256:y")).exists, true);
});

Deno.test("verificationPolicy implements the four upstream policies", () => {
  const log = createLogger({ write: () => {} });
  const never = verificationPolicy("NeverVerify", [], log);
  const preloaded = verificationPolicy("NeverVerifyPreloadedImages", [], log);
  const always = verificationPolicy("AlwaysVerify", [], log);
  assert.deepEqual([never("a:1", true), never("a:1", false)], [false, false]);
  assert.deepEqual([preloaded("a:1", true), preloaded("a:1", false)], [true, false]);
  assert.deepEqual([always("a:1", true), always("a:1", false)], [true, true]);

  const allow = verificationPolicy(
    "NeverVerifyAllowlistedImages",
    ["docker.io/library/busybox", "quay.io/team/*"],
    log,
  );
  // Allowlisted images are exempt whoever pulled them; the others are always verified.
  assert.equal(allow("busybox:1.36", true), false);
  assert.equal(allow("docker.io/library/busybox@sha256:" + "a".repeat(64), true), false);
  assert.equal(allow("quay.io/team/app:1", true), false);
  assert.equal(allow("quay.io/team/sub/app:1", false), false);
  assert.equal(allow("quay.io/other/app:1", false), true);
  assert.equal(allow("docker.io/library/busybox2:1", false), true);

  assert.throws(() => verificationPolicy("Sometimes", [], log), VerificationPolicyError);
});

Deno.test("allowlistPattern accepts names and prefixes and rejects the rest as upstream", () => {
  assert.deepEqual(allowlistPattern("quay.io/team/*"), {
    normalized: "quay.io/team/",
    wildcard: true,
  });
  assert.deepEqual(allowlistPattern("docker.io/library/nginx"), {
    normalized: "docker.io/library/nginx",
    wildcard: false,
  });
  assert.throws(() => allowlistPattern(" quay.io/a"), /leading\/trailing spaces/);
  assert.throws(() => allowlistPattern("/*"), /at least registry hostname is required/);
  assert.throws(() => allowlistPattern("quay.io/*/app"), /only patterns ending with '\/\*'/);
  assert.throws(() => allowlistPattern("quay.io/app:1"), /neither tag nor digest/);
  assert.throws(() => allowlistPattern("nginx"), /neither tag nor digest/);
});

Deno.test("mergePulledRecord merges secrets by coordinates and lets node-wide access win", () => {
  const now = "2026-02-02T00:00:00Z";
  const base = record("ref", { "quay.io/app": { kubernetesSecrets: [secret("b", "h1")] } });
  assert.equal(mergePulledRecord(base, "quay.io/app", undefined, now), undefined);
  assert.equal(
    mergePulledRecord(base, "quay.io/app", { kubernetesSecrets: [secret("b", "h1")] }, now),
    undefined,
  );
  const added = mergePulledRecord(
    base,
    "quay.io/app",
    { kubernetesSecrets: [secret("a", "h2")] },
    now,
  );
  assert.deepEqual(added?.credentialMapping["quay.io/app"], {
    kubernetesSecrets: [secret("a", "h2"), secret("b", "h1")],
  });
  assert.equal(added?.lastUpdatedTime, now);
  const rotated = mergePulledRecord(
    base,
    "quay.io/app",
    { kubernetesSecrets: [secret("b", "h9")] },
    now,
  );
  assert.deepEqual(rotated?.credentialMapping["quay.io/app"], {
    kubernetesSecrets: [secret("b", "h9")],
  });
  const open = mergePulledRecord(base, "quay.io/app", { nodePodsAccessible: true }, now);
  assert.deepEqual(open?.credentialMapping["quay.io/app"], { nodePodsAccessible: true });
  assert.equal(
    mergePulledRecord(open!, "quay.io/app", { kubernetesSecrets: [secret("c", "h3")] }, now),
    undefined,
  );
  // Another image name of the same image gets its own entry.
  const other = mergePulledRecord(base, "quay.io/mirror", { nodePodsAccessible: true }, now);
  assert.deepEqual(Object.keys(other?.credentialMapping ?? {}).sort(), [
    "quay.io/app",
    "quay.io/mirror",
  ]);
});

Deno.test("ImagePullManager records the credentials of a pull and matches pods against them", async () => {
  await using e = await env();
  const store = await e.open();
  const m = e.manager(store);
  await m.recordPullIntent("quay.io/app:1");
  assert.equal(await store.intentExists("quay.io/app:1"), true);
  await m.recordImagePulled("quay.io/app:1", "sha256:app", {
    kubernetesSecrets: [secret("s", "hash-s")],
  });
  assert.equal(await store.intentExists("quay.io/app:1"), false);

  const must = (secrets: ReturnType<typeof secret>[]) =>
    m.mustAttemptImagePull("quay.io/app:1", "sha256:app", () => ({ secrets }));
  assert.equal(await must([]), true);
  assert.equal(await must([secret("other", "hash-other")]), true);
  assert.equal(await must([secret("s", "hash-s")]), false);
  // Another tag of the same repository shares the entry.
  assert.equal(
    await m.mustAttemptImagePull(
      "quay.io/app:2",
      "sha256:app",
      () => ({ secrets: [secret("s", "hash-s")] }),
    ),
    false,
  );

  // Same credentials in another secret: accepted, and that secret is remembered.
  assert.equal(await must([secret("copy", "hash-s")]), false);
  // The same secret with rotated credentials: accepted, and the new hash is remembered.
  assert.equal(await must([secret("s", "hash-new")]), false);
  const { record: r } = await (await e.open()).getPulledRecord("sha256:app");
  assert.deepEqual(r?.credentialMapping["quay.io/app"]?.kubernetesSecrets, [
    secret("copy", "hash-s"),
    secret("s", "hash-new"),
  ]);
  assert.equal(r?.lastUpdatedTime, "2026-01-01T00:00:00Z");
});

Deno.test("ImagePullManager lets a pod of the service account an image was pulled through use it", async () => {
  await using e = await env();
  const m = e.manager(await e.open());
  const account = { uid: "sa-uid", namespace: "default", name: "builder" };
  await m.recordPullIntent("quay.io/app:1");
  await m.recordImagePulled("quay.io/app:1", "sha256:app", {
    kubernetesServiceAccounts: [account],
  });
  let asked = 0;
  const must = (serviceAccount?: typeof account) =>
    m.mustAttemptImagePull("quay.io/app:1", "sha256:app", () => {
      asked++;
      return Promise.resolve({ secrets: [], serviceAccount });
    });
  assert.equal(await must(account), false);
  assert.equal(await must(undefined), true);
  // Same name, another account (recreated: new uid).
  assert.equal(await must({ ...account, uid: "other-uid" }), true);
  assert.equal(await must({ ...account, namespace: "other" }), true);
  assert.equal(asked, 4);
});

Deno.test("ImagePullManager lets any pod use an image pulled anonymously", async () => {
  await using e = await env();
  const m = e.manager(await e.open(), () => true);
  await m.recordPullIntent("nginx:1");
  await m.recordImagePulled("nginx:1", "sha256:nginx", { nodePodsAccessible: true });
  assert.equal(
    await m.mustAttemptImagePull("nginx:1", "sha256:nginx", () => ({ secrets: [] })),
    false,
  );
  // A record of one name says nothing about another name of the image.
  assert.equal(
    await m.mustAttemptImagePull("mirror.io/nginx:1", "sha256:nginx", () => ({ secrets: [] })),
    true,
  );
});

Deno.test("ImagePullManager counts an image with only an intent as pulled by the kubelet", async () => {
  await using e = await env();
  const store = await e.open();
  const m = e.manager(store);
  // No record and no intent: preloaded, exempt under NeverVerifyPreloadedImages.
  assert.equal(
    await m.mustAttemptImagePull("quay.io/app:1", "sha256:app", () => ({ secrets: [] })),
    false,
  );
  await m.recordPullIntent("quay.io/app:1");
  await m.recordPullIntent("quay.io/app:1");
  assert.equal(
    await m.mustAttemptImagePull("quay.io/app:1", "sha256:app", () => ({ secrets: [] })),
    true,
  );
  // Two pulls in flight: the intent stays until both have ended.
  await m.recordImagePullFailed("quay.io/app:1");
  assert.equal(await store.intentExists("quay.io/app:1"), true);
  await m.recordImagePullFailed("quay.io/app:1");
  assert.equal(await store.intentExists("quay.io/app:1"), false);
  assert.equal(
    await m.mustAttemptImagePull("quay.io/app:1", "sha256:app", () => ({ secrets: [] })),
    false,
  );
});

Deno.test("ImagePullManager.initialize turns leftover intents of present images into records without credentials", async () => {
  await using e = await env();
  const before = e.manager(await e.open());
  await before.recordPullIntent("quay.io/app:1");
  await before.recordPullIntent("quay.io/gone:1");
  // The kubelet stops here, mid-pull; the runtime finished the first pull.

  const store = await e.open();
  const after = e.manager(store);
  const image = {
    id: "sha256:app",
    repoTags: ["quay.io/app:1"],
    repoDigests: ["quay.io/app@sha256:" + "b".repeat(64)],
  } as unknown as api.Image;
  await after.initialize(() => Promise.resolve([image]));
  assert.equal(await store.intentExists("quay.io/app:1"), false);
  assert.deepEqual((await store.getPulledRecord("sha256:app")).record?.credentialMapping, {});
  // The image of the other intent is absent: that intent stays.
  assert.equal(await store.intentExists("quay.io/gone:1"), true);
  // Whoever asks must prove their credentials, even with a secret.
  assert.equal(
    await after.mustAttemptImagePull(
      "quay.io/app:1",
      "sha256:app",
      () => ({ secrets: [secret("s", "h")] }),
    ),
    true,
  );
});

Deno.test("ImagePullManager.pruneUnknownRecords drops old records of images no longer present", async () => {
  await using e = await env();
  const store = await e.open();
  const m = e.manager(store);
  for (const ref of ["sha256:kept", "sha256:gone"]) {
    await m.recordPullIntent("a:1");
    await m.recordImagePulled("a:1", ref, { nodePodsAccessible: true });
  }
  e.clock.step(60_000);
  await m.recordPullIntent("b:1");
  await m.recordImagePulled("b:1", "sha256:fresh", { nodePodsAccessible: true });
  await m.pruneUnknownRecords(["sha256:kept"], Date.UTC(2026, 0, 1) + 30_000);
  assert.deepEqual((await store.listPulledRecords()).map((r) => r.imageRef).sort(), [
    "sha256:fresh",
    "sha256:kept",
  ]);
});
