/**
 * @module
 * Test fixtures for the certificate modules: a throw-away CA and certificates it signs for a
 * given request, made with the `openssl` CLI in a temporary directory (node:crypto cannot sign
 * certificates), and a serving certificate for 127.0.0.1. Private to the `*_test.ts` files of
 * certificate/pkcs10.ts, certificate_store, certificate_manager and kube_client.
 */

import { join } from "node:path";

async function openssl(args: string[], stdin?: string): Promise<string> {
  const child = new Deno.Command("openssl", {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const o = await child.output();
  const dec = new TextDecoder();
  if (!o.success) throw new Error(`openssl ${args.join(" ")}: ${dec.decode(o.stderr)}`);
  return dec.decode(o.stdout);
}

/** A CA in a temporary directory that signs requests. */
export interface TestCA {
  readonly dir: string;
  readonly certPem: string;
  /** Signs a PEM request for `days` (fractional days are not possible: openssl counts days). */
  sign(csrPem: string, opts?: { days?: number; serial?: number }): Promise<string>;
  remove(): Promise<void>;
}

/** Makes a CA (EC P-256, CN test-ca). */
export async function testCA(): Promise<TestCA> {
  const dir = await Deno.makeTempDir({ prefix: "cert-fixtures-" });
  const key = join(dir, "ca.key");
  const cert = join(dir, "ca.crt");
  await openssl([
    ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", key, "-out", cert, "-subj", "/CN=test-ca", "-days", "30"],
    ...["-addext", "basicConstraints=critical,CA:TRUE"],
  ]);
  let n = 0;
  return {
    dir,
    certPem: await Deno.readTextFile(cert),
    async sign(csrPem, opts = {}) {
      const csr = join(dir, `r${++n}.csr`);
      await Deno.writeTextFile(csr, csrPem);
      return await openssl([
        ...["x509", "-req", "-in", csr, "-CA", cert, "-CAkey", key],
        ...["-set_serial", String(opts.serial ?? 1000 + n), "-days", String(opts.days ?? 1)],
        "-copy_extensions",
        "copy",
      ]);
    },
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}

/** A serving certificate of 127.0.0.1 (EC P-256) that `ca` signed, with its key. */
export async function testServerCert(ca: TestCA): Promise<{ certPem: string; keyPem: string }> {
  const key = join(ca.dir, "server.key");
  const csr = await openssl([
    ...["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", key, "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
  ]);
  return { certPem: await ca.sign(csr), keyPem: await Deno.readTextFile(key) };
}
