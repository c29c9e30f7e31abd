import assert from "node:assert/strict";
import { type EventRecorder, loggingRecorder, podRef, withApiserverRecorder } from "./record.ts";
import { createLogger } from "../klog/klog.ts";

Deno.test("podRef carries kind, apiVersion, name, namespace, uid and resourceVersion", () => {
  // The five copies this replaced disagreed: two left out apiVersion's value on the wire or
  // resourceVersion, so events about one pod named different involvedObjects.
  const pod = { metadata: { name: "web", namespace: "shop", uid: "u-1", resourceVersion: "42" } };
  assert.deepEqual(podRef(pod), {
    kind: "Pod",
    apiVersion: "v1",
    name: "web",
    namespace: "shop",
    uid: "u-1",
    resourceVersion: "42",
  });
  assert.deepEqual(podRef({}), {
    kind: "Pod",
    apiVersion: "v1",
    name: "",
    namespace: undefined,
    uid: undefined,
    resourceVersion: undefined,
  });
});

Deno.test("loggingRecorder logs each event at v3 as upstream's broadcaster", () => {
  const lines: string[] = [];
  const logger = createLogger({ verbosity: 3, write: (l) => lines.push(l) });
  loggingRecorder(logger).event(
    podRef({ metadata: { name: "web", namespace: "shop" } }),
    "Normal",
    "Pulled",
    "ok",
  );
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /"Event occurred" object="shop\/web" kind="Pod" type="Normal" reason="Pulled" message="ok"/,
  );
  const quiet: string[] = [];
  loggingRecorder(createLogger({ verbosity: 2, write: (l) => quiet.push(l) }))
    .event(podRef({}), "Normal", "Pulled", "ok");
  assert.deepEqual(quiet, []);
});

Deno.test("withApiserverRecorder drops a logging recorder and keeps a given one", () => {
  const api: string[] = [];
  const given: string[] = [];
  const apiRecorder: EventRecorder = { event: (_o, _t, reason) => api.push(reason) };
  const logging = loggingRecorder(createLogger({ write: () => {} }));
  assert.equal(withApiserverRecorder(logging, apiRecorder), apiRecorder);
  const both = withApiserverRecorder({ event: (_o, _t, r) => given.push(r) }, apiRecorder);
  both.event(podRef({}), "Warning", "Failed", "x");
  assert.deepEqual([api, given], [["Failed"], ["Failed"]]);
});
