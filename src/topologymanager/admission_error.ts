/**
 * @module
 * Errors that become a pod's admission verdict: an {@link AdmissionError} names its own reason
 * (the topology manager's TopologyAffinityError, a CPU manager's SMTAlignmentError, ...); any
 * other error a hint provider throws while allocating is UnexpectedAdmissionError, "Allocate
 * failed due to ..., which is unexpected". Corresponds to upstream
 * `pkg/kubelet/cm/admission/errors.go` and the TopologyAffinityError of
 * `pkg/kubelet/cm/topologymanager/topology_manager.go`.
 */

import { errorText } from "../util/errors.ts";

/** The reason of an error that is not an {@link AdmissionError} (upstream ErrorReasonUnexpected). */
export const UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError";
/** The reason of a pod whose resources cannot be aligned (upstream ErrorTopologyAffinity). */
export const TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError";

/** An error that carries the reason its pod is rejected with (upstream admission.Error). */
export interface AdmissionError extends Error {
  /** The pod's status reason (upstream Type()). */
  readonly admissionReason: string;
}

/** Whether `e` is an {@link AdmissionError}. */
export function isAdmissionError(e: unknown): e is AdmissionError {
  return e instanceof Error && typeof (e as { admissionReason?: unknown }).admissionReason ===
      "string";
}

/** The policy could not align the pod's resources; the message is upstream's. */
export class TopologyAffinityError extends Error implements AdmissionError {
  override name = "TopologyAffinityError";
  readonly admissionReason = TOPOLOGY_AFFINITY_ERROR;
  constructor() {
    super("Resources cannot be allocated with Topology locality");
  }
}

/** An admission verdict (upstream lifecycle.PodAdmitResult). */
export type PodAdmitResult =
  | { readonly admit: true }
  | { readonly admit: false; readonly reason: string; readonly message: string };

/**
 * The verdict for `err` (upstream GetPodAdmitResult): admitted without one; else the first
 * {@link AdmissionError} along its `cause` chain gives reason and message (as Go's errors.As
 * unwraps); else UnexpectedAdmissionError.
 */
export function getPodAdmitResult(err?: unknown): PodAdmitResult {
  if (err === undefined || err === null) return { admit: true };
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 32; depth++) {
    if (isAdmissionError(e)) return { admit: false, reason: e.admissionReason, message: e.message };
    e = e instanceof Error ? e.cause : undefined;
  }
  return {
    admit: false,
    reason: UNEXPECTED_ADMISSION_ERROR,
    message: `Allocate failed due to ${errorText(err)}, which is unexpected`,
  };
}
