import assert from "node:assert/strict";
import type { V1Pod, V1PodSpec } from "@kubernetes/client-node";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import {
  DnsConfigurer,
  type DnsConfigurerOptions,
  parseResolvConf,
  ResolvConfError,
} from "./dns.ts";
import { createLogger } from "../klog/klog.ts";

interface RecordedEvent {
  ref: ObjectRef;
  type: string;
  reason: string;
  message: string;
}

function recorder(): EventRecorder & { events: RecordedEvent[] } {
  const events: RecordedEvent[] = [];
  return {
    events,
    event(ref, type, reason, message) {
      events.push({ ref, type, reason, message });
    },
  };
}

const HOST_RESOLV = [
  "# generated",
  "nameserver 10.0.0.2",
  "nameserver 10.0.0.3",
  "domain ignored.example",
  "search corp.example. example.com",
  "options timeout:2 rotate",
  "",
].join("\n");

const NODE: ObjectRef = { kind: "Node", name: "node-1", uid: "node-1" };

function configurer(
  over: Partial<DnsConfigurerOptions> = {},
  files: Record<string, string> = { "/etc/resolv.conf": HOST_RESOLV },
) {
  const rec = recorder();
  const reads: string[] = [];
  const dns = new DnsConfigurer({
    clusterDNS: ["10.96.0.10"],
    clusterDomain: "cluster.local",
    resolvConf: "/etc/resolv.conf",
    readFile: (path) => {
      reads.push(path);
      const text = files[path];
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound("No such file or directory (os error 2)"))
        : Promise.resolve(text);
    },
    recorder: rec,
    logger: createLogger({ write: () => {} }),
    ...over,
  });
  return { dns, rec, reads };
}

function pod(spec: Partial<V1PodSpec> = {}): V1Pod {
  return {
    metadata: { name: "web", namespace: "shop", uid: "uid-1", resourceVersion: "42" },
    spec: { containers: [{ name: "c", image: "busybox" }], dnsPolicy: "ClusterFirst", ...spec },
  };
}

Deno.test("parseResolvConf accumulates nameservers and keeps the last search and options", () => {
  const conf = parseResolvConf(
    HOST_RESOLV + "search last.example\noptions ndots:1\n  # indented comment\n",
  );
  assert.deepEqual(conf.nameservers, ["10.0.0.2", "10.0.0.3"]);
  assert.deepEqual(conf.searches, ["last.example"]);
  assert.deepEqual(conf.options, ["ndots:1"]);
  assert.deepEqual(parseResolvConf(HOST_RESOLV).searches, ["corp.example", "example.com"]);
});

Deno.test("parseResolvConf refuses a nameserver line without an address", () => {
  assert.throws(() => parseResolvConf("nameserver\n"), {
    name: "ResolvConfError",
    message: "nameserver list is empty ",
  });
});

Deno.test("DnsConfigurer.getPodDNS gives ClusterFirst pods cluster DNS and search paths", async () => {
  const { dns, rec } = configurer({ clusterDNS: ["10.96.0.10", "10.96.0.11"] });
  const got = await dns.getPodDNS(pod());
  assert.deepEqual(got, {
    servers: ["10.96.0.10", "10.96.0.11"],
    searches: [
      "shop.svc.cluster.local",
      "svc.cluster.local",
      "cluster.local",
      "corp.example",
      "example.com",
    ],
    options: ["ndots:5"],
  });
  assert.equal(rec.events.length, 0);
});

Deno.test("DnsConfigurer.getPodDNS removes host search domains the cluster ones repeat", async () => {
  const files = { "/etc/resolv.conf": "nameserver 1.1.1.1\nsearch cluster.local a.example\n" };
  const { dns } = configurer({}, files);
  const got = await dns.getPodDNS(pod());
  assert.deepEqual(got.searches, [
    "shop.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
    "a.example",
  ]);
});

Deno.test("DnsConfigurer.getPodDNS with no cluster domain keeps only host search domains", async () => {
  const { dns } = configurer({ clusterDomain: "" });
  const got = await dns.getPodDNS(pod());
  assert.deepEqual(got.searches, ["corp.example", "example.com"]);
  assert.deepEqual(got.servers, ["10.96.0.10"]);
});

Deno.test("DnsConfigurer.getPodDNS falls back to Default and warns without clusterDNS", async () => {
  const { dns, rec } = configurer({ clusterDNS: [], nodeRef: NODE });
  const got = await dns.getPodDNS(pod());
  assert.deepEqual(got, {
    servers: ["10.0.0.2", "10.0.0.3"],
    searches: ["corp.example", "example.com"],
    options: ["timeout:2", "rotate"],
  });
  const msg =
    'kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.';
  assert.deepEqual(rec.events, [
    { ref: NODE, type: "Warning", reason: "MissingClusterDNS", message: msg },
    {
      // client-go's GetReference: the pod's resourceVersion too (this copy of podRef lacked it).
      ref: {
        kind: "Pod",
        apiVersion: "v1",
        name: "web",
        namespace: "shop",
        uid: "uid-1",
        resourceVersion: "42",
      },
      type: "Warning",
      reason: "MissingClusterDNS",
      message: `pod: "web_shop(uid-1)". ${msg}`,
    },
  ]);
});

Deno.test("DnsConfigurer.getPodDNS gives host-network ClusterFirst pods the host's DNS", async () => {
  const { dns } = configurer();
  const host = await dns.getPodDNS(pod({ hostNetwork: true }));
  assert.deepEqual(host.servers, ["10.0.0.2", "10.0.0.3"]);
  const withHostNet = await dns.getPodDNS(
    pod({ hostNetwork: true, dnsPolicy: "ClusterFirstWithHostNet" }),
  );
  assert.deepEqual(withHostNet.servers, ["10.96.0.10"]);
  assert.deepEqual(withHostNet.options, ["ndots:5"]);
});

Deno.test("DnsConfigurer.getPodDNS gives Default pods the host resolv.conf", async () => {
  const { dns } = configurer();
  assert.deepEqual(await dns.getPodDNS(pod({ dnsPolicy: "Default" })), {
    servers: ["10.0.0.2", "10.0.0.3"],
    searches: ["corp.example", "example.com"],
    options: ["timeout:2", "rotate"],
  });
});

Deno.test("DnsConfigurer.getPodDNS treats an unknown dnsPolicy as ClusterFirst", async () => {
  const { dns } = configurer();
  const got = await dns.getPodDNS(pod({ dnsPolicy: "Bogus", hostNetwork: true }));
  assert.deepEqual(got.servers, ["10.96.0.10"]);
});

Deno.test("DnsConfigurer.getPodDNS gives None pods only their dnsConfig", async () => {
  const { dns } = configurer();
  assert.deepEqual(await dns.getPodDNS(pod({ dnsPolicy: "None" })), {
    servers: [],
    searches: [],
    options: [],
  });
  const got = await dns.getPodDNS(pod({
    dnsPolicy: "None",
    dnsConfig: {
      nameservers: ["192.0.2.1"],
      searches: ["my.example"],
      options: [{ name: "ndots", value: "2" }, { name: "edns0" }],
    },
  }));
  assert.deepEqual(got, {
    servers: ["192.0.2.1"],
    searches: ["my.example"],
    options: ["ndots:2", "edns0"],
  });
});

Deno.test("DnsConfigurer.getPodDNS merges the pod's dnsConfig into the policy's", async () => {
  const { dns } = configurer();
  const got = await dns.getPodDNS(pod({
    dnsConfig: {
      nameservers: ["10.96.0.10", "192.0.2.1"],
      searches: ["svc.cluster.local", "my.example"],
      options: [{ name: "ndots", value: "2" }, { name: "single-request" }],
    },
  }));
  assert.deepEqual(got, {
    servers: ["10.96.0.10", "192.0.2.1"],
    searches: [
      "shop.svc.cluster.local",
      "svc.cluster.local",
      "cluster.local",
      "corp.example",
      "example.com",
      "my.example",
    ],
    options: ["ndots:2", "single-request"],
  });
});

Deno.test("DnsConfigurer.getPodDNS without a resolv.conf points Default pods at localhost", async () => {
  const { dns, reads } = configurer({ resolvConf: "" });
  assert.deepEqual(await dns.getPodDNS(pod({ dnsPolicy: "Default" })), {
    servers: ["127.0.0.1"],
    searches: ["."],
    options: [],
  });
  assert.deepEqual(reads, []);
  const v6 = configurer({ resolvConf: "", nodeIPs: ["fd00::5"] }).dns;
  assert.deepEqual((await v6.getPodDNS(pod({ dnsPolicy: "Default" }))).servers, ["::1"]);
  // ClusterFirst does not use the fallback.
  const cluster = await dns.getPodDNS(pod());
  assert.deepEqual(cluster.searches, [
    "shop.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
  ]);
});

Deno.test("DnsConfigurer.getPodDNS keeps three nameservers and warns on the pod", async () => {
  const { dns, rec } = configurer();
  const got = await dns.getPodDNS(pod({
    dnsPolicy: "Default",
    dnsConfig: { nameservers: ["192.0.2.1", "192.0.2.2"] },
  }));
  assert.deepEqual(got.servers, ["10.0.0.2", "10.0.0.3", "192.0.2.1"]);
  assert.equal(rec.events.length, 1);
  assert.equal(rec.events[0]?.reason, "DNSConfigForming");
  assert.equal(rec.events[0]?.type, "Warning");
  assert.equal(
    rec.events[0]?.message,
    "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.0.0.2 10.0.0.3 192.0.2.1",
  );
});

Deno.test("DnsConfigurer.getPodDNS keeps at most 32 search domains", async () => {
  const searches = Array.from({ length: 40 }, (_, i) => `d${i}.example`);
  const { dns, rec } = configurer({ clusterDNS: [], clusterDomain: "" });
  const got = await dns.getPodDNS(pod({ dnsPolicy: "None", dnsConfig: { searches } }));
  assert.deepEqual(got.searches, searches.slice(0, 32));
  assert.deepEqual(rec.events.map((e) => e.reason), ["DNSConfigForming"]);
  assert.equal(
    rec.events[0]?.message,
    `Search Line limits were exceeded, some search paths have been omitted, the applied search line is: ${
      searches.slice(0, 32).join(" ")
    }`,
  );
});

Deno.test("DnsConfigurer.getPodDNS drops search domains longer than 253 characters", async () => {
  const long = `${"a".repeat(250)}.com`;
  const { dns, rec } = configurer();
  const got = await dns.getPodDNS(
    pod({ dnsPolicy: "None", dnsConfig: { searches: ["ok.example", long, "b.example"] } }),
  );
  assert.deepEqual(got.searches, ["ok.example", "b.example"]);
  assert.equal(rec.events[0]?.reason, "DNSConfigForming");
});

Deno.test("DnsConfigurer.getPodDNS trims the search line to 2048 characters from the end", async () => {
  // 10 domains of 250 characters: 2509 with separators; dropping two leaves 2007.
  const searches = Array.from({ length: 10 }, (_, i) => `${i}${"x".repeat(245)}.com`);
  const { dns, rec } = configurer();
  const got = await dns.getPodDNS(pod({ dnsPolicy: "None", dnsConfig: { searches } }));
  assert.deepEqual(got.searches, searches.slice(0, 8));
  assert.ok(got.searches.join(" ").length <= 2048);
  assert.equal(rec.events.length, 1);
});

Deno.test("DnsConfigurer.getPodDNS rejects when the resolv.conf cannot be read", async () => {
  const { dns, reads } = configurer({ resolvConf: "/missing/resolv.conf" });
  await assert.rejects(() => dns.getPodDNS(pod()), (err: unknown) => {
    assert.ok(err instanceof ResolvConfError);
    assert.match(err.message, /^open \/missing\/resolv\.conf: /);
    return true;
  });
  assert.deepEqual(reads, ["/missing/resolv.conf"]);
});

Deno.test("DnsConfigurer.getPodDNS rejects a resolv.conf with a bare nameserver line", async () => {
  const { dns } = configurer({}, { "/etc/resolv.conf": "nameserver\n" });
  await assert.rejects(() => dns.getPodDNS(pod()), ResolvConfError);
});

Deno.test("DnsConfigurer.checkLimitsForResolvConf warns on too many host search domains", async () => {
  const line = `search ${Array.from({ length: 30 }, (_, i) => `d${i}.example`).join(" ")}\n`;
  const { dns, rec } = configurer({ nodeRef: NODE }, { "/etc/resolv.conf": line });
  await dns.checkLimitsForResolvConf();
  assert.deepEqual(rec.events, [{
    ref: NODE,
    type: "Warning",
    reason: "CheckLimitsForResolvConf",
    message:
      "Resolv.conf file '/etc/resolv.conf' contains search line consisting of more than 29 domains!",
  }]);
  // Without a cluster domain the limit is the full 32.
  const other = configurer({ nodeRef: NODE, clusterDomain: "" }, { "/etc/resolv.conf": line });
  await other.dns.checkLimitsForResolvConf();
  assert.equal(other.rec.events.length, 0);
});

Deno.test("DnsConfigurer.checkLimitsForResolvConf warns on long host search paths", async () => {
  const long = `search ${"a".repeat(254)}\n`;
  const a = configurer({ nodeRef: NODE }, { "/etc/resolv.conf": long });
  await a.dns.checkLimitsForResolvConf();
  assert.equal(
    a.rec.events[0]?.message,
    'Resolv.conf file "/etc/resolv.conf" contains a search path which length is more than allowed 253 chars!',
  );
  const wide = `search ${
    Array.from({ length: 10 }, (_, i) => `${i}${"x".repeat(240)}`).join(" ")
  }\n`;
  const b = configurer({ nodeRef: NODE }, { "/etc/resolv.conf": wide });
  await b.dns.checkLimitsForResolvConf();
  assert.equal(
    b.rec.events[0]?.message,
    "Resolv.conf file '/etc/resolv.conf' contains search line which length is more than allowed 2048 chars!",
  );
});

Deno.test("DnsConfigurer.checkLimitsForResolvConf reports an unreadable file on the node", async () => {
  const { dns, rec } = configurer({ nodeRef: NODE, resolvConf: "/nope" });
  await dns.checkLimitsForResolvConf();
  assert.equal(rec.events.length, 1);
  assert.equal(rec.events[0]?.reason, "CheckLimitsForResolvConf");
  assert.match(rec.events[0]?.message ?? "", /^open \/nope: /);
});

Deno.test("DnsConfigurer reads a regular resolv.conf and refuses a FIFO instead of blocking on it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dns-test-" });
  try {
    const file = `${dir}/resolv.conf`;
    await Deno.writeTextFile(file, "nameserver 10.0.0.9\nsearch example.org\n");
    const { dns } = configurer({ resolvConf: file, readFile: undefined });
    const conf = await dns.getPodDNS(pod({ dnsPolicy: "Default" }));
    assert.deepEqual(conf.servers, ["10.0.0.9"]);
    assert.deepEqual(conf.searches, ["example.org"]);

    const fifo = `${dir}/fifo`;
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success, "mkfifo");
    const { dns: onFifo } = configurer({ resolvConf: fifo, readFile: undefined });
    await assert.rejects(() => onFifo.getPodDNS(pod({ dnsPolicy: "Default" })), (err: unknown) => {
      assert.ok(err instanceof ResolvConfError);
      assert.equal(err.message, `open ${fifo}: ${fifo} is not a regular file`);
      return true;
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
