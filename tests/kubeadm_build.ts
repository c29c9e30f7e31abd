/**
 * @module
 * Builds what a kubeadm cluster runs (issue 44), offline from the pinned modules: kubeadm and
 * kube-proxy from k8s.io/kubernetes {@link KUBERNETES_VERSION} and CoreDNS from
 * github.com/coredns/coredns {@link COREDNS_VERSION} (the version kubeadm 1.36 deploys).
 *
 * Run it alone with `deno run -A tests/kubeadm_build.ts`: it builds the programs and prints them.
 */

import {
  type BinarySpec,
  type ControlPlaneBuildOptions,
  ensureBinary,
  KUBERNETES_VERSION,
  kubernetesSpec,
} from "./control_plane_build.ts";

/** kubeadm 1.36's `CoreDNSVersion` (cmd/kubeadm/app/constants). */
export const COREDNS_VERSION = "v1.14.2";

/** kubeadm: `kubeadm version -o short` prints the bare git version. */
export const KUBEADM_SPEC: BinarySpec = {
  ...kubernetesSpec("kubeadm", "k8s.io/kubernetes/cmd/kubeadm", KUBERNETES_VERSION),
  versionArgs: ["version", "-o", "short"],
};

/** kube-proxy. */
export const KUBE_PROXY_SPEC: BinarySpec = kubernetesSpec(
  "kube-proxy",
  "k8s.io/kubernetes/cmd/kube-proxy",
  `Kubernetes ${KUBERNETES_VERSION}`,
);

/** CoreDNS with its default plugins (plugin.cfg as released), as its Makefile builds it. */
export const COREDNS_SPEC: BinarySpec = {
  name: "coredns",
  version: COREDNS_VERSION,
  module: "github.com/coredns/coredns",
  pkg: "github.com/coredns/coredns",
  versionArgs: ["-version"],
  expectVersion: `CoreDNS-${COREDNS_VERSION.slice(1)}`,
  ldflags: [],
};

/** Paths of the programs {@link ensureKubeadmBinaries} built or found. */
export interface KubeadmBinaries {
  kubeadm: string;
  kubeProxy: string;
  coredns: string;
}

/** Builds kubeadm, kube-proxy and CoreDNS unless cached, one after another. */
export async function ensureKubeadmBinaries(
  opts: ControlPlaneBuildOptions = {},
): Promise<KubeadmBinaries> {
  return {
    kubeadm: await ensureBinary(KUBEADM_SPEC, opts),
    kubeProxy: await ensureBinary(KUBE_PROXY_SPEC, opts),
    coredns: await ensureBinary(COREDNS_SPEC, opts),
  };
}

if (import.meta.main) {
  const built = await ensureKubeadmBinaries();
  for (const [name, path] of Object.entries(built)) console.log(`${name}\t${path}`);
}
