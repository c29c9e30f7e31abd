/**
 * @module
 * Removing a file that may already be gone: Go's `os.Remove` with `os.IsNotExist` ignored, as
 * upstream writes it wherever a path may have been removed meanwhile.
 */

/** Removes `path` (a file, a link or an empty directory); one that does not exist is no error. */
export async function removeIfExists(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}
