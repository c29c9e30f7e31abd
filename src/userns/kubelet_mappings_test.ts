import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import { getKubeletMappings, parseGetSubIdsOutput, subIdsOutput } from "./kubelet_mappings.ts";

const logger = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });
const PASSWD =
  "root:x:0:0:root:/root:/bin/bash\nkubelet:x:998:998::/var/lib/kubelet:/usr/sbin/nologin\n";

function files(f: Record<string, string>) {
  return (path: string) => Promise.resolve(f[path]);
}

Deno.test("getKubeletMappings without a kubelet user is every ID from idsPerPod up", async () => {
  for (const idsPerPod of [65536, 131072]) {
    assert.deepEqual(
      await getKubeletMappings({
        idsPerPod,
        logger,
        readHostFile: files({ "/etc/passwd": "root:x:0:0:root:/root:/bin/bash\n" }),
      }),
      { firstID: idsPerPod, length: 2 ** 32 - idsPerPod },
    );
  }
  // No passwd file at all: no such user either.
  assert.deepEqual(
    await getKubeletMappings({ idsPerPod: 65536, logger, readHostFile: files({}) }),
    { firstID: 65536, length: 2 ** 32 - 65536 },
  );
});

Deno.test("getKubeletMappings takes the kubelet user's single subordinate range", async () => {
  const sub = "# ranges\nalice:100000:65536\nkubelet:2147483648:2147483648\n";
  assert.deepEqual(
    await getKubeletMappings({
      idsPerPod: 65536,
      logger,
      readHostFile: files({ "/etc/passwd": PASSWD, "/etc/subuid": sub, "/etc/subgid": sub }),
    }),
    { firstID: 2147483648, length: 2147483648 },
  );
  // An entry may name the user by uid, as getsubids matches it.
  const byUid = "998:65536:7208960\n";
  assert.deepEqual(
    await getKubeletMappings({
      idsPerPod: 65536,
      logger,
      readHostFile: files({ "/etc/passwd": PASSWD, "/etc/subuid": byUid, "/etc/subgid": byUid }),
    }),
    { firstID: 65536, length: 7208960 },
  );
});

Deno.test("getKubeletMappings refuses what upstream refuses, with its messages", async () => {
  const run = (subuid: string | undefined, subgid: string | undefined) =>
    getKubeletMappings({
      idsPerPod: 65536,
      logger,
      readHostFile: (p) =>
        Promise.resolve(
          p === "/etc/passwd" ? PASSWD : p === "/etc/subuid" ? subuid : subgid,
        ),
    });
  await assert.rejects(
    () => run("kubelet:65536:65536\n", "kubelet:131072:65536\n"),
    { name: "KubeletMappingsError", message: 'mismatched subuids and subgids for user "kubelet"' },
  );
  // The user exists but has no range (getsubids prints nothing).
  await assert.rejects(() => run(undefined, undefined), { message: 'invalid line ""' });
  const two = "kubelet:65536:65536\nkubelet:196608:65536\n";
  await assert.rejects(() => run(two, two), {
    message: 'error parsing line "0: kubelet 65536 65536\\n1: kubelet 196608 65536\\n": ' +
      "it must contain only one line",
  });
});

Deno.test("parseGetSubIdsOutput reads getsubids' line as upstream", () => {
  assert.deepEqual(parseGetSubIdsOutput("0: kubelet 65536 2147483648\n"), {
    firstID: 65536,
    length: 2147483648,
  });
  assert.throws(() => parseGetSubIdsOutput("0: kubelet 65536\n"), {
    message: 'invalid line "0: kubelet 65536\\n"',
  });
  assert.throws(() => parseGetSubIdsOutput("0: kubelet 65536 4294967296\n"), /value out of range/);
  assert.throws(() => parseGetSubIdsOutput("0: kubelet x 1\n"), /invalid syntax/);
  assert.equal(
    subIdsOutput("bob:1:2\nkubelet:3:4\n998:5:6\n", "kubelet", "998"),
    "0: kubelet 3 4\n1: kubelet 5 6\n",
  );
});
