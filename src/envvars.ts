/**
 * @module
 * Service link environment variables: for each Service a container may see, the Docker-link
 * style `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT[_<PORTNAME>]`, `<NAME>_PORT` and
 * `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`. Which Services: those of the pod's namespace
 * when `enableServiceLinks` is on, and always the master `kubernetes` Service. Reads a
 * {@link ServiceSource} (`client/service_lister.ts`); called by `kubelet_env.ts`, which gives these
 * variables the lowest precedence. Corresponds to upstream `pkg/kubelet/envvars` (FromServices),
 * `kubelet_pods.go` (getServiceEnvVarMap) and `v1helper.IsServiceIPSet`.
 */

import type { V1Service } from "@kubernetes/client-node";
import type { EnvVar } from "./kuberuntime/expansion.ts";

/** Where Services come from (upstream's serviceLister and serviceHasSynced). */
export interface ServiceSource {
  /** The Services of `namespace`, or of every namespace. */
  list(namespace?: string): readonly V1Service[];
  /** True once the Services have been listed at least once. */
  hasSynced(): boolean;
}

/** The namespace of the master services (upstream metav1.NamespaceDefault). */
export const DEFAULT_MASTER_SERVICE_NAMESPACE = "default";

/** Services whose variables every pod gets (upstream masterServices). */
const MASTER_SERVICES = new Set(["kubernetes"]);

/** Whether the Service has a cluster IP: neither empty nor "None" (upstream IsServiceIPSet). */
export function isServiceIPSet(service: V1Service): boolean {
  const ip = service.spec?.clusterIP ?? "";
  return ip !== "" && ip !== "None";
}

/**
 * The variables of the Services a pod in `namespace` sees, by name (upstream
 * getServiceEnvVarMap): with `enableServiceLinks` every Service of the namespace that has a
 * cluster IP, and always the master Services of `masterNamespace` unless the pod's namespace
 * has a Service of the same name.
 */
export function serviceEnvVarMap(
  services: ServiceSource,
  namespace: string,
  enableServiceLinks: boolean,
  masterNamespace: string = DEFAULT_MASTER_SERVICE_NAMESPACE,
): Map<string, string> {
  const byName = new Map<string, V1Service>();
  if (enableServiceLinks) {
    for (const s of services.list(namespace)) {
      if (isServiceIPSet(s)) byName.set(s.metadata?.name ?? "", s);
    }
  }
  for (const s of services.list(masterNamespace)) {
    const name = s.metadata?.name ?? "";
    if (MASTER_SERVICES.has(name) && isServiceIPSet(s) && !byName.has(name)) byName.set(name, s);
  }
  // Upstream walks a Go map, in no fixed order; by name, the environment is reproducible.
  const ordered = [...byName].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, s]) => s);
  return new Map(fromServices(ordered).map((e) => [e.name, e.value]));
}

/** The link variables of each Service that has a cluster IP, in order (upstream FromServices). */
export function fromServices(services: readonly V1Service[]): EnvVar[] {
  const out: EnvVar[] = [];
  for (const service of services) {
    if (!isServiceIPSet(service)) continue;
    const prefix = envVariableName(service.metadata?.name ?? "");
    const clusterIP = service.spec?.clusterIP ?? "";
    const ports = service.spec?.ports ?? [];
    out.push({ name: `${prefix}_SERVICE_HOST`, value: clusterIP });
    const first = ports[0];
    // A Service with a cluster IP has at least one port (API validation); upstream indexes
    // Ports[0] unguarded.
    if (first === undefined) continue;
    const portName = `${prefix}_SERVICE_PORT`;
    out.push({ name: portName, value: String(first.port) });
    // Only the first port may be unnamed (API validation).
    for (const p of ports) {
      if (p.name) {
        out.push({ name: `${portName}_${envVariableName(p.name)}`, value: String(p.port) });
      }
    }
    out.push(...linkVariables(prefix, clusterIP, ports));
  }
  return out;
}

/** Upper case, `-` to `_` (upstream makeEnvVariableName; names are DNS-1035 labels). */
function envVariableName(name: string): string {
  return name.replaceAll("-", "_").toUpperCase();
}

/** The Docker link variables (upstream makeLinkVariables). */
function linkVariables(
  prefix: string,
  clusterIP: string,
  ports: readonly { port: number; protocol?: string }[],
): EnvVar[] {
  const out: EnvVar[] = [];
  ports.forEach((p, i) => {
    const protocol = p.protocol || "TCP";
    const proto = protocol.toLowerCase();
    const url = `${proto}://${joinHostPort(clusterIP, p.port)}`;
    // Docker special-cases the first port.
    if (i === 0) out.push({ name: `${prefix}_PORT`, value: url });
    const portPrefix = `${prefix}_PORT_${p.port}_${protocol.toUpperCase()}`;
    out.push(
      { name: portPrefix, value: url },
      { name: `${portPrefix}_PROTO`, value: proto },
      { name: `${portPrefix}_PORT`, value: String(p.port) },
      { name: `${portPrefix}_ADDR`, value: clusterIP },
    );
  });
  return out;
}

/** Go's net.JoinHostPort: an IPv6 address (any host with a colon) in brackets. */
function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
