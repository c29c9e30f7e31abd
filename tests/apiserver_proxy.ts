/**
 * @module
 * A fault-injecting HTTPS proxy in front of the test control plane's kube-apiserver, for one
 * client identity: it serves with the apiserver's own certificate (so a kubeconfig pointing at
 * it verifies as the real one does), forwards every request with that client's certificate and
 * streams the answer back, watches included. While {@link ApiserverProxy.expireWatches} is on,
 * a pod watch is sent on with `resourceVersion=1`, which the apiserver has long compacted, so
 * the client gets the apiserver's own "too old resource version" (410 Gone / Expired) answer.
 * It counts the pod lists and watches it forwards. Upstream's node e2e tests have no such proxy;
 * client-go's reflector tests fake the watch instead.
 */

import type { ControlPlane } from "./control_plane.ts";
import { freePort } from "./child_process.ts";
import { writeKubeconfig } from "./pki.ts";

/** A running proxy started by {@link startApiserverProxy}. */
export interface ApiserverProxy extends AsyncDisposable {
  /** `https://127.0.0.1:<port>`. */
  readonly server: string;
  /** A kubeconfig of the node through the proxy. */
  readonly kubeconfig: string;
  /**
   * From now on, pod watches are sent on from a compacted resourceVersion; the pod watches
   * already open are cut, so the client has to watch again.
   */
  expireWatches(): void;
  /** Pod lists and watches forwarded so far, and how many of those watches were expired. */
  readonly counts: { podLists: number; podWatches: number; expiredWatches: number };
  /** The status of each expired watch's answer and the start of its body, as seen. */
  readonly expiredAnswers: string[];
  close(): Promise<void>;
}

/** Starts a proxy for node `nodeName` of `cp`; its kubeconfig is written beside `dir`. */
export async function startApiserverProxy(
  cp: ControlPlane,
  nodeName: string,
  dir: string,
): Promise<ApiserverProxy> {
  const pair = cp.pki.nodes.get(nodeName);
  if (!pair) throw new Error(`startApiserverProxy: no certificate for node '${nodeName}'`);
  const files = [cp.pki.ca.cert, pair.cert, pair.key, cp.pki.apiserver.cert, cp.pki.apiserver.key];
  const [caCert, cert, key, serverCert, serverKey] = await Promise.all(
    files.map((f) => Deno.readTextFile(f)),
  ) as [string, string, string, string, string];
  const client = Deno.createHttpClient({ caCerts: [caCert], cert, key });
  const port = freePort();
  const counts = { podLists: 0, podWatches: 0, expiredWatches: 0 };
  const expiredAnswers: string[] = [];
  let expiring = false;
  const openWatches = new Set<AbortController>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port, cert: serverCert, key: serverKey, onListen: () => {} },
    async (req) => {
      const url = new URL(req.url);
      const target = new URL(url.pathname + url.search, cp.server);
      const isPods = /^\/api\/v1\/pods\/?$/.test(url.pathname);
      const watching = url.searchParams.get("watch") === "true";
      let expired = false;
      const cut = new AbortController();
      if (isPods && watching) {
        counts.podWatches++;
        openWatches.add(cut);
        if (expiring) {
          target.searchParams.set("resourceVersion", "1");
          counts.expiredWatches++;
          expired = true;
        }
      } else if (isPods && req.method === "GET") counts.podLists++;
      const headers = new Headers(req.headers);
      headers.delete("host");
      // Bodies pass through as they are: no compression to undo and length to keep right.
      headers.delete("accept-encoding");
      try {
        const res = await fetch(target, {
          method: req.method,
          headers,
          body: req.body,
          client,
          signal: cut.signal,
          // Not req.signal: Deno.serve aborts it once the answer's headers are out, which
          // would cut a streamed list or watch short. A proxied watch ends with its timeout.
        });
        const out = new Headers(res.headers);
        for (const h of ["content-encoding", "content-length", "transfer-encoding"]) out.delete(h);
        let first = expired;
        const body = res.body?.pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(chunk, ctl) {
              if (first) {
                first = false;
                expiredAnswers.push(
                  `${res.status} ${new TextDecoder().decode(chunk).slice(0, 300)}`,
                );
              }
              ctl.enqueue(chunk);
            },
            flush: () => void openWatches.delete(cut),
          }),
        );
        return new Response(body, { status: res.status, headers: out });
      } catch (e) {
        openWatches.delete(cut);
        return new Response(`test proxy: the apiserver did not answer: ${e}`, { status: 503 });
      }
    },
  );
  const kubeconfig = await writeKubeconfig({
    path: `${dir}/kubelet-proxied.conf`,
    server: `https://127.0.0.1:${port}`,
    caFile: cp.pki.ca.cert,
    certFile: pair.cert,
    keyFile: pair.key,
    user: `system:node:${nodeName}`,
  });
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      for (const c of openWatches) c.abort();
      await server.shutdown();
      client.close();
    })();
    return closing;
  };
  return {
    expireWatches() {
      expiring = true;
      for (const c of openWatches) c.abort(new Error("test proxy: watch cut to expire it"));
      openWatches.clear();
    },
    server: `https://127.0.0.1:${port}`,
    kubeconfig,
    counts,
    expiredAnswers,
    close,
    [Symbol.asyncDispose]: close,
  };
}
