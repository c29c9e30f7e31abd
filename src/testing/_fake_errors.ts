/**
 * @module
 * How the fake CRI runtime fails: {@link FakeRuntimeError} carries the gRPC code the server
 * answers with and containerd's wording of the description. Private to the `fake_*` modules;
 * `fake_runtime_service.ts` re-exports the class.
 */

import { GrpcCode } from "../cri/connection.ts";

/** A failed fake RPC: the gRPC code and the description the client sees. */
export class FakeRuntimeError extends Error {
  override name = "FakeRuntimeError";
  constructor(readonly code: GrpcCode, message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** containerd's errdefs.ErrNotFound wrapped in `what`. */
export const notFound = (what: string): FakeRuntimeError =>
  new FakeRuntimeError(GrpcCode.NOT_FOUND, `${what}: not found`);

/** An object in the wrong state for the call, e.g. starting a running container. */
export const precondition = (message: string): FakeRuntimeError =>
  new FakeRuntimeError(GrpcCode.FAILED_PRECONDITION, message);

export const invalid = (message: string): FakeRuntimeError =>
  new FakeRuntimeError(GrpcCode.INVALID_ARGUMENT, message);

/** An error containerd returns without an errdefs class, which gRPC reports as Unknown. */
export const unknown = (message: string): FakeRuntimeError =>
  new FakeRuntimeError(GrpcCode.UNKNOWN, message);
