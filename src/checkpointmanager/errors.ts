/**
 * @module
 * The errors a checkpoint read ends in: {@link CorruptCheckpointError} when the checksum does
 * not match the content (upstream's wording, "checkpoint is corrupted", with both checksums and
 * the file), {@link MalformedCheckpointError} when the file is not the JSON upstream's
 * encoding/json would accept for the checkpoint's type (naming the file and the field).
 * Corresponds to upstream `pkg/kubelet/checkpointmanager/errors`.
 */

/** The checksum recorded in the checkpoint is not the checksum of its content. */
export class CorruptCheckpointError extends Error {
  override name = "CorruptCheckpointError";
  /** The checksum the file records. */
  readonly expected: bigint;
  /** The checksum of the file's content. */
  readonly actual: bigint;
  /** The file, when known. */
  readonly file: string | undefined;

  constructor(o: { expected: bigint; actual: bigint; file?: string | undefined }) {
    super(
      `${o.file === undefined ? "" : `${o.file}: `}checkpoint is corrupted: it records ` +
        `checksum ${o.expected}, its content has checksum ${o.actual}`,
    );
    this.expected = o.expected;
    this.actual = o.actual;
    this.file = o.file;
  }
}

/** The checkpoint is not JSON of the checkpoint's type (a syntax error, a wrong type). */
export class MalformedCheckpointError extends Error {
  override name = "MalformedCheckpointError";
}
