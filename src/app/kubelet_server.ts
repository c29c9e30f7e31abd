/**
 * @module
 * KubeletServer (flags plus configuration) and the start-up path that upstream's
 * `cmd/kubelet/app/server.go` walks: `run` checks what must hold before anything starts, then
 * `runKubelet` names the node, creates and initialises the Kubelet and starts it (or RunOnce).
 */

import { KUBELET_OOM_SCORE_ADJ } from "../qos/qos.ts";
import { applyProcessSettings, KernelTunablesError } from "./process_settings.ts";
import type { Dependencies } from "../dependencies.ts";
import { withApiserverRecorder } from "../client/record.ts";
import { Kubelet } from "../kubelet.ts";
import type { KubeletServer } from "../apis/flags.ts";
import { checkPermissions, pathNeeds } from "../privilege/permissions.ts";
import { preInitRuntimeService, type RuntimeServices } from "../cri/runtime_service.ts";
import { KubeClient } from "../client/kube_client.ts";
import { ApiserverEventRecorder } from "../client/event_recorder.ts";
import { InFlight } from "../util/in_flight.ts";
import { loadKubeconfig, type RestConfig } from "../client/kubeconfig.ts";
import type { CertificateManager } from "../certificate/certificate_manager.ts";
import type { TLSCertificate } from "../certificate/certificate_store.ts";
import { loadClientCert, loadClientConfig } from "../certificate/bootstrap.ts";
import {
  newKubeletClientCertificateManager,
  watchClientCertificate,
} from "../certificate/kubelet.ts";
import { detectNodeIP } from "../nodestatus/node_address.ts";
import { GOARCH } from "../nodestatus/node_status.ts";
import { KUBELET_VERSION } from "../util/version.ts";
import { newKubeletMetrics } from "../metrics/metrics.ts";
import { nodeHostname, parseNodeIPs, StartError, validateKubeletFlags } from "./kubelet_flags.ts";
import { hostPath } from "../privilege/host_root.ts";
import { awaitStopped, running } from "../util/stopping.ts";

/** The User-Agent of the kubelet's API requests, in client-go's form. */
export const USER_AGENT = `kubelet/${KUBELET_VERSION} (linux/${GOARCH}) kubernetes/kubelet-ts`;

export { nodeHostname, parseNodeIPs, StartError } from "./kubelet_flags.ts";

/** Upstream's `run`: checks, then RunKubelet; resolves when the kubelet has stopped. */
export async function run(
  s: KubeletServer,
  deps: Dependencies,
  signal: AbortSignal,
): Promise<void> {
  checkPermissions(pathNeeds(s));
  const flagError = validateKubeletFlags(s.flags)[0];
  if (flagError) throw flagError;
  if (s.config.failSwapOn && await swapIsOn(deps.logger)) {
    // Upstream NewContainerManager, in the same words.
    throw new StartError(
      "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false",
    );
  }
  let clients: KubeClient[] = [];
  const background: Promise<void>[] = [];
  const stopBackground = new AbortController();
  const metrics = deps.metrics ?? newKubeletMetrics(deps.logger);
  deps = { ...deps, metrics };
  metrics.component.recordFeatureGates(s.config.featureGates);
  if (s.flags.kubeConfig !== "" && !deps.kubeClient) {
    const nodeName = nodeHostname(s.flags.hostnameOverride, deps.os.hostname);
    const built = await buildKubeletClientConfig(
      s,
      deps,
      nodeName,
      AbortSignal.any([signal, stopBackground.signal]),
    );
    background.push(...built.background);
    const kubeClient = new KubeClient({
      config: built.config,
      clientCertificate: built.clientCertificate,
      clock: deps.clock,
      qps: s.config.kubeAPIQPS,
      burst: s.config.kubeAPIBurst,
      userAgent: USER_AGENT,
      metrics: metrics.restClient,
    });
    // Upstream's heartbeat client: no throttling, and a deadline of the shorter of the status
    // period and the lease duration, so a hung request never outlives a heartbeat.
    const heartbeatClient = kubeClient.with({
      qps: -1,
      timeoutMs: Math.min(
        s.config.nodeStatusUpdateFrequency,
        s.config.nodeLeaseDurationSeconds * 1000,
      ),
    });
    clients = [kubeClient, heartbeatClient, ...built.clients];
    deps = { ...deps, kubeClient, heartbeatClient };
  }
  let services: RuntimeServices | undefined;
  if (!deps.runtimeService || !deps.imageService) {
    services = preInitRuntimeService({
      containerRuntimeEndpoint: s.config.containerRuntimeEndpoint,
      imageServiceEndpoint: s.config.imageServiceEndpoint,
      timeoutMs: s.config.runtimeRequestTimeout,
    });
    deps = {
      ...deps,
      runtimeService: services.runtimeService,
      imageService: services.imageService,
    };
  }
  // Upstream's run: the kubelet's own OOM score (the OOM killer picks it last) and open-files
  // limit, whose failures are logged; the container manager's kernel tunables, which stop the
  // start. In the sandbox the launcher has applied them already (only a process with every
  // permission may).
  if (deps.processSettings !== "launcher") {
    const settings = {
      oomScoreAdj: s.config.oomScoreAdj ?? KUBELET_OOM_SCORE_ADJ,
      maxOpenFiles: s.config.maxOpenFiles,
      protectKernelDefaults: s.config.protectKernelDefaults ?? false,
    };
    try {
      await applyProcessSettings(settings, { ...deps.processSettings, logger: deps.logger });
    } catch (e) {
      if (e instanceof KernelTunablesError) {
        deps.logger.error(e, "Failed to start ContainerManager");
      }
      throw e;
    }
  }
  background.push(metrics.runtime.run(stopBackground.signal));
  try {
    await runKubelet(s, deps, signal);
  } finally {
    stopBackground.abort();
    await Promise.allSettled(background);
    services?.close();
    for (const c of clients) c.close();
  }
}

/**
 * Whether the node has swap on: /proc/swaps lists a device (upstream swap.IsSwapOn). A missing
 * file means no swap, as upstream assumes.
 */
export async function swapIsOn(
  logger: Dependencies["logger"],
  file = hostPath("/proc/swaps"),
): Promise<boolean> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    logger.info("File does not exist, assuming that swap is disabled", { path: "/proc/swaps" });
    return false;
  }
  return text.split("\n").slice(1).some((line) => line.trim() !== "");
}

/** The apiserver connection {@link buildKubeletClientConfig} settled on. */
export interface KubeletClientConfig {
  readonly config: RestConfig;
  /** The rotating client certificate (rotateCertificates); undefined uses the kubeconfig's. */
  readonly clientCertificate?: () => TLSCertificate | undefined;
  /** Loops it started (certificate rotation and its watch); they end with the signal. */
  readonly background: Promise<void>[];
  /** Clients it made, closed when the kubelet stops. */
  readonly clients: KubeClient[];
}

/**
 * The kubelet's apiserver credentials (upstream buildKubeletClientConfig). With
 * rotateCertificates, the client certificate manager owns them: it requests a certificate in the
 * background with the bootstrap credentials when --kubeconfig has none valid, and renews it
 * before it expires. Without, a --bootstrap-kubeconfig is turned into a certificate before
 * anything else starts (loadClientCert), and --kubeconfig is used as it is.
 */
export async function buildKubeletClientConfig(
  s: KubeletServer,
  deps: Dependencies,
  nodeName: string,
  signal: AbortSignal,
): Promise<KubeletClientConfig> {
  const { flags, config } = s;
  const { logger, clock } = deps;
  if (config.rotateCertificates) {
    logger.info("Client rotation is on, will bootstrap in background");
    const { certConfig, userConfig } = await loadClientConfig({
      kubeconfig: flags.kubeConfig,
      bootstrapKubeconfig: flags.bootstrapKubeconfig,
      certDirectory: flags.certDirectory,
      clock,
      logger,
    });
    warnInsecure(logger, certConfig);
    if (userConfig !== certConfig) warnInsecure(logger, userConfig);
    const clients: KubeClient[] = [];
    const make = (config: RestConfig, cert?: () => TLSCertificate | undefined) => {
      const c = new KubeClient({
        config,
        clientCertificate: cert,
        clock,
        qps: -1,
        userAgent: USER_AGENT,
        metrics: deps.metrics?.restClient,
      });
      clients.push(c);
      return c;
    };
    let bootstrapClient: KubeClient | undefined;
    let ownClient: KubeClient | undefined;
    // Embedded certificate data (kubeadm's control plane kubeconfig) seeds the store and is
    // rotated at once; files are read by the store itself.
    const embedded = userConfig.certFile === undefined && userConfig.certPem && userConfig.keyPem
      ? { certPem: userConfig.certPem, keyPem: userConfig.keyPem }
      : undefined;
    const manager: CertificateManager = await newKubeletClientCertificateManager({
      certDirectory: flags.certDirectory,
      nodeName,
      bootstrap: embedded,
      certFile: userConfig.certFile,
      keyFile: userConfig.keyFile,
      // With a valid certificate the kubelet renews with it; else with the bootstrap credentials.
      clientFor: (current) =>
        current
          ? (ownClient ??= make(userConfig, () => manager.current()))
          : (bootstrapClient ??= make(certConfig)),
      clock,
      logger,
    });
    const clientCertificate = () => manager.current();
    const background = [
      watchClientCertificate({ manager, clock, logger, exit: (code) => Deno.exit(code), signal }),
    ];
    logger.v(2).info("Starting client certificate rotation");
    background.push(manager.run(signal));
    return { config: userConfig, clientCertificate, background, clients };
  }
  if (flags.bootstrapKubeconfig !== "") {
    await loadClientCert({
      kubeconfig: flags.kubeConfig,
      bootstrapKubeconfig: flags.bootstrapKubeconfig,
      certDirectory: flags.certDirectory,
      nodeName,
      userAgent: USER_AGENT,
      clock,
      logger,
      signal,
    });
  }
  const restConfig = await loadKubeconfig(flags.kubeConfig);
  warnInsecure(logger, restConfig);
  return { config: restConfig, background: [], clients: [] };
}

/**
 * Says that the apiserver's certificate goes unverified. client-go and the Go kubelet use such a
 * kubeconfig without a word; a node's credentials sent to an unverified server deserve one.
 */
function warnInsecure(logger: Dependencies["logger"], config: RestConfig): void {
  if (!config.insecureSkipTLSVerify) return;
  logger.warning(
    "The kubeconfig sets insecure-skip-tls-verify: the apiserver's certificate is not verified, " +
      "so anyone on the path can impersonate it",
    { kubeconfig: config.source, server: config.server },
  );
}

/** Upstream's RunKubelet: names the node, creates and initialises the Kubelet, starts it. */
export async function runKubelet(
  s: KubeletServer,
  deps: Dependencies,
  signal: AbortSignal,
): Promise<void> {
  const hostname = nodeHostname(s.flags.hostnameOverride, deps.os.hostname);
  const nodeIPs = parseNodeIPs(s.flags.nodeIP);
  if (nodeIPs.length === 0) {
    const detected = await detectNodeIP();
    if (detected) nodeIPs.push(detected);
  }
  let events: Promise<void> | undefined;
  const stopEvents = new AbortController();
  // Events wait for the CRI calls that start pods (a bounded time): see client/event_recorder.ts. With
  // no apiserver there is no event writer, and nothing to count them for.
  const startCalls = deps.kubeClient ? new InFlight() : undefined;
  if (deps.kubeClient) {
    // Upstream makeEventRecorder: events go to the apiserver, and to the log at v3.
    const apiRecorder = new ApiserverEventRecorder({
      client: deps.kubeClient.with({ qps: -1 }),
      component: "kubelet",
      host: hostname,
      qps: s.config.eventRecordQPS,
      burst: s.config.eventBurst,
      clock: deps.clock,
      logger: deps.logger,
      yieldTo: startCalls,
    });
    deps = { ...deps, recorder: withApiserverRecorder(deps.recorder, apiRecorder) };
    events = apiRecorder.run(AbortSignal.any([signal, stopEvents.signal]));
    deps.reloader?.onChange(
      ["eventRecordQPS", "eventBurst"],
      (c) => apiRecorder.setRateLimit(c.eventRecordQPS, c.eventBurst),
    );
  }
  const kubelet = new Kubelet({
    server: s,
    deps,
    nodeName: hostname,
    hostname,
    nodeIPs,
    startCalls,
  });
  try {
    await kubelet.setupDataDirs();
    if (s.flags.runOnce) {
      await kubelet.runOnce(signal);
      deps.logger.info("Started kubelet as runonce");
    } else await kubelet.run(signal);
  } finally {
    stopEvents.abort();
    const stopped = events?.catch((e) => deps.logger.error(e, "Event recorder stopped"));
    if (stopped) await awaitStopped([running("event writer", stopped)], deps);
  }
}
