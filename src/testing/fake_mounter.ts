/**
 * @module
 * A mounter that keeps its mount table in memory and records each call as the command it stands
 * for (`mount -t nfs -o ro src target`, `umount target`), for volume plugin tests; a mount can be
 * made to fail. Test support only.
 */

import type { Mounter, MountInfo } from "../util/mount.ts";

/** See the module documentation. */
export class FakeMounter implements Pick<Mounter, "mount" | "unmount" | "mountAt"> {
  /** The mount points, as the table has them now. */
  readonly mounts = new Set<string>();
  /** Each call, as a command line. */
  readonly log: string[] = [];
  /** When set, mount records the call and rejects with it. */
  failMount?: Error;

  mount(
    source: string,
    target: string,
    fsType: string,
    options: readonly string[],
  ): Promise<void> {
    const type = fsType === "" ? "" : `-t ${fsType} `;
    const opts = options.length === 0 ? "" : `-o ${options.join(",")} `;
    this.log.push(`mount ${type}${opts}${source} ${target}`);
    if (this.failMount) return Promise.reject(this.failMount);
    this.mounts.add(target);
    return Promise.resolve();
  }

  unmount(target: string): Promise<void> {
    this.log.push(`umount ${target}`);
    this.mounts.delete(target);
    return Promise.resolve();
  }

  mountAt(path: string): Promise<MountInfo | undefined> {
    if (!this.mounts.has(path)) return Promise.resolve(undefined);
    return Promise.resolve({
      mountId: 0,
      parentId: 0,
      root: "/",
      mountPoint: path,
      options: [],
      fsType: "",
      source: "",
      superOptions: [],
    });
  }
}
