/**
 * @module
 * Events as every manager records them: the reference to the object an event is about
 * (client-go `tools/reference`: {@link ObjectRef}, {@link podRef}), the recorder interface
 * (client-go `tools/record.EventRecorder`) and the two recorders that are not the apiserver's
 * writer: standalone mode's, which only logs, and the one that feeds the apiserver's writer
 * (`event_recorder.ts`) beside a recorder a test gave. Managers import from here, never from the
 * start-up code.
 */

import type { V1ObjectMeta, V1Pod } from "@kubernetes/client-node";
import type { Logger } from "../klog/klog.ts";

/** A reference to the object an event is about (upstream `v1.ObjectReference`, trimmed). */
export interface ObjectRef {
  readonly kind: string;
  readonly name: string;
  readonly namespace?: string;
  readonly uid?: string;
  /** @default "v1" */
  readonly apiVersion?: string;
  readonly resourceVersion?: string;
  /** The part of the object, such as `spec.containers{app}` (upstream container references). */
  readonly fieldPath?: string;
}

/**
 * The kubelet's reference to its Node (upstream's kl.nodeRef): apiVersion v1, kind Node and the
 * node's name; no namespace and no uid, so `kubectl describe node` finds every event of it.
 */
export function nodeRef(nodeName: string): ObjectRef {
  return { apiVersion: "v1", kind: "Node", name: nodeName };
}

/**
 * The reference to a core/v1 object, as client-go's `reference.GetReference` makes it from the
 * scheme: its kind, apiVersion `v1`, and its name, namespace, uid and resourceVersion.
 */
export function objectRef(
  kind: string,
  obj: { metadata?: V1ObjectMeta | undefined },
): ObjectRef {
  const m = obj.metadata;
  return {
    kind,
    apiVersion: "v1",
    name: m?.name ?? "",
    namespace: m?.namespace,
    uid: m?.uid,
    resourceVersion: m?.resourceVersion,
  };
}

/** The reference to a pod ({@link objectRef} of kind `Pod`). */
export function podRef(pod: V1Pod): ObjectRef {
  return objectRef("Pod", pod);
}

/** Records events (upstream `record.EventRecorder`). */
export interface EventRecorder {
  event(object: ObjectRef, type: "Normal" | "Warning", reason: string, message: string): void;
}

/** The recorders {@link loggingRecorder} made. */
const LOGGING_ONLY = new WeakSet<EventRecorder>();

/**
 * The recorder of standalone mode: with no apiserver to post to, upstream's broadcaster only
 * logs events, at verbosity 3; so does this one.
 */
export function loggingRecorder(logger: Logger): EventRecorder {
  const recorder: EventRecorder = {
    event(object, type, reason, message) {
      logger.v(3).info("Event occurred", {
        object: object.namespace ? `${object.namespace}/${object.name}` : object.name,
        kind: object.kind,
        type,
        reason,
        message,
      });
    },
  };
  LOGGING_ONLY.add(recorder);
  return recorder;
}

/**
 * The recorder of API server mode: events go to `api`, which writes them to the apiserver and
 * logs each at v3 as upstream's broadcaster does, and to `given` (the dependencies' recorder,
 * e.g. a test's) unless that is a {@link loggingRecorder}, whose line would repeat api's.
 */
export function withApiserverRecorder(given: EventRecorder, api: EventRecorder): EventRecorder {
  if (LOGGING_ONLY.has(given)) return api;
  return {
    event(object, type, reason, message) {
      given.event(object, type, reason, message);
      api.event(object, type, reason, message);
    },
  };
}
