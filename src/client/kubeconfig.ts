/**
 * @module
 * Reads a kubeconfig file (`--kubeconfig`) into what a client needs: the server URL, the CA,
 * and the client credentials of the current context. Paths in the file are relative to the
 * file's directory, as client-go resolves them. Errors name the file, the line where known and
 * the field. A cluster with `insecure-skip-tls-verify: true` is used without verifying the
 * server's certificate, as client-go uses it (silently there; the kubelet's start-up logs a
 * warning here), and refused with a certificate authority too, as client-go's transport refuses
 * it. Corresponds to the part of client-go's `clientcmd` the kubelet uses.
 */

import { dirname, isAbsolute, join } from "node:path";
import { isMap, isSeq, LineCounter, parseDocument } from "yaml";
import { ConfigError } from "../apis/config_schema.ts";

/** The connection settings of one kubeconfig context, files already read. */
export interface RestConfig {
  /** e.g. https://127.0.0.1:6443 */
  readonly server: string;
  /** PEM of the CA that signs the server's certificate; undefined uses the system roots. */
  readonly caPem?: string;
  /** The server's certificate is not verified (kubeconfig `insecure-skip-tls-verify`). */
  readonly insecureSkipTLSVerify: boolean;
  readonly tlsServerName?: string;
  /** PEM client certificate and key. */
  readonly certPem?: string;
  readonly keyPem?: string;
  /** Bearer token. */
  readonly token?: string;
  /** The kubeconfig it came from. */
  readonly source: string;
  /** Paths the PEMs were read from; undefined when the kubeconfig embeds the data. */
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
}

type Obj = Record<string, unknown>;

function decodeBase64(text: string, file: string, field: string): string {
  try {
    return new TextDecoder().decode(
      Uint8Array.from(atob(text.replace(/\s+/g, "")), (c) => c.charCodeAt(0)),
    );
  } catch {
    throw new ConfigError(file, undefined, field, "is not valid base64");
  }
}

function named(list: unknown, kind: string, name: string, file: string): Obj {
  if (!Array.isArray(list)) {
    throw new ConfigError(file, undefined, `${kind}s`, `must be a list of named ${kind}s`);
  }
  const item = list.find((e) => (e as Obj | null)?.name === name) as Obj | undefined;
  if (!item) {
    const known = list.map((e) => `'${(e as Obj | null)?.name}'`).join(", ") || "none";
    throw new ConfigError(
      file,
      undefined,
      `${kind}s`,
      `has no ${kind} named '${name}' (known: ${known})`,
    );
  }
  const body = item[kind];
  if (body === null || typeof body !== "object") {
    throw new ConfigError(file, undefined, `${kind}s[${name}].${kind}`, "is missing");
  }
  return body as Obj;
}

/** Loads `file` and resolves its current context (or `context` when given). */
export async function loadKubeconfig(file: string, context?: string): Promise<RestConfig> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (e) {
    throw new ConfigError(
      file,
      undefined,
      "",
      `cannot read kubeconfig: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const problem = doc.errors[0];
  if (problem) {
    throw new ConfigError(
      file,
      problem.linePos?.[0]?.line,
      "",
      `is not valid YAML: ${problem.message.split("\n")[0]}`,
    );
  }
  if (!isMap(doc.contents)) {
    throw new ConfigError(file, undefined, "", "must be a kubeconfig (a YAML object)");
  }
  for (const key of ["clusters", "users", "contexts"]) {
    const node = doc.get(key, true);
    if (node !== undefined && !isSeq(node)) {
      const range = (node as { range?: [number] }).range;
      throw new ConfigError(
        file,
        range ? lines.linePos(range[0]).line : undefined,
        key,
        "must be a list",
      );
    }
  }
  const root = doc.toJS() as Obj;
  const dir = dirname(file);
  const ctxName = context ?? (root["current-context"] as string | undefined) ?? "";
  if (ctxName === "") {
    throw new ConfigError(
      file,
      undefined,
      "current-context",
      "is not set and no context was given",
    );
  }
  const ctx = named(root.contexts, "context", ctxName, file);
  const cluster = named(root.clusters, "cluster", String(ctx.cluster ?? ""), file);
  const user = ctx.user === undefined || ctx.user === ""
    ? {}
    : named(root.users, "user", String(ctx.user), file);

  const path = (
    p: unknown,
  ) => (typeof p === "string" && p !== "" ? (isAbsolute(p) ? p : join(dir, p)) : undefined);
  const readPem = async (
    field: string,
    p: string | undefined,
    data: unknown,
  ): Promise<string | undefined> => {
    if (typeof data === "string" && data !== "") return decodeBase64(data, file, `${field}-data`);
    if (p === undefined) return undefined;
    try {
      return await Deno.readTextFile(p);
    } catch (e) {
      throw new ConfigError(
        file,
        undefined,
        field,
        `names '${p}', which cannot be read: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  };

  const data = (d: unknown) => typeof d === "string" && d !== "";
  const server = cluster.server;
  if (typeof server !== "string" || !/^https?:\/\//.test(server)) {
    throw new ConfigError(
      file,
      undefined,
      `clusters[${ctx.cluster}].cluster.server`,
      `must be an https:// URL: current value is '${String(server)}'`,
    );
  }
  const tokenFile = path(user.tokenFile);
  let token = typeof user.token === "string" && user.token !== "" ? user.token : undefined;
  if (token === undefined && tokenFile !== undefined) {
    token = (await readPem("tokenFile", tokenFile, undefined))?.trim();
  }
  const caPem = await readPem(
    "certificate-authority",
    path(cluster["certificate-authority"]),
    cluster["certificate-authority-data"],
  );
  const insecureSkipTLSVerify = cluster["insecure-skip-tls-verify"] === true;
  if (insecureSkipTLSVerify && caPem !== undefined) {
    // client-go's transport.TLSConfigFor, with the field named.
    throw new ConfigError(
      file,
      undefined,
      `clusters[${ctx.cluster}].cluster.insecure-skip-tls-verify`,
      "is true and the cluster has a certificate-authority too: specifying a root certificates " +
        "file with the insecure flag is not allowed",
    );
  }
  return {
    server: server.replace(/\/+$/, ""),
    caPem,
    insecureSkipTLSVerify,
    tlsServerName: typeof cluster["tls-server-name"] === "string"
      ? cluster["tls-server-name"]
      : undefined,
    certPem: await readPem(
      "client-certificate",
      path(user["client-certificate"]),
      user["client-certificate-data"],
    ),
    keyPem: await readPem("client-key", path(user["client-key"]), user["client-key-data"]),
    token,
    source: file,
    caFile: data(cluster["certificate-authority-data"])
      ? undefined
      : path(cluster["certificate-authority"]),
    certFile: data(user["client-certificate-data"]) ? undefined : path(user["client-certificate"]),
    keyFile: data(user["client-key-data"]) ? undefined : path(user["client-key"]),
  };
}
