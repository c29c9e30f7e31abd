/**
 * @module
 * What a consumer of plugins (the CSI volume plugin, the DRA manager) implements to receive the
 * plugins of its type that register through `<root-dir>/plugins_registry`, and the type names
 * plugins announce in their `PluginInfo`. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/cache/types.go` (PluginHandler) and the constants of
 * `k8s.io/kubelet/pkg/apis/pluginregistration/v1`.
 *
 * The plugin manager drives each socket through validate, register and (when the socket goes)
 * deregister, one call at a time per socket: a handler is never asked to deregister a plugin
 * while its registration is still running. A socket re-created with the same plugin name is a
 * new registration (usually a plugin update); only the deletion of the newest socket triggers
 * the deregistration.
 */

/** The `type` of a CSI driver's registrar (upstream pluginregistration CSIPlugin). */
export const CSI_PLUGIN = "CSIPlugin";
/** The `type` of a device plugin (registered through the device manager, not here). */
export const DEVICE_PLUGIN = "DevicePlugin";
/** The `type` of a Dynamic Resource Allocation driver (upstream DRAPlugin). */
export const DRA_PLUGIN = "DRAPlugin";

/** A consumer of one plugin type; methods may answer asynchronously. */
export interface PluginHandler {
  /** Rejects (throws) when what the plugin announces is unusable (unsupported version, ...). */
  validatePlugin(
    pluginName: string,
    endpoint: string,
    versions: readonly string[],
  ): void | Promise<void>;
  /**
   * Makes the plugin available to its consumers; a rejection is sent back to the plugin.
   * `timeoutMs` is the per-call timeout to use with the plugin, undefined for the handler's
   * default (the plugin manager passes none, as upstream's).
   */
  registerPlugin(
    pluginName: string,
    endpoint: string,
    versions: readonly string[],
    timeoutMs: number | undefined,
  ): void | Promise<void>;
  /** Called once the plugin's socket is gone (or was replaced by a newer one). */
  deRegisterPlugin(pluginName: string, endpoint: string): void | Promise<void>;
}
