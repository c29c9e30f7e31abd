import assert from "node:assert/strict";
import type { V1Service, V1ServicePort } from "@kubernetes/client-node";
import { fromServices, isServiceIPSet, serviceEnvVarMap, type ServiceSource } from "./envvars.ts";

function svc(namespace: string, name: string, clusterIP: string, ports: V1ServicePort[] = [{
  port: 80,
}]): V1Service {
  return { metadata: { namespace, name }, spec: { clusterIP, ports } };
}

function source(services: V1Service[]): ServiceSource {
  return {
    list: (ns) => services.filter((s) => ns === undefined || s.metadata?.namespace === ns),
    hasSynced: () => true,
  };
}

const KUBERNETES = svc("default", "kubernetes", "10.96.0.1", [
  { name: "https", port: 443, protocol: "TCP" },
]);

Deno.test("fromServices names every variable as upstream FromServices", () => {
  const env = fromServices([
    svc("prod", "my-db", "10.0.0.7", [
      { name: "sql", port: 5432 },
      { name: "metrics-port", port: 9187, protocol: "UDP" },
    ]),
  ]);
  assert.deepEqual(env, [
    { name: "MY_DB_SERVICE_HOST", value: "10.0.0.7" },
    { name: "MY_DB_SERVICE_PORT", value: "5432" },
    { name: "MY_DB_SERVICE_PORT_SQL", value: "5432" },
    { name: "MY_DB_SERVICE_PORT_METRICS_PORT", value: "9187" },
    { name: "MY_DB_PORT", value: "tcp://10.0.0.7:5432" },
    { name: "MY_DB_PORT_5432_TCP", value: "tcp://10.0.0.7:5432" },
    { name: "MY_DB_PORT_5432_TCP_PROTO", value: "tcp" },
    { name: "MY_DB_PORT_5432_TCP_PORT", value: "5432" },
    { name: "MY_DB_PORT_5432_TCP_ADDR", value: "10.0.0.7" },
    { name: "MY_DB_PORT_9187_UDP", value: "udp://10.0.0.7:9187" },
    { name: "MY_DB_PORT_9187_UDP_PROTO", value: "udp" },
    { name: "MY_DB_PORT_9187_UDP_PORT", value: "9187" },
    { name: "MY_DB_PORT_9187_UDP_ADDR", value: "10.0.0.7" },
  ]);
});

Deno.test("fromServices brackets an IPv6 cluster IP in URLs only", () => {
  const env = Object.fromEntries(
    fromServices([svc("prod", "web", "fd00::10", [{ port: 8080, protocol: "SCTP" }])])
      .map((e) => [e.name, e.value]),
  );
  assert.deepEqual(env, {
    WEB_SERVICE_HOST: "fd00::10",
    WEB_SERVICE_PORT: "8080",
    WEB_PORT: "sctp://[fd00::10]:8080",
    WEB_PORT_8080_SCTP: "sctp://[fd00::10]:8080",
    WEB_PORT_8080_SCTP_PROTO: "sctp",
    WEB_PORT_8080_SCTP_PORT: "8080",
    WEB_PORT_8080_SCTP_ADDR: "fd00::10",
  });
});

Deno.test("isServiceIPSet rejects headless and IP-less services", () => {
  assert.equal(isServiceIPSet(svc("a", "b", "10.0.0.1")), true);
  assert.equal(isServiceIPSet(svc("a", "b", "None")), false);
  assert.equal(isServiceIPSet(svc("a", "b", "")), false);
  assert.equal(isServiceIPSet({ metadata: { name: "x" } }), false);
  assert.deepEqual(fromServices([svc("a", "b", "None"), svc("a", "c", "")]), []);
});

Deno.test("serviceEnvVarMap takes the pod's namespace and the master kubernetes service", () => {
  const services = source([
    KUBERNETES,
    svc("default", "other", "10.96.0.9"),
    svc("prod", "api", "10.0.0.2"),
    svc("prod", "headless", "None"),
    svc("prod", "external", ""),
    svc("dev", "api", "10.1.0.2"),
  ]);
  const env = serviceEnvVarMap(services, "prod", true);
  assert.equal(env.get("API_SERVICE_HOST"), "10.0.0.2");
  assert.equal(env.get("KUBERNETES_SERVICE_HOST"), "10.96.0.1");
  assert.equal(env.get("KUBERNETES_SERVICE_PORT_HTTPS"), "443");
  assert.equal(env.has("OTHER_SERVICE_HOST"), false);
  assert.equal(env.has("HEADLESS_SERVICE_HOST"), false);
  assert.equal(env.has("EXTERNAL_SERVICE_HOST"), false);
  // Services sorted by name, each service's variables in FromServices order.
  assert.deepEqual([...env.keys()].filter((k) => k.endsWith("_SERVICE_HOST")), [
    "API_SERVICE_HOST",
    "KUBERNETES_SERVICE_HOST",
  ]);
});

Deno.test("serviceEnvVarMap without service links keeps only the master kubernetes service", () => {
  const services = source([KUBERNETES, svc("prod", "api", "10.0.0.2")]);
  const env = serviceEnvVarMap(services, "prod", false);
  assert.deepEqual([...env.keys()].filter((k) => k.endsWith("_SERVICE_HOST")), [
    "KUBERNETES_SERVICE_HOST",
  ]);
  // In the master namespace itself, the switch still hides the other services.
  const inDefault = serviceEnvVarMap(
    source([KUBERNETES, svc("default", "other", "10.96.0.9")]),
    "default",
    false,
  );
  assert.equal(inDefault.has("OTHER_SERVICE_HOST"), false);
  assert.equal(inDefault.get("KUBERNETES_SERVICE_HOST"), "10.96.0.1");
});

Deno.test("serviceEnvVarMap lets the pod's own kubernetes service win over the master one", () => {
  const services = source([KUBERNETES, svc("prod", "kubernetes", "10.0.0.99")]);
  assert.equal(
    serviceEnvVarMap(services, "prod", true).get("KUBERNETES_SERVICE_HOST"),
    "10.0.0.99",
  );
  assert.equal(
    serviceEnvVarMap(services, "prod", false).get("KUBERNETES_SERVICE_HOST"),
    "10.96.0.1",
  );
  // A headless kubernetes service of the pod's namespace does not hide the master one.
  const headless = source([KUBERNETES, svc("prod", "kubernetes", "None")]);
  assert.equal(
    serviceEnvVarMap(headless, "prod", true).get("KUBERNETES_SERVICE_HOST"),
    "10.96.0.1",
  );
});

Deno.test("serviceEnvVarMap reads the master service from the configured namespace", () => {
  const services = source([KUBERNETES, svc("kube-system", "kubernetes", "10.200.0.1")]);
  assert.equal(
    serviceEnvVarMap(services, "prod", false, "kube-system").get("KUBERNETES_SERVICE_HOST"),
    "10.200.0.1",
  );
  assert.equal(
    serviceEnvVarMap(source([]), "prod", true).size,
    0,
  );
});
