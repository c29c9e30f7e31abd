import assert from "node:assert/strict";
import { join } from "node:path";
import { type CheckpointCodec, CheckpointManager, validateKey } from "./checkpoint_manager.ts";
import { MalformedCheckpointError } from "./errors.ts";

const codec: CheckpointCodec<string[]> = {
  encode: (v) => JSON.stringify(v),
  decode: (text, file) => {
    const v = JSON.parse(text);
    if (!Array.isArray(v)) throw new MalformedCheckpointError(`${file}: want an array`);
    return v;
  },
};

Deno.test("CheckpointManager writes atomically with mode 0600 and reads back", async () => {
  const root = await Deno.makeTempDir();
  try {
    const dir = join(root, "device-plugins");
    const m = new CheckpointManager({ directory: dir });
    assert.equal(await m.getCheckpoint("kubelet_internal_checkpoint", codec), undefined);
    await Promise.all([
      m.createCheckpoint("kubelet_internal_checkpoint", codec, ["a"]),
      m.createCheckpoint("kubelet_internal_checkpoint", codec, ["a", "b"]),
    ]);
    assert.deepEqual(await m.getCheckpoint("kubelet_internal_checkpoint", codec), ["a", "b"]);
    const info = await Deno.stat(join(dir, "kubelet_internal_checkpoint"));
    assert.equal(info.mode! & 0o777, 0o600);
    assert.equal((await Deno.stat(dir)).mode! & 0o777, 0o755);
    // A leftover temporary file is not a checkpoint; none of ours is left.
    await Deno.writeTextFile(join(dir, ".123"), "x");
    await m.createCheckpoint("cpu_manager_state", codec, []);
    assert.deepEqual(await m.listCheckpoints(), [
      "cpu_manager_state",
      "kubelet_internal_checkpoint",
    ]);
    assert.deepEqual([...Deno.readDirSync(dir)].length, 3);
    await m.removeCheckpoint("cpu_manager_state");
    await m.removeCheckpoint("cpu_manager_state");
    assert.deepEqual(await m.listCheckpoints(), ["kubelet_internal_checkpoint"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("CheckpointManager passes the file to the codec and keeps the old file on failure", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = new CheckpointManager({ directory: dir });
    await Deno.writeTextFile(join(dir, "x"), "{}");
    await assert.rejects(
      () => m.getCheckpoint("x", codec),
      (e) =>
        e instanceof MalformedCheckpointError && e.message === `${join(dir, "x")}: want an array`,
    );
    const failing: CheckpointCodec<string[]> = {
      ...codec,
      encode: () => {
        throw new Error("cannot encode");
      },
    };
    assert.throws(() => m.createCheckpoint("x", failing, []), /cannot encode/);
    assert.equal(await Deno.readTextFile(join(dir, "x")), "{}");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a failed checkpoint write names the file and leaves no temporary file", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = new CheckpointManager({ directory: dir });
    // A directory in the checkpoint's place: the rename over it fails as a full disk would.
    await Deno.mkdir(join(dir, "x", "y"), { recursive: true });
    await assert.rejects(
      () => m.createCheckpoint("x", codec, ["a"]),
      (e) =>
        e instanceof Error &&
        e.message.startsWith(`could not write checkpoint ${join(dir, "x")}: `) &&
        e.cause instanceof Error,
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["x"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("validateKey accepts upstream's keys only", () => {
  for (const k of ["a", "cpu_manager_state", "a.b-c_9"]) validateKey(k);
  for (const k of ["", ".tmp", "a/b", "a_", "x".repeat(251)]) {
    assert.throws(() => validateKey(k), TypeError, k);
  }
});
