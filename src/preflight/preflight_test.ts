import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { fixtureMountinfo } from "../testing/cgroup_fixtures.ts";
import { startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { loadKubeletConfiguration } from "../app/kubelet_config.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import { newKubeletFlags } from "../apis/flags.ts";
import { type Finding, formatFindings, runPreflight } from "./preflight.ts";
import type { CgroupMode } from "../cm/cgroup_layout.ts";

async function write(root: string, path: string, text: string): Promise<void> {
  await Deno.mkdir(dirname(join(root, path)), { recursive: true });
  await Deno.writeTextFile(join(root, path), text);
}

/** A planted host: mountinfo of `mode`, swap, sysctls, /dev/kmsg. */
async function host(root: string, opts: {
  mode: CgroupMode;
  swap?: boolean;
  ipForward?: string;
  bridge?: string;
  kmsg?: boolean;
  v2Controllers?: string;
}): Promise<void> {
  await write(root, "proc/self/mountinfo", fixtureMountinfo(opts.mode));
  await write(
    root,
    "proc/swaps",
    "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" +
      (opts.swap ? "/swapfile                               file\t\t1048572\t\t0\t\t-2\n" : ""),
  );
  await write(root, "proc/sys/net/ipv4/ip_forward", `${opts.ipForward ?? "1"}\n`);
  if (opts.bridge !== undefined) {
    await write(root, "proc/sys/net/bridge/bridge-nf-call-iptables", `${opts.bridge}\n`);
  }
  if (opts.kmsg ?? true) await write(root, "dev/kmsg", "");
  if (opts.mode === "v2") {
    await write(
      root,
      "sys/fs/cgroup/cgroup.controllers",
      opts.v2Controllers ?? "cpu memory pids\n",
    );
  }
}

async function defaults(
  patch: Partial<KubeletConfiguration> = {},
): Promise<KubeletConfiguration> {
  const { config } = await loadKubeletConfiguration({
    configFile: "",
    dropinDir: "",
    flags: [],
    cgroupV1: false,
  });
  return { ...config, ...patch };
}

const problems = (f: Finding[]) => f.filter((x) => x.level === "problem");
const find = (f: Finding[], check: string, text: RegExp) =>
  f.find((x) => x.check === check && text.test(x.message));

async function openssl(args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, stdout: "null", stderr: "piped" }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
}

Deno.test("runPreflight names every planted problem in one run, each with a fix", async () => {
  const root = await Deno.makeTempDir({ prefix: "preflight-" });
  try {
    await host(root, { mode: "hybrid", swap: true, ipForward: "0", kmsg: false });
    const cert = join(root, "serving.crt");
    const key = join(root, "serving.key");
    const other = join(root, "other.key");
    await openssl([
      ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "10"],
      ...["-subj", "/CN=node-a", "-keyout", key, "-out", cert],
    ]);
    await openssl(["genrsa", "-out", other, "2048"]);
    const ca = join(root, "ca.crt");
    await Deno.writeTextFile(ca, "not a certificate\n");
    const kubeconfig = join(root, "kubelet.conf");
    await Deno.writeTextFile(
      kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        `clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', certificate-authority: ${cert}}}]`,
        "users: [{name: u, user: {token: abc}}]",
        "contexts: [{name: x, context: {cluster: c, user: u}}]",
        "current-context: x",
      ].join("\n"),
    );
    const config = await defaults({
      containerRuntimeEndpoint: `unix://${root}/missing.sock`,
      failSwapOn: true,
      failCgroupV1: true,
      cgroupDriver: "systemd",
      tlsCertFile: cert,
      tlsPrivateKeyFile: other,
      authentication: {
        ...(await defaults()).authentication,
        x509: { clientCAFile: ca },
      },
    });
    const flags = { ...newKubeletFlags(), kubeConfig: kubeconfig };
    const findings = await runPreflight({
      flags,
      config,
      configError: new Error("/etc/kubelet.yaml:3: field 'port' must be ..."),
      pathNeeds: [{ permission: "read", path: "/opt/elsewhere", source: "staticPodPath" }],
      permissionState: (n) => n.path === "/opt/elsewhere" ? "denied" : "granted",
      root,
      systemBusAddress: `unix:path=${root}/no-system-bus`,
      nodeName: "node-a",
      timeoutMs: 2_000,
    });
    const expected: [string, RegExp][] = [
      ["configuration", /kubelet\.yaml:3/],
      ["permissions", /read access to '\/opt\/elsewhere' \(from staticPodPath\)/],
      ["runtime", /socket .*missing\.sock does not exist/],
      ["cgroups", /cgroup v1 and failCgroupV1 is true/],
      [
        "cgroups",
        /cgroupDriver is systemd but systemd cannot be reached over D-Bus: cannot connect/,
      ],
      ["swap", /swap is on \(\/swapfile\) and failSwapOn is true/],
      ["kernel", /ip_forward is not 1/],
      ["certificates", /is not the key of tlsCertFile/],
      ["certificates", /clientCAFile .*holds no PEM certificate/],
      ["apiserver", /https:\/\/127\.0\.0\.1:1 is unreachable/],
    ];
    for (const [check, text] of expected) {
      const f = find(findings, check, text);
      assert.ok(f, `${check} ${text}:\n${formatFindings(findings)}`);
      assert.equal(f.level, "problem");
      assert.ok(f.fix, `${check} has a fix`);
    }
    assert.equal(problems(findings).length, expected.length, formatFindings(findings));
    // Warnings do not fail the run: br_netfilter missing, /dev/kmsg missing, cert expiring.
    for (
      const text of [/br_netfilter is not loaded/, /dev\/kmsg is missing/, /expires in 9 days/]
    ) {
      assert.ok(
        findings.some((f) => f.level === "warning" && text.test(f.message)),
        `${text}:\n${formatFindings(findings)}`,
      );
    }
    const report = formatFindings(findings);
    assert.match(report, /^\[PROBLEM\] swap: /m);
    assert.match(report, /^ {10}fix: turn swap off/m);
    // The configuration did not load: CIS items computed from the defaults in its place would
    // describe another configuration than the site's, so there is one line saying so instead.
    assert.deepEqual(
      findings.filter((f) => f.check === "cis").map((f) => [f.level, f.message]),
      [["warning", "not checked: the configuration did not load (see above)"]],
    );
    assert.match(report, /10 problems found \(4 warnings\)/);

    // Expired: the same certificate a year on.
    const later = await runPreflight({
      flags: newKubeletFlags(),
      config: await defaults({ tlsCertFile: cert, tlsPrivateKeyFile: key }),
      pathNeeds: [],
      root,
      nodeName: "node-a",
      now: () => Date.now() + 365 * 86_400_000,
    });
    assert.ok(find(later, "certificates", /\(CN=node-a\) expired on /), formatFindings(later));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("runPreflight passes a sound node: a CRI v1 runtime with the configured cgroup driver, cgroup v2, no swap", async () => {
  const root = await Deno.makeTempDir({ prefix: "preflight-ok-" });
  try {
    await host(root, { mode: "v2", bridge: "1" });
    await using fake = await startFakeRuntime({ socket: join(root, "cri.sock") });
    const config = await defaults({ containerRuntimeEndpoint: fake.endpoint });
    const findings = await runPreflight({
      flags: newKubeletFlags(),
      config,
      pathNeeds: [],
      root,
      nodeName: "node-a",
    });
    assert.deepEqual(problems(findings), [], formatFindings(findings));
    assert.deepEqual(findings.filter((f) => f.level === "warning" && f.check !== "cis"), []);
    // Upstream's command-line defaults (no --config: anonymous auth, AlwaysAllow, the
    // read-only port) fail nine CIS items: warnings, not problems.
    assert.deepEqual(
      findings.filter((f) => f.check === "cis").map((f) => f.message.split(" ")[0]),
      ["4.2.1", "4.2.2", "4.2.3", "4.2.4", "4.2.9", "4.2.10", "4.2.12", "4.2.13", "4.2.14"],
    );
    assert.ok(find(findings, "runtime", /serves CRI v1 at unix:\/\//));
    assert.ok(find(findings, "runtime", /cgroup driver cgroupfs, as the runtime's/));
    assert.ok(find(findings, "cgroups", /cgroup v2/));
    assert.match(formatFindings(findings), /no problems found \(9 warnings\)$/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("runPreflight reports a runtime whose cgroup driver differs, and missing v2 controllers", async () => {
  const root = await Deno.makeTempDir({ prefix: "preflight-driver-" });
  try {
    await host(root, { mode: "v2", bridge: "1", v2Controllers: "cpu\n" });
    await using fake = await startFakeRuntime({
      socket: join(root, "cri.sock"),
      cgroupDriver: api.CgroupDriver.SYSTEMD,
    });
    const findings = await runPreflight({
      flags: newKubeletFlags(),
      config: await defaults({ containerRuntimeEndpoint: fake.endpoint }),
      pathNeeds: [],
      root,
      nodeName: "node-a",
    });
    assert.ok(
      find(findings, "runtime", /runtime's cgroup driver is systemd but cgroupDriver is cgroupfs/),
      formatFindings(findings),
    );
    assert.ok(find(findings, "cgroups", /not enabled at the root: memory, pids/));
    assert.equal(problems(findings).length, 2, formatFindings(findings));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("runPreflight reports flag problems and what lenient decoding went past as problems", async () => {
  const root = await Deno.makeTempDir({ prefix: "preflight-flags-" });
  try {
    await host(root, { mode: "v2", bridge: "1" });
    await using fake = await startFakeRuntime({ socket: join(root, "cri.sock") });
    const findings = await runPreflight({
      flags: newKubeletFlags(),
      config: await defaults({ containerRuntimeEndpoint: fake.endpoint }),
      flagErrors: [
        new Error(`could not parse --node-ip "10.0.0.300": '10.0.0.300' is not an IP address`),
      ],
      lenientDecoding: [
        "strict decoding error: /etc/kubelet.yaml:7: field 'maxPodz' is not a known field (strict decoding: unknown field)",
      ],
      pathNeeds: [],
      root,
      nodeName: "node-a",
    });
    assert.deepEqual(
      problems(findings).map((f) => [f.check, f.message]),
      [
        ["flags", `could not parse --node-ip "10.0.0.300": '10.0.0.300' is not an IP address`],
        [
          "configuration",
          "the kubelet would start, but ignoring what strict decoding refuses: strict decoding error: " +
          "/etc/kubelet.yaml:7: field 'maxPodz' is not a known field (strict decoding: unknown field)",
        ],
      ],
      formatFindings(findings),
    );
    assert.ok(problems(findings).every((f) => f.fix));
    // The configuration loaded: the CIS items are checked against it.
    assert.ok(find(findings, "cis", /^4\.2\.1 /), formatFindings(findings));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
