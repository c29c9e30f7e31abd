/**
 * @module
 * HPACK (RFC 7541), the header compression of HTTP/2, as the kubelet's gRPC server needs it: a
 * full decoder (static and dynamic tables, table size updates, Huffman-coded strings, every field
 * representation) and an encoder that writes only literals without indexing, so the peer's
 * decoder never has to keep table state for us. Header names and values are octet strings; they
 * are held as strings with one character per octet (gRPC headers are ASCII). What grpc-go takes
 * from golang.org/x/net/http2/hpack.
 */

/** A decoding failure: the connection must end with COMPRESSION_ERROR (RFC 7541 section 2.3.4). */
export class HpackError extends Error {
  override name = "HpackError";
}

/** One header field: name and value. */
export type HeaderField = readonly [name: string, value: string];

/** The static table (RFC 7541 Appendix A); index 1 is the first entry. */
const STATIC: readonly HeaderField[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/**
 * The bit length of each symbol's Huffman code (RFC 7541 Appendix B), octets 0-255 then EOS.
 * The code is canonical: codes of one length are consecutive in symbol order, and each length's
 * first code follows the previous length's last, so the lengths alone define it.
 */
// deno-fmt-ignore
const HUFFMAN_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
  30,
];

const EOS = 256;
const MAX_CODE_LENGTH = 30;

/** The canonical decoding tables: symbols by (length, symbol), and per length its first code. */
const HUFFMAN = (() => {
  const symbols = [...HUFFMAN_LENGTHS.keys()].sort((a, b) =>
    HUFFMAN_LENGTHS[a]! - HUFFMAN_LENGTHS[b]! || a - b
  );
  const count = new Array<number>(MAX_CODE_LENGTH + 1).fill(0);
  for (const len of HUFFMAN_LENGTHS) count[len]!++;
  const first = new Array<number>(MAX_CODE_LENGTH + 1).fill(0);
  const offset = new Array<number>(MAX_CODE_LENGTH + 1).fill(0);
  for (let len = 1, code = 0, at = 0; len <= MAX_CODE_LENGTH; len++) {
    code = (code + count[len - 1]!) * 2;
    first[len] = code;
    offset[len] = at;
    at += count[len]!;
  }
  return { symbols, count, first, offset };
})();

/** The Huffman code of each symbol, for tests: [code, bit length]. */
export function huffmanCode(symbol: number): [number, number] {
  const len = HUFFMAN_LENGTHS[symbol]!;
  const rank = HUFFMAN.symbols.indexOf(symbol) - HUFFMAN.offset[len]!;
  return [HUFFMAN.first[len]! + rank, len];
}

/** Decodes a Huffman-coded string (RFC 7541 section 5.2). */
export function huffmanDecode(input: Uint8Array): string {
  const out: number[] = [];
  let code = 0;
  let len = 0;
  for (const byte of input) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      len++;
      const rank = code - HUFFMAN.first[len]!;
      if (rank >= 0 && rank < HUFFMAN.count[len]!) {
        const symbol = HUFFMAN.symbols[HUFFMAN.offset[len]! + rank]!;
        if (symbol === EOS) throw new HpackError("Huffman string contains EOS");
        out.push(symbol);
        code = 0;
        len = 0;
      } else if (len >= MAX_CODE_LENGTH) {
        throw new HpackError("invalid Huffman code");
      }
    }
  }
  // Padding is the most significant bits of EOS (all ones), shorter than an octet.
  if (len > 7 || code !== 2 ** len - 1) throw new HpackError("invalid Huffman padding");
  return octets(out);
}

/** One character per octet; chunked, since apply() takes a bounded argument list. */
function octets(bytes: ArrayLike<number>): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    s += String.fromCharCode.apply(
      null,
      Array.prototype.slice.call(bytes, i, i + 8192) as number[],
    );
  }
  return s;
}

/** The octets a table entry counts: name, value and 32 (RFC 7541 section 4.1). */
function entrySize([name, value]: HeaderField): number {
  return name.length + value.length + 32;
}

/** What {@link HpackDecoder.decode} gives: the fields, and whether some were dropped. */
export interface DecodedBlock {
  readonly fields: HeaderField[];
  /**
   * The list went over the limit: the fields past it are not in `fields`, though the block was
   * decoded to its end, so the dynamic table still agrees with the peer's.
   */
  readonly truncated: boolean;
}

/** The decoder of one connection's header blocks; it keeps the dynamic table between them. */
export class HpackDecoder {
  /** Newest first. */
  readonly #table: HeaderField[] = [];
  #size = 0;
  /** The table size the peer chose last (a size update), at most {@link #limit}. */
  #max: number;
  /** SETTINGS_HEADER_TABLE_SIZE as we announced it. */
  readonly #limit: number;

  constructor(maxTableSize = 4096) {
    this.#limit = maxTableSize;
    this.#max = maxTableSize;
  }

  /** The dynamic table, newest first, and its size in octets (for tests). */
  get dynamicTable(): { entries: readonly HeaderField[]; size: number } {
    return { entries: this.#table, size: this.#size };
  }

  /**
   * The fields of one complete header block; throws {@link HpackError}. Fields past
   * `maxListSize` octets (counted as table entries are) are decoded but dropped.
   */
  decode(block: Uint8Array, maxListSize = Infinity): DecodedBlock {
    const fields: HeaderField[] = [];
    let listSize = 0;
    let truncated = false;
    const r = { at: 0 };
    while (r.at < block.length) {
      const b = block[r.at]!;
      let field: HeaderField;
      if (b & 0x80) {
        field = this.#entry(readInt(block, r, 7));
      } else if (b & 0x40) {
        field = this.#literal(block, r, 6);
        this.#add(field);
      } else if (b & 0x20) {
        if (fields.length > 0 || truncated) {
          throw new HpackError("dynamic table size update after a header field");
        }
        const size = readInt(block, r, 5);
        if (size > this.#limit) {
          throw new HpackError(
            `dynamic table size update to ${size} over the limit ${this.#limit}`,
          );
        }
        this.#max = size;
        this.#evict(0);
        continue;
      } else {
        // Without indexing (0000) or never indexed (0001): both 4-bit prefixes.
        field = this.#literal(block, r, 4);
      }
      listSize += entrySize(field);
      if (listSize > maxListSize) truncated = true;
      else fields.push(field);
    }
    return { fields, truncated };
  }

  #entry(index: number): HeaderField {
    if (index === 0) throw new HpackError("header field index 0");
    if (index <= STATIC.length) return STATIC[index - 1]!;
    const entry = this.#table[index - STATIC.length - 1];
    if (entry === undefined) throw new HpackError(`header field index ${index} out of range`);
    return entry;
  }

  #literal(block: Uint8Array, r: { at: number }, prefix: number): HeaderField {
    const index = readInt(block, r, prefix);
    const name = index === 0 ? readString(block, r) : this.#entry(index)[0];
    return [name, readString(block, r)];
  }

  #add(field: HeaderField): void {
    const size = entrySize(field);
    // An entry larger than the table empties it and is not added (RFC 7541 section 4.4).
    this.#evict(size);
    if (size <= this.#max) {
      this.#table.unshift(field);
      this.#size += size;
    }
  }

  /** Evicts the oldest entries until `room` more octets fit. */
  #evict(room: number): void {
    while (this.#table.length > 0 && this.#size + room > this.#max) {
      this.#size -= entrySize(this.#table.pop()!);
    }
  }
}

/** Reads an integer with an N-bit prefix (RFC 7541 section 5.1); at most 2^31 - 1. */
function readInt(block: Uint8Array, r: { at: number }, prefix: number): number {
  const mask = (1 << prefix) - 1;
  let value = block[r.at++]! & mask;
  if (value < mask) return value;
  for (let shift = 0;; shift += 7) {
    if (r.at >= block.length) throw new HpackError("truncated integer");
    const b = block[r.at++]!;
    value += (b & 0x7f) * 2 ** shift;
    if (value > 0x7fffffff) throw new HpackError("integer overflow");
    if ((b & 0x80) === 0) return value;
  }
}

function readString(block: Uint8Array, r: { at: number }): string {
  if (r.at >= block.length) throw new HpackError("truncated string");
  const huffman = (block[r.at]! & 0x80) !== 0;
  const length = readInt(block, r, 7);
  if (r.at + length > block.length) throw new HpackError("truncated string");
  const raw = block.subarray(r.at, r.at + length);
  r.at += length;
  return huffman ? huffmanDecode(raw) : octets(raw);
}

/**
 * A header block for `fields`: `:status: 200` from the static table, every other field a
 * literal without indexing (a static name index where one exists), strings not Huffman-coded.
 * Throws for a character that is not an octet.
 */
export function encodeHeaderBlock(fields: readonly HeaderField[]): Uint8Array<ArrayBuffer> {
  const out: number[] = [];
  for (const [name, value] of fields) {
    if (name === ":status" && value === "200") {
      out.push(0x88);
      continue;
    }
    const index = STATIC_NAMES.get(name) ?? 0;
    writeInt(out, 0x00, 4, index);
    if (index === 0) writeString(out, name);
    writeString(out, value);
  }
  return Uint8Array.from(out);
}

const STATIC_NAMES = new Map<string, number>();
STATIC.forEach(([name], i) => {
  if (!STATIC_NAMES.has(name)) STATIC_NAMES.set(name, i + 1);
});

function writeInt(out: number[], bits: number, prefix: number, value: number): void {
  const mask = (1 << prefix) - 1;
  if (value < mask) {
    out.push(bits | value);
    return;
  }
  out.push(bits | mask);
  value -= mask;
  while (value >= 0x80) {
    out.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

function writeString(out: number[], s: string): void {
  writeInt(out, 0x00, 7, s.length);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) throw new RangeError(`header text ${JSON.stringify(s)} is not octets`);
    out.push(c);
  }
}
