import assert from "node:assert/strict";
import { DEFAULT_FOCUS, DEFAULT_SKIP, parseConformanceArgs, UsageError } from "./conformance.ts";

Deno.test("parseConformanceArgs defaults to this kubelet, the sig-node and sig-storage focus, 4 processes", () => {
  assert.deepEqual(parseConformanceArgs([]), {
    agent: "agent",
    topology: "node",
    runtime: Deno.env.get("KUBELET_TS_RUNTIME") ?? "containerd",
    focus: DEFAULT_FOCUS,
    skip: DEFAULT_SKIP,
    procs: 4,
    out: undefined,
    keep: false,
    help: false,
  });
  const focus = new RegExp(DEFAULT_FOCUS);
  assert.ok(
    focus.test("[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]"),
  );
  assert.ok(focus.test("[It] [sig-storage] Secrets should be consumable [Conformance]"));
  assert.ok(!focus.test("[It] [sig-network] DNS should provide DNS for services [Conformance]"));
  assert.ok(new RegExp(DEFAULT_SKIP).test("[sig-node] NoExecuteTaintManager [Serial]"));
});

Deno.test("parseConformanceArgs names a bad option and its value", () => {
  const bad: [string[], RegExp][] = [
    [["--agent", "go"], /--agent must be 'agent' or 'upstream': current value is 'go'/],
    [
      ["--runtime", "cri-o"],
      /--runtime must be 'containerd' or 'containerd2': current value is 'cri-o'/,
    ],
    [["--procs", "0"], /--procs must be a whole number from 1 to 32: current value is '0'/],
    [["--procs", "x"], /current value is 'x'/],
    [["--focus", "("], /--focus must be a regular expression: current value is '\('/],
    [["--topology", "kind"], /--topology must be 'node' or 'kubeadm': current value is 'kind'/],
    [["--bogus"], /bogus/],
  ];
  for (const [args, re] of bad) {
    assert.throws(() => parseConformanceArgs(args), (e: unknown) => {
      assert.ok(e instanceof UsageError, String(e));
      assert.match(e.message, re);
      return true;
    });
  }
  assert.equal(parseConformanceArgs(["--agent", "upstream", "--procs", "2"]).procs, 2);
  assert.equal(parseConformanceArgs(["--topology", "kubeadm"]).topology, "kubeadm");
});
