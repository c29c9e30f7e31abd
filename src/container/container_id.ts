/**
 * @module
 * An API container ID (`<runtime>://<id>`, as container statuses carry it) and the runtime's own
 * ID inside it. Corresponds to upstream `pkg/kubelet/container` ContainerID.ParseString.
 */

/** The runtime's ID of an API container ID; an ID without a `<runtime>://` prefix as it is. */
export function runtimeContainerId(containerID: string): string {
  const i = containerID.indexOf("://");
  return i < 0 ? containerID : containerID.slice(i + 3);
}
