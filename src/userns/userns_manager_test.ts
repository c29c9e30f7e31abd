import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { createLogger } from "../klog/klog.ts";
import {
  handlerSupportsUserNamespaces,
  MAPPINGS_FILE,
  UsernsManager,
  type UsernsManagerOptions,
} from "./userns_manager.ts";

const logger = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });
const L = 65536;

function pod(uid: string, hostUsers?: boolean): V1Pod {
  return {
    metadata: { name: `p-${uid}`, namespace: "default", uid },
    spec: { containers: [], ...(hostUsers === undefined ? {} : { hostUsers }) },
  };
}

async function withPodsDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "userns-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function open(
  dir: string,
  more: Partial<UsernsManagerOptions> & { blocks?: number } = {},
): Promise<UsernsManager> {
  const blocks = more.blocks ?? 2000;
  return UsernsManager.open({
    podsDirectory: dir,
    maxPods: 110,
    handlerSupportsUserNamespaces: () => true,
    kubeletMappings: (idsPerPod) =>
      Promise.resolve({ firstID: idsPerPod, length: idsPerPod * blocks }),
    logger,
    ...more,
  });
}

const podMode = (hostId: number, length = L): api.UserNamespace => ({
  mode: api.NamespaceMode.POD,
  uids: [{ hostId, containerId: 0, length }],
  gids: [{ hostId, containerId: 0, length }],
});

Deno.test("UsernsManager gives hostUsers unset or true the node's user namespace", async () => {
  await withPodsDir(async (dir) => {
    const m = await open(dir, { handlerSupportsUserNamespaces: () => false });
    const node = { mode: api.NamespaceMode.NODE, uids: [], gids: [] };
    assert.deepEqual(await m.getOrCreateUserNamespaceMappings(pod("a"), ""), node);
    assert.deepEqual(await m.getOrCreateUserNamespaceMappings(pod("b", true), ""), node);
    assert.deepEqual(m.podUserNamespace(pod("a")), node);
    assert.equal(m.allocated, 0);
    assert.deepEqual([...Deno.readDirSync(dir)], [], "no file for them");
  });
});

Deno.test("UsernsManager allocates a block of the range and writes upstream's file", async () => {
  await withPodsDir(async (dir) => {
    // The random slot 0.5 of 2000 blocks is block 1000, from ID 65536 on.
    const m = await open(dir, { random: () => 0.5 });
    const got = await m.getOrCreateUserNamespaceMappings(pod("a", false), "");
    const first = (1000 + 1) * L;
    assert.deepEqual(got, podMode(first));
    assert.equal(m.allocatedTo("a"), first);
    assert.deepEqual(m.podUserNamespace(pod("a", false)), podMode(first));
    assert.equal(
      await Deno.readTextFile(join(dir, "a", MAPPINGS_FILE)),
      `{"uidMappings":[{"hostId":${first},"containerId":0,"length":65536}],` +
        `"gidMappings":[{"hostId":${first},"containerId":0,"length":65536}]}`,
    );
    // Nothing of the temporary file is left beside it.
    assert.deepEqual([...Deno.readDirSync(join(dir, "a"))].map((e) => e.name), [MAPPINGS_FILE]);
    // Asked again (the next sync), the same block.
    assert.deepEqual(await m.getOrCreateUserNamespaceMappings(pod("a", false), ""), got);
    assert.equal(m.allocated, 1);
    // The next pod scans on from the same slot to the next free block.
    const b = await m.getOrCreateUserNamespaceMappings(pod("b", false), "");
    assert.deepEqual(b, podMode(first + L));
  });
});

Deno.test("UsernsManager never maps the IDs below idsPerPod and honours idsPerPod", async () => {
  await withPodsDir(async (dir) => {
    const m = await open(dir, { idsPerPod: 2 * L, blocks: 110, random: () => 0 });
    const got = await m.getOrCreateUserNamespaceMappings(pod("a", false), "");
    assert.deepEqual(got, podMode(2 * L, 2 * L));
  });
});

Deno.test("UsernsManager fails once every block is taken, and frees a block on release", async () => {
  await withPodsDir(async (dir) => {
    const m = await open(dir, { blocks: 110, maxPods: 110 });
    const seen = new Set<number>();
    for (let i = 0; i < 110; i++) {
      const u = await m.getOrCreateUserNamespaceMappings(pod(`p${i}`, false), "");
      const host = u.uids[0]!.hostId;
      assert.ok(host >= L && host < 111 * L && host % L === 0, String(host));
      seen.add(host);
    }
    assert.equal(seen.size, 110, "each pod its own block");
    await assert.rejects(
      () => m.getOrCreateUserNamespaceMappings(pod("extra", false), ""),
      {
        name: "UserNamespaceError",
        message: "create user namespace: could not find an empty slot to allocate a user namespace",
      },
    );
    assert.equal(m.allocatedTo("extra"), undefined);
    const freed = m.allocatedTo("p7")!;
    await m.release("p7");
    assert.equal(m.allocatedTo("p7"), undefined);
    await assert.rejects(() => Deno.stat(join(dir, "p7", MAPPINGS_FILE)), Deno.errors.NotFound);
    assert.throws(() => m.podUserNamespace(pod("p7", false)), { name: "UserNamespaceError" });
    const again = await m.getOrCreateUserNamespaceMappings(pod("extra", false), "");
    assert.equal(again.uids[0]!.hostId, freed);
    // Releasing what is not allocated is a no-op.
    await m.release("p7");
    assert.equal(m.allocated, 110);
  });
});

Deno.test("UsernsManager finds the pods' blocks again after a restart", async () => {
  await withPodsDir(async (dir) => {
    const before = await open(dir);
    const a = await before.getOrCreateUserNamespaceMappings(pod("a", false), "");
    const b = await before.getOrCreateUserNamespaceMappings(pod("b", false), "");
    await Deno.mkdir(join(dir, "host-users-pod"));

    const after = await open(dir);
    assert.equal(after.allocated, 2);
    assert.deepEqual(after.podUserNamespace(pod("a", false)), a);
    assert.deepEqual(after.podUserNamespace(pod("b", false)), b);
    assert.deepEqual(await after.getOrCreateUserNamespaceMappings(pod("a", false), ""), a);
    // A new pod never gets a recorded block, even when its scan starts at one.
    const slotOfA = a.uids[0]!.hostId / L - 1;
    const third = await open(dir, { random: () => (slotOfA + 0.5) / 2000 });
    const c = await third.getOrCreateUserNamespaceMappings(pod("c", false), "");
    assert.notEqual(c.uids[0]!.hostId, a.uids[0]!.hostId);
    assert.notEqual(c.uids[0]!.hostId, b.uids[0]!.hostId);
  });
});

Deno.test("UsernsManager refuses at start a file it did not write, or a range taken twice", async () => {
  await withPodsDir(async (dir) => {
    const write = async (uid: string, text: string) => {
      await Deno.mkdir(join(dir, uid), { recursive: true });
      await Deno.writeTextFile(join(dir, uid, MAPPINGS_FILE), text);
    };
    const file = (uidHost: number, gidHost = uidHost, containerId = 0) =>
      JSON.stringify({
        uidMappings: [{ hostId: uidHost, containerId, length: L }],
        gidMappings: [{ hostId: gidHost, containerId, length: L }],
      });
    const cases: [string, string][] = [
      ["not json", "invalid user namespace mappings file: "],
      [file(2 * L, 3 * L), "GID and UID mapping should be identical"],
      [file(2 * L, 2 * L, 1), "UID 0 must be mapped"],
      [file(2 * L + 1), "wrong user namespace offset specified 131073"],
      [file(0), "id 0 is out of range"],
      [JSON.stringify({ uidMappings: [], gidMappings: [] }), "no more than one mapping allowed"],
    ];
    for (const [text, message] of cases) {
      await write("x", text);
      await assert.rejects(() => open(dir), (e: Error) => {
        assert.equal(e.name, "UserNamespaceError");
        assert.ok(e.message.startsWith('record pod mappings for existing pod "x": '), e.message);
        assert.ok(e.message.includes(message), e.message);
        return true;
      });
    }
    await write("x", file(2 * L));
    await write("y", file(2 * L));
    await assert.rejects(() => open(dir), /range picked for pod "(x|y)" already taken/);
  });
});

Deno.test("UsernsManager checks the kubelet's range as upstream", async () => {
  await withPodsDir(async (dir) => {
    const range = (firstID: number, length: number) => () => Promise.resolve({ firstID, length });
    const cases: [Partial<UsernsManagerOptions>, string][] = [
      [{ idsPerPod: L + 1 }, "kubelet user namespace length 65537 is not a multiple of 65536"],
      [
        { kubeletMappings: range(L + 5, L * 200) },
        "kubelet user assigned ID 65541 is not a multiple of 65536",
      ],
      [
        { kubeletMappings: range(0, L * 200) },
        "kubelet user assigned ID 0 must be greater or equal to 65536",
      ],
      [{ kubeletMappings: range(L, L * 200 + 1) }, "is not a multiple of 65536"],
      [
        { kubeletMappings: range(L, L * 109) },
        "kubelet user assigned IDs are not enough to support 110 pods",
      ],
      [
        { kubeletMappings: () => Promise.reject(new Error('invalid line ""')) },
        'kubelet mappings: invalid line ""',
      ],
    ];
    for (const [opts, message] of cases) {
      await assert.rejects(() => open(dir, opts), (e: Error) => {
        assert.ok(e.message.includes(message), `${e.message} lacks ${message}`);
        return true;
      });
    }
    // The default range holds 65535 blocks of 65536: enough for maxPods 65535, not 65536.
    const full = { kubeletMappings: range(L, 2 ** 32 - L) };
    await open(dir, { ...full, maxPods: 65535 });
    await assert.rejects(() => open(dir, { ...full, maxPods: 65536 }), /not enough/);
  });
});

Deno.test("UsernsManager fails a pod whose runtime handler lacks user namespaces, as upstream", async () => {
  await withPodsDir(async (dir) => {
    const handlers: api.RuntimeHandler[] = [
      { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: true } },
      { name: "plain", features: { recursiveReadOnlyMounts: false, userNamespaces: false } },
    ];
    const m = await open(dir, {
      handlerSupportsUserNamespaces: (h) => handlerSupportsUserNamespaces(handlers, h),
    });
    await assert.rejects(
      () => m.getOrCreateUserNamespaceMappings(pod("a", false), "plain"),
      {
        message:
          'can\'t set `spec.hostUsers: false`, RuntimeClass handler "plain" does not support user namespaces',
      },
    );
    await assert.rejects(
      () => m.getOrCreateUserNamespaceMappings(pod("a", false), "gone"),
      {
        message:
          'can\'t set `spec.hostUsers: false`, RuntimeClass handler "gone" does not support user namespaces: the handler "gone" is not known',
      },
    );
    assert.equal(m.allocated, 0);
    assert.equal(
      (await m.getOrCreateUserNamespaceMappings(pod("a", false), "")).mode,
      api.NamespaceMode.POD,
    );

    // A runtime that reports no handlers (older than the field, such as containerd 1.6).
    const old = await open(dir, {
      handlerSupportsUserNamespaces: (h) => handlerSupportsUserNamespaces([], h),
    });
    await assert.rejects(
      () => old.getOrCreateUserNamespaceMappings(pod("b", false), ""),
      { message: "can't set `spec.hostUsers: false`, runtime does not support user namespaces" },
    );
  });
});

Deno.test("UsernsManager cleans up the blocks of pods neither known nor on disk", async () => {
  await withPodsDir(async (dir) => {
    const m = await open(dir);
    for (const uid of ["keep", "orphan", "nodir"]) {
      await m.getOrCreateUserNamespaceMappings(pod(uid, false), "");
    }
    await Deno.remove(join(dir, "nodir"), { recursive: true });
    await m.cleanupOrphanedPodUsernsAllocations(new Set(["keep", "nodir"]));
    assert.notEqual(m.allocatedTo("keep"), undefined);
    assert.equal(m.allocatedTo("orphan"), undefined);
    assert.equal(m.allocatedTo("nodir"), undefined);
    await assert.rejects(() => Deno.stat(join(dir, "orphan", MAPPINGS_FILE)), Deno.errors.NotFound);
    await Deno.stat(join(dir, "keep", MAPPINGS_FILE));
    assert.equal(m.allocated, 1);
  });
});

Deno.test("UsernsManager releases the block when its file cannot be written", async () => {
  await withPodsDir(async (dir) => {
    const m = await open(dir);
    // The pod's directory is a link to nowhere: nothing to read, and nowhere to write.
    await Deno.symlink(join(dir, "missing", "a"), join(dir, "a"));
    await assert.rejects(
      () => m.getOrCreateUserNamespaceMappings(pod("a", false), ""),
      /^UserNamespaceError: create user namespace: /,
    );
    assert.equal(m.allocatedTo("a"), undefined);
    assert.equal(m.allocated, 0);
  });
});
