import assert from "node:assert/strict";
import { join } from "node:path";
import { testCA } from "../testing/cert_fixtures.ts";
import { generateECKey, makeCSR, privateKeyPem } from "./pkcs10.ts";
import { CertificateStore, CertificateStoreError, NoCertKeyError } from "./certificate_store.ts";
import { createLogger } from "../klog/klog.ts";

const logger = createLogger({ write: () => {} });
const SUBJECT = { commonName: "system:node:node-a", organizations: ["system:nodes"] };

async function pair(ca: Awaited<ReturnType<typeof testCA>>, serial: number) {
  const key = generateECKey();
  const certPem = await ca.sign(makeCSR(key, SUBJECT), { serial });
  return { certPem, keyPem: privateKeyPem(key) };
}

Deno.test("CertificateStore writes kubelet-client-<time>.pem 0600 behind the current symlink", async () => {
  const ca = await testCA();
  const dir = join(ca.dir, "pki");
  try {
    let now = new Date(2026, 4, 17, 9, 8, 7).getTime();
    const store = await CertificateStore.open({
      pairNamePrefix: "kubelet-client",
      certDirectory: dir,
      keyDirectory: dir,
      logger,
      now: () => now,
    });
    await assert.rejects(store.current(), NoCertKeyError);
    const first = await pair(ca, 11);
    const got = await store.update(first.certPem, first.keyPem);
    assert.equal(got.leaf.serialNumber, 11n);
    assert.equal(got.leaf.commonName, "system:node:node-a");
    assert.deepEqual(got.leaf.organization, ["system:nodes"]);

    const file = join(dir, "kubelet-client-2026-05-17-09-08-07.pem");
    assert.equal(store.currentPath(), join(dir, "kubelet-client-current.pem"));
    assert.equal(await Deno.readLink(store.currentPath()), file);
    assert.equal((await Deno.stat(file)).mode! & 0o777, 0o600);
    const text = await Deno.readTextFile(file);
    assert.match(text, /^-----BEGIN CERTIFICATE-----[\s\S]+-----BEGIN EC PRIVATE KEY-----/);
    assert.equal((await store.current()).leaf.serialNumber, 11n);

    now += 60_000;
    const second = await pair(ca, 12);
    await store.update(second.certPem, second.keyPem);
    assert.equal(
      await Deno.readLink(store.currentPath()),
      join(dir, "kubelet-client-2026-05-17-09-09-07.pem"),
    );
    assert.equal((await store.current()).leaf.serialNumber, 12n);
    // The previous pair stays on disk, as upstream leaves it.
    assert.ok((await Deno.stat(file)).isFile);
    const names = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
    assert.deepEqual(names, [
      "kubelet-client-2026-05-17-09-08-07.pem",
      "kubelet-client-2026-05-17-09-09-07.pem",
      "kubelet-client-current.pem",
    ]);
  } finally {
    await ca.remove();
  }
});

Deno.test("CertificateStore refuses a key that does not match, and writes nothing", async () => {
  const ca = await testCA();
  const dir = join(ca.dir, "pki");
  try {
    const store = await CertificateStore.open({
      pairNamePrefix: "kubelet-server",
      certDirectory: dir,
      keyDirectory: dir,
      logger,
    });
    const a = await pair(ca, 1);
    await assert.rejects(
      store.update(a.certPem, privateKeyPem(generateECKey())),
      (e: unknown) =>
        e instanceof CertificateStoreError && /private key does not match/.test(e.message),
    );
    assert.deepEqual([...Deno.readDirSync(dir)], []);
  } finally {
    await ca.remove();
  }
});

Deno.test("CertificateStore finishes an interrupted swap and falls back to the configured files", async () => {
  const ca = await testCA();
  const dir = join(ca.dir, "pki");
  try {
    await Deno.mkdir(dir);
    const a = await pair(ca, 21);
    const target = join(dir, "kubelet-server-2026-01-01-00-00-00.pem");
    await Deno.writeTextFile(target, a.certPem + a.keyPem);
    // A crash between the symlink and the rename leaves only -updated.
    await Deno.symlink(target, join(dir, "kubelet-server-updated.pem"));
    const store = await CertificateStore.open({
      pairNamePrefix: "kubelet-server",
      certDirectory: dir,
      keyDirectory: dir,
      logger,
    });
    assert.equal(await Deno.readLink(store.currentPath()), target);
    assert.equal((await store.current()).leaf.serialNumber, 21n);

    const other = join(ca.dir, "other");
    await Deno.mkdir(other);
    const b = await pair(ca, 22);
    await Deno.writeTextFile(join(other, "tls.crt"), b.certPem);
    await Deno.writeTextFile(join(other, "tls.key"), b.keyPem);
    const files = await CertificateStore.open({
      pairNamePrefix: "kubelet-server",
      certDirectory: other,
      keyDirectory: other,
      certFile: join(other, "tls.crt"),
      keyFile: join(other, "tls.key"),
      logger,
    });
    assert.equal((await files.current()).leaf.serialNumber, 22n);
  } finally {
    await ca.remove();
  }
});
