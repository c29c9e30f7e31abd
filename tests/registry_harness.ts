/**
 * @module
 * A private image registry for tests that pull for real: Debian's docker-registry (the CNCF
 * distribution registry 2.8) on 127.0.0.1 with a free port, plain HTTP, storage under one
 * directory, optionally behind basic auth from a bcrypt htpasswd file. {@link pushImage} puts an
 * image built by tests/images.ts into it over the OCI distribution API.
 *
 * containerd's CRI plugin (1.6, `config_path` unset) talks plain HTTP to a registry on a
 * loopback address without further configuration; `ctr` needs `--plain-http`. Credentials come
 * from the kubelet's PullImageRequest (pull secrets), so containerd needs none in its config.
 *
 * It owns the registry process and the files under `dir`; it talks to the registry over HTTP,
 * and to `htpasswd` (apache2-utils) to hash the password. Upstream's node e2e tests use a
 * private registry on the internet for the same purpose (pull secrets, pull policies).
 */

import { Buffer } from "node:buffer";
import { aptInstallMissing, findProgram } from "./apt.ts";
import {
  blobPath,
  buildImageLayout,
  type ImageSpec,
  MEDIA_MANIFEST,
  parseReference,
} from "./images.ts";
import { freePort, logTail, signalChild } from "./child_process.ts";

/** Where Debian's docker-registry package puts the registry. */
export const REGISTRY_BINARY = "/usr/bin/docker-registry";

/** User name and password of a registry behind basic auth. */
export interface RegistryAuth {
  username: string;
  password: string;
}

/** Options for {@link startRegistry}. */
export interface RegistryOptions {
  /** Directory for config, htpasswd, storage (`dir/storage`) and log. */
  dir: string;
  /** When given, every request needs these credentials (htpasswd basic auth). */
  auth?: RegistryAuth;
  /** Aborting it stops the registry (and aborts a start that is still waiting). */
  signal?: AbortSignal;
  /**
   * How long to wait for `GET /v2/` to answer.
   * @default 15000
   */
  startTimeoutMs?: number;
  /**
   * How long stop() waits after SIGTERM before it sends SIGKILL.
   * @default 5000
   */
  stopTimeoutMs?: number;
  /**
   * The address it listens on: another of this host's own, for clients in network namespaces
   * the tests made (tests/kubeadm_cluster.ts's host bridge). @default "127.0.0.1"
   */
  address?: string;
}

/** A running registry started by {@link startRegistry}. */
export interface RegistryHandle {
  /** `127.0.0.1:PORT`: the registry part of image references. */
  host: string;
  /** `http://127.0.0.1:PORT`. */
  url: string;
  pid: number;
  /** Path of the log file (registry output, appended). */
  logFile: string;
  /** Stops the registry: SIGTERM, then SIGKILL after a bound. Idempotent. */
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The registry did not come up, or a push failed. */
export class RegistryError extends Error {
  override name = "RegistryError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const POLL_INTERVAL_MS = 50;
// Ports are picked by binding port 0 and closing it; another process may take the port in
// between, so a start that loses that race tries again with a new one.
const PORT_ATTEMPTS = 3;

/** Starts a registry on 127.0.0.1 (or `address`) with a free port and waits until it answers. */
export async function startRegistry(opts: RegistryOptions): Promise<RegistryHandle> {
  let lastError: unknown;
  for (let attempt = 0; attempt < PORT_ATTEMPTS; attempt++) {
    opts.signal?.throwIfAborted();
    try {
      return await startOnce(opts, freePort());
    } catch (err) {
      if (!(err instanceof PortTakenError)) throw err;
      lastError = err;
    }
  }
  throw new RegistryError(`Cannot start the registry: no free port after ${PORT_ATTEMPTS} tries`, {
    cause: lastError,
  });
}

class PortTakenError extends Error {
  override name = "PortTakenError";
}

async function startOnce(opts: RegistryOptions, port: number): Promise<RegistryHandle> {
  const dir = opts.dir.startsWith("/") ? opts.dir : `${Deno.cwd()}/${opts.dir}`;
  const binary = await findProgram(REGISTRY_BINARY) ?? await findProgram("docker-registry");
  if (!binary) {
    throw new RegistryError(
      `Cannot start the registry: ${REGISTRY_BINARY} is missing; install docker-registry ` +
        `or call ensureRegistryPackages()`,
    );
  }
  const host = `${opts.address ?? "127.0.0.1"}:${port}`;
  const url = `http://${host}`;
  const logFile = `${dir}/registry.log`;
  const configFile = `${dir}/config.yml`;
  await Deno.mkdir(`${dir}/storage`, { recursive: true });
  if (opts.auth) {
    await Deno.writeTextFile(`${dir}/htpasswd`, await htpasswdLine(opts.auth), { mode: 0o600 });
  }
  // JSON is YAML, and needs no quoting rules of its own.
  await Deno.writeTextFile(
    configFile,
    JSON.stringify(registryConfig({ dir, host, auth: opts.auth !== undefined }), null, 2) + "\n",
  );

  const log = await Deno.open(logFile, { create: true, append: true });
  const logWriter = log.writable.getWriter();
  await logWriter.write(
    new TextEncoder().encode(`--- ${new Date().toISOString()} registry serve ${configFile}\n`),
  );
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(binary, {
      args: ["serve", configFile],
      // REGISTRY_* variables would override the config file.
      clearEnv: true,
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    await logWriter.close().catch(() => {});
    throw new RegistryError(`Cannot start the registry: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const copy = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) await logWriter.write(chunk);
  };
  const copied = Promise.allSettled([copy(child.stdout), copy(child.stderr)]).then(async () => {
    await logWriter.close().catch(() => {});
  });
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });

  let stopping: Promise<void> | undefined;
  const onAbort = () => void stop();
  const stopTimeoutMs = opts.stopTimeoutMs ?? 5_000;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      opts.signal?.removeEventListener("abort", onAbort);
      if (!exited) {
        signalChild(child, "SIGTERM");
        const timer = setTimeout(() => signalChild(child, "SIGKILL"), stopTimeoutMs);
        try {
          await status;
        } finally {
          clearTimeout(timer);
        }
      }
      await copied;
    })();
    return stopping;
  };
  opts.signal?.addEventListener("abort", onAbort, { once: true });

  const startTimeoutMs = opts.startTimeoutMs ?? 15_000;
  const deadline = Date.now() + startTimeoutMs;
  try {
    while (true) {
      opts.signal?.throwIfAborted();
      if (exited) {
        const s = await status;
        await copied;
        const tail = await logTail(logFile, 20);
        if (/address already in use/.test(tail)) throw new PortTakenError(tail);
        throw new RegistryError(
          `The registry exited during start-up (code ${s.code}); last lines of ${logFile}:\n` +
            tail,
        );
      }
      const answer = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(2_000) })
        .then(async (r) => {
          await r.body?.cancel();
          return r.status;
        })
        .catch(() => undefined);
      // 401 is the answer of a registry behind auth: it serves.
      if (answer === 200 || answer === 401) break;
      if (Date.now() >= deadline) {
        throw new RegistryError(
          `The registry did not answer on ${url}/v2/ within ${startTimeoutMs} ms; see ${logFile}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
    }
  } catch (err) {
    await stop();
    if (opts.signal?.aborted) throw opts.signal.reason;
    throw err;
  }
  return { host, url, pid: child.pid, logFile, stop, [Symbol.asyncDispose]: stop };
}

function registryConfig(args: { dir: string; host: string; auth: boolean }): unknown {
  return {
    version: "0.1",
    log: { level: "info", formatter: "text", accesslog: { disabled: false } },
    storage: {
      filesystem: { rootdirectory: `${args.dir}/storage` },
      delete: { enabled: true },
      // Upload purging starts a background walker; a test registry lives for seconds.
      maintenance: { uploadpurging: { enabled: false } },
    },
    http: {
      addr: args.host,
      // Without one the registry makes up a secret and warns about it.
      secret: crypto.randomUUID(),
      headers: { "X-Content-Type-Options": ["nosniff"] },
    },
    ...(args.auth
      ? { auth: { htpasswd: { realm: "kubelet-ts-test", path: `${args.dir}/htpasswd` } } }
      : {}),
  };
}

/** `user:<bcrypt hash>` from `htpasswd -B`; the registry accepts bcrypt only. */
async function htpasswdLine(auth: RegistryAuth): Promise<string> {
  if (auth.username === "" || auth.username.includes(":")) {
    throw new RegistryError(
      `Registry user name must be non-empty and without ':': current value is '${auth.username}'`,
    );
  }
  const htpasswd = await findProgram("htpasswd");
  if (!htpasswd) {
    throw new RegistryError(
      "Cannot set up registry auth: 'htpasswd' is missing; install apache2-utils " +
        "or call ensureRegistryPackages()",
    );
  }
  // -i reads the password from stdin, so it shows in no process list; cost 5 keeps it fast.
  const child = new Deno.Command(htpasswd, {
    args: ["-n", "-i", "-B", "-C", "5", auth.username],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(auth.password));
  await writer.close();
  const out = await child.output();
  const line = new TextDecoder().decode(out.stdout).trim();
  if (!out.success || !line.startsWith(`${auth.username}:$2`)) {
    throw new RegistryError(
      `htpasswd failed with code ${out.code}: ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
  return `${line}\n`;
}

/** Options for {@link pushImage}. */
export interface PushImageOptions {
  /** The registry: its `host` (`127.0.0.1:PORT`) or the handle of {@link startRegistry}. */
  registry: string | Pick<RegistryHandle, "host">;
  /** The image to push: built (from the cache) with tests/images.ts, or an OCI layout tarball. */
  image: ImageSpec | { tarball: string };
  /** `repository:tag` in the registry, e.g. `test/busybox:1`; a leading registry host is allowed. */
  ref: string;
  auth?: RegistryAuth;
  signal?: AbortSignal;
}

/** What {@link pushImage} pushed. */
export interface PushedImage {
  /** Full reference to pull: `127.0.0.1:PORT/test/busybox:1`. */
  ref: string;
  /** `sha256:...` of the manifest, as the registry reports it. */
  digest: string;
}

/**
 * Pushes an image (one manifest, as tests/images.ts builds them) with the OCI distribution
 * API: each blob unless the registry has it, then the manifest under the tag.
 */
export async function pushImage(opts: PushImageOptions): Promise<PushedImage> {
  const host = typeof opts.registry === "string" ? opts.registry : opts.registry.host;
  const base = `http://${host}`;
  const { name: fullName, tag } = parseReference(opts.ref);
  const repo = fullName.startsWith(`${host}/`) ? fullName.slice(host.length + 1) : fullName;
  const headers: Record<string, string> = opts.auth
    ? {
      Authorization: `Basic ${
        Buffer.from(`${opts.auth.username}:${opts.auth.password}`).toString("base64")
      }`,
    }
    : {};

  let scratch: string | undefined;
  try {
    let layoutDir: string;
    if ("tarball" in opts.image) {
      scratch = await Deno.makeTempDir({ prefix: "push-layout-" });
      await extractTar(opts.image.tarball, scratch);
      layoutDir = scratch;
    } else {
      layoutDir = (await buildImageLayout({ image: opts.image })).layoutDir;
    }
    const index = JSON.parse(await Deno.readTextFile(`${layoutDir}/index.json`));
    const entry = index.manifests?.[0];
    if (index.manifests?.length !== 1 || entry?.mediaType !== MEDIA_MANIFEST) {
      throw new RegistryError(
        `Cannot push ${opts.ref}: the layout in ${layoutDir} must hold exactly one image ` +
          `manifest (${MEDIA_MANIFEST})`,
      );
    }
    const manifestBytes = await Deno.readFile(`${layoutDir}/${blobPath(entry.digest)}`);
    const manifest = JSON.parse(new TextDecoder().decode(manifestBytes));
    const blobs: { digest: string }[] = [manifest.config, ...manifest.layers];

    const request = async (method: string, url: string, init: RequestInit = {}) => {
      const res = await fetch(new URL(url, base), {
        ...init,
        method,
        headers: { ...headers, ...(init.headers as Record<string, string> | undefined) },
        signal: opts.signal,
      });
      const text = method === "HEAD" ? "" : await res.text();
      return { res, text };
    };
    const fail = (what: string, r: { res: Response; text: string }) =>
      new RegistryError(
        `Cannot push ${opts.ref} to ${host}: ${what} answered ${r.res.status} ` +
          `${r.res.statusText}: ${r.text.trim()}`,
      );

    for (const { digest } of blobs) {
      const head = await request("HEAD", `/v2/${repo}/blobs/${digest}`);
      if (head.res.status === 200) continue;
      if (head.res.status !== 404) throw fail(`HEAD blob ${digest}`, head);
      const start = await request("POST", `/v2/${repo}/blobs/uploads/`);
      const location = start.res.headers.get("Location");
      if (start.res.status !== 202 || !location) throw fail("starting an upload", start);
      const upload = new URL(location, base);
      upload.searchParams.set("digest", digest);
      const data = await Deno.readFile(`${layoutDir}/${blobPath(digest)}`);
      const put = await request("PUT", upload.href, {
        body: data,
        headers: { "Content-Type": "application/octet-stream" },
      });
      if (put.res.status !== 201) throw fail(`uploading blob ${digest}`, put);
    }
    const put = await request("PUT", `/v2/${repo}/manifests/${tag}`, {
      body: manifestBytes,
      headers: { "Content-Type": MEDIA_MANIFEST },
    });
    if (put.res.status !== 201) throw fail(`PUT manifest ${tag}`, put);
    const digest = put.res.headers.get("Docker-Content-Digest") ?? entry.digest;
    if (digest !== entry.digest) {
      throw new RegistryError(
        `Pushed ${opts.ref} but the registry reports digest ${digest}, not ${entry.digest}`,
      );
    }
    return { ref: `${host}/${repo}:${tag}`, digest };
  } finally {
    if (scratch) await Deno.remove(scratch, { recursive: true }).catch(() => {});
  }
}

async function extractTar(tarball: string, into: string): Promise<void> {
  const out = await new Deno.Command("tar", {
    args: ["-xf", tarball, "-C", into],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new RegistryError(
      `Cannot read ${tarball}: tar failed: ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
}

/** Installs docker-registry and apache2-utils (htpasswd) when their programs are missing. */
export async function ensureRegistryPackages(): Promise<void> {
  await aptInstallMissing([
    { pkg: "docker-registry", provides: [REGISTRY_BINARY] },
    { pkg: "apache2-utils", provides: ["htpasswd"] },
  ]);
}
