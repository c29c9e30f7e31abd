/**
 * @module
 * The NUMA node sets that topology hints carry: a 64-bit mask, one bit per NUMA node id, with
 * the comparisons the hint merger ranks them by (narrower = fewer nodes, then the mask with the
 * lower-numbered nodes) and {@link iterateBitMasks}, which hint providers use to enumerate every
 * combination of nodes. Masks are immutable values here (upstream's `Add`, `And`, ... mutate in
 * place): every operation returns a new mask. Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/bitmask/bitmask.go`.
 */

/** Bits a mask holds: NUMA node ids 0 to 63. */
export const MASK_BITS = 64;

const ALL = (1n << BigInt(MASK_BITS)) - 1n;

/** A bit number outside 0-63; the message is upstream's. */
export class BitMaskRangeError extends RangeError {
  override name = "BitMaskRangeError";
  constructor(readonly bit: number) {
    super("bit number must be in range 0-63");
  }
}

function bitOf(i: number): bigint {
  if (!Number.isInteger(i) || i < 0 || i >= MASK_BITS) throw new BitMaskRangeError(i);
  return 1n << BigInt(i);
}

function popCount(v: bigint): number {
  let n = 0;
  for (let x = v; x !== 0n; x &= x - 1n) n++;
  return n;
}

/** A set of NUMA node ids (upstream bitmask.BitMask). */
export class BitMask {
  readonly #value: bigint;
  readonly #count: number;

  private constructor(value: bigint) {
    this.#value = value & ALL;
    this.#count = popCount(this.#value);
  }

  /** The mask with no bit set (upstream NewEmptyBitMask). */
  static empty(): BitMask {
    return new BitMask(0n);
  }

  /** The mask with all 64 bits set (upstream Fill). */
  static filled(): BitMask {
    return new BitMask(ALL);
  }

  /** The mask with these bits set (upstream NewBitMask); throws {@link BitMaskRangeError}. */
  static of(...bits: readonly number[]): BitMask {
    return new BitMask(0n).add(...bits);
  }

  /** This mask with `bits` set as well; throws {@link BitMaskRangeError}. */
  add(...bits: readonly number[]): BitMask {
    let v = this.#value;
    for (const b of bits) v |= bitOf(b);
    return new BitMask(v);
  }

  /** This mask with `bits` cleared; throws {@link BitMaskRangeError}. */
  remove(...bits: readonly number[]): BitMask {
    let v = this.#value;
    for (const b of bits) v &= ~bitOf(b);
    return new BitMask(v);
  }

  /** The bits set in this mask and in every one of `masks`. */
  and(...masks: readonly BitMask[]): BitMask {
    let v = this.#value;
    for (const m of masks) v &= m.#value;
    return new BitMask(v);
  }

  /** The bits set in this mask or in any of `masks`. */
  or(...masks: readonly BitMask[]): BitMask {
    let v = this.#value;
    for (const m of masks) v |= m.#value;
    return new BitMask(v);
  }

  /** Whether both masks have the same bits set. */
  isEqual(mask: BitMask): boolean {
    return this.#value === mask.#value;
  }

  /** Whether no bit is set. */
  isEmpty(): boolean {
    return this.#value === 0n;
  }

  /** Whether `bit` is set; false for a bit outside 0-63. */
  isSet(bit: number): boolean {
    if (!Number.isInteger(bit) || bit < 0 || bit >= MASK_BITS) return false;
    return (this.#value & (1n << BigInt(bit))) !== 0n;
  }

  /** Whether any of `bits` is set. */
  anySet(bits: readonly number[]): boolean {
    return bits.some((b) => this.isSet(b));
  }

  /**
   * Whether this mask has fewer bits set than `mask`, or as many and a lower value (more of
   * the lower-numbered nodes).
   */
  isNarrowerThan(mask: BitMask): boolean {
    if (this.#count === mask.#count) return this.isLessThan(mask);
    return this.#count < mask.#count;
  }

  /** Whether this mask's value, as an unsigned 64-bit number, is below `mask`'s. */
  isLessThan(mask: BitMask): boolean {
    return this.#value < mask.#value;
  }

  /** Whether this mask's value, as an unsigned 64-bit number, is above `mask`'s. */
  isGreaterThan(mask: BitMask): boolean {
    return this.#value > mask.#value;
  }

  /** How many bits are set. */
  count(): number {
    return this.#count;
  }

  /** The set bits, lowest first. */
  getBits(): number[] {
    const out: number[] = [];
    for (let i = 0; i < MASK_BITS; i++) if (this.isSet(i)) out.push(i);
    return out;
  }

  /**
   * Binary, highest bit first, zero-padded to an even width: "00", "01", "0110" (upstream
   * String, which is what its logs show).
   */
  toString(): string {
    const digits = this.#value.toString(2);
    // Upstream picks the width as the first even shift below which the value lies, comparing
    // with `>`: 0b100 gets width 2 and prints as "100", not "0100".
    let width = 2;
    for (let shift = MASK_BITS - 2; shift > 0; shift -= 2) {
      if (this.#value > 1n << BigInt(shift)) {
        width = shift + 2;
        break;
      }
    }
    return digits.padStart(width, "0");
  }

  /** Logs and JSON show the mask as its {@link toString}. */
  toJSON(): string {
    return this.toString();
  }
}

/**
 * Calls `callback` with every non-empty combination of `bits`: all single bits first, then all
 * pairs, and so on, each size in lexicographic order of positions in `bits` (upstream
 * IterateBitMasks). Throws {@link BitMaskRangeError} for a bit outside 0-63.
 */
export function iterateBitMasks(
  bits: readonly number[],
  callback: (mask: BitMask) => void,
): void {
  const iterate = (from: number, accum: number[], size: number): void => {
    if (accum.length === size) {
      callback(BitMask.of(...accum));
      return;
    }
    for (let i = from; i < bits.length; i++) {
      accum.push(bits[i]!);
      iterate(i + 1, accum, size);
      accum.pop();
    }
  };
  for (let size = 1; size <= bits.length; size++) iterate(0, [], size);
}
