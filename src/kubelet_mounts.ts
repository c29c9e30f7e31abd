/**
 * @module
 * The CRI mounts of one container: every volumeMount resolved against the pod's mounted
 * volumes (host path, read-only, SELinux relabel, propagation, recursive read-only), subPath
 * and subPathExpr made safe (no absolute path, no `..`, created inside the volume, refused when
 * a symlink leads out of it), image volumes as the pulled image for the runtime to mount (its
 * subPath passed on as `image_sub_path`), and the kubelet-managed `/etc/hosts` written to
 * `<pods>/<uid>/etc-hosts` and mounted over the container's. Reads the pod's volumes from the
 * volume manager (a {@link PodVolumesFunc}) and the node's hosts file for host-network pods;
 * `kuberuntime/kuberuntime_container.ts` calls it while building a container config and appends the
 * termination-log mount after these. Corresponds to upstream `pkg/kubelet/kubelet_pods.go`
 * (makeMounts, shouldMountHostsFile, translateMountPropagation, resolveRecursiveReadOnly,
 * makeHostsMount, ensureHostsFile, nodeHostsFileContent, managedHostsFileContent,
 * hostsEntriesFromHostAliases), `kubecontainer.ExpandContainerVolumeMounts`,
 * `pkg/volume/validation` (ValidatePathNoBacksteps) and `pkg/volume/util/subpath/subpath_linux.go`
 * (SafeMakeDir, doSafeMakeDir, findExistingPrefix, the within-volume check of doBindSubPath).
 */

import * as fs from "node:fs";
import { isAbsolute, join, normalize } from "node:path";
import type { V1Container, V1HostAlias, V1Pod, V1VolumeMount } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { kobj, type Logger } from "./klog/klog.ts";
import type { PodVolumesFunc } from "./volume/plugin.ts";
import type { RuntimeHandlerLookup } from "./runtimeclass/runtimeclass_manager.ts";
import {
  askLauncher,
  type HostCallHandlers,
  inPermissionSandbox,
} from "./privilege/launcher_calls.ts";
import { type EnvVar, expand } from "./kuberuntime/expansion.ts";

/** Where containers see the managed hosts file (upstream etcHostsPath). */
export const ETC_HOSTS_PATH = "/etc/hosts";

const MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n";
const MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n";
const HOSTS_FILE_MODE = 0o644;

/**
 * A container's mounts cannot be made; the message is upstream's and is what the container
 * start reports (CreateContainerConfigError). Host details stay in `cause`, out of the pod's
 * status, as upstream keeps them out.
 */
export class MountsError extends Error {
  override name = "MountsError";
}

/** Options of {@link KubeletMounts}. */
export interface KubeletMountsOptions {
  /** `<rootDirectory>/pods`: the hosts file goes to `<uid>/etc-hosts`. */
  readonly podsDirectory: string;
  /** The pod's mounted volumes by name (the volume manager's). */
  readonly podVolumes: PodVolumesFunc;
  readonly logger: Logger;
  /** The node's hosts file, copied for host-network pods. @default "/etc/hosts" */
  readonly nodeHostsFile?: string;
  /**
   * Whether the pod's runtime handler supports recursive read-only mounts (upstream
   * runtimeClassSupportsRecursiveReadOnlyMounts, from the runtime's status). @default () => false
   */
  readonly supportsRecursiveReadOnly?: (pod: V1Pod) => boolean;
}

/** What {@link KubeletMounts.makeMounts} builds the mounts of. */
export interface MakeMountsRequest {
  readonly pod: V1Pod;
  readonly container: V1Container;
  /** The pod's IPs; none yet means no managed hosts file (unless host network). */
  readonly podIPs: readonly string[];
  /** The pod's short hostname (generatePodHostNameAndDomain). */
  readonly hostname: string;
  /** The pod's domain, "" without a subdomain. */
  readonly domain: string;
  /** The container's resolved environment, for subPathExpr. */
  readonly envs: readonly EnvVar[];
  /**
   * The pulled image of each image volume the container mounts, by volume name: such a mount is
   * the image itself (CRI `Mount.image`, subPath as `image_sub_path`), not a host path.
   * @default none: mounting an image volume fails
   */
  readonly imageVolumes?: ReadonlyMap<string, api.ImageSpec>;
  readonly signal?: AbortSignal;
}

/** What the container runtime code needs of {@link KubeletMounts}. */
export type ContainerMounter = Pick<KubeletMounts, "makeMounts">;

/** Whether the pod gets the managed hosts file (upstream shouldMountHostsFile, Linux). */
export function shouldMountHostsFile(pod: V1Pod, podIPs: readonly string[]): boolean {
  return podIPs.length > 0 || pod.spec?.hostNetwork === true;
}

/** `<pods>/<uid>/etc-hosts` (upstream getEtcHostsPath). */
export function etcHostsPath(podsDirectory: string, podUid: string): string {
  return join(podsDirectory, podUid, "etc-hosts");
}

/** The HostAliases section of a hosts file; "" without aliases (upstream). */
export function hostsEntriesFromHostAliases(hostAliases: readonly V1HostAlias[]): string {
  if (hostAliases.length === 0) return "";
  let out = "\n# Entries added by HostAliases.\n";
  for (const alias of hostAliases) {
    out += `${alias.ip ?? ""}\t${(alias.hostnames ?? []).join("\t")}\n`;
  }
  return out;
}

/** The hosts file of a pod on the pod network (upstream managedHostsFileContent). */
export function managedHostsFileContent(
  podIPs: readonly string[],
  hostname: string,
  domain: string,
  hostAliases: readonly V1HostAlias[],
): string {
  let out = MANAGED_HOSTS_HEADER +
    "127.0.0.1\tlocalhost\n" +
    "::1\tlocalhost ip6-localhost ip6-loopback\n" +
    "fe00::0\tip6-localnet\n" +
    "fe00::0\tip6-mcastprefix\n" +
    "fe00::1\tip6-allnodes\n" +
    "fe00::2\tip6-allrouters\n";
  for (const ip of podIPs) {
    out += domain !== "" ? `${ip}\t${hostname}.${domain}\t${hostname}\n` : `${ip}\t${hostname}\n`;
  }
  return out + hostsEntriesFromHostAliases(hostAliases);
}

/** The hosts file of a host-network pod: the node's, plus aliases (upstream). */
export function nodeHostsFileContent(
  nodeHosts: string,
  hostAliases: readonly V1HostAlias[],
): string {
  return MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK + nodeHosts +
    hostsEntriesFromHostAliases(hostAliases);
}

/** upstream translateMountPropagation (Linux). */
export function translateMountPropagation(mode: string | undefined): api.MountPropagation {
  switch (mode) {
    case undefined:
    case "None":
      return api.MountPropagation.PROPAGATION_PRIVATE;
    case "HostToContainer":
      return api.MountPropagation.PROPAGATION_HOST_TO_CONTAINER;
    case "Bidirectional":
      return api.MountPropagation.PROPAGATION_BIDIRECTIONAL;
  }
  throw new MountsError(`invalid MountPropagation mode: ${JSON.stringify(mode)}`);
}

/**
 * upstream runtimeClassSupportsRecursiveReadOnlyMounts: whether the runtime handler of the pod's
 * RuntimeClass supports recursive read-only mounts, from the handlers of the runtime's last CRI
 * Status. Without a RuntimeClass manager (standalone mode), a runtime that lists no handlers,
 * or a class or handler that cannot be found (logged as upstream's errors): false.
 */
export function runtimeClassSupportsRecursiveReadOnlyMounts(
  pod: V1Pod,
  o: {
    readonly runtimeClasses?: RuntimeHandlerLookup;
    readonly handlers: readonly api.RuntimeHandler[];
    readonly logger: Logger;
  },
): boolean {
  if (!o.runtimeClasses) return false;
  let name: string;
  try {
    name = o.runtimeClasses.lookupRuntimeHandler(pod.spec?.runtimeClassName);
  } catch (e) {
    o.logger.error(e, "failed to look up the runtime handler", {
      runtimeClassName: pod.spec?.runtimeClassName,
    });
    return false;
  }
  // A runtime that does not list its handlers: no need to say anything.
  if (o.handlers.length === 0) return false;
  const h = o.handlers.find((h) => h.name === name);
  if (!h) {
    o.logger.error(null, "Unknown runtime handler", { runtimeHandlerName: name });
    return false;
  }
  return h.features?.recursiveReadOnlyMounts ?? false;
}

/**
 * upstream resolveRecursiveReadOnly: whether the mount is recursively read-only. IfPossible
 * falls back to a plain read-only mount when the runtime lacks support; Enabled fails then.
 */
export function resolveRecursiveReadOnly(m: V1VolumeMount, runtimeSupportsRRO: boolean): boolean {
  const mode = m.recursiveReadOnly;
  if (mode === undefined || mode === "Disabled") return false;
  const volume = JSON.stringify(m.name);
  if (m.readOnly !== true) {
    throw new Error(
      `volume ${volume} requested recursive read-only mode, but it is not read-only`,
    );
  }
  if (m.mountPropagation !== undefined && m.mountPropagation !== "None") {
    throw new Error(
      `volume ${volume} requested recursive read-only mode, but it is not compatible with propagation ${
        JSON.stringify(m.mountPropagation)
      }`,
    );
  }
  switch (mode) {
    case "IfPossible":
      return runtimeSupportsRRO;
    case "Enabled":
      if (!runtimeSupportsRRO) {
        throw new Error(
          `volume ${volume} requested recursive read-only mode, but it is not supported by the runtime`,
        );
      }
      return true;
  }
  throw new Error(`unknown recursive read-only mode ${JSON.stringify(mode)}`);
}

/**
 * subPathExpr with `$(VAR)` expanded from the container's environment; a variable that is
 * unset or empty fails with upstream's `missing value for A, B` (upstream
 * ExpandContainerVolumeMounts).
 */
export function expandSubPathExpr(expr: string, envs: readonly EnvVar[]): string {
  const values = new Map(envs.map((e) => [e.name, e.value]));
  const missing = new Set<string>();
  const expanded = expand(expr, (name) => {
    const value = values.get(name);
    if (value === undefined || value === "") missing.add(name);
    return value ?? "";
  });
  if (missing.size > 0) {
    throw new MountsError(`missing value for ${[...missing].sort().join(", ")}`);
  }
  return expanded;
}

/** Builds container mounts for pods; see the module documentation. */
export class KubeletMounts {
  readonly #podsDirectory: string;
  readonly #podVolumes: PodVolumesFunc;
  readonly #log: Logger;
  readonly #nodeHostsFile: string;
  readonly #supportsRRO: (pod: V1Pod) => boolean;

  constructor(opts: KubeletMountsOptions) {
    this.#podsDirectory = opts.podsDirectory;
    this.#podVolumes = opts.podVolumes;
    this.#log = opts.logger;
    this.#nodeHostsFile = opts.nodeHostsFile ?? "/etc/hosts";
    this.#supportsRRO = opts.supportsRecursiveReadOnly ?? (() => false);
  }

  /**
   * The container's CRI mounts (upstream makeMounts): its volumeMounts in order, then the
   * managed hosts file unless the container mounts `/etc/hosts` itself. Throws
   * {@link MountsError} with upstream's message.
   */
  async makeMounts(req: MakeMountsRequest): Promise<api.Mount[]> {
    const { pod, container, signal } = req;
    const podUid = pod.metadata?.uid ?? "";
    let mountHosts = shouldMountHostsFile(pod, req.podIPs);
    this.#log.v(3).info("Creating hosts mount for container", {
      pod: kobj(pod),
      containerName: container.name,
      podIPs: req.podIPs,
      path: mountHosts,
    });
    const volumes = this.#podVolumes(podUid);
    const supportsRRO = this.#supportsRRO(pod);
    const mounts: api.Mount[] = [];
    const volumeMounts = container.volumeMounts ?? [];
    for (const [index, m] of volumeMounts.entries()) {
      signal?.throwIfAborted();
      mountHosts &&= m.mountPath !== ETC_HOSTS_PATH;
      const vol = volumes.get(m.name);
      if (!vol) {
        this.#log.error(
          null,
          "Mount cannot be satisfied for the container, because the volume is missing or the volume mounter (vol.Mounter) is nil",
          { containerName: container.name, ok: false, volumeMounter: m },
        );
        throw new MountsError(
          `cannot find volume ${JSON.stringify(m.name)} to mount into container ${
            JSON.stringify(container.name)
          }`,
        );
      }
      // Every mount of a volume that wants it asks the runtime to relabel: upstream marks the
      // volume labelled on a copy of its VolumeInfo, so its second mount asks again.
      // kuberuntime_container.ts clears the flag on hosts without SELinux, as upstream does.
      const selinuxRelabel = vol.selinuxRelabel;

      let subPath = m.subPath ?? "";
      if (m.subPathExpr) subPath = expandSubPathExpr(m.subPathExpr, req.envs);
      if (subPath !== "") {
        if (isAbsolute(subPath)) {
          throw new MountsError(`error SubPath \`${subPath}\` must not be an absolute path`);
        }
        if (subPath.split("/").includes("..")) {
          throw new MountsError(
            `unable to provision SubPath \`${subPath}\`: must not contain '..'`,
          );
        }
      }

      // An image volume is mounted by the runtime from the image; the subPath is its business.
      const image = req.imageVolumes?.get(m.name);
      let hostPath = vol.hostPath;
      if (image === undefined) {
        if (hostPath === "") throw missingImage(pod, container, m.name);
        if (subPath !== "") {
          hostPath = await this.#prepareSubPath(container, m, vol.hostPath, subPath);
        }
      }
      const containerPath = isAbsolute(m.mountPath) ? m.mountPath : cleanPath(`/${m.mountPath}`);
      const propagation = translateMountPropagation(m.mountPropagation);
      if (
        propagation === api.MountPropagation.PROPAGATION_BIDIRECTIONAL &&
        container.securityContext?.privileged !== true
      ) {
        throw new MountsError(
          `${
            containerFieldPath(pod, container.name)
          }.volumeMounts[${index}].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers`,
        );
      }
      this.#log.v(5).info("Mount has propagation", {
        pod: kobj(pod),
        containerName: container.name,
        volumeMountName: m.name,
        propagation: api.MountPropagation[propagation],
      });
      let recursiveReadOnly: boolean;
      try {
        recursiveReadOnly = resolveRecursiveReadOnly(m, supportsRRO);
      } catch (e) {
        throw new MountsError(
          `failed to resolve recursive read-only mode: ${(e as Error).message}`,
          { cause: e },
        );
      }
      mounts.push(api.Mount.create({
        containerPath,
        hostPath,
        readonly: m.readOnly === true || vol.readOnly,
        selinuxRelabel,
        propagation,
        recursiveReadOnly,
        image,
        imageSubPath: image === undefined ? "" : subPath,
      }));
    }
    if (mountHosts) mounts.push(await this.#makeHostsMount(req));
    return mounts;
  }

  /**
   * `<volume>/<subPath>`, created with the volume's mode when missing, as the real path the
   * runtime should bind-mount; refused when it resolves outside the volume.
   */
  async #prepareSubPath(
    container: V1Container,
    m: V1VolumeMount,
    volumePath: string,
    subPath: string,
  ): Promise<string> {
    const hostPath = cleanPath(join(volumePath, subPath));
    const kv = { containerName: container.name, volumeMountName: m.name };
    const host = inPermissionSandbox() ? SUBPATH_IN_LAUNCHER : SUBPATH_HERE;
    let exists: boolean | undefined;
    try {
      exists = await host.exists(hostPath);
    } catch (e) {
      this.#log.error(
        e,
        "Could not determine if subPath exists, will not attempt to change its permissions",
        { path: hostPath },
      );
    }
    if (exists === false) {
      // Made now rather than by the runtime, which would make it 0755 and owned by root where
      // the pod's fsGroup needs the volume's mode.
      try {
        await host.make(subPath, volumePath);
      } catch (e) {
        if (e instanceof VolumeModeError) throw new MountsError(e.message, { cause: e });
        this.#log.error(
          e,
          "Failed to create subPath directory for volumeMount of the container",
          kv,
        );
        throw new MountsError(
          `failed to create subPath directory for volumeMount ${
            JSON.stringify(m.name)
          } of container ${JSON.stringify(container.name)}`,
          { cause: e },
        );
      }
    }
    try {
      return await host.resolve(hostPath, volumePath);
    } catch (e) {
      this.#log.error(e, "Failed to prepare subPath for volumeMount of the container", kv);
      throw new MountsError(
        `failed to prepare subPath for volumeMount ${JSON.stringify(m.name)} of container ${
          JSON.stringify(container.name)
        }`,
        { cause: e },
      );
    }
  }

  /** upstream makeHostsMount: writes the pod's hosts file and mounts it read-write. */
  async #makeHostsMount(req: MakeMountsRequest): Promise<api.Mount> {
    const { pod } = req;
    const aliases = pod.spec?.hostAliases ?? [];
    let content: string;
    if (pod.spec?.hostNetwork === true) {
      let nodeHosts: string;
      try {
        nodeHosts = await Deno.readTextFile(this.#nodeHostsFile, { signal: req.signal });
      } catch (e) {
        req.signal?.throwIfAborted();
        throw new MountsError((e as Error).message, { cause: e });
      }
      content = nodeHostsFileContent(nodeHosts, aliases);
    } else {
      content = managedHostsFileContent(req.podIPs, req.hostname, req.domain, aliases);
    }
    const podDir = join(this.#podsDirectory, pod.metadata?.uid ?? "");
    const file = etcHostsPath(this.#podsDirectory, pod.metadata?.uid ?? "");
    try {
      Deno.mkdirSync(podDir, { recursive: true, mode: 0o750 });
      writeIfChanged(file, content);
    } catch (e) {
      throw new MountsError((e as Error).message, { cause: e });
    }
    return api.Mount.create({
      containerPath: ETC_HOSTS_PATH,
      hostPath: file,
      readonly: false,
      selinuxRelabel: true,
    });
  }
}

/**
 * Writes `content` in place (running containers bind-mount this inode, so no rename) when the
 * file differs, and keeps it 0644. Synchronous: a small file in the pod's directory, written
 * in a few microseconds, where each asynchronous call costs a thread-pool round trip.
 */
function writeIfChanged(file: string, content: string): void {
  let current: string | undefined;
  try {
    current = Deno.readTextFileSync(file);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  if (current !== content) Deno.writeTextFileSync(file, content, { mode: HOSTS_FILE_MODE });
  const mode = Deno.statSync(file).mode ?? 0;
  if ((mode & 0o7777) !== HOSTS_FILE_MODE) Deno.chmodSync(file, HOSTS_FILE_MODE);
}

/**
 * A volume with no host path and no pulled image: an image volume whose image the caller did not
 * pass (upstream would fail in GetPath with "path is empty").
 */
function missingImage(pod: V1Pod, container: V1Container, volumeName: string): MountsError {
  const volume = (pod.spec?.volumes ?? []).find((v) => v.name === volumeName);
  const name = JSON.stringify(volumeName);
  const into = `into container ${JSON.stringify(container.name)}`;
  return new MountsError(
    volume?.image
      ? `cannot mount image volume ${name} ${into}: its image ${
        JSON.stringify(volume.image.reference ?? "")
      } was not pulled`
      : `cannot mount volume ${name} ${into}: path is empty`,
  );
}

/** `spec.containers[i]` (or initContainers, ephemeralContainers), as API validation names it. */
function containerFieldPath(pod: V1Pod, name: string): string {
  const lists = [
    ["containers", pod.spec?.containers],
    ["initContainers", pod.spec?.initContainers],
    ["ephemeralContainers", pod.spec?.ephemeralContainers],
  ] as const;
  for (const [field, list] of lists) {
    const i = (list ?? []).findIndex((c) => c.name === name);
    if (i >= 0) return `spec.${field}[${i}]`;
  }
  return `container ${JSON.stringify(name)}`;
}

/** Go's filepath.Clean for absolute paths: no trailing slash, no `.` or empty elements. */
function cleanPath(path: string): string {
  const n = normalize(path);
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
}

/** upstream mount.PathWithinBase on cleaned paths. */
function pathWithinBase(path: string, base: string): boolean {
  return path === base || path.startsWith(base === "/" ? "/" : `${base}/`);
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The volume's own mode could not be read (the subPath directory would take it). */
class VolumeModeError extends Error {
  override name = "VolumeModeError";
}

/**
 * The host steps of a subPath: whether it exists, making it inside the volume with the volume's
 * mode, and resolving it inside the volume. Done here, or in the sandbox by the launcher
 * (privilege/launcher_calls.ts), since a hostPath volume may be anywhere on the host.
 */
export interface SubPathSteps {
  exists(hostPath: string): Promise<boolean>;
  make(subPath: string, volumePath: string): Promise<void>;
  resolve(hostPath: string, volumePath: string): Promise<string>;
}

/** {@link SubPathSteps} in this process. */
export const SUBPATH_HERE: SubPathSteps = {
  async exists(hostPath) {
    try {
      await Deno.stat(hostPath);
      return true;
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return false;
      throw e;
    }
  },
  async make(subPath, volumePath) {
    let perm: number;
    try {
      perm = (await Deno.stat(volumePath)).mode ?? 0o755;
    } catch (e) {
      throw new VolumeModeError((e as Error).message, { cause: e });
    }
    await safeMakeDir(subPath, volumePath, perm & 0o7777);
  },
  resolve: (hostPath, volumePath) => resolveWithinVolume(hostPath, volumePath),
};

/**
 * One host step of a container's subPath run by the launcher; answers "true"/"false" for
 * `exists`, the resolved path for `resolve`.
 */
async function subPathInLauncher(
  step: "exists" | "make" | "resolve",
  path: string,
  volumePath: string,
  subPath: string,
): Promise<string> {
  return (await askLauncher({ op: "subPath", step, path, volumePath, subPath })).text ?? "";
}

/** The launcher's handler of subPath calls: the step, by {@link SUBPATH_HERE}. */
export const serveSubPathCall: HostCallHandlers["subPath"] = async (call) => {
  const text = call.step === "exists"
    ? String(await SUBPATH_HERE.exists(call.path))
    : call.step === "make"
    ? (await SUBPATH_HERE.make(call.subPath, call.volumePath), "")
    : await SUBPATH_HERE.resolve(call.path, call.volumePath);
  return { text };
};

/** {@link SubPathSteps} by the launcher, for the sandboxed kubelet. */
const SUBPATH_IN_LAUNCHER: SubPathSteps = {
  exists: async (hostPath) => (await subPathInLauncher("exists", hostPath, "", "")) === "true",
  make: async (subPath, volumePath) => {
    await subPathInLauncher("make", "", volumePath, subPath).catch((e) => {
      throw e.name === "VolumeModeError" ? new VolumeModeError(e.message) : e;
    });
  },
  resolve: (hostPath, volumePath) => subPathInLauncher("resolve", hostPath, volumePath, ""),
};

/**
 * The real path of `path` when it lies inside the real path of `volumePath` (the check of
 * upstream doBindSubPath/safeOpenSubPath); throws otherwise.
 */
async function resolveWithinVolume(path: string, volumePath: string): Promise<string> {
  let realVolume: string;
  let real: string;
  try {
    realVolume = await Deno.realPath(volumePath);
  } catch (e) {
    throw new Error(`error resolving symlinks in ${JSON.stringify(volumePath)}: ${message(e)}`, {
      cause: e,
    });
  }
  try {
    real = await Deno.realPath(path);
  } catch (e) {
    throw new Error(`error resolving symlinks in ${JSON.stringify(path)}: ${message(e)}`, {
      cause: e,
    });
  }
  if (!pathWithinBase(real, realVolume)) {
    throw new Error(
      `subpath ${JSON.stringify(real)} not within volume path ${JSON.stringify(realVolume)}`,
    );
  }
  return real;
}

/**
 * upstream SafeMakeDir: creates `base/subdir` and its missing parents with mode `perm` (umask
 * ignored), never outside the real `base`. Existing parents are resolved and checked; each new
 * directory is opened without following symlinks, checked to be the one inside `base`, and
 * chmod-ed through that descriptor, so a swapped-in symlink cannot redirect the chmod.
 */
export async function safeMakeDir(subdir: string, base: string, perm: number): Promise<void> {
  let realBase: string;
  try {
    realBase = await Deno.realPath(base);
  } catch (e) {
    throw new Error(`error resolving symlinks in ${base}: ${message(e)}`, { cause: e });
  }
  const full = cleanPath(join(realBase, subdir));
  if (!pathWithinBase(full, realBase)) {
    throw new Error(`path ${full} is outside of allowed base ${realBase}`);
  }
  try {
    const s = await Deno.stat(full);
    if (s.isDirectory) return;
    throw new Error(`mkdir ${full}: not a directory`);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }

  const { existing, toCreate } = await findExistingPrefix(realBase, full);
  let current: string;
  try {
    current = await Deno.realPath(existing);
  } catch (e) {
    throw new Error(`error opening directory ${existing}: ${message(e)}`, { cause: e });
  }
  if (!pathWithinBase(current, realBase)) {
    throw new Error(`path ${current} is outside of allowed base ${realBase}`);
  }
  for (const dir of toCreate) {
    current = join(current, dir);
    let created = true;
    try {
      await Deno.mkdir(current, { mode: perm & 0o777 });
    } catch (e) {
      // Made meanwhile (another container of the pod): use it if it checks out below.
      if (!(e instanceof Deno.errors.AlreadyExists)) {
        throw new Error(`cannot create directory ${current}: ${message(e)}`, { cause: e });
      }
      created = false;
    }
    await withDirInside(current, realBase, async (dirHandle) => {
      if (created) await dirHandle.chmod(perm);
    });
  }
}

/**
 * Runs `fn` with `path` opened as a directory without following a final symlink, after
 * checking that the opened directory is the one at `path`'s real location inside `base`.
 */
async function withDirInside(
  path: string,
  base: string,
  fn: (dir: fs.promises.FileHandle) => Promise<void>,
): Promise<void> {
  const { O_RDONLY, O_NOFOLLOW, O_DIRECTORY } = fs.constants;
  let handle: fs.promises.FileHandle;
  try {
    handle = await fs.promises.open(path, O_RDONLY | O_NOFOLLOW | O_DIRECTORY);
  } catch (e) {
    throw new Error(`cannot open ${path}: ${message(e)}`, { cause: e });
  }
  try {
    const opened = await handle.stat();
    const real = await Deno.realPath(path);
    if (!pathWithinBase(real, base)) {
      throw new Error(`path ${real} is outside of allowed base ${base}`);
    }
    const there = await Deno.stat(real);
    if (there.dev !== opened.dev || there.ino !== opened.ino) {
      throw new Error(`directory ${path} was replaced while it was being created`);
    }
    await fn(handle);
  } finally {
    await handle.close();
  }
}

/** upstream findExistingPrefix: the longest existing prefix of `pathname` and what is left. */
async function findExistingPrefix(
  base: string,
  pathname: string,
): Promise<{ existing: string; toCreate: string[] }> {
  const rel = pathname === base ? "" : pathname.slice(base === "/" ? 1 : base.length + 1);
  const dirs = rel.split("/").filter((d) => d !== "");
  let current = base;
  for (const [i, dir] of dirs.entries()) {
    const next = join(current, dir);
    try {
      await Deno.stat(next);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return { existing: current, toCreate: dirs.slice(i) };
      throw new Error(`error opening directory ${pathname}: ${message(e)}`, { cause: e });
    }
    current = next;
  }
  return { existing: pathname, toCreate: [] };
}
