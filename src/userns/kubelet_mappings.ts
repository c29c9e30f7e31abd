/**
 * @module
 * The range of host IDs the kubelet hands out to pods' user namespaces. Without a `kubelet` user
 * in the host's /etc/passwd it is every ID from `idsPerPod` up (2^32 - idsPerPod of them: IDs
 * below idsPerPod, root's among them, are never mapped); with one, it is that user's single
 * subordinate range, which must be the same in /etc/subuid and /etc/subgid. The files are read
 * through the host view (privilege/host_root.ts), as the agent's sandbox names them.
 *
 * Corresponds to upstream getKubeletMappings and parseGetSubIdsOutput
 * (`pkg/kubelet/kubelet_pods.go`), which look the user up with os/user and run `getsubids`.
 * The agent's sandbox runs no such tool: it reads the two files getsubids reads with shadow's
 * default (files) backend, and formats the ranges as getsubids prints them, so the checks and
 * their messages are upstream's. Two differences follow: subordinate IDs served by an NSS
 * `subid` plugin are not seen, and where getsubids is not installed upstream falls back to the
 * default range while this agent still uses the kubelet user's entries.
 */

import { hostPath } from "../privilege/host_root.ts";
import { createLogger, type Logger } from "../klog/klog.ts";

/** The user whose subordinate IDs the kubelet uses (upstream kubeletUser). */
export const KUBELET_USER = "kubelet";

/** A range of host IDs: the first and how many. */
export interface KubeletMappings {
  readonly firstID: number;
  readonly length: number;
}

/** What {@link getKubeletMappings} needs. */
export interface KubeletMappingsOptions {
  /** IDs per pod (config userNamespaces.idsPerPod); the default range starts there. */
  readonly idsPerPod: number;
  /**
   * Reads a host file ("/etc/passwd", "/etc/subuid", "/etc/subgid"); undefined when missing.
   * @default reads it through the host view
   */
  readonly readHostFile?: (path: string) => Promise<string | undefined>;
  readonly logger?: Logger;
}

/** The kubelet user's subordinate IDs are not usable; the message is upstream's. */
export class KubeletMappingsError extends Error {
  override name = "KubeletMappingsError";
}

async function readThroughHostView(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(hostPath(path));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

/** The uid of `name` in passwd(5) text, or undefined when it has no entry. */
function lookupUser(passwd: string, name: string): string | undefined {
  for (const line of passwd.split("\n")) {
    const fields = line.split(":");
    if (fields[0] === name && fields.length >= 3) return fields[2];
  }
  return undefined;
}

/**
 * The owner's ranges of subuid(5)/subgid(5) text, an entry naming the user or its uid, printed
 * as getsubids prints them: `<index>: <owner> <start> <count>`, one line each.
 */
export function subIdsOutput(text: string, owner: string, uid: string): string {
  const lines: string[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const [who, start, count] = line.split(":");
    if (who !== owner && who !== uid) continue;
    lines.push(`${lines.length}: ${owner} ${start ?? ""} ${count ?? ""}`);
  }
  return lines.map((l) => `${l}\n`).join("");
}

function parseUint32(field: string, input: string): number {
  if (!/^[0-9]+$/.test(field)) {
    throw new KubeletMappingsError(
      `error parsing line ${JSON.stringify(input)}: strconv.ParseUint: parsing ${
        JSON.stringify(field)
      }: invalid syntax`,
    );
  }
  const n = Number(field);
  if (n > 2 ** 32 - 1) {
    throw new KubeletMappingsError(
      `error parsing line ${JSON.stringify(input)}: strconv.ParseUint: parsing ${
        JSON.stringify(field)
      }: value out of range`,
    );
  }
  return n;
}

/** upstream parseGetSubIdsOutput: the single range getsubids printed. */
export function parseGetSubIdsOutput(input: string): KubeletMappings {
  const lines = input.replace(/^\n+|\n+$/g, "").split("\n");
  if (lines.length !== 1) {
    throw new KubeletMappingsError(
      `error parsing line ${JSON.stringify(input)}: it must contain only one line`,
    );
  }
  const parts = (lines[0] ?? "").split(/\s+/).filter((p) => p !== "");
  if (parts.length !== 4) throw new KubeletMappingsError(`invalid line ${JSON.stringify(input)}`);
  return { firstID: parseUint32(parts[2]!, input), length: parseUint32(parts[3]!, input) };
}

/** upstream getKubeletMappings: see the module documentation. */
export async function getKubeletMappings(opts: KubeletMappingsOptions): Promise<KubeletMappings> {
  const read = opts.readHostFile ?? readThroughHostView;
  const logger = opts.logger ?? createLogger();
  const defaults = { firstID: opts.idsPerPod, length: 2 ** 32 - opts.idsPerPod };
  const uid = lookupUser((await read("/etc/passwd")) ?? "", KUBELET_USER);
  if (uid === undefined) {
    logger.v(5).info("user namespaces: user not found, using default mappings", {
      user: KUBELET_USER,
    });
    return defaults;
  }
  const uids = subIdsOutput((await read("/etc/subuid")) ?? "", KUBELET_USER, uid);
  const gids = subIdsOutput((await read("/etc/subgid")) ?? "", KUBELET_USER, uid);
  if (uids !== gids) {
    throw new KubeletMappingsError(
      `mismatched subuids and subgids for user ${JSON.stringify(KUBELET_USER)}`,
    );
  }
  logger.v(5).info("user namespaces: user found, using mappings from getsubids", {
    user: KUBELET_USER,
  });
  return parseGetSubIdsOutput(uids);
}
