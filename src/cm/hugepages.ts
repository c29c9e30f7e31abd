/**
 * @module
 * The host's hugepage sizes as cgroups name them ("2MB", "1GB"), in the order the kernel lists
 * /sys/kernel/mm/hugepages, and the kernel's name of a page size given in bytes. A container's
 * config limits every one of these sizes (to 0 when the container asks for none). Corresponds to runc's `HugePageSizes`
 * (github.com/opencontainers/cgroups `utils.go`) and upstream `HugePageUnitSizeFromByteSize`
 * (`pkg/apis/core/v1/helper`).
 */

export { hugePageUnitSize } from "./_writers.ts";

/**
 * Page size names from the entries of /sys/kernel/mm/hugepages ("hugepages-2048kB" → "2MB"),
 * in the given order; entries of another shape are skipped, as runc skips them.
 */
export function hugePageSizesFromDirNames(names: readonly string[]): string[] {
  const out: string[] = [];
  for (const name of names) {
    const kb = /^hugepages-(\d+)kB$/.exec(name)?.[1];
    if (kb === undefined) continue;
    const size = Number(kb);
    // The kernel's hugetlb cgroup file names: KB below 1 MiB, MB below 1 GiB, else GB.
    if (size >= 2 ** 20) out.push(`${Math.floor(size / 2 ** 20)}GB`);
    else if (size >= 2 ** 10) out.push(`${Math.floor(size / 2 ** 10)}MB`);
    else out.push(`${size}KB`);
  }
  return out;
}

/** The page sizes listed in `dir`, in directory order; none when it cannot be read. */
export function readHugePageSizes(dir: string): string[] {
  try {
    return hugePageSizesFromDirNames([...Deno.readDirSync(dir)].map((e) => e.name));
  } catch {
    return [];
  }
}
