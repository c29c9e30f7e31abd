/**
 * @module
 * Where the cgroup hierarchies are and where one container's cgroup lives in them. Detects the
 * mode (v1, v2 or hybrid) and every controller's mount point once at start from
 * `/proc/self/mountinfo`, parses `/proc/<pid>/cgroup`, and turns a process's cgroup (or a known
 * relative name such as a pod cgroup) into absolute directories per controller, so that
 * sampling (`stats/cgroup_stats.ts`) costs only file reads. Also converts internal cgroup names to the
 * cgroupfs and systemd drivers' forms. Corresponds to runc/opencontainers-cgroups mount
 * detection (`GetCgroupMounts`, `ParseCgroupFile`, `IsCgroup2UnifiedMode`), cAdvisor's
 * `CgroupSubsystems`, and upstream `pkg/kubelet/cm/cgroup_manager_linux.go` (`CgroupName`).
 */

import { posix } from "node:path";
import { parseMountInfo } from "../util/mount.ts";
import { hostRoot } from "../privilege/host_root.ts";

/** v1: legacy controllers only; v2: unified at /sys/fs/cgroup; hybrid: v1 plus a cgroup2 mount. */
export type CgroupMode = "v1" | "v2" | "hybrid";

/** The host's cgroup mounts; every directory is already joined under the `root` option. */
export interface CgroupLayout {
  readonly mode: CgroupMode;
  /** Where the hierarchies live, e.g. "/sys/fs/cgroup". */
  readonly root: string;
  /** v1 controller (cpu, cpuacct, memory, pids, ..., or a named hierarchy "name=systemd") to
   * its mount point; co-mounted controllers ("cpu,cpuacct") each map to the shared one. */
  readonly v1: ReadonlyMap<string, string>;
  /** The cgroup2 mount point: /sys/fs/cgroup in v2, /sys/fs/cgroup/unified in hybrid. */
  readonly unified?: string;
  /** Controller ("" for cgroup2) to the mount's root inside its hierarchy, when not "/" (a
   * bind-mounted subtree, as in a container without a cgroup namespace). */
  readonly mountRoots?: ReadonlyMap<string, string>;
}

/** Absolute cgroup directories of one container, pod or the node, per controller. */
export interface CgroupPaths {
  cpu?: string;
  cpuacct?: string;
  memory?: string;
  pids?: string;
  /** The cgroup2 directory; in v2 the same as every controller's. */
  unified?: string;
}

/** The cgroup mounts could not be read or make no sense; the message names the file. */
export class CgroupLayoutError extends Error {
  override name = "CgroupLayoutError";
}

/** Options of {@link detectCgroupLayout}. */
export interface DetectCgroupLayoutOptions {
  /** Root under which /proc and the mount points are read. @default "/" */
  root?: string;
  /** The mountinfo text to use instead of reading `<root>/proc/self/mountinfo`. */
  mountinfo?: string;
}

/** The v1 controllers the kernel knows (cgroups(7)); other super options are mount flags. */
const V1_CONTROLLERS = new Set([
  "blkio",
  "cpu",
  "cpuacct",
  "cpuset",
  "devices",
  "freezer",
  "hugetlb",
  "memory",
  "misc",
  "net_cls",
  "net_prio",
  "perf_event",
  "pids",
  "rdma",
]);

const CGROUP_ROOT = "/sys/fs/cgroup";

/** Joins an absolute path under `root` ("/" leaves it as is). */
function underRoot(root: string, path: string): string {
  return root === "/" || root === "" ? path : posix.join(root, path);
}

/** Joins a cgroup's path (absolute inside its hierarchy) onto a mount point, without a
 * trailing slash. */
function joinCgroup(mountPoint: string, path: string): string {
  if (path === "" || path === "/") return mountPoint;
  const joined = posix.join(mountPoint, path);
  return joined.length > 1 && joined.endsWith("/") ? joined.slice(0, -1) : joined;
}

/**
 * Reads the mode and mount points from mountinfo: cgroup v1 mounts (fsType "cgroup", the
 * controllers in the super options; the first mount of a controller wins, as in runc) and
 * cgroup2 mounts. v2 when the topmost mount at /sys/fs/cgroup is cgroup2 (runc's
 * `IsCgroup2UnifiedMode`), hybrid when v1 controllers and a cgroup2 mount coexist.
 */
export async function detectCgroupLayout(
  opts: DetectCgroupLayoutOptions = {},
): Promise<CgroupLayout> {
  const root = opts.root ?? hostRoot();
  const file = underRoot(root, "/proc/self/mountinfo");
  let text = opts.mountinfo;
  if (text === undefined) {
    try {
      text = await Deno.readTextFile(file);
    } catch (e) {
      throw new CgroupLayoutError(
        `Cannot find the cgroup mounts: reading ${file} failed: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  const v1 = new Map<string, string>();
  const mountRoots = new Map<string, string>();
  const unifiedMounts: { mountPoint: string; root: string }[] = [];
  let topAtCgroupRoot: string | undefined;
  // The host view (privilege/host_view.ts) lists its own copies of the cgroup mounts under `root`; a
  // copy listed before the original (a hierarchy mounted after the view) must not win.
  const viewPrefix = root === "/" || root === "" ? undefined : `${root.replace(/\/+$/, "")}/`;
  for (const m of parseMountInfo(text)) {
    if (viewPrefix && m.mountPoint.startsWith(viewPrefix)) continue;
    if (m.mountPoint === CGROUP_ROOT) topAtCgroupRoot = m.fsType;
    if (m.fsType === "cgroup2") {
      unifiedMounts.push({ mountPoint: m.mountPoint, root: m.root });
    } else if (m.fsType === "cgroup") {
      for (const opt of m.superOptions) {
        if (!V1_CONTROLLERS.has(opt) && !opt.startsWith("name=")) continue;
        if (v1.has(opt)) continue;
        v1.set(opt, underRoot(root, m.mountPoint));
        if (m.root !== "/") mountRoots.set(opt, m.root);
      }
    }
  }

  let mode: CgroupMode;
  let unified: { mountPoint: string; root: string } | undefined;
  if (topAtCgroupRoot === "cgroup2") {
    mode = "v2";
    unified = unifiedMounts.findLast((m) => m.mountPoint === CGROUP_ROOT);
  } else if (v1.size > 0) {
    unified = unifiedMounts.find((m) => m.mountPoint === `${CGROUP_ROOT}/unified`) ??
      unifiedMounts[0];
    mode = unified ? "hybrid" : "v1";
  } else if (unifiedMounts.length > 0) {
    mode = "v2";
    unified = unifiedMounts[0];
  } else {
    throw new CgroupLayoutError(
      `Cannot find the cgroup mounts: ${file} lists no mount of type cgroup or cgroup2`,
    );
  }
  if (unified && unified.root !== "/") mountRoots.set("", unified.root);

  const unifiedDir = unified ? underRoot(root, unified.mountPoint) : undefined;
  const anyV1 = v1.get("memory") ?? v1.get("cpu") ?? v1.values().next().value;
  const layoutRoot = mode === "v2" ? unifiedDir! : posix.dirname(anyV1!);
  return {
    mode,
    root: layoutRoot,
    v1,
    ...(unifiedDir !== undefined ? { unified: unifiedDir } : {}),
    ...(mountRoots.size > 0 ? { mountRoots } : {}),
  };
}

/**
 * Parses `/proc/<pid>/cgroup` (`hierarchy-id:controllers:path` lines) into controller to path.
 * Co-mounted controllers each get the path, named hierarchies keep their "name=..." key, and
 * the cgroup2 line (`0::/path`, no controllers) is stored under "". Malformed lines are skipped.
 */
export function parseProcCgroup(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const first = line.indexOf(":");
    const second = first < 0 ? -1 : line.indexOf(":", first + 1);
    if (second < 0) continue;
    const controllers = line.slice(first + 1, second);
    const path = line.slice(second + 1);
    if (controllers === "") {
      out.set("", path);
      continue;
    }
    for (const c of controllers.split(",")) if (c !== "") out.set(c, path);
  }
  return out;
}

/** A /proc path made relative to a mount whose root is a subtree of the hierarchy. */
function stripMountRoot(path: string, mountRoot: string | undefined): string {
  if (mountRoot === undefined || mountRoot === "/") return path;
  if (path === mountRoot) return "/";
  return path.startsWith(`${mountRoot}/`) ? path.slice(mountRoot.length) : path;
}

const V1_KEYS = ["cpu", "cpuacct", "memory", "pids"] as const;

/**
 * The directories of a process's cgroups from its parsed `/proc/<pid>/cgroup`: in v2 every
 * controller is the unified directory; in v1 and hybrid each comes from its own line (absent
 * when the controller is not mounted) and `unified` from the `0::` line when cgroup2 is mounted.
 * Paths are taken relative to the mount's root, as runc does.
 */
export function containerCgroupPaths(
  layout: CgroupLayout,
  procCgroup: ReadonlyMap<string, string>,
): CgroupPaths {
  const roots = layout.mountRoots;
  const unifiedPath = procCgroup.get("");
  const unified = layout.unified !== undefined && unifiedPath !== undefined
    ? joinCgroup(layout.unified, stripMountRoot(unifiedPath, roots?.get("")))
    : undefined;
  if (layout.mode === "v2") {
    if (unified === undefined) return {};
    return { cpu: unified, cpuacct: unified, memory: unified, pids: unified, unified };
  }
  const out: CgroupPaths = {};
  for (const key of V1_KEYS) {
    const mountPoint = layout.v1.get(key);
    const path = procCgroup.get(key);
    if (mountPoint === undefined || path === undefined) continue;
    out[key] = joinCgroup(mountPoint, stripMountRoot(path, roots?.get(key)));
  }
  if (unified !== undefined) out.unified = unified;
  return out;
}

/**
 * The directories of a cgroup known by its name relative to the mount points (the node's "/",
 * a pod's "/kubepods/burstable/pod<uid>"), joined onto each mount as upstream's
 * `buildCgroupPaths` does.
 */
export function cgroupPathsOf(layout: CgroupLayout, relative: string): CgroupPaths {
  const unified = layout.unified !== undefined ? joinCgroup(layout.unified, relative) : undefined;
  if (layout.mode === "v2") {
    if (unified === undefined) return {};
    return { cpu: unified, cpuacct: unified, memory: unified, pids: unified, unified };
  }
  const out: CgroupPaths = {};
  for (const key of V1_KEYS) {
    const mountPoint = layout.v1.get(key);
    if (mountPoint !== undefined) out[key] = joinCgroup(mountPoint, relative);
  }
  if (unified !== undefined) out.unified = unified;
  return out;
}

/** The cgroupfs driver's name: `["kubepods", "burstable", "pod1234"]` is
 * "/kubepods/burstable/pod1234" (upstream `CgroupName.ToCgroupfs`). */
export function cgroupfsName(parts: readonly string[]): string {
  const joined = posix.join("/", ...parts);
  return joined.length > 1 && joined.endsWith("/") ? joined.slice(0, -1) : joined;
}

/**
 * The systemd driver's name expanded into its cgroupfs path (upstream `CgroupName.ToSystemd`
 * and runc's `ExpandSlice`): each part becomes a nested slice named after all parts so far,
 * "-" inside a part is escaped to "_", blank parts are skipped, and no parts is "/".
 * `["kubepods", "burstable", "pod12-34"]` is
 * "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice".
 */
export function systemdName(parts: readonly string[]): string {
  const kept = parts.filter((p) => p.trim() !== "").map((p) => p.replaceAll("-", "_"));
  if (kept.length === 0) return "/";
  let path = "";
  let prefix = "";
  for (const part of kept) {
    if (part.includes("/")) {
      throw new Error(`systemdName: part ${JSON.stringify(part)} must not contain "/"`);
    }
    path += `/${prefix}${part}.slice`;
    prefix += `${part}-`;
  }
  return path;
}
