import assert from "node:assert/strict";
import { join } from "node:path";
import { hostViewDir, type LaunchPlan, planLaunch } from "./permission_set.ts";
import { staticGraph } from "../testing/module_graph.ts";
import { launch } from "./launcher.ts";
import { KERNEL_TUNABLES } from "../cm/kernel_tunables.ts";

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-launcher-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A config for a kubelet whose paths are all under `dir`. */
async function config(dir: string, lines: readonly string[] = []): Promise<string> {
  const file = join(dir, "kubelet.yaml");
  await Deno.writeTextFile(
    file,
    [
      "apiVersion: kubelet.config.k8s.io/v1beta1",
      "kind: KubeletConfiguration",
      "failCgroupV1: false",
      `containerRuntimeEndpoint: unix://${dir}/cri.sock`,
      `podLogsDir: ${dir}/pod-logs`,
      `staticPodPath: ${dir}/manifests`,
      ...lines,
      "",
    ].join("\n"),
  );
  return file;
}

function plan(args: string[], root = true): Promise<LaunchPlan> {
  return planLaunch({ args, cgroupV1: true, root, runDir: "/run/test-views" });
}

Deno.test("planLaunch sandboxes a run of the kubelet by default, with its paths and view", async () => {
  await withDir(async (dir) => {
    const file = await config(dir, ["logging:", "  format: json", "  verbosity: 3"]);
    const root = join(dir, "root");
    const p = await plan(["--config", file, "--root-dir", root]);
    assert.equal(p.kind, "sandbox");
    if (p.kind !== "sandbox") return;
    assert.equal(p.viewDir, await hostViewDir("/run/test-views", root));
    assert.deepEqual(p.logging, { format: "json", verbosity: 3 });
    assert.equal(p.mkdir, undefined);
    for (const path of [file, root, p.viewDir, `${dir}/manifests`]) {
      assert.ok(p.permissions.read.includes(path), `${path} readable: ${p.permissions.read}`);
    }
    for (const path of [root, `${dir}/pod-logs`, `${p.viewDir}/sys/fs/cgroup`]) {
      assert.ok(p.permissions.write.includes(path), `${path} writable: ${p.permissions.write}`);
    }
    assert.ok(!p.permissions.write.includes(p.viewDir), "only the view's cgroup tree is writable");
    // The same with the flag given.
    const given = await plan(["--config", file, "--root-dir", root, "--least-privilege"]);
    assert.deepEqual(given, p);
  });
});

Deno.test("planLaunch makes the bootstrap kubeconfig's directory, not the agent", async () => {
  await withDir(async (dir) => {
    const file = await config(dir);
    const kubeconfig = join(dir, "etc", "kubelet.conf");
    const p = await plan([
      ...["--config", file, "--kubeconfig", kubeconfig],
      ...["--bootstrap-kubeconfig", join(dir, "bootstrap.conf")],
    ]);
    assert.equal(p.kind, "sandbox");
    if (p.kind === "sandbox") assert.equal(p.mkdir, join(dir, "etc"));
  });
});

Deno.test("planLaunch leaves what is not a sandboxable run to the kubelet command", async () => {
  await withDir(async (dir) => {
    const file = await config(dir);
    const bad = join(dir, "bad.yaml");
    await Deno.writeTextFile(bad, "kind: KubeletConfiguration\nmaxPods: lots\n");
    const cases: [string[], boolean][] = [
      [["--help"], true],
      [["--version"], true],
      [["--check", "--config", file], true],
      [["--no-such-flag"], true],
      [["--config", bad], true],
      [["--config", join(dir, "missing.yaml")], true],
      [["--config", file, "--least-privilege=false"], true],
      // Not root: warned about unless asked for, which the kubelet command refuses itself.
      [["--config", file], false],
      [["--config", file, "--least-privilege"], false],
    ];
    for (const [args, root] of cases) {
      const p = await plan(args, root);
      assert.equal(p.kind, "in-process", args.join(" "));
      const warned = !root && !args.includes("--least-privilege");
      assert.equal(p.kind === "in-process" && p.warning !== undefined, warned, args.join(" "));
    }
  });
});

Deno.test("launch runs the kubelet command in its own isolate when the plan says so", async () => {
  await withDir(async (dir) => {
    const file = await config(dir);
    const lines: string[] = [];
    const ran: string[][] = [];
    const code = await launch(["--config", file, "--least-privilege=false"], {
      inProcess: (args) => {
        ran.push([...args]);
        return Promise.resolve(7);
      },
      write: (l) => lines.push(l),
    });
    assert.equal(code, 7);
    assert.deepEqual(ran, [["--config", file, "--least-privilege=false"]]);
    assert.deepEqual(lines, []);
  });
});

Deno.test("launch says so and exits 1 when the planner fails", async () => {
  const lines: string[] = [];
  const planner = new URL("data:text/javascript,self.onmessage=()=>{throw new Error('boom')}");
  const code = await launch(["--help"], {
    planner,
    inProcess: () => Promise.reject(new Error("must not run")),
    write: (l) => lines.push(l),
  });
  assert.equal(code, 1);
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /^E.*"Failed to plan the kubelet's sandbox" err=".*boom/);
});

Deno.test("the launcher's own modules load no npm package and none of the kubelet's", async () => {
  // main.ts's static graph is what the launcher's isolate holds for as long as the kubelet runs.
  const loaded = await staticGraph(new URL("../../main.ts", import.meta.url));
  const npm = [...loaded].filter((s) => s.startsWith("npm:"));
  assert.deepEqual(npm, [], "npm packages in the launcher's isolate");
  const modules = [...loaded].map((s) => s.replace(/^.*\/src\//, "")).sort();
  for (
    const heavy of [
      "app/kubelet_command.ts",
      "app/kubelet_config.ts",
      "apis/flags.ts",
      "kubelet.ts",
    ]
  ) {
    assert.ok(!modules.includes(heavy), `${heavy} in the launcher's graph: ${modules}`);
  }
  assert.ok(modules.includes("privilege/launcher.ts"), String(modules));
});

Deno.test("launch says so and exits 1 when the host view cannot be made", async () => {
  if (Deno.uid() !== 0) {
    // Not root, the plan is to run without the sandbox: nothing to make.
    const reason = `the sandbox's launch needs root (uid is ${Deno.uid()})`;
    if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
    console.warn(`SKIPPING ${reason}`);
    return;
  }
  await withDir(async (dir) => {
    const file = await config(dir);
    // Views go under a regular file: the view's directory cannot be made, before any mount.
    const runDir = join(dir, "not-a-dir");
    await Deno.writeTextFile(runDir, "");
    const lines: string[] = [];
    const set: string[] = [];
    const code = await launch(["--config", file, "--root-dir", join(dir, "root")], {
      runDir,
      inProcess: () => Promise.reject(new Error("must not run")),
      write: (l) => lines.push(l),
      processSettings: recordingSettings(set),
    });
    assert.equal(code, 1);
    // The process settings are the launcher's to apply, before the sandbox: the OOM score
    // (default -999), the open-files limit (default 1000000), the kernel tunables (written).
    assert.deepEqual(set, [
      "oom_score_adj=-999",
      "nofile=1000000:1000000",
      "get vm/overcommit_memory",
      "set vm/overcommit_memory=1",
    ]);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^E.*"Failed to start the kubelet in its permission set; --least-privilege=false runs it without" err=".*not-a-dir.*hostView=".*not-a-dir\/view-/,
    );
  });
});

/** Process settings that record what they are asked, with vm/overcommit_memory at 0. */
function recordingSettings(set: string[]) {
  return {
    applyOOMScoreAdj: (v: number) => Promise.resolve(void set.push(`oom_score_adj=${v}`)),
    setNoFileLimit: (soft: bigint, hard: bigint) => (set.push(`nofile=${soft}:${hard}`), 0),
    sysctl: {
      get: (name: string) => {
        if (name !== "vm/overcommit_memory") {
          return Promise.resolve(KERNEL_TUNABLES.find(([n]) => n === name)![1]);
        }
        set.push(`get ${name}`);
        return Promise.resolve(0);
      },
      set: (name: string, value: number) => Promise.resolve(void set.push(`set ${name}=${value}`)),
    },
  };
}

Deno.test("launch stops before the sandbox when protectKernelDefaults finds a tunable unlike upstream's", async () => {
  if (Deno.uid() !== 0) {
    const reason = `the sandbox's launch needs root (uid is ${Deno.uid()})`;
    if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
    console.warn(`SKIPPING ${reason}`);
    return;
  }
  await withDir(async (dir) => {
    const file = await config(dir, ["protectKernelDefaults: true", "maxOpenFiles: 4096"]);
    const lines: string[] = [];
    const set: string[] = [];
    const code = await launch(["--config", file, "--root-dir", join(dir, "root")], {
      runDir: join(dir, "views"),
      inProcess: () => Promise.reject(new Error("must not run")),
      write: (l) => lines.push(l),
      processSettings: recordingSettings(set),
    });
    assert.equal(code, 1);
    assert.deepEqual(set, ["oom_score_adj=-999", "nofile=4096:4096", "get vm/overcommit_memory"]);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^E.*"Failed to start ContainerManager" err="invalid kernel flag: vm\/overcommit_memory, expected value: 1, actual value: 0"$/,
    );
    // Nothing of the sandbox was made.
    assert.equal(await Deno.stat(join(dir, "views")).then(() => true, () => false), false);
  });
});
