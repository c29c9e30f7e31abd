import assert from "node:assert/strict";
import { kubeletConfigurationFields } from "./config_types.ts";
import { FlagError, parseBool, parseCommandLine, usage } from "./flags.ts";

const parse = (...args: string[]) => parseCommandLine(args, kubeletConfigurationFields);
const valueOf = (args: string[], flag: string) =>
  parse(...args).config.filter((c) => c.flag === flag).at(-1)?.value;

Deno.test("parseCommandLine gives upstream's KubeletFlags defaults", () => {
  const { flags, config, help } = parse();
  assert.equal(flags.rootDirectory, "/var/lib/kubelet");
  assert.equal(flags.certDirectory, "/var/lib/kubelet/pki");
  assert.equal(flags.maxContainerCount, -1);
  assert.equal(flags.maxPerPodContainerCount, 1);
  assert.equal(flags.registerSchedulable, true);
  assert.equal(flags.housekeepingInterval, 10_000, "cAdvisor's 10s as the kubelet sets it");
  assert.deepEqual(flags.nodeLabels, {});
  assert.deepEqual(config, []);
  assert.equal(help, false);
});

Deno.test("parseCommandLine reads KubeletFlags by upstream name", () => {
  const { flags } = parse(
    "--config=/etc/kubelet.yaml",
    "--config-dir",
    "/etc/kubelet.d",
    "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap.conf",
    "--hostname-override=Node-A",
    "--node-ip=10.0.0.5",
    "--node-labels=a=b,c=d",
    "--node-labels=e=f",
    "--root-dir=/srv/kubelet",
    "--cert-dir=/srv/pki",
    "--runonce",
    "--housekeeping-interval=15s",
  );
  assert.equal(flags.kubeletConfigFile, "/etc/kubelet.yaml");
  assert.equal(flags.kubeletDropinConfigDirectory, "/etc/kubelet.d");
  assert.equal(flags.kubeConfig, "/etc/kubernetes/kubelet.conf");
  assert.equal(flags.bootstrapKubeconfig, "/etc/kubernetes/bootstrap.conf");
  assert.equal(flags.hostnameOverride, "Node-A");
  assert.equal(flags.nodeIP, "10.0.0.5");
  assert.deepEqual(flags.nodeLabels, { a: "b", c: "d", e: "f" });
  assert.equal(flags.rootDirectory, "/srv/kubelet");
  assert.equal(flags.certDirectory, "/srv/pki");
  assert.equal(flags.runOnce, true);
  assert.equal(flags.housekeepingInterval, 15_000);
});

Deno.test("parseCommandLine reads booleans as pflag does", () => {
  assert.equal(valueOf(["--register-node=false"], "register-node"), false);
  assert.equal(valueOf(["--register-node"], "register-node"), true);
  assert.equal(valueOf(["--fail-swap-on=0"], "fail-swap-on"), false);
  assert.equal(valueOf(["--fail-swap-on=T"], "fail-swap-on"), true);
  assert.throws(() => parse("--fail-swap-on=maybe"), FlagError);
  assert.equal(parseBool("TRUE"), true);
});

Deno.test("parseCommandLine decodes config flags to typed values", () => {
  assert.equal(valueOf(["--sync-frequency=1m30s"], "sync-frequency"), 90_000);
  assert.equal(valueOf(["--max-pods", "200"], "max-pods"), 200);
  assert.deepEqual(
    valueOf(["--eviction-hard=memory.available<1Gi,nodefs.available<5%"], "eviction-hard"),
    {
      "memory.available": "1Gi",
      "nodefs.available": "5%",
    },
  );
  assert.deepEqual(
    valueOf(["--system-reserved=cpu=100m", "--system-reserved=memory=1Gi"], "system-reserved"),
    {
      cpu: "100m",
      memory: "1Gi",
    },
  );
  assert.deepEqual(valueOf(["--feature-gates=A=true,B=false"], "feature-gates"), {
    A: true,
    B: false,
  });
  assert.deepEqual(
    valueOf(["--register-with-taints=k=v:NoSchedule,x:NoExecute"], "register-with-taints"),
    [
      { key: "k", value: "v", effect: "NoSchedule" },
      { key: "x", effect: "NoExecute" },
    ],
  );
  assert.deepEqual(valueOf(["--cluster-dns=10.96.0.10,10.96.0.11"], "cluster-dns"), [
    "10.96.0.10",
    "10.96.0.11",
  ]);
});

Deno.test("parseCommandLine reads -v and the logging flags", () => {
  for (const args of [["-v", "4"], ["-v=4"], ["--v=4"], ["-v4"]]) {
    assert.equal(valueOf(args, "v"), 4, args.join(" "));
  }
  assert.equal(valueOf(["--logging-format=json"], "logging-format"), "json");
  assert.throws(() => parse("--logging-format=xml"), /permitted formats/);
  assert.deepEqual(valueOf(["--vmodule=pod*=4,kubelet=2"], "vmodule"), [
    { filePattern: "pod*", verbosity: 4 },
    { filePattern: "kubelet", verbosity: 2 },
  ]);
});

Deno.test("parseCommandLine rejects bad input with upstream's wording", () => {
  assert.throws(() => parse("--no-such-flag"), /^FlagError: unknown flag: --no-such-flag$/);
  assert.throws(() => parse("start"), /unknown command "start" for "kubelet"/);
  assert.throws(
    () => parse("--sync-frequency=10"),
    /invalid argument "10" for "--sync-frequency" flag/,
  );
  assert.throws(() => parse("--max-pods=many"), /invalid argument "many" for "--max-pods" flag/);
  assert.throws(
    () => parse("--port=3000000000"),
    /invalid argument "3000000000" for "--port" flag/,
  );
  assert.throws(() => parse("--eviction-hard=memory.available=1Gi"), /invalid argument/);
  assert.throws(() => parse("--register-with-taints=k=v:Sometimes"), /invalid taint effect/);
  assert.throws(() => parse("--address=not-an-ip"), /not a valid IP address/);
});

Deno.test("parseCommandLine warns for deprecated config flags", () => {
  const { warnings } = parse("--max-pods=10", "--v=2");
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0] ?? "",
    /^Flag --max-pods has been deprecated, This parameter should be set via the config file/,
  );
});

Deno.test("parseCommandLine reads --help, -h and --version forms", () => {
  assert.equal(parse("--help").help, true);
  assert.equal(parse("-h").help, true);
  assert.equal(parse("--version").version, "true");
  assert.equal(parse("--version=raw").version, "raw");
});

Deno.test("usage lists own, logging and deprecated config flags", () => {
  const text = usage(kubeletConfigurationFields);
  assert.match(text, /--config string/);
  assert.match(text, /-v, --v Level/);
  assert.match(text, /--max-pods int32 .*DEPRECATED/);
});

Deno.test("--least-privilege is unset unless given, and listed in the usage", () => {
  const parse = (args: string[]) => parseCommandLine(args, kubeletConfigurationFields);
  assert.equal(parse([]).leastPrivilege, undefined);
  assert.equal(parse(["--least-privilege"]).leastPrivilege, true);
  assert.equal(parse(["--least-privilege=false"]).leastPrivilege, false);
  assert.throws(() => parse(["--least-privilege=maybe"]), FlagError);
  assert.match(
    usage(kubeletConfigurationFields),
    /--least-privilege\s+Run inside .* On by default when the process has every permission/,
  );
});

Deno.test("--max-parallel-sandbox-starts is unset unless given, 0 or more, and in the usage", () => {
  assert.equal(parse().flags.maxParallelSandboxStarts, undefined);
  assert.equal(parse("--max-parallel-sandbox-starts=3").flags.maxParallelSandboxStarts, 3);
  assert.equal(parse("--max-parallel-sandbox-starts", "0").flags.maxParallelSandboxStarts, 0);
  assert.throws(
    () => parse("--max-parallel-sandbox-starts=-1"),
    /^FlagError: invalid argument "-1" for "--max-parallel-sandbox-starts" flag: must be 0 \(no limit\) or more$/,
  );
  assert.throws(
    () => parse("--max-parallel-sandbox-starts=lots"),
    /invalid argument "lots" for "--max-parallel-sandbox-starts" flag: strconv.ParseInt/,
  );
  assert.match(
    usage(kubeletConfigurationFields),
    /--max-parallel-sandbox-starts int\s+The most RunPodSandbox calls in flight at once.*Default: 4 × the node's CPUs/,
  );
});
