import assert from "node:assert/strict";
import { kubeletConfigurationFields } from "../apis/config_types.ts";
import { parseCommandLine } from "../apis/flags.ts";
import { validateKubeletFlags } from "./kubelet_flags.ts";

function problems(args: string[]): string[] {
  return validateKubeletFlags(parseCommandLine(args, kubeletConfigurationFields).flags).map((e) =>
    e.message
  );
}

Deno.test("validateKubeletFlags finds nothing wrong with ordinary flags", () => {
  assert.deepEqual(
    problems([
      "--node-ip=10.0.0.3,fd00::3",
      "--node-labels=node.kubernetes.io/pool=a,team=x,kubernetes.io/os=linux,x.kubelet.kubernetes.io/y=z",
      "--cloud-provider=external",
    ]),
    [],
  );
});

Deno.test("validateKubeletFlags refuses a --node-ip that is not an IP", () => {
  assert.deepEqual(problems(["--node-ip", "10.0.0.300"]), [
    `could not parse --node-ip "10.0.0.300": '10.0.0.300' is not an IP address`,
  ]);
  assert.match(problems(["--node-ip=10.0.0.1,10.0.0.2"])[0] ?? "", /dual-stack pair/);
});

Deno.test("validateKubeletFlags refuses kubernetes.io labels the kubelet may not set, as upstream", () => {
  const [p] = problems(["--node-labels=node-role.kubernetes.io/master=,k8s.io/x=y"]);
  assert.ok(
    p?.startsWith(
      "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [k8s.io/x node-role.kubernetes.io/master]",
    ),
    p,
  );
  assert.match(p ?? "", /allowed prefix \(kubelet\.kubernetes\.io, node\.kubernetes\.io\)/);
});

Deno.test("validateKubeletFlags refuses the lock file flags and the mounter path", () => {
  assert.deepEqual(problems(["--exit-on-lock-contention"]), [
    "cannot exit on lock file contention: no lock file specified",
  ]);
  assert.match(
    problems(["--lock-file=/run/kubelet.lock"])[0] ?? "",
    /--lock-file=\/run\/kubelet.lock is not supported yet/,
  );
  assert.match(
    problems(["--experimental-mounter-path=/usr/bin/mount"])[0] ?? "",
    /--experimental-mounter-path=\/usr\/bin\/mount is not supported yet/,
  );
  assert.match(
    problems(["--cloud-provider=aws"])[0] ?? "",
    /--cloud-provider=aws is not supported/,
  );
});
