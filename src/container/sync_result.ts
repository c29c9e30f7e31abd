/**
 * @module
 * What one SyncPod attempt did and how each step ended: one {@link SyncResult} per action on a
 * container or sandbox, gathered into a {@link PodSyncResult}. The status generator reads the
 * failed steps as container waiting reasons (CrashLoopBackOff, ErrImagePull, ...), through the
 * reason cache. Corresponds to upstream `pkg/kubelet/container/sync_result.go`.
 */

/** The action a step took (upstream SyncAction). */
export type SyncAction =
  | "StartContainer"
  | "KillContainer"
  | "RemoveContainer"
  | "InitContainer"
  | "CreatePodSandbox"
  | "ConfigPodSandbox"
  | "KillPodSandbox"
  | "ResizePodInPlace";

/**
 * Why a step failed, as upstream's error values; they become the waiting reason of the
 * container they are about.
 */
export type SyncErrorReason =
  | "CrashLoopBackOff"
  | "ContainerNotFound"
  | "RunContainerError"
  | "KillContainerError"
  | "RemoveContainerError"
  | "CreatePodSandboxError"
  | "ConfigPodSandboxError"
  | "KillPodSandboxError"
  | "RunInitContainerError"
  | "CreateContainerConfigError"
  | "PreCreateHookError"
  | "CreateContainerError"
  | "PreStartHookError"
  | "PostStartHookError"
  | "ErrImagePull"
  | "ImagePullBackOff"
  | "ErrImageNeverPull"
  | "InvalidImageName"
  | "ImageInspectError"
  | "ResizePodInPlaceError";

/** One step of a sync: `target` is the container name, or the pod's full name for sandboxes. */
export interface SyncResult {
  readonly action: SyncAction;
  readonly target: string;
  /** Set when the step failed. */
  error?: SyncErrorReason;
  /** Upstream's message for the failure, shown as the waiting message. */
  message?: string;
  /**
   * For a step in back-off (CrashLoopBackOff, ImagePullBackOff): milliseconds until it may be
   * tried again, so the pod is synced then rather than at the next periodic resync.
   */
  retryAfterMs?: number;
}

/** Every step of one SyncPod or KillPod, plus an error that is about none of them. */
export class PodSyncResult {
  readonly results: SyncResult[] = [];
  /** An error of the attempt as a whole (such as reading secrets); undefined when none. */
  syncError: Error | undefined;

  /** Starts recording a step and returns it, to be failed with {@link fail} if it goes wrong. */
  add(action: SyncAction, target: string): SyncResult {
    const r: SyncResult = { action, target };
    this.results.push(r);
    return r;
  }

  /** Takes on another attempt's steps and error. */
  addPodSyncResult(other: PodSyncResult): void {
    this.results.push(...other.results);
    this.syncError ??= other.syncError;
  }

  /** The shortest back-off wait among the steps, undefined when none is backing off. */
  retryAfterMs(): number | undefined {
    const waits = this.results.flatMap((r) => r.retryAfterMs === undefined ? [] : [r.retryAfterMs]);
    return waits.length === 0 ? undefined : Math.min(...waits);
  }

  /** The first failure, as one error, or undefined when every step succeeded. */
  error(): Error | undefined {
    if (this.syncError) return this.syncError;
    const failed = this.results.filter((r) => r.error !== undefined);
    if (failed.length === 0) return undefined;
    return new SyncError(failed);
  }
}

/** Marks a step failed. */
export function fail(r: SyncResult, error: SyncErrorReason, message: string): void {
  r.error = error;
  r.message = message;
}

/** The failed steps of a sync, as one error (upstream utilerrors.NewAggregate of SyncResults). */
export class SyncError extends Error {
  override name = "SyncError";
  constructor(readonly failed: readonly SyncResult[]) {
    super(
      failed.map((r) =>
        `failed to "${r.action}" for "${r.target}" with ${r.error}: "${r.message ?? ""}"`
      )
        .join(", "),
    );
  }
}
