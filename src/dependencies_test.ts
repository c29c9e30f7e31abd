import assert from "node:assert/strict";
import { type EventRecorder, loggingRecorder, withApiserverRecorder } from "./client/record.ts";
import { createLogger } from "./klog/klog.ts";

const POD = { kind: "Pod", namespace: "default", name: "web", uid: "u1" };

function counting(): EventRecorder & { reasons: string[] } {
  const reasons: string[] = [];
  return { reasons, event: (_o, _t, reason) => void reasons.push(reason) };
}

Deno.test("withApiserverRecorder: the default logging recorder is not asked too, so each event is logged once", () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => void lines.push(l), pid: 1, verbosity: 3 });
  const api = counting();
  const recorder = withApiserverRecorder(loggingRecorder(logger), api);
  recorder.event(POD, "Normal", "Pulled", "image present");
  assert.deepEqual(api.reasons, ["Pulled"]);
  assert.equal(lines.filter((l) => l.includes('"Event occurred"')).length, 0, lines.join("\n"));
});

Deno.test("withApiserverRecorder: a recorder the dependencies were given gets every event too", () => {
  const given = counting();
  const api = counting();
  const recorder = withApiserverRecorder(given, api);
  recorder.event(POD, "Warning", "BackOff", "restarting");
  recorder.event(POD, "Normal", "Started", "started");
  assert.deepEqual(given.reasons, ["BackOff", "Started"]);
  assert.deepEqual(api.reasons, ["BackOff", "Started"]);
});
