/**
 * @module
 * The kubelet's own limit on open files: `maxOpenFiles` (default 1000000) set as both the soft
 * and the hard RLIMIT_NOFILE of the process at start, so the kubelet can hold a socket or a file
 * open for every container it watches. Raising the hard limit needs CAP_SYS_RESOURCE; without it
 * setrlimit fails with "operation not permitted", which the caller logs before going on, as
 * upstream's RunKubelet does ("Failed to set rlimit on max file handles"). Through Deno's FFI
 * (libc's setrlimit), so it needs the `ffi` permission: the launcher, which has every
 * permission, sets it for the whole process before the kubelet's sandbox starts.
 * Corresponds to upstream `pkg/util/rlimit/rlimit_linux.go` (SetNumFiles).
 */

/** RLIMIT_NOFILE of Linux's `<asm-generic/resource.h>` (x86_64 and arm64 alike). */
const RLIMIT_NOFILE = 7;

/** The strerror text of the errnos setrlimit gives, as Go's syscall.Errno prints them. */
const ERRNO_TEXT: Readonly<Record<number, string>> = {
  1: "operation not permitted",
  14: "bad address",
  22: "invalid argument",
};

/** What {@link setNumFiles} calls: setrlimit(2) for RLIMIT_NOFILE, 0 or the errno. */
export type SetNoFileLimit = (soft: bigint, hard: bigint) => number;

/**
 * libc's setrlimit through FFI, opened for the one call; throws when `ffi` is not granted or
 * libc is not glibc's.
 */
export const libcSetNoFileLimit: SetNoFileLimit = (soft, hard) => {
  if (Deno.build.os !== "linux") {
    throw new Error(`setrlimit through FFI is not supported on ${Deno.build.target}`);
  }
  const lib = Deno.dlopen("libc.so.6", {
    setrlimit: { parameters: ["i32", "buffer"], result: "i32" },
    __errno_location: { parameters: [], result: "pointer" },
  });
  try {
    // struct rlimit { rlim_t rlim_cur; rlim_t rlim_max; } of two 64-bit words.
    if (lib.symbols.setrlimit(RLIMIT_NOFILE, new BigUint64Array([soft, hard])) === 0) return 0;
    const at = lib.symbols.__errno_location();
    return at === null ? -1 : new Deno.UnsafePointerView(at).getInt32();
  } finally {
    lib.close();
  }
};

/** Options of {@link setNumFiles}. */
export interface SetNumFilesOptions {
  /** @default {@link libcSetNoFileLimit} */
  readonly setrlimit?: SetNoFileLimit;
}

/**
 * Sets the process's soft and hard limits on open files to `maxOpenFiles`; throws an Error with
 * the errno's text (Go's) when the kernel refuses, or why FFI could not be had.
 */
export function setNumFiles(maxOpenFiles: number, opts: SetNumFilesOptions = {}): void {
  if (!Number.isSafeInteger(maxOpenFiles) || maxOpenFiles < 0) {
    throw new Error(`invalid number of open files: ${maxOpenFiles}`);
  }
  const set = opts.setrlimit ?? libcSetNoFileLimit;
  const n = BigInt(maxOpenFiles);
  const errno = set(n, n);
  if (errno !== 0) throw new Error(ERRNO_TEXT[errno] ?? `errno ${errno}`);
}
