import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { PodManager } from "./pod_manager.ts";
import {
  CONFIG_HASH_ANNOTATION,
  CONFIG_MIRROR_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
} from "../config/pod_config.ts";

type Kind = "api" | "static" | "mirror";

function pod(kind: Kind, name: string, namespace: string, uid: string): V1Pod {
  const annotations: Record<string, string> = {
    [CONFIG_SOURCE_ANNOTATION]: kind === "static" ? "file" : "api",
  };
  if (kind === "static") annotations[CONFIG_HASH_ANNOTATION] = `hash-${uid}`;
  if (kind === "mirror") annotations[CONFIG_MIRROR_ANNOTATION] = "hash";
  return { metadata: { name, namespace, uid, annotations } };
}

const web = pod("api", "web", "default", "uid-web");
const etcd = pod("static", "etcd", "kube-system", "uid-etcd");
const etcdMirror = pod("mirror", "etcd", "kube-system", "uid-etcd-mirror");
const orphan = pod("mirror", "gone", "kube-system", "uid-gone-mirror");

const uidOf = (p: V1Pod | undefined) => p?.metadata?.uid;

Deno.test("PodManager finds pods and mirror pods by UID, full name and name", () => {
  const m = new PodManager();
  m.setPods([web, etcd, etcdMirror, orphan]);
  const cases: [string, V1Pod | undefined, string | undefined][] = [
    ["getPodByUID regular", m.getPodByUID("uid-web"), "uid-web"],
    ["getPodByUID static", m.getPodByUID("uid-etcd"), "uid-etcd"],
    ["getPodByUID mirror finds nothing", m.getPodByUID("uid-etcd-mirror"), undefined],
    ["getPodByFullName", m.getPodByFullName("web_default"), "uid-web"],
    ["getPodByFullName of a static pod", m.getPodByFullName("etcd_kube-system"), "uid-etcd"],
    ["getPodByFullName orphan mirror", m.getPodByFullName("gone_kube-system"), undefined],
    ["getPodByName", m.getPodByName("kube-system", "etcd"), "uid-etcd"],
    ["getPodByName wrong namespace", m.getPodByName("default", "etcd"), undefined],
    ["getMirrorPodByPod", m.getMirrorPodByPod(etcd), "uid-etcd-mirror"],
    ["getMirrorPodByPod without mirror", m.getMirrorPodByPod(web), undefined],
    ["getPodByMirrorPod", m.getPodByMirrorPod(etcdMirror), "uid-etcd"],
    ["getPodByMirrorPod orphan", m.getPodByMirrorPod(orphan), undefined],
  ];
  for (const [name, got, want] of cases) assert.equal(uidOf(got), want, name);
  assert.deepEqual(m.getPods().map(uidOf), ["uid-web", "uid-etcd"]);
});

Deno.test("PodManager getPodsAndMirrorPods separates mirrors and reports orphans", () => {
  const m = new PodManager();
  m.setPods([web, etcdMirror, etcd, orphan]);
  const got = m.getPodsAndMirrorPods();
  assert.deepEqual(got.pods.map(uidOf), ["uid-web", "uid-etcd"]);
  assert.deepEqual(got.mirrorPods.map(uidOf), ["uid-etcd-mirror", "uid-gone-mirror"]);
  assert.deepEqual(got.orphanedMirrorPodFullnames, ["gone_kube-system"]);
});

Deno.test("PodManager getPodAndMirrorPod answers from either side", () => {
  const m = new PodManager();
  m.setPods([web, etcd, etcdMirror, orphan]);
  const cases: [string, V1Pod, string | undefined, string | undefined, boolean][] = [
    ["static pod", etcd, "uid-etcd", "uid-etcd-mirror", false],
    ["mirror pod", etcdMirror, "uid-etcd", "uid-etcd-mirror", true],
    ["regular pod", web, "uid-web", undefined, false],
    ["orphaned mirror", orphan, undefined, "uid-gone-mirror", true],
  ];
  for (const [name, asked, podUID, mirrorUID, wasMirror] of cases) {
    const got = m.getPodAndMirrorPod(asked);
    assert.deepEqual(
      [uidOf(got.pod), uidOf(got.mirrorPod), got.wasMirror],
      [podUID, mirrorUID, wasMirror],
      name,
    );
  }
});

Deno.test("PodManager translatePodUID maps mirror UIDs to static pod UIDs in either add order", () => {
  const orders: [string, V1Pod[]][] = [
    ["static first", [etcd, etcdMirror]],
    ["mirror first", [etcdMirror, etcd]],
  ];
  for (const [name, pods] of orders) {
    const m = new PodManager();
    for (const p of pods) m.addPod(p);
    m.addPod(web);
    const cases: [string, string][] = [
      ["uid-etcd-mirror", "uid-etcd"],
      ["uid-etcd", "uid-etcd"],
      ["uid-web", "uid-web"],
      ["unknown", "unknown"],
      ["", ""],
    ];
    for (const [uid, want] of cases) assert.equal(m.translatePodUID(uid), want, `${name}: ${uid}`);
  }
});

Deno.test("PodManager getUIDTranslations lists static pods without a mirror as empty", () => {
  const lonely = pod("static", "lonely", "kube-system", "uid-lonely");
  const m = new PodManager();
  m.setPods([web, etcd, etcdMirror, lonely]);
  const { podToMirror, mirrorToPod } = m.getUIDTranslations();
  assert.deepEqual(
    [...podToMirror].sort(),
    [["uid-etcd", "uid-etcd-mirror"], ["uid-lonely", ""]],
  );
  assert.deepEqual([...mirrorToPod], [["uid-etcd-mirror", "uid-etcd"]]);
});

Deno.test("PodManager removePod drops a mirror's translation but not a static pod's", () => {
  const m = new PodManager();
  m.setPods([etcd, etcdMirror]);
  m.removePod(etcd);
  assert.equal(m.getPodByUID("uid-etcd"), undefined);
  assert.deepEqual(m.getPodsAndMirrorPods().orphanedMirrorPodFullnames, ["etcd_kube-system"]);
  // Upstream keeps the translation until the mirror itself goes.
  assert.equal(m.translatePodUID("uid-etcd-mirror"), "uid-etcd");
  m.removePod(etcdMirror);
  assert.equal(m.translatePodUID("uid-etcd-mirror"), "uid-etcd-mirror");
  assert.deepEqual(m.getPodsAndMirrorPods(), {
    pods: [],
    mirrorPods: [],
    orphanedMirrorPodFullnames: [],
  });
});

Deno.test("PodManager updatePod replaces the pod with the same UID", () => {
  const m = new PodManager();
  m.addPod(web);
  const newer: V1Pod = { ...web, spec: { containers: [{ name: "app", image: "nginx:2" }] } };
  m.updatePod(newer);
  assert.equal(m.getPods().length, 1);
  assert.equal(m.getPodByUID("uid-web"), newer);
  assert.equal(m.getPodByFullName("web_default"), newer);
});

Deno.test("PodManager setPods forgets what it held before", () => {
  const m = new PodManager();
  m.setPods([web, etcd, etcdMirror]);
  m.setPods([orphan]);
  assert.deepEqual(m.getPods(), []);
  assert.equal(m.translatePodUID("uid-etcd-mirror"), "uid-etcd-mirror");
  assert.deepEqual(m.getPodsAndMirrorPods().orphanedMirrorPodFullnames, ["gone_kube-system"]);
});
