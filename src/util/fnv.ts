/**
 * @module
 * FNV-1a, 32 bits: Go's `hash/fnv.New32a`, which upstream's container hash and checkpoint
 * checksums use; also the CRI client's key for list entries it has decoded before.
 */

/** FNV-1a, 32 bits, of `bytes`. */
export function fnv1a32(bytes: Uint8Array): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193);
  return hash >>> 0;
}
